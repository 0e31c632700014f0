import assert from "node:assert/strict";
import {
  boundedResponse,
  type RefusedMessage,
  TOO_LARGE_CODE,
  TOO_LARGE_DATA,
  type TopLevel,
  TopLevelScan,
} from "./limit.ts";

const encode = (s: string) => new TextEncoder().encode(s);

/** A response whose body comes in chunks of `size` bytes, counting how many were read. */
function chunked(text: string, size: number, contentType: string, status = 200) {
  const bytes = encode(text);
  let at = 0;
  const read = { bytes: 0, cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (at >= bytes.length) return c.close();
      const part = bytes.slice(at, at + size);
      at += size;
      read.bytes += part.length;
      c.enqueue(part);
    },
    cancel() {
      read.cancelled = true;
    },
  });
  return { response: new Response(body, { status, headers: { "content-type": contentType } }), read };
}

const answer = (id: number, text: string) =>
  JSON.stringify({ result: { content: [{ type: "text", text }] }, jsonrpc: "2.0", id });

Deno.test("a JSON answer within the limit is passed on as it came; past it, reading stops and the request is answered with a refusal", async () => {
  const small = chunked(answer(3, "ok"), 16, "application/json");
  const kept = await boundedResponse(small.response, { limitBytes: 1_000, requestId: 3 });
  assert.equal(await kept.text(), answer(3, "ok"));

  const refused: RefusedMessage[] = [];
  const big = chunked(answer(4, "x".repeat(50_000)), 1_000, "application/json");
  const bounded = await boundedResponse(big.response, {
    limitBytes: 10_000,
    requestId: 4,
    onRefused: (r) => refused.push(r),
  });
  assert.ok(big.read.cancelled, "the rest of the body is not read");
  assert.ok(big.read.bytes <= 11_000, `read ${big.read.bytes} bytes of a 50 KB body with a 10 KB limit`);
  const body = await bounded.json();
  assert.equal(body.id, 4);
  assert.equal(body.error.code, TOO_LARGE_CODE);
  assert.deepEqual(body.error.data[TOO_LARGE_DATA], { bytes: 11_000, limitBytes: 10_000, whole: false });
  assert.match(
    body.error.message,
    /^the server's answer was more than 10,000 bytes, over the limit of 10,000 bytes/,
  );
  assert.deepEqual(refused, [{ bytes: 11_000, limitBytes: 10_000, whole: false, id: 4 }]);
});

Deno.test("an event stream is passed on event by event; an event past the limit is dropped as it arrives and its request answered with a refusal", async (t) => {
  const note = `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n`;
  const big = `event: message\ndata: ${answer(7, "x".repeat(20_000))}\n\n`;
  const after =
    `event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\r\n\r\n`;
  for (const size of [1, 97, 4_096]) {
    await t.step(`chunks of ${size} bytes`, async () => {
      const refused: RefusedMessage[] = [];
      const stream = chunked(note + big + after, size, "text/event-stream");
      const bounded = await boundedResponse(stream.response, {
        limitBytes: 5_000,
        onRefused: (r) => refused.push(r),
      });
      const events = (await bounded.text()).split(/\r?\n\r?\n/).filter((e) => e !== "");
      assert.equal(events.length, 3);
      assert.equal(events[0], note.trimEnd());
      const refusal = JSON.parse(events[1].replace(/^event: message\ndata: /, ""));
      assert.deepEqual([refusal.id, refusal.error.code], [7, TOO_LARGE_CODE]);
      assert.deepEqual(refusal.error.data[TOO_LARGE_DATA], {
        bytes: big.length,
        limitBytes: 5_000,
        whole: true,
      });
      assert.equal(events[2], after.trimEnd());
      assert.deepEqual(refused, [{ bytes: big.length, limitBytes: 5_000, whole: true, id: 7 }]);
    });
  }
  await t.step("a notification past the limit is dropped, and nothing is answered in its place", async () => {
    const loud = `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"data":"${
      "y".repeat(20_000)
    }"}}\n\n`;
    const refused: RefusedMessage[] = [];
    const stream = chunked(note + loud + after, 512, "text/event-stream");
    const bounded = await boundedResponse(stream.response, {
      limitBytes: 5_000,
      onRefused: (r) => refused.push(r),
    });
    const events = (await bounded.text()).split(/\r?\n\r?\n/).filter((e) => e !== "");
    assert.deepEqual(events, [note.trimEnd(), after.trimEnd()]);
    assert.deepEqual(refused, [{ bytes: loud.length, limitBytes: 5_000, whole: true }]);
  });
});

Deno.test("an error answer's text is cut at 16 KiB, so a huge error page is not read whole", async () => {
  const page = chunked("e".repeat(1_000_000), 4_096, "text/html", 502);
  const bounded = await boundedResponse(page.response, { limitBytes: 10 * 1024 * 1024, requestId: 1 });
  assert.equal(bounded.status, 502);
  assert.equal((await bounded.text()).length, 16 * 1024);
  assert.ok(page.read.cancelled && page.read.bytes < 30_000, `read ${page.read.bytes} bytes`);
});

Deno.test("TopLevelScan reads the top-level id wherever it is, never an id nested in the result", async (t) => {
  const filler = "z".repeat(3_000);
  const cases: [string, unknown, TopLevel][] = [
    ["id last (the SDK's order)", { result: { id: 5, text: filler }, jsonrpc: "2.0", id: 12 }, {
      id: 12,
      response: true,
      method: false,
    }],
    ["id first", { jsonrpc: "2.0", id: "req-7", result: { items: [{ id: 1 }, filler] } }, {
      id: "req-7",
      response: true,
      method: false,
    }],
    ["an error answer", { jsonrpc: "2.0", error: { code: 1, message: filler, data: { id: 3 } }, id: 4 }, {
      id: 4,
      response: true,
      method: false,
    }],
    ["quotes, backslashes and braces in strings", {
      result: { text: `a "quoted" \\ {not: 1} "id": 99 ${filler}`, "id\\": 8 },
      id: 21,
    }, { id: 21, response: true, method: false }],
    ["a notification of the server's", {
      jsonrpc: "2.0",
      method: "notifications/message",
      params: { filler },
    }, {
      response: false,
      method: true,
    }],
    ["a request of the server's", {
      jsonrpc: "2.0",
      id: 3,
      method: "sampling/createMessage",
      params: { filler },
    }, {
      id: 3,
      response: false,
      method: true,
    }],
    ["an id that is no request id (an object)", { result: filler, id: { n: 1 } }, {
      response: true,
      method: false,
    }],
  ];
  for (const [what, value, expected] of cases) {
    await t.step(what, () => {
      const bytes = encode(JSON.stringify(value));
      for (const size of [1, 5, bytes.length]) {
        const scan = new TopLevelScan();
        for (let i = 0; i < bytes.length; i += size) scan.feed(bytes.subarray(i, i + size));
        assert.deepEqual(scan.result(), expected, `chunks of ${size}`);
      }
    });
  }
  await t.step("a line that is not JSON has no id", () => {
    const scan = new TopLevelScan();
    scan.feed(encode(`not json at all ${filler}`));
    assert.deepEqual(scan.result(), { response: false, method: false });
  });
});
