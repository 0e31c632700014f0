/**
 * `deno task bench`: what a durable step costs, beside the database's floor
 * measured in the same process and the same run (issue #11).
 *
 * Every row drives `--runs` runs of 4 steps (three tool steps and the done
 * step) at a concurrency of 1 or `--concurrency`, and prints steps per second,
 * client CPU milliseconds per step (this process's user + system time, from
 * `process.cpuUsage()`: on PGlite that includes the database, which runs in
 * this process), and statements per step and per run:
 *
 * - `raw SQL`: the floor. The same intent/confirm writes per step, by hand, on
 *   the same driver with a pool of the same size: insert the decision's intent,
 *   update it to confirmed, insert the tool call's intent, update it to
 *   confirmed (4 statements a step, 16 a run), no fence, no reads, nothing else.
 * - `raw SQL, whole run`: the writes a run of the runtime makes, by hand and
 *   plain: its runs row inserted, claimed and closed, a decision's pair each
 *   step, a tool call's pair each tool step (17 statements a run), with no
 *   fence, no condition and no read. The runtime's rows are printed against it
 *   too: what the fence, the conditions and the code cost beyond the writes
 *   any durable loop makes (the issue's floor pre-creates the runs rows and
 *   writes a tool call at the done step as well).
 * - `runtime SQL, replayed`: the statements of one runtime run (recorded once,
 *   texts and parameters as its store built them) sent by hand, run after run,
 *   on the raw row's driver: the runtime's SQL (fence, per-run statements)
 *   without the runtime's code. Its ratio to raw is what the SQL costs; the
 *   no-wire row's ratio to it is what the runtime's own code costs.
 * - `runtime, no wire`: the real loop and store with a scripted in-process
 *   planner and in-process tools (no HTTP encode or decode), so its ratio to
 *   the raw row is the runtime's own overhead.
 * - `runtime, mocks`: the same with the mock model and mock cloud behind their
 *   in-process fetch handlers (Request/Response objects, JSON both ways), as
 *   the bench measured before #11.
 * - `worker host, no wire`: production's shape, a {@link WorkerHost} holding
 *   1 or `--concurrency` runs (one statement takes and claims many, one heartbeat
 *   statement per interval for all), on runs submitted before the clock starts,
 *   after a host of its own has warmed up on uncounted runs, as the other rows do.
 *
 * Each runtime row prints its ratio to the raw row of the same store and
 * concurrency (steps/s: higher is better; CPU/step: lower is better). The rows
 * of one store and concurrency are measured in `--segments` turns, interleaved
 * (raw, each runtime row, raw again), and each row's turns printed pooled, so
 * this machine's drifting speed weighs on every row alike. The PGlite rows
 * share one driver session with its analyses of the tables turned off (one
 * fell on whichever row crossed a size); one analysis is timed after them. Last,
 * the bytes of V8 heap each in-flight run holds while its model is slow:
 * `--idle-runs` runs on one worker host whose planner never answers until
 * told to.
 *
 * Flags: `--runs N` (default 200), `--concurrency N` (default 16), `--rounds N`
 * (default 1), `--segments N` (default 5), `--turns` (each turn's figures and
 * ratios too), `--statements` (latency per statement, row by row),
 * `--idle-runs N` (default 1000, 0 to skip), `--only TEXT` (rows
 * whose label contains TEXT, e.g. `--only "postgres 16 runtime, no wire"` to
 * profile one row with `deno run -A --cpu-prof bench/step_bench.ts ...`; see
 * bench/profile_summary.ts).
 *
 * @module
 */

import process from "node:process";
import { PGlite } from "@electric-sql/pglite";
import postgres from "postgres";
import { defineAgent } from "../runtime/agent.ts";
import { MockCloud } from "../mock/cloud.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { MockModel } from "../mock/model.ts";
import { SystemClock } from "../runtime/clock.ts";
import { type WorkerDeps, workerFor } from "../runtime/context.ts";
import { agentDeps, processDeps } from "../runtime/deps.ts";
import { discardSink, Logger } from "../runtime/log.ts";
import { runWorker } from "../runtime/loop.ts";
import { WorkerHost } from "../runtime/host.ts";
import { type DecideRequest, type ModelAnswer, OpenAIPlanner, type Planner } from "../runtime/planner.ts";
import { CountingClient, TapClient } from "../runtime/store/counting.ts";
import { PgliteClient, PgliteSession } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { SCHEMA_SQL, type SqlClient, Store } from "../runtime/store/store.ts";
import { commandFlags } from "../runtime/config.ts";
import { NO_TELEMETRY, type Telemetry, telemetryFromEnv } from "../runtime/telemetry.ts";
import { startOtlpReceiver } from "../harness/otlp_receiver.ts";
import { defineTool, type Tool, ToolRegistry } from "../runtime/tools.ts";

const STEPS_PER_RUN = 4; // three tool steps and the done step
const RAW_PER_STEP = 4; // decision intent, decision confirm, tool intent, tool confirm

/** One measured row. */
interface Row {
  label: string;
  runs: number;
  concurrency: number;
  seconds: number;
  cpuMs: number;
  /** CPU time of the local PostgreSQL server's processes during the row; undefined when not visible. */
  serverCpuMs?: number;
  statements: number;
}

/** Runs each row warms up on, uncounted: enough for the JIT, and for every pooled connection to prepare. */
const warmRuns = (concurrency: number) => Math.max(20, 2 * concurrency);

/** A full collection between rows (with `--v8-flags=--expose-gc`), so no row pays for another's garbage. */
function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let i = 0; i < 2; i++) gc?.();
}

const stepsOf = (r: Row) => r.runs * STEPS_PER_RUN;
const stepsPerS = (r: Row) => stepsOf(r) / r.seconds;
const cpuPerStep = (r: Row) => r.cpuMs / stepsOf(r);

/**
 * CPU milliseconds spent so far by the processes named `postgres` on this
 * machine (a local server's backends, its helpers, and, through the
 * postmaster's children's time, backends that already exited), from
 * `/proc/<pid>/stat`; undefined when there are none or `/proc` is unreadable
 * (a remote server, another OS). At 100 ticks a second, it is good to 10 ms.
 */
