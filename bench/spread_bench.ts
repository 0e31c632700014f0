/**
 * `deno task bench:spread`: what the fair take costs a worker that is alone,
 * and how it spreads a burst when it is not. Reported, not asserted.
 *
 * On PGlite (in memory) and, with `--database-url` (or `TEST_DATABASE_URL`),
 * on a fresh schema of that PostgreSQL server, in one run:
 *
 * - **a lone worker filling 100 slots** from 100 pending runs, by each take
 *   rule (`TAKE_SHARE=all`, the take before the fair share, and `fair`): the
 *   take statements it sent until all 100 were held, and the time from
 *   `start()` to the 100th held (its row's first heartbeat included);
 * - **the take statement alone** on 100 pending runs, sent by hand through the
 *   same driver, by rule, beside a raw floor: a plain `update ... where run_id
 *   in (select ... limit 100 for update skip locked)` with no progress count,
 *   no share and no marks; and `fair` beside a live peer of equal capacity
 *   hosting the same agent (the share counted: it takes 50);
 * - **a burst of 20 runs and two live workers** (in-process, one store): how
 *   many each took, by rule;
 * - **two workers hosting different agents**, A hosting X and Y and B only Y,
 *   and a burst of 20 runs of Y then 20 of X: what each took when A and then
 *   B polled once, by rule (A alone can run X).
 *
 * Each figure is the median of `--rounds` rounds (default 7).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { defineAgent } from "../runtime/agent/agent.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import { LEASE_STATEMENTS } from "../runtime/store/leases.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { type SqlClient, Store } from "../runtime/store/store.ts";
import type { TakeShare } from "../runtime/base/take_share.ts";
import { ToolRegistry } from "../runtime/agent/tools.ts";

const AGENT = "spread-bench";
const TAKE = LEASE_STATEMENTS.find((s) => s.name === "take-runs")!;
const LEASE_MS = 12_000;

// A model that never answers until its run is stopped: a run taken stays held, so "filled" is stable.
const waiting: Planner = {
  describe: "waits until stopped",
  decide: (req) =>
    new Promise((_, reject) => {
      if (req.signal?.aborted) return reject(req.signal.reason);
      req.signal?.addEventListener("abort", () => reject(req.signal!.reason), { once: true });
    }),
};
const preparedAgent = (name: string) => ({
  agent: defineAgent({ name, tools: [], model: waiting }),
  planner: waiting,
  tools: new ToolRegistry([]),
});
const prepared = [preparedAgent(AGENT)];
// The agents of the last figure: X (hosted by A only) and Y (hosted by A and B).
const [AGENT_X, AGENT_Y] = ["spread-bench-x", "spread-bench-y"];
const hostsOfXY = { a: [preparedAgent(AGENT_X), preparedAgent(AGENT_Y)], b: [preparedAgent(AGENT_Y)] };

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function reset(client: SqlClient): Promise<void> {
  await client.exec("truncate runs, workers cascade");
}

async function submit(store: Store, n: number, prefix: string, agent = AGENT): Promise<void> {
  const now = new Date();
  for (let i = 0; i < n; i++) {
    await store.leases.createRun({ runId: `${prefix}-${i}`, agent, goal: "g" }, now);
  }
}

function host(store: Store, owner: string, takeShare: TakeShare, agents = prepared): WorkerHost {
  const clock = new SystemClock();
  return new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: discardSink }),
    owner,
    agents,
    runsPerWorker: 100,
    pollMs: 3_000,
    heartbeatMs: 3_000,
    leaseMs: LEASE_MS,
    takeShare,
  });
}

/** Waits (real time, bounded) until `check` holds. */
async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = performance.now() + 30_000;
  // Bounded by the deadline.
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`never: ${what}`);
    await new Promise((r) => setTimeout(r, 0));
  }
}

