/**
 * `deno task bench:capacity`: how many steps a second one database carries,
 * and how many commits a step costs, with group commit off and on, beside
 * the raw floor, all in one run on the same server.
 *
 * Rows, per store (PostgreSQL when `DATABASE_URL` or `TEST_DATABASE_URL` is
 * set, and the embedded PGlite):
 *
 * - `raw`: the floor, four single-statement commits a step (no fence, no
 *   read), from `--clients` connections (default 16), with 1, 16, 64 and 256
 *   runs in flight (more runs than clients queue for a connection);
 * - `host`: one worker host holding that many runs in flight, the scripted
 *   agent (answers at once), its own pool of two connections as a worker
 *   has, group commit off;
 * - `host+group`: the same with `GROUP_COMMIT_MS` (`--group-commit-ms`,
 *   default 2).
 *
 * Each row runs `--turns` times (default 3), the three rows taking turns,
 * and its median turn is reported.
 *
 * Commits are the server's own count: `pg_stat_database.xact_commit` of a
 * database the bench makes for itself (`agent_runtime_capacity`, so no other
 * client's commits are counted), read after each row's connections are
 * closed (a backend flushes its counts as it exits). Every ratio is to the
 * raw floor at 16 clients, measured in the same run. `agents@2s` is how many
 * agents whose model takes 2 s a step the store carries at that rate:
 * steps/s x 2.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { defineAgent } from "../runtime/agent/agent.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { type SqlClient, Store } from "../runtime/store/store.ts";
import { ToolRegistry } from "../runtime/agent/tools.ts";
import { ScriptedPlanner, scriptedTools } from "./step_rows.ts";
import { collectGarbage, fanOut, StatementTimes, STEPS_PER_RUN, timed } from "./step_measure.ts";

/** Runs in flight the bench measures at. */
export const IN_FLIGHT = [1, 16, 64, 256] as const;
const BENCH_DB = "agent_runtime_capacity";

interface CapacityRow {
  store: string;
  kind: string;
  inFlight: number;
  runs: number;
  seconds: number;
  /** This process's CPU time during the row (the host's own work; the raw floor's driver). */
  cpuMs: number;
  commits: number;
}

type Timed = { seconds: number; cpuMs: number };

const stepsPerS = (r: CapacityRow) => (r.runs * STEPS_PER_RUN) / r.seconds;
const runsFor = (inFlight: number, scale: number) => Math.round(Math.max(150, 4 * inFlight) * scale);

/** A store's commit counter: `pg_stat_database.xact_commit` as the server has it now. */
type Commits = () => Promise<number>;

async function submitPending(client: SqlClient, n: number): Promise<void> {
  const prefix = `c-${crypto.randomUUID().slice(0, 8)}`;
  await client.query(
    `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
     select $1 || '-' || i, 'provision', 'bench', '"bench"', 'pending', 0, now(), now()
       from generate_series(0, $2::int - 1) i`,
    [prefix, n],
  );
}

// The floor's four writes a step, plain (no fence, no condition, no read), as step_rows.ts's raw row.
const RAW_STEP: [string, (runId: string, seq: number) => unknown[]][] = [
  [
    `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at) values ($1, $2, 'intent', 1, 1, now())`,
    (runId, seq) => [runId, seq],
  ],
  [
    `update journal set status = 'confirmed', decision = '{"tool":"create_server","args":{}}', confirmed_at = now()
      where run_id = $1 and seq = $2`,
    (runId, seq) => [runId, seq],
  ],
  [
    `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
     values ($1, $2, $3, 'create_server', '{}', 'intent', 1, 1, now())`,
    (runId, seq) => [`${runId}:${seq}`, runId, seq],
  ],
  [
    `update side_effects set status = 'confirmed', result = '{"id":"i-1"}', remote = 'created', confirmed_at = now()
      where idempotency_key = $1`,
    (runId, seq) => [`${runId}:${seq}`],
  ],
];

