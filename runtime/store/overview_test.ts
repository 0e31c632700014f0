/**
 * The web page's reads (`overview.ts`) count what is there: runs per status
 * under a filter, the agents with runs, tokens per run from numeric usage
 * only; a run's view with its totals over every step and its long values
 * clipped at the limit asked for; a range of steps with every approval still
 * pending; and the whole value of any clipped field. On PGlite and PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { ManualClock } from "../base/clock.ts";
import { CountingClient } from "./counting.ts";
import {
  agentsWithRuns,
  countByStatus,
  runView,
  stepsView,
  tokensByRun,
  WHOLE_VALUE_FIELDS,
  wholeValue,
} from "./overview.ts";
import type { Store } from "./store.ts";

const LONG_INPUT = { text: "x".repeat(40) }; // as jsonb text: `{"text": "xx…x"}`, 52 characters
const ANSWER = "the answer is long";

/**
 * Run `v-1`: step 0 a call of `search` (confirmed), step 1 two calls (`a` flagged, `b` at intent),
 * approvals asked at steps 0 (approved) and 2 (pending), then done with {@link ANSWER}.
 */
async function viewedRun(store: Store, clock: ManualClock): Promise<void> {
  const now = () => clock.now();
  await store.leases.createRun({ runId: "v-1", agent: "view", goal: "g", input: LONG_INPUT }, now());
  const f = { runId: "v-1", epoch: (await store.leases.claimRun("v-1", 0, "w1", now()))!.epoch };
  const usage0 = { prompt_tokens: 100, completion_tokens: 20 };
  await writeDecision(store, f, 0, { decision: { tool: "search", args: { q: "hi" } }, usage: usage0 }, now());
  const search = await store.writes.effectIntentRow(
    f,
    { key: "v-1:0", seq: 0, tool: "search", args: { q: "hi" } },
    now(),
  );
  await store.writes.effectConfirm(f, search, { result: { hits: [1, 2, 3] }, remote: "created" }, now());
  const calls = [{ tool: "a", args: {} }, { tool: "b", args: {} }];
  await writeDecision(store, f, 1, {
    decision: { calls },
    usage: { prompt_tokens: 50, completion_tokens: "?" },
  }, now());
  const a = await store.writes.effectIntentRow(f, { key: "v-1:1", seq: 1, tool: "a", args: {} }, now());
  await store.writes.effectSettle(f, a, { status: "flagged", error: "outcome unknown" }, now());
  await store.writes.effectIntentRow(f, { key: "v-1:2", seq: 2, tool: "b", args: {} }, now());
  const ask = (seq: number) => ({ key: `v-1:${seq}`, seq, tool: "pay", args: { eur: 5 }, hash: "h" });
  await store.writes.requestApprovals(f, [ask(0), ask(2)], now());
  await store.operators.decideApproval("v-1:0", "approved", "ana", null, now());
  const again = { runId: "v-1", epoch: (await store.leases.claimRun("v-1", f.epoch, "w2", now()))!.epoch };
  await store.writes.finishRun(again, "done", null, now(), ANSWER);
}

