/**
 * Approvals: a call whose tool needs a person's yes is asked about, with the
 * calls of its step still waiting, in one statement; the run waits, holding
 * no worker, until a person answers. An answer is bound to the call's
 * arguments by their hash: one given for other arguments is never used.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { applyRow, type RunDeps, type RunState } from "../run/context.ts";
import { type Ended, failed, finished } from "../run/ended.ts";
import { RuntimeError } from "../base/errors.ts";
import type { ApprovalRow, SideEffectRow } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";
import { decidedName, type PreparedCall } from "./settle.ts";

/** A call to ask a person about: its arguments' hash, and the request already made for it, if any. */
export interface Ask {
  call: PreparedCall;
  hash: string;
  before?: ApprovalRow;
}

/** A call a person has answered: sent, or recorded as denied. */
export type Answered =
  | { kind: "send"; call: PreparedCall }
  | { kind: "denied"; call: PreparedCall; approval: ApprovalRow };

/** Calls still waiting for a person: the run waits. */
export interface Pending {
  pending: readonly { key: string; tool: string }[];
}

/**
 * Why a run waits for people, in words for them: the calls, and the commands
 * that answer the first.
 */
export function pendingReason(calls: readonly { key: string; tool: string }[]): string {
  const what = calls.map((c) => `${c.key} (${c.tool})`).join(", ");
  const first = calls[0].key;
  const many = calls.length > 1;
  return `Tool call${many ? "s" : ""} ${what} wait${many ? "" : "s"} for a person: ` +
    `'deno task approve ${first}' or 'deno task deny ${first} --reason TEXT'`;
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

/**
 * Asks a person about every call of the step still without an answer, in
 * one statement that decides from the requests as they stand then: a person
 * may have answered since the read, and the worker goes on with that answer
 * instead of waiting on it. Returns the calls answered meanwhile (to send,
 * or denied), or, when any request is still pending, the calls that wait
 * (the statement set the run to waiting and released it).
 */
export async function askApprovals(
  deps: RunDeps,
  state: RunState,
  asks: readonly Ask[],
): Promise<Answered[] | Pending> {
  const asked = await deps.store.writes.requestApprovals(
    state.fence,
    asks.map((g) => ({
      key: g.call.key,
      seq: g.call.seq,
      tool: decidedName(g.call),
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
    return { pending: pending.map((g) => ({ key: g.call.key, tool: g.call.tool.name })) };
  }
  return asks.map((g): Answered => {
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

/** Logs the answer a call goes on with. */
export function logApproved(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  approval: ApprovalRow,
): void {
  deps.log.info("approved", {
    run: state.fence.runId,
    seq: call.seq,
    key: call.key,
    tool: call.tool.name,
    by: approval.decided_by ?? undefined,
  });
}

/** Records a person's denial as the call's result (a failed row the model sees). */
export async function denied(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
  approval: ApprovalRow,
): Promise<Ended<SideEffectRow>> {
  try {
    const error = `denied by ${approval.decided_by ?? "a person"}${
      approval.reason ? `: ${approval.reason}` : ""
    }`;
    const row = await deps.store.writes.effectDenied(
      state.fence,
      { key: call.key, seq: call.seq, tool: decidedName(call), args: call.rawArgs },
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
