/**
 * One tool call, made durable: validate the arguments, commit the intent row,
 * send the request under the idempotency key `<run_id>:<seq>`, commit the
 * confirm with the result and whether the remote created something or
 * recognised the key. A failure an outage explains is recorded on the row
 * and re-sent under the same key after a backoff, until the retry horizon
 * from its first failure (the run let go between tries longer than a
 * moment); requests whose outcome no worker lived to record are bounded by
 * the tool's `maxAttempts`, across restarts. A tool that cannot take a key
 * is never re-sent after an unknown outcome unless its `reconcile` says the
 * call did not happen: it is flagged for a human.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { BudgetError, NO_FAMILY } from "../agent/budget.ts";
import { childRunsFor, familyCeilings, ParentClosedError } from "../families/family.ts";
import { callsOf, type StepCall } from "../run/calls.ts";
import { deadline } from "../base/clock.ts";
import { applyRow, idempotencyKey, type RunState, telemetryOf, type WorkerDeps } from "../run/context.ts";
import { type Ended, failed, finished, type StepRows } from "../run/ended.ts";
import {
  AbortedError,
  describeError,
  FencedError,
  hasCode,
  RuntimeError,
  ToolError,
} from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import { askRemote } from "./reconcile.ts";
import { definedFields, humanMs, nextTry, type RetryPolicy } from "../base/retry.ts";
import { toStorable } from "../base/storable.ts";
import type { Decided } from "./decide.ts";
import type { ApprovalRow, SideEffectRow } from "../store/store.ts";
import {
  checkAtWithFloor,
  isAccepted,
  type Json,
  type Tool,
  type ToolAccepted,
  type ToolOutcome,
  waitExpired,
} from "../agent/tools.ts";

/** The run cannot go on until a human resolves a flagged tool call. */
export class BlockedError extends RuntimeError {
  /** The flagged call's idempotency key. */
  readonly key: string;
  /** Creates a blocked marker for `key`. */
  constructor(key: string, reason: string) {
    super(
      "BLOCKED",
      `Tool call ${key} needs a human: ${reason}. Check the remote, then run ` +
        `'deno task resolve ${key} --result <json>' if it happened, '--retry' to send it again, or '--fail'`,
    );
    this.name = "BlockedError";
    this.key = key;
  }
}

/**
 * sha-256 of the canonical JSON (keys sorted at every level) of `value`, in
 * hex. Computed in this thread (node:crypto): `crypto.subtle.digest` answers
 * from a worker thread a macrotask later, which the simulator's schedules
 * (microtasks only) could not order.
 */
