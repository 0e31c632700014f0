/**
 * The crash matrix of a run that waits for a signal: every crash point on
 * every step of a run whose first call waits for the signal `approved`
 * (`waitForSignal`), whose second creates a server at the mock cloud with
 * what the signal carried, and whose third step is done. Each point is
 * crashed under three timings of the signal:
 *
 * - `before`: sent before the run starts, so the call takes it at once (a
 *   tool point at seq 0 crashes the request that takes it);
 * - `during`: sent once the run is asleep on the wait (a tool point at seq 0
 *   crashes the look that found none, so the wait itself survives the crash);
 * - `woken`: the run waits, the signal wakes it, and the crash is aimed at
 *   the incarnation that takes it up (a tool point at seq 0 crashes the
 *   re-sent request that takes it; a model point at seq 0 was decided before
 *   the wait and is not reached).
 *
 * After the run is done the signal is sent again under its id (a duplicate:
 * nothing written), and another one is refused (a closed run takes none). Each
 * case asserts invariant 5 as it applies here and the signal's own rules:
 * the run done with its three steps; the wait's call confirmed with the
 * signal, `already_done` when the crash fell between its take and its
 * confirm; the one signal taken once, by that call's key; one server under
 * the second call's key, made from the signal's payload; model calls a clean
 * run's plus one per lost answer; rows confirmed at the crash unchanged; and
 * the run holding no lease whenever it waited. In-process, on one PGlite with
 * a manual clock: the transcript is the same from run to run.
 *
 * ```sh
 * deno task crash-matrix --signals
 * ```
 *
 * @module
 */

import { defineAgent } from "../runtime/agent/agent.ts";
import { CRASH_POINTS } from "../runtime/base/crashpoints.ts";
import { Client } from "../runtime/client/client.ts";
import type { Planner } from "../runtime/model/planner.ts";
import type { DecideRequest, ToolResultMessage } from "../runtime/model/transcript.ts";
import { waitForSignal } from "../runtime/signals/wait_tools.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { type CaseResult, formatRow, matrixCases, type Verdict } from "./crash_matrix.ts";
import {
  type ProcessHooks,
  type RunSnapshot,
  SIM_CLOUD_URL,
  type SimDb,
  type SimExit,
  SimWorld,
} from "./sim.ts";

/** When the signal is sent, against the crash (see the module's documentation). */
export type SignalTiming = "before" | "during" | "woken";

/** Every {@link SignalTiming}, in the order the matrix runs them. */
export const SIGNAL_TIMINGS: readonly SignalTiming[] = ["before", "during", "woken"];

/** The signal's name, the id it is sent under, and what it carries. */
const SIGNAL = { name: "approved", id: "approval-1", payload: { name: "web", spec: "medium" } } as const;

/** A clean run: the wait, the server, done. */
const CLEAN = { llmCalls: 3, steps: 3 };

/** The agent: its tools are built in each process (the server's requests go through its fetch). */
const AGENT = defineAgent({
  name: "gated",
  instructions: "Wait for the approval, then create the server it approves, then say so.",
  tools: [],
});

/** The model: from the transcript alone, so a restarted run asks the same. Counts its requests by run. */
function gatedPlanner(calls: Map<string, number>): Planner {
  return {
    describe: "gated script",
    decide: (req: DecideRequest) => {
      calls.set(req.runId, (calls.get(req.runId) ?? 0) + 1);
      const results = req.transcript.filter((m): m is ToolResultMessage => m.role === "tool");
      if (results.length === 0) {
        return Promise.resolve({ kind: "tool_calls", calls: [{ name: "wait_for_approved", args: {} }] });
      }
      if (results.length === 1) {
        const got = results[0].failed ? undefined : results[0].result as { payload?: { name?: string } };
        const spec = (got?.payload as { spec?: string } | undefined)?.spec ?? "small";
        const name = got?.payload?.name ?? "unapproved";
        return Promise.resolve({
          kind: "tool_calls",
          calls: [{ name: "create_server", args: { name, spec } }],
        });
      }
      const made = results[1];
      return Promise.resolve({
        kind: "done",
        text: made.failed ? `failed: ${made.error}` : `created ${made.result}`,
      });
    },
  };
}

/** One case of the matrix: a crash point, the seq it fires on, and when the signal comes. */
export interface SignalCase {
  point: (typeof CRASH_POINTS)[number];
  seq: number;
  timing: SignalTiming;
}

/** The outcome of one case. */
export type SignalCaseResult = CaseResult & { timing: SignalTiming };

/** The outcome of the whole matrix. */
export interface SignalMatrixResult {
  cases: SignalCaseResult[];
  passed: number;
  failed: number;
  notReached: number;
  /** Every case's log, in case order. */
  transcript: string;
}

