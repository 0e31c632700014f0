/**
 * `deno task bench:scale`: issue #8's scale goal, measured. Many demo runs on
 * PostgreSQL through the supervisor, with real worker processes and the mock
 * model and cloud served over HTTP from this process with a fixed latency per
 * call (model 500 ms, cloud 100 ms by default). For each shape it reports:
 *
 * - the wall time to drain every run, from the moment the supervisor is
 *   spawned (so worker start-up counts) to the last run's `done`;
 * - the ideal, latency-bound time beside it: 4 model calls and 3 tool calls
 *   in sequence per run, every run in parallel (one wave per
 *   `workers x runs-per-worker` runs);
 * - the peak resident memory of the whole process tree (the supervisor and
 *   all its descendants, VmRSS summed from `/proc`, sampled every 200 ms);
 *   the mocks, standing in for remote services, are not counted;
 * - the peak number of runs in flight (`status = 'running'`, same sampling);
 * - statements per step and per run, heartbeats and polls included: the
 *   database's committed transactions (`pg_stat_database.xact_commit`; every
 *   runtime statement is its own transaction) from the supervisor's spawn to
 *   its exit, less the statements this benchmark issued itself. The counter
 *   is database-wide, so other clients of the same database during the run
 *   would be counted too: the runtime's connections carry an
 *   `application_name`, and figures are marked when other connections were
 *   active;
 * - for context, the CPU used from spawn to drain: the machine's busy share,
 *   and seconds used by the tree, by this process (the mocks), by a local
 *   PostgreSQL and by the rest.
 *
 * Two shapes: many runs per worker process (`--workers 4 --runs-per-worker
 * 250`, 1,000 runs), judged against the goal (1,000 runs in flight at once,
 * at most 2 GiB for the tree, at most 3x the ideal), and today's
 * one-process-per-run shape for comparison (`RUNS_PER_WORKER=1`, one worker
 * process per run up to 100). The baseline defaults to 40 runs, not more: a
 * worker holds a pool of up to 2 connections even for one run, so 100
 * workers need some 200 connections, past PostgreSQL's default
 * `max_connections` of 100 (compose.yaml's server has it; workers then fail
 * with "too many clients" and the figures measure that instead); 40 workers
 * fit beside the supervisor, this benchmark and a test suite on the same
 * server. With `max_connections` of 220 or more, `--baseline-runs 200` gives
 * the full 100-process comparison. The benchmark warns when a shape needs
 * more connections than the server has free.
 *
 * Each shape gets a schema of its own, dropped afterwards, and fresh mocks;
 * at the end every run must be done and the cloud must hold exactly 3
 * resources per run, one per idempotency key.
 *
 * ```sh
 * deno task bench:scale                                  # 1,000 runs, then the 40-run baseline
 * deno task bench:scale --runs 50 --baseline-runs 20     # a quick look
 * deno task bench:scale --skip-baseline --database-url postgres://postgres@127.0.0.1:5432/test
 * ```
 *
 * Exit codes: 0 measured (the goal verdict is in the table), 1 a shape did
 * not drain or ended wrong, 2 bad flags.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { DEMO_GOAL } from "../examples/provision/agent.ts";
import { MockCloud } from "../mock/cloud.ts";
import { MockModel } from "../mock/model.ts";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { type Floor, measureFloor, RunRecorder } from "./scale_floor.ts";
import { createSandbox, type SchemaSandbox } from "../runtime/store/sandbox.ts";

const USAGE = `bench:scale: many runs through the supervisor with real processes on PostgreSQL.

usage: deno task bench:scale [--flag value ...]

  --runs N               runs of the many-runs-per-process shape (default 1000)
  --workers N            its worker processes (default 4)
  --runs-per-worker N    runs each of its workers holds at once (default 250)
  --model-ms MS          latency of every model call (default 500)
  --cloud-ms MS          latency of every cloud call (default 100)
  --baseline-runs N      runs of the one-process-per-run shape (default 40; workers = min(N, 100))
  --skip-baseline        measure the many-runs shape only
  --floor-batch N        rows per grouped statement of the CPU floor (default 64; the rows per statement
                         the shape wrote are printed beside it)
  --database-url URL     PostgreSQL server (default DATABASE_URL, TEST_DATABASE_URL or
                         postgres://postgres@127.0.0.1:5432/test); each shape uses a schema of its own`;

const ROOT = new URL("../", import.meta.url);
const repoPath = (rel: string) => fileURLToPath(new URL(rel, ROOT));

const DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/test";
const SAMPLE_MS = 200;
const DRAIN_TIMEOUT_MS = 10 * 60_000;
const STOP_TIMEOUT_MS = 60_000;
const MAX_BASELINE_WORKERS = 100;
const SUPERVISOR_CONNECTIONS = 2; // openPostgres's default pool
const BENCH_CONNECTIONS = 5; // the sandbox's pool of 4 and one to read the counters
const MODEL_CALLS_PER_RUN = 4; // three tool decisions and the final answer
const TOOL_CALLS_PER_RUN = 3; // server, database, DNS record
const GOAL_BYTES = 2 * 1024 ** 3;
const GOAL_RATIO = 3;
/**
 * Rows of the floor's grouped statements: what the grouped shape wrote per statement at 5,000 runs in
 * flight (45-62). The same with grouping off: the floor is a step's share of a grouped statement, what
 * a step must cost at least, not what a design that sends single rows costs.
 */