/** The raw floor: `runs` runs of four steps, `inFlight` at a time over `client`; returns its wall time. */
async function driveRaw(client: SqlClient, runs: number, inFlight: number): Promise<Timed> {
  const prefix = `raw-${crypto.randomUUID().slice(0, 8)}`;
  await client.query(
    `insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
     select $1 || '-' || i, 'provision', 'bench', 'done', 1, now(), now() from generate_series(0, $2::int - 1) i`,
    [prefix, runs],
  );
  collectGarbage();
  const t = await timed(() =>
    fanOut(runs, inFlight, async (i) => {
      for (let seq = 0; seq < STEPS_PER_RUN; seq++) {
        for (const [text, params] of RAW_STEP) await client.query(text, params(`${prefix}-${i}`, seq));
      }
    })
  );
  return t;
}

/** One worker host driving `runs` runs, `inFlight` at a time, through `store`; returns its wall time. */
async function driveHost(
  plain: Store,
  runs: number,
  inFlight: number,
  groupCommitMs: number,
  times?: StatementTimes,
): Promise<Timed> {
  await submitPending(plain.client, runs);
  const store = times ? new Store(times.tap(plain.client)) : plain;
  const clock = new SystemClock();
  const agent = defineAgent({ name: "provision", tools: scriptedTools(), model: new ScriptedPlanner() });
  let ended = 0;
  let failed = "";
  let allDone!: () => void;
  const finished = new Promise<void>((r) => allDone = r);
  const host = new WorkerHost({
    agents: [{ agent, tools: new ToolRegistry(scriptedTools()), planner: new ScriptedPlanner() }],
    store,
    clock,
    log: new Logger({ clock, sink: discardSink }),
    owner: `capacity-${crypto.randomUUID().slice(0, 8)}`,
    runsPerWorker: inFlight,
    pollMs: 50,
    groupCommitMs,
    onOutcome: (o) => {
      if (o.status !== "done") failed ||= `${o.runId} ended ${o.status}: ${o.error}`;
      if (++ended === runs) allDone();
    },
  });
  collectGarbage();
  times?.start();
  const t = await timed(async () => {
    host.start();
    await finished;
  });
  times?.stop(runs);
  await host.stop();
  if (failed) throw new Error(failed);
  return t;
}

/** The rows of one store. `open` gives a fresh store on the bench's tables (a pool of `max` for PostgreSQL). */
async function storeRows(opts: {
  name: string;
  open: (max: number) => Promise<Store>;
  /** Closes a store `open` gave (PGlite's one instance stays open). */
  close: (store: Store) => Promise<void>;
  commits: Commits;
  clients: number;
  groupCommitMs: number;
  scale: number;
  turns: number;
  inFlight: readonly number[];
  /** Prints each host row's statements per step and their mean latency. */
  statements: boolean;
}): Promise<CapacityRow[]> {
  const rows: CapacityRow[] = [];
  // Each row: a warm-up on a pool of its own (JIT, prepared statements), closed; then the counted part on a
  // fresh pool, whose commits are read once its connections have closed. Its submit is one commit more.
  const measure = async (
    kind: string,
    inFlight: number,
    max: number,
    drive: (s: Store, n: number, times?: StatementTimes) => Promise<Timed>,
  ) => {
    const runs = runsFor(inFlight, opts.scale);
    const warm = await opts.open(max);
    try {
      await drive(warm, Math.max(20, 2 * inFlight));
    } finally {
      await opts.close(warm);
    }
    const c0 = await opts.commits();
    const store = await opts.open(max);
    const times = opts.statements && kind !== "raw" ? new StatementTimes() : undefined;
    let t: Timed;
    try {
      t = await drive(store, runs, times);
    } finally {
      await opts.close(store);
    }
    const commits = (await opts.commits()) - c0 - 1;
    const row = { store: opts.name, kind, inFlight, runs, seconds: t.seconds, cpuMs: t.cpuMs, commits };
    rows.push(row);
    console.log(line(row));
    for (const e of times?.entries() ?? []) {
      console.log(
        `  ${e.name.padEnd(26)} per_step=${(e.perRun / STEPS_PER_RUN).toFixed(3)} mean_us=${e.us.toFixed(0)}`,
      );
    }
  };
  for (const inFlight of opts.inFlight) {
    // Turns interleave the three rows, so a burst of load from elsewhere on the machine hits them alike.
    for (let turn = 0; turn < opts.turns; turn++) {
      await measure("raw", inFlight, opts.clients, (s, n) => driveRaw(s.client, n, inFlight));
      await measure("host", inFlight, 2, (s, n, tm) => driveHost(s, n, inFlight, 0, tm));
      await measure(
        "host+group",
        inFlight,
        2,
        (s, n, tm) => driveHost(s, n, inFlight, opts.groupCommitMs, tm),
      );
    }
  }
  return medians(rows);
}

