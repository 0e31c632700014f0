/**
 * The operators' statements (`operators.ts`) change exactly the rows they
 * say: a resolve settles one flagged call (or every call a person counted,
 * and none when the count is off) and frees a blocked run only with its last
 * flagged call; an answer to an approval request frees a waiting run, once,
 * and never for a closed run; a reopen puts a failed run back with its calls
 * at intent allowed one more request; the runs list pages newest first with
 * its counts; prune deletes finished runs older than the cutoff, with their
 * rows, and a dry run deletes nothing. Time is a ManualClock. On PGlite and
 * PostgreSQL. (A call settled from outside is `waits_test.ts`'s.)
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { ManualClock } from "../base/clock.ts";
import type { Fence, Store } from "./store.ts";

/** The fields `keys` of `row`, to compare in one line. */
function pick<T extends object, K extends keyof T>(row: T | undefined, ...keys: K[]): Partial<Pick<T, K>> {
  return Object.fromEntries(keys.map((k) => [k, row?.[k]])) as Partial<Pick<T, K>>;
}

/** A claimed run of agent `ops` created at `now`. */
async function held(store: Store, runId: string, now: Date): Promise<Fence> {
  await store.leases.createRun({ runId, agent: "ops", goal: "g" }, now);
  return { runId, epoch: (await store.leases.claimRun(runId, 0, "w1", now))!.epoch };
}

/** A blocked run whose step 0 called `tools` (seq 0, 1, ...), each call flagged. */
async function blocked(store: Store, runId: string, tools: string[], now: Date): Promise<Fence> {
  const f = await held(store, runId, now);
  await writeDecision(store, f, 0, { decision: { calls: tools.map((tool) => ({ tool, args: {} })) } }, now);
  for (const [seq, tool] of tools.entries()) {
    const sent = await store.writes.effectIntentRow(f, { key: `${runId}:${seq}`, seq, tool, args: {} }, now);
    await store.writes.effectSettle(f, sent, { status: "flagged", error: "outcome unknown" }, now);
  }
  await store.writes.finishRun(f, "blocked", "a call needs a person", now);
  return f;
}

