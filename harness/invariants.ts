/**
 * The checks every proof shares: invariant 5 of DESIGN.md ("a finished run
 * looks as if one worker ran it alone") and the table of what each crash
 * point must leave behind and what the restart must do. Each check returns
 * the problems it found, one sentence each; an empty list is a pass. They
 * read only {@link RunSnapshot}s, so the in-process and the real-process
 * matrix assert exactly the same things.
 *
 * @module
 */

import { callsOf, stepWidth } from "../runtime/run/calls.ts";
import { idempotencyKey } from "../runtime/run/context.ts";
import type { CrashPoint } from "../runtime/base/crashpoints.ts";
import type { RunSnapshot } from "./sim.ts";

/** What a clean run (no crash) of the demo costs, measured, never assumed. */
export interface Baseline {
  /** Model requests of a clean run (the sum of its `llm_attempts`). */
  llmCalls: number;
  /** Journal rows of a clean run: its tool steps plus the done-step. */
  steps: number;
}

/** Reads the baseline off a clean run's final snapshot. */
export function baselineOf(clean: RunSnapshot): Baseline {
  return { llmCalls: sumAttempts(clean), steps: clean.journal.length };
}

/** The sum of the journal's `llm_attempts`: model requests the run paid for, by its own records. */
export function sumAttempts(s: RunSnapshot): number {
  return s.journal.reduce((n, j) => n + j.llm_attempts, 0);
}

// Rows compared as stored; Dates and jsonb normalise the same way on both drivers.
const canon = (row: unknown): string => JSON.stringify(row);

/**
 * Invariant 5 on a finished run: it is `done`; journal `seq` runs 0..n-1 with
 * no gap or duplicate, all confirmed, the last one `done`; every tool step has
 * exactly one confirmed row under `<run_id>:<seq>` matching its decision;
 * exactly one remote resource per key and none under any other key; every
 * row confirmed in an earlier snapshot is still there, unchanged; model calls
 * equal the clean run's plus `lostAnswers`; and the journal's `llm_attempts`
 * agree with the mock model's counter.
 */
export function checkInvariants(
  final: RunSnapshot,
  opts: { runId: string; baseline: Baseline; lostAnswers: number; earlier?: RunSnapshot[] },
): string[] {
  const { runId, baseline } = opts;
  const problems = checkShape(final, { runId, steps: baseline.steps, earlier: opts.earlier });
  const attempts = sumAttempts(final);
  const expected = baseline.llmCalls + opts.lostAnswers;
  if (attempts !== expected) {
    problems.push(
      `the journal counts ${attempts} model calls, expected ${expected} (clean ${baseline.llmCalls} + lost ${opts.lostAnswers})`,
    );
  }
  if (final.modelCalls !== attempts) {
    problems.push(`the mock model counted ${final.modelCalls} calls, the journal's llm_attempts ${attempts}`);
  }
  return problems;
}

/**
 * Invariant 5 without the model spend: the run is `done`, with `steps`
 * journal rows whose `seq` runs 0..n-1, all confirmed, the last the
 * done-step (and, given `tools`, the same tools in the same order as a clean
 * run); one confirmed tool call per tool step under `<run_id>:<seq>`, matching
 * its decision; one remote effect per key and none under a key no row owns
 * (and, when `resultIsId`, each stored result is the id the remote gave);
 * every row confirmed in an `earlier` snapshot unchanged. With `budgetStop`, a
 * run its budget stopped (`failed` with `BUDGET_EXCEEDED`) passes as a clean
 * run's beginning: fewer steps, the last maybe still at intent, no done-step.
 * A call whose key is in `denied` (a person said no) must instead be `failed`,
 * never sent, with no effect at the remote. A call of a tool in `local` acts
 * on no remote (it waits for a signal or a time): it must be confirmed, and
 * no remote effect is looked for under its key.
 */
