/**
 * Acting on a decision: its calls (one, or several: the calls of a decision
 * at seq s own seqs s, s+1, ...; see calls.ts), each unless it already
 * happened. Every call is checked, and the step's tool-call budget reserved,
 * before any is sent; then the calls are sent concurrently, at most
 * `toolConcurrency` at once, each through the one path a call takes
 * (`send.ts`). Calls that need a person's yes are asked about together
 * (`approvals.ts`) once every other call of the step has settled. However it
 * goes, the step's calls end in one {@link ActEnd}: a value, never an
 * exception, save for what fails the run.
 *
 * @module
 */

import { BudgetError, NO_FAMILY } from "../agent/budget.ts";
import { familyCeilings, ParentClosedError } from "../families/family.ts";
import { callsOf, type StepCall } from "../run/calls.ts";
import { idempotencyKey, type RunDeps, type RunState } from "../run/context.ts";
import { type Ended, failed, finished, type StepRows } from "../run/ended.ts";
import { AbortedError, FencedError, hasCode, RuntimeError, ToolError } from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import type { Decided } from "./decide.ts";
import type { ApprovalRow, SideEffectRow } from "../store/store.ts";
import type { Tool } from "../agent/tools.ts";
import { type CallEnd, send } from "./send.ts";
import type { Limited } from "./limited.ts";
import { type PreparedCall, toolPolicy } from "./settle.ts";
import { staysDry } from "./dry_run.ts";
import { type Answered, argsHash, askApprovals, denied, logApproved, pendingReason } from "./approvals.ts";

/** How the calls of a step ended for this worker's turn, when nothing failed the run. */
export type ActEnd =
  /** Every call is settled: the step is done. */
  | { kind: "settled" }
  /** A call is flagged (`key`): its outcome is unknown and not safely knowable, and a person must look. */
  | { kind: "blocked"; key: string; reason: string }
  /**
   * Calls wait for a person's yes; the approval statement set the run to waiting. `wakeAt`: other calls
   * of the step wait on their remotes, and the run is taken again then too.
   */
  | { kind: "approval"; keys: readonly string[]; reason: string; wakeAt?: Date }
  /** Calls wait on their remotes, or to be sent again after an outage: the run sleeps until `wakeAt`. */
  | { kind: "asleep"; keys: readonly string[]; wakeAt: Date; reason: string }
  /**
   * A limit shared by the fleet refused a call's request: the run waits for it until `wakeAt` (the
   * earliest of the refusals' and of the step's calls asleep on their remotes), or until woken sooner.
   */
  | Limited;

/** Where one call of a step stands before anything of the step is sent. */
type Gate =
  | { kind: "settled"; row: SideEffectRow }
  | { kind: "asleep"; row: SideEffectRow }
  | { kind: "ask"; call: PreparedCall; hash: string; before?: ApprovalRow }
  | Answered;

/**
 * Carries out the calls of the decided step at `seq`: each gated (checked,
 * skipped when settled), the unsent counted against the tool-call ceiling,
 * sent, then those waiting for a person asked about together. A call that
 * needs a person's yes is asked about once every other call has settled; a
 * flagged call blocks the run, and a failure fails it, once the others have
 * settled. Ends with the step's rows as its last writes left them.
 */
export async function act(
  deps: RunDeps,
  state: RunState,
  seq: number,
  decided: Decided,
): Promise<Ended<ActEnd>> {
  const calls = callsOf(decided.decision, seq);
  const errors: unknown[] = [];
  let gates: Gate[];
  try {
    gates = await gatesOf(deps, state, calls, decided);
    // Every call of the step not yet sent is counted against the tool-call ceiling before any goes out.
    const unsent = gates.filter((g) => "call" in g && !state.effects.has(g.call.seq)).length;
    state.reservation.reserve(state, unsent, unsent > 0 ? await familyCeilings(deps, state) : NO_FAMILY);
  } catch (error) {
    return failed(error, stepRows(state, calls));
  }
  const limited: Limited[] = [];
  const round = async (todo: readonly Gate[]) => {
    const ends = await inPool(todo, deps.toolConcurrency, (gate) => carry(deps, state, gate));
    for (const end of ends) {
      if (!end.ok) errors.push(end.error);
      else if ("kind" in end.value) limited.push(end.value);
    }
  };
  let pending: readonly { key: string; tool: string }[] | undefined;
  try {
    await round(gates.filter((g) => g.kind !== "ask"));
    const asks = gates.flatMap((g) => g.kind === "ask" ? [g] : []);
    if (errors.length === 0 && !flaggedOf(state, calls) && limited.length === 0 && asks.length > 0) {
      const asked = await askApprovals(deps, state, asks);
      if ("pending" in asked) pending = asked.pending;
      else await round(asked);
    }
  } catch (error) {
    errors.push(error);
  }
  state.reservation.release();
  return endOf(deps, state, calls, { errors, pending, limited });
}

