/**
 * The worker loop: claim the run, settle what a crash left, then step until
 * the model says done (or `maxSteps` is reached: `guard`). Every write is
 * fenced on the epoch the claim produced; a refused write ends this worker.
 *
 * @module
 */

import { llmCallsOf, type RunDeps, type RunState, telemetryOf, toolCallsOf } from "../run/context.ts";
import type { ProcessDeps } from "../run/deps.ts";
import { valueOf } from "../run/ended.ts";
import { describeError, FencedError, RuntimeError } from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import { ToolCallReservation } from "../agent/budget.ts";
import { settledSteps, stepWidth, toolCallsIn } from "../run/calls.ts";
import { closeRun, familyOf } from "../families/family.ts";
import { loadConversation, type ParkedConversation, resumeConversation } from "../conversations/turns.ts";
import type { ParkedRun } from "../run/parked.ts";
import { keepLease } from "./lease.ts";
import { EffectRows, JournalRows } from "../run/tallied.ts";
import { runStep, stepEnd } from "../step/spine.ts";
import { endTurn, type RunOutcome } from "./outcome.ts";
import { recover } from "../step/recovery.ts";
import { moveAtDecision, refuseMove, versionForClaim } from "./moves.ts";
import type { Fence, JournalRow, RunRow, RunStatus, SideEffectRow } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";
import type { Budget } from "../agent/budget.ts";
import type { ModelParams } from "../model/transcript.ts";

/** A run this worker has just claimed: the row after the claim, and what it looked like before. */
export interface ClaimedRun {
  /** The run as it is after the claim. */
  run: RunRow;
  /** The epoch the claim produced: every write is fenced on it. */
  epoch: number;
  /** Who held it before. */
  previousOwner: string | null;
  /** How old its lease was when it was claimed. */
  leaseAgeMs?: number;
  /**
   * A run this host let go to wait (a conversation for its next message),
   * nobody having claimed it since: its rows as written, instead of a read
   * of its whole history (run/parked.ts).
   */
  parked?: ParkedRun;
  /**
   * The version the run last moved from to this worker's (host/moves.ts):
   * by this claim (`justMoved`), or by an earlier one whose worker may have
   * died before it checked what it could carry, so every claim of a moved
   * run checks again.
   */
  movedFrom?: string;
  /** True when this claim is the one that moved the run. */
  justMoved?: boolean;
  /** The epoch of the claim that moved it: calls sent under an earlier one are `movedFrom`'s. */
  movedEpoch?: number;
  /**
   * The version the run is to move to at its next decision, if any, as this
   * worker last heard (its claim, then each heartbeat): at that decision it
   * lets the run go for a worker of that version.
   */
  moveTo?: () => string | null | undefined;
}

/** The claims in a row that found no progress, as the claim returned them (1 for a healthy claim). */
function stuckClaims(claimed: ClaimedRun): number {
  return claimed.run.stuck_claims ?? 0;
}

/** The run to work on and, should it not exist yet, what to create it with. */
export interface RunRequest {
  /** The run. */
  runId: string;
  /** The text the model is given. */
  goal: string;
  /** The input as given; defaults to `goal`. */
  input?: Json;
  /** Ceilings on its spend, when it is created. */
  budget?: Budget;
  /** Its own model request parameters (over its agent's), when it is created. */
  modelParams?: ModelParams;
}

/**
 * Drives one run to its end (or until this worker loses it), creating it when
 * it does not exist, and claiming it whatever its lease says: whoever starts
 * a worker on a run by hand takes it over, and fencing makes any older worker
 * harmless. Throws with `AGENT_MISMATCH` when the run belongs to another
 * agent, and on an error the loop does not classify (an agent's code threw,
 * the database refused a statement or went away), leaving the run intact for
 * another worker: a {@link WorkerError} once its lease is released, the error
 * itself when the database could not take the release. `deps` are the
 * process's and the agent's side by side (`runDepsFor` in context.ts); the
 * run's lease is kept with the one-run heartbeat (lease.ts).
 */
