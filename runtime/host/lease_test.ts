import assert from "node:assert/strict";
import { ManualClock } from "../base/clock.ts";
import { FencedError, StoreError } from "../base/errors.ts";
import { keepLease, LeaseKeeper, type LeaseKeeperOptions } from "./lease.ts";
import { arraySink, Logger } from "../base/log.ts";
import type { Fence, Store } from "../store/store.ts";

interface Event {
  level: string;
  event: string;
  [field: string]: unknown;
}

/** A keeper on a manual clock (3 s beats, a 12 s lease) whose renewals answer as `answer` says. */
function keeper(
  answer: (fences: readonly Fence[]) => Promise<readonly string[] | boolean>,
  opts: Partial<LeaseKeeperOptions> = {},
) {
  const clock = new ManualClock();
  const lines: string[] = [];
  const beats: string[][] = [];
  const crash = { stalling: false };
  const leases = new LeaseKeeper({
    clock,
    log: new Logger({ clock, sink: arraySink(lines), format: "json" }),
    crash,
    heartbeatMs: 3_000,
    leaseMs: 12_000,
    renew: (fences) => {
      beats.push(fences.map((f) => `${f.runId}@${f.epoch}`));
      return answer(fences);
    },
    refusal: (f) =>
      Promise.resolve(
        new FencedError("RUN_CLOSED", `Write refused (heartbeat): run ${f.runId} is cancelled`),
      ),
    subject: { owner: "host-1" },
    ...opts,
  });
  const events = (name?: string) =>
    lines.map((l) => JSON.parse(l) as Event).filter((e) => name === undefined || e.event === name);
  return { clock, leases, beats, crash, events };
}

const renewAll = (fences: readonly Fence[]) => Promise.resolve(fences.map((f) => f.runId));

Deno.test("LeaseKeeper renews every run it holds in one call, heartbeatMs after the last beat", async () => {
  const { clock, leases, beats } = keeper(renewAll);
  leases.start();
  leases.hold({ runId: "a", epoch: 1 }, new AbortController());
  leases.hold({ runId: "b", epoch: 4 }, new AbortController());
  await clock.advance(2_999);
  assert.deepEqual(beats, [], "no beat before heartbeatMs");
  await clock.advance(1);
  assert.deepEqual(beats, [["a@1", "b@4"]]);
  await clock.advance(3_000);
  assert.deepEqual(beats, [["a@1", "b@4"], ["a@1", "b@4"]]);
  await leases.stop();
  await clock.advance(30_000);
  assert.equal(beats.length, 2, "a stopped keeper beats no more");
  assert.equal(clock.pending, 0, "and leaves no timer");
});

Deno.test("LeaseKeeper aborts a run whose renewal was refused, with the refusal, and renews it no more", async () => {
  const { clock, leases, beats, events } = keeper((fences) =>
    Promise.resolve(fences.filter((f) => f.runId !== "cancelled").map((f) => f.runId))
  );
  leases.start();
  const kept = new AbortController();
  const refused = new AbortController();
  leases.hold({ runId: "kept", epoch: 1 }, kept);
  leases.hold({ runId: "cancelled", epoch: 2 }, refused);
  await clock.advance(3_000);
  assert.equal(kept.signal.aborted, false);
  assert.ok(refused.signal.reason instanceof FencedError);
  assert.equal(refused.signal.reason.code, "RUN_CLOSED");
  assert.deepEqual(events("heartbeat-refused"), [{
    ts: "2026-01-01T00:00:03.000Z",
    level: "WARN",
    event: "heartbeat-refused",
    run: "cancelled",
    epoch: 2,
    reason: "Write refused (heartbeat): run cancelled is cancelled",
  }]);
  assert.equal(leases.held, 1);
  await clock.advance(3_000);
  assert.deepEqual(beats, [["kept@1", "cancelled@2"], ["kept@1"]]);
  await leases.stop();
});

