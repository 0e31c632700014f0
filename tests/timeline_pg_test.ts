/**
 * The page's reads of one run (client.reads.timeline and wholeValue over the
 * store's statements in overview.ts): a range of steps (the last N, from a
 * step on, before a step), values over the limit clipped in SQL with their
 * length, the whole value on request, totals over every step, and approvals
 * with who decided them. On the embedded database and on PostgreSQL.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { BIG, writeLongRun } from "./_display_runs.ts";
import { pgTest } from "./_pg.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";
import { testClient } from "./_pglite.ts";

const STEPS = 120;
const MAX = 500;

async function checkTimeline(client: Client, clock: ManualClock): Promise<void> {
  await writeLongRun(client.store, clock, { runId: "long-1", steps: STEPS });
  const maxChars = MAX;

  const last = await client.reads.timeline("long-1", { steps: { last: 50 }, maxChars });
  assert.deepEqual([last.from, last.to], [STEPS - 49, STEPS], "the last 50 steps");
  assert.equal(last.steps.journal.length, 50);
  assert.equal(last.steps.effects.length, 49, "the final answer has no tool call");
  assert.deepEqual(
    [
      last.run.tool_calls,
      last.run.llm_calls,
      last.run.input_tokens,
      last.run.output_tokens,
      last.run.flagged,
    ],
    [STEPS, STEPS + 1, 2 * (STEPS + 1), STEPS + 1, 0],
    "totals over every step, not only those read",
  );
  assert.deepEqual([last.run.min_seq, last.run.max_seq], [0, STEPS]);
  assert.deepEqual(last.run.output, { head: BIG.slice(0, maxChars), chars: BIG.length }, "clipped in SQL");
  assert.deepEqual(last.steps.journal.at(-1)!.message, { head: BIG.slice(0, maxChars), chars: BIG.length });
  assert.equal(last.steps.journal.at(-1)!.done, true);
  assert.deepEqual(last.run.input, { value: "go" });
  // Unclipped, the answer and the output alone would be 2 x 22 KB.
  assert.ok(
    JSON.stringify(last).length < 50 * 1_000,
    `50 steps read in ${JSON.stringify(last).length} bytes`,
  );

  // What a page polls for: the steps from the last one it holds on.
  const poll = await client.reads.timeline("long-1", { steps: { from: STEPS, limit: 50 }, maxChars });
  assert.deepEqual([poll.from, poll.to, poll.steps.journal.length], [STEPS, STEPS, 1]);
  assert.ok(JSON.stringify(poll).length < 3_000, `a poll is ${JSON.stringify(poll).length} bytes`);
  // A page that fell more than a page behind starts over from the newest.
  const behind = await client.reads.timeline("long-1", { steps: { from: 10, limit: 50 }, maxChars });
  assert.deepEqual([behind.from, behind.to], [STEPS - 49, STEPS]);

  const early = await client.reads.timeline("long-1", { steps: { before: 10, limit: 50 }, maxChars });
  assert.deepEqual([early.from, early.to], [0, 9], "earlier steps stop at the first");
  const j3 = early.steps.journal.find((j) => j.seq === 3)!;
  assert.ok(
    "head" in j3.args && j3.args.chars > maxChars && j3.args.head.length === maxChars,
    "long args clipped",
  );
  assert.deepEqual(early.steps.journal.find((j) => j.seq === 2)!.args, { value: { n: 2, pad: "" } });
  const e4 = early.steps.effects.find((e) => e.seq === 4)!;
  assert.ok("head" in e4.result && e4.result.chars > BIG.length, "a long result clipped");
  assert.deepEqual(early.steps.effects.find((e) => e.seq === 5)!.result, { value: { ok: 5 } });

  // Whole on request, exactly as stored.
  assert.equal(await client.reads.wholeValue("long-1", "output"), BIG);
  assert.equal(await client.reads.wholeValue("long-1", "decision.message", STEPS), BIG);
  assert.deepEqual(await client.reads.wholeValue("long-1", "decision.args", 3), {
    n: 3,
    pad: "x".repeat(1_500),
  });
  assert.deepEqual(await client.reads.wholeValue("long-1", "call.result", 4), { text: BIG });
  assert.equal(await client.reads.wholeValue("long-1", "error"), null);
  await assert.rejects(client.reads.wholeValue("long-1", "call.args", STEPS + 5), { code: "RUN_NOT_FOUND" });
  await assert.rejects(client.reads.timeline("nope", { steps: { last: 5 }, maxChars }), {
    code: "RUN_NOT_FOUND",
  });

  // A run with no step yet reads none.
  await client.store.leases.createRun({ runId: "empty-1", agent: "long", goal: "go" }, clock.now());
  const empty = await client.reads.timeline("empty-1", { steps: { last: 50 }, maxChars });
  assert.deepEqual([empty.run.min_seq, empty.steps.journal.length, empty.to < empty.from], [null, 0, true]);

  // An approval: pending wherever it is, then who decided it, when.
  await client.store.leases.createRun({ runId: "appr-1", agent: "long", goal: "go" }, clock.now());
  const epoch = (await claim(client.store, "appr-1", 0, "w1", clock.now()))!;
  const f = { runId: "appr-1", epoch };
  const args = { to: "ACCT-\u202E9876\u202C", cents: 100 };
  await writeDecision(client.store, f, 0, { decision: { tool: "transfer", args } }, clock.now());
  await client.store.writes.requestApproval(
    f,
    { key: "appr-1:0", seq: 0, tool: "transfer", args, hash: "h" },
    clock.now(),
  );
  const waiting = await client.reads.timeline("appr-1", { steps: { before: 0, limit: 5 }, maxChars });
  assert.equal(waiting.steps.journal.length, 0, "no step in the range asked for");
  assert.deepEqual(
    waiting.steps.approvals.map((a) => [a.idempotency_key, a.status, a.args]),
    [["appr-1:0", "pending", { value: args }]],
    "a pending approval is read wherever it is",
  );
  await clock.advance(1_000);
  await client.operators.approve("appr-1:0", { by: "alice" });
  const decided = await client.reads.timeline("appr-1", { steps: { last: 5 }, maxChars });
  const a = decided.steps.approvals[0];
  assert.deepEqual([a.status, a.decided_by, a.decided_at?.getTime()], [
    "approved",
    "alice",
    clock.now().getTime(),
  ]);
  assert.equal(decided.run.status, "pending");
}

Deno.test("a run's page reads a range of steps, clips long values and gives them whole, on the embedded database", async () => {
  const clock = new ManualClock();
  const client = await testClient({ clock });
  try {
    await checkTimeline(client, clock);
  } finally {
    await client.close();
  }
});

pgTest(
  "a run's page reads a range of steps, clips long values and gives them whole, on PostgreSQL",
  async (pg) => {
    const clock = new ManualClock();
    await checkTimeline(new Client(pg.store, clock), clock);
  },
);
