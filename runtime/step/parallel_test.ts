import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { type Client } from "../client/client.ts";
import { ToolError } from "../base/errors.ts";
import { defineTool, type Json } from "../agent/tools.ts";
import { scripted } from "../testdata/scripted.ts";
import { testClient } from "../../tests/_pglite.ts";

// Steps with several calls, on the embedded database, through the client as a user drives it.

const client: Client = await testClient();

/** A remote that records every request it receives, by key, and what it made. */
function remote() {
  const requests: { key: string; text: string }[] = [];
  const made = new Map<string, Json>();
  const tool = (name: string, extra: { approval?: boolean } = {}) =>
    defineTool({
      name,
      description: `Writes a note (${name}).`,
      args: z.strictObject({ text: z.string() }),
      run: (args: { text: string }, ctx) => {
        requests.push({ key: ctx.idempotencyKey, text: args.text });
        const first = !made.has(ctx.idempotencyKey);
        if (first) made.set(ctx.idempotencyKey, { wrote: args.text });
        return Promise.resolve({
          result: made.get(ctx.idempotencyKey)!,
          remote: first ? "created" as const : "already_done" as const,
        });
      },
      ...extra,
    });
  return { requests, made, tool };
}

const call = (name: string, text: string) => ({ name, args: { text } });

async function runToEnd(
  agent: ReturnType<typeof defineAgent>,
  runId: string,
  budget?: Record<string, number>,
) {
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId, input: "Write the notes.", budget });
    const end = await client.wait(runId, { timeoutMs: 30_000, pollMs: 10 });
    return { end, record: await client.reads.inspect(runId) };
  } finally {
    await worker.stop();
  }
}

Deno.test("three calls of one step run at once, bounded by toolConcurrency, each under its own key", async () => {
  let inFlight = 0;
  let most = 0;
  const started: string[] = [];
  const slow = defineTool({
    name: "slow_note",
    description: "Writes a note slowly.",
    args: z.strictObject({ text: z.string() }),
    run: async (args, ctx) => {
      started.push(ctx.idempotencyKey);
      inFlight++;
      most = Math.max(most, inFlight);
      // Holds the call until another of the step has started (or could not: the bound, long beside a busy
      // machine's pauses, so only a concurrency of one ends it).
      const deadline = Date.now() + 10_000;
      while (inFlight < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
      inFlight--;
      return { result: args.text };
    },
  });
  const { model } = scripted([
    { kind: "tool_calls", calls: [call("slow_note", "a"), call("slow_note", "b"), call("slow_note", "c")] },
    { kind: "done", text: "Three notes." },
  ]);
  const agent = defineAgent({ name: "par-bound", tools: [slow], model, toolConcurrency: 2 });
  const { end, record } = await runToEnd(agent, "par-bound-1");
  assert.equal(end.status, "done");
  assert.equal(most, 2, "two at once: the agent's toolConcurrency, not one and not three");
  assert.deepEqual(started.slice(0, 2).sort(), ["par-bound-1:0", "par-bound-1:1"]);
  assert.deepEqual(record.effects.map((e) => [e.idempotency_key, e.status, e.result]), [
    ["par-bound-1:0", "confirmed", "a"],
    ["par-bound-1:1", "confirmed", "b"],
    ["par-bound-1:2", "confirmed", "c"],
  ]);
  assert.deepEqual(record.journal.map((j) => j.seq), [0, 3]);
  const listed = (await client.reads.list({ search: "par-bound-1" })).runs[0];
  assert.equal(listed.tool_calls, 3, "the runs list counts the step's three calls");
});

Deno.test("a call that needs approval waits while the others of its step run; approved, only it is sent", async () => {
  const r = remote();
  const { model, asked } = scripted([
    {
      kind: "tool_calls",
      calls: [call("note", "free"), call("guarded", "asks first"), call("note", "also free")],
    },
    { kind: "done", text: "Done." },
  ]);
  const agent = defineAgent({
    name: "par-approve",
    tools: [r.tool("note"), r.tool("guarded", { approval: true })],
    model,
  });
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId: "par-approve-1", input: "Write." });
    const waiting = await client.wait("par-approve-1", { timeoutMs: 30_000, pollMs: 10 });
    assert.equal(waiting.status, "waiting");
    assert.deepEqual(r.requests.map((q) => q.key).sort(), ["par-approve-1:0", "par-approve-1:2"]);
    const mid = await client.reads.inspect("par-approve-1");
    assert.deepEqual(mid.approvals.map((a) => [a.idempotency_key, a.status]), [[
      "par-approve-1:1",
      "pending",
    ]]);
    assert.deepEqual(mid.effects.map((e) => e.seq), [0, 2], "the guarded call has no row before its yes");
    await client.operators.approve("par-approve-1:1", { by: "alice" });
    const end = await client.wait("par-approve-1", { timeoutMs: 30_000, pollMs: 10 });
    assert.equal(end.status, "done");
  } finally {
    await worker.stop();
  }
  assert.deepEqual(
    r.requests.map((q) => q.key),
    ["par-approve-1:0", "par-approve-1:2", "par-approve-1:1"],
    "each call sent once: the settled ones were not sent again after the wait",
  );
  assert.equal(asked.length, 2, "the next decision was asked once, after every call settled");
  const tools = asked[1].transcript.filter((m) => m.role === "tool");
  assert.deepEqual(tools.map((m) => m.role === "tool" && m.callId), ["call_0", "call_1", "call_2"]);
});

