/**
 * `deno task bench:capacity`: how many steps a second one database carries,
 * and how many commits a step costs, with group commit off and on, beside
 * the raw floor, all in one run on the same server.
 *
 * Rows, per store (PostgreSQL when `DATABASE_URL` or `TEST_DATABASE_URL` is
 * set, and the embedded PGlite):
 *
 * - `plain` (PostgreSQL): the reference, `plain_floor.ts` run as a process of
 *   its own: a plain postgres.js script of four autocommit statements a step
 *   on two bare tables, `--clients` connections, warmed up;
 * - `raw`: the floor the ratios are to, the same four statements on the same
 *   bare tables from this process, on a pool of `--clients` connections, with
 *   1, 16, 64 and 256 runs in flight (more runs than clients queue for a
 *   connection). At `--clients` in flight it must match `plain` within 10%
 *   (the report says whether it does);
 * - `host`: one worker host holding that many runs in flight, the scripted
 *   agent (answers at once), its own pool of two connections as a worker
 *   has, group commit off;
 * - `host+group`: the same with `GROUP_COMMIT_MS` (`--group-commit-ms`,
 *   default 2; several, `--group-commit-ms 1,2,4`, give a row each,
 *   `host+group@1` and so on, taking turns with the others).
 *
 * Every row is timed on a pool already warm: its connections opened, its
 * statements prepared, its code compiled, by uncounted runs on the same pool
 * first. (Before, each row's pool was opened inside the clock, over 150
 * runs, and the raw row read about half of the plain script's figure.) A
 * row is at least 200 runs (800 steps). Each row runs `--turns` times
 * (default 3), the rows taking turns, and its median turn is reported.
 *
 * Commits are the server's own count: `pg_stat_database.xact_commit` of a
 * database the bench makes for itself (`agent_runtime_capacity`, so no other
 * client's commits are counted), read before and after the timed part, each
 * time once every connection of the row's pool has flushed its counts
 * (`pg_stat_force_next_flush()`; the flushes' own statements are taken off).
 * Every ratio is to the raw floor at 16 clients, measured in the same run.
 * `agents@2s` is how many agents whose model takes 2 s a step the store
 * carries at that rate: steps/s x 2. For a server on this machine, its CPU
 * per step too (its processes' time from `/proc`; other clients of the
 * server during the row are counted with it).
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
import { PLAIN_STEP, plainTables } from "./plain_floor.ts";
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
  /** A local PostgreSQL's CPU time during the row (its processes' time from `/proc`); NaN when not visible. */
  serverCpuMs: number;
  commits: number;
}

type Timed = { seconds: number; cpuMs: number; serverCpuMs?: number };

const stepsPerS = (r: CapacityRow) => (r.runs * STEPS_PER_RUN) / r.seconds;
// 200 runs at least (800 steps), so a row lasts long enough at the floor's rate to be timed well.
const runsFor = (inFlight: number, scale: number) => Math.round(Math.max(200, 4 * inFlight) * scale);

/** A store's commit counter: `pg_stat_database.xact_commit` as the server has it now. */
type Commits = () => Promise<number>;

/** A row's connections: its store, and how to make each connection report its counts now. */
interface Pool {
  store: Store;
  /** Makes every connection of the pool flush its pending counts; resolves with the commits it made itself. */
  flush: () => Promise<number>;
  /** Closes the pool (PGlite's one instance stays open). */
  close: () => Promise<void>;
}

/**
 * The runtime's client of `max` connections on `url` (`openPostgres`), whose counts can be flushed: a
 * backend sends its counts to the server's statistics at most once a second, or when told.
 */
async function pgPool(url: string, max: number): Promise<Pool> {
  const client = await openPostgres(url, { max });
  // Every connection opened now, outside the count (the flush below must find each open already).
  await Promise.all(Array.from({ length: max }, () => client.query("select pg_sleep(0.01)")));
  return {
    store: new Store(client),
    flush: async () => {
      // As many statements at once as the pool has connections: each takes an idle connection of its own,
      // so every backend's counts are flushed; each statement is one commit.
      await Promise.all(Array.from({ length: max }, () => client.query("select pg_stat_force_next_flush()")));
      return max;
    },
    close: () => client.close(),
  };
}

/** The plain script's steps/s (bench/plain_floor.ts in a process of its own) on `url`. */
async function plainFloor(url: string, clients: number, runs: number): Promise<number> {
  const script = new URL("./plain_floor.ts", import.meta.url).pathname;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, "--url", url, "--clients", String(clients), "--runs", String(runs)],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  if (!out.success) throw new Error(`plain_floor failed: ${new TextDecoder().decode(out.stderr)}`);
  return JSON.parse(text.split("\n").at(-1)!).steps_per_s;
}