/** Every call's gate, in seq order: the calls a decision this worker just made were checked by decide(). */
async function gatesOf(
  deps: RunDeps,
  state: RunState,
  calls: readonly StepCall[],
  decided: Decided,
): Promise<Gate[]> {
  // Calls that failed as in an outage are sent again together once the first of them is due: a remote
  // back for one is likely back for the others, and the run wakes once for them, not once for each.
  const now = deps.clock.now();
  const retryDue = calls.some((c) => {
    const row = state.effects.get(c.seq);
    return row?.status === "intent" && row.check_at !== null && new Date(row.check_at) <= now;
  });
  const gates: Gate[] = [];
  for (const c of calls) gates.push(await gateOf(deps, state, c, decided.checked?.[c.index], retryDue));
  return gates;
}

/** What a gate comes to: a settled or sleeping call as it is, a denial recorded, or the call sent. */
function carry(deps: RunDeps, state: RunState, gate: Gate): Promise<Ended<CallEnd>> {
  if (gate.kind === "settled" || gate.kind === "asleep") {
    return Promise.resolve(finished(gate.row, { effect: gate.row }));
  }
  if (gate.kind === "denied") return denied(deps, state, gate.call, gate.approval);
  return intendAndSend(deps, state, gate.call);
}

/**
 * The step's end once its calls have gone as far as they go this turn: the
 * worst error, if any (what fails or loses the run); else a flagged call
 * blocks it; else calls wait for a person (and maybe on their remotes); else
 * calls that wait on their remotes, or to be sent again after an outage, let
 * the run sleep until the first is due, or calls a limit refused let it wait
 * for the limit (or the first due, if sooner); else the step is settled.
 */
function endOf(
  deps: RunDeps,
  state: RunState,
  calls: readonly StepCall[],
  ended: {
    errors: readonly unknown[];
    pending: readonly { key: string; tool: string }[] | undefined;
    limited: readonly Limited[];
  },
): Ended<ActEnd> {
  const { errors, pending, limited } = ended;
  const rows = stepRows(state, calls);
  if (errors.length > 0) return failed(worstOf(errors), rows);
  const flagged = flaggedOf(state, calls);
  if (flagged) return finished(blockedBy(flagged), rows);
  const asleep = calls.flatMap((c) => {
    const row = state.effects.get(c.seq);
    return isAsleep(row) ? [row] : [];
  });
  const wakeAt = asleep.length === 0
    ? undefined
    : new Date(Math.min(...asleep.map((r) => new Date(r.check_at).getTime())));
  if (pending) {
    const keys = pending.map((c) => c.key);
    return finished(
      { kind: "approval", keys, reason: pendingReason(pending), ...(wakeAt ? { wakeAt } : {}) },
      rows,
    );
  }
  if (limited.length > 0) {
    const first = limited.reduce((a, b) => a.wakeAt <= b.wakeAt ? a : b);
    return finished(wakeAt && wakeAt < first.wakeAt ? { ...first, wakeAt } : first, rows);
  }
  if (wakeAt) {
    const reason = `Waiting until ${wakeAt.toISOString()}: ${
      asleep.map((r) => whyAsleep(deps, r)).join("; ")
    }`;
    return finished({ kind: "asleep", keys: asleep.map((r) => r.idempotency_key), wakeAt, reason }, rows);
  }
  return finished({ kind: "settled" }, rows);
}

/** The first flagged call of the step, if any. */
function flaggedOf(state: RunState, calls: readonly StepCall[]): SideEffectRow | undefined {
  return calls.map((c) => state.effects.get(c.seq)).find((row) => row?.status === "flagged");
}

/** The run blocked by the flagged call `row`, with what a person does about it. */
export function blockedBy(row: SideEffectRow): { kind: "blocked"; key: string; reason: string } {
  const key = row.idempotency_key;
  return {
    kind: "blocked",
    key,
    reason:
      `Tool call ${key} needs a human: ${
        row.error ?? "its outcome is unknown"
      }. Check the remote, then run ` +
      `'deno task resolve ${key} --result <json>' if it happened, '--retry' to send it again, or '--fail'`,
  };
}

/**
 * True for a call that is not settled and will be sent again at its
 * `check_at`: one its remote accepted (`waiting`), or one at `intent` whose
 * last request failed as in an outage and was recorded.
 */
export function isAsleep(row: SideEffectRow | undefined): row is SideEffectRow & { check_at: Date } {
  return (row?.status === "waiting" || row?.status === "intent") && row.check_at !== null;
}

/** What a call asleep until its `check_at` waits for, in words for people (the runs list shows it). */
function whyAsleep(deps: RunDeps, row: SideEffectRow): string {
  const at = new Date(row.check_at!).toISOString();
  if (row.status === "waiting" && row.wait_signal) {
    return `${row.idempotency_key} (${row.tool}) waits for signal ${row.wait_signal} (a send wakes it), ` +
      `looked at again at ${at}`;
  }
  if (row.status === "waiting") {
    return `${row.idempotency_key} (${row.tool}) waits on its remote, asked again at ${at}`;
  }
  const tool = deps.tools.carrier(row.tool);
  const since = row.failing_since ? new Date(row.failing_since) : undefined;
  const givesUp = tool && since
    ? `; given up at ${new Date(since.getTime() + toolPolicy(deps, tool).horizonMs).toISOString()}`
    : "";
  return `${row.idempotency_key} (${row.tool}) failed ${row.failures} time${row.failures === 1 ? "" : "s"}${
    since ? ` since ${since.toISOString()}` : ""
  } (last: ${row.error ?? "unknown"}), sent again under its key at ${at}${givesUp}`;
}

