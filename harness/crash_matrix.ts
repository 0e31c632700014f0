/**
 * The crash matrix: every crash point on every step of the demo run. Each
 * case runs a worker to its crash, restarts the run in a new incarnation,
 * runs it to done, then asserts the point's row of DESIGN.md's table and
 * invariant 5 (see `invariants.ts`). A tool point on the done-step (where no
 * tool is called) never fires: that case is reported `not reached`, never
 * passed.
 *
 * In-process (the default) every incarnation is a {@link SimProcess} on one
 * shared PGlite with a manual clock, and the transcript is byte-identical
 * from run to run. With `--postgres` every incarnation is a real
 * `deno run cli/main.ts run` killed by SIGKILL at the point, against real
 * PostgreSQL and the mocks over HTTP.
 *
 * With `--model ai-sdk` the demo's model is the AI SDK's OpenAI-compatible
 * provider (`@ai-sdk/openai-compatible`) against the same mock model, through
 * the AI SDK adapter (`runtime/model/ai_sdk.ts`) instead of the built-in
 * planner; with `--postgres` its workers load `examples/provision/ai_sdk_agent.ts`.
 *
 * With `--parallel 3` the mock model answers the demo's three calls at once:
 * the run is a step of three calls at seq 0 (seqs 0, 1, 2, keys `<run>:0`
 * to `<run>:2`) and the done-step at seq 3. The tool points then fire at each
 * call (`CRASH_SEQ` 0, 1, 2) while the step's other calls are in flight; the
 * model points at seq 0 and 3.
 *
 * With `--signals` it runs the matrix of a run that waits for a signal instead
 * (`signal_matrix.ts`).
 *
 * ```sh
 * deno task crash-matrix [--model ai-sdk] [--parallel 3] [--transcript FILE] [--postgres [--database-url URL] [--concurrency 4]]
 * deno task crash-matrix --signals [--transcript FILE]
 * ```
 *
 * @module
 */

import { createOpenAICompatible } from "npm:@ai-sdk/openai-compatible@3.0.92";
import { serveMocks } from "../mock/server.ts";
import type { FetchLike, Planner } from "../runtime/model/planner.ts";
import { aiSdkPlanner } from "../runtime/model/ai_sdk.ts";
import { commandFlags } from "../runtime/settings/config.ts";
import { CRASH_POINTS, type CrashPoint, isCrashPoint } from "../runtime/base/crashpoints.ts";
import { callsOf } from "../runtime/run/calls.ts";
import type { Decision } from "../runtime/store/rows.ts";
import {
  type Baseline,
  baselineOf,
  checkInvariants,
  checkPointOutcome,
  ownerSeq,
  sumAttempts,
  TOOL_POINTS,
} from "./invariants.ts";
import { freshPgSchema, mapLimit, spawnWorker } from "./pg.ts";
import { readSnapshot, type RunSnapshot, SIM_MODEL_URL, SimDb, type SimExit, SimWorld } from "./sim.ts";

/** How the demo's workers ask the mock model: the built-in chat-completions planner, or an AI SDK provider. */
export type MatrixModel = "openai" | "ai-sdk";

/** Every {@link MatrixModel}. */
export const MATRIX_MODELS: readonly MatrixModel[] = ["openai", "ai-sdk"];

/** The agent module a `--postgres` worker loads for `--model ai-sdk`. */
const AI_SDK_AGENT = new URL("../examples/provision/ai_sdk_agent.ts", import.meta.url).pathname;

/**
 * The planner of an in-process worker for `model`, over the process's fetch
 * (undefined: the world's default, the chat-completions planner).
 */
export function matrixPlanner(model: MatrixModel): ((fetch: FetchLike) => Planner) | undefined {
  if (model === "openai") return undefined;
  return (fetch) =>
    aiSdkPlanner(
      createOpenAICompatible({
        name: "mock",
        baseURL: SIM_MODEL_URL,
        fetch: (input, init) => fetch(new Request(input, init)),
      })("mock-planner"),
    );
}

/** One case of the matrix. */
export interface MatrixCase {
  point: CrashPoint;
  seq: number;
}

/** The verdict of one case. */
export type Verdict = "passed" | "failed" | "not reached";

