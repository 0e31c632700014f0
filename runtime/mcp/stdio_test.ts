import assert from "node:assert/strict";
import type { TopLevel } from "./limit.ts";
import { McpStdioTransport, MessageLines, StdioClosedError } from "./stdio.ts";
import { until } from "../../harness/procs.ts";

const encode = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array) => new TextDecoder().decode(b);

/** Lines and refusals `MessageLines` gives for `text` pushed in chunks of `size` bytes. */
function split(text: string, limitBytes: number, size: number) {
  const lines: string[] = [];
  const refused: [number, TopLevel][] = [];
  let heldMax = 0;
  const splitter = new MessageLines({
    limitBytes,
    onLine: (l) => lines.push(decode(l)),
    onOversized: (bytes, top) => refused.push([bytes, top]),
  });
  const bytes = encode(text);
  for (let i = 0; i < bytes.length; i += size) {
    splitter.push(bytes.subarray(i, i + size));
    heldMax = Math.max(heldMax, splitter.heldBytes);
  }
  return { lines, refused, heldMax };
}

Deno.test("MessageLines gives each line whole however the stream is cut, and drops CR before the newline", async (t) => {
  const text = '{"a":1}\n{"b":"two"}\r\n\n{"c":[3]}\n';
  for (const size of [1, 2, 3, 7, 64]) {
    await t.step(`chunks of ${size} bytes`, () => {
      const { lines, refused } = split(text, 100, size);
      assert.deepEqual(lines, ['{"a":1}', '{"b":"two"}', '{"c":[3]}']);
      assert.deepEqual(refused, []);
    });
  }
});

Deno.test("MessageLines refuses a line past its limit by its size, keeps none of it, and goes on with the next line", async (t) => {
  const big = JSON.stringify({
    result: { content: [{ type: "text", text: "x".repeat(5_000) }] },
    jsonrpc: "2.0",
    id: 9,
  });
  const text = `{"jsonrpc":"2.0","id":1,"result":{}}\n${big}\n{"jsonrpc":"2.0","id":2,"result":{}}\n`;
  for (const size of [1, 100, 4_096, 1 << 20]) {
    await t.step(`chunks of ${size} bytes`, () => {
      const { lines, refused, heldMax } = split(text, 1_000, size);
      assert.deepEqual(lines.map((l) => JSON.parse(l).id), [1, 2]);
      assert.deepEqual(refused, [[big.length, { id: 9, response: true, method: false }]]);
      assert.ok(heldMax <= 1_000, `held ${heldMax} bytes of a line, past the limit of 1000`);
    });
  }
  await t.step("a line of exactly the limit is kept; one byte more is not", () => {
    const exact = `"${"y".repeat(998)}"`;
    assert.equal(split(`${exact}\n`, 1_000, 64).lines.length, 1);
    assert.equal(split(`${exact} \n`, 1_000, 64).refused[0][0], 1_001);
  });
});

/** A transport to `deno eval code`, with what it received and how often it closed. */
function evalServer(code: string, limitBytes = 1_000) {
  const received: unknown[] = [];
  const errors: Error[] = [];
  let closed = 0;
  const transport = new McpStdioTransport({
    command: Deno.execPath(),
    args: ["eval", code],
    stderr: "ignore",
    limitBytes,
  });
  transport.onmessage = (m) => received.push(m);
  transport.onerror = (e) => errors.push(e);
  transport.onclose = () => closed++;
  return { transport, received, errors, closed: () => closed };
}

const ECHO = "for await (const chunk of Deno.stdin.readable) await Deno.stdout.write(chunk);";

Deno.test("McpStdioTransport speaks one JSON-RPC message a line, and close() ends a server that exits when its stdin ends", async () => {
  const s = evalServer(ECHO);
  await s.transport.start();
  await s.transport.send({ jsonrpc: "2.0", id: 1, method: "ping" });
  await s.transport.send({ jsonrpc: "2.0", method: "notifications/initialized" });
  await until(() => Promise.resolve(s.received.length >= 2), "the server's two messages", 60_000, 10);
  assert.deepEqual(s.received, [
    { jsonrpc: "2.0", id: 1, method: "ping" },
    { jsonrpc: "2.0", method: "notifications/initialized" },
  ]);
  await s.transport.close();
  await s.transport.close();
  assert.equal(s.closed(), 1, "onclose is called once");
  await assert.rejects(s.transport.send({ jsonrpc: "2.0", id: 2, method: "ping" }), StdioClosedError);
});

Deno.test("McpStdioTransport refuses a message past its limit and answers its request in the server's place; the next goes on", async () => {
  const s = evalServer(ECHO);
  await s.transport.start();
  const big = { jsonrpc: "2.0" as const, id: 7, result: { text: "x".repeat(5_000) } };
  await s.transport.send(big);
  await s.transport.send({ jsonrpc: "2.0", id: 8, result: {} });
  await until(() => Promise.resolve(s.received.length >= 2), "the server's two messages", 60_000, 10);
  const [refusal, next] = s.received as { id: number; error?: { code: number; message: string } }[];
  assert.equal(refusal.id, 7);
  assert.match(
    refusal.error?.message ?? "",
    /^the server's answer was 5,04\d bytes, over the limit of 1,000 bytes/,
  );
  assert.deepEqual(next, { jsonrpc: "2.0", id: 8, result: {} });
  await s.transport.close();
});

Deno.test("McpStdioTransport: a server that exits is a closed connection, and a request after it was not written (StdioClosedError)", async () => {
  const s = evalServer("Deno.exit(3)");
  await s.transport.start();
  await until(() => Promise.resolve(s.closed() > 0), "the connection to close", 60_000, 10);
  assert.equal(s.closed(), 1);
  await assert.rejects(s.transport.send({ jsonrpc: "2.0", id: 1, method: "ping" }), StdioClosedError);
  await s.transport.close();
});

Deno.test("McpStdioTransport: close() ends a server that ignores its stdin, with SIGTERM after the grace", async () => {
  const s = evalServer("await new Promise((r) => setTimeout(r, 600_000));");
  await s.transport.start();
  await s.transport.close();
  assert.equal(s.closed(), 1);
});