bothStoresTest("the web page's reads", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));

  await t.step("runs per status, the agents with runs, and tokens per run count what is there", async () => {
    assert.deepEqual([await countByStatus(store.client), await agentsWithRuns(store.client)], [{}, []]);
    for (const id of ["c-a1", "c-a2", "c-a3"]) {
      await store.leases.createRun({ runId: id, agent: "alpha", goal: "g" }, clock.now());
    }
    await store.leases.createRun({ runId: "c-b1", agent: "beta", goal: "g" }, clock.now());
    const a2 = { runId: "c-a2", epoch: (await store.leases.claimRun("c-a2", 0, "w", clock.now()))!.epoch };
    const a3 = { runId: "c-a3", epoch: (await store.leases.claimRun("c-a3", 0, "w", clock.now()))!.epoch };
    await store.writes.finishRun(a3, "done", null, clock.now(), "ok");
    assert.deepEqual(await countByStatus(store.client), { pending: 2, running: 1, done: 1 });
    assert.deepEqual(await countByStatus(store.client, { agent: "alpha" }), {
      pending: 1,
      running: 1,
      done: 1,
    });
    assert.deepEqual(await countByStatus(store.client, { search: "b1" }), { pending: 1 });
    assert.deepEqual(await agentsWithRuns(store.client), ["alpha", "beta"]);

    const decided = { decision: { done: true, message: "" } } as const;
    await writeDecision(
      store,
      a2,
      0,
      { ...decided, usage: { prompt_tokens: 10, completion_tokens: 3 } },
      clock.now(),
    );
    await writeDecision(
      store,
      a2,
      1,
      { ...decided, usage: { prompt_tokens: 5, completion_tokens: "7" } },
      clock.now(),
    );
    const tokens = await tokensByRun(store.client, ["c-a2", "c-a3", "c-none"]);
    assert.deepEqual([...tokens], [["c-a2", { input: 15, output: 3 }]], "a run without usage is absent");
    const counting = new CountingClient(store.client);
    assert.deepEqual(await tokensByRun(counting, []), new Map());
    assert.equal(counting.total, 0, "no runs asked for, no statement sent");
  });

  await viewedRun(store, clock);

  await t.step("a run's view totals every step and clips long values at the limit asked for", async () => {
    const view = await runView(store.client, "v-1", { maxChars: 12 });
    assert.deepEqual(
      [view?.status, view?.epoch, view?.input, view?.output, view?.error],
      ["done", 2, { head: '{"text": "xx', chars: 52 }, { head: "the answer i", chars: ANSWER.length }, {
        value: null,
      }],
    );
    assert.deepEqual(
      [view?.tool_calls, view?.llm_calls, view?.input_tokens, view?.output_tokens, view?.flagged],
      [3, 2, 150, 20, 1],
      "a call of step 0 and two of step 1; a usage field that is no number counts nothing",
    );
    assert.deepEqual([view?.min_seq, view?.max_seq], [0, 2]);
    const whole = await runView(store.client, "v-1", { maxChars: ANSWER.length });
    assert.deepEqual([whole?.input, whole?.output], [{ head: '{"text": "xxxxxxxx', chars: 52 }, {
      value: ANSWER,
    }], "a value exactly at the limit is whole");
    assert.equal(await runView(store.client, "v-none", { maxChars: 12 }), undefined);
  });

  await t.step("a range of steps, clipped, with every approval still pending wherever it is", async () => {
    const first = await stepsView(store.client, "v-1", { from: 0, to: 0, maxChars: 12 });
    assert.deepEqual(first.journal.map((j) => [j.seq, j.tool, j.done, j.args, j.prompt_tokens]), [
      [0, "search", false, { value: { q: "hi" } }, 100],
    ]);
    assert.deepEqual(first.effects.map((e) => [e.idempotency_key, e.status, e.result]), [
      ["v-1:0", "confirmed", { head: '{"hits": [1,', chars: 19 }],
    ]);
    assert.deepEqual(first.approvals.map((a) => [a.seq, a.status]), [[0, "approved"], [2, "pending"]]);
    const second = await stepsView(store.client, "v-1", { from: 1, to: 1, maxChars: 12 });
    assert.deepEqual(second.journal.map((j) => [j.seq, j.tool, j.completion_tokens]), [[1, "a, b", null]]);
    assert.deepEqual(second.effects.map((e) => [e.seq, e.status, e.error]), [
      [1, "flagged", { head: "outcome unkn", chars: 15 }],
    ]);
    assert.deepEqual(second.approvals.map((a) => a.seq), [2]);
  });

  await t.step("a clipped field's whole value, and undefined where there is no such row", async () => {
    const read = (field: (typeof WHOLE_VALUE_FIELDS)[number], seq?: number, runId = "v-1") =>
      wholeValue(store.client, { runId, field, seq });
    assert.deepEqual(await read("input"), { value: LONG_INPUT });
    assert.deepEqual(await read("output"), { value: ANSWER });
    assert.deepEqual(await read("error"), { value: null });
    assert.deepEqual(await read("decision.args", 0), { value: { q: "hi" } });
    assert.deepEqual(
      await read("decision.args", 1),
      { value: null },
      "a decision of several calls has no args",
    );
    assert.deepEqual(await read("call.result", 0), { value: { hits: [1, 2, 3] } });
    assert.deepEqual(await read("call.error", 1), { value: "outcome unknown" });
    assert.deepEqual(await read("approval.args", 2), { value: { eur: 5 } });
    assert.equal(await read("call.result", 9), undefined);
    assert.equal(await read("input", undefined, "v-none"), undefined);
    for (const field of WHOLE_VALUE_FIELDS) assert.notEqual(await read(field, 0), undefined, field);
  });
});