export async function claimAndDrive(
  deps: RunDeps,
  request: RunRequest | string,
  goal?: string,
): Promise<RunOutcome> {
  const req: RunRequest = typeof request === "string" ? { runId: request, goal: goal ?? "" } : request;
  const { store, clock, log } = deps;
  const runId = req.runId;
  const run = await store.leases.createOrGetRun(
    {
      runId,
      agent: deps.agent,
      goal: req.goal,
      input: req.input,
      budget: req.budget,
      modelParams: req.modelParams,
      conversationIdleMs: deps.conversation?.idleMs,
    },
    clock.now(),
  );
  if (run.agent !== deps.agent) {
    throw new RuntimeError(
      "AGENT_MISMATCH",
      `Run ${runId} belongs to agent ${run.agent}, and this worker hosts ${deps.agent}: start it with that agent's module (--agent)`,
    );
  }
  const ended = await notToDrive(deps, run);
  if (ended) return ended;
  await versionForClaim(deps, run);
  const claim = await store.leases.claimRun(runId, run.epoch, deps.owner, clock.now(), {
    version: deps.version,
    mayMove: deps.mayMove,
  });
  const epoch = claim?.epoch;
  if (claim === undefined || epoch === undefined) {
    telemetryOf(deps).lostClaim(deps.agent);
    log.warn("fenced", { run: runId, reason: "another worker claimed the run first", seen_epoch: run.epoch });
    return { runId, alreadyClosed: false, toolCalls: 0, llmCalls: 0, status: "lost_claim" };
  }
  const stop = new AbortController();
  const claimed: ClaimedRun = {
    run: { ...run, epoch, owner: deps.owner, status: "running", stuck_claims: claim.stuck_claims },
    epoch,
    previousOwner: run.owner,
    leaseAgeMs: run.heartbeat_at ? clock.now().getTime() - new Date(run.heartbeat_at).getTime() : undefined,
    ...(run.agent_version && run.agent_version !== deps.version
      ? { movedFrom: run.agent_version, justMoved: true, movedEpoch: epoch }
      : run.moved_from && run.moved_from !== deps.version
      ? { movedFrom: run.moved_from, movedEpoch: run.moved_epoch ?? epoch }
      : {}),
    moveTo: () => run.move_to === deps.version ? null : run.move_to,
  };
  const heartbeat = keepLease(deps, { runId, epoch }, stop);
  try {
    return await driveRun(deps, claimed, stop);
  } catch (err) {
    if (err instanceof SimulatedKill) throw err;
    // The heartbeat must not renew the lease this release clears.
    heartbeat.stop();
    const lease = await releaseAfterError(deps, { runId, epoch }, err);
    // With the database gone, the lease lapses instead: the run is intact all the same.
    if (lease === "kept") throw err;
    throw new WorkerError(runId, err, lease);
  } finally {
    heartbeat.stop();
  }
}

/**
 * The outcome for a run no worker drives now: closed, blocked, or waiting
 * for a person or for a time not yet come; undefined for a run to claim (a
 * run asleep on its remotes is claimed once its calls are due).
 */
async function notToDrive(deps: RunDeps, run: RunRow): Promise<RunOutcome | undefined> {
  const { store, clock, log } = deps;
  const runId = run.run_id;
  // A run asleep on its remotes is claimed once its calls are due; one waiting for a person is not.
  const asleepUntil = run.status === "waiting" && run.wake_at ? new Date(run.wake_at) : undefined;
  const due = asleepUntil !== undefined && asleepUntil <= clock.now();
  const held = ["done", "failed", "cancelled", "blocked"].includes(run.status) ||
    (run.status === "waiting" && !due);
  if (!held) return undefined;
  const { journal } = await store.reads.loadHistory(runId);
  const llmCalls = journal.reduce((n, j) => n + j.llm_attempts, 0);
  // Tool calls decided, as a worker that drove the run to its end counts them.
  const toolCalls = toolCallsIn(journal);
  log.info(`already-${run.status}`, {
    run: runId,
    tool_calls: toolCalls,
    llm_calls: llmCalls,
    error: run.error ?? undefined,
  });
  return {
    runId,
    alreadyClosed: true,
    status: run.status as Exclude<RunStatus, "pending" | "running">,
    runStatus: run.status,
    toolCalls,
    llmCalls,
    error: run.error ?? undefined,
    output: run.output ?? undefined,
  };
}

