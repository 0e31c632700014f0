import assert from "node:assert/strict";
import type { TopLevel } from "./mcp_limit.ts";
import { MessageLines } from "./mcp_stdio.ts";

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
