/**
 * Limits shared by the fleet, against real PostgreSQL, real supervisors and
 * workers (`deno run` processes) and the mock model and cloud over HTTP. The
 * mock model is a provider with a rate limit: at most {@link RATE} requests
 * answered in any second, a request past it answered 429 with `Retry-After`.
 * The fleet declares a limit on the model a little under it (`LIMITS`, in
 * every worker's environment), fair across the runs' `tenant` label, and one
 * call in flight at a time per three of `create_server` (the cloud is slow).
 *
 * What it shows: the rate the provider sees, second by second, stays within
 * its limit; a provider that lowers its rate for a while (a squeeze) answers
 * 429s that hold the key for every worker; parked runs hold no slot (more
 * runs wait for the limit at once than the workers have slots); a worker
 * SIGKILLed while it holds reservations holds them no longer than its lease
 * (its supervisor releases its runs at once); two tenants, one with three
 * times the runs of the other, share the limit so that neither starves (each
 * one's share printed); every run done once, one resource per key.
 *
 * In the suite: {@link RUNS} = 60 runs on two supervisors. The full proof:
 * `LIMITS_RUNS=300 TEST_DATABASE_URL=... deno test -A --unstable-no-legacy-abort
 * tests/limits_pg_test.ts` (three supervisors); its figures are in
 * docs/limits.md.
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { busiestWindow } from "../mock/model.ts";
import { type Proc, startSupervisor, until } from "../harness/procs.ts";
import { freshSchema, pgIgnore, type PgSchema } from "./_pg.ts";

const RUNS = Number(Deno.env.get("LIMITS_RUNS") ?? "60");
const SUPERVISORS = RUNS > 60 ? 3 : 2;
const WORKERS = 2;
const RUNS_PER_WORKER = 5;
/** The provider's limit: requests answered in any second. */
const RATE = 20;
/** The fleet's limit on the model, per second: 90% of the provider's, as one declares it with some room. */
const DECLARED = 18;
const LIMITS = [
  { model: "mock-planner", requestsPerMinute: DECLARED * 60, windowS: 1, fairBy: "tenant" },
  { tool: "create_server", inFlight: 6 },
];
/** The tenants' share of the runs: `a` has three times `b`'s. */
const TENANT_B_EVERY = 4;

const HELD_BACK = "held-back:";

/** Creates the runs under an agent nobody hosts, each with its tenant, then hands them to the demo at once. */
async function submit(pg: PgSchema): Promise<string[]> {
  const ids: string[] = [];
  const now = new Date();
  for (let i = 0; i < RUNS; i++) {
    const tenant = i % TENANT_B_EVERY === 0 ? "b" : "a";
    const runId = `lim-${tenant}-${i}`;
    await pg.store.leases.createRun(
      { runId, agent: `${HELD_BACK}provision`, goal: "provision", labels: { tenant } },
      now,
    );
    ids.push(runId);
  }
  const released = await pg.store.client.run(`update runs set agent = 'provision' where agent = $1`, [
    `${HELD_BACK}provision`,
  ]);
  assert.equal(released, RUNS);
  return ids;
}

/** What the sampler saw while the runs went. */
interface Samples {
  /** The most runs waiting for a limit at once. */
  parkedMax: number;
  /** Parked runs seen holding a lease (must stay 0). */
  parkedLeased: number;
}

/** Every 200 ms until `stop`: how many runs wait for a limit, and whether any holds a lease. */
async function sample(pg: PgSchema, stop: AbortSignal): Promise<Samples> {
  const seen: Samples = { parkedMax: 0, parkedLeased: 0 };
  while (!stop.aborted) {
    const [row] = await pg.store.client.query<{ parked: number; leased: number }>(
      `select count(*)::int as parked, count(*) filter (where heartbeat_at is not null)::int as leased
         from runs where status = 'waiting' and error like '%for the limit on%'`,
    );
    seen.parkedMax = Math.max(seen.parkedMax, row.parked);
    seen.parkedLeased += row.leased;
    await new Promise((r) => setTimeout(r, 200));
  }
  return seen;
}

/** The worker holding a live reservation under `key` now, with its reservations' ids. */
async function holder(pg: PgSchema, key: string): Promise<{ owner: string; ids: string[] } | undefined> {
  const rows = await pg.store.client.query<{ owner: string; ids: string[] }>(
    `select u.owner, array_agg(r.id::text) as ids from limit_reservations r join runs u on u.run_id = r.run_id
      where r.key = $1 and r.released_at is null and u.epoch = r.epoch and u.status = 'running'
      group by u.owner order by count(*) desc limit 1`,
    [key],
  );
  return rows[0];
}