function serverCpuMs(): number | undefined {
  let ticks = 0;
  let seen = false;
  try {
    for (const entry of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      try {
        const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
        const close = stat.lastIndexOf(")");
        if (!stat.slice(stat.indexOf("(") + 1, close).startsWith("postgres")) continue;
        // Fields after the name: state is field 3; utime, stime, cutime, cstime are 14 to 17.
        const f = stat.slice(close + 2).split(" ");
        ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
        seen = true;
      } catch {
        // The process exited while being read.
      }
    }
  } catch {
    return undefined;
  }
  return seen ? ticks * 10 : undefined;
}

/** Runs `body` and returns its wall time, this process's CPU time, and a local PostgreSQL's. */
async function timed(
  body: () => Promise<void>,
  server = false,
): Promise<{ seconds: number; cpuMs: number; serverCpuMs?: number }> {
  const server0 = server ? serverCpuMs() : undefined;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await body();
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const server1 = server0 === undefined ? undefined : serverCpuMs();
  return {
    seconds,
    cpuMs: (cpu.user + cpu.system) / 1000,
    serverCpuMs: server0 === undefined || server1 === undefined ? undefined : server1 - server0,
  };
}

/** Runs `each(i)` for i in [0, runs) with `concurrency` at a time. */
async function fanOut(runs: number, concurrency: number, each: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      // Bounded: each lane takes the next run number until `runs` are taken.
      while (next < runs) await each(next++);
    }),
  );
}

// ---------------------------------------------------------------------------
// The scripted agent: the demo's three steps and done, in process.

const ARGS = [
  { tool: "create_server", args: { name: "srv-1", spec: "small" } },
  { tool: "create_database", args: { name: "db-1", engine: "postgres", size_gb: 20 } },
  { tool: "create_dns_record", args: { hostname: "app.example.com", record_type: "CNAME", target: "srv-1" } },
] as const;
const USAGE = { prompt_tokens: 120, completion_tokens: 24, total_tokens: 144 };
const RESULT = { id: "i-0000001", status: "running" };

/** Answers each step from the script, at once: no HTTP, no JSON. */
class ScriptedPlanner implements Planner {
  readonly describe = "scripted (in-process)";
  decide(req: DecideRequest): Promise<ModelAnswer> {
    const step = ARGS[req.seq];
    return Promise.resolve(
      step
        ? { kind: "tool", tool: step.tool, args: { ...step.args }, usage: USAGE }
        : { kind: "done", message: "provisioned", usage: USAGE },
    );
  }
}

/** The demo's tools (same names and zod schemas), answering in process. */
function scriptedTools(): Tool[] {
  return demoTools({ cloudUrl: "http://unused" }).map((t) =>
    defineTool({
      name: t.name,
      description: t.description,
      args: t.args,
      run: () => Promise.resolve({ result: RESULT, remote: "created" }),
    })
  );
}

/** The demo's tools and model over the mocks' in-process fetch handlers. */
async function mockAgent(): Promise<{ planner: Planner; tools: Tool[] }> {
  const model = await MockModel.open();
  const cloud = await MockCloud.open();
  return {
    planner: new OpenAIPlanner({ url: "http://model/v1", model: "m", fetch: model.handler }),
    tools: demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler }),
  };
}

/** A single-run worker on the given store, silent, as the demo agent with the given model and tools. */
function benchWorker(opts: {
  store: Store;
  agent: { planner: Planner; tools: Tool[] };
  tag: string;
  telemetry?: Telemetry;
}): WorkerDeps {
  const clock = new SystemClock();
  const log = new Logger({ clock, sink: discardSink });
  const { planner, tools } = opts.agent;
  return workerFor(
    processDeps({
      store: opts.store,
      clock,
      log,
      owner: `bench-${opts.tag}`,
      telemetry: opts.telemetry ?? NO_TELEMETRY,
    }),
    agentDeps({
      agent: defineAgent({ name: "provision", tools, model: planner }),
      planner,
      tools: new ToolRegistry(tools),
    }),
  );
}

// ---------------------------------------------------------------------------
// Time per statement (`--statements`).

/** A statement's name in the breakdown: what it does and to which table. */
export function statementName(text: string): string {
  const t = text.trimStart().replace(/\s+/g, " ").toLowerCase();
  if (t.startsWith("with created as (insert into runs")) return "create-or-read runs";
  if (t.startsWith("with picked as")) return "take runs";
  if (/^with w as \( ?insert into workers/.test(t)) return "heartbeat (host)";
  if (t.startsWith("update runs set epoch")) return "claim runs";
  if (t.startsWith("update runs set status")) return "close runs";
  if (t.startsWith("update runs set heartbeat_at")) return "heartbeat runs";
  const m = /^(insert into|update|select|with|delete from) ([a-z_]+)/.exec(t);
  return m ? `${m[1].split(" ")[0]} ${m[2]}` : t.slice(0, 24);
}

/**
 * Latency per statement, by {@link statementName}, over the measured runs of
 * the rows that report to it (warm-up runs are left out).
 */
class StatementTimes {
  readonly #byName = new Map<string, { n: number; ms: number }>();
  #on = false;
  runs = 0;

  /**
   * Starts timing `text` while a row is being measured: the returned function
   * records it under its {@link statementName} when the statement has settled.
   */
  timer(text: string): (() => void) | undefined {
    if (!this.#on) return undefined;
    const t0 = performance.now();
    return () => {
      const ms = performance.now() - t0;
      const key = statementName(text);
      const e = this.#byName.get(key);
      if (e) {
        e.n++;
        e.ms += ms;
      } else this.#byName.set(key, { n: 1, ms });
    };
  }

  /** Sends `text` with `send`, timed by {@link timer}. */
  time<R>(text: string, send: () => Promise<R>): Promise<R> {
    const settled = this.timer(text);
    return settled ? send().finally(settled) : send();
  }

  /** `client`, each statement timed (the runtime rows' store). */
  tap(client: SqlClient): SqlClient {
    return new TapClient(client, ({ text }) => this.timer(text));
  }

  /** Counts from now on (the row's clock starts). */
  start(): void {
    this.#on = true;
  }

  /** Stops counting: `runs` more runs were measured. */
  stop(runs: number): void {
    this.#on = false;
    this.runs += runs;
  }

  /** Per statement: sent per run and mean latency in µs. */
  entries(): { name: string; perRun: number; us: number }[] {
    return [...this.#byName].map(([name, { n, ms }]) => ({
      name,
      perRun: n / this.runs,
      us: (ms / n) * 1000,
    }));
  }
}

