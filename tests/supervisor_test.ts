/**
 * The supervisor against real PostgreSQL, real mock servers over HTTP and
 * real `deno run` processes killed with SIGKILL.
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import type { Store } from "../runtime/store/store.ts";
import { freshSchema, pgIgnore, type PgSchema } from "./_pg.ts";
import { alive, parseLine, type Proc, startSupervisor, startWorker, until } from "../harness/procs.ts";

/** The pids of the worker processes a supervisor started, from its `worker-started` lines. */
function workerPids(sup: Proc): number[] {
  return sup.events("worker-started").map((e) => Number(e.pid));
}

interface Env {
  pg: PgSchema;
  mocks: RunningMocks;
  env: { DATABASE_URL: string; MODEL_URL: string; MODEL: string; CLOUD_URL: string };
}

async function withEnv(fn: (e: Env) => Promise<void>): Promise<void> {
  const pg = await freshSchema();
  const mocks = await serveMocks();
  try {
    await fn({
      pg,
      mocks,
      env: {
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
      },
    });
  } finally {
    await mocks.close();
    await pg.drop();
  }
}

async function allDone(store: Store, n: number): Promise<boolean> {
  const rows = (await store.operators.listRuns({ limit: 1000 })).runs;
  return rows.length === n && rows.every((r) => r.status === "done");
}

/** Every run: steps 0..3 decided, 3 tool calls confirmed; one remote resource per key, none extra. */
async function assertCleanRuns(store: Store, mocks: RunningMocks, runIds: string[]): Promise<void> {
  const created = mocks.cloud.created();
  const keys = created.map((c) => c.key);
  assert.equal(new Set(keys).size, keys.length, `a key created two resources: ${keys.join(",")}`);
  for (const runId of runIds) {
    const { journal, effects } = await store.reads.loadHistory(runId);
    assert.deepEqual(journal.map((j) => [j.seq, j.status]), [0, 1, 2, 3].map((s) => [s, "confirmed"]), runId);
    assert.deepEqual(effects.map((e) => [e.seq, e.status]), [0, 1, 2].map((s) => [s, "confirmed"]), runId);
    for (const e of effects) {
      const remote = created.filter((c) => c.key === e.idempotency_key);
      assert.equal(remote.length, 1, `${e.idempotency_key} has ${remote.length} resources`);
      assert.equal(e.result, remote[0].id, `${e.idempotency_key} recorded the resource the cloud made`);
    }
    // A later step was never written under an older epoch than an earlier one.
    const epochs = [
      ...journal.map((j) => [j.seq * 2, j.epoch]),
      ...effects.map((e) => [e.seq * 2 + 1, e.epoch]),
    ]
      .sort((a, b) => a[0] - b[0]).map((x) => x[1]);
    assert.deepEqual(epochs, [...epochs].sort((a, b) => a - b), `${runId} epochs ${epochs}`);
  }
  assert.equal(created.length, runIds.length * 3);
}

async function stopSupervisor(p: Proc): Promise<number> {
  p.kill("SIGTERM");
  return await p.status;
}

Deno.test({
  name: "a worker killed mid-provision is resumed by a running supervisor's worker, with nobody else acting",
  ignore: pgIgnore("supervisor self-heal"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      // The server request takes a while, so the supervisor is up before the crash lands.
      mocks.cloud.setFaults({ path: "/v1/servers", delay_ms: 1500 });
      const worker = startWorker({ ...env, RUN_ID: "selfheal", CRASH_AT: "after_call", CRASH_SEQ: "0" });
      let sup: Proc | undefined;
      try {
        await worker.waitFor((l) => parseLine(l)?.event === "claimed", "the worker's claim");
        sup = startSupervisor(env);
        await sup.waitFor((l) => parseLine(l)?.event === "supervisor", "the supervisor's start line");
        assert.equal(await worker.status, 137, worker.lines.join("\n"));
        assert.ok(worker.lines.some((l) => l.includes(" event=crash point=after_call seq=0 ")));
        await until(() => allDone(pg.store, 1), "the run to finish");
        assert.equal(await stopSupervisor(sup), 0);

        const start = sup.lines.find((l) => parseLine(l)?.event === "supervisor")!;
        assert.match(start, /event=supervisor lease=1\.0 poll=0\.2 heartbeat=0\.2 workers=2/);
        // The hand-started worker was not the supervisor's: its run was taken when its lease expired.
        const claims = sup.events("claimed").filter((e) => e.run === "selfheal");
        assert.equal(claims.length, 1, sup.lines.join("\n"));
        assert.match(claims[0].previous_owner, /:\d+$/, "taken over from the hand-started worker");
        const confirmed = sup.events("confirmed").find((e) => e.key === "selfheal:0");
        assert.equal(confirmed?.remote, "already_done");
        const { effects } = await pg.store.reads.loadHistory("selfheal");
        assert.equal(effects[0].remote, "already_done");
        await assertCleanRuns(pg.store, mocks, ["selfheal"]);
      } finally {
        await worker.close();
        await sup?.close();
      }
    }),
});