/** Every case: each point on each of the three steps, under each timing. */
export function signalCases(): SignalCase[] {
  const journal = [
    { seq: 0, decision: { tool: "wait_for_approved", args: {} } },
    { seq: 1, decision: { tool: "create_server", args: {} } },
    { seq: 2, decision: { done: true as const, message: "" } },
  ];
  return SIGNAL_TIMINGS.flatMap((timing) => matrixCases(journal).map((c) => ({ ...c, timing })));
}

/** The run id of a case: stable, so transcripts compare byte for byte. */
export function signalRunId(c: SignalCase): string {
  return `sm-${c.timing}-${c.point}-s${c.seq}`;
}

/**
 * Runs one case: the run to its end through as many incarnations as it
 * takes, the crash armed as the timing says. `hooks` go into every
 * incarnation (a planted defect, for the test that shows a case can fail).
 */
export async function runSignalCase(
  db: SimDb,
  c: SignalCase,
  hooks?: ProcessHooks,
): Promise<SignalCaseResult> {
  const world = await SimWorld.open(db);
  const runId = signalRunId(c);
  const calls = new Map<string, number>();
  const client = new Client(world.observer, world.clock);
  const problems: string[] = [];
  const send = () => client.signal(runId, SIGNAL.name, SIGNAL.payload, { signalId: SIGNAL.id });
  world.note(`=== case ${c.timing} ${c.point} seq=${c.seq} run=${runId}`);
  if (c.timing === "before") {
    await world.observer.leases.createRun(
      { runId, agent: AGENT.name, goal: "Create the approved server." },
      world.clock.now(),
    );
    await send();
  }
  let armed = c.timing !== "woken";
  let sent = c.timing === "before";
  let atCrash: RunSnapshot | undefined;
  let exit: SimExit | undefined;
  // Bounded: a clean run takes two incarnations (one wait), a crash one more.
  for (let i = 0; i < 6; i++) {
    const plan = armed && !atCrash ? { crashAt: c.point, crashSeq: c.seq } : undefined;
    exit = await world.spawn({
      runId,
      goal: "Create the approved server.",
      agent: AGENT,
      tools: (fetch) => [
        waitForSignal(SIGNAL.name, { deadlineMs: 3_600_000 }),
        demoTools({ cloudUrl: SIM_CLOUD_URL, fetch })[0],
      ],
      planner: () => gatedPlanner(calls),
      plan,
      hooks,
    }).exit;
    world.note(`--- incarnation ${i + 1} ${describe(exit)}`);
    if (exit.kind === "killed") {
      atCrash = await world.snapshot(runId);
      await world.advance(1_000);
      continue;
    }
    if (exit.kind !== "exited" || exit.outcome.status !== "waiting") break;
    const asleep = await world.snapshot(runId);
    if (asleep.run?.status !== "waiting" || asleep.run.heartbeat_at !== null) {
      problems.push(`the run waited as ${asleep.run?.status} with a lease (${asleep.run?.heartbeat_at})`);
    }
    if (!sent) {
      const s = await send();
      if (!s.woken) problems.push(`the send found no call waiting for ${SIGNAL.name}`);
      sent = true;
      armed = true;
    }
    await world.advance(1_000);
  }
  if (exit?.kind !== "exited" || exit.outcome.status !== "done") {
    problems.push(`the run ended ${describe(exit)}`);
  }
  // After the wait: the same id again is a duplicate; another signal is kept for a later wait.
  const again = await send().catch((e) => e as Error);
  if (again instanceof Error || !again.duplicate) {
    problems.push(`the repeated send was not a duplicate: ${again}`);
  }
  const late = await client.signal(runId, SIGNAL.name, { late: true }, { signalId: "approval-2" }).catch((
    e,
  ) => e);
  if ((late as { code?: string }).code !== "RUN_CLOSED") {
    problems.push(`a signal to the done run was not refused`);
  }
  const final = await world.snapshot(runId);
  problems.push(
    ...await judgeSignalCase(c, runId, final, atCrash, { client, llmCalls: calls.get(runId) ?? 0 }),
  );
  const verdict: Verdict = problems.length > 0 ? "failed" : atCrash ? "passed" : "not reached";
  const wait = final.effects.find((e) => e.seq === 0);
  world.note(`--- verdict ${verdict} llm_calls=${calls.get(runId) ?? 0} remote=${wait?.remote ?? "-"}`);
  for (const p of problems) world.note(`    problem: ${p}`);
  return {
    ...c,
    runId,
    verdict,
    llmCalls: calls.get(runId) ?? 0,
    remote: c.seq === 0 ? wait?.remote ?? "-" : final.effects.find((e) => e.seq === c.seq)?.remote ?? "-",
    atCrash: "",
    problems,
    transcript: world.transcript,
  };
}