export function checkShape(
  final: RunSnapshot,
  opts: {
    runId: string;
    steps: number;
    earlier?: RunSnapshot[];
    resultIsId?: boolean;
    tools?: string[];
    /** Tools of a later version by the name they replace (`versions.ts`): their calls read under it. */
    renamed?: ReadonlyMap<string, string>;
    budgetStop?: boolean;
    denied?: ReadonlySet<string>;
    local?: ReadonlySet<string>;
  },
): string[] {
  const problems: string[] = [];
  const { runId } = opts;
  const baseline = { steps: opts.steps };
  const resultIsId = opts.resultIsId ?? true;
  const stopped = opts.budgetStop === true && final.run?.status === "failed" &&
    /^BUDGET_EXCEEDED: /.test(final.run.error ?? "");
  if (final.run?.status !== "done" && !stopped) {
    problems.push(`run ${runId} is ${final.run?.status ?? "missing"}, expected done`);
  }
  // Each decision is at the seq after the last one's calls (calls.ts): 0, then 0 + its width, ...
  let expectedSeq = 0;
  const seqs = final.journal.map((j) => j.seq);
  for (const j of final.journal) {
    if (j.seq !== expectedSeq) {
      problems.push(`journal seq is ${seqs.join(",")}: a gap or duplicate`);
      break;
    }
    expectedSeq += j.decision ? stepWidth(j.decision) : 1;
  }
  if (stopped ? final.journal.length > baseline.steps : final.journal.length !== baseline.steps) {
    problems.push(`journal has ${final.journal.length} steps, a clean run has ${baseline.steps}`);
  }
  for (const j of final.journal) {
    if (j.status === "confirmed" || (stopped && j === final.journal.at(-1))) continue;
    problems.push(`journal seq=${j.seq} is ${j.status}, expected confirmed`);
  }
  const last = final.journal.at(-1);
  if (!stopped && (!last?.decision || !("done" in last.decision))) {
    problems.push(`the last journal row is not the done-step`);
  }

  const calls = final.journal.flatMap((j) => j.decision ? callsOf(j.decision, j.seq) : []);
  const callAt = new Map(calls.map((c) => [c.seq, c]));
  if (opts.tools) {
    const called = calls.map((c) => opts.renamed?.get(c.tool) ?? c.tool);
    const expected = stopped ? opts.tools.slice(0, called.length) : opts.tools;
    if (called.join(",") !== expected.join(",")) {
      problems.push(`the run called ${called.join(",")}, a clean run calls ${opts.tools.join(",")}`);
    }
  }
  const effectSeqs = final.effects.map((e) => e.seq);
  const callSeqs = calls.map((c) => c.seq);
  // A run stopped by its budget may have left calls of its last step unsent; every row is a decided call all the same.
  const exact = effectSeqs.length === callSeqs.length && effectSeqs.every((s, i) => s === callSeqs[i]);
  const within = effectSeqs.every((s, i) => callAt.has(s) && (i === 0 || s > effectSeqs[i - 1]));
  if (stopped ? !within : !exact) {
    problems.push(
      `tool calls have seq ${effectSeqs.join(",")} for the decided calls at ${
        callSeqs.join(",")
      }: a gap or duplicate`,
    );
  }
  const byKey = new Map<string, number>();
  for (const r of final.created) byKey.set(r.key, (byKey.get(r.key) ?? 0) + 1);
  for (const [key, n] of byKey) if (n !== 1) problems.push(`the cloud holds ${n} resources under ${key}`);
  for (const e of final.effects) {
    const key = idempotencyKey(runId, e.seq);
    if (e.idempotency_key !== key) {
      problems.push(`seq=${e.seq} has key ${e.idempotency_key}, expected ${key}`);
    }
    const decided = callAt.get(e.seq);
    if (!decided || decided.tool !== e.tool || canon(decided.args) !== canon(e.args)) {
      problems.push(`tool call ${key} (${e.tool} ${canon(e.args)}) is not what step ${e.seq} decided`);
    }
    if (opts.denied?.has(key)) {
      if (e.status !== "failed" || e.attempts !== 0) {
        problems.push(`tool call ${key} was denied, yet is ${e.status} after ${e.attempts} request(s)`);
      }
      if (final.created.some((r) => r.key === key) || (final.requestsByKey[key] ?? 0) > 0) {
        problems.push(`tool call ${key} was denied, yet the remote got it`);
      }
      continue;
    }
    if (e.status !== "confirmed") problems.push(`tool call ${key} is ${e.status}, expected confirmed`);
    if (opts.local?.has(e.tool)) continue;
    const resource = final.created.find((r) => r.key === key);
    if (!resource) problems.push(`the cloud holds no resource under ${key}`);
    else if (resource.kind === "job") {
      // A job's call stores the remote's final answer: done, for the job started under its key.
      const answer = e.result as { job_id?: unknown; status?: unknown } | null;
      if (answer?.job_id !== resource.id || answer?.status !== "done") {
        problems.push(`tool call ${key} stored ${canon(e.result)}, expected job ${resource.id} done`);
      }
    } else if (resultIsId && canon(e.result) !== canon(resource.id)) {
      problems.push(`tool call ${key} stored ${canon(e.result)}, the cloud created ${resource.id}`);
    }
  }
  const keys = new Set(final.effects.map((e) => e.idempotency_key));
  for (const r of final.created) {
    if (!keys.has(r.key)) problems.push(`the cloud holds ${r.id} under ${r.key}, which no tool call owns`);
  }
  for (const before of opts.earlier ?? []) {
    for (const j of before.journal.filter((j) => j.status === "confirmed")) {
      const now = final.journal.find((x) => x.seq === j.seq);
      if (!now) problems.push(`confirmed journal row seq=${j.seq} is missing`);
      else if (canon(now) !== canon(j)) problems.push(`confirmed journal row seq=${j.seq} was overwritten`);
    }
    for (const e of before.effects.filter((e) => e.status === "confirmed")) {
      const now = final.effects.find((x) => x.seq === e.seq);
      if (!now) problems.push(`confirmed tool call ${e.idempotency_key} is missing`);
      else if (canon(now) !== canon(e)) {
        problems.push(`confirmed tool call ${e.idempotency_key} was overwritten`);
      }
    }
  }
  return problems;
}