export function argsHash(value: Json): Promise<string> {
  const canonical = (v: Json): string =>
    v === null || typeof v !== "object"
      ? JSON.stringify(v)
      : Array.isArray(v)
      ? `[${v.map(canonical).join(",")}]`
      : `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  return Promise.resolve(createHash("sha256").update(canonical(value)).digest("hex"));
}

/** A call ready to send: its row's identity and its parsed arguments. */
export interface PreparedCall {
  key: string;
  seq: number;
  tool: Tool;
  /** As decided (stored, and compared by the remote). */
  rawArgs: Json;
  /** As parsed by the tool's schema (what `run` receives). */
  args: unknown;
  /**
   * Set for a call an earlier worker left at `intent` (recovery): what a
   * person said about it since its last request.
   */
  resumed?: Resumed;
}

/** What a person said about a call left at `intent` since its last request. */
export interface Resumed {
  /** `resolve --retry`: the person checked the remote and approved one more request. */
  approved: boolean;
  /** `reopen`: one more request than the tool's `maxAttempts` is allowed. */
  reopened: boolean;
}

/** What the worker knows of a call whose last request's outcome is unknown. */
interface Unknown {
  /** Requests sent under the key so far. */
  attempts: number;
  /** Of them, those whose outcome no worker recorded (it stopped mid-call): bounded by `maxAttempts`. */
  unrecorded: number;
  /** The last request's error; none when a worker stopped before writing its outcome. */
  error?: ToolError;
  /** See {@link Resumed}. */
  approved: boolean;
  /** See {@link Resumed}. */
  reopened: boolean;
}

/** The run waits for people to approve tool calls; the worker lets it go. */
export class WaitingError extends RuntimeError {
  /** The first waiting call's idempotency key. */
  readonly key: string;
  /** Every waiting call's key, in seq order. */
  readonly keys: readonly string[];
  /** Creates the marker for calls waiting on `calls` (one or more). */
  constructor(calls: readonly { key: string; tool: string }[]) {
    const what = calls.map((c) => `${c.key} (${c.tool})`).join(", ");
    const first = calls[0].key;
    super(
      "WAITING_FOR_APPROVAL",
      `Tool call${calls.length > 1 ? "s" : ""} ${what} wait${calls.length > 1 ? "" : "s"} for a person: ` +
        `'deno task approve ${first}' or 'deno task deny ${first} --reason TEXT'`,
    );
    this.name = "WaitingError";
    this.key = first;
    this.keys = calls.map((c) => c.key);
  }

  /** Set when other calls of the step wait on their remotes: the run is also taken again then. */
  wakeAt?: Date;

  /** This marker, with the time the step's calls waiting on their remotes are due. */
  until(wakeAt: Date): WaitingError {
    this.wakeAt = wakeAt;
    return this;
  }
}

/** Where one call of a step stands before anything of the step is sent. */
type Gate =
  | { kind: "settled"; row: SideEffectRow }
  | { kind: "asleep"; row: SideEffectRow }
  | { kind: "send"; call: PreparedCall }
  | { kind: "ask"; call: PreparedCall; hash: string; before?: ApprovalRow }
  | { kind: "denied"; call: PreparedCall; approval: ApprovalRow };

/**
 * Carries out the calls of the decided step at `seq` (one, or several: the
 * calls of a decision at seq s own seqs s, s+1, ...; see calls.ts), each
 * unless it already happened. Every call is checked, and the step's
 * tool-call budget reserved, before any is sent; then the calls are sent
 * concurrently, at most `toolConcurrency` at once, each through the one path
 * a call takes ({@link send}). A call that needs a person's yes is asked
 * about once every other call of the step has settled, and the run waits
 * then; a flagged call blocks the run, and a failure fails it, once the
 * others have settled. Ends with the step's rows as its last writes left
 * them.
 */
export async function act(
  deps: WorkerDeps,
  state: RunState,
  seq: number,
  decided: Decided,
): Promise<Ended<SideEffectRow[]>> {
  const calls = callsOf(decided.decision, seq);
  const rows = () => stepRows(state, calls);
  const gates: Gate[] = [];
  const errors: unknown[] = [];
  // Calls that failed as in an outage are sent again together once the first of them is due: a remote
  // back for one is likely back for the others, and the run wakes once for them, not once for each.
  const now = deps.clock.now();
  const retryDue = calls.some((c) => {
    const row = state.effects.get(c.seq);
    return row?.status === "intent" && row.check_at !== null && new Date(row.check_at) <= now;
  });
  try {
    for (const c of calls) {
      try {
        gates.push(await gateOf(deps, state, c, decided.checked?.[c.index], retryDue));
      } catch (err) {
        if (err instanceof BlockedError) errors.push(err);
        else throw err;
      }
    }
    // Every call of the step not yet sent is counted against the tool-call ceiling before any goes out.
    const unsent = gates.filter((g) => "call" in g && !state.effects.has(g.call.seq)).length;
    state.reservation.reserve(state, unsent, unsent > 0 ? await familyCeilings(deps, state) : NO_FAMILY);
  } catch (error) {
    return failed(error, rows());
  }
  const carry = (gate: Gate): Promise<Ended<SideEffectRow>> => {
    if (gate.kind === "settled" || gate.kind === "asleep") {
      return Promise.resolve(finished(gate.row, { effect: gate.row }));
    }
    if (gate.kind === "denied") return denied(deps, state, gate.call, gate.approval);
    return intendAndSend(deps, state, gate.call);
  };
  const round = async (todo: Gate[]) => {
    for (const end of await inPool(todo, deps.toolConcurrency, carry)) if (!end.ok) errors.push(end.error);
  };
  try {
    await round(gates.filter((g) => g.kind !== "ask"));
    const asks = gates.flatMap((g) => g.kind === "ask" ? [g] : []);
    if (errors.length === 0 && asks.length > 0) {
      const answered = await askApprovals(deps, state, asks);
      await round(answered);
    }
  } catch (error) {
    errors.push(error);
  }
  state.reservation.release();
  // Calls whose remote accepted them and has not finished, or that failed as in an outage and are sent
  // again later: the step is not settled, and the run sleeps until the first of them is due (without a
  // worker), unless something worse ended the step.
  const asleep = calls.flatMap((c) => {
    const row = state.effects.get(c.seq);
    return isAsleep(row) ? [row] : [];
  });
  const wakeAt = asleep.length === 0
    ? undefined
    : new Date(Math.min(...asleep.map((r) => new Date(r.check_at!).getTime())));
  const worst = worstOf(errors);
  if (worst instanceof WaitingError && wakeAt) return failed(worst.until(wakeAt), rows());
  if (worst !== undefined) return failed(worst, rows());
  if (wakeAt) {
    const why = asleep.map((r) => whyAsleep(deps, r));
    return failed(new SleepingError(asleep.map((r) => r.idempotency_key), wakeAt, why), rows());
  }
  return finished(calls.map((c) => state.effects.get(c.seq)!), rows());
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
function whyAsleep(deps: WorkerDeps, row: SideEffectRow): string {
  const at = new Date(row.check_at!).toISOString();
  if (row.status === "waiting") {
    return `${row.idempotency_key} (${row.tool}) waits on its remote, asked again at ${at}`;
  }
  const tool = deps.tools.get(row.tool);
  const since = row.failing_since ? new Date(row.failing_since) : undefined;
  const givesUp = tool && since
    ? `; given up at ${new Date(since.getTime() + toolPolicy(deps, tool).horizonMs).toISOString()}`
    : "";
  return `${row.idempotency_key} (${row.tool}) failed ${row.failures} time${row.failures === 1 ? "" : "s"}${
    since ? ` since ${since.toISOString()}` : ""
  } (last: ${row.error ?? "unknown"}), sent again under its key at ${at}${givesUp}`;
}

/** The retry policy of `tool`'s calls: its own fields over its agent's (and the process's). */
export function toolPolicy(deps: Pick<WorkerDeps, "retry">, tool: Tool): RetryPolicy {
  return { ...deps.retry, ...definedFields(tool.retry) };
}

/**
 * The step's calls are settled but for some whose remotes accepted them and
 * will finish later: the run sleeps until `wakeAt`, the first of them due,
 * holding no worker, and is taken again then (the loop's `waitRun`).
 */
export class SleepingError extends RuntimeError {
  /** The calls still waiting on their remotes. */
  readonly keys: readonly string[];
  /** When the first of them is asked again. */
  readonly wakeAt: Date;
  /**
   * Creates the marker for `keys`, the first due at `wakeAt`; `why` says, for
   * each, what it waits for (default: on its remote).
   */
  constructor(keys: readonly string[], wakeAt: Date, why?: readonly string[]) {
    const many = keys.length > 1;
    super(
      "WAITING_ON_REMOTE",
      why && why.length > 0
        ? `Waiting until ${wakeAt.toISOString()}: ${why.join("; ")}`
        : `Tool call${many ? "s" : ""} ${keys.join(", ")} wait${many ? "" : "s"} on ${
          many ? "their remotes" : "its remote"
        }: ` +
          `asked again at ${wakeAt.toISOString()} under the same key (or settled from outside: ` +
          `'deno task settle ${keys[0]} --result JSON')`,
    );
    this.name = "SleepingError";
    this.keys = keys;
    this.wakeAt = wakeAt;
  }
}

/** The rows of a step's calls as this worker knows them: `effect` for a one-call step, `effects` for any. */
function stepRows(state: RunState, calls: readonly StepCall[]): StepRows {
  const effects = calls.flatMap((c) => state.effects.get(c.seq) ?? []);
  return calls.length === 1 ? { effect: effects[0], effects } : { effects };
}

/**
 * Of the errors a step's calls ended with, the one that decides the run:
 * a kill first (the process is gone), then a lost run (fenced, stopping),
 * then an error the loop does not classify, then what fails the run, then a
 * flag (blocked); a wait for approval is never among them.
 */
function worstOf(errors: readonly unknown[]): unknown {
  const rank = (e: unknown): number =>
    e instanceof SimulatedKill
      ? 0
      : e instanceof FencedError || e instanceof AbortedError
      ? 1
      : e instanceof BlockedError
      ? 4
      : e instanceof WaitingError
      ? 5
      : e instanceof SleepingError
      ? 6
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
 * (skipped), ready to send, waiting on a person's answer, or denied. Checks
 * its arguments first: bad arguments never reach a remote. Throws
 * {@link BlockedError} for a flagged call.
 */
async function gateOf(
  deps: WorkerDeps,
  state: RunState,
  c: StepCall,
  checkedNow: { tool: Tool; args: unknown } | undefined,
  retryDue: boolean,
): Promise<Gate> {
  const runId = state.fence.runId;
  const key = idempotencyKey(runId, c.seq);
  const existing = state.effects.get(c.seq);
  if (existing?.status === "confirmed" || existing?.status === "failed") {
    deps.log.info("skipped", {
      run: runId,
      seq: c.seq,
      key,
      status: existing.status,
      remote: existing.remote ?? undefined,
    });
    return { kind: "settled", row: existing };
  }
  if (existing?.status === "flagged") throw new BlockedError(key, existing.error ?? "its outcome is unknown");
  // A call its remote accepted, or one that failed as in an outage, is sent again once its time has come,
  // and left asleep until then; the step's failed calls go again together once one of them is due.
  const retrying = existing?.status === "intent" && retryDue;
  if (isAsleep(existing) && !retrying && new Date(existing.check_at) > deps.clock.now()) {
    return { kind: "asleep", row: existing };
  }
  // A decision this worker has just made was checked by decide() (#11: not parsed twice).
  const checked = checkedNow ? { ok: true as const, ...checkedNow } : deps.tools.check(c.tool, c.args);
  if (!checked.ok) {
    throw new RuntimeError(
      "DECISION_INVALID",
      `The decision of step ${c.seq} cannot be carried out: ${checked.message}`,
    );
  }
  const call: PreparedCall = { key, seq: c.seq, tool: checked.tool, rawArgs: c.args, args: checked.args };
  // A call with a row was past its approval when the row was written.
  if (existing || !checked.tool.needsApproval(checked.args)) return { kind: "send", call };
  // The read is only a shortcut: an answer for these arguments is final (see the comment at
  // REQUEST_APPROVAL in the store), so it is used at once; anything else is asked (askApprovals).
  const hash = await argsHash(c.args);
  const approval = await deps.store.getApproval(key);
  if (approval && approval.args_hash === hash && approval.status !== "pending") {
    if (approval.status === "denied") return { kind: "denied", call, approval };
    logApproved(deps, state, call, approval);
    return { kind: "send", call };
  }
  return { kind: "ask", call, hash, before: approval ?? undefined };
}

/** Sends a call that has passed its gate: the `before_intent` point, then {@link send}. */
async function intendAndSend(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
): Promise<Ended<SideEffectRow>> {
  try {
    await deps.crash.hit("before_intent", call.seq);
  } catch (error) {
    return failed(error, { effect: state.effects.get(call.seq) });
  }
  return await send(deps, state, call);
}

/**
 * Asks a person about every call of the step still without an answer, in
 * one statement that decides from the requests as they stand then: a person
 * may have answered since the read, and the worker goes on with that answer
 * instead of waiting on it. Returns the calls answered meanwhile (to send,
 * or denied); throws {@link WaitingError} when any request is still pending
 * (the statement set the run to waiting and released it).
 */
async function askApprovals(
  deps: WorkerDeps,
  state: RunState,
  asks: readonly Extract<Gate, { kind: "ask" }>[],
): Promise<Gate[]> {
  const asked = await deps.store.requestApprovals(
    state.fence,
    asks.map((g) => ({
      key: g.call.key,
      seq: g.call.seq,
      tool: g.call.tool.name,
      args: g.call.rawArgs,
      hash: g.hash,
    })),
    deps.clock.now(),
  );
  if (asked.waiting) {
    const pending = asks.filter((g) =>
      asked.approvals.find((a) => a.idempotency_key === g.call.key)?.status === "pending"
    );
    for (const g of pending) {
      deps.log.warn("waiting-for-approval", {
        run: state.fence.runId,
        seq: g.call.seq,
        key: g.call.key,
        tool: g.call.tool.name,
        args: g.call.rawArgs,
        asked_before: g.before && g.before.args_hash !== g.hash ? "for other arguments" : undefined,
      });
    }
    throw new WaitingError(pending.map((g) => ({ key: g.call.key, tool: g.call.tool.name })));
  }
  return asks.map((g): Gate => {
    const approval = asked.approvals.find((a) => a.idempotency_key === g.call.key);
    // The statement replaces a request for other arguments and waits on a pending one: what is left is an
    // answer for these arguments. Checked, since a call must never run on an answer given for others.
    if (!approval || approval.args_hash !== g.hash || approval.status === "pending") {
      throw new RuntimeError(
        "APPROVAL_INCONSISTENT",
        `The approval request for ${g.call.key} came back ${approval?.status ?? "missing"} for arguments ` +
          `${approval?.args_hash}, asked for ${g.hash}, without the run waiting: a bug in the store's approval statement`,
      );
    }
    if (approval.status === "denied") return { kind: "denied", call: g.call, approval };
    logApproved(deps, state, g.call, approval);
    return { kind: "send", call: g.call };
  });
}

