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
 * This file is the command: the rows are in `step_rows.ts`, how they are
 * measured (timing, fan-out, statements timed by name) in `step_measure.ts`,
 * how they are printed in `step_report.ts`.
 *
 * @module
 */

import { PGlite } from "npm:@electric-sql/pglite@0.5.16";
import postgres from "npm:postgres@3.4.9";
import { commandFlags } from "../runtime/settings/config.ts";
import { finished } from "../runtime/run/ended.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { PgliteClient, PgliteSession } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { SCHEMA_SQL, type SqlClient } from "../runtime/store/store.ts";
import { NO_TELEMETRY, telemetryFromEnv } from "../runtime/run/telemetry.ts";
import type { Tool } from "../runtime/agent/tools.ts";
import { startOtlpReceiver } from "../harness/otlp_receiver.ts";
import { pool, type Row, StatementTimes, STEPS_PER_RUN, stepsPerS, turnRatio } from "./step_measure.ts";
import {
  header,
  print,
  printAgainstWholeRun,
  printStatementTimes,
  TIMED,
  type Timed,
} from "./step_report.ts";
import {
  hostRow,
  idleBytesPerRun,
  mockAgent,
  rawRow,
  type Recorded,
  recordRun,
  replayRow,
  runtimeRow,
  ScriptedPlanner,
  scriptedTools,
} from "./step_rows.ts";

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
  const fence = { runId: "bench", epoch: 1 };
  const t = NO_TELEMETRY;
  const n = 200_000;
  const body = () => Promise.resolve(finished(1, {}));
  const time = async (wrapped: boolean) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      if (wrapped) {
        const at = { fence, seq: i };
        await t.step(
          at,
          () =>
            t.decide(at, () => t.modelCall("m", () => Promise.resolve({ usage: 1 })).then(body))
              .then(() => t.act(at, () => t.toolCall({ ...at, key: "k", tool: "x" }, body))),
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