/** The rows `--statements` times, in the order of its columns. */
const TIMED = ["replayed", "no wire", "worker host", "raw", "whole run"] as const;
type Timed = Record<(typeof TIMED)[number], StatementTimes>;

/** Prints each timed row's statements side by side: sent per run and mean latency, then µs per run. */
function printStatementTimes(prefix: string, times: Timed): void {
  const columns = TIMED.filter((c) => times[c].runs > 0);
  const byColumn = columns.map((c) => new Map(times[c].entries().map((e) => [e.name, e])));
  const names = [...new Set(byColumn.flatMap((m) => [...m.keys()]))];
  const width = 16;
  const cell = (e: { perRun: number; us: number } | undefined) =>
    e
      ? `${(Number.isInteger(e.perRun) ? e.perRun.toFixed(0) : e.perRun.toFixed(2)).padStart(4)} x ${
        e.us.toFixed(0).padStart(5)
      } µs`.padStart(width)
      : " ".repeat(width);
  console.log(
    `${prefix}: time per statement (--statements): sent per run x mean latency, measured runs only`,
  );
  console.log(`  ${"statement".padEnd(22)}${columns.map((c) => c.padStart(width + 1)).join("")}`);
  for (const name of names) {
    console.log(`  ${name.padEnd(22)}${byColumn.map((m) => ` ${cell(m.get(name))}`).join("")}`);
  }
  const perRun = (m: Map<string, { perRun: number; us: number }>) =>
    [...m.values()].reduce((n, e) => n + e.perRun * e.us, 0);
  console.log(
    `  ${"a run, in statements".padEnd(22)}${
      byColumn.map((m) => ` ${`${perRun(m).toFixed(0)} µs`.padStart(width)}`).join("")
    }`,
  );
}

// ---------------------------------------------------------------------------
// The rows.

/** Statements a run of the whole-run floor sends: create, claim, 4 decisions, 3 tool calls, close. */
const WHOLE_RUN_STATEMENTS = 3 + 2 * STEPS_PER_RUN + 2 * (STEPS_PER_RUN - 1);

/**
 * The floor: the four writes of each step, by hand, nothing else. With
 * `wholeRun`, the writes a run of the runtime makes, by hand and plain: the
 * run's own row inserted, claimed and closed, a decision's pair each step and
 * a tool call's pair each tool step ({@link WHOLE_RUN_STATEMENTS}), with no
 * fence, no condition and no read (`raw SQL, whole run`).
 */
async function rawRow(
  label: string,
  query: (text: string, params: unknown[]) => Promise<unknown>,
  runs: number,
  concurrency: number,
  server = false,
  times?: StatementTimes,
  wholeRun = false,
): Promise<Row> {
  const prefix = `raw-${crypto.randomUUID().slice(0, 8)}`;
  const warm = warmRuns(concurrency);
  // The runs rows exist before the clock starts (the journal references them),
  // unless the row writes them itself.
  if (!wholeRun) {
    await query(
      `insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
       select $1 || '-' || i, 'provision', 'bench', 'done', 1, now(), now() from generate_series(0, $2::int - 1) i`,
      [prefix, runs + warm],
    );
  }
  let statements = 0;
  const send = times
    ? (text: string, params: unknown[]) => times.time(text, () => query(text, params))
    : query;
  const q = (text: string, params: unknown[]) => {
    statements++;
    return send(text, params);
  };
  const decision = JSON.stringify({ tool: "create_server", args: ARGS[0].args });
  const done = JSON.stringify({ done: true, message: "provisioned" });
  const usage = JSON.stringify(USAGE);
  const args = JSON.stringify(ARGS[0].args);
  const result = JSON.stringify(RESULT);
  const input = JSON.stringify("bench");
  const oneRun = async (i: number) => {
    const runId = `${prefix}-${i}`;
    if (wholeRun) {
      const now = new Date().toISOString();
      await q(
        `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
           values ($1, 'provision', 'bench', $2::text::jsonb, 'pending', 0, $3::timestamptz, $3::timestamptz)`,
        [runId, input, now],
      );
      await q(
        `update runs set epoch = 1, owner = $2, status = 'running', heartbeat_at = $3::timestamptz,
                  updated_at = $3::timestamptz where run_id = $1`,
        [runId, "bench-raw", now],
      );
    }
    for (let seq = 0; seq < STEPS_PER_RUN; seq++) {
      const now = new Date().toISOString();
      // The whole-run floor's last step is the done decision, with no tool call (as the runtime's).
      const last = wholeRun && seq === STEPS_PER_RUN - 1;
      await q(
        `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
           values ($1, $2, 'intent', 1, 1, $3::timestamptz)`,
        [runId, seq, now],
      );
      await q(
        `update journal set status = 'confirmed', decision = $3::text::jsonb, usage = $4::text::jsonb,
                  confirmed_at = $5::timestamptz where run_id = $1 and seq = $2`,
        [runId, seq, last ? done : decision, usage, now],
      );
      if (last) continue;
      await q(
        `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
           values ($1, $2, $3, 'create_server', $4::text::jsonb, 'intent', 1, 1, $5::timestamptz)`,
        [`${runId}:${seq}`, runId, seq, args, now],
      );
      await q(
        `update side_effects set status = 'confirmed', result = $2::text::jsonb, remote = 'created',
                  confirmed_at = $3::timestamptz where idempotency_key = $1`,
        [`${runId}:${seq}`, result, now],
      );
    }
    if (wholeRun) {
      await q(
        `update runs set status = 'done', output = $2, updated_at = $3::timestamptz where run_id = $1`,
        [runId, "provisioned", new Date().toISOString()],
      );
    }
  };
  // Warm up (JIT, a prepared statement on each connection) on runs that are not counted.
  await fanOut(warm, concurrency, (i) => oneRun(runs + i));
  statements = 0;
  collectGarbage();
  times?.start();
  const t = await timed(() => fanOut(runs, concurrency, oneRun), server);
  times?.stop(runs);
  const expected = runs * (wholeRun ? WHOLE_RUN_STATEMENTS : STEPS_PER_RUN * RAW_PER_STEP);
  if (statements !== expected) throw new Error(`${label}: ${statements} statements, expected ${expected}`);
  return { label, runs, concurrency, ...t, statements };
}