bothStoresTest("the operators' reads and commands", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const now = () => clock.now();
  const statusOf = async (runId: string) => (await store.reads.getRun(runId))?.status;

  await t.step(
    "prune deletes finished runs older than the cutoff with their rows; a dry run, none",
    async () => {
      const old = await held(store, "p-old", now());
      await writeDecision(store, old, 0, { decision: { tool: "note", args: {} } }, now());
      await store.writes.effectIntentRow(old, { key: "p-old:0", seq: 0, tool: "note", args: {} }, now());
      await store.writes.finishRun(old, "failed", "gave up", now());
      await held(store, "p-open", now());
      await clock.advance(60_000);
      await store.writes.finishRun(await held(store, "p-recent", now()), "done", null, now(), "ok");
      const cutoff = new Date(now().getTime() - 1_000);
      const expected = {
        runs: ["p-old"],
        journal: 1,
        effects: 1,
        approvals: 0,
        messages: 0,
        memos: 0,
        signals: 0,
        chunks: 0,
      };
      assert.deepEqual(await store.operators.pruneRuns(cutoff, 10, true), expected);
      assert.equal(await statusOf("p-old"), "failed", "a dry run deletes nothing");
      assert.deepEqual(await store.operators.pruneRuns(cutoff, 10), expected);
      const left = [await statusOf("p-old"), await statusOf("p-open"), await statusOf("p-recent")];
      assert.deepEqual(left, [undefined, "running", "done"]);
      assert.equal(await store.reads.getEffect("p-old:0"), undefined);
    },
  );

  await t.step("resolveEffect() settles one flagged call, and frees its run with the last", async () => {
    await blocked(store, "o-two", ["ship", "bill"], now());
    await clock.advance(1_000);
    const first = await store.operators.resolveEffect(
      "o-two:0",
      { action: "result", result: { id: 7 } },
      "ana",
      now(),
    );
    assert.equal(first?.unblocked, false);
    assert.deepEqual(
      pick(first?.effect, "status", "result", "remote", "resolved_by", "resolved_at", "confirmed_at"),
      {
        status: "confirmed",
        result: { id: 7 },
        remote: "resolved",
        resolved_by: "ana",
        resolved_at: now(),
        confirmed_at: now(),
      },
    );
    assert.equal(await statusOf("o-two"), "blocked", "one call is still flagged");
    const last = await store.operators.resolveEffect("o-two:1", { action: "retry" }, "ana", now());
    assert.deepEqual([last?.unblocked, pick(last?.effect, "status", "confirmed_at")], [true, {
      status: "intent",
      confirmed_at: null,
    }]);
    const run = pick(await store.reads.getRun("o-two"), "status", "error", "heartbeat_at");
    assert.deepEqual(run, { status: "pending", error: null, heartbeat_at: null });
    assert.equal(
      await store.operators.resolveEffect("o-two:1", { action: "retry" }, "ana", now()),
      undefined,
    );

    await blocked(store, "o-fail", ["ship"], now());
    const failed = await store.operators.resolveEffect(
      "o-fail:0",
      { action: "fail", error: "gone" },
      "bo",
      now(),
    );
    assert.deepEqual([failed?.unblocked, pick(failed?.effect, "status", "error")], [true, {
      status: "failed",
      error: "gone",
    }]);
  });

  await t.step("resolveEffects() settles the calls a person counted, or none", async () => {
    await blocked(store, "o-b1", ["crate", "crate"], now());
    await blocked(store, "o-b2", ["crate", "label"], now());
    await blocked(store, "o-b3", ["crate"], now());
    await store.families.cancel("o-b3", "not wanted", now()); // its call is no longer any person's to settle
    const listed = await store.operators.flaggedCalls({ tool: "crate" }, 2);
    assert.deepEqual([listed.calls.map((c) => c.idempotency_key), listed.total], [["o-b1:0", "o-b1:1"], 3]);

    const fail = { action: "fail", error: "lost" } as const;
    const off = await store.operators.resolveEffects({ tool: "crate" }, fail, {
      by: "ana",
      now: now(),
      expect: 2,
    });
    assert.deepEqual(off, { matched: 3, effects: [], unblocked: [] });
    assert.equal((await store.operators.flaggedCalls({ tool: "crate" }, 10)).total, 3, "nothing was settled");

    const all = await store.operators.resolveEffects({ tool: "crate" }, fail, {
      by: "ana",
      now: now(),
      expect: 3,
    });
    assert.deepEqual(all.effects.map((e) => [e.idempotency_key, e.status, e.error]), [
      ["o-b1:0", "failed", "lost"],
      ["o-b1:1", "failed", "lost"],
      ["o-b2:0", "failed", "lost"],
    ]);
    assert.deepEqual(all.unblocked, ["o-b1"]);
    assert.deepEqual([await statusOf("o-b1"), await statusOf("o-b2")], ["pending", "blocked"]);
    assert.equal((await store.reads.getEffect("o-b3:0"))?.status, "flagged");
    const retry = { action: "retry" } as const;
    const byRun = await store.operators.resolveEffects({ runId: "o-b2" }, retry, {
      by: "ana",
      now: now(),
      expect: 1,
    });
    assert.deepEqual(byRun.effects.map((e) => e.idempotency_key), ["o-b2:1"]);
    assert.deepEqual(byRun.unblocked, ["o-b2"]);
  });

  await t.step("decideApproval() answers once, frees a waiting run, not a closed run's", async () => {
    const ask = (runId: string) => ({ key: `${runId}:0`, seq: 0, tool: "pay", args: { eur: 5 }, hash: "h" });
    for (const id of ["a-yes", "a-closed"]) {
      await store.writes.requestApproval(await held(store, id, now()), ask(id), now());
    }
    await store.families.cancel("a-closed", "not wanted", now());
    await clock.advance(1_000);
    const yes = await store.operators.decideApproval("a-yes:0", "approved", "ana", null, now());
    assert.deepEqual([yes.decided, yes.runStatus], [true, "pending"]);
    assert.deepEqual(pick(yes.approval, "status", "decided_by", "decided_at"), {
      status: "approved",
      decided_by: "ana",
      decided_at: now(),
    });
    assert.equal(await statusOf("a-yes"), "pending");
    const again = await store.operators.decideApproval("a-yes:0", "denied", "bo", "too late", now());
    assert.deepEqual([again.decided, pick(again.approval, "status", "reason")], [false, {
      status: "approved",
      reason: null,
    }]);
    const closed = await store.operators.decideApproval("a-closed:0", "approved", "ana", null, now());
    assert.deepEqual([closed.decided, closed.runStatus, closed.approval?.status], [
      false,
      "cancelled",
      "pending",
    ]);
    const none = await store.operators.decideApproval("a-none:0", "approved", "ana", null, now());
    assert.deepEqual(none, { approval: undefined, decided: false, runStatus: undefined });
  });

  await t.step("reopenRun() puts a failed run back, its calls at intent allowed one more", async () => {
    const f = await held(store, "r-failed", now());
    const call = { key: "r-failed:0", seq: 0, tool: "ship", args: {} };
    await store.writes.effectIntentRow(f, call, now());
    await store.writes.effectIntentRow(f, call, now());
    await store.writes.finishRun(f, "failed", "too many attempts", now());
    await clock.advance(1_000);
    const run = await store.operators.reopenRun("r-failed", now());
    assert.deepEqual(pick(run, "status", "error", "heartbeat_at", "stuck_claims", "updated_at"), {
      status: "pending",
      error: null,
      heartbeat_at: null,
      stuck_claims: 0,
      updated_at: now(),
    });
    assert.deepEqual(pick(await store.reads.getEffect("r-failed:0"), "attempts", "attempts_at_reopen"), {
      attempts: 2,
      attempts_at_reopen: 2,
    });
    assert.equal(
      await store.operators.reopenRun("r-failed", now()),
      undefined,
      "a pending run is not reopened",
    );
    assert.equal(await statusOf("r-failed"), "pending");
  });

  await t.step("listRuns() pages newest first, with each run's counts and the total", async () => {
    const first = await held(store, "l-1", now());
    await clock.advance(1_000);
    const calls = ["a", "b", "c"].map((tool) => ({ tool, args: {} }));
    const tokens = { released: 0, spent: 40 };
    await writeDecision(store, await held(store, "l-2", now()), 0, { decision: { calls }, tokens }, now());
    await clock.advance(1_000);
    await held(store, "l-3", now());
    await store.writes.finishRun(first, "done", null, now(), "ok");
    const page = await store.operators.listRuns({ search: "l-", limit: 2 });
    assert.equal(page.total, 3);
    // l-2's three calls are decided and none sent yet: three tool calls, no tool request.
    assert.deepEqual(
      page.runs.map((r) => [r.run_id, r.tool_calls, r.llm_calls, r.tokens, r.tool_requests, r.flagged]),
      [
        ["l-3", 0, 0, 0, 0, 0],
        ["l-2", 3, 1, 40, 0, 0],
      ],
    );
    const rest = await store.operators.listRuns({ search: "l-", limit: 2, offset: 2 });
    assert.deepEqual([rest.runs.map((r) => r.run_id), rest.total], [["l-1"], 3]);
    const done = await store.operators.listRuns({ search: "l-", status: "done" });
    assert.deepEqual([done.runs.map((r) => r.run_id), done.total], [["l-1"], 1]);
    assert.equal((await store.operators.listRuns({ agent: "nobody" })).total, 0);
  });
});