/**
 * What became of a run's lease after an error the loop could not classify:
 * `released` (cleared, so the next take retries the run at once), `not-held`
 * (another worker took the run, or it was closed, meanwhile), or `kept` (the
 * database did not take the release either: the lease lapses after `leaseMs`).
 */
export type LeaseAfterError = "released" | "not-held" | "kept";

/**
 * Lets go of a run after an error the loop could not classify (an agent's
 * code threw, the database refused a statement or went away): the run is
 * intact, so its lease is released, fenced on this worker's epoch, with the
 * error kept on the run. A run that keeps failing this way is stopped by the
 * bound on claims without progress, with this error in its message.
 */
export async function releaseAfterError(
  deps: Pick<ProcessDeps, "store" | "clock" | "log">,
  fence: Fence,
  err: unknown,
): Promise<LeaseAfterError> {
  try {
    return await deps.store.writes.releaseRun(fence, describeError(err), deps.clock.now())
      ? "released"
      : "not-held";
  } catch (e) {
    deps.log.warn("release-failed", { run: fence.runId, epoch: fence.epoch, error: describeError(e) });
    return "kept";
  }
}

/**
 * A worker's turn on a run ended with an error the loop could not classify,
 * while the database was there to take the release: the run is intact, and
 * {@link WorkerError.lease} says what became of its lease. The error is the
 * {@link Error.cause}.
 */
export class WorkerError extends RuntimeError {
  /** The run. */
  readonly runId: string;
  /** Released for the next take, or already taken or closed by someone else. */
  readonly lease: Exclude<LeaseAfterError, "kept">;
  /** Wraps what `runId`'s worker threw. */
  constructor(runId: string, cause: unknown, lease: Exclude<LeaseAfterError, "kept">) {
    super(
      "WORKER_ERROR",
      `The worker on run ${runId} stopped at an error the runtime does not classify: ${describeError(cause)}`,
      { cause },
    );
    this.name = "WorkerError";
    this.runId = runId;
    this.lease = lease;
  }
}

/**
 * Drives a run this worker has claimed: reads its history back, settles what
 * a crash left, then steps until done, `guard`, or until `stop` aborts (the
 * lease was refused or lost). Whoever calls it keeps the lease alive.
 */
export function driveRun(
  deps: RunDeps,
  claimed: ClaimedRun,
  stop: AbortController,
): Promise<RunOutcome> {
  return telemetryOf(deps).attempt(traced(deps, claimed), () => driveClaimed(deps, claimed, stop));
}

function traced(deps: RunDeps, claimed: ClaimedRun) {
  return {
    runId: claimed.run.run_id,
    agent: deps.agent,
    epoch: claimed.epoch,
    owner: deps.owner,
    previousOwner: claimed.previousOwner,
    leaseAgeMs: claimed.leaseAgeMs,
  };
}

async function driveClaimed(
  deps: RunDeps,
  claimed: ClaimedRun,
  stop: AbortController,
): Promise<RunOutcome> {
  const { log } = deps;
  const tel = telemetryOf(deps);
  const { run } = claimed;
  const runId = run.run_id;
  logClaimed(deps, claimed);
  if (stuckClaims(claimed) > deps.maxClaimsWithoutProgress) return await stopStuck(deps, claimed);
  const { state, answered, ahead, recovery } = await takeUp(deps, claimed, stop.signal);
  let seq = ahead.seq;
  try {
    // Moved here (by this claim or one before): carried only if this version can carry its decided step.
    const refused = claimed.movedFrom === undefined ? undefined : await refuseMove(deps, state, claimed);
    if (refused) return refused;
    // A parked conversation was let go by its worker after a clean answer: nothing of it is stranded.
    const blocked = answered ? undefined : await tel.recover(recovery, () => recover(deps, state, ahead));
    if (blocked) return await endTurn(deps, state, seq, blocked);
    // Bounded by maxSteps: the guard closes the run. A step's decision is at `seq`; its calls own
    // seqs seq .. seq + n - 1 (calls.ts), and the next decision is at seq + n.
    for (let decisions = ahead.steps;; decisions++) {
      // A refused heartbeat (cancelled, fenced) or a lost lease stops the worker
      // before its next step: it must not even count another model request.
      if (stop.signal.aborted) throw stop.signal.reason;
      const leaving = await moveAtDecision(deps, state, seq, claimed.moveTo);
      if (leaving) return leaving;
      if (decisions >= deps.maxSteps) {
        const error = `guard: the model did not finish within MAX_STEPS=${deps.maxSteps} steps`;
        log.warn("guard", { run: runId, max_steps: deps.maxSteps, llm_calls: llmCallsOf(state) });
        await closeRun(deps, state, { status: "failed", error });
        const llmCalls = llmCallsOf(state);
        return {
          runId,
          status: "failed",
          runStatus: "failed",
          alreadyClosed: false,
          toolCalls: toolCallsOf(state),
          llmCalls,
          error,
        };
      }
      const at = { fence: state.fence, seq };
      const end = valueOf(await tel.step(at, () => runStep(deps, state, at)));
      if (end.kind !== "next") return await endTurn(deps, state, seq, end);
      const decision = state.journal.get(seq)?.decision;
      // A conversation went on with its next message: maxSteps bounds the decisions of each message.
      if (decision && "done" in decision) decisions = -1;
      seq += decision ? stepWidth(decision) : 1;
    }
  } catch (err) {
    if (err instanceof SimulatedKill) throw err;
    const end = stepEnd(err);
    if (end === undefined) throw err;
    return await endTurn(deps, state, seq, end);
  }
}