Deno.test({
  name: "a supervisor started after an outage drains every pending and abandoned run",
  ignore: pgIgnore("supervisor drain"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      const runIds = Array.from({ length: 20 }, (_, i) => `drain-${i}`);
      // Three runs abandoned by workers killed at different points, the rest never started.
      const crashes = [["after_call", "0"], ["after_decide", "1"], ["after_intent", "2"]];
      const killed = crashes.map(([point, seq], i) =>
        startWorker({ ...env, RUN_ID: runIds[i], CRASH_AT: point, CRASH_SEQ: seq })
      );
      try {
        for (const w of killed) assert.equal(await w.status, 137, w.lines.join("\n"));
      } finally {
        await Promise.all(killed.map((w) => w.close()));
      }
      for (const id of runIds.slice(3)) {
        assert.ok(
          await pg.store.leases.createRun({ runId: id, agent: "provision", goal: "drain" }, new Date()),
        );
      }
      const stale = (await pg.store.operators.listRuns({ limit: 1000 })).runs.filter((r) =>
        r.status === "running"
      );
      assert.equal(stale.length, 3);

      const sup = startSupervisor({ ...env, WORKERS: "2", RUNS_PER_WORKER: "4" });
      try {
        await until(() => allDone(pg.store, 20), "all 20 runs to finish", 120_000);
        assert.equal(await stopSupervisor(sup), 0);
        assert.deepEqual(
          new Set(sup.events("claimed").map((e) => e.run)),
          new Set(runIds),
          "every run was taken by one of the supervisor's workers",
        );
        assert.equal(workerPids(sup).length, 2, "two worker processes carried 20 runs");
        await assertCleanRuns(pg.store, mocks, runIds);
      } finally {
        await sup.close();
      }
    }),
});

/** What the unfinished runs and the supervisors were doing: for a timeout's message. */
async function unfinished(store: Store, sups: Proc[]): Promise<string> {
  const rows = (await store.operators.listRuns({ limit: 1000 })).runs.filter((r) => r.status !== "done");
  const runs = rows.map((r) => JSON.stringify(r)).join("\n");
  const logs = sups.map((p, i) => `supervisor ${i}, last lines:\n${p.lines.slice(-60).join("\n")}`).join(
    "\n",
  );
  return `unfinished runs:\n${runs}\n${logs}`;
}

/**
 * Two supervisors on one database, 30 runs, about a third of the worker processes SIGKILLed at random moments;
 * `extra` goes to both supervisors (and so to their workers): group commit, say.
 */