Deno.test("LeaseKeeper gives up every run once the database has been unreachable for longer than the lease", async () => {
  let down = false;
  const { clock, leases, beats, events } = keeper((fences) =>
    down ? Promise.reject(new StoreError("DB_UNREACHABLE", "Cannot reach the database")) : renewAll(fences)
  );
  leases.start();
  const runs = [new AbortController(), new AbortController()];
  leases.hold({ runId: "a", epoch: 1 }, runs[0]);
  leases.hold({ runId: "b", epoch: 1 }, runs[1]);
  await clock.advance(3_000); // renewed at +3 s
  down = true;
  await clock.advance(12_000); // failed beats at +6, +9, +12, +15 s: 12 s since the last renewal, not more
  assert.deepEqual(events("heartbeat-failed").map((e) => [e.owner, e.since_ms]), [
    ["host-1", 3_000],
    ["host-1", 6_000],
    ["host-1", 9_000],
    ["host-1", 12_000],
  ]);
  assert.ok(runs.every((r) => !r.signal.aborted), "a lease not yet past leaseMs is still this process's");
  await clock.advance(3_000);
  assert.deepEqual(events("lease-lost").map((e) => [e.level, e.run, e.since_ms]), [
    ["ERROR", "a", 15_000],
    ["ERROR", "b", 15_000],
  ]);
  for (const r of runs) {
    assert.ok(r.signal.reason instanceof FencedError);
    assert.equal(r.signal.reason.code, "STALLED");
    assert.equal(r.signal.reason.message, "The lease could not be renewed for 15000ms");
  }
  assert.equal(leases.held, 0, "a lost lease is renewed no more");
  const sent = beats.length;
  down = false;
  await clock.advance(3_000);
  assert.equal(
    beats.length,
    sent,
    "nothing left to renew, so no beat (a single run's keeper: no timer either)",
  );
  assert.equal(clock.pending, 0);
  await leases.stop();
});

Deno.test("LeaseKeeper sends no beat while the process is parked at a stall point", async () => {
  const { clock, leases, beats, crash } = keeper(renewAll);
  leases.start();
  leases.hold({ runId: "a", epoch: 1 }, new AbortController());
  crash.stalling = true;
  await clock.advance(9_000);
  assert.deepEqual(beats, [], "a frozen process does not heartbeat: its runs become stealable");
  crash.stalling = false;
  await clock.advance(3_000);
  assert.deepEqual(beats, [["a@1"]], "it beats again once the stall ends");
  await leases.stop();
});

Deno.test("LeaseKeeper runs a timer only while it holds a run, unless it beats when idle", async (t) => {
  await t.step(
    "a single run's keeper: the timer starts with the hold and ends with the release",
    async () => {
      const { clock, leases, beats } = keeper(renewAll);
      leases.start();
      assert.equal(clock.pending, 0);
      const release = leases.hold({ runId: "a", epoch: 1 }, new AbortController());
      assert.equal(clock.pending, 1);
      release();
      assert.equal(clock.pending, 0);
      await clock.advance(10_000);
      assert.deepEqual(beats, []);
    },
  );
  await t.step("a host's keeper: it beats with no run held (the beat renews its own row)", async () => {
    let renewed = 0;
    const { clock, leases, beats } = keeper(renewAll, { beatWhenIdle: true, onRenewed: () => renewed++ });
    leases.start();
    await clock.advance(6_000);
    assert.deepEqual(beats, [[], []]);
    assert.equal(renewed, 2);
    await leases.stop();
    assert.equal(clock.pending, 0);
  });
});

Deno.test("LeaseKeeper does not judge a run released while its beat was on its way", async () => {
  let answer!: (ids: string[]) => void;
  const { clock, leases, beats, events } = keeper(() => new Promise((r) => answer = r));
  leases.start();
  const stop = new AbortController();
  const release = leases.hold({ runId: "done-meanwhile", epoch: 1 }, stop);
  await clock.advance(3_000);
  assert.equal(beats.length, 1);
  release(); // the run ended; the database then says its lease was not renewed (it is closed)
  answer([]);
  await clock.advance(0);
  assert.equal(stop.signal.aborted, false);
  assert.deepEqual(events("heartbeat-refused"), []);
  await leases.stop();
});

