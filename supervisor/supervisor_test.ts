import assert from "node:assert/strict";
import { ManualClock, settle } from "../runtime/base/clock.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { Store } from "../runtime/store/store.ts";
import { Leases } from "../runtime/store/leases.ts";
import { type SpawnWorker, Supervisor, type WorkerHandle } from "./supervisor.ts";
import { claim } from "../harness/direct_writes.ts";
import { openTestPglite } from "../tests/_pglite.ts";

/** A stand-in worker process: exits when told to, or on any signal. */
interface FakeWorker extends WorkerHandle {
  workerName: string;
  signals: Deno.Signal[];
  exit(code: number): void;
}

function fakeSpawner(): { spawn: SpawnWorker; workers: FakeWorker[] } {
  const workers: FakeWorker[] = [];
  let pid = 1000;
  const spawn: SpawnWorker = (workerName) => {
    let exit!: (code: number) => void;
    const exited = new Promise<number>((r) => (exit = r));
    const w: FakeWorker = {
      pid: ++pid,
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

// One in-memory database for the file; each test uses its own run ids.
const store = new Store(await openTestPglite());
await store.applySchema();

function setup(workers = 2, name = "sup") {
  const clock = new ManualClock();
  const lines: string[] = [];
  const fake = fakeSpawner();
  const sup = new Supervisor({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    spawn: fake.spawn,
    name,
    workers,
    leaseMs: 12_000,
    pollMs: 3_000,
    heartbeatMs: 3_000,
  });
  const running = sup.run();
  return { clock, lines, fake, sup, running };
}

/** A run claimed by `owner` at epoch 1, with a heartbeat at `at`. */
async function held(runId: string, owner: string, at: Date): Promise<number> {
  await store.leases.createRun({ runId, agent: "provision", goal: "g" }, at);
  const epoch = await claim(store, runId, 0, owner, at);
  assert.equal(epoch, 1);
  return epoch;
}

Deno.test("the supervisor keeps its workers alive and hands a dead one's runs on at once", async () => {
  const { clock, lines, fake, sup, running } = setup(2, "sup-a");
  await settle();
  assert.equal(fake.workers.length, 2);
  assert.deepEqual(fake.workers.map((w) => w.workerName), ["sup-a/w0.1", "sup-a/w1.1"]);
  const victim = fake.workers[0];
  await held("heal-1", victim.workerName, clock.now());
  await held("heal-2", victim.workerName, clock.now());
  await held("other", fake.workers[1].workerName, clock.now());

  victim.exit(137); // kill -9
  await settle();
  await sup.settled();
  assert.equal(fake.workers.length, 3, "a replacement was started at once");
  assert.equal(fake.workers[2].workerName, "sup-a/w0.2");
  for (const id of ["heal-1", "heal-2"]) {
    const run = await store.reads.getRun(id);
    assert.equal(run?.heartbeat_at, null, `${id}: lease cleared, takeable now`);
    assert.equal(run?.epoch, 1, "the epoch is the next taker's to bump");
  }
  assert.notEqual(
    (await store.reads.getRun("other"))?.heartbeat_at,
    null,
    "a live worker's run is untouched",
  );
  const resuming = lines.filter((l) => l.includes(" event=resuming "));
  assert.equal(resuming.length, 2);
  assert.match(resuming[0], /run=heal-1 pid=1003 worker=sup-a\/w0\.2/);
  assert.ok(lines.some((l) => /event=worker-exited worker=sup-a\/w0\.1 pid=1001 code=137/.test(l)));
  // The replacement takes them (one statement takes and claims).
  const taken = await store.leases.takeRuns(
    "sup-a/w0.2",
    ["provision"],
    new Date(clock.now().getTime() - 12_000),
    clock.now(),
    10,
  );
  assert.deepEqual(taken.map((r) => [r.run_id, r.epoch, r.previous_owner]).sort(), [
    ["heal-1", 2, "sup-a/w0.1"],
    ["heal-2", 2, "sup-a/w0.1"],
  ]);
  await sup.stop();
  await running;
  assert.ok(
    fake.workers.filter((w) => w !== victim).every((w) => w.signals.includes("SIGTERM")),
    "stop sends SIGTERM to every live worker",
  );
});

Deno.test("a worker that exits 2 (bad settings) is not restarted, and when all do the supervisor gives up", async () => {
  const { lines, fake, sup, running } = setup(2, "sup-b");
  await settle();
  fake.workers[0].exit(2);
  await settle();
  await sup.settled();
  assert.equal(fake.workers.length, 2, "no replacement for a settings error");
  assert.ok(lines.some((l) => /event=worker-refused worker=sup-b\/w0\.1/.test(l)));
  assert.equal(sup.refused, false);
  fake.workers[1].exit(2);
  await running; // run() ends by itself
  assert.equal(sup.refused, true);
  assert.ok(lines.some((l) => l.includes("supervisor-giving-up")));
});

Deno.test("a worker that keeps dying as it starts is restarted with a growing delay, not in a tight loop", async () => {
  const { clock, lines, fake, sup, running } = setup(1, "sup-c");
  await settle();
  for (let i = 0; i < 4; i++) {
    fake.workers.at(-1)!.exit(1);
    await settle();
    await sup.settled();
  }
  // Three quick restarts at once, then the fourth waits.
  assert.equal(fake.workers.length, 4);
  assert.ok(
    lines.some((l) => /event=restart-deferred worker=sup-c\/w0\.4 delay_ms=6000/.test(l)),
    lines.join("\n"),
  );
  await clock.advance(6_000);
  await settle();
  assert.equal(fake.workers.length, 5, "restarted after the delay");
  await sup.stop();
  await running;
});

Deno.test("a worker that exits 7 (its database away) is restarted, with the crash-loop delay when it keeps doing so", async () => {
  const { clock, lines, fake, sup, running } = setup(1, "sup-away");
  await settle();
  const exitAway = async () => {
    fake.workers.at(-1)!.exit(EXIT_CODES.databaseAway);
    await settle();
    await sup.settled();
  };
  for (let i = 0; i < 4; i++) await exitAway();
  assert.equal(sup.refused, false, "a database away is no settings error");
  // Restarted at once three times, then after 6 s, then after 12 s: the slot is never given up.
  assert.equal(fake.workers.length, 4);
  assert.ok(lines.some((l) => /event=restart-deferred worker=sup-away\/w0\.4 delay_ms=6000/.test(l)));
  await clock.advance(6_000);
  await settle();
  assert.equal(fake.workers.length, 5);
  await exitAway();
  assert.ok(lines.some((l) => /event=restart-deferred worker=sup-away\/w0\.5 delay_ms=12000/.test(l)));
  await clock.advance(12_000);
  await settle();
  assert.ok(!lines.some((l) => l.includes("event=worker-refused")), lines.join("\n"));
  assert.equal(fake.workers.length, 6, "still restarted");
  await sup.stop();
  await running;
});

/** What a worker host's heartbeat writes: its own row in `workers`, and the leases in `fences`. */
async function heartbeat(workerName: string, at: Date, fences: { runId: string; epoch: number }[] = []) {
  const worker = { name: workerName, agents: ["provision"], capacity: 10, startedAt: at };
  return await store.leases.heartbeatMany(worker, fences, at);
}

Deno.test("a frozen worker (its own heartbeat stopped) is killed and replaced; its runs are released", async () => {
  const { clock, lines, fake, sup, running } = setup(1, "sup-d");
  await settle();
  const frozen = fake.workers[0];
  const epoch = await held("frozen-1", frozen.workerName, clock.now());
  assert.deepEqual(await heartbeat(frozen.workerName, clock.now(), [{ runId: "frozen-1", epoch }]), [
    "frozen-1",
  ]);
  await clock.advance(15_000); // no heartbeat for longer than the lease by the poll at 15 s
  await settle();
  await settle();
  await sup.settled();
  assert.deepEqual(frozen.signals, ["SIGKILL"]);
  assert.ok(
    lines.some((l) =>
      /event=replacing worker=sup-d\/w0\.1 pid=\d+ reason="its heartbeat stopped" heartbeat_age_ms=15000/
        .test(l)
    ),
    lines.join("\n"),
  );
  assert.equal(fake.workers.length, 2);
  assert.equal((await store.reads.getRun("frozen-1"))?.heartbeat_at, null);
  await sup.stop();
  await running;
});

Deno.test("a worker that heartbeats is not killed because one of its runs' leases went stale", async () => {
  const { clock, lines, fake, sup, running } = setup(1, "sup-e");
  await settle();
  const worker = fake.workers[0];
  // The worker let go of this run (it failed in the worker) and goes on with its others.
  await held("dropped-1", worker.workerName, clock.now());
  await heartbeat(worker.workerName, clock.now());
  for (let i = 0; i < 10; i++) {
    await clock.advance(3_000);
    await heartbeat(worker.workerName, clock.now());
    await settle();
  }
  await sup.settled();
  const run = await store.reads.getRun("dropped-1");
  assert.ok(
    clock.now().getTime() - new Date(run!.heartbeat_at!).getTime() >= 30_000,
    "the run's lease is stale",
  );
  assert.deepEqual(worker.signals, [], lines.join("\n"));
  assert.equal(lines.filter((l) => l.includes(" event=replacing ")).length, 0);
  assert.equal(fake.workers.length, 1);
  // Its heartbeat stops: now it is frozen.
  await clock.advance(15_000);
  await settle();
  await settle();
  await sup.settled();
  assert.deepEqual(worker.signals, ["SIGKILL"]);
  await sup.stop();
  await running;
});

Deno.test.afterAll(async () => {
  await store.client.close();
});

// Regression (tests/failover_pg_test.ts): during a failover the workers' heartbeats failed like the
// supervisor's polls, and the first poll after it killed every healthy worker as frozen.
Deno.test("after the database was away, no worker is judged frozen until a lease after it answers again", async () => {
  let down = false;
  class FlakyLeases extends Leases {
    override frozenWorkers(...args: Parameters<Leases["frozenWorkers"]>) {
      return down ? Promise.reject(new Error("write CONNECTION_CLOSED")) : super.frozenWorkers(...args);
    }
  }
  const flaky = store.withAudiences({ leases: new FlakyLeases(store.client) });
  const clock = new ManualClock();
  const lines: string[] = [];
  const fake = fakeSpawner();
  const sup = new Supervisor({
    store: flaky,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    spawn: fake.spawn,
    name: "sup-f",
    workers: 1,
    leaseMs: 12_000,
    pollMs: 3_000,
    heartbeatMs: 3_000,
  });
  const running = sup.run();
  await settle();
  const worker = fake.workers[0];
  await heartbeat(worker.workerName, clock.now());
  down = true;
  for (let i = 0; i < 5; i++) {
    await clock.advance(3_000);
    await settle();
  }
  down = false;
  await clock.advance(3_000); // the poll at 18 s answers: the last beat is 18 s old
  await settle();
  await settle();
  await sup.settled();
  assert.deepEqual(worker.signals, [], lines.join("\n"));
  assert.ok(lines.some((l) => l.includes(" event=database-back ")), lines.join("\n"));
  // It does not beat again: a lease after the database came back it is frozen after all.
  for (let i = 0; i < 4; i++) {
    await clock.advance(3_000);
    await settle();
    await settle();
  }
  await sup.settled();
  assert.deepEqual(worker.signals, ["SIGKILL"], lines.join("\n"));
  await sup.stop();
  await running;
});