/** One claim a worker logged (`claimed`): the run and the epoch it took. */
export interface LoggedClaim {
  run: string;
  epoch: number;
}

/**
 * The runs claimed twice at one epoch, as `run@epoch`: two claims that each
 * believed they held the same fence. A claim's epoch bump lost (a failover
 * that dropped its commit) and made again gives exactly this.
 */
export function claimedTwice(claims: readonly LoggedClaim[]): string[] {
  const byEpoch = new Map<string, number>();
  for (const c of claims) {
    const at = `${c.run}@${c.epoch}`;
    byEpoch.set(at, (byEpoch.get(at) ?? 0) + 1);
  }
  return [...byEpoch].filter(([, n]) => n > 1).map(([at]) => at);
}

/**
 * What the fuzzer saw of a schedule's model spend at the processes'
 * boundaries. An attempt is a journal intent (`llm_attempts + 1`); it ends
 * in a decision, a rejection, a retry inside the same process (`retried`), or
 * with the process (`lost`: the answer, or the request itself when `unsent`).
 */
export interface ModelSpend {
  /** Attempts followed by another attempt of the same process (a transient model fault). */
  retried: number;
  /** Attempts still open when their process died or was fenced. */
  lost: number;
  /** Of `lost`, those whose request never went out. */
  unsent: number;
  /** Model requests a process sent with no open journal intent to count them. */
  uncounted: number;
  /** Of the attempts, those an outage refused: counted by the journal, never reaching the model. */
  refused?: number;
  /** Injected faults that can cost a retry (5xx, timeouts) and fired. */
  transientFaults: number;
  /** Injected faults that can cost a rejection (malformed answers) and fired. */
  badAnswerFaults: number;
  /** Injected kills and stalls that fired: each may lose one answer. */
  interruptions: number;
}

/**
 * The model paid at most once per decided step plus one per lost answer (and
 * one per injected model fault): every request counted by a journal intent
 * before it went out, and every attempt beyond one per step explained.
 */
