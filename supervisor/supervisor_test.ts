import assert from "node:assert/strict";
import { ManualClock, settle } from "../runtime/clock.ts";
import { arraySink, Logger } from "../runtime/log.ts";
import type { Store } from "../runtime/store/store.ts";
import { pgTest } from "../tests/_pg.ts";
import { type SpawnWorker, Supervisor, type WorkerHandle } from "./supervisor.ts";

/** A stand-in worker process: exits when told to, or on any signal. */
interface FakeWorker extends WorkerHandle {
  runId: string;
  workerName: string;
  signals: Deno.Signal[];
  exit(code: number): void;
}

function fakeSpawner(): { spawn: SpawnWorker; workers: FakeWorker[] } {
  const workers: FakeWorker[] = [];
  let pid = 1000;
  const spawn: SpawnWorker = (runId, workerName) => {
    let exit!: (code: number) => void;
    const exited = new Promise<number>((r) => (exit = r));
    const w: FakeWorker = {
      pid: ++pid,
      runId,
      workerName,
      exited,
      signals: [],
      exit,
      kill(signal) {
        w.signals.push(signal);
        exit(signal === "SIGKILL" ? 137 : 143);
      },
    };
    workers.push(w);
    return w;
  };
  return { spawn, workers };
}

function supervisor(
  store: Store,
  clock: ManualClock,
  spawn: SpawnWorker,
  lines: string[],
  name = "sup-1",
  maxWorkers = 2,
) {
  return new Supervisor({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    spawn,
    name,
    leaseMs: 12_000,
    pollMs: 3_000,
    heartbeatMs: 3_000,
    maxWorkers,
  });
}

pgTest(
  "Supervisor.poll() takes pending runs and expired leases, never live ones, up to maxWorkers",
  async (pg) => {
    const clock = new ManualClock();
    const { store } = pg;
    const t0 = clock.now();
    await store.createRun("live", "g", t0);
    await store.claim("live", 0, "w-live", t0);
    await store.createRun("dead", "g", t0);
    await store.claim("dead", 0, "w-dead", t0);
    await clock.advance(11_000);
    await store.heartbeat({ runId: "live", epoch: 1 }, clock.now());
    await store.createRun("new-1", "g", clock.now());
    await store.createRun("new-2", "g", clock.now());
    await clock.advance(2_000); // "dead" is now 13 s without a heartbeat; "live" 2 s.

    const { spawn, workers } = fakeSpawner();
    const lines: string[] = [];
    const sup = supervisor(store, clock, spawn, lines);
    const first = await sup.poll();
    assert.equal(first.length, 2, "limited to maxWorkers");
    assert.equal(first[0].run_id, "dead", "the oldest heartbeat goes first");
    assert.equal(sup.workers, 2);
    assert.equal(await sup.poll().then((r) => r.length), 0, "no free slot");
    for (const w of workers) w.exit(0);
    await settle();
    const second = await sup.poll();
    const taken = [...first, ...second].map((r) => r.run_id).sort();
    assert.deepEqual(taken, ["dead", "new-1", "new-2"]);
    // The lease handoff: the runs carry the supervisor's name and a fresh heartbeat.
    const dead = await store.getRun("dead");
    assert.equal(dead?.owner, "sup-1");
    assert.equal(dead?.heartbeat_at?.getTime(), clock.now().getTime());
    assert.equal(dead?.epoch, 1, "taking does not claim: the worker does");
    assert.ok(lines.some((l) => /INFO {2}resuming {2}run=dead {2}pid=\d+/.test(l)));
    await sup.stop();
  },
);

pgTest("two supervisors polling at once take each run exactly once", async (pg) => {
  const clock = new ManualClock();
  for (let i = 0; i < 40; i++) await pg.store.createRun(`r${i}`, "g", clock.now());
  const a = fakeSpawner();
  const b = fakeSpawner();
  const sa = new Supervisor({
    store: pg.store,
    clock,
    log: new Logger({ clock, sink: () => {} }),
    spawn: a.spawn,
    name: "sup-a",
    leaseMs: 12_000,
    pollMs: 3_000,
    heartbeatMs: 3_000,
    maxWorkers: 40,
  });
  const sb = new Supervisor({
    store: pg.store,
    clock,
    log: new Logger({ clock, sink: () => {} }),
    spawn: b.spawn,
    name: "sup-b",
    leaseMs: 12_000,
    pollMs: 3_000,
    heartbeatMs: 3_000,
    maxWorkers: 40,
  });
  // Bounded: each round takes at least one run or ends.
  for (let round = 0; round < 40; round++) {
    const [x, y] = await Promise.all([sa.poll(), sb.poll()]);
    if (x.length + y.length === 0) break;
  }
  const taken = [...a.workers, ...b.workers].map((w) => w.runId).sort();
  assert.equal(taken.length, 40);
  assert.equal(new Set(taken).size, 40, "a run was taken twice");
  await Promise.all([sa.stop(), sb.stop()]);
});