function logApproved(deps: WorkerDeps, state: RunState, call: PreparedCall, approval: ApprovalRow): void {
  deps.log.info("approved", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    tool: call.tool.name,
    by: approval.decided_by ?? undefined,
  });
}

/** Records a person's denial as the call's result (a failed row the model sees). */
async function denied(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  approval: ApprovalRow,
): Promise<Ended<SideEffectRow>> {
  try {
    const error = `denied by ${approval.decided_by ?? "a person"}${
      approval.reason ? `: ${approval.reason}` : ""
    }`;
    const row = await deps.store.effectDenied(
      state.fence,
      { key: call.key, seq: call.seq, tool: call.tool.name, args: call.rawArgs },
      error,
      deps.clock.now(),
    );
    applyRow(state, row);
    deps.log.warn("denied", {
      run: state.fence.runId,
      seq: call.seq,
      key: call.key,
      tool: call.tool.name,
      by: approval.decided_by ?? undefined,
      reason: approval.reason ?? undefined,
    });
    return finished(row, { effect: row });
  } catch (error) {
    return failed(error, { effect: state.effects.get(call.seq) });
  }
}

/**
 * Sends a call (first attempt, re-send after a crash, or retry) until it is
 * confirmed, failed or flagged. Each attempt is counted in its intent row
 * before the request goes out. Ends with the call's row as its last write
 * left it: settled, or with the error that stopped it.
 */