/** A lone worker filling its 100 slots: take statements sent and milliseconds to the 100th held. */
async function loneFill(client: SqlClient, rule: TakeShare, round: number) {
  await reset(client);
  const counting = new CountingClient(client);
  const store = new Store(counting);
  await submit(store, 100, `lone-${rule}-${round}`);
  counting.reset();
  const h = host(store, "lone", rule);
  const t0 = performance.now();
  h.start();
  await until(() => h.active === 100, "100 held");
  const ms = performance.now() - t0;
  const takes = counting.counts.get("take-runs") ?? 0;
  await h.stop();
  return { ms, takes };
}

/** The kinds of {@link statementMs}: the raw floor, each rule alone, and `fair` beside a live peer. */
const STATEMENT_KINDS = ["raw", "all", "fair", "fair-peer"] as const;

/** The take statement alone, on 100 pending runs, by kind; and the raw floor. */
async function statementMs(
  client: SqlClient,
  kind: (typeof STATEMENT_KINDS)[number],
  round: number,
): Promise<number> {
  await reset(client);
  const store = new Store(client);
  await submit(store, 100, `stmt-${kind}-${round}`);
  for (const name of kind === "fair-peer" ? ["w", "w-peer"] : ["w"]) {
    await store.leases.heartbeatMany(
      { name, agents: [AGENT], capacity: 100, startedAt: new Date() },
      [],
      new Date(),
    );
  }
  const now = new Date();
  const stale = new Date(now.getTime() - LEASE_MS);
  const t0 = performance.now();
  let n: number;
  if (kind === "raw") {
    n = await client.run(
      `update runs set epoch = epoch + 1, owner = $1, status = 'running', heartbeat_at = $2::timestamptz
        where run_id in (select run_id from runs where status = 'pending' and agent = $3
                          order by created_at, run_id limit 100 for update skip locked)`,
      ["w", now.toISOString(), AGENT],
    );
  } else {
    n = (await client.query(TAKE.text, [
      "w",
      [AGENT],
      stale.toISOString(),
      now.toISOString(),
      100,
      kind === "all" ? null : 100,
    ], TAKE.options)).length;
  }
  const ms = performance.now() - t0;
  // Beside a peer of equal capacity its share is ceil(100 * 100 / 200) = 50.
  const expected = kind === "fair-peer" ? 50 : 100;
  if (n !== expected) throw new Error(`${kind} took ${n} of 100, not ${expected}`);
  return ms;
}

/** Two live workers and a burst of 20 runs: how many each took once both had polled. */
async function burst(client: SqlClient, rule: TakeShare, round: number): Promise<[number, number]> {
  await reset(client);
  const store = new Store(client);
  const a = host(store, "burst-a", rule).start();
  const b = host(store, "burst-b", rule).start();
  // Both registered and napping before the burst.
  await new Promise((r) => setTimeout(r, 200));
  await submit(store, 20, `burst-${rule}-${round}`);
  a.wake();
  await new Promise((r) => setTimeout(r, 100));
  b.wake();
  await until(() => a.active + b.active === 20, "20 held");
  const held: [number, number] = [a.active, b.active];
  await Promise.all([a.stop(), b.stop()]);
  return held;
}

/**
 * Host A (X and Y) and host B (Y only), live and idle; 20 runs of Y, then 20
 * of X; A polls once, then B: what each took of each agent, and how many
 * stayed pending.
 */
async function burstXY(client: SqlClient, rule: TakeShare, round: number) {
  await reset(client);
  const store = new Store(client);
  const a = host(store, "xy-a", rule, hostsOfXY.a).start();
  const b = host(store, "xy-b", rule, hostsOfXY.b).start();
  // Both registered and napping (a poll every 3 s) before the burst.
  await new Promise((r) => setTimeout(r, 200));
  await submit(store, 20, `xy-y-${rule}-${round}`, AGENT_Y);
  await submit(store, 20, `xy-x-${rule}-${round}`, AGENT_X);
  await a.poll();
  await b.poll();
  const runs = (await store.operators.listRuns({ limit: 100 })).runs;
  const held = (owner: string, agent: string) =>
    runs.filter((r) => r.status === "running" && r.owner === owner && r.agent === agent).length;
  const seen = {
    aX: held("xy-a", AGENT_X),
    aY: held("xy-a", AGENT_Y),
    bY: held("xy-b", AGENT_Y),
    pending: runs.filter((r) => r.status === "pending").length,
  };
  await Promise.all([a.stop(), b.stop()]);
  return seen;
}