/** How many of `ids` still hold a call in flight: unreleased, their run running under their epoch with a live lease. */
async function stillHeld(pg: PgSchema, ids: string[], leaseMs: number): Promise<number> {
  const [row] = await pg.store.client.query<{ n: number }>(
    `select count(*)::int as n from limit_reservations r join runs u on u.run_id = r.run_id
      where r.id = any($1::bigint[]) and r.released_at is null and u.epoch = r.epoch and u.status = 'running'
        and u.heartbeat_at >= now() - $2 * interval '1 millisecond'`,
    [ids, leaseMs],
  );
  return row.n;
}

/** The pid of worker `name`, from its supervisor's `worker-started` line. */
function pidOf(sups: Proc[], name: string): number {
  const started = sups.flatMap((s) => s.events("worker-started")).filter((e) => e.worker === name);
  assert.ok(started.length > 0, `no worker-started line for ${name}`);
  return Number(started.at(-1)!.pid);
}

/** Every run done, its three calls confirmed, one resource at the cloud per key. */
async function assertDoneOnce(pg: PgSchema, mocks: RunningMocks, runIds: string[]): Promise<void> {
  const created = mocks.cloud.created();
  const keys = created.map((c) => c.key);
  assert.equal(new Set(keys).size, keys.length, "a key created two resources");
  assert.equal(created.length, runIds.length * 3, "three resources a run, no more");
  const rows = await pg.store.client.query<{ status: string; n: number }>(
    `select status, count(*)::int as n from runs group by status`,
  );
  assert.deepEqual(rows.map((r) => [r.status, r.n]), [["done", runIds.length]]);
}

/** Each tenant's share of the model requests answered while both still had requests to make. */
function shares(arrivals: { at_ms: number; run: string; limited: boolean }[]) {
  const answered = arrivals.filter((a) => !a.limited && a.run.startsWith("lim-"));
  const last = (t: string) =>
    Math.max(...answered.filter((a) => a.run.startsWith(`lim-${t}-`)).map((a) => a.at_ms));
  const contended = Math.min(last("a"), last("b"));
  const during = answered.filter((a) => a.at_ms <= contended);
  const of = (t: string) => during.filter((a) => a.run.startsWith(`lim-${t}-`)).length / during.length;
  return {
    a: of("a"),
    b: of("b"),
    contendedMs: contended - answered[0].at_ms,
    lastA: last("a"),
    lastB: last("b"),
  };
}

