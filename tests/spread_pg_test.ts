/**
 * New work spread across workers and hosts, against real PostgreSQL, the mock
 * model and cloud over HTTP, and real `deno run` supervisors and workers: runs
 * submitted once every worker is up are shared by the fair take
 * (`TAKE_SHARE=fair`, the default) instead of going all to whichever worker
 * looked first. Each test prints how the runs were spread (claims per worker
 * from the log, and the runs table's last owner).
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { type Proc, startSupervisor, until } from "../harness/procs.ts";
import { freshSchema, pgIgnore, type PgSchema } from "./_pg.ts";

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

/** The names of the workers whose row in `workers` is there now. */
async function workerRows(pg: PgSchema): Promise<string[]> {
  const rows = await pg.store.client.query<{ name: string }>("select name from workers order by name");
  return rows.map((r) => r.name);
}

/** First claims (epoch 1) per worker, from the supervisors' `claimed` lines. */
function firstClaims(sups: Proc[]): Map<string, string[]> {
  const by = new Map<string, string[]>();
  for (const e of sups.flatMap((s) => s.events("claimed"))) {
    if (e.epoch !== "1") continue;
    by.set(e.owner, [...(by.get(e.owner) ?? []), e.run]);
  }
  return by;
}

/** Every run done; each of its three calls made one resource at the cloud, recorded as the one it made. */
async function assertDoneOnce(pg: PgSchema, mocks: RunningMocks, runIds: string[]): Promise<void> {
  const created = mocks.cloud.created();
  const keys = created.map((c) => c.key);
  assert.equal(new Set(keys).size, keys.length, "a key created two resources");
  assert.equal(created.length, runIds.length * 3, "three resources a run, no more");
  for (const runId of runIds) {
    assert.equal((await pg.store.getRun(runId))?.status, "done", runId);
    const { effects } = await pg.store.loadHistory(runId);
    assert.deepEqual(effects.map((e) => e.status), ["confirmed", "confirmed", "confirmed"], runId);
    for (const e of effects) {
      const remote = created.filter((c) => c.key === e.idempotency_key);
      assert.equal(remote.length, 1, `${e.idempotency_key} has ${remote.length} resources`);
      assert.equal(e.result, remote[0].id);
    }
  }
}

/** Submits `n` runs named `<prefix>-<i>` (as `deno task submit` does, one insert each). */
async function submit(pg: PgSchema, prefix: string, n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  for (const id of ids) {
    assert.ok(await pg.store.createRun({ runId: id, agent: "provision", goal: prefix }, new Date()));
  }
  return ids;
}

/** Claims per worker, and the runs table's owners, as one line. */
async function spreadLine(pg: PgSchema, sups: Proc[], label: string): Promise<string> {
  const claims = [...firstClaims(sups)].sort().map(([w, runs]) => `${w}=${runs.length}`).join(" ");
  const owners = new Map<string, number>();
  for (const r of (await pg.store.listRuns({ limit: 1000 })).runs) {
    owners.set(r.owner!, (owners.get(r.owner!) ?? 0) + 1);
  }
  const table = [...owners].sort().map(([w, n]) => `${w}=${n}`).join(" ");
  return `spread ${label}: first claims ${claims}; runs.owner ${table}`;
}

// Each step of a run waits on the model (300 ms) and each call on the cloud (150 ms): a run lasts
// about two seconds, longer than a poll, so a worker still holds its part when its peer looks.
const SLOW = { model: 300, cloud: 150 };

Deno.test({
  name: "a supervisor's two workers share 24 new runs, each taking at least a quarter, every run done once",
  ignore: pgIgnore("work spread across two workers"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      mocks.model.setFaults({ delay_ms: SLOW.model });
      mocks.cloud.setFaults({ delay_ms: SLOW.cloud });
      const sup = startSupervisor({
        ...env,
        WORKERS: "2",
        SUPERVISOR: "host-a",
        LEASE_S: "3",
        HEARTBEAT_S: "0.5",
      });
      try {
        await until(async () => (await workerRows(pg)).length === 2, "both workers to register");
        const runIds = await submit(pg, "spread", 24);
        await until(
          async () => (await pg.store.listRuns({ status: "done", limit: 1 })).total === 24,
          "24 runs done",
        );
        const line = await spreadLine(pg, [sup], "2 workers, 24 runs");
        console.log(line);
        const claims = firstClaims([sup]);
        assert.deepEqual([...claims.keys()].sort(), ["host-a/w0.1", "host-a/w1.1"], line);
        for (const [worker, runs] of claims) {
          assert.ok(runs.length >= 24 / 4, `${worker} took ${runs.length} of 24: ${line}`);
        }
        assert.equal([...claims.values()].flat().length, 24, "each run claimed once, at epoch 1");
        assert.deepEqual(new Set([...claims.values()].flat()), new Set(runIds));
        assert.ok(
          sup.events("worker").every((e) => e.take_share === "fair"),
          "the workers ran the default take rule",
        );
        await assertDoneOnce(pg, mocks, runIds);
        sup.kill("SIGTERM");
        assert.equal(await sup.status, 0);
      } finally {
        await sup.close();
      }
    }),
});