/** The rows of a step's calls as this worker knows them: `effect` for a one-call step, `effects` for any. */
function stepRows(state: RunState, calls: readonly StepCall[]): StepRows {
  const effects = calls.flatMap((c) => state.effects.get(c.seq) ?? []);
  return calls.length === 1 ? { effect: effects[0], effects } : { effects };
}

/**
 * Of the errors a step's calls ended with, the one that decides the run: a
 * kill first (the process is gone), then a lost run (fenced, stopping), then
 * an error the driver does not classify, then what fails the run.
 */
function worstOf(errors: readonly unknown[]): unknown {
  const rank = (e: unknown): number =>
    e instanceof SimulatedKill
      ? 0
      : e instanceof FencedError || e instanceof AbortedError
      ? 1
      : e instanceof ToolError || e instanceof BudgetError || e instanceof ParentClosedError ||
          hasCode(e, "DECISION_INVALID")
      ? 3
      : 2;
  return [...errors].sort((a, b) => rank(a) - rank(b))[0];
}

/**
 * Runs `fn` over `items`, at most `limit` at once, and returns what each
 * ended with, in the items' order. `fn` ends with an {@link Ended} and never
 * throws (one that does is ended as failed).
 */
async function inPool<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<Ended<R>>,
): Promise<Ended<R>[]> {
  const out: Ended<R>[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      try {
        out[i] = await fn(items[i]);
      } catch (error) {
        out[i] = failed(error, {});
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

/**
 * Where one call of a step stands before anything is sent: already settled
 * (skipped, flagged included), ready to send, waiting on a person's answer,
 * or denied. Checks its arguments first: bad arguments never reach a remote.
 */
async function gateOf(
  deps: RunDeps,
  state: RunState,
  c: StepCall,
  checkedNow: { tool: Tool; args: unknown } | undefined,
  retryDue: boolean,
): Promise<Gate> {
  const runId = state.fence.runId;
  const key = idempotencyKey(runId, c.seq);
  const existing = state.effects.get(c.seq);
  if (existing?.status === "confirmed" || existing?.status === "failed" || existing?.status === "flagged") {
    deps.log.info("skipped", {
      run: runId,
      seq: c.seq,
      key,
      status: existing.status,
      remote: existing.remote ?? undefined,
    });
    return { kind: "settled", row: existing };
  }
  // A call its remote accepted, or one that failed as in an outage, is sent again once its time has come,
  // and left asleep until then; the step's failed calls go again together once one of them is due.
  const retrying = existing?.status === "intent" && retryDue;
  if (isAsleep(existing) && !retrying && new Date(existing.check_at) > deps.clock.now()) {
    return { kind: "asleep", row: existing };
  }
  // A decision this worker has just made was checked by decide() (#11: not parsed twice).
  // A replayed decision's call is carried by this version's tool of its name, or by the one that replaces it
  // (a run moved to this version), its arguments checked against that tool's schema before any intent row.
  const checked = checkedNow
    ? { ok: true as const, ...checkedNow }
    : deps.tools.check(c.tool, c.args, { carried: true });
  if (!checked.ok) {
    throw new RuntimeError(
      "DECISION_INVALID",
      `The decision of step ${c.seq} cannot be carried out: ${checked.message}`,
    );
  }
  const call: PreparedCall = {
    key,
    seq: c.seq,
    tool: checked.tool,
    ...(checked.tool.name === c.tool ? {} : { decidedTool: c.tool }),
    rawArgs: c.args,
    args: checked.args,
  };
  // A call with a row was past its approval when the row was written; a dry run's that is never sent needs none.
  if (existing || !checked.tool.needsApproval(checked.args) || staysDry(state, call)) {
    return { kind: "send", call };
  }
  // The read is only a shortcut: an answer for these arguments is final (see the comment at
  // REQUEST_APPROVAL in the store), so it is used at once; anything else is asked (askApprovals).
  const hash = await argsHash(c.args);
  const approval = await deps.store.reads.getApproval(key);
  if (approval && approval.args_hash === hash && approval.status !== "pending") {
    if (approval.status === "denied") return { kind: "denied", call, approval };
    logApproved(deps, state, call, approval);
    return { kind: "send", call };
  }
  return { kind: "ask", call, hash, before: approval ?? undefined };
}

/** Sends a call that has passed its gate: the `before_intent` point, then {@link send}. */
async function intendAndSend(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
): Promise<Ended<CallEnd>> {
  try {
    await deps.crash.hit("before_intent", call.seq);
  } catch (error) {
    return failed(error, { effect: state.effects.get(call.seq) });
  }
  return await send(deps, state, call);
}
