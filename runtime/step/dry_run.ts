/**
 * How a dry run answers a call: the one place that decides whether a call of
 * a fork (docs/fork.md) or an evaluation's case goes to its remote. A run
 * that is not a dry run, and a tool that only reads (`effect: "read"`), send
 * as any run does. A call of a tool that acts on the world (`effect:
 * "world"`, the default) is never sent; it is answered, in this order:
 *
 * 1. from the original run's record (`remote = 'original'`): its confirmed
 *    call of the same tool with the same arguments (compared as JSON values);
 * 2. from the tool's `stub` (`remote = 'stub'`);
 * 3. else it is flagged: an unknown outcome a person resolves (`deno task
 *    resolve KEY --result ...`), as any flagged call is.
 *
 * Each answer is one fenced statement writing the call's row settled, under
 * the fork's own key, with no request counted (`attempts` 0): nothing was
 * sent, so there is no intent and no unknown outcome to settle. A worker
 * killed before it answers it again the same way.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import { describeError } from "../base/errors.ts";
import { toStorable } from "../base/storable.ts";
import { applyRow, type RunDeps, type RunState } from "../run/context.ts";
import type { SideEffectRow } from "../store/store.ts";
import { decidedName, type PreparedCall } from "./settle.ts";

/** How a dry run's call was answered, without its remote; `flag` says why nobody could. */
export type DryAnswer =
  | { by: "original"; result: Json; from: string }
  | { by: "stub"; result: Json }
  | { by: "flag"; reason: string };

/**
 * True when `call` of the run `state` must not reach its remote: the run is a
 * dry run and the tool acts on the world.
 */
export function staysDry(state: Pick<RunState, "dryRun">, call: Pick<PreparedCall, "tool">): boolean {
  return state.dryRun !== undefined && call.tool.effect === "world";
}

/**
 * Answers a call of a dry run without its remote (see the module): its row
 * written settled in one fenced statement, confirmed with the original's
 * result or the stub's (no request counted: `attempts` 0), or flagged.
 * Returns the row as written, applied to the run's state.
 */
export async function answerDry(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
): Promise<SideEffectRow> {
  const { key, seq } = call;
  const answer = await dryAnswerOf(deps, state, call);
  deps.log.info("dry-answered", {
    run: state.fence.runId,
    seq,
    key,
    tool: call.tool.name,
    by: answer.by,
    from: answer.by === "original" ? answer.from : undefined,
  });
  const row = await deps.store.forks.answerDry(
    state.fence,
    { key, seq, tool: decidedName(call), args: call.rawArgs },
    answer.by === "flag"
      ? { status: "flagged", error: answer.reason }
      : { status: "confirmed", result: answer.result, remote: answer.by },
    deps.clock.now(),
  );
  if (!row) throw await deps.store.writes.refusal(state.fence, `dry answer key=${key}`);
  applyRow(state, row);
  if (answer.by === "flag") {
    deps.log.warn("flagged", { run: state.fence.runId, seq, key, tool: row.tool, reason: answer.reason });
  } else {
    deps.log.info("confirmed", { run: state.fence.runId, seq, key, result: row.result, remote: row.remote });
  }
  await deps.crash.hit("after_confirm", seq);
  return row;
}

/** The answer a dry run's call gets: the original's record, the stub's, or why it must be flagged. */
export async function dryAnswerOf(
  deps: Pick<RunDeps, "store">,
  state: Pick<RunState, "dryRun" | "fence">,
  call: PreparedCall,
): Promise<DryAnswer> {
  const from = state.dryRun?.forkedFrom ?? null;
  if (from !== null) {
    const original = await deps.store.forks.originalCall(from, decidedName(call), call.rawArgs);
    if (original) return { by: "original", result: original.result, from: original.idempotency_key };
  }
  const what = `${call.tool.name} acts on the world and this run is a dry run (a fork that is not live, or ` +
    `an evaluation's case), so it is never sent`;
  const none = from === null ? "there is no original run" : `the original run ${from} made no such call`;
  const stub = call.tool.stub;
  if (!stub) {
    return {
      by: "flag",
      reason:
        `${what}; ${none}, and the tool offers no stub. Resolve it with the result it should have, or ` +
        `fork with --live to send it`,
    };
  }
  try {
    const result = await stub(call.args, {
      idempotencyKey: call.key,
      runId: state.fence.runId,
      seq: call.seq,
      forkedFrom: from,
    });
    const stored = toStorable(result, { writeOut: true });
    if (stored.ok) return { by: "stub", result: stored.value };
    return {
      by: "flag",
      reason: `${what}; ${none}, and its stub answered a value that cannot be stored (${stored.reason})`,
    };
  } catch (err) {
    return { by: "flag", reason: `${what}; ${none}, and its stub threw: ${describeError(err)}` };
  }
}