/** The outcome of one case. */
export interface CaseResult extends MatrixCase {
  runId: string;
  verdict: Verdict;
  /** Model calls the run paid for in the end (journal). */
  llmCalls: number;
  /** The crashed step's tool call: `created`, `already_done`, or `-` (no tool call). */
  remote: string;
  /**
   * How each call of the crashed step stood when the process died, for a step
   * of several calls (`0=confirmed 1=intent+acted 2=intent`: `+acted` when
   * the remote had created the resource); empty otherwise.
   */
  atCrash: string;
  /** Every problem found; empty when passed. */
  problems: string[];
  /** The case's whole log. */
  transcript: string[];
}

/** The outcome of a whole matrix. */
export interface MatrixResult {
  baseline: Baseline;
  cases: CaseResult[];
  passed: number;
  failed: number;
  notReached: number;
  /** Every case's log, in case order. */
  transcript: string;
}

/** The run id of a case: stable, so transcripts compare byte for byte (`cm3-` with three calls a step). */
export function caseRunId(c: MatrixCase, parallel = 1): string {
  return `${parallel === 1 ? "cm" : `cm${parallel}`}-${c.point}-s${c.seq}`;
}

/**
 * The cases of a clean run's journal: each model point at every decision's
 * seq, each tool point at every call's seq (every call of a step with
 * several) and at the done-step's seq, where it can never fire (`not
 * reached`). In point order, then seq. For the demo with one call a step that
 * is every point on seq 0..3; with three calls at once, the model points at 0
 * and 3 and the tool points at 0, 1, 2 (and 3).
 */
export function matrixCases(
  journal: readonly { seq: number; decision: Decision | null }[],
  points: readonly CrashPoint[] = CRASH_POINTS,
): MatrixCase[] {
  const decisions = journal.map((j) => j.seq);
  const toolSeqs = journal.flatMap((j) => {
    const calls = j.decision ? callsOf(j.decision, j.seq) : [];
    return calls.length > 0 ? calls.map((c) => c.seq) : [j.seq];
  });
  return points.flatMap((point) =>
    (TOOL_POINTS.includes(point) ? toolSeqs : decisions).map((seq) => ({ point, seq }))
  );
}

/**
 * How each call of the step a case crashed stood at the crash, when the
 * step has several: its row's status (`none` before its intent) and `+acted`
 * when the remote had created its resource.
 */
export function callsAtCrash(c: MatrixCase, runId: string, atCrash: RunSnapshot, final: RunSnapshot): string {
  const owner = TOOL_POINTS.includes(c.point) ? ownerSeq(final.journal, c.seq) : c.seq;
  const decision = final.journal.find((j) => j.seq === owner)?.decision;
  const calls = decision ? callsOf(decision, owner) : [];
  if (calls.length < 2) return "";
  return calls.map((call) => {
    const row = atCrash.effects.find((e) => e.seq === call.seq);
    const acted = atCrash.created.some((r) => r.key === `${runId}:${call.seq}`);
    return `${call.seq}=${row?.status ?? "none"}${acted ? "+acted" : ""}`;
  }).join(" ");
}

/** Judges one case from its snapshots: the point's outcome and invariant 5. */
export function judge(
  c: MatrixCase,
  runId: string,
  baseline: Baseline,
  atCrash: RunSnapshot | undefined,
  final: RunSnapshot,
  extra: string[] = [],
): Pick<CaseResult, "verdict" | "llmCalls" | "remote" | "atCrash" | "problems"> {
  const problems = [...extra];
  const lostAnswers = atCrash && c.point === "after_decide_before_journal" ? 1 : 0;
  problems.push(
    ...checkInvariants(final, { runId, baseline, lostAnswers, earlier: atCrash ? [atCrash] : [] }),
  );
  if (atCrash) problems.push(...checkPointOutcome(c.point, c.seq, atCrash, final, { runId, baseline }));
  const effect = final.effects.find((e) => e.seq === c.seq);
  return {
    verdict: problems.length > 0 ? "failed" : atCrash ? "passed" : "not reached",
    llmCalls: sumAttempts(final),
    remote: effect?.remote ?? "-",
    atCrash: atCrash ? callsAtCrash(c, runId, atCrash, final) : "",
    problems,
  };
}