/** The problems of one finished case (see the module's documentation); none when it passed. */
async function judgeSignalCase(
  c: SignalCase,
  runId: string,
  final: RunSnapshot,
  atCrash: RunSnapshot | undefined,
  seen: { client: Client; llmCalls: number },
): Promise<string[]> {
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  expect(final.run?.status === "done", `run ${runId} is ${final.run?.status}, expected done`);
  expect(
    final.journal.map((j) => `${j.seq}:${j.status}`).join(",") === "0:confirmed,1:confirmed,2:confirmed",
    `the journal is ${final.journal.map((j) => `${j.seq}:${j.status}`).join(",")}`,
  );
  const [wait, server] = [0, 1].map((seq) => final.effects.find((e) => e.seq === seq));
  const fired = atCrash !== undefined;
  const tookInCrash = fired && c.seq === 0 && c.point === "after_call" && c.timing !== "during";
  expect(
    wait?.status === "confirmed" && wait.remote === (tookInCrash ? "already_done" : "created"),
    `the wait's call is ${wait?.status} remote=${wait?.remote}, expected confirmed ${
      tookInCrash ? "already_done" : "created"
    }`,
  );
  const got = wait?.result as { signal_id?: string; payload?: unknown } | undefined;
  expect(
    got?.signal_id === SIGNAL.id && JSON.stringify(got.payload) === JSON.stringify(SIGNAL.payload),
    `the wait's call took ${JSON.stringify(wait?.result)}`,
  );
  const signals = await seen.client.reads.signals(runId);
  expect(
    signals.map((s) => `${s.signalId}>${s.takenBy ?? "-"}`).join(",") ===
      `${SIGNAL.id}>${runId}:0`,
    `the run's signals are ${signals.map((s) => `${s.signalId}>${s.takenBy ?? "-"}`).join(",")}`,
  );
  const key = `${runId}:1`;
  const made = final.created.filter((r) => r.key === key);
  expect(
    made.length === 1 && final.created.length === 1,
    `the cloud holds ${final.created.length} resources`,
  );
  expect(
    server?.status === "confirmed" && JSON.stringify(server.result) === JSON.stringify(made[0]?.id) &&
      JSON.stringify(server.args) === JSON.stringify(SIGNAL.payload),
    `the server's call is ${server?.status} ${JSON.stringify(server?.args)} -> ${
      JSON.stringify(server?.result)
    }`,
  );
  const sends = fired && c.seq === 1 && c.point === "after_call" ? 2 : 1;
  expect(
    final.requestsByKey[key] === sends,
    `the cloud got ${final.requestsByKey[key]} requests, expected ${sends}`,
  );
  const lost = fired && c.point === "after_decide_before_journal" ? 1 : 0;
  const attempts = final.journal.reduce((n, j) => n + j.llm_attempts, 0);
  expect(
    attempts === CLEAN.llmCalls + lost && seen.llmCalls === attempts,
    `the model was asked ${seen.llmCalls} times, the journal counts ${attempts}, expected ${
      CLEAN.llmCalls + lost
    }`,
  );
  for (const before of atCrash ? [...atCrash.journal, ...atCrash.effects] : []) {
    if (before.status !== "confirmed") continue;
    const now = [...final.journal, ...final.effects].find((r) =>
      r.seq === before.seq && ("idempotency_key" in r) === ("idempotency_key" in before)
    );
    expect(
      JSON.stringify(now) === JSON.stringify(before),
      `a row confirmed at the crash changed (seq ${before.seq})`,
    );
  }
  return problems;
}

function describe(exit: SimExit | undefined): string {
  if (exit === undefined) return "never";
  if (exit.kind === "exited") return `exited status=${exit.outcome.status}`;
  if (exit.kind === "killed") return `killed at ${exit.point} seq=${exit.seq}`;
  return `error ${exit.error}`;
}

/** The whole matrix on `db` (a fresh schema of it), each case's row given to `onCase` as it ends. */
export async function runSignalMatrix(
  db: SimDb,
  opts: { onCase?: (r: SignalCaseResult) => void } = {},
): Promise<SignalMatrixResult> {
  await db.freshSchema();
  const cases: SignalCaseResult[] = [];
  for (const c of signalCases()) {
    const result = await runSignalCase(db, c);
    cases.push(result);
    opts.onCase?.(result);
  }
  const count = (v: Verdict) => cases.filter((c) => c.verdict === v).length;
  return {
    cases,
    passed: count("passed"),
    failed: count("failed"),
    notReached: count("not reached"),
    transcript: cases.flatMap((c) => c.transcript).join("\n") + "\n",
  };
}

/** One printed row: the timing, then the crash matrix's row. */
export function formatSignalRow(r: SignalCaseResult): string {
  return `${r.timing.padEnd(7)} ${formatRow(r)}`;
}

/** The summary line. */
export function signalSummaryLine(r: Pick<SignalMatrixResult, "passed" | "failed" | "notReached">): string {
  return `signal-matrix: ${r.passed} passed, ${r.failed} failed, ${r.notReached} not reached`;
}