function twoSupervisors(extra: Record<string, string>): Promise<void> {
  return withEnv(async ({ pg, mocks, env }) => {
    const seed = Number(Deno.env.get("SEED") ?? Date.now() % 1_000_000);
    console.log(`two supervisors: seed=${seed}`);
    let s = seed;
    const random = () => (s = (s * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    mocks.cloud.setFaults({ delay_ms: 150 });
    mocks.model.setFaults({ delay_ms: 100 });
    const runIds = Array.from({ length: 30 }, (_, i) => `pair-${i}`);
    for (const id of runIds) {
      assert.ok(await pg.store.leases.createRun({ runId: id, agent: "provision", goal: "pair" }, new Date()));
    }
    const settings = {
      ...env,
      WORKERS: "2",
      RUNS_PER_WORKER: "5",
      // A killed worker's runs are released when it exits, whatever the lease; a lease long beside a busy
      // machine's pauses keeps the supervisors from judging a slow live worker frozen and killing it too.
      LEASE_S: "6",
      HEARTBEAT_S: "0.5",
      ...extra,
    };
    const sups = [
      startSupervisor({ ...settings, SUPERVISOR: "sup-a" }),
      startSupervisor({ ...settings, SUPERVISOR: "sup-b" }),
    ];
    const seen = new Set<number>();
    let kills = 0;
    const stopKiller = new AbortController();
    // Kill about a third of the worker processes, each at a random moment of its life.
    const killer = (async () => {
      const timers: Promise<void>[] = [];
      // Bounded by stopKiller (aborted once every run is done).
      while (!stopKiller.signal.aborted) {
        for (const sup of sups) {
          for (const pid of workerPids(sup)) {
            if (seen.has(pid)) continue;
            seen.add(pid);
            // Each supervisor's first worker dies for sure; later ones at random.
            const first = workerPids(sup)[0] === pid;
            if (kills >= 8 || (!first && random() > 0.5)) continue;
            kills++;
            const delayMs = Math.floor(200 + random() * 700);
            timers.push(
              new Promise<void>((r) => setTimeout(r, delayMs)).then(() => {
                if (alive(pid)) Deno.kill(pid, "SIGKILL");
              }).catch(() => {}),
            );
          }
        }
        await new Promise((r) => setTimeout(r, 25));
      }
      await Promise.all(timers);
    })();
    try {
      try {
        await until(() => allDone(pg.store, 30), `all 30 runs to finish (seed=${seed})`, 180_000);
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await unfinished(pg.store, sups)}`);
      }
      stopKiller.abort();
      await killer;
      assert.deepEqual(await Promise.all(sups.map(stopSupervisor)), [0, 0]);
      assert.ok(kills > 0, `seed=${seed} killed no worker`);
      const exits = sups.flatMap((p) => p.events("worker-exited"));
      assert.ok(exits.some((e) => e.code === "137"), `seed=${seed}: no worker died by SIGKILL`);
      await assertCleanRuns(pg.store, mocks, runIds);
      // Every worker started said how it groups its writes (2 ms by default; the line says nothing when off).
      const started = sups.flatMap((p) => p.events("worker"));
      assert.ok(started.length > 0);
      const grouped = extra.GROUP_COMMIT_MS === "0" ? undefined : extra.GROUP_COMMIT_MS ?? "2";
      for (const w of started) assert.equal(w.group_commit_ms, grouped, JSON.stringify(w));
    } finally {
      stopKiller.abort();
      await killer;
      await Promise.all(sups.map((p) => p.close()));
    }
  });
}

Deno.test({
  name: "two supervisors on one database finish 30 runs while worker processes are killed at random",
  ignore: pgIgnore("two supervisors"),
  fn: () => twoSupervisors({}), // group commit on, as by default
});

Deno.test({
  name: "with group commit off, two supervisors finish 30 runs while worker processes are killed at random",
  ignore: pgIgnore("two supervisors, group commit off"),
  fn: () => twoSupervisors({ GROUP_COMMIT_MS: "0" }),
});

Deno.test({
  name: "SIGTERM to the supervisor stops its workers, leaves no worker process behind, and frees their runs",
  ignore: pgIgnore("supervisor SIGTERM"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      // Slow tool calls keep the workers busy while the supervisor is stopped.
      mocks.cloud.setFaults({ delay_ms: 5000 });
      for (const id of ["term-0", "term-1", "term-2"]) {
        await pg.store.leases.createRun({ runId: id, agent: "provision", goal: "term" }, new Date());
      }
      const sup = startSupervisor(env);
      try {
        await until(
          () => Promise.resolve(sup.events("claimed").length === 3),
          "the workers to claim the three runs",
        );
        const pids = workerPids(sup);
        assert.equal(pids.length, 2);
        assert.ok(pids.every(alive));
        assert.equal(await stopSupervisor(sup), 0);
        assert.deepEqual(pids.filter(alive), [], "worker processes left behind");
        assert.equal(sup.events("worker-exited").length, 2);
        assert.equal(sup.events("stopped").filter((e) => e.name).length, 1, sup.lines.join("\n"));
        assert.equal(sup.events("release-failed").length, 0, sup.lines.join("\n"));
        // Nothing finished: the runs wait, open and takeable at once, for the next worker.
        const runs = (await pg.store.operators.listRuns({ limit: 1000 })).runs;
        assert.ok(runs.every((r) => r.status === "running" && r.heartbeat_at === null), JSON.stringify(runs));
      } finally {
        await sup.close();
      }
    }),
});