async function measure(label: string, client: SqlClient, rounds: number): Promise<void> {
  console.log(`\n${label}`);
  // Rules and kinds take turns within each round, so the machine's drift weighs on all alike.
  const fills = new Map<TakeShare, { ms: number; takes: number }[]>([["all", []], ["fair", []]]);
  for (let r = 0; r < rounds; r++) {
    for (const rule of ["all", "fair"] as const) fills.get(rule)!.push(await loneFill(client, rule, r));
  }
  for (const [rule, f] of fills) {
    console.log(
      `  lone worker, 100 runs, TAKE_SHARE=${rule}: ${median(f.map((x) => x.takes))} take statement(s), ` +
        `${median(f.map((x) => x.ms)).toFixed(1)} ms to fill (median of ${rounds}; ` +
        `range ${Math.min(...f.map((x) => x.ms)).toFixed(1)}-${Math.max(...f.map((x) => x.ms)).toFixed(1)})`,
    );
  }
  const times = new Map<string, number[]>(STATEMENT_KINDS.map((k) => [k, []]));
  for (let r = 0; r < rounds; r++) {
    for (const kind of STATEMENT_KINDS) times.get(kind)!.push(await statementMs(client, kind, r));
  }
  for (const kind of STATEMENT_KINDS) {
    const what = kind === "raw"
      ? "one statement taking 100, raw SQL floor (plain update of 100)"
      : kind === "fair-peer"
      ? "one statement taking 50, take-runs, TAKE_SHARE=fair, beside a live peer"
      : `one statement taking 100, take-runs, TAKE_SHARE=${kind}, alone`;
    console.log(`  ${what}: ${median(times.get(kind)!).toFixed(2)} ms`);
  }
  for (const rule of ["all", "fair"] as const) {
    const splits = [];
    for (let r = 0; r < rounds; r++) splits.push(await burst(client, rule, r));
    const shown = splits.map(([a, b]) => `${a}/${b}`).join(" ");
    console.log(`  two live workers, a burst of 20, TAKE_SHARE=${rule}: first/second took ${shown}`);
  }
  for (const rule of ["all", "fair"] as const) {
    const seen = [];
    for (let r = 0; r < rounds; r++) seen.push(await burstXY(client, rule, r));
    const shown = [...new Set(seen.map((s) => `A ${s.aX} X + ${s.aY} Y, B ${s.bY} Y, ${s.pending} pending`))];
    console.log(
      `  A hosting X and Y, B only Y, 20 Y then 20 X, each polls once, TAKE_SHARE=${rule}: ${
        shown.join("; ")
      }`,
    );
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { "database-url": { type: "string" }, rounds: { type: "string", default: "7" } },
  });
  const rounds = Number(values.rounds);
  if (!Number.isInteger(rounds) || rounds < 1) {
    console.error(`--rounds must be a positive integer: current value is ${JSON.stringify(values.rounds)}`);
    Deno.exit(2);
  }
  const pglite = await openPglite();
  try {
    await new Store(pglite).applySchema();
    await measure("PGlite (in memory)", pglite, rounds);
  } finally {
    await pglite.close();
  }
  const url = values["database-url"] ?? Deno.env.get("TEST_DATABASE_URL");
  if (url) {
    const sandbox = await createSandbox(url, { prefix: "bench_spread", max: 8 });
    try {
      await measure(`PostgreSQL (${sandbox.store.client.describe})`, sandbox.store.client, rounds);
    } finally {
      await sandbox.drop();
    }
  } else {
    console.log("\nPostgreSQL: skipped (no --database-url or TEST_DATABASE_URL)");
  }
}
