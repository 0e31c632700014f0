/**
 * Claims and takes (`claims.ts`): a take claims the runs that waited longest
 * (a pending run since its creation, an abandoned one since its last
 * heartbeat, a woken one since its wake time), up to its limit, each at a new
 * epoch, and never a run with a live lease, one waiting for a person or one
 * of another agent; a claim counts the run's progress, so claims that find
 * none are counted and backed off; a waiting run is claimed only once its
 * wake time has come; a family's take stays in its family. Time is a
 * ManualClock. On PGlite and PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { ManualClock } from "../base/clock.ts";
import type { Fence, Store } from "./store.ts";
import { TAKE_RUNS, TAKE_RUNS_QUERY } from "./claims.ts";
import { MIGRATIONS } from "./migrate.ts";

const LEASE_MS = 10_000;

/** Creates `runId` of `agent` at `now` and, with `owner`, claims it: its fence. */
async function made(store: Store, runId: string, agent: string, now: Date, owner?: string): Promise<Fence> {
  await store.leases.createRun({ runId, agent, goal: "g" }, now);
  if (owner === undefined) return { runId, epoch: 0 };
  return { runId, epoch: (await store.leases.claimRun(runId, 0, owner, now))!.epoch };
}

/** A take's runs by id (it claims the longest waiting, but sends them back in no set order). */
const byId = <R extends { run_id: string }>(rows: R[]): R[] =>
  [...rows].sort((a, b) => a.run_id.localeCompare(b.run_id));

