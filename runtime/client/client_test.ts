import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { Client, connect } from "./client.ts";
import { ClientError } from "../base/errors.ts";
import { RuntimeError } from "../base/errors.ts";
import type { Planner } from "../model/planner.ts";
import { defineTool } from "../agent/tools.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";

const effects: string[] = [];
const model: Planner = {
  describe: "script",
  decide: (req) =>
    Promise.resolve(
      req.seq === 0
        ? { kind: "tool_calls", calls: [{ name: "order", args: { sku: "tea", qty: 2 } }] }
        : { kind: "done", text: `ordered for ${req.runId}` },
    ),
};
const order = defineTool({
  name: "order",
  description: "Orders an item.",
  args: z.strictObject({ sku: z.string(), qty: z.number().int().min(1) }),
  run: (args, ctx) => {
    effects.push(`${ctx.idempotencyKey} ${args.sku}x${args.qty}`);
    return Promise.resolve({ result: { order: ctx.idempotencyKey } });
  },
});
/** An agent with JSON input checked by a zod schema. */
const shop = defineAgent({
  name: "shop",
  instructions: "Order what the input lists.",
  tools: [order],
  model,
  input: z.strictObject({ customer: z.string(), items: z.array(z.string()).min(1) }),
});

const client: Client = await connect({ memory: true });

Deno.test("start() checks the input against the agent, and wait() returns the final answer", async () => {
  await assert.rejects(
    client.start(shop, { runId: "bad-input", input: { customer: "ada" } }),
    (e: RuntimeError) => e.code === "INPUT_INVALID" && /items/.test(e.message),
  );
  assert.equal(await client.get("bad-input"), undefined, "nothing is stored for refused input");
  const run = await client.start(shop, { runId: "shop-1", input: { customer: "ada", items: ["tea"] } });
  assert.equal(run.status, "pending");
  assert.deepEqual(run.input, { customer: "ada", items: ["tea"] });
  await assert.rejects(
    client.start(shop, { runId: "shop-1", input: { customer: "bob", items: ["x"] } }),
    (e: ClientError) => e.code === "RUN_EXISTS",
  );
  await assert.rejects(
    client.wait("shop-1", { timeoutMs: 50, pollMs: 10 }),
    (e: ClientError) => e.code === "WAIT_TIMEOUT" && /still pending/.test(e.message),
  );
  const worker = await client.startWorker([shop], { pollMs: 20 });
  try {
    const done = await client.wait("shop-1", { timeoutMs: 30_000, pollMs: 20 });
    assert.equal(done.status, "done");
    assert.equal(done.output, "ordered for shop-1");
    assert.deepEqual(effects, ["shop-1:0 teax2"]);
    const record = await client.reads.inspect("shop-1");
    assert.equal(record.journal.length, 2);
    assert.equal(record.effects[0].status, "confirmed");
    // The goal the model saw is the input as JSON text.
    assert.equal(record.run.goal, JSON.stringify({ customer: "ada", items: ["tea"] }));
  } finally {
    await worker.stop();
  }
});

Deno.test("list() pages newest first and filters; cancel() and reopen() report what they refuse", async () => {
  for (let i = 0; i < 3; i++) {
    await client.start(shop, { runId: `list-${i}`, input: { customer: "c", items: ["a"] } });
  }
  const page = await client.reads.list({ search: "list-", limit: 2 });
  assert.equal(page.total, 3);
  assert.deepEqual(page.runs.map((r) => r.run_id), ["list-2", "list-1"]);
  const cancelled = await client.operators.cancel("list-0", { by: "ops", reason: "duplicate" });
  assert.equal(cancelled.status, "cancelled");
  assert.equal(cancelled.error, "cancelled by ops: duplicate");
  await assert.rejects(client.operators.cancel("list-0"), (e: ClientError) => e.code === "RUN_CLOSED");
  assert.equal((await client.operators.reopen("list-0")).status, "pending");
  await assert.rejects(client.operators.reopen("list-1"), (e: ClientError) => e.code === "NOT_REOPENABLE");
  await assert.rejects(client.reads.inspect("nope"), (e: ClientError) => e.code === "RUN_NOT_FOUND");
  await assert.rejects(client.wait("nope"), (e: ClientError) => e.code === "RUN_NOT_FOUND");
  await assert.rejects(
    client.start(shop, { runId: "no spaces", input: { customer: "c", items: ["a"] } }),
    (e: ClientError) => e.code === "BAD_RUN_ID",
  );
});