export function send(deps: WorkerDeps, state: RunState, call: PreparedCall): Promise<Ended<SideEffectRow>> {
  return telemetryOf(deps).toolCall(
    {
      fence: state.fence,
      key: call.key,
      seq: call.seq,
      tool: call.tool.name,
      before: state.effects.get(call.seq),
    },
    () => sendCall(deps, state, call),
  );
}

async function sendCall(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
): Promise<Ended<SideEffectRow>> {
  const { log, clock, crash } = deps;
  const runId = state.fence.runId;
  const { key, seq, tool } = call;
  let row = state.effects.get(seq);
  // A call not sent again: confirmed with what its remote says it returned, or flagged (and the run blocked).
  const carryOut = async (at: SideEffectRow, verdict: Verdict): Promise<Ended<SideEffectRow>> => {
    if ("reconciled" in verdict) {
      row = await confirm(deps, state, at, verdict.reconciled, "reconciled");
      await crash.hit("after_confirm", seq);
      return finished(row, { effect: row });
    }
    // (`later` comes only when asked for: a caller that cannot wait has the call flagged.)
    const reason = "flag" in verdict ? verdict.flag : verdict.later;
    row = await flag(deps, state, at, reason);
    throw new BlockedError(key, reason);
  };
  try {
    // A call an earlier worker left at intent: may it be sent again, and is it known by now?
    if (call.resumed && row) {
      const unknown = { attempts: row.attempts, unrecorded: unknownRequests(row), ...call.resumed };
      const verdict = await unknownOutcome(deps, state, call, unknown);
      if (verdict !== "send") return await carryOut(row, verdict);
    }
    // A call its remote accepted is asked again under its key, until its deadline: past it, no request goes out.
    if (row?.status === "waiting" && row.wait_deadline_at && clock.now() >= new Date(row.wait_deadline_at)) {
      return await failCall(deps, state, row, waitExpired(tool, key, new Date(row.wait_deadline_at)));
    }
    // Bounded by the tool's maxAttempts (counted across restarts by the row): see unknownOutcome.
    // A call its remote accepted is bounded by its deadline instead (a poll counts no attempt).
    for (;;) {
      // A call of a tool that takes no key, due again after a failure: its last request's outcome is unknown,
      // so its remote is asked first, just before it would go (a lookup that cannot be made now is tried
      // again later, within the retry horizon, rather than flagged during an outage).
      if (!tool.idempotent && row?.status === "intent" && row.check_at !== null) {
        // The failure recorded (`CODE: message`) is the last request's error.
        const [, code = "TOOL_THREW", message = row.error ?? "its request failed"] =
          /^([A-Z][A-Z0-9_]*): ([\s\S]*)$/.exec(row.error ?? "") ?? [];
        const seen = {
          attempts: row.attempts,
          unrecorded: unknownRequests(row),
          error: new ToolError(code, message, { transient: true }),
          approved: false,
          reopened: false,
        };
        const verdict = await unknownOutcome(deps, state, call, seen, { canWait: true });
        if (typeof verdict === "object" && "later" in verdict) {
          const lookup = new ToolError("TOOL_THREW", verdict.later, { transient: true });
          const again = await scheduleAgain(deps, state, call, row, lookup);
          row = again.row;
          if (again.next === "give-up") {
            return await carryOut(row, {
              flag:
                `its outcome is unknown, ${tool.name} takes no idempotency key, and ${verdict.later} for ` +
                `${humanMs(again.failingForMs)} (the retry horizon)`,
            });
          }
          if (again.next === "hold") continue;
          return finished(row, { effect: row });
        }
        if (verdict !== "send") return await carryOut(row, verdict);
      }
      state.reservation.take(state, row === undefined, await familyCeilings(deps, state));
      const intent = await intentOrSettled(deps, state, call, row);
      if (intent.status === "confirmed" || intent.status === "failed") {
        row = intent;
        return finished(intent, { effect: intent });
      }
      row = intent;
      applyRow(state, intent);
      const attempt = intent.attempts;
      const poll = intent.polls > 0 ? intent.polls : undefined;
      log.info("intent", { run: runId, seq, key, tool: tool.name, attempt, poll });
      await crash.hit("after_intent", seq);
      log.info("calling", { run: runId, seq, key, tool: tool.name, attempt, poll });

      let outcome: ToolOutcome;
      try {
        outcome = storedOutcome(await callTool(deps, state, call, intent), call);
      } catch (err) {
        if (err instanceof SimulatedKill) throw err; // the (simulated) process is gone
        if (state.signal.aborted) throw state.signal.reason ?? err;
        // An error the tool did not classify says nothing about whether the remote
        // acted, so it is treated as an unknown outcome: re-sent under the same key
        // (or flagged), never recorded as a failure that might hide a resource.
        const e = err instanceof ToolError
          ? err
          : new ToolError("TOOL_THREW", describeError(err), { transient: true, cause: err });
        if (e.transient) {
          // May it be sent again at all? A tool that takes a key: below its limit on requests with no recorded
          // outcome (this one's is known, a failure). One that takes none and cannot look a call up is
          // flagged; one that can is asked just before it would be sent again (below).
          if (tool.idempotent || !tool.reconcile) {
            const unknown = {
              attempts: intent.attempts,
              unrecorded: Math.max(0, unknownRequests(intent) - 1),
              error: e,
              approved: false,
              reopened: false,
            };
            const verdict = await unknownOutcome(deps, state, call, unknown);
            if (verdict !== "send") return await carryOut(intent, verdict);
          }
          const again = await scheduleAgain(deps, state, call, intent, e);
          row = again.row;
          if (again.next === "give-up") {
            return await giveUp(deps, state, call, again.row, e, again.failingForMs);
          }
          if (again.next === "hold") continue;
          // A longer wait holds no slot: the step's other calls settle, then the run sleeps until it is due.
          return finished(again.row, { effect: again.row });
        }
        // A permanent failure is an answer too: record it and let the model see it.
        return await failCall(deps, state, intent, e);
      }
      await crash.hit("after_call", seq);
      if (isAccepted(outcome)) return await accepted(deps, state, call, intent, outcome);
      row = await confirm(deps, state, intent, outcome.result, outcome.remote ?? "created");
      await crash.hit("after_confirm", seq);
      return finished(row, { effect: row });
    }
  } catch (error) {
    return failed(error, { effect: row });
  }
}