async function submitPending(client: SqlClient, n: number): Promise<void> {
  const prefix = `c-${crypto.randomUUID().slice(0, 8)}`;
  await client.query(
    `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
     select $1 || '-' || i, 'provision', 'bench', '"bench"', 'pending', 0, now(), now()
       from generate_series(0, $2::int - 1) i`,
    [prefix, n],
  );
}

/**
 * The raw floor: `runs` runs of four steps, `inFlight` at a time over `client`, on the plain script's bare
 * tables and statements (`plain_floor.ts`), made beside the runtime's tables; returns its wall time.
 */
async function driveRaw(client: SqlClient, runs: number, inFlight: number, server: boolean): Promise<Timed> {
  await client.exec(plainTables());
  const prefix = `raw-${crypto.randomUUID().slice(0, 8)}`;
  collectGarbage();
  const t = await timed(
    () =>
      fanOut(runs, inFlight, async (i) => {
        for (let seq = 0; seq < STEPS_PER_RUN; seq++) {
          for (const [text, params] of PLAIN_STEP) await client.query(text, params(`${prefix}-${i}`, seq));
        }
      }),
    server,
  );
  return t;
}

/** One worker host driving `runs` runs, `inFlight` at a time, through `store`; returns its wall time. */
async function driveHost(
  plain: Store,
  runs: number,
  inFlight: number,
  groupCommitMs: number,
  server: boolean,
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
  }, server);
  times?.stop(runs);
  await host.stop();
  if (failed) throw new Error(failed);
  return t;
}