/** Each row's median turn (by wall time) of its store, kind and runs in flight. */
function medians(rows: CapacityRow[]): CapacityRow[] {
  const groups = new Map<string, CapacityRow[]>();
  for (const r of rows) {
    const key = `${r.store}/${r.kind}/${r.inFlight}`;
    groups.set(key, [...(groups.get(key) ?? []), r]);
  }
  return [...groups.values()].map((g) =>
    [...g].sort((a, b) => a.seconds - b.seconds)[Math.floor(g.length / 2)]
  );
}

function line(r: CapacityRow): string {
  const s = stepsPerS(r);
  return `${r.store.padEnd(10)} ${r.kind.padEnd(11)} in_flight=${String(r.inFlight).padStart(3)} runs=${
    String(r.runs).padStart(5)
  } steps/s=${s.toFixed(0).padStart(6)} commits/step=${
    (r.commits / (r.runs * STEPS_PER_RUN)).toFixed(2)
  } cpu_ms/step=${(r.cpuMs / (r.runs * STEPS_PER_RUN)).toFixed(3)}`;
}

/** The summary table: every row as a ratio to the raw floor at 16 clients of its store. */
export function report(rows: CapacityRow[], clients: number): string {
  const out: string[] = [];
  for (const store of [...new Set(rows.map((r) => r.store))]) {
    const mine = rows.filter((r) => r.store === store);
    const floor = mine.find((r) => r.kind === "raw" && r.inFlight === clients) ??
      mine.filter((r) => r.kind === "raw").at(-1)!;
    out.push(
      `\n${store}: ratios to raw at ${floor.inFlight} in flight (${stepsPerS(floor).toFixed(0)} steps/s)`,
      `${"row".padEnd(11)} ${"in flight".padStart(9)} ${"steps/s".padStart(8)} ${"x raw".padStart(6)} ${
        "commits/step".padStart(12)
      } ${"agents@2s".padStart(9)} ${"cpu ms/step".padStart(11)}`,
    );
    for (const r of mine) {
      const s = stepsPerS(r);
      out.push(
        `${r.kind.padEnd(11)} ${String(r.inFlight).padStart(9)} ${s.toFixed(0).padStart(8)} ${
          (s / stepsPerS(floor)).toFixed(2).padStart(6)
        } ${(r.commits / (r.runs * STEPS_PER_RUN)).toFixed(2).padStart(12)} ${
          (s * 2).toFixed(0).padStart(9)
        } ${(r.cpuMs / (r.runs * STEPS_PER_RUN)).toFixed(3).padStart(11)}`,
      );
    }
    const host1 = mine.find((r) => r.kind === "host" && r.inFlight === 1);
    const group1 = mine.find((r) => r.kind === "host+group" && r.inFlight === 1);
    if (host1 && group1) {
      out.push(`one run in flight: grouped ${(stepsPerS(group1) / stepsPerS(host1)).toFixed(2)}x ungrouped`);
    }
  }
  return out.join("\n");
}