function describeExit(exit: SimExit): string {
  if (exit.kind === "exited") return `exited status=${exit.outcome.status}`;
  if (exit.kind === "killed") return `killed at ${exit.point} seq=${exit.seq}`;
  return `error ${exit.error}`;
}

/** Runs a clean (crash-free) in-process run and measures its baseline. */
async function simBaseline(
  db: SimDb,
  parallel: number,
  model: MatrixModel,
): Promise<{ baseline: Baseline; clean: RunSnapshot; problems: string[]; lines: string[] }> {
  const world = await SimWorld.open(db, { modelParallel: parallel });
  const runId = parallel === 1 ? "cm-clean" : `cm${parallel}-clean`;
  const exit = await world.spawn({ runId, planner: matrixPlanner(model) }).exit;
  const final = await world.snapshot(runId);
  const baseline = baselineOf(final);
  const problems = exit.kind === "exited" && exit.outcome.status === "done"
    ? checkInvariants(final, { runId, baseline, lostAnswers: 0 })
    : [`the clean run ended ${describeExit(exit)}`];
  return { baseline, clean: final, problems, lines: world.transcript };
}

/** Runs one case in-process: crash, restart, done, judge. */
export async function runSimCase(
  db: SimDb,
  c: MatrixCase,
  baseline: Baseline,
  parallel = 1,
  model: MatrixModel = "openai",
): Promise<CaseResult> {
  const world = await SimWorld.open(db, { modelParallel: parallel });
  const runId = caseRunId(c, parallel);
  const planner = matrixPlanner(model);
  world.note(`=== case ${c.point} seq=${c.seq} run=${runId}`);
  const first = await world.spawn({ runId, plan: { crashAt: c.point, crashSeq: c.seq }, planner }).exit;
  world.note(`--- first incarnation ${describeExit(first)}`);
  const extra: string[] = [];
  let atCrash: RunSnapshot | undefined;
  if (first.kind === "killed") {
    if (first.point !== c.point || first.seq !== c.seq) {
      extra.push(`killed at ${first.point} seq=${first.seq}, planned ${c.point} seq=${c.seq}`);
    }
    atCrash = await world.snapshot(runId);
    // The restart comes a second later, on the same clock.
    await world.advance(1_000);
    const second = await world.spawn({ runId, planner }).exit;
    world.note(`--- restart ${describeExit(second)}`);
    if (second.kind !== "exited" || second.outcome.status !== "done") {
      extra.push(`the restart ended ${describeExit(second)}`);
    }
  } else if (first.kind !== "exited" || first.outcome.status !== "done") {
    extra.push(`the crash never fired and the run ended ${describeExit(first)}`);
  }
  const final = await world.snapshot(runId);
  const judged = judge(c, runId, baseline, atCrash, final, extra);
  if (judged.atCrash) world.note(`--- calls at the crash: ${judged.atCrash}`);
  world.note(`--- verdict ${judged.verdict} llm_calls=${judged.llmCalls} remote=${judged.remote}`);
  for (const p of judged.problems) world.note(`    problem: ${p}`);
  return { ...c, runId, ...judged, transcript: world.transcript };
}

/** Options of {@link runMatrix}. */
export interface MatrixOptions {
  /** Only these points (default: all seven). */
  points?: readonly CrashPoint[];
  /**
   * Calls the mock model answers at once (1 to 3): 3 makes the demo one step
   * of three calls, each crashed at every tool point. Default 1.
   */
  parallel?: number;
  /** How the workers ask the mock model. Default `openai` (the built-in planner). */
  model?: MatrixModel;
  /** Called after each case (to print its row as it finishes). */
  onCase?: (result: CaseResult) => void;
  /**
   * Group commit in the workers (`GROUP_COMMIT_MS`, the bound on a write's
   * wait), for the PostgreSQL matrix's processes; the in-process matrix takes
   * it from its `SimDb`. Default 0: off.
   */
  groupCommitMs?: number;
}