/** One statement of a runtime run as its store sent it, and which of its parameters hold the run id. */
interface Recorded {
  rows: boolean;
  text: string;
  params: unknown[];
  withRunId: number[];
  /** Parameters holding a timestamp (the time of the write): the replay sends its own time there. */
  withTime: number[];
}

const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/**
 * The statements one fresh run of the scripted agent sends, recorded as its
 * store built them, with `token` as its run id (the replayed row puts each
 * run's own id in its place).
 */
async function recordRun(client: SqlClient, token: string): Promise<Recorded[]> {
  const recorded: Recorded[] = [];
  const recorder = new TapClient(client, ({ rows, text, params }) => {
    const withRunId = params.flatMap((v, i) => typeof v === "string" && v.includes(token) ? [i] : []);
    const withTime = params.flatMap((v, i) => typeof v === "string" && TIMESTAMP.test(v) ? [i] : []);
    recorded.push({ rows, text, params, withRunId, withTime });
  });
  const outcome = await runWorker(
    benchWorker({
      store: new Store(recorder),
      agent: { planner: new ScriptedPlanner(), tools: scriptedTools() },
      tag: "record",
    }),
    token,
    "bench",
  );
  if (outcome.status !== "done") throw new Error(`recording: the run ended ${outcome.status}`);
  return recorded;
}

/**
 * The runtime's statements without the runtime: a recorded run's statements
 * (texts and parameters as its store built them, each timestamp the time of
 * sending, as the raw row's are) sent by hand, one run after another in each
 * lane, on the raw row's driver.
 * Its ratio to raw is what the runtime's SQL costs (the fence, the per-run
 * statements); the runtime row's ratio to it is what the runtime's own code
 * costs. Every write must write its row, or the replay is not the runtime's.
 */
async function replayRow(
  label: string,
  recorded: Recorded[],
  token: string,
  send: (st: Recorded, params: unknown[]) => Promise<number | undefined>,
  runs: number,
  concurrency: number,
  server = false,
  times?: StatementTimes,
): Promise<Row> {
  const prefix = `rp-${crypto.randomUUID().slice(0, 8)}`;
  const sendTimed = times
    ? (st: Recorded, params: unknown[]) => times.time(st.text, () => send(st, params))
    : send;
  let statements = 0;
  const oneRun = async (i: number) => {
    const runId = `${prefix}-${i}`;
    for (const st of recorded) {
      const params = st.params.slice();
      for (const k of st.withRunId) params[k] = (params[k] as string).replaceAll(token, runId);
      if (st.withTime.length > 0) {
        const now = new Date().toISOString();
        for (const k of st.withTime) params[k] = now;
      }
      statements++;
      const written = await sendTimed(st, params);
      if (!st.rows && written !== 1) throw new Error(`replay: ${written} rows written by ${st.text}`);
    }
  };
  const warm = warmRuns(concurrency);
  await fanOut(warm, concurrency, (i) => oneRun(runs + i));
  statements = 0;
  collectGarbage();
  times?.start();
  const t = await timed(() => fanOut(runs, concurrency, oneRun), server);
  times?.stop(runs);
  if (statements !== runs * recorded.length) throw new Error(`replay: ${statements} statements`);
  return { label, runs, concurrency, ...t, statements };
}

/** The runtime's single-run path (`runWorker`, as `deno task run` drives it), `concurrency` runs at once. */
async function runtimeRow(
  label: string,
  client: SqlClient,
  agent: { planner: Planner; tools: Tool[] },
  runs: number,
  concurrency: number,
  server = false,
  telemetry: Telemetry = NO_TELEMETRY,
  times?: StatementTimes,
): Promise<Row> {
  const counting = new CountingClient(times ? times.tap(client) : client);
  const deps = benchWorker({ store: new Store(counting), agent, tag: label, telemetry });
  // Warm up (JIT, a prepared statement on each connection) on runs that are not counted.
  const warm = crypto.randomUUID().slice(0, 8);
  await fanOut(warmRuns(concurrency), concurrency, async (i) => {
    await runWorker(deps, `warm-${warm}-${i}`, "bench");
  });
  counting.reset();
  collectGarbage();
  const prefix = crypto.randomUUID().slice(0, 8);
  times?.start();
  const t = await timed(() =>
    fanOut(runs, concurrency, async (i) => {
      const outcome = await runWorker(deps, `b-${prefix}-${i}`, "bench");
      if (outcome.status !== "done") throw new Error(`run ${i} ended ${outcome.status}: ${outcome.error}`);
    }), server);
  times?.stop(runs);
  return { label, runs, concurrency, ...t, statements: counting.total };
}

/** Submits `n` pending runs of the demo agent in one statement; returns their ids' prefix (`<prefix>-<i>`). */
async function submitPending(client: SqlClient, tag: string, n: number): Promise<string> {
  const prefix = `${tag}-${crypto.randomUUID().slice(0, 8)}`;
  await client.query(
    `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
     select $1 || '-' || i, 'provision', 'bench', '"bench"', 'pending', 0, now(), now()
       from generate_series(0, $2::int - 1) i`,
    [prefix, n],
  );
  return prefix;
}

