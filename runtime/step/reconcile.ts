/**
 * Asking a tool's remote whether a call whose outcome is unknown happened
 * (the tool's `reconcile`, a lookup by the call's key), before the runtime
 * would flag the call for a person or give up on it. One question, bounded
 * by the tool's `reconcileTimeoutMs`; whatever goes wrong with it (a throw,
 * a timeout, an answer of another shape) is the answer "cannot tell".
 *
 * @module
 */

import { deadline } from "../base/clock.ts";
import { type RunDeps, type RunState, telemetryOf } from "../run/context.ts";
import { describeError } from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import { toStorable } from "../base/storable.ts";
import type { Json, Reconciliation, Tool } from "../agent/tools.ts";

/** The call to ask about. */
export interface ReconcileQuestion {
  key: string;
  seq: number;
  tool: Tool;
  /** As parsed by the tool's schema. */
  args: unknown;
  /** Requests sent under the key so far. */
  attempts: number;
}

/**
 * A reconcile's answer, and whether the remote could not be asked at all (the
 * lookup threw or timed out: `unasked`, an answer of `unknown`), which an
 * outage explains, unlike a remote that answered it cannot tell.
 */
export type Asked = Reconciliation & { unasked?: boolean };

/**
 * Asks `call.tool.reconcile` once; undefined when the tool has none. Logs
 * `reconcile-asked` and `reconcile-answered`. Rethrows only when this worker
 * is stopping (a kill, a lost lease): then nothing may be settled.
 */
export async function askRemote(
  deps: RunDeps,
  state: RunState,
  call: ReconcileQuestion,
): Promise<Asked | undefined> {
  const { tool } = call;
  if (!tool.reconcile) return undefined;
  const runId = state.fence.runId;
  const where = { run: runId, seq: call.seq, key: call.key, tool: tool.name };
  deps.log.info("reconcile-asked", { ...where, attempts: call.attempts });
  const answer = await ask(deps, state, call, tool.reconcile);
  deps.log.info("reconcile-answered", {
    ...where,
    answer: answer.status,
    result: answer.status === "happened" ? logged(answer.result) : undefined,
    reason: answer.status === "unknown" ? answer.reason : undefined,
  });
  return answer;
}

async function ask(
  deps: RunDeps,
  state: RunState,
  call: ReconcileQuestion,
  reconcile: NonNullable<Tool["reconcile"]>,
): Promise<Asked> {
  const ms = call.tool.reconcileTimeoutMs;
  const late = `its reconcile did not answer within ${ms}ms`;
  const timeout = deadline(deps.clock, state.signal, ms, () => new Error(late));
  // Armed now, so the wait below ends at the deadline even if reconcile never reads its signal.
  const signal = timeout.signal;
  let stop!: () => void;
  const stopped = new Promise<"stopped">((resolve) => stop = () => resolve("stopped"));
  signal.addEventListener("abort", stop, { once: true });
  try {
    const answer = await Promise.race([
      reconcile(call.args, {
        idempotencyKey: call.key,
        runId: state.fence.runId,
        seq: call.seq,
        attempts: call.attempts,
        signal,
        traceHeaders: () => telemetryOf(deps).traceHeaders(),
      }),
      stopped,
    ]);
    if (state.signal.aborted) throw state.signal.reason;
    return answer === "stopped" ? { status: "unknown", reason: late, unasked: true } : readAnswer(answer);
  } catch (err) {
    if (err instanceof SimulatedKill) throw err;
    if (state.signal.aborted) throw state.signal.reason ?? err;
    if (timeout.expired()) return { status: "unknown", reason: late, unasked: true };
    return { status: "unknown", reason: `its reconcile failed: ${describeError(err)}`, unasked: true };
  } finally {
    signal.removeEventListener("abort", stop);
    timeout.cancel();
  }
}

/**
 * A found result as a log line may hold it: as it would be stored, or why it
 * cannot be. The logger writes JSON, which throws on a BigInt or a cycle;
 * the caller, not the log line, decides what an unstorable result means.
 */
function logged(result: Json): Json {
  const stored = toStorable(result, { writeOut: true });
  return stored.ok ? stored.value : `(cannot be stored: it holds ${stored.reason})`;
}

/** The answer as one of the three shapes, or `unknown` saying what was wrong with it. */
function readAnswer(answer: unknown): Reconciliation {
  const a = answer as Partial<Record<string, unknown>> | null;
  if (a?.status === "happened" && a.result !== undefined) {
    return { status: "happened", result: a.result as Json };
  }
  if (a?.status === "not_happened") return { status: "not_happened" };
  if (a?.status === "unknown") {
    return { status: "unknown", reason: typeof a.reason === "string" ? a.reason : undefined };
  }
  return {
    status: "unknown",
    reason: `its reconcile answered ${
      JSON.stringify(answer)?.slice(0, 120) ?? String(answer)
    }, not { status: "happened", result } | { status: "not_happened" } | { status: "unknown" }`,
  };
}