Deno.test({
  name:
    `${SUPERVISORS} supervisors of ${WORKERS} workers, ${RUNS} runs, one model limited to ${RATE} a second: ` +
    "the provider's rate held second by second, a squeeze's 429s held for the fleet, parked runs holding no slot, " +
    "a SIGKILLed worker's reservations gone with it, two tenants sharing fairly",
  ignore: pgIgnore("limits shared by the fleet"),
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const sups: Proc[] = [];
    const stop = new AbortController();
    const leaseMs = 2_000;
    try {
      mocks.model.setRateLimit({ requests: RATE, windowMs: 1_000 });
      mocks.cloud.setFaults({ delay_ms: 150 });
      const env = {
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        LIMITS: JSON.stringify(LIMITS),
        WORKERS: String(WORKERS),
        RUNS_PER_WORKER: String(RUNS_PER_WORKER),
        POLL_S: "0.2",
        HEARTBEAT_S: "0.3",
        LEASE_S: String(leaseMs / 1000),
      };
      for (let i = 0; i < SUPERVISORS; i++) sups.push(startSupervisor({ ...env, SUPERVISOR: `host-${i}` }));
      await until(
        async () => {
          const [row] = await pg.store.client.query<{ n: number }>("select count(*)::int as n from workers");
          return row.n === SUPERVISORS * WORKERS;
        },
        "every worker to register",
        60_000,
      );
      const started = Date.now();
      const runIds = await submit(pg);
      const sampled = sample(pg, stop.signal);

      // A worker holding reservations under the tool's calls-in-flight limit, SIGKILLed.
      let killed: { owner: string; ids: string[] } | undefined;
      await until(
        async () => (killed = await holder(pg, "tool:create_server")) !== undefined,
        "a holder",
        60_000,
        20,
      );
      const pid = pidOf(sups, killed!.owner);
      Deno.kill(pid, "SIGKILL");
      const killedAt = Date.now();
      await until(
        async () => await stillHeld(pg, killed!.ids, leaseMs) === 0,
        "its reservations to end",
        30_000,
        20,
      );
      const heldForMs = Date.now() - killedAt;

      // Once a third of the runs are done, one request is answered 429 with Retry-After: 2 (one run's 429):
      // the key is held for every worker for two seconds.
      await until(async () => (await doneCount(pg)) >= RUNS / 3, "a third done", 240_000);
      const holdsBefore = (await modelKey(pg, leaseMs)).holds;
      mocks.model.setFaults({ fail_next: 1, fail_status: 429, retry_after_s: 2 });
      await until(
        () => Promise.resolve(mocks.model.arrivals().some((a) => !a.limited && a.status === 429)),
        "the 429",
        30_000,
        20,
      );
      const once = mocks.model.arrivals().find((a) => !a.limited && a.status === 429)!;
      await new Promise((r) => setTimeout(r, 2_500));
      const onceHolds = (await modelKey(pg, leaseMs)).holds - holdsBefore;
      const duringHold = mocks.model.arrivals().filter((a) =>
        a.at_ms > once.at_ms && a.at_ms < once.at_ms + 2_000
      );
      // Then the provider squeezes: a quarter of its rate for three seconds.
      mocks.model.setRateLimit({ requests: RATE / 4, windowMs: 1_000 });
      const squeezedAt = Date.now();
      await new Promise((r) => setTimeout(r, 3_000));
      mocks.model.setRateLimit({ requests: RATE, windowMs: 1_000 });
      const squeezeEnd = Date.now();

      await until(async () => (await doneCount(pg)) === RUNS, `${RUNS} runs done`, 900_000, 200);
      const tookMs = Date.now() - started;
      stop.abort();
      const seen = await sampled;

      await assertDoneOnce(pg, mocks, runIds);
      const arrivals = mocks.model.arrivals();
      // The rate the provider saw outside the squeeze, every request counted (a refused one too).
      const outside = arrivals.filter((a) => a.at_ms < squeezedAt || a.at_ms > squeezeEnd + 2_000);
      const busiest = busiestWindow(outside, 1_000, true);
      const refused = arrivals.filter((a) => a.status === 429);
      const outsideSqueeze = outside.filter((a) =>
        a.status === 429 && !(a.at_ms === once.at_ms && a.run === once.run)
      );
      const squeezed = arrivals.filter((a) => a.limited && a.at_ms >= squeezedAt);
      const takenWhileHeld = await whileHeld(pg, "model:mock-planner");
      const delays = await arrivalDelays(pg, arrivals);
      if (Deno.env.get("LIMITS_DEBUG")) await debugBusiest(pg, outside);
      const keys = await pg.store.limits.list(new Date(), new Date(Date.now() - leaseMs));
      const model = keys.find((k) => k.key === "model:mock-planner")!;
      const share = shares(arrivals);
      const [leftover] = await pg.store.client.query<{ open: number; waiters: number }>(
        `select (select count(*) from limit_reservations r join runs u on u.run_id = r.run_id
                  where r.released_at is null and u.epoch = r.epoch and u.status = 'running')::int as open,
                (select count(*) from limit_waiters)::int as waiters`,
      );
      console.log(
        `limits: ${RUNS} runs, ${SUPERVISORS}x${WORKERS} workers of ${RUNS_PER_WORKER} slots, took ${tookMs} ms; ` +
          `model requests ${arrivals.length}, busiest second ${busiest} (provider ${RATE}, declared ${DECLARED}); ` +
          `one 429 with Retry-After 2 s: holds ${onceHolds}, requests arriving in its hold ${duringHold.length} ` +
          `(already on their way), none of them 429; the squeeze: ${squeezed.length} 429s; 429s in all ` +
          `${refused.length} (${outsideSqueeze.length} elsewhere), holds ${model.holds}, ` +
          `requests taken while held ${takenWhileHeld}; take-to-arrival ms p50 ${delays.p50} p90 ${delays.p90}; ` +
          `parked at once at most ${seen.parkedMax} (slots ${SUPERVISORS * WORKERS * RUNS_PER_WORKER}), ` +
          `parked holding a lease ${seen.parkedLeased}; SIGKILLed ${killed!.owner} held ${
            killed!.ids.length
          } ` +
          `reservation(s), gone ${heldForMs} ms after the kill (lease ${leaseMs} ms); ` +
          `tenant shares while both had requests: a ${(share.a * 100).toFixed(0)}%, b ${
            (share.b * 100).toFixed(0)
          }% over ${share.contendedMs} ms (b's last request ${share.lastB - arrivals[0].at_ms} ms in, a's ${
            share.lastA - arrivals[0].at_ms
          } ms); left open ${leftover.open}, waiters ${leftover.waiters}`,
      );
      assert.ok(busiest <= RATE, `the provider saw ${busiest} requests in one second, past its ${RATE}`);
      assert.equal(onceHolds, 1, "the one 429 held the key once");
      assert.ok(model.holds >= 2, "the squeeze's 429s held the key");
      assert.equal(outsideSqueeze.length, 0, "a 429 outside the squeeze and the one");
      assert.equal(takenWhileHeld, 0, "a request taken while its key was held");
      assert.ok(seen.parkedMax > SUPERVISORS * WORKERS * RUNS_PER_WORKER, "more runs parked than slots");
      assert.equal(seen.parkedLeased, 0, "a parked run held a lease");
      assert.ok(heldForMs < leaseMs + 5_000, `the killed worker's reservations held ${heldForMs} ms`);
      assert.ok(share.b >= 0.3 && share.a >= 0.3, `tenant shares a ${share.a}, b ${share.b}`);
      assert.deepEqual([leftover.open, leftover.waiters], [0, 0], "reservations or waiters left");
      for (const s of sups) s.kill("SIGTERM");
      for (const s of sups) assert.equal(await s.status, 0);
    } finally {
      stop.abort();
      for (const s of sups) await s.close();
      await mocks.close();
      await pg.drop();
    }
  },
});

