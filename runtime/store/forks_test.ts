/**
 * The forks' statements (forks.ts) on PGlite: a fork writes its run, its
 * copied steps and calls (under its own keys, remote 'original', no request
 * of its own) and a conversation's messages in one statement, and nothing
 * when its id is taken; a dry run starts with no original; the original's
 * call is found by tool and arguments as JSON values, confirmed only.
 */

import assert from "node:assert/strict";
import { Store } from "./store.ts";
import { ManualClock } from "../base/clock.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const store = new Store(await openTestPglite());
await store.applySchema();
const clock = new ManualClock();
Deno.test.afterAll(() => store.client.close());

/** A run with a decision at 0 (one call, confirmed) and a decision at 1 (one call, failed), claimed by w1. */
async function original(runId: string): Promise<void> {
  await store.leases.createRun({ runId, agent: "a", goal: "g", budget: { tokens: 500 } }, clock.now());
  const claimed = await store.leases.claimRun(runId, 0, "w1", clock.now());
  const fence = { runId, epoch: claimed!.epoch };
  for (const seq of [0, 1]) {
    const j = await store.writes.journalIntentRow(fence, seq, clock.now(), { fresh: true });
    await store.writes.journalConfirm(
      fence,
      j,
      { decision: { tool: "t", args: { n: seq, k: "v" } }, usage: undefined },
      clock.now(),
    );
    const e = await store.writes.effectIntentRow(
      fence,
      { key: `${runId}:${seq}`, seq, tool: "t", args: { n: seq, k: "v" } },
      clock.now(),
      true,
    );
    if (seq === 0) {
      await store.writes.effectConfirm(fence, e, { result: "r0", remote: "created" }, clock.now());
    } else await store.writes.effectSettle(fence, e, { status: "failed", error: "no" }, clock.now());
  }
}

Deno.test("fork() copies the steps and calls before its seq under the fork's keys, in one statement", async () => {
  await original("o1");
  const written = await store.forks.fork(
    { runId: "o1f", from: "o1", atSeq: 1, dryRun: true, modelParams: { model: "m2" } },
    clock.now(),
  );
  assert.deepEqual(written, { created: true, journal: 1, effects: 1, messages: 0 });
  const run = await store.reads.getRun("o1f");
  assert.deepEqual(
    [
      run?.forked_from,
      run?.forked_at_seq,
      run?.dry_run,
      run?.status,
      run?.epoch,
      run?.model_params,
      run?.budget,
    ],
    ["o1", 1, true, "pending", 0, { model: "m2" }, { tokens: 500 }],
  );
  const { journal, effects } = await store.reads.loadHistory("o1f");
  assert.deepEqual(journal.map((j) => [j.seq, j.status, j.llm_attempts, j.spent_tokens]), [[
    0,
    "confirmed",
    0,
    0,
  ]]);
  assert.deepEqual(
    effects.map((e) => [e.idempotency_key, e.status, e.result, e.remote, e.attempts]),
    [["o1f:0", "confirmed", "r0", "original", 0]],
  );
  const again = await store.forks.fork({ runId: "o1f", from: "o1", atSeq: 2, dryRun: false }, clock.now());
  assert.deepEqual(
    again,
    { created: false, journal: 0, effects: 0, messages: 0 },
    "a taken id writes nothing",
  );
  const whole = await store.forks.fork({ runId: "o1g", from: "o1", atSeq: 2, dryRun: false }, clock.now());
  assert.deepEqual([whole.journal, whole.effects], [2, 2]);
  const failed = (await store.reads.loadHistory("o1g")).effects[1];
  assert.deepEqual(
    [failed.status, failed.remote, failed.error],
    ["failed", null, "no"],
    "a failed call stays failed",
  );
});

Deno.test("originalCall() finds a confirmed call by tool and arguments, whatever the order of their keys", async () => {
  await original("o2");
  assert.deepEqual(await store.forks.originalCall("o2", "t", { k: "v", n: 0 }), {
    idempotency_key: "o2:0",
    result: "r0",
  });
  assert.equal(
    await store.forks.originalCall("o2", "t", { k: "v", n: 1 }),
    undefined,
    "a failed call answers nothing",
  );
  assert.equal(await store.forks.originalCall("o2", "u", { k: "v", n: 0 }), undefined, "another tool");
  assert.equal(await store.forks.originalCall("o2", "t", { k: "w", n: 0 }), undefined, "other arguments");
});

Deno.test("startDry() makes a pending dry run with no original, once", async () => {
  const made = await store.forks.startDry(
    { runId: "d1", agent: "a", goal: "go", input: "go", evalId: "e", budget: { tokens: 9 } },
    clock.now(),
  );
  assert.equal(made, true);
  const run = await store.reads.getRun("d1");
  assert.deepEqual([run?.dry_run, run?.forked_from, run?.eval_id, run?.budget], [true, null, "e", {
    tokens: 9,
  }]);
  assert.equal(
    await store.forks.startDry({ runId: "d1", agent: "a", goal: "x", input: "x" }, clock.now()),
    false,
  );
});
