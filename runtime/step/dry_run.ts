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
 * Each answer is an intent row, then its confirm (or flag), under the fork's
 * own key, so a crash between them answers it again the same way: nothing
 * was sent, so there is no unknown outcome to settle.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import { describeError } from "../base/errors.ts";
import { toStorable } from "../base/storable.ts";
import { applyRow, type RunDeps, type RunState } from "../run/context.ts";
import type { SideEffectRow } from "../store/store.ts";
import { confirm, decidedName, flag, type PreparedCall } from "./settle.ts";

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
 * Answers a call of a dry run without its remote (see the module): writes its
 * intent unless an earlier worker did, then confirms it with the original's
 * result or the stub's, or flags it. Returns the row as the last write left it.
 */
export async function answerDry(
  deps: RunDeps,
  state: RunState,
  call: PreparedCall,
): Promise<SideEffectRow> {
  const { key, seq } = call;
  const before = state.effects.get(seq);
  const intent = before ?? await deps.store.writes.effectIntentRow(
    state.fence,
    { key, seq, tool: decidedName(call), args: call.rawArgs },
    deps.clock.now(),
    true,
  );
  applyRow(state, intent);
  await deps.crash.hit("after_intent", seq);
  const answer = await dryAnswerOf(deps, state, call);
  deps.log.info("dry-answered", {
    run: state.fence.runId,
    seq,
    key,
    tool: call.tool.name,
    by: answer.by,
    from: answer.by === "original" ? answer.from : undefined,
  });
  if (answer.by === "flag") return await flag(deps, state, intent, answer.reason);
  const confirmed = await confirm(deps, state, intent, answer.result, answer.by);
  await deps.crash.hit("after_confirm", seq);
  return confirmed;
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
