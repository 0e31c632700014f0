/**
 * Leases (`leases.ts`): a claim is a compare-and-swap on the epoch read
 * before; one heartbeat renews every run a host still holds at its epoch and
 * refuses the rest (a lone renewal at a moved epoch is FENCED); the
 * supervisor's reads name frozen workers and hosted agents from the
 * `workers` rows, and its release makes a dead owner's runs takeable at once
 * without touching their epochs. Time is a ManualClock. On PGlite and
 * PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { ManualClock } from "../base/clock.ts";
import { FencedError } from "../base/errors.ts";
import { CountingClient } from "./counting.ts";
import { Leases } from "./leases.ts";

const LEASE_MS = 10_000;

bothStoresTest("leases: claims, heartbeats, workers and release", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const staleBefore = () => new Date(clock.now().getTime() - LEASE_MS);
  const host = (name: string, agents = ["lease"]) => ({ name, agents, capacity: 4, startedAt: clock.now() });

  await t.step("a conversation's row as createOrGetRun returns it is the row it wrote", async () => {
    const made = await store.leases.createOrGetRun(
      { runId: "l-chat", agent: "lease", goal: "hello", conversationIdleMs: 60_000 },
      clock.now(),
    );
    assert.deepStrictEqual(made, await store.reads.getRun("l-chat"));
    assert.deepEqual([made.message_count, made.conversation_idle_ms, made.epoch], [1, 60_000, 0]);
    assert.equal(
      await store.leases.createRun({ runId: "l-chat", agent: "lease", goal: "again" }, clock.now()),
      false,
    );
  });

  await t.step(
    "claimRun() moves the epoch it read by one, and refuses a stale epoch or a closed run",
    async () => {
      await store.leases.createRun({ runId: "l-cas", agent: "lease", goal: "g" }, clock.now());
      assert.deepEqual(await store.leases.claimRun("l-cas", 0, "w1", clock.now()), {
        epoch: 1,
        stuck_claims: 1,
      });
      assert.equal(await store.leases.claimRun("l-cas", 0, "w2", clock.now()), undefined, "epoch 0 is gone");
      await clock.advance(1_000);
      const second = await store.leases.claimRun("l-cas", 1, "w2", clock.now());
      assert.equal(second?.epoch, 2);
      const run = await store.reads.getRun("l-cas");
      assert.deepEqual([run?.owner, run?.status, run?.heartbeat_at], ["w2", "running", clock.now()]);
      await store.writes.finishRun({ runId: "l-cas", epoch: 2 }, "done", null, clock.now(), "ok");
      assert.equal(
        await store.leases.claimRun("l-cas", 2, "w3", clock.now()),
        undefined,
        "a done run is not claimed",
      );
    },
  );

  await t.step(
    "heartbeatMany() renews the runs held at their epochs, and a moved epoch is FENCED",
    async () => {
      for (const id of ["l-kept", "l-lost"]) {
        await store.leases.createRun({ runId: id, agent: "lease", goal: "g" }, clock.now());
      }
      const kept = {
        runId: "l-kept",
        epoch: (await store.leases.claimRun("l-kept", 0, "w1", clock.now()))!.epoch,
      };
      const lost = {
        runId: "l-lost",
        epoch: (await store.leases.claimRun("l-lost", 0, "w1", clock.now()))!.epoch,
      };
      await clock.advance(2_000);
      const takenAt = clock.now();
      await store.leases.claimRun("l-lost", lost.epoch, "w2", takenAt);
      await clock.advance(3_000);
      assert.deepEqual(await store.leases.heartbeatMany(host("w1"), [kept, lost], clock.now()), ["l-kept"]);
      assert.deepEqual((await store.reads.getRun("l-kept"))?.heartbeat_at, clock.now());
      assert.deepEqual(
        (await store.reads.getRun("l-lost"))?.heartbeat_at,
        takenAt,
        "the new holder's lease stays",
      );
      assert.equal(await store.writes.heartbeat(lost, clock.now()), false);
      const refused = await store.writes.refusal(lost, "heartbeat");
      assert.ok(refused instanceof FencedError);
      assert.equal(refused.code, "FENCED");
    },
  );

  await t.step("frozenWorkers() and hostedAgents() read the workers' own heartbeats", async () => {
    await store.leases.heartbeatMany(host("w-frozen", ["mail"]), [], clock.now());
    await clock.advance(LEASE_MS + 1);
    const beatAt = clock.now();
    await store.leases.heartbeatMany(host("w-live", ["lease", "pay"]), [], beatAt);
    await store.leases.heartbeatMany(host("w-live2", ["pay"]), [], beatAt);
    assert.deepEqual(await store.leases.hostedAgents(staleBefore()), ["lease", "pay"]);
    const frozen = await store.leases.frozenWorkers(["w-frozen", "w-live", "w-nobody"], staleBefore());
    assert.deepEqual(frozen, [{ name: "w-frozen", heartbeat_at: new Date(beatAt.getTime() - LEASE_MS - 1) }]);
    // A worker restarted under its name describes the new process: its agents replace the old.
    await store.leases.heartbeatMany(host("w-live", ["ship"]), [], clock.now());
    assert.deepEqual(await store.leases.hostedAgents(staleBefore()), ["pay", "ship"]);
    await store.leases.removeWorker("w-live");
    await store.leases.removeWorker("w-live2");
    assert.deepEqual(await store.leases.hostedAgents(staleBefore()), []);
  });

  await t.step(
    "releaseRuns() clears a dead owner's running leases, epoch kept, for a take at once",
    async () => {
      const ids = ["l-dead-1", "l-dead-2", "l-dead-done", "l-alive"];
      for (const id of ids) {
        await store.leases.createRun({ runId: id, agent: "gone", goal: "g" }, clock.now());
      }
      for (const id of ids.slice(0, 3)) {
        await store.leases.claimRun(id, 0, "dead", clock.now());
      }
      await store.leases.claimRun("l-alive", 0, "alive", clock.now());
      await store.writes.finishRun({ runId: "l-dead-done", epoch: 1 }, "done", null, clock.now(), "ok");
      await clock.advance(1_000);
      assert.deepEqual(await store.leases.releaseRuns("dead", clock.now()), ["l-dead-1", "l-dead-2"]);
      const released = await store.reads.getRun("l-dead-1");
      assert.deepEqual(
        [released?.status, released?.epoch, released?.owner, released?.heartbeat_at, released?.updated_at],
        ["running", 1, "dead", null, clock.now()],
      );
      assert.equal((await store.reads.getRun("l-dead-done"))?.status, "done");
      // Well within the lease, only the released runs are takeable.
      const taken = await store.leases.takeRuns("heir", ["gone"], staleBefore(), clock.now(), 10);
      assert.deepEqual(taken.map((r) => [r.run_id, r.epoch, r.previous_owner]), [
        ["l-dead-1", 2, "dead"],
        ["l-dead-2", 2, "dead"],
      ]);
    },
  );

  await t.step("takeShare() refuses a free count outside 0..capacity before it sends anything", async () => {
    const counting = new CountingClient(store.client);
    const leases = new Leases(counting);
    for (const free of [-1, 5, 1.5]) {
      await assert.rejects(
        leases.takeShare({
          owner: "w",
          agents: ["lease"],
          staleBefore: staleBefore(),
          now: clock.now(),
          free,
          capacity: 4,
        }),
        (e: unknown) =>
          e instanceof RangeError && e.message.endsWith(`'capacity' (4): current value is ${free}`),
      );
    }
    assert.equal(counting.total, 0);
  });
});