/** The rows of one store. `open` gives a fresh store on the bench's tables (a pool of `max` for PostgreSQL). */
async function storeRows(opts: {
  name: string;
  open: (max: number) => Promise<Pool>;
  commits: Commits;
  /** Whether a local server's CPU is read (PostgreSQL on this machine; PGlite runs in this process). */
  server: boolean;
  /** The plain script's steps/s at a concurrency, run as a process of its own (PostgreSQL only). */
  plainFloor?: (clients: number, runs: number) => Promise<number>;
  clients: number;
  groupCommitMs: readonly number[];
  scale: number;
  turns: number;
  inFlight: readonly number[];
  /** Prints each host row's statements per step and their mean latency. */
  statements: boolean;
  /** The rows to measure, of `plain`, `raw`, `host` and `host+group`. */
  kinds: readonly string[];
}): Promise<CapacityRow[]> {
  const rows: CapacityRow[] = [];
  // Each row on a pool of its own, warmed up first (every connection opened, every statement prepared, the
  // JIT warm), then timed on that same pool: opening connections is not a step's cost. Its commits are the
  // server's count between two flushes of every connection's pending counts.
  const measure = async (
    kind: string,
    inFlight: number,
    max: number,
    drive: (s: Store, n: number, times?: StatementTimes) => Promise<Timed>,
  ) => {
    const runs = runsFor(inFlight, opts.scale);
    const pool = await opts.open(max);
    const times = opts.statements && kind !== "raw" ? new StatementTimes() : undefined;
    let t: Timed;
    let commits: number;
    try {
      await drive(pool.store, Math.max(20, 2 * inFlight));
      await pool.flush();
      const c0 = await opts.commits();
      t = await drive(pool.store, runs, times);
      const flushed = await pool.flush();
      commits = (await opts.commits()) - c0 - flushed;
    } finally {
      await pool.close();
    }
    const row = {
      store: opts.name,
      kind,
      inFlight,
      runs,
      seconds: t.seconds,
      cpuMs: t.cpuMs,
      serverCpuMs: t.serverCpuMs ?? Number.NaN,
      commits,
    };
    rows.push(row);
    console.log(line(row));
    for (const e of times?.entries() ?? []) {
      console.log(
        `  ${e.name.padEnd(26)} per_step=${(e.perRun / STEPS_PER_RUN).toFixed(3)} mean_us=${e.us.toFixed(0)}`,
      );
    }
  };
  const plain = async (inFlight: number) => {
    if (!opts.plainFloor) return;
    const runs = runsFor(inFlight, opts.scale);
    const stepsPerSecond = await opts.plainFloor(inFlight, runs);
    const row = {
      store: opts.name,
      kind: "plain",
      inFlight,
      runs,
      seconds: (runs * STEPS_PER_RUN) / stepsPerSecond,
      cpuMs: Number.NaN,
      serverCpuMs: Number.NaN,
      commits: runs * STEPS_PER_RUN * 4,
    };
    rows.push(row);
    console.log(line(row));
  };
  for (const inFlight of opts.inFlight) {
    // Turns interleave the three rows, so a burst of load from elsewhere on the machine hits them alike.
    for (let turn = 0; turn < opts.turns; turn++) {
      if (inFlight === opts.clients && opts.kinds.includes("plain")) await plain(inFlight);
      if (opts.kinds.includes("raw")) {
        await measure("raw", inFlight, opts.clients, (s, n) => driveRaw(s.client, n, inFlight, opts.server));
      }
      if (opts.kinds.includes("host")) {
        await measure("host", inFlight, 2, (s, n, tm) => driveHost(s, n, inFlight, 0, opts.server, tm));
      }
      if (opts.kinds.includes("host+group")) {
        for (const ms of opts.groupCommitMs) {
          await measure(
            opts.groupCommitMs.length > 1 ? `host+group@${ms}` : "host+group",
            inFlight,
            2,
            (s, n, tm) => driveHost(s, n, inFlight, ms, opts.server, tm),
          );
        }
      }
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
  } steps/s=${s.toFixed(0).padStart(6)} commits/step=${perStep(r, r.commits)} cpu_ms/step=${
    perStep(r, r.cpuMs)
  } server_cpu_ms/step=${perStep(r, r.serverCpuMs)}`;
}

const perStep = (r: CapacityRow, n: number) =>
  Number.isNaN(n) ? "-" : (n / (r.runs * STEPS_PER_RUN)).toFixed(3);

/**
 * The summary table: every row as a ratio to the raw floor at `clients` in flight of its store, and that
 * floor beside the plain script's (`plain`, PostgreSQL only) measured in the same run.
 */
export function report(rows: CapacityRow[], clients: number): string {
  const out: string[] = [];
  for (const store of [...new Set(rows.map((r) => r.store))]) {
    const mine = rows.filter((r) => r.store === store);
    const floor = mine.find((r) => r.kind === "raw" && r.inFlight === clients) ??
      mine.filter((r) => r.kind === "raw").at(-1) ?? mine[0];
    out.push(
      `\n${store}: ratios to raw at ${floor.inFlight} in flight (${stepsPerS(floor).toFixed(0)} steps/s)`,
      `${"row".padEnd(11)} ${"in flight".padStart(9)} ${"steps/s".padStart(8)} ${"x raw".padStart(6)} ${
        "commits/step".padStart(12)
      } ${"agents@2s".padStart(9)} ${"cpu ms/step".padStart(11)} ${"server ms/step".padStart(14)}`,
    );
    for (const r of mine) {
      const s = stepsPerS(r);
      out.push(
        `${r.kind.padEnd(11)} ${String(r.inFlight).padStart(9)} ${s.toFixed(0).padStart(8)} ${
          (s / stepsPerS(floor)).toFixed(2).padStart(6)
        } ${perStep(r, r.commits).padStart(12)} ${(s * 2).toFixed(0).padStart(9)} ${
          perStep(r, r.cpuMs).padStart(11)
        } ${perStep(r, r.serverCpuMs).padStart(14)}`,
      );
    }
    const plain = mine.find((r) => r.kind === "plain" && r.inFlight === floor.inFlight);
    if (plain) {
      const ratio = stepsPerS(floor) / stepsPerS(plain);
      out.push(
        `raw at ${floor.inFlight} / the plain script at ${floor.inFlight}: ${ratio.toFixed(2)} (${
          Math.abs(ratio - 1) <= 0.1 ? "within" : "NOT within"
        } 10%)`,
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

/**
 * PostgreSQL's commit counter for the bench's database, read on `admin`. A read's own three statements are
 * flushed at once by its last one, so each read adds three commits to every later one: taken off here.
 */
function pgCommits(admin: SqlClient): Commits {
  let reads = 0;
  return async () => {
    await admin.query("select pg_stat_clear_snapshot()");
    const rows = await admin.query<{ n: string }>(
      "select xact_commit::text as n from pg_stat_database where datname = current_database()",
    );
    await admin.query("select pg_stat_force_next_flush()");
    return Number(rows[0].n) - 3 * reads++;
  };
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
      rows: { type: "string", default: "plain,raw,host,host+group" },
    },
  });
  const clients = Number(values.clients);
  const groupCommitMs = values["group-commit-ms"].split(",").map(Number);
  const scale = Number(values.scale);
  const turns = Number(values.turns);
  const inFlight = values["in-flight"].split(",").map(Number);
  const stores = values.stores.split(",");
  const rows: CapacityRow[] = [];
  const url = Deno.env.get("DATABASE_URL") ?? Deno.env.get("TEST_DATABASE_URL");
  console.log(
    `bench:capacity group_commit_ms=${groupCommitMs.join(",")} raw_clients=${clients} in_flight=${
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
            open: (max) => pgPool(sandbox.url, max),
            commits: pgCommits(sandbox.store.client),
            server: true,
            plainFloor: (clients, runs) => plainFloor(u.toString(), clients, runs),
            clients,
            groupCommitMs,
            scale,
            turns,
            inFlight,
            statements: values.statements,
            kinds: values.rows.split(","),
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
          open: () =>
            Promise.resolve({
              store: new Store(view()),
              flush: () => Promise.resolve(0),
              close: () => Promise.resolve(),
            }),
          commits,
          server: false,
          clients,
          groupCommitMs,
          scale,
          turns,
          inFlight,
          statements: values.statements,
          kinds: values.rows.split(","),
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