/**
 * What a worker takes a claimed run up with: its state, from its rows as
 * read at the claim (or kept by this host), and where its replay starts.
 */
async function takeUp(deps: RunDeps, claimed: ClaimedRun, signal: AbortSignal) {
  const runId = claimed.run.run_id;
  // A run at epoch 1 was just claimed for the first time (every claim bumps
  // the epoch, from 0 at creation), and every journal and tool-call row is
  // written under a claimed epoch: it has no history, so it is not read (#11:
  // one statement less for every fresh run; not a fork, which has copies). Any later claim reads it back.
  // A run parked here (let go by this host, nobody took it since) has its rows in memory: a conversation
  // after an answer needs none read, a run let go to wait those of the step it waited at and after.
  const parked = claimed.parked;
  const answered = parked?.conversation !== undefined;
  const { journal, effects } = answered || unread(claimed)
    ? NO_HISTORY
    : parked
    ? await deps.store.reads.historyFrom(runId, parked.seq)
    : await deps.store.reads.loadHistory(runId);
  telemetryOf(deps).lostAttempt(traced(deps, claimed), journal, effects);
  const state = await stateAtClaim(deps, claimed, { journal, effects }, signal);
  // Steps a worker before this one settled (before recovery settles any more) are not replayed one by one.
  const ahead = answered ? { seq: parked!.seq, steps: 0 } : skipSettled(deps, state);
  const stranded = effects.filter((e) => e.status === "intent").length;
  const recovery = { fence: state.fence, rows: journal.length + effects.length, strandedCalls: stranded };
  return { state, answered, ahead, recovery };
}

/**
 * Where a claimed run's replay starts: after the settled steps at its start
 * ({@link settledSteps}, at most `maxSteps`), logged once as
 * `replayed-settled` with how many, instead of a `replayed` line a step. A
 * run parked here walks on from where its last take's walk ended
 * (`settledAhead`), not from seq 0; the stretch is kept for the next take.
 */
function skipSettled(deps: RunDeps, state: RunState): { seq: number; steps: number } {
  const from = state.settledAhead ?? { seq: 0, steps: 0 };
  const more = settledSteps(state, from.seq, deps.maxSteps - from.steps);
  const ahead = { seq: more.seq, steps: from.steps + more.steps };
  state.settledAhead = ahead;
  if (ahead.steps > 0) {
    deps.log.info("replayed-settled", { run: state.fence.runId, steps: ahead.steps, next_seq: ahead.seq });
  }
  return ahead;
}

/** True when the claim need not read the run's rows: its first (but a fork's, which has copies). */
function unread(claimed: ClaimedRun): boolean {
  return claimed.epoch === 1 && !claimed.run.forked_at_seq;
}

/** The `claimed` line: the run, its new epoch, who holds it, who did, the version it moved from. */
function logClaimed(deps: RunDeps, claimed: ClaimedRun): void {
  deps.log.info("claimed", {
    run: claimed.run.run_id,
    epoch: claimed.epoch,
    owner: deps.owner,
    previous_owner: claimed.previousOwner ?? undefined,
    lease_age_ms: claimed.leaseAgeMs,
  });
}

