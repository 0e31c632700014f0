/**
 * Versions in the store (`versions.ts`, and the take keys of `claims.ts`): a
 * take starts a run on the version its host names and keeps it there: only a
 * host of that version takes it again; a run that may move is marked by a
 * newer version's worker and handed to it at a take once none of its calls is
 * in flight, the move recorded; an operator moves any run; a worker that
 * cannot carry a moved run sends it back, fenced; the fair share counts only
 * the workers of a run's version. Time is a ManualClock. On PGlite and
 * PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { ManualClock } from "../base/clock.ts";
import type { Store, TakeVersions } from "./store.ts";

const LEASE_MS = 10_000;

bothStoresTest("versions: takes by version, moves, refusals", async (store: Store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const stale = () => new Date(clock.now().getTime() - LEASE_MS);
  /**
   * A host of `keys` (with `notes@` for new runs, started on `bind`) takes up to `limit`: the runs it
   * took, but `v-pinned`, which a take may pick up again once its lease has lapsed.
   */
  const take = async (owner: string, keys: string[], versions: TakeVersions, limit = 10) =>
    (await store.leases.takeRuns(owner, keys, stale(), clock.now(), limit, versions))
      .filter((r) => r.run_id !== "v-pinned" || r.epoch === 1)
      .map((r) => [r.run_id, r.agent_version, r.may_move, r.previous_version ?? null, r.move_to])
      .sort();
  const V1 = { bind: ["notes@v1"], movable: ["notes@v1"] };
  const V2 = { bind: ["notes@v2"], movable: [] };
  // Let go, and past the backoff of runs taken again and again without progress.
  const release = async (runId: string) => {
    const run = (await store.reads.getRun(runId))!;
    assert.equal(await store.writes.releaseRun({ runId, epoch: run.epoch }, "", clock.now()), true);
    await clock.advance(61_000);
  };

  await t.step("a new run is started on the version its taker names, and stays on it", async () => {
    await store.versions.register(["notes@v1"], clock.now());
    await clock.advance(1);
    await store.versions.register(["notes@v2"], clock.now());
    await store.leases.createRun({ runId: "v-a", agent: "notes", goal: "g" }, clock.now());
    assert.deepEqual(
      await take("w2", ["notes@v2"], V2),
      [],
      "a host of v2 alone takes no run not yet started",
    );
    assert.deepEqual(await take("w1", ["notes@", "notes@v1"], V1), [["v-a", "v1", true, null, null]]);
    await release("v-a");
    assert.deepEqual(await take("w2", ["notes@", "notes@v2"], V2), [], "started on v1: not a v2 host's");
    assert.deepEqual(await take("w1", ["notes@", "notes@v1"], V1), [["v-a", "v1", true, "v1", null]]);
    assert.deepEqual(
      (await store.versions.order("notes")).map((v) => v.version),
      ["v1", "v2"],
      "the order first seen",
    );
  });

  await t.step(
    "a newer version marks the runs that may move; the holder hears it in its heartbeat",
    async () => {
      await store.leases.createRun({ runId: "v-pinned", agent: "notes", goal: "g" }, clock.now());
      assert.deepEqual(await take("w1", ["notes@", "notes@v1"], { bind: ["notes@v1"] }), [
        ["v-pinned", "v1", false, null, null],
      ]);
      assert.deepEqual(
        await store.versions.markMoves("notes", "v2"),
        ["v-a"],
        "the pinned run is left alone",
      );
      assert.deepEqual(await store.versions.markMoves("notes", "v1"), [], "never to an older version");
      const held = await Promise.all(["v-a", "v-pinned"].map((id) => store.reads.getRun(id)));
      const beat = await store.leases.beat(
        {
          name: "w1",
          agents: ["notes"],
          capacity: 4,
          startedAt: clock.now(),
          takeKeys: ["notes@", "notes@v1"],
        },
        held.map((r) => ({ runId: r!.run_id, epoch: r!.epoch })),
        clock.now(),
      );
      assert.deepEqual(beat.map((r) => [r.run_id, r.move_to]).sort(), [["v-a", "v2"], ["v-pinned", null]]);
    },
  );

  await t.step(
    "a marked run with a call in flight stays with its version while a worker of it lives",
    async () => {
      const run = (await store.reads.getRun("v-a"))!;
      const f = { runId: "v-a", epoch: run.epoch };
      const decision = { tool: "write_note", args: { title: "t" } };
      await writeDecision(store, f, 0, { decision }, clock.now());
      const intent = await store.writes.effectIntentRow(
        f,
        { key: "v-a:0", seq: 0, tool: "write_note", args: { title: "t" } },
        clock.now(),
      );
      await release("v-a");
      const live = (name: string, takeKeys: string[]) =>
        store.leases.heartbeatMany(
          { name, agents: ["notes"], capacity: 4, startedAt: clock.now(), takeKeys },
          [],
          clock.now(),
        );
      await live("w1", ["notes@", "notes@v1"]);
      assert.deepEqual(
        await take("w2", ["notes@", "notes@v2"], V2),
        [],
        "its call was sent by v1, which lives",
      );
      assert.deepEqual(
        await take("w1", ["notes@", "notes@v1"], V1),
        [["v-a", "v1", true, "v1", "v2"]],
        "a v1 host takes it, told where it goes",
      );
      // No worker of v1 is left (its heartbeat lapsed): v2 takes it, call in flight and all (host/moves.ts
      // then settles the call only if it would send the same request).
      await release("v-a");
      assert.deepEqual(await take("w2", ["notes@", "notes@v2"], V2), [["v-a", "v2", true, "v1", null]]);
      const moved = (await store.reads.getRun("v-a"))!;
      assert.deepEqual([moved.moved_from, moved.moved_at], ["v1", clock.now()]);
      await store.writes.effectConfirm(
        { runId: "v-a", epoch: moved.epoch },
        intent,
        { result: "ok", remote: "created" },
        clock.now(),
      );
    },
  );

  await t.step(
    "a worker that cannot carry the run sends it back, fenced, and it is not marked again",
    async () => {
      const run = (await store.reads.getRun("v-a"))!;
      assert.equal(
        await store.versions.moveBack({ runId: "v-a", epoch: run.epoch + 1 }, "v1", "v2", "no", clock.now()),
        false,
        "another epoch writes nothing",
      );
      const why = "notes@v2 cannot carry step 2: Unknown tool";
      assert.equal(
        await store.versions.moveBack({ runId: "v-a", epoch: run.epoch }, "v1", "v2", why, clock.now()),
        true,
      );
      const back = (await store.reads.getRun("v-a"))!;
      assert.deepEqual(
        [back.status, back.agent_version, back.move_to, back.move_refused, back.error, back.heartbeat_at],
        ["pending", "v1", null, "v2", why, null],
      );
      assert.deepEqual(await store.versions.markMoves("notes", "v2"), [], "v2 refused it");
      await clock.advance(61_000); // past the backoff of a run taken without progress
      assert.deepEqual(await take("w2", ["notes@", "notes@v2"], V2), []);
      assert.deepEqual(await take("w1", ["notes@", "notes@v1"], V1), [["v-a", "v1", true, "v1", null]]);
    },
  );

  await t.step("an operator moves any run, pinned ones too; a single claim records the move", async () => {
    const moved = await store.versions.requestMove(
      { agent: "notes", to: "v2", runId: "v-pinned" },
      clock.now(),
    );
    assert.deepEqual(moved, [{ run_id: "v-pinned", agent_version: "v1" }]);
    const run = (await store.reads.getRun("v-pinned"))!;
    assert.equal(run.move_to, "v2");
    const claimed = await store.leases.claimRun("v-pinned", run.epoch, "w2", clock.now(), {
      version: "v2",
      mayMove: false,
    });
    assert.ok(claimed);
    const after = (await store.reads.getRun("v-pinned"))!;
    assert.deepEqual([after.agent_version, after.moved_from, after.move_to, after.may_move], [
      "v2",
      "v1",
      null,
      false,
    ]);
  });

  await t.step("the fair share counts only the workers of a run's version", async () => {
    await clock.advance(LEASE_MS * 2);
    const host = (name: string, keys: string[]) => ({
      name,
      agents: ["share"],
      capacity: 10,
      startedAt: clock.now(),
      takeKeys: keys,
    });
    await store.leases.heartbeatMany(host("s1", ["share@", "share@v1"]), [], clock.now());
    await store.leases.heartbeatMany(host("s2", ["share@", "share@v2"]), [], clock.now());
    for (let i = 0; i < 6; i++) {
      await store.leases.createRun({ runId: `s-${i}`, agent: "share", goal: "g" }, clock.now());
    }
    // Started on v1 by s1, then let go: only s1 hosts v1, so its share is all six.
    const started = await store.leases.takeRuns("s1", ["share@", "share@v1"], stale(), clock.now(), 6, {
      bind: ["share@v1"],
    });
    assert.equal(started.length, 6);
    for (const r of started) await release(r.run_id);
    await store.leases.heartbeatMany(host("s1", ["share@", "share@v1"]), [], clock.now());
    await store.leases.heartbeatMany(host("s2", ["share@", "share@v2"]), [], clock.now());
    const again = await store.leases.takeShare({
      owner: "s1",
      agents: ["share@", "share@v1"],
      staleBefore: stale(),
      now: clock.now(),
      free: 10,
      capacity: 10,
      versions: { bind: ["share@v1"] },
    });
    assert.equal(again.length, 6, "not halved by the v2 worker, which cannot take them");
    assert.deepEqual(await store.versions.liveKeys(stale()), ["share@", "share@v1", "share@v2"]);
  });
});