/** A run of `tools.length` steps, each a call of that tool left flagged; blocked unless `block` is false. */
async function flaggedRun(runId: string, tools: string[], block = true): Promise<void> {
  const { store } = client;
  const now = client.clock.now();
  await store.leases.createRun({ runId, agent: "shop", goal: "g" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, "w", now))! };
  for (const [seq, tool] of tools.entries()) {
    await writeDecision(store, f, seq, { decision: { tool, args: {} } }, now);
    const call = await store.writes.effectIntentRow(f, { key: `${runId}:${seq}`, seq, tool, args: {} }, now);
    await store.writes.effectSettle(f, call, { status: "flagged", error: "its outcome is unknown" }, now);
  }
  if (block) await store.writes.finishRun(f, "blocked", "needs a human", now);
}

/** A run whose call at seq 0 its remote accepted; the run let go for a minute, or (`person`) waiting for an approval. */
async function waitingRun(runId: string, opts: { person?: boolean } = {}): Promise<void> {
  const { store } = client;
  const now = client.clock.now();
  const later = new Date(now.getTime() + 60_000);
  await store.leases.createRun({ runId, agent: "shop", goal: "g" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, "w", now))! };
  await writeDecision(store, f, 0, { decision: { tool: "order", args: {} } }, now);
  const sent = await store.writes.effectIntentRow(
    f,
    { key: `${runId}:0`, seq: 0, tool: "order", args: {} },
    now,
  );
  await store.writes.effectWaiting(f, sent, { result: { job: 1 }, checkAt: later, deadlineAt: later });
  if (opts.person) {
    await writeDecision(store, f, 1, { decision: { tool: "order", args: {} } }, now);
    await store.writes.requestApproval(
      f,
      { key: `${runId}:1`, seq: 1, tool: "order", args: {}, hash: "h" },
      now,
    );
  } else assert.equal(await store.writes.waitRun(f, later, now), true);
}

Deno.test("wait() goes on waiting for a run asleep on its remote, not for one waiting on a person; settleCall() checks what it is given", async () => {
  await waitingRun("asleep-1");
  await waitingRun("asleep-2", { person: true });
  const asleep = await client.get("asleep-1");
  assert.deepEqual([asleep?.status, asleep?.wakeAt !== null], ["waiting", true]);
  await assert.rejects(
    client.wait("asleep-1", { timeoutMs: 200, pollMs: 20 }),
    (e: ClientError) => e.code === "WAIT_TIMEOUT" && /still waiting/.test(e.message),
  );
  const person = await client.wait("asleep-2", { timeoutMs: 200, pollMs: 20 });
  assert.deepEqual([person.status, person.wakeAt], ["waiting", null]);

  for (const bad of [{}, { result: 1, error: "e" }, { error: "" }, { error: 5 }, null]) {
    await assert.rejects(
      client.operators.settleCall("asleep-1:0", bad as never),
      (e: ClientError) => e.code === "SETTLEMENT_INVALID" && /current value is/.test(e.message),
      JSON.stringify(bad),
    );
  }
  assert.equal((await client.store.reads.getEffect("asleep-1:0"))?.status, "waiting", "nothing was settled");
  const out = await client.operators.settleCall("asleep-1:0", { result: null }, { by: "hook" });
  assert.deepEqual([out.effect.status, out.effect.result, out.runStatus, out.woken], [
    "confirmed",
    null,
    "waiting",
    true,
  ]);
  await assert.rejects(
    client.operators.settleCall("asleep-1:1", { result: 1 }),
    (e: ClientError) => e.code === "CALL_NOT_FOUND",
  );
});