/** PostgreSQL's commit count for the bench's database, after the last row's backends have exited. */
async function pgCommits(admin: SqlClient): Promise<number> {
  // A backend flushes its counts as it exits; give the closed pool's backends a moment to.
  await new Promise((r) => setTimeout(r, 300));
  await admin.query("select pg_stat_clear_snapshot()");
  const rows = await admin.query<{ n: string }>(
    "select xact_commit::text as n from pg_stat_database where datname = current_database()",
  );
  return Number(rows[0].n);
}

/** The command line. */
export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      clients: { type: "string", default: "16" },
      "group-commit-ms": { type: "string", default: "2" },
      scale: { type: "string", default: "1" },
      turns: { type: "string", default: "3" },
      stores: { type: "string", default: "postgres,pglite" },
      "in-flight": { type: "string", default: IN_FLIGHT.join(",") },
      statements: { type: "boolean", default: false },
    },
  });
  const clients = Number(values.clients);
  const groupCommitMs = Number(values["group-commit-ms"]);
  const scale = Number(values.scale);
  const turns = Number(values.turns);
  const inFlight = values["in-flight"].split(",").map(Number);
  const stores = values.stores.split(",");
  const rows: CapacityRow[] = [];
  const url = Deno.env.get("DATABASE_URL") ?? Deno.env.get("TEST_DATABASE_URL");
  console.log(
    `bench:capacity group_commit_ms=${groupCommitMs} raw_clients=${clients} in_flight=${
      inFlight.join(",")
    } turns=${turns} (the median turn of each row is reported)`,
  );
  if (stores.includes("postgres")) {
    if (!url) console.log("postgres: skipped (set DATABASE_URL or TEST_DATABASE_URL)");
    else {
      const server = await openPostgres(url, { max: 1 });
      const exists = await server.query(`select 1 from pg_database where datname = $1`, [BENCH_DB]);
      if (exists.length === 0) await server.exec(`create database ${BENCH_DB}`);
      await server.close();
      const u = new URL(url);
      u.pathname = `/${BENCH_DB}`;
      const sandbox = await createSandbox(u.toString(), { prefix: "cap", max: 1 });
      try {
        rows.push(
          ...await storeRows({
            name: "postgres",
            open: async (max) => new Store(await openPostgres(sandbox.url, { max })),
            close: (s) => s.client.close(),
            commits: () => pgCommits(sandbox.store.client),
            clients,
            groupCommitMs,
            scale,
            turns,
            inFlight,
            statements: values.statements,
          }),
        );
      } finally {
        await sandbox.drop();
      }
    }
  }
  if (stores.includes("pglite")) {
    const client = await openPglite();
    const shared = new Store(client);
    await shared.applySchema();
    // One instance, one backend: a view that does not close it, and its own counts flushed on demand.
    const view = (): SqlClient => ({
      describe: client.describe,
      query: (t, p, o) => client.query(t, p, o),
      run: (t, p) => client.run(t, p),
      exec: (t) => client.exec(t),
      close: () => Promise.resolve(),
    });
    const commits = async () => {
      await client.query("select pg_stat_force_next_flush()");
      await client.query("select 1");
      await client.query("select pg_stat_clear_snapshot()");
      const r = await client.query<{ n: string }>(
        "select xact_commit::text as n from pg_stat_database where datname = current_database()",
      );
      // The three statements of this look are commits too: not the row's.
      return Number(r[0].n) - 3;
    };
    try {
      rows.push(
        ...await storeRows({
          name: "pglite",
          open: () => Promise.resolve(new Store(view())),
          close: () => Promise.resolve(),
          commits,
          clients,
          groupCommitMs,
          scale,
          turns,
          inFlight,
          statements: values.statements,
        }),
      );
    } finally {
      await client.close();
    }
  }
  console.log(report(rows, clients));
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