bothStoresTest("claims and takes", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const ms = (n: number) => new Date(Date.UTC(2026, 0, 1) + n);
  const stale = () => new Date(clock.now().getTime() - LEASE_MS);
  const take = async (agents: string[], limit: number) =>
    byId(await store.leases.takeRuns("taker", agents, stale(), clock.now(), limit));

  await t.step(
    "a take claims the longest waiting first, up to its limit, and passes the rest by",
    async () => {
      await made(store, "t-abandoned", "order", clock.now(), "w-old"); // lease from 0 ms
      await clock.advance(1_000);
      await made(store, "t-pending-1", "order", clock.now()); // waits from 1000
      await clock.advance(1_000);
      const woken = await made(store, "t-woken", "order", clock.now(), "w-old");
      await store.writes.retryRun(woken, ms(3_000), "model down", clock.now()); // waits from 3000
      await clock.advance(2_000);
      await made(store, "t-pending-4", "order", clock.now()); // waits from 4000
      const woken5 = await made(store, "t-woken-5", "order", clock.now(), "w-old");
      await store.writes.retryRun(woken5, ms(5_000), "model down", clock.now()); // waits from 5000
      const asleep = await made(store, "t-asleep", "order", clock.now(), "w-old");
      await store.writes.retryRun(asleep, ms(60_000), "model down", clock.now());
      const person = await made(store, "t-person", "order", clock.now(), "w-old");
      const ask = { key: "t-person:0", seq: 0, tool: "pay", args: {}, hash: "h" };
      assert.equal((await store.writes.requestApproval(person, ask, clock.now())).waiting, true);
      await made(store, "t-other-agent", "other", ms(0));
      await clock.advance(LEASE_MS);
      await made(store, "t-live", "order", clock.now(), "w-live");

      // Taken one kind or the other, in the order they have waited: a take of two, then of one each.
      const takes = [await take(["order"], 2)];
      for (let i = 0; i < 3; i++) takes.push(await take(["order"], 1));
      assert.deepEqual(takes.map((runs) => runs.map((r) => [r.run_id, r.epoch, r.previous_owner])), [
        [["t-abandoned", 2, "w-old"], ["t-pending-1", 1, null]],
        [["t-woken", 2, "w-old"]],
        [["t-pending-4", 1, null]],
        [["t-woken-5", 2, "w-old"]],
      ]);
      assert.deepEqual(takes[0][0].previous_heartbeat_at, ms(0));
      for (const r of takes.flat()) {
        assert.deepEqual([r.status, r.owner, r.heartbeat_at, r.wake_at], [
          "running",
          "taker",
          clock.now(),
          null,
        ]);
      }
      assert.deepEqual(await take(["order"], 3), [], "a live lease, a later wake time, a person's answer");
      assert.equal((await store.reads.getRun("t-person"))?.status, "waiting");
    },
  );

  await t.step(
    "a claim counts progress: stuck claims grow and keep the error until a step is made",
    async () => {
      const f = await made(store, "t-stuck", "stuck", clock.now(), "w1");
      assert.equal(await store.writes.releaseRun(f, "worker crashed", clock.now()), true);
      const again = await store.leases.claimRun("t-stuck", f.epoch, "w2", clock.now());
      assert.deepEqual(again, { epoch: 2, stuck_claims: 2 });
      assert.equal((await store.reads.getRun("t-stuck"))?.error, "worker crashed", "kept to name the cause");
      await writeDecision(
        store,
        { runId: "t-stuck", epoch: 2 },
        0,
        { decision: { tool: "x", args: {} } },
        clock.now(),
      );
      assert.deepEqual(await store.leases.claimRun("t-stuck", 2, "w3", clock.now()), {
        epoch: 3,
        stuck_claims: 1,
      });
      const run = await store.reads.getRun("t-stuck");
      assert.deepEqual([run?.error, run?.progress_mark], [null, 1]);
      assert.deepEqual(await store.leases.claimRun("t-stuck", 3, "w4", clock.now()), {
        epoch: 4,
        stuck_claims: 2,
      });
    },
  );

  await t.step("a run whose claims find no progress is taken again only after its backoff", async () => {
    const f = await made(store, "t-backoff", "backoff", clock.now(), "w1");
    const second = {
      runId: f.runId,
      epoch: (await store.leases.claimRun(f.runId, f.epoch, "w2", clock.now()))!.epoch,
    };
    await store.writes.releaseRun(second, "died", clock.now()); // two claims without progress: 500 ms
    await clock.advance(499);
    assert.deepEqual(await take(["backoff"], 5), []);
    await clock.advance(2);
    const [taken] = await take(["backoff"], 5);
    assert.deepEqual([taken?.run_id, taken?.stuck_claims], ["t-backoff", 3]);
    await store.writes.releaseRun({ runId: f.runId, epoch: taken.epoch }, "died", clock.now()); // now 1000 ms
    await clock.advance(999);
    assert.deepEqual(await take(["backoff"], 5), []);
    await clock.advance(2);
    assert.equal((await take(["backoff"], 5)).length, 1);
  });

  await t.step(
    "a waiting run is claimed only once its wake time has come, which the claim clears",
    async () => {
      const f = await made(store, "t-wake", "wake", clock.now(), "w1");
      await store.writes.retryRun(f, new Date(clock.now().getTime() + 5_000), "model down", clock.now());
      assert.equal(await store.leases.claimRun("t-wake", f.epoch, "w2", clock.now()), undefined);
      await clock.advance(5_000);
      assert.equal((await store.leases.claimRun("t-wake", f.epoch, "w2", clock.now()))?.epoch, f.epoch + 1);
      const run = await store.reads.getRun("t-wake");
      assert.deepEqual([run?.status, run?.wake_at, run?.owner], ["running", null, "w2"]);
    },
  );

  await t.step("a family's take claims its root and the runs under it, and no other run", async () => {
    const root = await made(store, "t-root", "boss", clock.now(), "w1");
    await writeDecision(store, root, 0, { decision: { tool: "helper", args: {} } }, clock.now());
    await store.writes.effectIntentRow(
      root,
      { key: "t-root:0", seq: 0, tool: "helper", args: {} },
      clock.now(),
      true,
    );
    await clock.advance(1_000);
    const child = { runId: "t-root.0", agent: "helper", goal: "g", input: "g", parentKey: "t-root:0" };
    await store.families.createChild(root, child, clock.now());
    await made(store, "t-stranger", "helper", ms(0));
    await store.writes.releaseRun(root, "host stopped", clock.now());
    const taken = byId(
      await store.leases.takeFamily("solo", ["boss", "helper"], "t-root", stale(), clock.now(), 10),
    );
    assert.deepEqual(taken.map((r) => [r.run_id, r.owner, r.epoch]), [["t-root", "solo", 2], [
      "t-root.0",
      "solo",
      1,
    ]]);
    assert.equal((await store.reads.getRun("t-stranger"))?.status, "pending");
  });
});

Deno.test("the take's function in schema.sql runs TAKE_RUNS_QUERY, as its last migration wrote it", () => {
  // take_runs (a plan kept per session) is the host's take; claims.ts builds its query from the pieces
  // the family's take shares. A change to them is a new migration replacing the function.
  const defined = MIGRATIONS.filter((m) => m.sql.includes("function take_runs("));
  assert.ok(defined.length > 0, "schema.sql defines take_runs");
  const sql = defined[defined.length - 1].sql;
  const body = /\$take\$\s*begin\s+return query\s+([\s\S]*?);\s*end\s*\$take\$/.exec(sql);
  assert.ok(body, "take_runs is one `return query`");
  const words = (text: string) => text.trim().split(/\s+/).join(" ");
  assert.equal(words(body[1]), words(TAKE_RUNS_QUERY));
  // The host sends a call of it, with the query's eight parameters.
  assert.match(TAKE_RUNS.text, /from take_runs\(\$1, [^)]*\$8::text\[\]\) t$/);
});