export function checkModelSpend(final: RunSnapshot, spend: ModelSpend): string[] {
  const problems: string[] = [];
  const attempts = sumAttempts(final);
  const decided = final.journal.filter((j) => j.status === "confirmed").length;
  const rejected = final.journal.reduce((n, j) => n + j.rejections.length, 0);
  if (spend.uncounted > 0) {
    problems.push(`${spend.uncounted} model requests went out with no journal intent counting them`);
  }
  const refused = spend.refused ?? 0;
  if (final.modelCalls !== attempts - spend.unsent - refused) {
    problems.push(
      `the model was paid ${final.modelCalls} times, the journal counts ${attempts} attempts of which ${spend.unsent} ` +
        `were never sent and ${refused} were refused by an outage`,
    );
  }
  if (attempts !== decided + rejected + spend.retried + spend.lost) {
    problems.push(
      `the journal counts ${attempts} model attempts for ${decided} decisions, ${rejected} rejections, ` +
        `${spend.retried} retries and ${spend.lost} lost answers`,
    );
  }
  if (rejected > spend.badAnswerFaults) {
    problems.push(
      `${rejected} answers were rejected, but only ${spend.badAnswerFaults} bad answers were injected`,
    );
  }
  if (spend.retried > spend.transientFaults) {
    problems.push(
      `${spend.retried} model requests were retried, only ${spend.transientFaults} model faults fired`,
    );
  }
  if (spend.lost > spend.interruptions) {
    problems.push(`${spend.lost} answers were lost, only ${spend.interruptions} kills and stalls fired`);
  }
  return problems;
}

/** The crash points that fire at a tool call, with the call's seq (the rest fire at a decision's). */
export const TOOL_POINTS: readonly CrashPoint[] = [
  "before_intent",
  "after_intent",
  "after_call",
  "after_confirm",
];

/**
 * The seq of the decision that owns `seq` in `journal`: the row with the
 * largest seq at or before it (the calls of the decision at s own s, s+1, ...;
 * calls.ts). `seq` itself when no row is at or before it.
 */
export function ownerSeq(journal: readonly { seq: number }[], seq: number): number {
  const owner = journal.reduce((best, j) => (j.seq <= seq && j.seq > best ? j.seq : best), -1);
  return owner < 0 ? seq : owner;
}

/**
 * Model calls a restart must make after a crash at `point` of the step that
 * is the run's `step`-th decision (from 0; the decision's seq on a run of
 * one-call steps).
 */
export function callsAfterRestart(point: CrashPoint, step: number, baseline: Baseline): number {
  // before_decide and a lost answer decide the step (again); every later point replays it.
  return point === "before_decide" || point === "after_decide_before_journal"
    ? baseline.llmCalls - step
    : baseline.llmCalls - step - 1;
}

/**
 * The row of DESIGN.md's crash-point table for `point` at `seq`: what the
 * crash left behind (`atCrash`) and what the restart did (`final`). A model
 * point's `seq` is its decision's; a tool point's is its call's, which may be
 * any call of a step with several (its `CRASH_SEQ`): the call's own row and
 * key are checked, and its step is the decision that owns the seq. Whatever
 * the other calls of the step were doing when the process died, each must end
 * confirmed with one effect (invariant 5, {@link checkShape}); here the next
 * decision must have been asked exactly once.
 */
