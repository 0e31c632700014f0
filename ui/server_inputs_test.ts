/**
 * What the page takes from a request (issue 34, items 6 and 11), over real
 * HTTP: every path parameter, query filter and body id is checked by the
 * client's one rule (runtime/base/ids.ts) and refused with 400 and its code, never
 * a 500 or the database's text; a body is read as strict UTF-8 up to
 * BODY_BYTES_MAX bytes, and reading stops past it (413).
 */

import assert from "node:assert/strict";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { bothStoresTest } from "../tests/_pglite.ts";
import { BODY_BYTES_MAX, createUiApp, serveUi } from "./server.ts";
import { testClient } from "../tests/_pglite.ts";

const model = { describe: "none", decide: () => Promise.resolve({ kind: "done" as const, text: "ok" }) };
const chat = defineAgent({ name: "chat", tools: [], conversation: { idleMs: 600_000 }, model });
const plain = defineAgent({ name: "plain", tools: [], model });

/** The code a refused value of each path parameter answers with; a new parameter must be added here. */
const PARAM_CODES: Record<string, string> = { id: "BAD_RUN_ID", key: "ID_INVALID" };
/** Routes that never look a parameter up: the page itself (its script asks the API) and its static files. */
const NOT_LOOKED_UP = new Set(["GET /runs/:id", "GET /evals/:id", "GET /static/:file"]);

/** Values the database refuses or changes, or that no id holds, as they appear in an address. */
const HOSTILE_IN_PATH: [string, string][] = [
  ["a NUL", "a%00b"],
  ["an escape", "a%1Bb"],
  ["an encoded lone surrogate (not UTF-8)", "a%ED%A0%80b"],
  ["a byte that is not UTF-8", "a%FFb"],
  ["U+FFFD", "a%EF%BF%BDb"],
];

/** A query every route accepts (the one-value route needs a field), so the refusal is the parameter's. */
const ANY_QUERY = "?field=input";
/** A body every action route accepts, so the refusal is the parameter's. */
const ANY_ACTION = JSON.stringify({ text: "hi", messageId: "m-1", action: "retry", reason: "why" });

async function withPage(
  store: Client["store"],
  fn: (url: string, client: Client) => Promise<void>,
): Promise<void> {
  const client = new Client(store);
  const ui = await serveUi({ client, port: 0 });
  try {
    await fn(ui.url, client);
  } finally {
    await ui.close();
  }
}

bothStoresTest(
  "every route with a path parameter answers 400 with the parameter's code for a NUL, a control, bytes that are not UTF-8 or U+FFFD, never 500",
  async (store, t) => {
    await withPage(store, async (url) => {
      const app = await createUiApp({ client: new Client(store) });
      // Every route the router has, so a route added later is covered without a line here.
      const routes = app.routes.filter((r) => r.method !== "ALL" && r.path.includes("/:"));
      assert.ok(routes.length >= 10, `the router's routes: ${routes.map((r) => r.path)}`);
      for (const route of routes) {
        const params = [...route.path.matchAll(/:(\w+)/g)].map((m) => m[1]);
        for (const [what, hostile] of HOSTILE_IN_PATH) {
          await t.step(`${route.method} ${route.path} with ${what}`, async () => {
            const path = route.path.replace(
              /:(\w+)/g,
              (_, name) => name === "key" ? `${hostile}:0` : hostile,
            );
            const res = await fetch(`${url}${path}${ANY_QUERY}`, {
              method: route.method,
              headers: { "content-type": "application/json" },
              body: route.method === "POST" ? ANY_ACTION : undefined,
            });
            const text = await res.text();
            assert.ok(res.status < 500, `${res.status} ${text}`);
            if (NOT_LOOKED_UP.has(`${route.method} ${route.path}`)) return;
            const codes = params.map((p) => PARAM_CODES[p]);
            assert.ok(codes.every(Boolean), `a refusal code for each of ${params}: add it to PARAM_CODES`);
            assert.equal(res.status, 400, text);
            assert.ok(codes.includes(JSON.parse(text).code), text);
          });
        }
      }
    });
  },
);