const FLOOR_BATCH = 64;
/** Above this share of the busy CPU time used by other processes, the timings are flagged. */
const OTHER_LOAD_SHARE = 0.2;

/** Settings the supervisor and workers read; never inherited from the shell running the benchmark. */
const SCRUBBED = [
  "AGENT",
  "INPUT",
  "GOAL",
  "RUN_ID",
  "WORKER",
  "SUPERVISOR",
  "MODEL",
  "MODEL_API_KEY",
  "MODEL_HEADERS",
  "MODEL_QUERY",
  "CRASH_AT",
  "CRASH_SEQ",
  "STALL_AT",
  "STALL_MS",
  "DATA_DIR",
  "MAX_STEPS",
];

/** One configuration measured. */
interface Shape {
  name: string;
  runs: number;
  workers: number;
  runsPerWorker: number;
  /** Judged against the goal (the many-runs-per-process shape). */
  judged: boolean;
}

interface Latency {
  modelMs: number;
  cloudMs: number;
}

/** What one shape measured. */
interface ShapeResult {
  shape: Shape;
  /** Empty when every run finished right. */
  problems: string[];
  /** Spawn to the last run's done, seconds; undefined when it did not drain. */
  drainS?: number;
  /** Spawn to the first step's model request, seconds. */
  firstStepS?: number;
  /** A done run's time from its first step to its end, seconds: median and longest. */
  runP50S?: number;
  runMaxS?: number;
  idealS: number;
  peakInFlight: number;
  peakRssKiB: number;
  peakProcesses: number;
  /** Commits over the run, the benchmark's own subtracted. */
  statements: number;
  ownStatements: number;
  rollbacks: number;
  journalRows: number;
  sideEffects: number;
  /**
   * CPU from the supervisor's spawn to the drain: the machine's busy share (all
   * cores), and seconds used by the tree, by this process (the mocks), by the
   * local PostgreSQL's processes and by everything else on the machine.
   */
  cpu: { busyPct: number; busyS: number; treeS: number; benchS: number; postgresS: number; otherS: number };
  /** Other clients' connections active on the database during the run (their statements are counted too). */
  otherClients: string[];
  log: LogSummary;
  /** The worker processes' CPU (the supervisor's children), seconds: all of it, and from the first run taken. */
  workerCpuS: number;
  workerStepCpuS: number;
  /** Rows the shape wrote per statement it sent (journal and tool rows, each intent and confirm, and closes). */
  rowsPerStatement: number;
  /** The CPU floor of a step, measured after the drain; undefined when no run was recorded. */
  floor?: Floor;
}

interface LogSummary {
  lines: number;
  /** Lines per level (`INFO`, `WARN`, `ERROR`, ... or `other` for lines that are not JSON log lines). */
  levels: Record<string, number>;
  /** Log lines above INFO, per event. */
  events: Record<string, number>;
  /** Log lines above INFO: the first and the last few. */
  notable: string[];
  /** Lines that are not log lines (Deno's own messages, uncaught errors), each once, with its count. */
  other: [string, number][];
}

/** Counts the supervisor's output lines without keeping them: a few notable lines are kept. */
class LogTally {
  static readonly KEEP = 12;
  static readonly KEEP_OTHER = 20;
  lines = 0;
  readonly levels = new Map<string, number>();
  readonly events = new Map<string, number>();
  readonly first: string[] = [];
  readonly last: string[] = [];
  notable = 0;
  readonly other = new Map<string, number>();