/** The in-process matrix on `db` (a fresh schema of it). */
export async function runMatrix(db: SimDb, opts: MatrixOptions = {}): Promise<MatrixResult> {
  await db.freshSchema();
  const parallel = opts.parallel ?? 1;
  const model = opts.model ?? "openai";
  const clean = await simBaseline(db, parallel, model);
  const header = [
    `=== clean run: llm_calls=${clean.baseline.llmCalls} steps=${clean.baseline.steps}${
      parallel === 1 ? "" : ` parallel=${parallel}`
    }${model === "openai" ? "" : ` model=${model}`}`,
    ...clean.lines,
    ...clean.problems.map((p) => `    problem: ${p}`),
  ];
  if (clean.problems.length > 0) {
    throw new Error(`The clean run is broken, so no case can be judged:\n${clean.problems.join("\n")}`);
  }
  const cases: CaseResult[] = [];
  for (const c of matrixCases(clean.clean.journal, opts.points)) {
    const result = await runSimCase(db, c, clean.baseline, parallel, model);
    cases.push(result);
    opts.onCase?.(result);
  }
  return summarise(clean.baseline, cases, header);
}

function summarise(baseline: Baseline, cases: CaseResult[], header: string[]): MatrixResult {
  const count = (v: Verdict) => cases.filter((c) => c.verdict === v).length;
  return {
    baseline,
    cases,
    passed: count("passed"),
    failed: count("failed"),
    notReached: count("not reached"),
    transcript: [...header, ...cases.flatMap((c) => c.transcript)].join("\n") + "\n",
  };
}

/** Options of {@link runPostgresMatrix}. */
export interface PostgresMatrixOptions extends MatrixOptions {
  /** A PostgreSQL server; the matrix works in a fresh schema of its own and drops it. */
  databaseUrl: string;
  /** Cases running at once (each is two processes, one after the other). Default 4. */
  concurrency?: number;
}

/** The matrix with real `deno run` workers, SIGKILL and PostgreSQL. */
export async function runPostgresMatrix(opts: PostgresMatrixOptions): Promise<MatrixResult> {
  const pg = await freshPgSchema(opts.databaseUrl);
  const parallel = opts.parallel ?? 1;
  const mocks = await serveMocks({ modelPort: 0, cloudPort: 0, modelParallel: parallel });
  try {
    const env = (runId: string, extra: Record<string, string> = {}) => ({
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      RUN_ID: runId,
      ...(opts.model === "ai-sdk" ? { AGENT: AI_SDK_AGENT } : {}),
      ...(opts.groupCommitMs ? { GROUP_COMMIT_MS: String(opts.groupCommitMs) } : {}),
      ...extra,
    });
    const snapshot = (runId: string) => readSnapshot(pg.store, mocks.model, mocks.cloud, runId);

    const cleanId = parallel === 1 ? "cm-clean" : `cm${parallel}-clean`;
    const cleanRun = await spawnWorker(env(cleanId)).result;
    const cleanFinal = await snapshot(cleanId);
    const baseline = baselineOf(cleanFinal);
    const cleanProblems = cleanRun.code === 0
      ? checkInvariants(cleanFinal, { runId: cleanId, baseline, lostAnswers: 0 })
      : [`the clean run exited ${cleanRun.code}`];
    if (cleanProblems.length > 0) {
      throw new Error(
        `The clean run is broken, so no case can be judged:\n${cleanProblems.join("\n")}\n${
          cleanRun.lines.join("\n")
        }`,
      );
    }
    const header = [
      `=== clean run: llm_calls=${baseline.llmCalls} steps=${baseline.steps}${
        parallel === 1 ? "" : ` parallel=${parallel}`
      }${opts.model === undefined || opts.model === "openai" ? "" : ` model=${opts.model}`}`,
      ...cleanRun.lines,
    ];
    const cases = await mapLimit(
      matrixCases(cleanFinal.journal, opts.points),
      opts.concurrency ?? 4,
      async (c) => {
        const runId = caseRunId(c, parallel);
        const transcript = [`=== case ${c.point} seq=${c.seq} run=${runId}`];
        const extra: string[] = [];
        const first = await spawnWorker(env(runId, { CRASH_AT: c.point, CRASH_SEQ: String(c.seq) })).result;
        transcript.push(...first.lines, `--- first process exited code=${first.code} signal=${first.signal}`);
        const fired = first.lines.some((l) => l.includes(` event=crash point=${c.point} seq=${c.seq} `));
        let atCrash: RunSnapshot | undefined;
        if (fired) {
          if (first.signal !== "SIGKILL") extra.push(`the crashed process was not killed by SIGKILL`);
          atCrash = await snapshot(runId);
          const second = await spawnWorker(env(runId)).result;
          transcript.push(...second.lines, `--- restart exited code=${second.code}`);
          if (second.code !== 0) extra.push(`the restart exited ${second.code}`);
        } else if (first.code !== 0) {
          extra.push(`the crash never fired and the process exited ${first.code}`);
        }
        const judged = judge(c, runId, baseline, atCrash, await snapshot(runId), extra);
        if (judged.atCrash) transcript.push(`--- calls at the crash: ${judged.atCrash}`);
        transcript.push(`--- verdict ${judged.verdict} llm_calls=${judged.llmCalls} remote=${judged.remote}`);
        for (const p of judged.problems) transcript.push(`    problem: ${p}`);
        const result: CaseResult = { ...c, runId, ...judged, transcript };
        opts.onCase?.(result);
        return result;
      },
    );
    return summarise(baseline, cases, header);
  } finally {
    await mocks.close();
    await pg.drop();
  }
}