/** Production's shape: one worker host holding `concurrency` runs, taking more as slots free. */
async function hostRow(
  label: string,
  client: SqlClient,
  runs: number,
  concurrency: number,
  server = false,
  times?: StatementTimes,
): Promise<Row> {
  const counting = new CountingClient(times ? times.tap(client) : client);
  const store = new Store(counting);
  const clock = new SystemClock();
  const agent = defineAgent({ name: "provision", tools: scriptedTools(), model: new ScriptedPlanner() });
  /** Submits `n` runs (before any clock: submitting is the client's cost, not the worker's) and a host to drive them. */
  const prepare = async (n: number) => {
    const prefix = await submitPending(client, "h", n);
    let ended = 0;
    let failed = "";
    let allDone!: () => void;
    const finished = new Promise<void>((r) => allDone = r);
    const host = new WorkerHost({
      agents: [{ agent, tools: new ToolRegistry(scriptedTools()), planner: new ScriptedPlanner() }],
      store,
      clock,
      log: new Logger({ clock, sink: discardSink }),
      owner: `bench-host-${prefix}`,
      runsPerWorker: concurrency,
      pollMs: 50,
      onOutcome: (o) => {
        if (o.status !== "done") failed ||= `${o.runId} ended ${o.status}: ${o.error}`;
        if (++ended === n) allDone();
      },
    });
    const drive = async () => {
      host.start();
      await finished;
    };
    const stop = async () => {
      await host.stop();
      if (failed) throw new Error(failed);
    };
    return { drive, stop };
  };
  // Warm up (JIT, a prepared statement on each connection) on runs that are not counted, as the
  // other rows do: each turn's host is new.
  const warm = await prepare(warmRuns(concurrency));
  await warm.drive();
  await warm.stop();
  const measured = await prepare(runs);
  counting.reset();
  collectGarbage();
  times?.start();
  const t = await timed(measured.drive, server);
  times?.stop(runs);
  const statements = counting.total;
  await measured.stop();
  return { label, runs, concurrency, ...t, statements };
}

/**
 * Bytes of V8 heap per run in flight while its model is slow: `idleRuns` runs
 * on one worker host, each waiting on a planner that answers only when told.
 */
async function idleBytesPerRun(client: SqlClient, idleRuns: number): Promise<number> {
  const collect = collectGarbage;
  const waiting: ((a: ModelAnswer) => void)[] = [];
  const slow: Planner = {
    describe: "slow",
    decide: () => new Promise<ModelAnswer>((resolve) => waiting.push(resolve)),
  };
  const clock = new SystemClock();
  const store = new Store(client);
  const prefix = await submitPending(client, "idle", idleRuns);
  const tools = scriptedTools();
  const agent = defineAgent({ name: "provision", tools, model: slow });
  let ended = 0;
  const host = new WorkerHost({
    agents: [{ agent, tools: new ToolRegistry(tools), planner: slow }],
    store,
    clock,
    log: new Logger({ clock, sink: discardSink }),
    owner: `bench-idle-${prefix}`,
    runsPerWorker: idleRuns,
    pollMs: 50,
    onOutcome: () => ended++,
  });
  collect();
  const before = Deno.memoryUsage().heapUsed;
  host.start();
  // Bounded: every run reaches its first model request within seconds.
  for (let i = 0; i < 6_000 && waiting.length < idleRuns; i++) await new Promise((r) => setTimeout(r, 10));
  if (waiting.length < idleRuns) throw new Error(`idle: only ${waiting.length} runs reached the model`);
  collect();
  const after = Deno.memoryUsage().heapUsed;
  for (const answer of waiting.splice(0)) answer({ kind: "done", message: "ok" });
  for (let i = 0; i < 6_000 && ended < idleRuns; i++) await new Promise((r) => setTimeout(r, 10));
  await host.stop();
  return (after - before) / idleRuns;
}

// ---------------------------------------------------------------------------
// Printing.

function header(): void {
  console.log(
    `${"row".padEnd(36)} ${"runs".padStart(5)} ${"conc".padStart(4)} ${"steps/s".padStart(8)} ` +
      `${"x raw".padStart(6)} ${"cpu ms/step".padStart(11)} ${"x raw".padStart(6)} ` +
      `${"srv ms/step".padStart(11)} ${"x raw".padStart(6)} ` +
      `${"stmts/step".padStart(10)} ${"stmts/run".padStart(9)}`,
  );
}

function print(row: Row, raw?: Row): void {
  const ratio = raw ? (stepsPerS(row) / stepsPerS(raw)).toFixed(2) : "-";
  const cpuRatio = raw ? (cpuPerStep(row) / cpuPerStep(raw)).toFixed(2) : "-";
  const server = row.serverCpuMs === undefined ? undefined : row.serverCpuMs / stepsOf(row);
  const rawServer = raw?.serverCpuMs === undefined ? undefined : raw.serverCpuMs / stepsOf(raw);
  const serverRatio = server !== undefined && rawServer ? (server / rawServer).toFixed(2) : "-";
  console.log(
    `${row.label.padEnd(36)} ${String(row.runs).padStart(5)} ${String(row.concurrency).padStart(4)} ` +
      `${stepsPerS(row).toFixed(0).padStart(8)} ${ratio.padStart(6)} ${
        cpuPerStep(row).toFixed(3).padStart(11)
      } ` +
      `${cpuRatio.padStart(6)} ${(server === undefined ? "-" : server.toFixed(3)).padStart(11)} ` +
      `${serverRatio.padStart(6)} ${(row.statements / stepsOf(row)).toFixed(2).padStart(10)} ` +
      `${(row.statements / row.runs).toFixed(1).padStart(9)}`,
  );
}

// ---------------------------------------------------------------------------

/**
 * Measures the raw row and the runtime rows in `segments` turns, each row a
 * share of its runs per turn (raw, then each runtime row, then raw again), and
 * prints each row's turns pooled, with each runtime row's ratio to the pooled
 * raw row. This machine's speed drifts over seconds (other tenants, clock
 * scaling): measured in one piece, a row could fall into a slow spell the
 * other missed, and single rounds moved by a third. Interleaved, a spell
 * weighs on every row alike.
 */