/**
 * Writes the intent of the call's next request, and returns the row as the
 * write left it; or, when the call was asleep on its remote and a person or a
 * webhook settled it since this worker read it (`settle`), so the intent is
 * refused as the row is no longer as this worker left it, the call's row as
 * settled, applied to the run's state: the worker goes on with it instead of
 * stopping (SETTLE_CALL in the store's operators.ts describes the race).
 */
async function intentOrSettled(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow | undefined,
): Promise<SideEffectRow> {
  const { key, seq, tool } = call;
  try {
    return await deps.store.effectIntentRow(
      state.fence,
      { key, seq, tool: tool.name, args: call.rawArgs },
      deps.clock.now(),
      row === undefined,
    );
  } catch (err) {
    if (row?.status !== "waiting" || !hasCode(err, "STALLED")) throw err;
    const now = await deps.store.getEffect(key);
    if (now?.run_id !== state.fence.runId || (now.status !== "confirmed" && now.status !== "failed")) {
      throw err;
    }
    applyRow(state, now);
    deps.log.info("settled-meanwhile", {
      run: state.fence.runId,
      seq,
      key,
      status: now.status,
      by: now.resolved_by ?? undefined,
    });
    return now;
  }
}

/**
 * Records a failure of the call `row` (as the worker holds it, at `intent`)
 * that an outage explains, with when it may go again, so the count and the
 * horizon hold across restarts (a remote that says when to come back, 409,
 * 429 or 503, knows better than our backoff), and says what comes next: a
 * wait slept here holding the slot (`hold`, already slept when this returns),
 * one that lets the run go until the call is due (`park`), or the horizon
 * passed (`give-up`).
 */