pgTest(
  "a supervisor restarts its own dead worker's open run at once, and leaves closed runs alone",
  async (pg) => {
    const clock = new ManualClock();
    const { store } = pg;
    await store.createRun("crashy", "g", clock.now());
    await store.createRun("fine", "g", clock.now());
    const { spawn, workers } = fakeSpawner();
    const lines: string[] = [];
    const sup = supervisor(store, clock, spawn, lines);
    await sup.poll();
    const crashy = workers.find((w) => w.runId === "crashy")!;
    const fine = workers.find((w) => w.runId === "fine")!;
    // Both workers claim; one finishes, the other dies mid-run with a fresh heartbeat.
    await store.claim("crashy", 0, crashy.workerName, clock.now());
    const epoch = (await store.claim("fine", 0, fine.workerName, clock.now()))!;
    await store.finishRun({ runId: "fine", epoch }, "done", null, clock.now());
    fine.exit(0);
    crashy.exit(137);
    await settle();
    await sup.settled();
    assert.ok(lines.some((l) => /worker-exited {2}run=crashy {2}code=137/.test(l)));
    assert.ok(lines.some((l) => /worker-exited {2}run=fine {2}code=0/.test(l)));
    assert.deepEqual(workers.map((w) => w.runId), ["crashy", "fine", "crashy"], "restarted without a poll");
    assert.equal((await store.getRun("crashy"))?.owner, "sup-1");

    // A run someone else took meanwhile is not restarted by this supervisor.
    const again = workers[2];
    await store.claim("crashy", 1, "someone-else", clock.now());
    again.exit(137);
    await settle();
    await sup.settled();
    assert.equal(workers.length, 3);
    await sup.stop();
  },
);

pgTest("Supervisor.stop() signals every worker with SIGTERM and waits for them", async (pg) => {
  const clock = new ManualClock();
  for (const id of ["a", "b"]) await pg.store.createRun(id, "g", clock.now());
  const { spawn, workers } = fakeSpawner();
  const lines: string[] = [];
  const sup = supervisor(pg.store, clock, spawn, lines);
  const running = sup.run();
  await settle(10);
  assert.equal(workers.length, 2);
  await sup.stop();
  await running;
  assert.deepEqual(workers.map((w) => w.signals), [["SIGTERM"], ["SIGTERM"]]);
  assert.equal(sup.workers, 0);
  assert.equal(lines.filter((l) => l.includes("worker-exited")).length, 2);
  assert.match(lines[0], /INFO {2}supervisor {2}lease=12\.0 {2}poll=3\.0 {2}heartbeat=3\.0/);
  assert.equal(workers.length, 2, "no run taken after stop");
});

pgTest("a poll and an immediate restart running at once never exceed maxWorkers", async (pg) => {
  const clock = new ManualClock();
  const { store } = pg;
  await store.createRun("crashy", "g", clock.now());
  const { spawn, workers } = fakeSpawner();
  const lines: string[] = [];
  const sup = supervisor(store, clock, spawn, lines, "sup-1", 1);
  assert.equal((await sup.poll()).length, 1);
  await store.createRun("waiting", "g", clock.now());
  // The worker dies with its run open (its exit handler will want to restart it at once)
  // while a poll for the other pending run is under way.
  workers[0].exit(137);
  // Let the exit handler free the slot and start reading the run, then poll.
  for (let i = 0; i < 5; i++) await Promise.resolve();
  assert.equal(sup.workers, 0);
  await sup.poll();
  await sup.settled();
  assert.ok(sup.workers <= 1, `at most one worker alive, saw ${sup.workers}`);
  assert.equal(workers.length, 2, "exactly one replacement was started");
});