/**
 * The run's state as this worker starts it: its rows as read at the claim
 * (or, for a run parked here, as this host let it go), its ceilings and
 * parameters, and its conversation with the messages sent since.
 */
async function stateAtClaim(
  deps: RunDeps,
  claimed: ClaimedRun,
  history: { journal: readonly JournalRow[]; effects: readonly SideEffectRow[] },
  signal: AbortSignal,
): Promise<RunState> {
  const { run, epoch, parked } = claimed;
  const runId = run.run_id;
  return {
    fence: { runId, epoch },
    goal: run.goal,
    ...rowsAtClaim(parked, history),
    signal,
    budget: run.budget ?? undefined,
    modelParams: run.model_params ?? undefined,
    reservation: new ToolCallReservation(runId),
    family: familyOf(run),
    errorAtClaim: run.error ?? undefined,
    ...(run.labels ? { labels: run.labels } : {}),
    ...(run.dry_run ? { dryRun: { forkedFrom: run.forked_from ?? null } } : {}),
    ...(parked?.transcript ? { transcript: parked.transcript } : {}),
    ...(parked?.settledAhead ? { settledAhead: parked.settledAhead } : {}),
    conversation: parked?.conversation
      ? await resumeConversation(deps, runId, parked as ParkedConversation)
      : await loadConversation(deps, run, epoch === 1 && !run.forked_at_seq),
  };
}

/**
 * The rows a worker starts a run with: those read at the claim, or a parked
 * run's with those read again at the claim laid over them. A parked run's
 * rows are handed on, not copied (#39: a copy a message cost more the longer
 * the conversation): the host that parked them forgot them when it took the
 * run again.
 */
function rowsAtClaim(
  parked: ParkedRun | undefined,
  history: { journal: readonly JournalRow[]; effects: readonly SideEffectRow[] },
): { journal: JournalRows; effects: EffectRows } {
  if (!parked) return { journal: JournalRows.of(history.journal), effects: EffectRows.of(history.effects) };
  const journal = parked.journal instanceof JournalRows
    ? parked.journal
    : JournalRows.of(parked.journal.values());
  const effects = parked.effects instanceof EffectRows
    ? parked.effects
    : EffectRows.of(parked.effects.values());
  for (const row of history.journal) journal.set(row.seq, row);
  for (const row of history.effects) effects.set(row.seq, row);
  return { journal, effects };
}

/**
 * A run its workers keep dying on (or being stopped on) before they get
 * anywhere: a poison run. Closed as failed, with the reason, instead of
 * restarted forever.
 */
async function stopStuck(deps: RunDeps, claimed: ClaimedRun): Promise<RunOutcome> {
  const { log } = deps;
  const { run, epoch } = claimed;
  const runId = run.run_id;
  const limit = deps.maxClaimsWithoutProgress;
  // The error its last worker let it go with (releaseAfterError), when one did: the real cause.
  const last = run.error ? ` The last of them stopped at: ${run.error}.` : "";
  const error = `stuck: ${stuckClaims(claimed) - 1} workers in a row took this run and made no progress ` +
    `(no decision or tool call settled); the limit is ${limit}.${last} See the log of its last workers, ` +
    `then 'deno task reopen ${runId}' to try again`;
  try {
    await closeRun(deps, { fence: { runId, epoch }, family: familyOf(run) }, { status: "failed", error });
  } catch (e) {
    if (e instanceof FencedError) {
      log.warn("fenced", { run: runId, epoch, reason: e.message });
      return { runId, status: "fenced", alreadyClosed: false, toolCalls: 0, llmCalls: 0, error: e.message };
    }
    throw e;
  }
  log.error("stuck", { run: runId, claims: stuckClaims(claimed), limit });
  return {
    runId,
    status: "failed",
    runStatus: "failed",
    alreadyClosed: false,
    toolCalls: 0,
    llmCalls: 0,
    error,
  };
}

const NO_HISTORY: { journal: readonly JournalRow[]; effects: readonly SideEffectRow[] } = Object.freeze({
  journal: Object.freeze([]),
  effects: Object.freeze([]),
});