async function scheduleAgain(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow,
  error: ToolError,
): Promise<
  { row: SideEffectRow; next: "hold" | "park" } | {
    row: SideEffectRow;
    next: "give-up";
    failingForMs: number;
  }
> {
  const now = deps.clock.now();
  const next = nextTry(
    toolPolicy(deps, call.tool),
    { failures: row.failures + 1, failingSince: row.failing_since ?? now, retryAfterMs: error.retryAfterMs },
    now,
    deps.random,
  );
  const failure = await deps.store.effectFailure(
    state.fence,
    row,
    { error: `${error.code}: ${error.message}`, retryAt: next.kind === "again" ? next.at : now },
    now,
  );
  applyRow(state, failure);
  if (next.kind === "give-up") return { row: failure, next: "give-up", failingForMs: next.failingForMs };
  deps.log.warn("retrying", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    attempt: row.attempts,
    failures: failure.failures,
    code: error.code,
    error: error.message,
    delay_ms: next.waitMs,
    retry_after_ms: error.retryAfterMs,
    at: next.hold ? undefined : next.at,
    gives_up_at: next.givesUpAt,
  });
  if (!next.hold) return { row: failure, next: "park" };
  await deps.clock.sleep(next.waitMs, state.signal);
  return { row: failure, next: "hold" };
}

/** Records a permanent failure of the call `row` (the model sees it) and returns the row as the write left it. */
async function failCall(
  deps: WorkerDeps,
  state: RunState,
  row: SideEffectRow,
  e: ToolError,
): Promise<Ended<SideEffectRow>> {
  const settled = await deps.store.effectSettle(
    state.fence,
    row,
    { status: "failed", error: e.message },
    deps.clock.now(),
  );
  applyRow(state, settled);
  deps.log.warn("tool-failed", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    tool: row.tool,
    code: e.code,
    error: e.message,
  });
  return finished(settled, { effect: settled });
}

/**
 * The remote accepted the call and will finish it later: the row goes to
 * `waiting` with the accepted answer (a job id) and when to ask again (at the
 * latest the call's deadline, fixed by the first accepted answer at
 * `waitDeadlineMs`). An answer past the deadline fails the call
 * `TOOL_WAIT_EXPIRED`; an answer that is not a valid wait fails it
 * `TOOL_ACCEPTED_INVALID`.
 */
async function accepted(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  intent: SideEffectRow,
  outcome: ToolAccepted,
): Promise<Ended<SideEffectRow>> {
  const now = deps.clock.now();
  const deadlineAt = intent.wait_deadline_at
    ? new Date(intent.wait_deadline_at)
    : new Date(now.getTime() + call.tool.waitDeadlineMs);
  let checkAt: Date;
  try {
    // No sooner than the tool's floor, which doubles with each poll: a remote that keeps saying "ask again
    // at once" is asked less and less often (bounded by the call's deadline below).
    const asked = checkAtWithFloor(
      call.tool,
      outcome,
      intent.polls,
      toolPolicy(deps, call.tool).backoffMaxMs,
      now,
    );
    if (asked.raised) {
      deps.log.info("check-after-raised", {
        run: state.fence.runId,
        seq: call.seq,
        key: call.key,
        polls: intent.polls,
        asked_ms: (outcome.accepted as { checkAfterMs: number }).checkAfterMs,
        floor_ms: asked.floorMs,
      });
    }
    checkAt = asked.at;
  } catch (err) {
    return await failCall(deps, state, intent, err as ToolError);
  }
  if (now >= deadlineAt) {
    return await failCall(deps, state, intent, waitExpired(call.tool, call.key, deadlineAt));
  }
  if (checkAt > deadlineAt) checkAt = deadlineAt;
  const stored = toStorable(outcome.result, { writeOut: true });
  if (!stored.ok) {
    return await failCall(
      deps,
      state,
      intent,
      new ToolError(
        "TOOL_RESULT_UNSTORABLE",
        `${call.tool.name} answered that its remote accepted the call, but what it returned cannot be stored: ` +
          `it holds ${stored.reason}. The call is failed for good, though the remote may be doing it (key ${call.key})`,
        { transient: false },
      ),
    );
  }
  const row = await deps.store.effectWaiting(state.fence, intent, {
    result: stored.value,
    checkAt,
    deadlineAt,
  });
  applyRow(state, row);
  deps.log.info("accepted", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    tool: call.tool.name,
    polls: intent.polls,
    check_at: checkAt.toISOString(),
    deadline: deadlineAt.toISOString(),
  });
  await deps.crash.hit("after_confirm", call.seq);
  return finished(row, { effect: row });
}