  add(raw: string): void {
    // deno-lint-ignore no-control-regex
    const line = raw.replace(/\x1b\[[0-9;]*m/g, "").trimEnd();
    if (line.trim() === "") return;
    this.lines++;
    let entry: { level?: unknown; event?: unknown } | undefined;
    if (line.startsWith("{")) {
      try {
        entry = JSON.parse(line);
      } catch {
        // not a log line
      }
    }
    const level = typeof entry?.level === "string" ? entry.level : "other";
    this.levels.set(level, (this.levels.get(level) ?? 0) + 1);
    if (level === "INFO" || level === "DEBUG") return;
    if (level === "other") {
      if (this.other.has(line) || this.other.size < LogTally.KEEP_OTHER) {
        this.other.set(line, (this.other.get(line) ?? 0) + 1);
      }
      return;
    }
    const event = String(entry?.event);
    this.events.set(event, (this.events.get(event) ?? 0) + 1);
    this.notable++;
    if (this.first.length < LogTally.KEEP) this.first.push(line);
    else {
      this.last.push(line);
      if (this.last.length > LogTally.KEEP) this.last.shift();
    }
  }

  summary(): LogSummary {
    const skipped = this.notable - this.first.length - this.last.length;
    return {
      lines: this.lines,
      levels: Object.fromEntries(this.levels),
      events: Object.fromEntries(this.events),
      notable: [...this.first, ...(skipped > 0 ? [`... ${skipped} more ...`] : []), ...this.last],
      other: [...this.other],
    };
  }
}

async function drainLines(stream: ReadableStream<Uint8Array>, tally: LogTally): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const parts = (rest + chunk).split("\n");
    rest = parts.pop() ?? "";
    for (const line of parts) tally.add(line);
  }
  if (rest) tally.add(rest);
}

/** CPU time of one process (user + system, clock ticks) from its `/proc/<pid>/stat` fields after the name. */
const cpuTicks = (fields: string[]) => Number(fields[11]) + Number(fields[12]); // utime, stime

/** The machine's busy and total CPU time so far, in clock ticks, from `/proc/stat`. */
async function machineCpu(): Promise<{ busy: number; total: number }> {
  const line = (await Deno.readTextFile("/proc/stat")).split("\n")[0];
  // cpu user nice system idle iowait irq softirq steal ...
  const [user, nice, system, idle, iowait, irq, softirq, steal] = line.split(/\s+/).slice(1, 9).map(Number);
  const busy = user + nice + system + irq + softirq + steal;
  return { busy, total: busy + idle + iowait };
}