async function group(
  raw: ((runs: number) => Promise<Row>) | undefined,
  rows: ((runs: number) => Promise<Row>)[],
  runs: number,
  segments: number,
  showTurns = false,
): Promise<Row[]> {
  const turns = Math.max(1, Math.min(segments, runs));
  const share = (turn: number) => Math.floor(runs / turns) + (turn < runs % turns ? 1 : 0);
  const rawTurns: Row[] = [];
  const rowTurns: Row[][] = rows.map(() => []);
  for (let turn = 0; turn < turns; turn++) {
    // Raw in halves around the runtime rows: each turn is bracketed by the floor.
    const half = share(turn) / 2;
    if (raw) rawTurns.push(await raw(Math.ceil(half)));
    for (let i = 0; i < rows.length; i++) rowTurns[i].push(await rows[i](share(turn)));
    if (raw) rawTurns.push(await raw(Math.max(1, Math.floor(half))));
    if (showTurns) {
      const last = rowTurns.map((t) => t[t.length - 1]);
      const bracket = raw ? pool(rawTurns.slice(-2)) : undefined;
      const these = raw ? [rawTurns[rawTurns.length - 2], ...last, rawTurns[rawTurns.length - 1]] : last;
      console.log(
        `  turn ${turn + 1}: ${these.map((r) => `${stepsPerS(r).toFixed(0)}`).join(" / ")} steps/s` +
          (bracket ? `; x raw ${last.map((r) => turnRatio(r, bracket).toFixed(2)).join(" / ")}` : ""),
      );
    }
  }
  const pooled = rawTurns.length > 0 ? pool(rawTurns) : undefined;
  if (pooled) print(pooled);
  const pooledRows = rowTurns.map(pool);
  for (const row of pooledRows) print(row, pooled);
  if (showTurns && raw && turns > 1) {
    // Each turn against the raw halves around it, which ran in the same seconds.
    for (const t of rowTurns) {
      const ratios = t.map((r, k) => turnRatio(r, pool(rawTurns.slice(2 * k, 2 * k + 2)))).sort((a, b) =>
        a - b
      );
      const median = ratios.length % 2
        ? ratios[(ratios.length - 1) / 2]
        : (ratios[ratios.length / 2 - 1] + ratios[ratios.length / 2]) / 2;
      console.log(
        `  ${t[0].label}: x raw turn by turn, median ${median.toFixed(2)} (${ratios[0].toFixed(2)}-${
          ratios[ratios.length - 1].toFixed(2)
        })`,
      );
    }
  }
  return pooledRows;
}

/**
 * The runtime's rows against the whole-run floor (`raw SQL, whole run`), when
 * it was measured: what the fence, the statements' conditions and the
 * runtime's code cost beyond the writes a run must make.
 */
function printAgainstWholeRun(rows: Row[]): void {
  const floor = rows.find((r) => r.label.endsWith(" raw SQL, whole run"));
  const others = rows.filter((r) => r !== floor);
  if (!floor || others.length === 0) return;
  console.log(
    `  against ${floor.label} (steps/s ratio, CPU/step ratio): ` +
      others.map((r) =>
        `${r.label.slice(floor.label.length - "raw SQL, whole run".length)} ${
          (stepsPerS(r) / stepsPerS(floor)).toFixed(2)
        } (${(cpuPerStep(r) / cpuPerStep(floor)).toFixed(2)})`
      ).join(", "),
  );
}

/** A turn's steps/s over the steps/s of the raw halves around it. */
const turnRatio = (row: Row, raw: Row) => stepsPerS(row) / stepsPerS(raw);

/** One row from several measurements of it: their runs, time, CPU and statements added up. */
function pool(turns: Row[]): Row {
  const server = turns.every((t) => t.serverCpuMs !== undefined)
    ? turns.reduce((n, t) => n + t.serverCpuMs!, 0)
    : undefined;
  return {
    label: turns[0].label,
    concurrency: turns[0].concurrency,
    runs: turns.reduce((n, t) => n + t.runs, 0),
    seconds: turns.reduce((n, t) => n + t.seconds, 0),
    cpuMs: turns.reduce((n, t) => n + t.cpuMs, 0),
    serverCpuMs: server,
    statements: turns.reduce((n, t) => n + t.statements, 0),
  };
}

/** The rows of one store and concurrency, as `round` labels them. */
const ROWS = [
  "raw SQL",
  "raw SQL, whole run",
  "runtime SQL, replayed",
  "runtime, no wire",
  "runtime, mocks",
  "worker host, no wire",
] as const;

/** Every row's label a round can print. */
function rowLabels(concurrency: number): string[] {
  return [...new Set(["pglite 1", "postgres 1", `postgres ${concurrency}`])].flatMap((prefix) =>
    ROWS.map((row) => `${prefix} ${row}`)
  );
}

