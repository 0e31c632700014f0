/**
 * The step bench's rows: the raw SQL floor (its writes by hand), the
 * runtime's statements replayed by hand, the runtime's single-run path with
 * a scripted or a mock agent, a worker host, and the heap an idle run holds.
 * Each row measures its runs with `step_measure.ts` and returns one
 * {@link Row}.
 *
 * @module
 */

import { defineAgent } from "../runtime/agent/agent.ts";
import { MockCloud } from "../mock/cloud.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { MockModel } from "../mock/model.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { type RunDeps, runDepsFor } from "../runtime/run/context.ts";
import { agentDeps, processDeps } from "../runtime/run/deps.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import {
  type DecideRequest,
  OpenAIPlanner,
  type Planner,
  type PlannerDecision,
} from "../runtime/model/planner.ts";
import { CountingClient, TapClient, UNNAMED } from "../runtime/store/counting.ts";
import { type Statement, statement } from "../runtime/store/sql.ts";
import type { StatementName } from "../runtime/store/statements.ts";
import { type SqlClient, Store } from "../runtime/store/store.ts";
import { NO_TELEMETRY, type Telemetry } from "../runtime/run/telemetry.ts";
import { defineTool, type Tool, ToolRegistry } from "../runtime/agent/tools.ts";
import {
  collectGarbage,
  fanOut,
  type Row,
  type StatementTimes,
  STEPS_PER_RUN,
  timed,
  warmRuns,
} from "./step_measure.ts";

/** Statements a step of the raw row sends: decision intent, decision confirm, tool intent, tool confirm. */
export const RAW_PER_STEP = 4;

/** The scripted agent's three tool calls. */
const ARGS = [
  { tool: "create_server", args: { name: "srv-1", spec: "small" } },
  { tool: "create_database", args: { name: "db-1", engine: "postgres", size_gb: 20 } },
  { tool: "create_dns_record", args: { hostname: "app.example.com", record_type: "CNAME", target: "srv-1" } },
] as const;
const USAGE = { prompt_tokens: 120, completion_tokens: 24, total_tokens: 144 };
const RESULT = { id: "i-0000001", status: "running" };

/** Answers each step from the script, at once: no HTTP, no JSON. */
export class ScriptedPlanner implements Planner {
  readonly describe = "scripted (in-process)";
  decide(req: DecideRequest): Promise<PlannerDecision> {
    const step = ARGS[req.seq];
    return Promise.resolve(
      step
        ? { kind: "tool_calls", calls: [{ name: step.tool, args: { ...step.args } }], usage: USAGE }
        : { kind: "done", text: "provisioned", usage: USAGE },
    );
  }
}