/** CPU time of this process (the mocks and the sampling), clock ticks. */
async function ownCpu(): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${Deno.pid}/stat`);
  return cpuTicks(stat.slice(stat.lastIndexOf(")") + 2).split(" "));
}

/** CPU time so far (clock ticks) of every process whose name is `comm`, by pid. */
async function cpuOf(comm: string): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
      const close = stat.lastIndexOf(")");
      if (stat.slice(stat.indexOf("(") + 1, close) !== comm) continue;
      out.set(Number(entry.name), cpuTicks(stat.slice(close + 2).split(" ")));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** Clock ticks per second of `/proc` CPU times. */
async function clockTicks(): Promise<number> {
  try {
    const out = await new Deno.Command("getconf", { args: ["CLK_TCK"], stdout: "piped", stderr: "null" })
      .output();
    const n = Number(new TextDecoder().decode(out.stdout).trim());
    return Number.isInteger(n) && n > 0 ? n : 100;
  } catch {
    return 100; // USER_HZ on Linux
  }
}

/**
 * Resident memory of `root` and all its descendants (KiB), how many processes
 * that is, and the CPU time they have used so far (clock ticks).
 */
async function treeRss(
  root: number,
): Promise<{ kib: number; processes: number; cpu: number; workers: Map<number, number> }> {
  const children = new Map<number, number[]>();
  const cpu = new Map<number, number>();
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    let stat: string;
    try {
      stat = await Deno.readTextFile(`/proc/${entry.name}/stat`);
    } catch {
      continue; // exited meanwhile
    }
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const ppid = Number(fields[1]);
    // Its own time and that of its children it has reaped (cutime, cstime): short-lived ones count too.
    cpu.set(Number(entry.name), cpuTicks(fields) + Number(fields[13]) + Number(fields[14]));
    const list = children.get(ppid);
    if (list) list.push(Number(entry.name));
    else children.set(ppid, [Number(entry.name)]);
  }
  let kib = 0;
  let processes = 0;
  let ticks = 0;
  const queue = [root];
  // Bounded: every pid is visited once, as the process table is a tree.
  while (queue.length > 0) {
    const pid = queue.pop()!;
    queue.push(...(children.get(pid) ?? []));
    ticks += cpu.get(pid) ?? 0;
    try {
      const status = await Deno.readTextFile(`/proc/${pid}/status`);
      const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
      processes++;
      if (m) kib += Number(m[1]); // a zombie has no VmRSS
    } catch {
      // exited meanwhile
    }
  }
  const workers = new Map((children.get(root) ?? []).map((pid) => [pid, cpu.get(pid) ?? 0]));
  return { kib, processes, cpu: ticks, workers };
}

/** A worker's pool: as cli/worker.ts sizes it. */
const workerConnections = (runsPerWorker: number) => Math.min(8, Math.max(2, runsPerWorker));

/** Warns when `shape` may need more connections than the server has free now. */
async function checkConnections(serverUrl: string, shape: Shape): Promise<void> {
  const conn = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await conn.unsafe<{ max: number; reserved: number; used: number }[]>(
      `select current_setting('max_connections')::int as max,
              current_setting('superuser_reserved_connections')::int as reserved,
              (select count(*) from pg_stat_activity where backend_type = 'client backend')::int - 1 as used`,
    );
    const perWorker = workerConnections(shape.runsPerWorker);
    const need = shape.workers * perWorker + SUPERVISOR_CONNECTIONS + BENCH_CONNECTIONS;
    const free = row.max - row.used;
    if (need > free) {
      console.log(
        `  WARNING: up to ${need} connections needed (${shape.workers} workers x ${perWorker}, the ` +
          `supervisor and this benchmark), but the server has ${free} free (max_connections ${row.max}, ` +
          `${row.reserved} of them for superusers, ${row.used} in use): expect "too many clients" errors`,
      );
    }
  } finally {
    await conn.end();
  }
}

/**
 * The database's committed and rolled-back transactions so far, read on a
 * connection of its own, and the client connections to the database (other
 * than the runtime's, named `tag`) that did something since `since`, as
 * `pid application_name`.
 */
async function readCommits(
  serverUrl: string,
  since = new Date(),
  tag = "",
): Promise<{ commits: number; rollbacks: number; others: string[] }> {
  const conn = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await conn.unsafe<{ commits: string; rollbacks: string; others: string[] }[]>(
      `select sum(xact_commit)::text as commits, sum(xact_rollback)::text as rollbacks,
              (${OTHER_CLIENTS_SQL}) as others
         from pg_stat_database where datname = current_database()`,
      [tag, since.toISOString()],
    );
    return { commits: Number(row.commits), rollbacks: Number(row.rollbacks), others: row.others };
  } finally {
    await conn.end();
  }
}

/** Client connections to this database, other than this one and the runtime's (`$1`), active since `$2`. */
const OTHER_CLIENTS_SQL =
  `select coalesce(array_agg(pid || ' ' || application_name), '{}') from pg_stat_activity
   where datname = current_database() and backend_type = 'client backend' and application_name <> $1
     and pid <> pg_backend_pid() and state_change >= $2::timestamptz`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function idealSeconds(shape: Shape, latency: Latency): number {
  const perRunMs = MODEL_CALLS_PER_RUN * latency.modelMs + TOOL_CALLS_PER_RUN * latency.cloudMs;
  const waves = Math.ceil(shape.runs / (shape.workers * shape.runsPerWorker));
  return (waves * perRunMs) / 1000;
}

/** Inserts `runs` pending demo runs with one statement. */
async function insertRuns(sandbox: SchemaSandbox, runs: number): Promise<void> {
  const width = String(runs - 1).length;
  const ids = Array.from({ length: runs }, (_, i) => `scale-${String(i).padStart(width, "0")}`);
  await sandbox.store.client.query(
    `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
     select id, 'provision', $2, $3::text::jsonb, 'pending', 0, $4::timestamptz, $4::timestamptz
       from jsonb_array_elements_text($1::text::jsonb) as id`,
    [JSON.stringify(ids), DEMO_GOAL, JSON.stringify(DEMO_GOAL), new Date().toISOString()],
  );
}

/** The sandbox's URL with an `application_name`, which tells the runtime's connections from others. */
function taggedUrl(sandbox: SchemaSandbox, tag: string): string {
  const u = new URL(sandbox.url);
  u.searchParams.set("application_name", tag);
  return u.toString();
}

function startSupervisor(
  shape: Shape,
  databaseUrl: string,
  mocks: RunningMocks,
): Deno.ChildProcess {
  const env: Record<string, string> = {
    ...Deno.env.toObject(),
    ...Object.fromEntries(SCRUBBED.map((name) => [name, ""])),
    DATABASE_URL: databaseUrl,
    MODEL_URL: mocks.modelUrl,
    MODEL: "mock-planner",
    CLOUD_URL: mocks.cloudUrl,
    WORKERS: String(shape.workers),
    RUNS_PER_WORKER: String(shape.runsPerWorker),
    POLL_S: "0.5",
    HEARTBEAT_S: "3",
    LEASE_S: "12",
    LOG_FORMAT: "json",
  };
  return new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--unstable-no-legacy-abort",
      "--config",
      repoPath("deno.json"),
      repoPath("cli/main.ts"),
      "supervise",
    ],
    cwd: repoPath("."),
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

/** Runs one shape from an empty schema to drained; never throws for the runtime's failures, reports them. */
async function measure(
  serverUrl: string,
  shape: Shape,
  latency: Latency,
  floorBatch: number | undefined,
): Promise<ShapeResult> {
  const problems: string[] = [];
  const sandbox = await createSandbox(serverUrl, { prefix: "scale", max: 4 });
  // The first run's requests are kept, for the floor to send again.
  const recorder = new RunRecorder();
  const model = await MockModel.open();
  const cloud = await MockCloud.open();
  model.handler = recorder.wrap("model", model.handler);
  cloud.handler = recorder.wrap("cloud", cloud.handler);
  const mocks = await serveMocks({ model, cloud });
  const tally = new LogTally();
  let child: Deno.ChildProcess | undefined;
  let readers: Promise<unknown> = Promise.resolve();
  try {
    mocks.model.setFaults({ delay_ms: latency.modelMs });
    mocks.cloud.setFaults({ delay_ms: latency.cloudMs });
    // What one read of the counter costs (its connection's start-up, type lookup and query, counted
    // when the connection ends), measured on two reads in a row: the second is the baseline.
    const first = await readCommits(serverUrl);
    await sleep(1_000);
    const before = await readCommits(serverUrl);
    let own = Math.max(0, before.commits - first.commits);
    await insertRuns(sandbox, shape.runs);
    own++;

    const hz = await clockTicks();
    const machine0 = await machineCpu();
    const own0 = await ownCpu();
    const pg0 = await cpuOf("postgres");
    const t0 = Date.now();
    const tag = `bench-${sandbox.schema}`;
    child = startSupervisor(shape, taggedUrl(sandbox, tag), mocks);
    readers = Promise.all([drainLines(child.stdout, tally), drainLines(child.stderr, tally)]);
    let exitCode: number | undefined;
    const status = child.status.then((s) => exitCode = s.code);

    // Client connections to the database that did something during the run: this benchmark's own
    // pool, and others (whose statements the database-wide counter would count as the runtime's).
    const mine = new Set<string>();
    const others = new Set<string>();
    let peakInFlight = 0;
    let peakRssKiB = 0;
    let peakProcesses = 0;
    let drained = false;
    let treeTicks = 0;
    // Each worker's CPU at its last sample (one that exits keeps its last figure), and their sum when
    // the first run was taken (start-up: loading the program and the agent, opening the pool).
    const workerTicks = new Map<number, number>();
    let startupTicks: number | undefined;
    // Bounded by DRAIN_TIMEOUT_MS, or the supervisor's exit.
    while (Date.now() - t0 < DRAIN_TIMEOUT_MS && exitCode === undefined) {
      const tick = Date.now();
      const [rss, [counts]] = await Promise.all([
        treeRss(child.pid),
        sandbox.store.client.query<{ done: number; running: number; me: string; others: string[] }>(
          `select count(*) filter (where status = 'done')::int as done,
                  count(*) filter (where status = 'running')::int as running,
                  pg_backend_pid() || ' ' || current_setting('application_name') as me,
                  (${OTHER_CLIENTS_SQL}) as others
             from runs`,
          [tag, new Date(t0).toISOString()],
        ),
      ]);
      own++;
      mine.add(counts.me);
      for (const pid of counts.others) others.add(pid);
      if (rss.kib > peakRssKiB) peakRssKiB = rss.kib;
      if (rss.processes > peakProcesses) peakProcesses = rss.processes;
      treeTicks = rss.cpu;
      for (const [pid, ticks] of rss.workers) workerTicks.set(pid, ticks);
      if (startupTicks === undefined && (counts.running > 0 || counts.done > 0)) {
        startupTicks = [...workerTicks.values()].reduce((a, b) => a + b, 0);
      }
      if (counts.running > peakInFlight) peakInFlight = counts.running;
      if (counts.done === shape.runs) {
        drained = true;
        break;
      }
      await sleep(Math.max(0, SAMPLE_MS - (Date.now() - tick)));
    }
    const machine1 = await machineCpu();
    const ownTicks = await ownCpu() - own0;
    // PostgreSQL's processes now, less what those alive at the start had used then (a backend that
    // came and went in between is missed).
    const pgTicks = [...(await cpuOf("postgres")).entries()]
      .reduce((sum, [pid, ticks]) => sum + ticks - (pg0.get(pid) ?? 0), 0);
    const busyTicks = machine1.busy - machine0.busy;
    if (!drained) {
      problems.push(
        exitCode === undefined
          ? `not drained within ${DRAIN_TIMEOUT_MS / 60_000} minutes`
          : `the supervisor exited with code ${exitCode} before the runs were done`,
      );
    }

    child.kill("SIGTERM");
    const stopped = await Promise.race([status.then(() => true), sleep(STOP_TIMEOUT_MS).then(() => false)]);
    if (!stopped) {
      problems.push(`the supervisor did not stop within ${STOP_TIMEOUT_MS / 1000} s of SIGTERM: killed`);
      child.kill("SIGKILL");
      await status;
    } else if (exitCode !== 0 && drained) {
      problems.push(`the supervisor exited with code ${exitCode} after SIGTERM`);
    }
    await readers;

    const [final] = await sandbox.store.client.query<{
      done: number;
      other: string | null;
      last_done: string | null;
      first_step: string | null;
      run_p50: string | null;
      run_max: string | null;
      journal: number;
      effects: number;
    }>(
      `with spans as (
         select extract(epoch from r.updated_at - min(j.intent_at)) as d
           from runs r join journal j using (run_id)
          where r.status = 'done'
          group by r.run_id, r.updated_at)
       select (select count(*) from runs where status = 'done')::int as done,
              (select string_agg(status || '=' || n, ', ') from
                 (select status, count(*) as n from runs where status <> 'done' group by status) s) as other,
              (select extract(epoch from max(updated_at))::text from runs where status = 'done') as last_done,
              (select extract(epoch from min(intent_at))::text from journal) as first_step,
              (select (percentile_cont(0.5) within group (order by d))::text from spans) as run_p50,
              (select max(d)::text from spans) as run_max,
              (select count(*) from journal)::int as journal,
              (select count(*) from side_effects)::int as effects`,
    );
    own++;
    if (final.done !== shape.runs) {
      problems.push(`${final.done} of ${shape.runs} runs done (others: ${final.other ?? "none"})`);
    }
    const created = mocks.cloud.created();
    const keys = new Set(created.map((c) => c.key));
    if (created.length !== TOOL_CALLS_PER_RUN * shape.runs) {
      problems.push(
        `the cloud holds ${created.length} resources, expected ${TOOL_CALLS_PER_RUN * shape.runs}`,
      );
    }
    if (keys.size !== created.length) {
      problems.push(`${created.length - keys.size} resources share an idempotency key`);
    }

    // Every connection that ran statements is closed now, so its counts are flushed to the statistics.
    await sandbox.store.client.close();
    await sleep(1_000);
    const after = await readCommits(serverUrl, new Date(t0), tag);
    for (const pid of after.others) others.add(pid);
    const statements = after.commits - before.commits - own;
    const rowsPerStatement = (2 * final.journal + 2 * final.effects + final.done) / Math.max(1, statements);
    const workerAll = [...workerTicks.values()].reduce((a, b) => a + b, 0);
    let floor: Floor | undefined;
    if (recorder.requests.length === MODEL_CALLS_PER_RUN + TOOL_CALLS_PER_RUN) {
      floor = await measureFloor({
        recorded: recorder.requests,
        concurrency: Math.min(shape.runs, shape.runsPerWorker),
        batch: floorBatch ?? FLOOR_BATCH,
        modelMs: latency.modelMs,
        cloudMs: latency.cloudMs,
        databaseUrl: serverUrl,
      });
    } else {
      problems.push(`the first run sent ${recorder.requests.length} requests, not 7: no floor measured`);
    }
    const seconds = (epoch: string | null) => epoch === null ? undefined : Number(epoch) - t0 / 1000;
    return {
      shape,
      problems,
      drainS: drained ? seconds(final.last_done) : undefined,
      firstStepS: seconds(final.first_step),
      runP50S: final.run_p50 === null ? undefined : Number(final.run_p50),
      runMaxS: final.run_max === null ? undefined : Number(final.run_max),
      idealS: idealSeconds(shape, latency),
      peakInFlight,
      peakRssKiB,
      peakProcesses,
      statements,
      ownStatements: own,
      rollbacks: after.rollbacks - before.rollbacks,
      journalRows: final.journal,
      sideEffects: final.effects,
      cpu: {
        busyPct: (100 * busyTicks) / Math.max(1, machine1.total - machine0.total),
        busyS: busyTicks / hz,
        treeS: treeTicks / hz,
        benchS: ownTicks / hz,
        postgresS: pgTicks / hz,
        otherS: Math.max(0, busyTicks - treeTicks - ownTicks - pgTicks) / hz,
      },
      otherClients: [...others].filter((c) => !mine.has(c)),
      log: tally.summary(),
      workerCpuS: workerAll / hz,
      workerStepCpuS: (workerAll - (startupTicks ?? 0)) / hz,
      rowsPerStatement,
      floor,
    };
  } finally {
    if (child !== undefined) {
      try {
        child.kill("SIGKILL");
      } catch {
        // already exited
      }
      await child.status;
      await readers;
    }
    await mocks.close();
    await sandbox.drop();
  }
}

/** The workers' CPU per step from the first run taken, ms. */
function workerMsPerStep(r: ShapeResult): number | undefined {
  return r.journalRows === 0 ? undefined : (1000 * r.workerStepCpuS) / r.journalRows;
}

function verdict(ok: boolean): string {
  return ok ? "PASS" : "MISS";
}

function goalCell(r: ShapeResult): string {
  if (!r.shape.judged) return "-";
  if (r.problems.length > 0 || r.drainS === undefined) return "FAIL (see problems)";
  const memory = r.peakRssKiB * 1024 <= GOAL_BYTES;
  const time = r.drainS <= GOAL_RATIO * r.idealS;
  const inFlight = r.peakInFlight >= r.shape.runs;
  return `mem ${verdict(memory)}, time ${verdict(time)}, all in flight ${verdict(inFlight)}`;
}

function printTable(results: ShapeResult[]): void {
  const header = [
    "shape",
    "runs",
    "workers x runs/worker",
    "drain s",
    "ideal s",
    "x ideal",
    "first step s",
    "run s p50/max",
    "peak in flight",
    "peak tree RSS MiB",
    "processes",
    "CPU busy %",
    "CPU s tree/mocks/pg/rest",
    "RSS/in-flight run KiB",
    "worker CPU ms/step",
    "floor ms/step",
    "x floor",
    "stmts/step",
    "stmts/run",
    "goal (<= 2 GiB, <= 3x ideal)",
  ];
  const fixed = (n: number | undefined, digits: number) => n === undefined ? "-" : n.toFixed(digits);
  const rows = results.map((r) => [
    r.shape.name,
    String(r.shape.runs),
    `${r.shape.workers} x ${r.shape.runsPerWorker}`,
    fixed(r.drainS, 2),
    fixed(r.idealS, 2),
    r.drainS === undefined ? "-" : (r.drainS / r.idealS).toFixed(2),
    fixed(r.firstStepS, 2),
    `${fixed(r.runP50S, 2)}/${fixed(r.runMaxS, 2)}`,
    String(r.peakInFlight),
    (r.peakRssKiB / 1024).toFixed(0),
    String(r.peakProcesses),
    r.cpu.busyPct.toFixed(0),
    [r.cpu.treeS, r.cpu.benchS, r.cpu.postgresS, r.cpu.otherS].map((x) => x.toFixed(1)).join("/"),
    r.peakInFlight === 0 ? "-" : (r.peakRssKiB / r.peakInFlight).toFixed(0),
    fixed(workerMsPerStep(r), 3),
    fixed(r.floor?.msPerStep, 3),
    r.floor === undefined || workerMsPerStep(r) === undefined
      ? "-"
      : (workerMsPerStep(r)! / r.floor.msPerStep).toFixed(2),
    (r.journalRows === 0 ? "-" : (r.statements / r.journalRows).toFixed(2)) +
    (r.otherClients.length > 0 ? "*" : ""),
    (r.statements / r.shape.runs).toFixed(1) + (r.otherClients.length > 0 ? "*" : ""),
    goalCell(r),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]) : c.padStart(widths[i]))
      .join(" | ").trimEnd();
  console.log(line(header));
  console.log(widths.map((w) => "-".repeat(w)).join("-|-"));
  for (const row of rows) console.log(line(row));
}

function printDetails(r: ShapeResult): void {
  const levels = Object.entries(r.log.levels).map(([k, v]) => `${k}=${v}`).join(" ");
  console.log(
    `${r.shape.name}: ${r.statements} statements (commits, ${r.ownStatements} of the benchmark's own ` +
      `subtracted; ${r.rollbacks} rollbacks) over ${r.journalRows} steps and ${r.sideEffects} tool calls; ` +
      `supervisor output ${r.log.lines} lines (${levels})`,
  );
  const stepMs = workerMsPerStep(r);
  console.log(
    `  workers' CPU ${r.workerCpuS.toFixed(1)} s, ${
      r.workerStepCpuS.toFixed(1)
    } s from the first run taken: ` +
      `${stepMs === undefined ? "-" : stepMs.toFixed(3)} ms a step; ${
        r.rowsPerStatement.toFixed(1)
      } rows a ` +
      `statement`,
  );
  if (r.floor !== undefined) {
    const f = r.floor;
    console.log(
      `  floor: ${f.msPerStep.toFixed(3)} ms a step = HTTP ${f.httpMsPerStep.toFixed(3)} (plain fetch, ` +
        `${f.concurrency} runs at once, ${f.httpWallS.toFixed(2)} s) + ${f.rowsPerStep} rows x ` +
        `${(1000 * f.rowMs).toFixed(1)} us (statements of ${f.batch} rows); the workers at ` +
        `${stepMs === undefined ? "-" : (stepMs / f.msPerStep).toFixed(2)}x the floor`,
    );
  }
  for (const p of r.problems) console.log(`  PROBLEM: ${p}`);
  if (r.otherClients.length > 0) {
    const listed = r.otherClients.slice(0, 5).map((c) => `pid ${c}`).join(", ");
    console.log(
      `  WARNING: ${r.otherClients.length} connections of other clients were active on the database during ` +
        `the run (${listed}${r.otherClients.length > 5 ? ", ..." : ""}): the statement figures (marked *) ` +
        `include their statements`,
    );
  }
  if (r.cpu.otherS > OTHER_LOAD_SHARE * r.cpu.busyS) {
    console.log(
      `  WARNING: the machine was busy with other work: ${r.cpu.otherS.toFixed(1)} of ` +
        `${r.cpu.busyS.toFixed(1)} CPU seconds went to processes outside the benchmark, the tree and ` +
        `PostgreSQL: the timings are pessimistic`,
    );
  }
  const events = Object.entries(r.log.events);
  if (events.length > 0) {
    console.log(
      `  log lines above INFO, by event: ${events.map(([k, v]) => `${k}=${v}`).join(" ")}; ` +
        `the first and last:`,
    );
    for (const l of r.log.notable) console.log(`    ${l}`);
  }
  if (r.log.other.length > 0) {
    console.log(`  output that is not a log line:`);
    for (const [l, n] of r.log.other) console.log(`    ${n} x ${l}`);
  }
}