async function round(opts: {
  runs: number;
  concurrency: number;
  url?: string;
  only?: string;
  segments: number;
  showTurns: boolean;
  byStatement: boolean;
  mocks: { planner: Planner; tools: Tool[] };
}): Promise<void> {
  const { runs, concurrency, url, only, mocks, segments, showTurns, byStatement } = opts;
  // Per group, when asked: each timed row's latency per statement.
  const timesFor = (): Timed | undefined =>
    byStatement ? Object.fromEntries(TIMED.map((c) => [c, new StatementTimes()])) as Timed : undefined;
  const printTimes = (p: string, times: Timed | undefined) => {
    if (times && TIMED.some((c) => times[c].runs > 0)) printStatementTimes(p, times);
  };
  const want = (label: string) => !only || label.includes(only);
  // A group runs when any of its rows is wanted (`--only` matches anywhere in a label).
  const wanted = (prefix: string) => ROWS.some((row) => want(`${prefix} ${row}`));
  const scripted = { planner: new ScriptedPlanner(), tools: scriptedTools() };
  header();

  /** One store and concurrency (`p`): its raw row and the runtime's rows in turns, then `--statements`. */
  const measure = async (g: {
    p: string;
    concurrency: number;
    runs: number;
    server: boolean;
    client: SqlClient;
    rawQuery: (text: string, params: unknown[]) => Promise<unknown>;
    replaySend: (st: Recorded, params: unknown[]) => Promise<number | undefined>;
  }) => {
    const { p, concurrency: c, server, client } = g;
    const label = (row: (typeof ROWS)[number]) => `${p} ${row}`;
    const times = timesFor();
    const rows: ((runs: number) => Promise<Row>)[] = [];
    if (want(label("raw SQL, whole run"))) {
      rows.push((k) =>
        rawRow(label("raw SQL, whole run"), g.rawQuery, k, c, server, times?.["whole run"], true)
      );
    }
    if (want(label("runtime SQL, replayed"))) {
      const token = `rec-${crypto.randomUUID().slice(0, 8)}`;
      const recorded = await recordRun(client, token);
      rows.push((k) =>
        replayRow(
          label("runtime SQL, replayed"),
          recorded,
          token,
          g.replaySend,
          k,
          c,
          server,
          times?.replayed,
        )
      );
    }
    for (
      const [row, agent, timed] of [
        ["runtime, no wire", scripted, times?.["no wire"]],
        ["runtime, mocks", mocks, undefined],
      ] as const
    ) {
      if (want(label(row))) {
        rows.push((k) => runtimeRow(label(row), client, agent, k, c, server, NO_TELEMETRY, timed));
      }
    }
    if (want(label("worker host, no wire"))) {
      rows.push((k) => hostRow(label("worker host, no wire"), client, k, c, server, times?.["worker host"]));
    }
    const pooled = await group(
      want(label("raw SQL"))
        ? (k) => rawRow(label("raw SQL"), g.rawQuery, k, c, server, times?.raw)
        : undefined,
      rows,
      g.runs,
      segments,
      showTurns,
    );
    printAgainstWholeRun(pooled);
    printTimes(p, times);
  };

  // PGlite: in process, one connection, runs one after another (as `deno task run` drives it).
  if (wanted("pglite 1")) {
    const db = await PGlite.create();
    await db.exec(SCHEMA_SQL);
    // One session for every row, its schedule of analyses off. The driver
    // analyses the tables each time they double past 1 MiB; in the rows, each
    // analysis fell on whichever row sent the statement that found the size
    // (measured: 40-160 ms, one turn of a row at a quarter of its speed), and
    // which row that was varied from run to run. It costs the same whoever
    // sends the statements, and it is timed on its own after the rows.
    const session = new PgliteSession({ checkEvery: Number.POSITIVE_INFINITY });
    const client = new PgliteClient(db, { describe: "pglite:memory", owned: true, session });
    // The raw row sends its statements as the runtime's driver does (SQL
    // `prepare` once, then `execute` through the simple protocol, as `run()`
    // does for a statement whose rows are not wanted): the floor is the best a
    // hand-written loop can do.
    const rawClient = new PgliteClient(db, { describe: "pglite:raw", owned: false, session });
    const p = "pglite 1";
    await measure({
      p,
      concurrency: 1,
      runs,
      server: false,
      client,
      rawQuery: (text, params) => rawClient.run(text, params),
      replaySend: (st, params) =>
        st.rows ? rawClient.query(st.text, params).then(() => undefined) : rawClient.run(st.text, params),
    });
    const [{ bytes }] = await client.query<{ bytes: number }>(
      `select (pg_total_relation_size('runs') + pg_total_relation_size('journal')
               + pg_total_relation_size('side_effects'))::float8 as bytes`,
    );
    const t0 = performance.now();
    await client.analyze();
    console.log(
      `${p}: the driver's analysis of the tables, left out of the rows (each time they double past 1 MiB): ` +
        `${(performance.now() - t0).toFixed(0)} ms at ${(bytes / 2 ** 20).toFixed(1)} MiB`,
    );
    await client.close();
  }

  if (![1, concurrency].some((c) => wanted(`postgres ${c}`))) return;
  if (!url) {
    console.log("postgres: skipped (set DATABASE_URL or TEST_DATABASE_URL)");
    return;
  }
  const sandbox = await createSandbox(url, { prefix: "bench", max: 1 });
  try {
    for (const c of new Set([1, concurrency])) {
      if (!wanted(`postgres ${c}`)) continue;
      // The same pool size for the raw row and the runtime rows.
      const sql = postgres(sandbox.url, { max: c, onnotice: () => {} });
      const client = await openPostgres(sandbox.url, { max: c });
      try {
        await measure({
          p: `postgres ${c}`,
          concurrency: c,
          runs: c === 1 ? runs : runs * 2,
          server: true,
          client,
          // deno-lint-ignore no-explicit-any
          rawQuery: (text, params) => sql.unsafe(text, params as any[], { prepare: true }),
          replaySend: async (st, params) =>
            // deno-lint-ignore no-explicit-any
            (await sql.unsafe(st.text, params as any[], { prepare: true })).count,
        });
      } finally {
        await sql.end({ timeout: 5 });
        await client.close();
      }
    }
  } finally {
    await sandbox.drop();
  }
}

/** The usage text of `bench`. */
export const BENCH_USAGE =
  `agent-runtime bench: what a durable step costs, beside raw SQL measured in the same run.

usage: deno task bench [--runs N] [--concurrency N] [--rounds N] [--segments N] [--idle-runs N] [--only TEXT]
                       [--no-telemetry] [--turns] [--statements]

  --runs N                   runs per row (default 200; twice that in the many-runs PostgreSQL rows)
  --concurrency N            runs at once in the many-runs PostgreSQL rows (default 16)
  --rounds N                 rounds of every row (default 1)
  --segments N               turns each row is measured in, interleaved with the others (default 5)
  --idle-runs N              runs held idle on one worker host to measure heap per run (default 1000, 0 skips)
  --only TEXT                only the rows whose label contains TEXT (for profiling one row); one that
                             matches no row exits 2 and lists them
  --no-telemetry             skip the rows with OpenTelemetry off and on
  --turns                    also print each turn's steps/s, row by row in the order measured (raw first
                             and last), and each row's ratio to the raw halves around it; then per row,
                             the median of those ratios (a slow spell moves it less than the pooled one)
  --statements               also print the mean latency per statement and per run of the replayed, no-wire,
                             worker-host and raw rows: where the runtime's SQL costs more than the floor's
                             (the timed rows then carry a clock read around each statement)

PostgreSQL rows need DATABASE_URL or TEST_DATABASE_URL (env); without either they are skipped.

exit codes: 0 measured, 2 bad arguments`;

