/**
 * Recovery: the first thing a worker does after claiming a run. A tool row
 * left at `intent` is a call whose outcome nobody recorded (unless its last
 * request's failure was recorded with a time to send it again: the step
 * sends that one once due, with its other such calls); it is re-sent
 * under its original idempotency key (the remote answers `already_done` if
 * the first request reached it) unless it has used up its tool's
 * `maxAttempts` (the run fails `TOOL_GAVE_UP`). A tool that takes no key is
 * asked first (its `reconcile`) whether the call happened, and the call is
 * flagged for a human when it cannot tell. Journal rows left at `intent`
 * need nothing here: the loop decides those steps again, which is the one
 * model call a lost answer costs.
 *
 * @module
 */

import { llmCallsOf, type RunDeps, type RunState } from "../run/context.ts";
import { valueOf } from "../run/ended.ts";
import { rowsFrom } from "../run/tallied.ts";
import type { SideEffectRow } from "../store/store.ts";
import { blockedBy, isAsleep } from "./act.ts";
import { send } from "./send.ts";
import { flag } from "./settle.ts";
import { type Limited, waitForLimit } from "./limited.ts";

/** The run cannot go on until a person looks at the flagged call `key`. */
export interface Blocked {
  kind: "blocked";
  key: string;
  reason: string;
}

/**
 * Settles every tool call a crash left at `intent`; prints the recovery
 * block when there is history. Returns the run blocked by its first flagged
 * call, once every other call has been settled; or, when a limit shared by
 * the fleet refused a re-send, the run let go until it may go (its next
 * worker recovers again); or undefined when it may go on. `settled` is the
 * stretch of settled steps the run starts with (`settledSteps` from seq 0):
 * every decision there confirmed, every call (one a seq) confirmed, so only
 * the rows after it are looked up by seq and examined, and those before are
 * only counted (#39: a take of a long run sorted and counted all its rows;
 * then it still walked them all to find the few after the stretch).
 */
export async function recover(
  deps: RunDeps,
  state: RunState,
  settled: { seq: number; steps: number } = { seq: 0, steps: 0 },
): Promise<Blocked | Limited | undefined> {
  const { log } = deps;
  const runId = state.fence.runId;
  const journal = rowsFrom(state.journal, settled.seq);
  const effects = rowsFrom(state.effects, settled.seq);
  if (settled.seq === 0 && journal.length === 0 && effects.length === 0) return undefined;

  const count = <T extends { status: string }>(rows: T[], status: string) =>
    rows.filter((r) => r.status === status).length;
  const before = llmCallsOf(state);
  log.info("recovery", {
    run: runId,
    journal_confirmed: settled.steps + count(journal, "confirmed"),
    journal_intent: count(journal, "intent"),
    tools_confirmed: settled.seq + count(effects, "confirmed"),
    tools_intent: count(effects, "intent"),
    tools_failed: count(effects, "failed"),
    tools_flagged: count(effects, "flagged"),
  });

  // Each stranded call is settled on its own; a flagged call (or one flagged now) blocks the run once
  // every other call has been settled, and the first error that stops the worker stops recovery.
  let blocked: SideEffectRow | undefined;
  for (const row of effects) {
    if (row.status === "flagged") {
      blocked ??= row;
      continue;
    }
    if (row.status !== "intent") continue;
    // A call whose last request failed as in an outage, recorded with when it may go again: not stranded.
    // The step's gate sends it (with the step's other such calls) once due, and lets the run sleep until then.
    if (isAsleep(row)) continue;
    const settled = await resend(deps, state, row);
    if (settled.kind === "limited") {
      await waitForLimit(deps, state, settled);
      return settled;
    }
    if (settled.status === "flagged") blocked ??= settled;
  }
  if (blocked) return blockedBy(blocked);
  log.info("recovered", { run: runId, llm_calls_before: before, llm_calls_after: llmCallsOf(state) });
  return undefined;
}

/**
 * Re-sends a call a crash left at `intent` under its key, as far as it may go
 * ({@link send}), and returns its row as that left it: flagged at once when
 * its arguments no longer parse; or the limit that refused the re-send.
 */
async function resend(
  deps: RunDeps,
  state: RunState,
  row: SideEffectRow,
): Promise<SideEffectRow & { kind?: never } | Limited> {
  const { log } = deps;
  const checked = deps.tools.check(row.tool, row.args, { carried: true });
  if (!checked.ok) return await flag(deps, state, row, `it cannot be re-sent safely: ${checked.message}`);
  // A person who resolved the flag with --retry approved exactly one re-send: the approval is newer than
  // the last intent. Once that re-send's intent is written (intent_at moves past resolved_at), a crash
  // flags it again. A reopen allows one request past maxAttempts, until the next intent moves attempts
  // past the count it recorded.
  const resumed = {
    approved: row.resolved_at !== null && new Date(row.resolved_at) > new Date(row.intent_at),
    reopened: row.attempts_at_reopen === row.attempts,
  };
  const key = row.idempotency_key;
  const call = {
    key,
    seq: row.seq,
    tool: checked.tool,
    ...(checked.tool.name === row.tool ? {} : { decidedTool: row.tool }),
    rawArgs: row.args,
    args: checked.args,
    resumed,
  };
  log.info("resending", {
    run: state.fence.runId,
    seq: row.seq,
    key,
    tool: row.tool,
    attempts: row.attempts,
  });
  const settled = valueOf(await send(deps, state, call));
  if ("kind" in settled) return settled;
  if (settled.status !== "flagged") {
    const outcome = settled.status === "confirmed" ? settled.remote : settled.status;
    log.info("resent", { run: state.fence.runId, key, outcome });
  }
  return settled;
}
