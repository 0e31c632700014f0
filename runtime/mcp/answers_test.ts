/**
 * The small readings of an MCP connection that are rules of their own: a
 * race with a stopping signal never leaves the raced promise's failure
 * unhandled (it would end the process), and an error's code is said once.
 */

import assert from "node:assert/strict";
import { McpError } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { couldNotConnect, mcpErrorText, raced } from "./answers.ts";

Deno.test("raced() with a signal already aborted rejects with its reason, and a later failure of the promise goes nowhere", async () => {
  const stop = new AbortController();
  stop.abort(new Error("the worker is stopping"));
  let fail!: (e: Error) => void;
  const connecting = new Promise<never>((_, reject) => fail = reject);
  await assert.rejects(raced(connecting, stop.signal), /the worker is stopping/);
  // Unhandled, this rejection fails the test (and ended a fuzzer's process once).
  fail(new Error("connection refused, after nobody waited"));
  await new Promise((r) => setTimeout(r, 0));
});

Deno.test("raced() gives the promise's own answer or failure while the signal holds, and the reason once it aborts", async () => {
  const signal = new AbortController().signal;
  assert.equal(await raced(Promise.resolve(7), signal), 7);
  await assert.rejects(raced(Promise.reject(new Error("refused")), signal), /refused/);
  const stop = new AbortController();
  const slow = raced(new Promise(() => {}), stop.signal);
  stop.abort(new Error("timed out"));
  await assert.rejects(slow, /timed out/);
});

Deno.test("an MCP error's text says its code once, and only a connection never made counts as nothing sent", () => {
  const twice = new McpError(-32603, "MCP error -32603: the tool failed");
  assert.equal(mcpErrorText(twice), "MCP error -32603: the tool failed");
  assert.ok(
    couldNotConnect(new Error("fetch failed", { cause: new Error("Connection refused (os error 111)") })),
  );
  assert.ok(!couldNotConnect(new Error("connection reset by peer")));
});