Deno.test("LeaseKeeper.stop() waits for the beat on its way and ignores what it meets", async () => {
  let fail!: (err: Error) => void;
  const { clock, leases, events } = keeper(() => new Promise((_, reject) => fail = reject), {
    leaseMs: 1_000,
  });
  leases.start();
  const stop = new AbortController();
  leases.hold({ runId: "a", epoch: 1 }, stop);
  await clock.advance(3_000);
  let stopped = false;
  const stopping = leases.stop().then(() => stopped = true);
  await clock.advance(0);
  assert.equal(stopped, false, "the beat is still on its way");
  fail(new StoreError("DB_UNREACHABLE", "Cannot reach the database"));
  await stopping;
  assert.deepEqual(events(), [], "no heartbeat-failed, no lease-lost: the keeper was stopped");
  assert.equal(stop.signal.aborted, false);
  assert.equal(clock.pending, 0);
});

Deno.test("keepLease() renews one run with the one-run heartbeat statement and names the run when it fails", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines), format: "json" });
  const calls: string[] = [];
  let down = false;
  const store = {
    writes: {
      heartbeat: (f: Fence) => {
        calls.push(`heartbeat ${f.runId}@${f.epoch}`);
        return down ? Promise.reject(new StoreError("DB_UNREACHABLE", "gone")) : Promise.resolve(true);
      },
    },
    leases: {
      heartbeatMany: () => Promise.reject(new Error("a single run's lease is renewed on its own")),
    },
  } as unknown as Store;
  const stop = new AbortController();
  const lease = keepLease(
    { store, clock, log, crash: { stalling: false } as never, heartbeatMs: 3_000, leaseMs: 12_000 },
    { runId: "one", epoch: 3 },
    stop,
  );
  await clock.advance(3_000);
  down = true;
  await clock.advance(3_000);
  assert.deepEqual(calls, ["heartbeat one@3", "heartbeat one@3"]);
  const failed = lines.map((l) => JSON.parse(l)).find((e) => e.event === "heartbeat-failed");
  assert.equal(failed?.run, "one");
  assert.equal(failed?.since_ms, 3_000);
  lease.stop();
  assert.equal(clock.pending, 0);
  assert.equal(stop.signal.aborted, false);
});

/** A keeper holding run `a`, renewed at +3 s, whose beat at +6 s (carrying `a`) never answers. */
async function hungAtSixSeconds() {
  let hang = false;
  const k = keeper((fences) => hang ? new Promise<never>(() => {}) : renewAll(fences));
  k.leases.start();
  const a = new AbortController();
  k.leases.hold({ runId: "a", epoch: 1 }, a);
  await k.clock.advance(3_000); // renewed at +3 s
  hang = true;
  await k.clock.advance(3_000); // the beat at +6 s never answers
  assert.equal(k.beats.length, 2);
  return { ...k, a };
}

Deno.test("LeaseKeeper gives its runs up when a renewal does not answer by the lease's end (a cut link hangs, it does not fail)", async () => {
  const { clock, leases, beats, events, a: run } = await hungAtSixSeconds();
  await clock.advance(8_999); // +14.999 s: the lease (12 s from +3 s) has not ended
  assert.equal(run.signal.aborted, false, "the lease is this process's until it ends");
  assert.deepEqual(events("heartbeat-failed"), [], "a renewal that hangs has not failed");
  await clock.advance(2);
  assert.ok(run.signal.reason instanceof FencedError);
  assert.equal(run.signal.reason.code, "STALLED");
  assert.deepEqual(events("lease-lost").map((e) => [e.run, e.since_ms, e.renewal]), [[
    "a",
    12_001,
    "unanswered",
  ]]);
  assert.equal(leases.held, 0);
  assert.equal(beats.length, 2, "no second beat while one is on its way");
});

Deno.test("LeaseKeeper gives up at the lease's end the runs it took while a renewal hung, not only those the renewal carried", async () => {
  const { clock, leases, beats, events } = await hungAtSixSeconds();
  const b = new AbortController();
  leases.hold({ runId: "b", epoch: 1 }, b); // taken after that beat left: no beat renews it while it hangs
  await clock.advance(9_001); // +15.001 s: the lease renewed at +3 s has ended
  assert.deepEqual(beats, [["a@1"], ["a@1"]]);
  assert.deepEqual(events("lease-lost").map((e) => e.run), ["a", "b"]);
  assert.equal(b.signal.aborted, true, "a run no beat renews is given up with the others");
  assert.equal(leases.held, 0);
});