/**
 * What becomes of a call whose last request's outcome is unknown, when it is
 * not sent again: confirmed as `reconciled` with what the remote says it
 * returned, or flagged for a human, for the reason given.
 */
type Verdict = { reconciled: Json } | { flag: string } | { later: string };

/**
 * Decides what becomes of a call whose last request's outcome is unknown (an
 * unknown-outcome error, or a worker that stopped before writing it), and
 * writes nothing: "send" when one more request may go out, `reconciled` when
 * the tool's `reconcile` found that it happened, `flag` when a human must
 * look. Otherwise it throws `TOOL_GAVE_UP`.
 *
 * - A person's `resolve --retry` since the last request approves one more.
 * - At the tool's `maxAttempts` (one more after a `reopen`) nothing is sent:
 *   the run fails `TOOL_GAVE_UP` with the row at `intent`, as the outcome is
 *   still unknown, unless `reconcile` says it happened. A tool that takes no
 *   key is flagged instead when `reconcile` cannot say it did not happen.
 * - Below it a tool that takes a key is sent again under it; one that takes
 *   none only when `reconcile` says it did not happen, and flagged otherwise.
 */
async function unknownOutcome(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  seen: Unknown,
  opts: { canWait?: boolean } = {},
): Promise<"send" | Verdict> {
  const { key, seq, tool } = call;
  if (seen.approved) return "send";
  const atLimit = seen.unrecorded >= tool.maxAttempts && !seen.reopened;
  if (tool.idempotent && !atLimit) return "send";
  let answer = await askRemote(deps, state, { key, seq, tool, args: call.args, attempts: seen.attempts });
  if (answer?.status === "happened") {
    // What the remote says it returned is stored like any result: one the
    // database cannot hold confirms nothing, and the lookup could not tell.
    const stored = toStorable(answer.result, { writeOut: true });
    if (stored.ok) return { reconciled: stored.value };
    answer = { status: "unknown", reason: `the result it found cannot be stored: it holds ${stored.reason}` };
  }
  if (answer?.status === "not_happened" && !atLimit) return "send";
  const lookup = answer === undefined
    ? ""
    : answer.status === "not_happened"
    ? "; its reconcile says it did not happen"
    : `; its reconcile could not tell${answer.reason ? ` (${answer.reason})` : ""}`;
  // A lookup that could not be made (it threw, or timed out): a remote that is down cannot be asked either.
  if (opts.canWait && !tool.idempotent && answer?.status === "unknown" && answer.unasked) {
    return { later: `its reconcile could not ask the remote (${answer.reason ?? "no answer"})` };
  }
  if (!tool.idempotent && answer?.status !== "not_happened") {
    const unknown = seen.error
      ? `it failed with an unknown outcome (${seen.error.message})`
      : "its outcome is unknown";
    return { flag: `${unknown} and ${tool.name} takes no idempotency key${lookup}` };
  }
  deps.log.error("gave-up", {
    run: state.fence.runId,
    seq,
    key,
    tool: tool.name,
    attempts: seen.attempts,
    code: seen.error?.code,
    error: seen.error?.message,
    reconcile: answer?.status,
  });
  const maybe = answer?.status === "not_happened" ? "" : ", so the remote may have acted";
  const what =
    (seen.unrecorded === seen.attempts
      ? `was sent ${seen.attempts} times (maxAttempts is ${tool.maxAttempts}) and no outcome was recorded: `
      : `was sent ${seen.attempts} times, ${seen.unrecorded} of them with no outcome recorded (maxAttempts is ${tool.maxAttempts}): `) +
    `each worker stopped before it could write one${maybe}${
      seen.error ? `; last error: ${seen.error.message}` : ""
    }${lookup}. Check the remote, then 'deno task reopen ${state.fence.runId}' sends it once more under its key`;
  throw new ToolError("TOOL_GAVE_UP", `Tool call ${key} (${tool.name}) ${what}`, {
    transient: false,
    cause: seen.error,
  });
}

/**
 * Requests under the call's key whose outcome no worker recorded (it stopped
 * mid-call): every request counts an attempt, and every failure a worker saw
 * is recorded, so the difference. The tool's `maxAttempts` bounds it.
 */
function unknownRequests(row: SideEffectRow): number {
  return Math.max(0, row.attempts - row.failures);
}

/**
 * A call still failing once its retry horizon has passed: asked about once
 * more (its `reconcile`, if it has one), then given up as the tool says
 * (`onGiveUp`): the run fails `TOOL_GAVE_UP` (the row left at `intent`, its
 * outcome unknown), or the failure becomes the call's answer, which the model
 * sees (`TOOL_UNAVAILABLE`).
 */