Deno.test("two calls that need approval are asked about together, and a denial is the result of its call", async () => {
  const r = remote();
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [call("guarded", "one"), call("guarded", "two")] },
    { kind: "done", text: "Done." },
  ]);
  const agent = defineAgent({ name: "par-two-asks", tools: [r.tool("guarded", { approval: true })], model });
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId: "par-two-asks-1", input: "Write." });
    await client.wait("par-two-asks-1", { timeoutMs: 30_000, pollMs: 10 });
    const mid = await client.reads.inspect("par-two-asks-1");
    assert.deepEqual(mid.approvals.map((a) => [a.seq, a.status]), [[0, "pending"], [1, "pending"]]);
    await client.operators.deny("par-two-asks-1:0", { by: "bob", reason: "not this one" });
    // One request still pending: the run is taken again, and waits again on the other.
    await client.operators.approve("par-two-asks-1:1", { by: "bob" });
    const end = await client.wait("par-two-asks-1", { timeoutMs: 30_000, pollMs: 10 });
    assert.equal(end.status, "done");
  } finally {
    await worker.stop();
  }
  assert.deepEqual(
    r.requests.map((q) => q.key),
    ["par-two-asks-1:1"],
    "the denied call never reached the remote",
  );
  const record = await client.reads.inspect("par-two-asks-1");
  assert.deepEqual(record.effects.map((e) => [e.seq, e.status, e.attempts]), [[0, "failed", 0], [
    1,
    "confirmed",
    1,
  ]]);
  const results = asked.at(-1)!.transcript.filter((m) => m.role === "tool");
  assert.deepEqual(results[0], {
    role: "tool",
    callId: "call_0",
    name: "guarded",
    failed: true,
    error: "denied by bob: not this one",
  });
});

Deno.test("a flagged call blocks the run once the others of its step have settled", async () => {
  const r = remote();
  const keyless = defineTool({
    name: "keyless",
    description: "Takes no key and answers with an unknown outcome.",
    args: z.strictObject({ text: z.string() }),
    idempotent: false,
    run: () => Promise.reject(new ToolError("TOOL_TIMEOUT", "no answer", { transient: true })),
  });
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [call("keyless", "lost"), call("note", "kept")] },
    { kind: "done", text: "Done." },
  ]);
  const agent = defineAgent({ name: "par-flag", tools: [keyless, r.tool("note")], model });
  const { end, record } = await runToEnd(agent, "par-flag-1");
  assert.equal(end.status, "blocked");
  assert.match(end.error ?? "", /par-flag-1:0/);
  assert.deepEqual(record.effects.map((e) => [e.seq, e.status]), [[0, "flagged"], [1, "confirmed"]]);
  assert.deepEqual(r.requests.map((q) => q.key), ["par-flag-1:1"], "the other call settled before the block");
  assert.equal(asked.length, 1, "no decision is asked past a flagged call");
});

Deno.test("the tool-call budget covers every call of a step before any is sent", async () => {
  const r = remote();
  const { model } = scripted([
    { kind: "tool_calls", calls: [call("note", "1"), call("note", "2"), call("note", "3")] },
    { kind: "done", text: "Done." },
  ]);
  const agent = defineAgent({ name: "par-budget", tools: [r.tool("note")], model });
  const { end, record } = await runToEnd(agent, "par-budget-1", { toolCalls: 2 });
  assert.equal(end.status, "failed");
  assert.match(
    end.error ?? "",
    /BUDGET_EXCEEDED: budget: 0 tool requests made, the step asks for 3 calls at once/,
  );
  assert.deepEqual(record.effects, [], "no call of the step was sent");
  assert.deepEqual(r.requests, []);
});

Deno.test("a retry may not take the requests reserved for the step's other calls", async () => {
  let failures = 1;
  const flaky = defineTool({
    name: "flaky",
    description: "Fails once with a transient error.",
    args: z.strictObject({ text: z.string() }),
    run: (args) => {
      if (failures-- > 0) return Promise.reject(new ToolError("TOOL_HTTP", "503", { transient: true }));
      return Promise.resolve({ result: args.text });
    },
  });
  const r = remote();
  const { model } = scripted([
    { kind: "tool_calls", calls: [call("flaky", "1"), call("note", "2")] },
    { kind: "done", text: "Done." },
  ]);
  const agent = defineAgent({
    name: "par-reserve",
    tools: [flaky, r.tool("note")],
    model,
    toolConcurrency: 1,
  });
  const { end, record } = await runToEnd(agent, "par-reserve-1", { toolCalls: 2 });
  assert.equal(end.status, "failed");
  assert.match(end.error ?? "", /1 more are reserved for this step's other calls, and the ceiling is 2/);
  assert.deepEqual(
    r.requests.map((q) => q.key),
    ["par-reserve-1:1"],
    "the other call got its reserved request",
  );
  assert.deepEqual(record.effects.map((e) => [e.seq, e.attempts]), [[0, 1], [1, 1]]);
});
