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
 *   runtime statement is its own transaction) over the run, less the
 *   statements this benchmark issued itself. The counter is database-wide, so
 *   other clients of the same database during the run are counted too.
 *
 * Two shapes: many runs per worker process (`--workers 4 --runs-per-worker
 * 250`, 1,000 runs), judged against the goal (at most 2 GiB for the tree and
 * at most 3x the ideal), and today's one-process-per-run shape for comparison
 * (`RUNS_PER_WORKER=1`, up to 100 worker processes). Each shape gets a schema
 * of its own, dropped afterwards, and fresh mocks; at the end every run must
 * be done and the cloud must hold exactly 3 resources per run, one per key.
 *
 * ```sh
 * deno task bench:scale                                  # 1,000 runs, then the 200-run baseline
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
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { createSandbox, type SchemaSandbox } from "../runtime/store/sandbox.ts";

const USAGE = `bench:scale: many runs through the supervisor with real processes on PostgreSQL.

usage: deno task bench:scale [--flag value ...]

  --runs N               runs of the many-runs-per-process shape (default 1000)
  --workers N            its worker processes (default 4)
  --runs-per-worker N    runs each of its workers holds at once (default 250)
  --model-ms MS          latency of every model call (default 500)
  --cloud-ms MS          latency of every cloud call (default 100)
  --baseline-runs N      runs of the one-process-per-run shape (default 200; workers = min(N, 100))
  --skip-baseline        measure the many-runs shape only
  --database-url URL     PostgreSQL server (default DATABASE_URL, TEST_DATABASE_URL or
                         postgres://postgres@127.0.0.1:5432/test); each shape uses a schema of its own`;

const ROOT = new URL("../", import.meta.url);
const repoPath = (rel: string) => fileURLToPath(new URL(rel, ROOT));

const DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/test";
const SAMPLE_MS = 200;
const DRAIN_TIMEOUT_MS = 10 * 60_000;
const STOP_TIMEOUT_MS = 60_000;
const MAX_BASELINE_WORKERS = 100;
const MODEL_CALLS_PER_RUN = 4; // three tool decisions and the final answer
const TOOL_CALLS_PER_RUN = 3; // server, database, DNS record
const GOAL_BYTES = 2 * 1024 ** 3;
const GOAL_RATIO = 3;

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
  log: LogSummary;
}

interface LogSummary {
  lines: number;
  /** Lines per level (`INFO`, `WARN`, `ERROR`, ... or `other` for lines that are not JSON log lines). */
  levels: Record<string, number>;
  /** WARN, ERROR and other lines: the first and the last few. */
  notable: string[];
  /** How many notable lines there were in all. */
  notableCount: number;
}

/** Counts the supervisor's output lines without keeping them: a few notable lines are kept. */
class LogTally {
  static readonly KEEP = 12;
  lines = 0;
  readonly levels = new Map<string, number>();
  readonly first: string[] = [];
  readonly last: string[] = [];
  notable = 0;

  add(line: string): void {
    if (line.trim() === "") return;
    this.lines++;
    let level = "other";
    if (line.startsWith("{")) {
      try {
        const parsed = JSON.parse(line) as { level?: unknown };
        if (typeof parsed.level === "string") level = parsed.level;
      } catch {
        // not a log line
      }
    }
    this.levels.set(level, (this.levels.get(level) ?? 0) + 1);
    if (level === "INFO" || level === "DEBUG") return;
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
      notable: [...this.first, ...(skipped > 0 ? [`... ${skipped} more ...`] : []), ...this.last],
      notableCount: this.notable,
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

/** Resident memory of `root` and all its descendants (KiB), and how many processes that is. */
async function treeRss(root: number): Promise<{ kib: number; processes: number }> {
  const children = new Map<number, number[]>();
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
    const list = children.get(ppid);
    if (list) list.push(Number(entry.name));
    else children.set(ppid, [Number(entry.name)]);
  }
  let kib = 0;
  let processes = 0;
  const queue = [root];
  // Bounded: every pid is visited once, as the process table is a tree.
  while (queue.length > 0) {
    const pid = queue.pop()!;
    queue.push(...(children.get(pid) ?? []));
    try {
      const status = await Deno.readTextFile(`/proc/${pid}/status`);
      const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
      processes++;
      if (m) kib += Number(m[1]); // a zombie has no VmRSS
    } catch {
      // exited meanwhile
    }
  }
  return { kib, processes };
}

/** The database's committed and rolled-back transactions so far, read on a connection of its own. */
async function readCommits(serverUrl: string): Promise<{ commits: number; rollbacks: number }> {
  const conn = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await conn.unsafe<{ commits: string; rollbacks: string }[]>(
      `select sum(xact_commit)::text as commits, sum(xact_rollback)::text as rollbacks
         from pg_stat_database where datname = current_database()`,
    );
    return { commits: Number(row.commits), rollbacks: Number(row.rollbacks) };
  } finally {
    await conn.end();
  }
}

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