bothStoresTest(
  "the runs list refuses a filter with a NUL, a control or U+FFFD with 400 FILTER_INVALID",
  async (store, t) => {
    await withPage(store, async (url) => {
      // Bytes that are not UTF-8 stay as their percent text (the router decodes what it can): a filter
      // that matches nothing, as distinct as the bytes were. What decodes is checked.
      const decoded = HOSTILE_IN_PATH.filter(([what]) => !what.includes("not UTF-8"));
      for (const name of ["agent", "search"]) {
        for (const [what, hostile] of decoded) {
          await t.step(`${name} with ${what}`, async () => {
            const res = await fetch(`${url}/api/runs?${name}=${hostile}`);
            const body = await res.json();
            assert.deepEqual([res.status, body.code], [400, "FILTER_INVALID"], body.message);
          });
        }
      }
    });
  },
);

bothStoresTest(
  "a message id the database would change is refused with 400, so a second different id is never taken for the first",
  async (store) => {
    await withPage(store, async (url, client) => {
      await client.start(chat, { runId: "talk", input: "hello" });
      const send = (body: BodyInit) =>
        fetch(`${url}/api/runs/talk/messages`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
        });
      // Both would be stored as "id-\ufffd": the second came back a duplicate and its text was dropped.
      for (const messageId of ["id-\ud800", "id-\udbff", "id\u0000x", "id-\ufffd"]) {
        const res = await send(JSON.stringify({ text: `text of ${JSON.stringify(messageId)}`, messageId }));
        const body = await res.json();
        assert.deepEqual([res.status, body.code], [400, "MESSAGE_INVALID"], body.message);
        assert.match(body.message, /^The message id "id.*" is refused: it holds /);
      }
      // An id in bytes that are not UTF-8: read with replacement, 0xff and 0xfe would both be "id-\ufffd".
      const bytes = (b: number) =>
        new Uint8Array([...new TextEncoder().encode('{"text":"hi","messageId":"id-'), b, 0x22, 0x7d]);
      for (const b of [0xff, 0xfe]) {
        const res = await send(bytes(b));
        const body = await res.json();
        assert.deepEqual([res.status, body.code], [400, "UI_BAD_REQUEST"], body.message);
        assert.match(body.message, /^The body is not UTF-8 text/);
      }
      assert.deepEqual(
        (await client.conversations.answers("talk")).map((m) => m.seq),
        [0],
        "no message was stored",
      );
      const ok = await send(JSON.stringify({ text: "hi", messageId: "id-\u{1F600}" }));
      assert.deepEqual(await ok.json(), {
        runId: "talk",
        seq: 1,
        messageId: "id-\u{1F600}",
        duplicate: false,
      });
    });
  },
);

bothStoresTest(
  "a cancel's reason with a NUL is written out (200), not a database error",
  async (store) => {
    await withPage(store, async (url, client) => {
      await client.start(plain, { runId: "why-1", input: "x" });
      const res = await fetch(`${url}/api/runs/why-1/cancel`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ reason: "a\u0000b" }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.equal((await res.json()).error, "cancelled by ui: a\\u0000b");
    });
  },
);

Deno.test("the page refuses an actor (--by) the identifier rule refuses, before it serves", async () => {
  const client = await testClient();
  try {
    for (const actor of ["ui\u0000", "ui\ud800", ""]) {
      await assert.rejects(createUiApp({ client, actor }), { code: "ID_INVALID" });
    }
  } finally {
    await client.close();
  }
});

/**
 * Sends `head` and then up to `bytes` bytes of body (`chunked`: as chunks of
 * a body that never ends) on a raw connection, and returns the response's
 * status and JSON body: what the page answers while the body is still coming.
 */