Deno.test("resolveMany() settles the flagged calls a filter names, only at the count confirmed, as resolve() would", async () => {
  for (const id of ["bulk-a", "bulk-b", "bulk-c"]) await flaggedRun(id, ["charge"]);
  await flaggedRun("bulk-mixed", ["charge", "refund"]);
  await flaggedRun("bulk-open", ["charge"], false); // flagged, its worker not done blocking it yet

  const listed = await client.operators.flagged({ tool: "charge" });
  assert.equal(listed.total, 4);
  assert.deepEqual(listed.calls.map((c) => c.idempotency_key), [
    "bulk-a:0",
    "bulk-b:0",
    "bulk-c:0",
    "bulk-mixed:0",
  ]);
  assert.equal((await client.operators.flagged({ tool: "charge" }, { limit: 1 })).calls.length, 1);
  assert.equal((await client.operators.flagged({ tool: "charge" }, { limit: 1 })).total, 4);
  await assert.rejects(client.operators.flagged({}), (e: ClientError) => e.code === "FILTER_REQUIRED");
  await assert.rejects(
    client.operators.flagged({ runId: "no spaces" }),
    (e: ClientError) => e.code === "BAD_RUN_ID",
  );

  // A count other than the one matching settles nothing.
  await assert.rejects(
    client.operators.resolveMany({ tool: "charge" }, { action: "retry" }, { expect: 3, by: "ops" }),
    (e: ClientError) =>
      e.code === "COUNT_CHANGED" &&
      /^4 flagged call\(s\) of blocked runs match tool "charge"/.test(e.message),
  );
  assert.equal((await client.operators.flagged({ tool: "charge" })).total, 4, "nothing was resolved");
  await assert.rejects(
    client.operators.resolveMany({ tool: "charge" }, { action: "retry" }, { expect: 0 }),
    (e: ClientError) => e.code === "COUNT_INVALID" && /current value is 0/.test(e.message),
  );

  const out = await client.operators.resolveMany({ tool: "charge" }, { action: "retry" }, {
    expect: 4,
    by: "ops",
  });
  assert.deepEqual(out.effects.map((e) => [e.idempotency_key, e.status, e.resolved_by]), [
    ["bulk-a:0", "intent", "ops"],
    ["bulk-b:0", "intent", "ops"],
    ["bulk-c:0", "intent", "ops"],
    ["bulk-mixed:0", "intent", "ops"],
  ]);
  for (const e of out.effects) assert.ok(e.resolved_at instanceof Date, "when, as resolve() records it");
  assert.deepEqual(
    out.unblocked,
    ["bulk-a", "bulk-b", "bulk-c"],
    "a run with another flagged call stays blocked",
  );
  for (const id of out.unblocked) assert.equal((await client.get(id))?.status, "pending");
  assert.equal((await client.get("bulk-mixed"))?.status, "blocked");
  assert.equal((await client.get("bulk-open"))?.status, "running");
  assert.equal(
    (await client.store.reads.getEffect("bulk-open:0"))?.status,
    "flagged",
    "not a blocked run's: left alone",
  );

  const failed = await client.operators.resolveMany({ runId: "bulk-mixed" }, {
    action: "fail",
    reason: "refund never sent",
  }, {
    expect: 1,
    by: "ops",
  });
  assert.equal(
    failed.effects[0].error,
    "marked failed by ops: refund never sent",
    "the same words as resolve()",
  );
  assert.deepEqual(failed.unblocked, ["bulk-mixed"]);
  await assert.rejects(
    client.operators.resolveMany({ tool: "refund" }, { action: "result", result: "r-1" }, { expect: 1 }),
    (e: ClientError) => e.code === "COUNT_CHANGED" && /^0 flagged/.test(e.message),
  );
});

