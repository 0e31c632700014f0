import assert from "node:assert/strict";
import { z } from "npm:zod@4.6.7";
import { defineAgent } from "../agent/agent.ts";
import { ManualClock } from "../base/clock.ts";
import { McpCalls } from "./tool_calls.ts";
import { IDEMPOTENCY_KEY_META } from "./run_ids.ts";
import { testClient } from "../../tests/_pglite.ts";

const model = { describe: "none", decide: () => Promise.resolve({ kind: "done" as const, text: "ok" }) };
const notes = defineAgent({ name: "notes", instructions: "Write notes.", tools: [], model });
const typed = defineAgent({
  name: "typed",
  tools: [],
  model,
  input: z.strictObject({ city: z.string(), days: z.number().int() }),
});

// One in-memory database for the file (each takes seconds to start): each test counts only its own runs.
const clock = new ManualClock();
const client = await testClient({ clock });
Deno.test.afterAll(() => client.close());

/** The server's calls on a manual clock, no worker (runs stay pending), and how many runs it started. */
async function fixture(opts: { dedupeWindowMs?: number } = {}) {
  const before = (await client.reads.list({})).total;
  const calls = new McpCalls({ client, agents: [notes, typed], answerWaitMs: 0, ...opts });
  return { clock, client, calls, runs: async () => (await client.reads.list({})).total - before };
}

Deno.test("the tools are each agent's, with its input schema or { goal }, then the run tools", async () => {
  const f = await fixture();
  const tools = f.calls.tools();
  assert.deepEqual(tools.map((t) => t.name), [
    "notes",
    "typed",
    "get_run",
    "send_message",
    "cancel_run",
    "approve_call",
    "deny_call",
  ]);
  assert.deepEqual(tools[0].inputSchema, {
    type: "object",
    properties: { goal: { type: "string", minLength: 1, description: "What the agent is to do, in words" } },
    required: ["goal"],
  });
  assert.deepEqual(Object.keys(tools[1].inputSchema.properties as object), ["city", "days"]);
  assert.equal(tools[1].inputSchema.additionalProperties, false);
  assert.equal(tools[0].execution?.taskSupport, "optional");
});

Deno.test("an agent named as a run tool, or two of one name, are refused at start", async () => {
  const f = await fixture();
  const clash = defineAgent({ name: "get_run", tools: [], model });
  assert.throws(() => new McpCalls({ client: f.client, agents: [clash] }), /MCP_SERVER_INVALID|own tool/);
  assert.throws(
    () => new McpCalls({ client: f.client, agents: [notes, notes] }),
    /two agents have that name/,
  );
  assert.throws(() => new McpCalls({ client: f.client, agents: [notes], answerWaitMs: -1 }), /answerWaitMs/);
  assert.throws(() => new McpCalls({ client: f.client, agents: [notes], waitMaxMs: 0 }), /waitMaxMs/);
});

Deno.test("one idempotency key is one run, however often it is sent; a key reused for other arguments is refused", async () => {
  const f = await fixture();
  const meta = { [IDEMPOTENCY_KEY_META]: "order-7" };
  const first = await f.calls.call("notes", { goal: "water the plants" }, meta, { client: "a" });
  const again = await f.calls.call("notes", { goal: "water the plants" }, { idempotencyKey: "order-7" }, {
    client: "b",
  });
  assert.equal(first.structuredContent.runId, again.structuredContent.runId);
  assert.equal(first.structuredContent.started, true);
  assert.equal(again.structuredContent.started, false);
  assert.equal(await f.runs(), 1);
  const reused = await f.calls.call("notes", { goal: "something else" }, meta, { client: "a" });
  assert.equal(reused.isError, true);
  assert.equal(reused.structuredContent.code, "IDEMPOTENCY_KEY_REUSED");
  assert.equal(await f.runs(), 1);
});

Deno.test("without a key, the same client, tool and arguments within the window are one run, and a new run after it", async () => {
  const f = await fixture({ dedupeWindowMs: 60_000 });
  const call = () => f.calls.call("typed", { days: 3, city: "Oslo" }, undefined, { client: "claude-ai" });
  const first = (await call()).structuredContent.runId;
  await f.clock.advance(59_000);
  assert.equal(
    (await call()).structuredContent.runId,
    first,
    "59 s later: the same run, across a window's edge or not",
  );
  const other = await f.calls.call("typed", { days: 3, city: "Oslo" }, undefined, { client: "cursor" });
  assert.notEqual(other.structuredContent.runId, first, "another client's call is its own run");
  await f.clock.advance(61_000);
  const later = (await call()).structuredContent.runId;
  assert.notEqual(later, first, "past the window: a new run");
  assert.equal(await f.runs(), 3);
});

Deno.test("a refusal is a tool result with isError and the client's code, and starts nothing", async (t) => {
  const f = await fixture();
  const cases: [string, Record<string, unknown>, string][] = [
    ["notes", {}, "INPUT_INVALID"],
    ["typed", { city: "Oslo" }, "INPUT_INVALID"],
    ["get_run", { runId: "nope" }, "RUN_NOT_FOUND"],
    ["get_run", { runId: "bad id!" }, "BAD_RUN_ID"],
    ["get_run", {}, "ARGS_INVALID"],
    ["get_run", { runId: "x", waitMs: 99_000_000 }, "ARGS_INVALID"],
    ["cancel_run", { runId: "nope", extra: 1 }, "ARGS_INVALID"],
    ["approve_call", { key: "nope:0" }, "APPROVAL_NOT_FOUND"],
    ["send_message", { runId: "nope", message: "hi" }, "RUN_NOT_FOUND"],
  ];
  for (const [tool, args, code] of cases) {
    await t.step(`${tool} ${JSON.stringify(args)}: ${code}`, async () => {
      const out = await f.calls.call(tool, args, undefined, { client: "a" });
      assert.equal(out.isError, true, JSON.stringify(out));
      assert.equal(out.structuredContent.code, code, JSON.stringify(out));
    });
  }
  assert.equal(await f.runs(), 0);
});

Deno.test("a run not answered within the bound is answered with its id and status; cancel_run cancels it", async () => {
  const f = await fixture();
  const started = await f.calls.call("notes", { goal: "hi" }, undefined, { client: "a" });
  const runId = started.structuredContent.runId as string;
  assert.equal(started.structuredContent.status, "pending");
  assert.match(started.content[0].text, /is pending and has not answered yet: call get_run/);
  const got = await f.calls.call("get_run", { runId }, undefined, { client: "a" });
  assert.equal(got.structuredContent.status, "pending");
  const cancelled = await f.calls.call("cancel_run", { runId, reason: "test" }, undefined, { client: "a" });
  assert.equal(cancelled.isError, true);
  assert.equal(cancelled.structuredContent.status, "cancelled");
  assert.match(cancelled.structuredContent.error as string, /cancelled by mcp:a: test/);
});