/** One printed row of the matrix (with how the step's calls stood at the crash, for a step of several). */
export function formatRow(
  r: Pick<CaseResult, "point" | "seq" | "llmCalls" | "remote" | "verdict"> & { atCrash?: string },
): string {
  return `${r.point.padEnd(28)} ${String(r.seq).padStart(3)} ${String(r.llmCalls).padStart(9)}  ${
    r.remote.padEnd(12)
  } ${r.verdict}${r.atCrash ? `${" ".repeat(Math.max(1, 12 - r.verdict.length))}${r.atCrash}` : ""}`;
}

/** The header of the printed table. */
export const ROW_HEADER: string = `${"point".padEnd(28)} ${"seq".padStart(3)} ${"llm_calls".padStart(9)}  ${
  "remote".padEnd(12)
} verdict`;

/** The summary line. */
export function summaryLine(r: Pick<MatrixResult, "passed" | "failed" | "notReached">): string {
  return `crash-matrix: ${r.passed} passed, ${r.failed} failed, ${r.notReached} not reached`;
}

/** The usage text of `crash-matrix`. */
export const CRASH_MATRIX_USAGE = `agent-runtime crash-matrix: every crash point on every step of the demo,
checked against the invariants.

usage: deno task crash-matrix [--flag value ...]

  --points P1,P2             only these crash points (default all: ${CRASH_POINTS.join(", ")})
  --model M                  how the demo asks the mock model: openai (the built-in planner, default) or
                             ai-sdk (the AI SDK's OpenAI-compatible provider through the AI SDK adapter)
  --parallel N               the mock model answers N calls at once (1 to 3, default 1): with 3 the demo
                             is one step of three calls, each crashed at every tool point
  --transcript FILE          write every case's log to FILE (byte-identical from run to run in-process)
  --postgres                 real 'deno run' processes killed by SIGKILL, on PostgreSQL (default: in-process)
  --database-url URL         PostgreSQL for --postgres (env DATABASE_URL, then TEST_DATABASE_URL)
  --concurrency N            cases at once with --postgres (default 4)
  --group-commit-ms MS       group commit on in the workers, a write waiting at most MS (default 0: off)
  --signals                  the matrix of a run that waits for a signal (harness/signal_matrix.ts): every
                             point on each of its steps, the signal sent before the wait, during it, or
                             waking it (in-process)

exit codes: 0 every case passed, 1 a case failed, 2 bad arguments`;