/** The demo's tools (same names and zod schemas), answering in process. */
export function scriptedTools(): Tool[] {
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
export async function mockAgent(): Promise<{ planner: Planner; tools: Tool[] }> {
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
}): RunDeps {
  const clock = new SystemClock();
  const log = new Logger({ clock, sink: discardSink });
  const { planner, tools } = opts.agent;
  return runDepsFor(
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

/** Statements a run of the whole-run floor sends: create, claim, 4 decisions, 3 tool calls, close. */
export const WHOLE_RUN_STATEMENTS = 3 + 2 * STEPS_PER_RUN + 2 * (STEPS_PER_RUN - 1);

/**
 * The raw rows' statements: the writes any durable loop makes, plain (no
 * fence, no condition, no read), each under the name of the runtime's
 * statement it stands for, so `--statements` shows the floor's latency beside
 * the runtime's, row by row.
 */
const RAW = {
  insertRun: statement(
    "insert-run",
    `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
     values ($1, 'provision', 'bench', $2::text::jsonb, 'pending', 0, $3::timestamptz, $3::timestamptz)`,
  ),
  claim: statement(
    "first-claim",
    `update runs set epoch = 1, owner = $2, status = 'running', heartbeat_at = $3::timestamptz,
            updated_at = $3::timestamptz where run_id = $1`,
  ),
  journalIntent: statement(
    "journal-intent",
    `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
     values ($1, $2, 'intent', 1, 1, $3::timestamptz)`,
  ),
  journalConfirm: statement(
    "journal-confirm",
    `update journal set status = 'confirmed', decision = $3::text::jsonb, usage = $4::text::jsonb,
            confirmed_at = $5::timestamptz where run_id = $1 and seq = $2`,
  ),
  effectIntent: statement(
    "effect-intent",
    `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
     values ($1, $2, $3, 'create_server', $4::text::jsonb, 'intent', 1, 1, $5::timestamptz)`,
  ),
  effectConfirm: statement(
    "effect-confirm",
    `update side_effects set status = 'confirmed', result = $2::text::jsonb, remote = 'created',
            confirmed_at = $3::timestamptz where idempotency_key = $1`,
  ),
  finish: statement(
    "finish-run",
    `update runs set status = 'done', output = $2, updated_at = $3::timestamptz where run_id = $1`,
  ),
} as const satisfies Record<string, Statement<StatementName>>;

/**
 * The floor: the four writes of each step, by hand, nothing else. With
 * `wholeRun`, the writes a run of the runtime makes, by hand and plain: the
 * run's own row inserted, claimed and closed, a decision's pair each step and
 * a tool call's pair each tool step ({@link WHOLE_RUN_STATEMENTS}), with no
 * fence, no condition and no read (`raw SQL, whole run`).
 */
export async function rawRow(
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
  const q = times
    ? (st: Statement, params: unknown[]) => {
      statements++;
      return times.time(st.name, () => query(st.text, params));
    }
    : (st: Statement, params: unknown[]) => {
      statements++;
      return query(st.text, params);
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
        RAW.insertRun,
        [runId, input, now],
      );
      await q(
        RAW.claim,
        [runId, "bench-raw", now],
      );
    }
    for (let seq = 0; seq < STEPS_PER_RUN; seq++) {
      const now = new Date().toISOString();
      // The whole-run floor's last step is the done decision, with no tool call (as the runtime's).
      const last = wholeRun && seq === STEPS_PER_RUN - 1;
      await q(
        RAW.journalIntent,
        [runId, seq, now],
      );
      await q(
        RAW.journalConfirm,
        [runId, seq, last ? done : decision, usage, now],
      );
      if (last) continue;
      await q(
        RAW.effectIntent,
        [`${runId}:${seq}`, runId, seq, args, now],
      );
      await q(
        RAW.effectConfirm,
        [`${runId}:${seq}`, result, now],
      );
    }
    if (wholeRun) {
      await q(
        RAW.finish,
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
export interface Recorded {
  rows: boolean;
  /** The name it was sent under. */
  name: string;
  text: string;
  params: unknown[];
  withRunId: number[];
  /** Parameters holding a timestamp (the time of the write): the replay sends its own time there. */
  withTime: number[];
}

/** A timestamp parameter as the store sends it. */
const TIMESTAMP = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/**
 * The statements one fresh run of the scripted agent sends, recorded as its
 * store built them, with `token` as its run id (the replayed row puts each
 * run's own id in its place).
 */
export async function recordRun(client: SqlClient, token: string): Promise<Recorded[]> {
  const recorded: Recorded[] = [];
  const recorder = new TapClient(client, ({ rows, text, params, opts }) => {
    const withRunId = params.flatMap((v, i) => typeof v === "string" && v.includes(token) ? [i] : []);
    const withTime = params.flatMap((v, i) => typeof v === "string" && TIMESTAMP.test(v) ? [i] : []);
    recorded.push({ rows, name: opts?.name ?? UNNAMED, text, params, withRunId, withTime });
  });
  const outcome = await claimAndDrive(
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
export async function replayRow(
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
    ? (st: Recorded, params: unknown[]) => times.time(st.name, () => send(st, params))
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

/** The runtime's single-run path (`claimAndDrive`, as `deno task run` drives it), `concurrency` runs at once. */
export async function runtimeRow(
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
    await claimAndDrive(deps, `warm-${warm}-${i}`, "bench");
  });
  counting.reset();
  collectGarbage();
  const prefix = crypto.randomUUID().slice(0, 8);
  times?.start();
  const t = await timed(() =>
    fanOut(runs, concurrency, async (i) => {
      const outcome = await claimAndDrive(deps, `b-${prefix}-${i}`, "bench");
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
export async function hostRow(
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
      // Each write alone, as this row has always measured (bench:capacity measures grouping).
      groupCommitMs: 0,
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
export async function idleBytesPerRun(client: SqlClient, idleRuns: number): Promise<number> {
  const collect = collectGarbage;
  const waiting: ((a: PlannerDecision) => void)[] = [];
  const slow: Planner = {
    describe: "slow",
    decide: () => new Promise<PlannerDecision>((resolve) => waiting.push(resolve)),
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
    // Each write alone, as this row has always measured (bench:capacity measures grouping).
    groupCommitMs: 0,
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
  for (const answer of waiting.splice(0)) answer({ kind: "done", text: "ok" });
  for (let i = 0; i < 6_000 && ended < idleRuns; i++) await new Promise((r) => setTimeout(r, 10));
  await host.stop();
  return (after - before) / idleRuns;
}