function positiveInt(name: string, raw: string, min: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || n < min) {
    console.error(`bench:scale: --${name} must be an integer >= ${min}: got ${JSON.stringify(raw)}`);
    Deno.exit(2);
  }
  return n;
}

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        runs: { type: "string", default: "1000" },
        workers: { type: "string", default: "4" },
        "runs-per-worker": { type: "string", default: "250" },
        "model-ms": { type: "string", default: "500" },
        "cloud-ms": { type: "string", default: "100" },
        "baseline-runs": { type: "string", default: "40" },
        "database-url": { type: "string" },
        "skip-baseline": { type: "boolean", default: false },
        "floor-batch": { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (err) {
    console.error(`bench:scale: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const latency: Latency = {
    modelMs: positiveInt("model-ms", values["model-ms"], 0),
    cloudMs: positiveInt("cloud-ms", values["cloud-ms"], 0),
  };
  const floorBatch = values["floor-batch"] === undefined
    ? undefined
    : positiveInt("floor-batch", values["floor-batch"], 1);
  const shapes: Shape[] = [{
    name: "many runs per process",
    runs: positiveInt("runs", values.runs, 1),
    workers: positiveInt("workers", values.workers, 1),
    runsPerWorker: positiveInt("runs-per-worker", values["runs-per-worker"], 1),
    judged: true,
  }];
  if (!values["skip-baseline"]) {
    const runs = positiveInt("baseline-runs", values["baseline-runs"], 1);
    shapes.push({
      name: "one process per run",
      runs,
      workers: Math.min(runs, MAX_BASELINE_WORKERS),
      runsPerWorker: 1,
      judged: false,
    });
  }
  const serverUrl = values["database-url"] || Deno.env.get("DATABASE_URL") ||
    Deno.env.get("TEST_DATABASE_URL") || DEFAULT_DATABASE_URL;
  const server = new URL(serverUrl);
  console.log(
    `bench:scale: ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}, ` +
      `PostgreSQL at ${server.hostname}:${server.port || "5432"}${server.pathname}; ` +
      `model ${latency.modelMs} ms, cloud ${latency.cloudMs} ms per call`,
  );

  const results: ShapeResult[] = [];
  for (const shape of shapes) {
    console.log(
      `${shape.name}: ${shape.runs} runs, ${shape.workers} workers x ${shape.runsPerWorker} runs each ...`,
    );
    await checkConnections(serverUrl, shape);
    const result = await measure(serverUrl, shape, latency, floorBatch);
    results.push(result);
    printDetails(result);
  }
  console.log();
  printTable(results);
  console.log(
    [
      "",
      `ideal: ${MODEL_CALLS_PER_RUN} model calls + ${TOOL_CALLS_PER_RUN} cloud calls in sequence per run, ` +
      "every run in parallel; one wave per workers x runs/worker runs.",
      "drain, first step: from the supervisor's spawn; run s: a done run's first step to its end.",
      `RSS: the supervisor and all its descendants, peak of ${SAMPLE_MS} ms samples (the mocks, in this ` +
      "process, are not counted).",
      "stmts: committed transactions in the database from the supervisor's spawn to its exit (heartbeats, " +
      "polls, connection start-ups, the supervisor's and the workers' start and stop included; the " +
      "benchmark's own subtracted), per journal row (step) and per run; * marks figures that include other " +
      "clients' statements.",
      `CPU, spawn to drain (${navigator.hardwareConcurrency} cores): the machine's busy share; seconds ` +
      "used by the tree, by this process (the mocks and the sampling), by PostgreSQL's processes (when the " +
      "server runs on this machine) and by the rest of the machine.",
      "worker CPU: the supervisor's children (the workers), from the first run taken to the drain, per " +
      "journal row (step). floor: a step's irreducible client CPU, measured after the drain in a process " +
      "like a worker (bench/scale_floor.ts): the demo's requests of one run sent with plain fetch by " +
      "runs/worker runs at once, per step, plus the rows a step writes at the CPU per row of grouped " +
      "statements.",
    ].join("\n"),
  );
  return results.some((r) => r.problems.length > 0) ? 1 : 0;
}

if (import.meta.main) {
  Deno.exit(await main());
}