/** The command: prints one row per case and the summary; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  const flags = commandFlags("crash-matrix", CRASH_MATRIX_USAGE, args, {
    postgres: { type: "boolean", default: false },
    transcript: { type: "string" },
    "database-url": { type: "string" },
    concurrency: { type: "string", default: "4" },
    parallel: { type: "string", default: "1" },
    model: { type: "string", default: "openai" },
    points: { type: "string" },
    "group-commit-ms": { type: "string", default: "0" },
    signals: { type: "boolean", default: false },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const points = values.points?.split(",").map((p) => p.trim());
  const bad = points?.find((p) => !isCrashPoint(p));
  if (bad !== undefined) {
    console.error(
      `crash-matrix: --points names an unknown point ${JSON.stringify(bad)}. Valid points: ${
        CRASH_POINTS.join(", ")
      }`,
    );
    return 2;
  }
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    console.error(
      `crash-matrix: --concurrency must be an integer from 1 to 64: current value is ${values.concurrency}`,
    );
    return 2;
  }
  const parallel = Number(values.parallel);
  if (!Number.isInteger(parallel) || parallel < 1 || parallel > 3) {
    console.error(
      `crash-matrix: --parallel must be an integer from 1 to 3 (the demo has three calls): current value is ${values.parallel}`,
    );
    return 2;
  }
  const groupCommitMs = Number(values["group-commit-ms"]);
  if (!Number.isFinite(groupCommitMs) || groupCommitMs < 0 || groupCommitMs > 100) {
    console.error(
      `crash-matrix: --group-commit-ms must be a number of milliseconds from 0 to 100: current value is ${
        values["group-commit-ms"]
      }`,
    );
    return 2;
  }
  const model = values.model as MatrixModel;
  if (!MATRIX_MODELS.includes(model)) {
    console.error(
      `crash-matrix: --model must be one of ${MATRIX_MODELS.join(", ")}: current value is ${
        JSON.stringify(values.model)
      }`,
    );
    return 2;
  }
  const opts = {
    points: points as CrashPoint[] | undefined,
    parallel,
    model,
    onCase: (r: CaseResult) => console.log(formatRow(r)),
  };
  const databaseUrl = values["database-url"] ?? Deno.env.get("DATABASE_URL") ??
    Deno.env.get("TEST_DATABASE_URL");
  if (values.signals) {
    if (values.postgres || points || parallel !== 1 || model !== "openai") {
      console.error("crash-matrix: --signals takes no --postgres, --points, --parallel or --model");
      return 2;
    }
    return await signalMain(groupCommitMs, values.transcript);
  }
  if (values.postgres && !databaseUrl) {
    console.error(
      "crash-matrix: --postgres needs a PostgreSQL server: set DATABASE_URL or TEST_DATABASE_URL, or pass --database-url",
    );
    return 2;
  }
  console.log(ROW_HEADER);
  let result: MatrixResult;
  if (values.postgres && databaseUrl) {
    // Cases finish out of order with concurrency: print the rows in case order at the end.
    result = await runPostgresMatrix({
      points: opts.points,
      parallel,
      model,
      databaseUrl,
      concurrency,
      groupCommitMs,
    });
    for (const c of result.cases) console.log(formatRow(c));
  } else {
    const db = await SimDb.open({ groupCommitMs });
    try {
      result = await runMatrix(db, opts);
    } finally {
      await db.close();
    }
  }
  for (const c of result.cases.filter((c) => c.verdict === "failed")) {
    console.log(`\nFAILED ${c.point} seq=${c.seq} run=${c.runId}:\n  ${c.problems.join("\n  ")}`);
  }
  if (values.transcript) await Deno.writeTextFile(values.transcript, result.transcript);
  console.log(summaryLine(result));
  return result.failed > 0 ? 1 : 0;
}

/** `--signals`: the signal matrix (loaded on demand), one row per case and its summary line. */
async function signalMain(groupCommitMs: number, transcript: string | undefined): Promise<number> {
  const { formatSignalRow, runSignalMatrix, signalSummaryLine } = await import("./signal_matrix.ts");
  console.log(`timing  ${ROW_HEADER}`);
  const db = await SimDb.open({ groupCommitMs });
  try {
    const result = await runSignalMatrix(db, { onCase: (r) => console.log(formatSignalRow(r)) });
    for (const c of result.cases.filter((c) => c.verdict === "failed")) {
      console.log(
        `\nFAILED ${c.timing} ${c.point} seq=${c.seq} run=${c.runId}:\n  ${c.problems.join("\n  ")}`,
      );
    }
    if (transcript) await Deno.writeTextFile(transcript, result.transcript);
    console.log(signalSummaryLine(result));
    return result.failed > 0 ? 1 : 0;
  } finally {
    await db.close();
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