function startSupervisor(shape: Shape, sandbox: SchemaSandbox, mocks: RunningMocks): Deno.ChildProcess {
  const env: Record<string, string> = {
    ...Deno.env.toObject(),
    ...Object.fromEntries(SCRUBBED.map((name) => [name, ""])),
    DATABASE_URL: sandbox.url,
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
async function measure(serverUrl: string, shape: Shape, latency: Latency): Promise<ShapeResult> {
  const problems: string[] = [];
  const sandbox = await createSandbox(serverUrl, { prefix: "scale", max: 4 });
  const mocks = await serveMocks();
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

    const t0 = Date.now();
    child = startSupervisor(shape, sandbox, mocks);
    readers = Promise.all([drainLines(child.stdout, tally), drainLines(child.stderr, tally)]);
    let exitCode: number | undefined;
    const status = child.status.then((s) => exitCode = s.code);

    let peakInFlight = 0;
    let peakRssKiB = 0;
    let peakProcesses = 0;
    let drained = false;
    // Bounded by DRAIN_TIMEOUT_MS, or the supervisor's exit.
    while (Date.now() - t0 < DRAIN_TIMEOUT_MS && exitCode === undefined) {
      const tick = Date.now();
      const [rss, [counts]] = await Promise.all([
        treeRss(child.pid),
        sandbox.store.client.query<{ done: number; running: number }>(
          `select count(*) filter (where status = 'done')::int as done,
                  count(*) filter (where status = 'running')::int as running
             from runs`,
        ),
      ]);
      own++;
      if (rss.kib > peakRssKiB) peakRssKiB = rss.kib;
      if (rss.processes > peakProcesses) peakProcesses = rss.processes;
      if (counts.running > peakInFlight) peakInFlight = counts.running;
      if (counts.done === shape.runs) {
        drained = true;
        break;
      }
      await sleep(Math.max(0, SAMPLE_MS - (Date.now() - tick)));
    }
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
      journal: number;
      effects: number;
    }>(
      `select (select count(*) from runs where status = 'done')::int as done,
              (select string_agg(status || '=' || n, ', ') from
                 (select status, count(*) as n from runs where status <> 'done' group by status) s) as other,
              (select extract(epoch from max(updated_at))::text from runs where status = 'done') as last_done,
              (select extract(epoch from min(intent_at))::text from journal) as first_step,
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
    const after = await readCommits(serverUrl);
    const seconds = (epoch: string | null) => epoch === null ? undefined : Number(epoch) - t0 / 1000;
    return {
      shape,
      problems,
      drainS: drained ? seconds(final.last_done) : undefined,
      firstStepS: seconds(final.first_step),
      idealS: idealSeconds(shape, latency),
      peakInFlight,
      peakRssKiB,
      peakProcesses,
      statements: after.commits - before.commits - own,
      ownStatements: own,
      rollbacks: after.rollbacks - before.rollbacks,
      journalRows: final.journal,
      sideEffects: final.effects,
      log: tally.summary(),
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
    "peak in flight",
    "peak tree RSS MiB",
    "processes",
    "RSS/in-flight run KiB",
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
    String(r.peakInFlight),
    (r.peakRssKiB / 1024).toFixed(0),
    String(r.peakProcesses),
    r.peakInFlight === 0 ? "-" : (r.peakRssKiB / r.peakInFlight).toFixed(0),
    r.journalRows === 0 ? "-" : (r.statements / r.journalRows).toFixed(2),
    (r.statements / r.shape.runs).toFixed(1),
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
  for (const p of r.problems) console.log(`  PROBLEM: ${p}`);
  if (r.log.notableCount > 0) {
    console.log(`  ${r.log.notableCount} lines other than INFO in the supervisor's output:`);
    for (const l of r.log.notable) console.log(`    ${l}`);
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
        "baseline-runs": { type: "string", default: "200" },
        "database-url": { type: "string" },
        "skip-baseline": { type: "boolean", default: false },
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
    const result = await measure(serverUrl, shape, latency);
    results.push(result);
    printDetails(result);
  }
  console.log();
  printTable(results);
  console.log(
    `\nideal: ${MODEL_CALLS_PER_RUN} model calls + ${TOOL_CALLS_PER_RUN} cloud calls in sequence per run, ` +
      `every run in parallel, one wave per workers x runs/worker runs. drain and first step: from the ` +
      `supervisor's spawn. RSS: the supervisor and its descendants (peak of ${SAMPLE_MS} ms samples; the mocks ` +
      `in this process are not counted). stmts: committed transactions in the database over the run ` +
      `(heartbeats, polls and the supervisor's included; the benchmark's own subtracted; other clients of ` +
      `the same database would be counted too), per journal row (step) and per run.`,
  );
  return results.some((r) => r.problems.length > 0) ? 1 : 0;
}

if (import.meta.main) {
  Deno.exit(await main());
}