Deno.test({
  name:
    "two supervisors, as on two hosts, share 40 new runs: each host at least a quarter, every worker some",
  ignore: pgIgnore("work spread across two hosts"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      mocks.model.setFaults({ delay_ms: SLOW.model });
      mocks.cloud.setFaults({ delay_ms: SLOW.cloud });
      const settings = { ...env, WORKERS: "2", LEASE_S: "3", HEARTBEAT_S: "0.5" };
      const sups = [
        startSupervisor({ ...settings, SUPERVISOR: "host-a" }),
        startSupervisor({ ...settings, SUPERVISOR: "host-b" }),
      ];
      try {
        await until(async () => (await workerRows(pg)).length === 4, "four workers to register");
        const runIds = await submit(pg, "hosts", 40);
        await until(
          async () => (await pg.store.listRuns({ status: "done", limit: 1 })).total === 40,
          "40 runs done",
        );
        const line = await spreadLine(pg, sups, "2 hosts x 2 workers, 40 runs");
        console.log(line);
        const claims = firstClaims(sups);
        const ofHost = (host: string) =>
          [...claims].filter(([w]) => w.startsWith(`${host}/`)).reduce((n, [, runs]) => n + runs.length, 0);
        for (const host of ["host-a", "host-b"]) {
          assert.ok(ofHost(host) >= 40 / 4, `${host} took ${ofHost(host)} of 40: ${line}`);
        }
        assert.equal(claims.size, 4, `every worker took some: ${line}`);
        for (const [worker, runs] of claims) {
          // A quarter of an equal share (10 each).
          assert.ok(runs.length >= 40 / 4 / 4, `${worker} took ${runs.length}: ${line}`);
        }
        assert.equal([...claims.values()].flat().length, 40, "each run claimed once, at epoch 1");
        await assertDoneOnce(pg, mocks, runIds);
        for (const s of sups) s.kill("SIGTERM");
        assert.deepEqual(await Promise.all(sups.map((s) => s.status)), [0, 0]);
      } finally {
        await Promise.all(sups.map((s) => s.close()));
      }
    }),
});

Deno.test({
  name:
    "for comparison, TAKE_SHARE=all: the same 24 runs and two workers, every run done once, spread reported",
  ignore: pgIgnore("the take rule all, for comparison"),
  fn: () =>
    withEnv(async ({ pg, mocks, env }) => {
      mocks.model.setFaults({ delay_ms: SLOW.model });
      mocks.cloud.setFaults({ delay_ms: SLOW.cloud });
      const sup = startSupervisor({
        ...env,
        WORKERS: "2",
        SUPERVISOR: "host-a",
        LEASE_S: "3",
        HEARTBEAT_S: "0.5",
        TAKE_SHARE: "all",
      });
      try {
        await until(async () => (await workerRows(pg)).length === 2, "both workers to register");
        const runIds = await submit(pg, "greedy", 24);
        await until(
          async () => (await pg.store.listRuns({ status: "done", limit: 1 })).total === 24,
          "24 runs done",
        );
        console.log(await spreadLine(pg, [sup], "TAKE_SHARE=all, 2 workers, 24 runs"));
        assert.ok(sup.events("worker").every((e) => e.take_share === "all"));
        assert.equal([...firstClaims([sup]).values()].flat().length, 24, "each run claimed once, at epoch 1");
        await assertDoneOnce(pg, mocks, runIds);
        sup.kill("SIGTERM");
        assert.equal(await sup.status, 0);
      } finally {
        await sup.close();
      }
    }),
});