async function giveUp(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  row: SideEffectRow,
  error: ToolError,
  failingForMs: number,
): Promise<Ended<SideEffectRow>> {
  const { key, seq, tool } = call;
  const horizonMs = toolPolicy(deps, tool).horizonMs;
  const answer = tool.reconcile
    ? await askRemote(deps, state, { key, seq, tool, args: call.args, attempts: row.attempts })
    : undefined;
  if (answer?.status === "happened") {
    const stored = toStorable(answer.result, { writeOut: true });
    if (stored.ok) {
      const confirmed = await confirm(deps, state, row, stored.value, "reconciled");
      return finished(confirmed, { effect: confirmed });
    }
  }
  const over = `failed ${row.failures} times over ${humanMs(failingForMs)} (the retry horizon is ${
    humanMs(horizonMs)
  }, counted from its first failure, across restarts); last error: ${error.message}`;
  deps.log.error("gave-up", {
    run: state.fence.runId,
    seq,
    key,
    tool: tool.name,
    failures: row.failures,
    failing_ms: failingForMs,
    code: error.code,
    error: error.message,
    on_give_up: typeof tool.onGiveUp === "function" ? "function" : tool.onGiveUp,
  });
  // A call of a tool that takes no key has an outcome nobody may guess at: a person looks.
  if (tool.onGiveUp === "fail-run" && !tool.idempotent) {
    const reason = `its outcome is unknown and ${tool.name} takes no idempotency key: it ${over}`;
    await flag(deps, state, row, reason);
    throw new BlockedError(key, reason);
  }
  if (tool.onGiveUp === "fail-run") {
    throw new ToolError(
      "TOOL_GAVE_UP",
      `Tool call ${key} (${tool.name}) ${over}. When its remote is back, 'deno task reopen ${state.fence.runId}' ` +
        `sends it again under its key`,
      { transient: false, cause: error },
    );
  }
  const text = typeof tool.onGiveUp === "function"
    ? tool.onGiveUp({ idempotencyKey: key, error, failures: row.failures, failingForMs })
    : `${tool.name} is unavailable: its request ${over}`;
  return await failCall(
    deps,
    state,
    row,
    new ToolError("TOOL_UNAVAILABLE", String(text), { transient: false }),
  );
}

/** Commits the outcome of the call `row` and returns the row as the write left it, applied to the run's state. */
async function confirm(
  deps: WorkerDeps,
  state: RunState,
  row: SideEffectRow,
  result: Json,
  remote: "created" | "already_done" | "reconciled",
): Promise<SideEffectRow> {
  const confirmed = await deps.store.effectConfirm(state.fence, row, { result, remote }, deps.clock.now());
  applyRow(state, confirmed);
  deps.log.info("confirmed", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    result,
    remote,
  });
  return confirmed;
}

/**
 * Marks the call `row`, whose outcome cannot be known safely, as `flagged`,
 * and returns the row as the write left it. The caller then blocks the run
 * ({@link BlockedError}).
 */
export async function flag(
  deps: WorkerDeps,
  state: RunState,
  row: SideEffectRow,
  reason: string,
): Promise<SideEffectRow> {
  const flagged = await deps.store.effectSettle(
    state.fence,
    row,
    { status: "flagged", error: reason },
    deps.clock.now(),
  );
  applyRow(state, flagged);
  deps.log.warn("flagged", {
    run: state.fence.runId,
    seq: row.seq,
    key: row.idempotency_key,
    tool: row.tool,
    reason,
  });
  return flagged;
}

async function callTool(
  deps: WorkerDeps,
  state: RunState,
  call: PreparedCall,
  intent: SideEffectRow,
): Promise<ToolOutcome> {
  const timeout = deadline(
    deps.clock,
    state.signal,
    call.tool.timeoutMs,
    () =>
      new ToolError("TOOL_TIMEOUT", `${call.tool.name} did not answer within ${call.tool.timeoutMs}ms`, {
        transient: true,
      }),
  );
  try {
    return await call.tool.run(call.args, {
      idempotencyKey: call.key,
      runId: state.fence.runId,
      seq: call.seq,
      attempt: intent.attempts,
      polls: intent.polls ?? 0,
      // Read only by a tool that uses it: the deadline arms its timer then (see deadline()).
      get signal() {
        return timeout.signal;
      },
      traceHeaders: () => telemetryOf(deps).traceHeaders(),
      // Built when a tool asks for it (an agent used as a tool): no other call pays for it.
      get runs() {
        return childRunsFor(deps, state, call);
      },
    });
  } catch (err) {
    const timedOut = timeout.expired();
    if (timedOut && !state.signal.aborted) throw timedOut;
    if (state.signal.aborted) throw state.signal.reason ?? new AbortedError("The worker is stopping");
    throw err;
  } finally {
    timeout.cancel();
  }
}

/**
 * A tool's outcome with its result as the database will give it back (what
 * the model sees, live and on replay). A result that cannot be stored (a
 * cycle, a BigInt, NaN, nesting too deep: storable.ts) fails the call for
 * good with `TOOL_RESULT_UNSTORABLE`, rather than failing every write of it;
 * NUL characters and lone surrogates are written out as their escapes.
 */
function storedOutcome(outcome: ToolOutcome, call: PreparedCall): ToolOutcome {
  if (isAccepted(outcome)) return outcome;
  const stored = toStorable(outcome.result, { writeOut: true });
  if (stored.ok) return { ...outcome, result: stored.value };
  throw new ToolError(
    "TOOL_RESULT_UNSTORABLE",
    `${call.tool.name} answered, but its result cannot be stored: it holds ${stored.reason}. ` +
      `The call is failed for good, though the remote may have acted (key ${call.key}); ` +
      `the tool must return JSON`,
    { transient: false },
  );
}