export function checkPointOutcome(
  point: CrashPoint,
  seq: number,
  atCrash: RunSnapshot,
  final: RunSnapshot,
  opts: { runId: string; baseline: Baseline },
): string[] {
  const problems: string[] = [];
  const key = idempotencyKey(opts.runId, seq);
  const toolPoint = TOOL_POINTS.includes(point);
  // A tool point names a call: its decision is the one owning the seq (the final journal is whole).
  const stepSeq = toolPoint ? ownerSeq(final.journal, seq) : seq;
  const jMid = atCrash.journal.find((j) => j.seq === stepSeq);
  const jEnd = final.journal.find((j) => j.seq === stepSeq);
  const eMid = atCrash.effects.find((e) => e.seq === seq);
  const eEnd = final.effects.find((e) => e.seq === seq);
  const calls = jEnd?.decision ? callsOf(jEnd.decision, stepSeq) : [];
  const isToolStep = calls.some((c) => c.seq === seq);
  const sends = final.requestsByKey[key] ?? 0;
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };

  const step = final.journal.filter((j) => j.seq < stepSeq).length;
  const after = final.modelCalls - atCrash.modelCalls;
  const afterExpected = callsAfterRestart(point, step, opts.baseline);
  expect(after === afterExpected, `the restart made ${after} model calls, expected ${afterExpected}`);
  const lost = point === "after_decide_before_journal" ? 1 : 0;
  expect(
    jEnd?.llm_attempts === 1 + lost,
    `step ${stepSeq} cost ${jEnd?.llm_attempts} model calls, expected ${1 + lost}`,
  );
  // The next decision is asked once: only when every call of this step has settled, and never twice.
  const next = final.journal.find((j) => j.seq > stepSeq);
  if (next) {
    expect(
      next.llm_attempts === 1,
      `the decision after step ${stepSeq} (seq=${next.seq}) cost ${next.llm_attempts} model calls, expected 1`,
    );
  }

  switch (point) {
    case "before_decide":
      expect(!jMid, `the crash left a journal row at seq=${seq}`);
      break;
    case "after_decide_before_journal":
      expect(
        jMid?.status === "intent" && jMid.llm_attempts === 1,
        `the crash left journal seq=${seq} ${jMid?.status}, expected intent with one attempt`,
      );
      expect(
        !atCrash.effects.some((e) => calls.some((c) => c.seq === e.seq)),
        `the lost answer was acted on: a tool call exists at seq=${seq}`,
      );
      break;
    case "after_decide":
    case "before_intent":
      expect(
        jMid?.status === "confirmed",
        `the decision of seq=${stepSeq} was not confirmed before the crash`,
      );
      expect(
        point === "before_intent" ? !eMid : !atCrash.effects.some((e) => calls.some((c) => c.seq === e.seq)),
        `the crash left a tool call at seq=${seq}`,
      );
      expect(
        canon(jMid?.decision) === canon(jEnd?.decision),
        `the restart did not replay the decision of seq=${stepSeq}`,
      );
      break;
    case "after_intent":
      expect(eMid?.status === "intent", `the crash left tool call ${key} ${eMid?.status}, expected intent`);
      expect(!atCrash.requestsByKey[key], `the request under ${key} went out before the crash`);
      break;
    case "after_call":
      expect(eMid?.status === "intent", `the crash left tool call ${key} ${eMid?.status}, expected intent`);
      expect(atCrash.created.some((r) => r.key === key), `the remote had not acted under ${key}`);
      expect(
        canon(eEnd?.result) === canon(atCrash.created.find((r) => r.key === key)?.id),
        `the stored result of ${key} is not the resource the first request created`,
      );
      break;
    case "after_confirm":
      expect(eMid?.status === "confirmed", `the crash left tool call ${key} ${eMid?.status}`);
      expect(canon(eMid) === canon(eEnd), `the restart changed the confirmed tool call ${key}`);
      break;
  }
  if (isToolStep) {
    const remote = point === "after_call" ? "already_done" : "created";
    expect(eEnd?.remote === remote, `tool call ${key} ended remote=${eEnd?.remote}, expected ${remote}`);
    const sendsExpected = point === "after_call" ? 2 : 1;
    expect(
      sends === sendsExpected,
      `the cloud got ${sends} requests under ${key}, expected ${sendsExpected}`,
    );
    const attempts = point === "after_intent" || point === "after_call" ? 2 : 1;
    expect(
      eEnd?.attempts === attempts,
      `tool call ${key} counted ${eEnd?.attempts} attempts, expected ${attempts}`,
    );
  } else {
    expect(!eEnd, `the done-step has a tool call`);
  }
  // A model point stops the process before any call of its step is sent: the restart sends each once.
  for (const c of toolPoint ? [] : calls.filter((c) => c.seq !== seq)) {
    const k = idempotencyKey(opts.runId, c.seq);
    const e = final.effects.find((e) => e.seq === c.seq);
    expect(
      e?.remote === "created" && e.attempts === 1 && final.requestsByKey[k] === 1,
      `tool call ${k} ended remote=${e?.remote} after ${e?.attempts} attempt(s) and ${
        final.requestsByKey[k] ?? 0
      } request(s), expected created after one`,
    );
  }
  return problems;
}