/**
 * Requests under `key` taken while it was held: after a hold (a 429 with Retry-After) was in force, by
 * the order of the key's lock (`held_after`), and before its end. The fleet sends none; the 429s a hold
 * costs are the first and those already on their way.
 */
async function whileHeld(pg: PgSchema, key: string): Promise<number> {
  const [row] = await pg.store.client.query<{ n: number }>(
    `select count(*)::int as n from limit_reservations h join limit_reservations r on r.key = h.key
      where h.key = $1 and h.held_after is not null and r.id > h.held_after and r.taken_at < h.held_until`,
    [key],
  );
  return row.n;
}

/** From each model request's take (its reservation) to its arrival at the provider, in ms. */
async function arrivalDelays(pg: PgSchema, arrivals: { at_ms: number; run: string }[]) {
  const rows = await pg.store.client.query<{ run_id: string; at_ms: number }>(
    `select run_id, extract(epoch from taken_at) * 1000 as at_ms from limit_reservations
      where key = 'model:mock-planner' order by run_id, taken_at, id`,
  );
  const arrived = Map.groupBy(arrivals, (a) => a.run);
  const delays: number[] = [];
  // Each take matched with the run's first arrival at or after it not matched yet (a take whose worker
  // died before it sent the request has none).
  for (const [run, list] of Map.groupBy(rows, (r) => r.run_id)) {
    const seen = [...(arrived.get(run) ?? [])];
    for (const t of list) {
      const i = seen.findIndex((a) => a.at_ms >= Number(t.at_ms));
      if (i >= 0) delays.push(seen.splice(i, 1)[0].at_ms - Number(t.at_ms));
    }
  }
  delays.sort((a, b) => a - b);
  const at = (q: number) => Math.round(delays[Math.min(delays.length - 1, Math.floor(q * delays.length))]);
  return { p50: at(0.5), p90: at(0.9) };
}

async function debugBusiest(pg: PgSchema, arrivals: { at_ms: number; run: string; status: number }[]) {
  const t = arrivals.map((a) => a.at_ms);
  let best = 0, bi = 0, start = 0;
  for (let end = 0; end < t.length; end++) {
    while (t[start] <= t[end] - 1000) start++;
    if (end - start + 1 > best) [best, bi] = [end - start + 1, start];
  }
  const win = arrivals.slice(bi, bi + best);
  const rows = await pg.store.client.query<{ run_id: string; at_ms: number }>(
    `select run_id, extract(epoch from taken_at) * 1000 as at_ms from limit_reservations
      where key = 'model:mock-planner' and taken_at between to_timestamp($1 / 1000.0) - interval '3 s' and to_timestamp($1 / 1000.0) + interval '2 s' order by taken_at`,
    [win[0].at_ms],
  );
  console.log(win.map((a) => `${a.run}@${a.at_ms - win[0].at_ms}`).join(" "));
  console.log(rows.map((r) => `${r.run_id}@${Math.round(Number(r.at_ms) - win[0].at_ms)}`).join(" "));
}

/** The model's key as `limits` shows it. */
async function modelKey(pg: PgSchema, leaseMs: number) {
  const keys = await pg.store.limits.list(new Date(), new Date(Date.now() - leaseMs));
  return keys.find((k) => k.key === "model:mock-planner") ?? { holds: 0 };
}

async function doneCount(pg: PgSchema): Promise<number> {
  return (await pg.store.operators.listRuns({ status: "done", limit: 1 })).total;
}