Deno.test("a text agent given something other than text says what it was given and what it takes", async (t) => {
  const notes = defineAgent({ name: "notes", tools: [], model });
  const cases: [unknown, RegExp][] = [
    [42, /and a number \(42\) was given/],
    [{}, /and an object \(\{\}\) was given/],
    [[1, 2], /and an array \(\[1,2\]\) was given/],
    [true, /and a boolean \(true\) was given/],
    [null, /and null was given/],
    ["", /and an empty string was given/],
    [" \n", /and only whitespace was given/],
    [undefined, /and no input was given/],
    [{ long: "x".repeat(200) }, /\(\{"long":"x{71}\.\.\.\) was given/],
  ];
  for (const [input, given] of cases) {
    await t.step((JSON.stringify(input) ?? "undefined").slice(0, 40), async () => {
      await assert.rejects(client.start(notes, { runId: "text-in", input }), (e: RuntimeError) => {
        assert.equal(e.code, "INPUT_INVALID");
        assert.match(e.message, /^Agent notes takes text input \(a non-empty string\) and /);
        assert.match(e.message, given);
        return true;
      });
    });
  }
  assert.equal(await client.get("text-in"), undefined, "nothing is stored for refused input");
});

Deno.test("defineAgent() refuses a bad name, bad limits and duplicate tool names up front", () => {
  assert.throws(() => defineAgent({ name: "has space", tools: [] }), /a name is 1-64 letters/);
  assert.throws(() => defineAgent({ name: "a", tools: [], maxSteps: 0 }), /'maxSteps' must be an integer/);
  for (const historySteps of [0, 1.5, 100_001, "5" as unknown as number]) {
    assert.throws(
      () => defineAgent({ name: "a", tools: [], historySteps }),
      /'historySteps' must be an integer from 1 to 100000: current value is /,
      String(historySteps),
    );
  }
  assert.equal(defineAgent({ name: "a", tools: [], historySteps: 3 }).historySteps, 3);
  assert.throws(() => defineAgent({ name: "a", tools: [order, order] }), /Two tools are named order/);
});

Deno.test("run() starts, hosts the agent for the call when no worker does, and returns the answer; again, it takes the run up", async () => {
  const before = effects.length;
  await client.start(shop, { runId: "shop-bystander", input: { customer: "by", items: ["tea"] } });
  const done = await client.run(shop, { customer: "cy", items: ["tea"] }, {
    runId: "shop-run-1",
    pollMs: 20,
  });
  assert.equal(done.status, "done");
  assert.equal(done.output, "ordered for shop-run-1");
  assert.deepEqual(effects.slice(before), ["shop-run-1:0 teax2"]);
  assert.equal(
    (await client.get("shop-bystander"))?.status,
    "pending",
    "the call's worker drives its run only",
  );
  assert.deepEqual(
    await client.reads.hostedAgents(),
    [],
    "the worker it hosted for the call told nobody it hosts shop",
  );
  // The same id again: the run is taken up where it stands (done), nothing is sent twice.
  const again = await client.run(shop, { customer: "cy", items: ["tea"] }, {
    runId: "shop-run-1",
    pollMs: 20,
  });
  assert.equal(again.status, "done");
  assert.equal(effects.length, before + 1);
  // Another agent's run id is refused, and bad input before anything is stored.
  const other = defineAgent({ name: "other", instructions: "x", tools: [order], model });
  await assert.rejects(
    client.run(other, "x", { runId: "shop-run-1" }),
    (e: ClientError) => e.code === "RUN_EXISTS" && /belongs to agent shop/.test(e.message),
  );
  await assert.rejects(client.run(shop, { customer: "cy" }), (e: RuntimeError) => e.code === "INPUT_INVALID");
});

Deno.test("run() refuses an agent it cannot build (no model) before a run is stored", async () => {
  const modelless = defineAgent({ name: "modelless", instructions: "x", tools: [order] });
  await assert.rejects(
    client.run(modelless, "x", { runId: "modelless-1", context: { env: {} } }),
    (e: RuntimeError) => /has no model/.test(e.message) && /MODEL_URL/.test(e.message),
  );
  assert.equal(await client.get("modelless-1"), undefined);
  assert.deepEqual(await client.reads.hostedAgents(), []);
});

Deno.test("run() leaves the run to a live worker that hosts the agent", async () => {
  const worker = await client.startWorker([shop], { pollMs: 20, owner: "the-fleet" });
  try {
    const done = await client.run(shop, { customer: "di", items: ["tea"] }, { runId: "shop-run-2" });
    assert.equal(done.status, "done");
    assert.equal(done.owner, "the-fleet", "driven by the worker already there, not one of the call's own");
  } finally {
    await worker.stop();
  }
});

Deno.test.afterAll(async () => {
  await client.close();
});