/** The command: measures and prints the rows; returns the exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  const flags = commandFlags("bench", BENCH_USAGE, args, {
    runs: { type: "string", default: "200" },
    concurrency: { type: "string", default: "16" },
    rounds: { type: "string", default: "1" },
    segments: { type: "string", default: "5" },
    "idle-runs": { type: "string", default: "1000" },
    only: { type: "string" },
    "no-telemetry": { type: "boolean" },
    turns: { type: "boolean" },
    statements: { type: "boolean" },
    "telemetry-child": { type: "boolean" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const [runs, concurrency, rounds, segments, idleRuns] = [
    values.runs,
    values.concurrency,
    values.rounds,
    values.segments,
    values["idle-runs"],
  ]
    .map(Number);
  if (
    ![runs, concurrency, rounds, segments].every((n) => Number.isInteger(n) && n >= 1) ||
    !(Number.isInteger(idleRuns) && idleRuns >= 0)
  ) {
    console.error(
      `bench: --runs, --concurrency, --rounds and --segments must be positive integers, --idle-runs 0 or ` +
        `more: got ${values.runs}, ${values.concurrency}, ${values.rounds}, ${values.segments}, ` +
        `${values["idle-runs"]}`,
    );
    return 2;
  }
  const only = values.only;
  if (only !== undefined && !rowLabels(concurrency).some((l) => l.includes(only))) {
    console.error(
      `bench: --only ${JSON.stringify(only)} matches no row; the rows are:\n` +
        rowLabels(concurrency).map((l) => `  ${l}`).join("\n"),
    );
    return 2;
  }
  const mocks = await mockAgent();
  if (values["telemetry-child"]) {
    // One PGlite row with the mocks, in a fresh process whose OTEL_DENO the parent chose.
    const db = await PGlite.create();
    await db.exec(SCHEMA_SQL);
    const client = new PgliteClient(db, { describe: "pglite:memory", owned: true });
    // The worker's own telemetry, as a worker process builds it from the environment (spans and
    // counters through @opentelemetry/api when OTEL_DENO is on, the no-op otherwise).
    const telemetry = telemetryFromEnv();
    print(
      await runtimeRow(
        `pglite 1 mocks, telemetry ${telemetry.enabled ? "on" : "off"}`,
        client,
        mocks,
        Math.min(runs, 100),
        1,
        false,
        telemetry,
      ),
    );
    await client.close();
    return 0;
  }
  const url = env.DATABASE_URL || env.TEST_DATABASE_URL;
  console.log(
    `bench: ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}; ${STEPS_PER_RUN} steps a run ` +
      `(3 tool steps + done); "x raw" compares with the raw SQL row of the same store and concurrency`,
  );
  for (let r = 1; r <= rounds; r++) {
    console.log(`\nround ${r} of ${rounds}`);
    await round({
      runs,
      concurrency,
      url,
      only: values.only,
      mocks,
      segments,
      showTurns: !!values.turns,
      byStatement: !!values.statements,
    });
  }
  if (!values.only && !values["no-telemetry"]) {
    console.log(
      "\ntelemetry: the PGlite mocks row in fresh processes, OpenTelemetry off, then on (OTLP to a local receiver)",
    );
    await telemetryRow(runs);
  }
  if (idleRuns > 0 && !values.only) {
    const db = await PGlite.create();
    await db.exec(SCHEMA_SQL);
    const client = new PgliteClient(db, { describe: "pglite:memory", owned: true });
    const bytes = await idleBytesPerRun(client, idleRuns);
    await client.close();
    const gcNote = (globalThis as { gc?: unknown }).gc ? "" : " (no --expose-gc: noisy)";
    console.log(
      `\nidle runs: ${idleRuns} runs in flight on one worker host, each waiting on its model: ` +
        `${(bytes / 1024).toFixed(1)} KiB of V8 heap per run${gcNote}`,
    );
  }
  return 0;
}

/**
 * The PGlite row again, twice, each in a fresh child process under the same
 * conditions: with Deno's OpenTelemetry off, then on and exporting spans and
 * metrics over OTLP/HTTP (JSON) to a local receiver. Then what the no-op
 * wrappers cost per step in this process, where telemetry is off.
 */
async function telemetryRow(runs: number): Promise<void> {
  const receiver = startOtlpReceiver();
  try {
    for (const on of [false, true]) {
      const child = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--unstable-no-legacy-abort",
          new URL(import.meta.url).pathname,
          "--telemetry-child",
          "--runs",
          String(runs),
        ],
        env: {
          OTEL_DENO: on ? "true" : "false",
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
          OTEL_SERVICE_NAME: "agent-runtime-bench",
        },
        stdout: "piped",
        stderr: "inherit",
      }).output();
      const out = new TextDecoder().decode(child.stdout).trim();
      console.log(out || `telemetry ${on ? "on" : "off"}: the child exited ${child.code} without a row`);
    }
    // Export is batched: give the last batch a moment before counting what arrived.
    await new Promise((r) => setTimeout(r, 300));
    console.log(`${"".padEnd(34)} spans exported with telemetry on=${receiver.spans.length}`);
  } finally {
    await receiver.close();
  }
  // The wrappers a step goes through with telemetry off (step, decide, model call, act, tool call).
  const state = { fence: { runId: "bench", epoch: 1 }, journal: new Map(), effects: new Map() };
  const t = NO_TELEMETRY;
  const n = 200_000;
  const body = () => Promise.resolve(1);
  const time = async (wrapped: boolean) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      if (wrapped) {
        await t.step(
          state,
          i,
          () =>
            t.decide(state, i, () => t.modelCall("m", () => Promise.resolve({ usage: 1 })))
              .then(() => t.act(state, i, () => t.toolCall(state, { key: "k", seq: i, tool: "x" }, body))),
        );
      } else {
        await Promise.resolve({ usage: 1 }).then(body);
      }
    }
    return ((performance.now() - t0) * 1e6) / n;
  };
  await time(true); // warm up
  const bare = await time(false);
  const wrapped = await time(true);
  console.log(
    `${"telemetry off, wrappers per step".padEnd(34)} ${(wrapped - bare).toFixed(0)} ns per step ` +
      `(${wrapped.toFixed(0)} ns wrapped vs ${bare.toFixed(0)} ns bare, ${n} steps in this process)`,
  );
}

if (import.meta.main) Deno.exit(await main(Deno.args, Deno.env.toObject()));