async function postRaw(
  port: number,
  opts: { head: string; bytes: number; chunked: boolean },
): Promise<{ status: number; body: { code: string; message: string } }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const encoder = new TextEncoder();
  // A safety net, not a measure: a page that waits for the whole body never answers.
  let gaveUp = false;
  const timer = setTimeout(() => {
    gaveUp = true;
    conn.close();
  }, 60_000);
  const writeAll = async (data: Uint8Array) => {
    // Bounded: each write sends at least one byte.
    for (let at = 0; at < data.length;) at += await conn.write(data.subarray(at));
  };
  const writing = (async () => {
    await writeAll(encoder.encode(opts.head));
    const piece = new Uint8Array(64 * 1024).fill(0x20);
    // Bounded by `bytes`.
    for (let sent = 0; sent < opts.bytes; sent += piece.byteLength) {
      if (opts.chunked) await writeAll(encoder.encode(`${piece.byteLength.toString(16)}\r\n`));
      await writeAll(piece);
      if (opts.chunked) await writeAll(encoder.encode("\r\n"));
    }
  })().then(() => "sent" as const, (err: Error) => `stopped: ${err.name}`);
  try {
    let raw = new Uint8Array(0);
    const buf = new Uint8Array(16 * 1024);
    // Bounded: each read adds bytes or ends the loop; the timer closes the connection.
    for (;;) {
      const text = new TextDecoder().decode(raw);
      const end = text.indexOf("\r\n\r\n");
      const length = /content-length: (\d+)/i.exec(text)?.[1];
      if (end >= 0 && length !== undefined && raw.length >= end + 4 + Number(length)) {
        return {
          status: Number(text.slice(9, 12)),
          body: JSON.parse(text.slice(end + 4, end + 4 + Number(length))),
        };
      }
      const n = await conn.read(buf).catch((err) => {
        throw gaveUp
          ? new Error("no answer in 60 s: the page waits for the whole body", { cause: err })
          : err;
      });
      if (n === null) throw new Error(`the page closed the connection without an answer: ${text}`);
      raw = new Uint8Array([...raw, ...buf.subarray(0, n)]);
    }
  } finally {
    clearTimeout(timer);
    if (!gaveUp) conn.close(); // else closed by the safety net, and the read above says so
    await writing;
  }
}

Deno.test("the page stops reading a body past BODY_BYTES_MAX and answers 413, with or without a declared length", async (t) => {
  const client = await testClient();
  const ui = await serveUi({ client, port: 0 });
  try {
    await client.start(chat, { runId: "big", input: "hello" });
    const path = "/api/runs/big/messages";
    await t.step("a declared length over the limit: refused before a byte is read", async () => {
      const out = await postRaw(ui.port, {
        head: `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
          `content-length: 1000000000\r\n\r\n`,
        bytes: 64 * 1024,
        chunked: false,
      });
      assert.equal(out.status, 413);
      assert.equal(out.body.code, "UI_BODY_TOO_LARGE");
      assert.match(
        out.body.message,
        new RegExp(`^A request body is at most ${BODY_BYTES_MAX} bytes: this one is 1000000000`),
      );
    });
    await t.step("a chunked body that never ends: refused once it goes past the limit", async () => {
      const out = await postRaw(ui.port, {
        head: `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
          `transfer-encoding: chunked\r\n\r\n`,
        bytes: BODY_BYTES_MAX + 1024 * 1024,
        chunked: true,
      });
      assert.equal(out.status, 413);
      assert.equal(out.body.code, "UI_BODY_TOO_LARGE");
      const read = Number(/\((\d+) bytes read before the page stopped reading\)/.exec(out.body.message)?.[1]);
      assert.ok(read > BODY_BYTES_MAX && read <= BODY_BYTES_MAX + 1024 * 1024, out.body.message);
    });
    await t.step("the longest message, every character a six-byte escape, still fits", async () => {
      const text = "\u0001".repeat(1_000_000);
      const body = JSON.stringify({ text, messageId: "long-1" });
      assert.ok(body.length > 6_000_000 && body.length <= BODY_BYTES_MAX, `${body.length}`);
      const res = await fetch(`${ui.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
      assert.deepEqual(await res.json(), { runId: "big", seq: 1, messageId: "long-1", duplicate: false });
    });
  } finally {
    await ui.close();
    await client.close();
  }
});
