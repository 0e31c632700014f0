/**
 * The tool calls of a decision, each with the seq (and so the row and the
 * idempotency key) it owns. The calls of the decision at seq `s` take seqs
 * `s`, `s + 1`, ..., in the order the model listed them, so a step with one
 * call keeps the key `<run_id>:<s>` and every key of a run keeps that form:
 * unique within the run, fixed by what the journal holds (the confirmed
 * decision never changes), never by the order calls were sent or finished.
 * The next decision is at `s + n`.
 *
 * @module
 */

import type { Decision, JournalRow, SideEffectRow } from "../store/rows.ts";
import type { Json } from "../agent/tools.ts";

/** One call of a decision with the seq it owns. */
export interface StepCall {
  /** The call's seq: its side_effects row, its key `<run_id>:<seq>`, its crash points' `CRASH_SEQ`. */
  seq: number;
  /** Its place in the decision (0 for the first). */
  index: number;
  /** The tool's name. */
  tool: string;
  /** The arguments as decided. */
  args: Json;
}

/** The calls of `decision`, taken at `seq`; none for a done decision. */
export function callsOf(decision: Decision, seq: number): StepCall[] {
  if ("tool" in decision) return [{ seq, index: 0, tool: decision.tool, args: decision.args }];
  if ("calls" in decision) {
    return decision.calls.map((c, index) => ({ seq: seq + index, index, tool: c.tool, args: c.args }));
  }
  return [];
}

/**
 * The tool calls decided in `journal`: each decision's {@link callsOf}, so a
 * decision of three calls counts three and an answer none. Never a seq: a
 * seq is owned by each answer too (a conversation's earlier answers among
 * them), so the next seq counts more than the calls.
 */
export function toolCallsIn(journal: Iterable<Pick<JournalRow, "seq" | "decision">>): number {
  let n = 0;
  for (const j of journal) if (j.decision) n += callsOf(j.decision, j.seq).length;
  return n;
}

/** How many seqs `decision` takes: one per call, one for done; the next decision is that far on. */
export function stepWidth(decision: Decision): number {
  return "calls" in decision ? Math.max(1, decision.calls.length) : 1;
}

/** True when `decision` calls tools (one or several). */
export function callsTools(decision: Decision): boolean {
  return "tool" in decision || "calls" in decision;
}

/**
 * The decision for these calls as it is stored: a single call in the seed's
 * shape `{ tool, args }`, two or more as `{ calls }`.
 */
export function decisionOf(calls: readonly { tool: string; args: Json }[]): Decision {
  if (calls.length === 1) return { tool: calls[0].tool, args: calls[0].args };
  return { calls: calls.map((c) => ({ tool: c.tool, args: c.args })) };
}

/**
 * The settled steps from `seq` on: each a confirmed decision of tool calls
 * whose every call is confirmed, in a row, up to `most` of them. Returns the
 * seq of the first step after them and how many there were. A worker that
 * takes a run goes on from there: such a step, replayed, would only log and
 * skip each call. An answer, an unconfirmed decision, or a call at any other
 * status ends the stretch.
 */
export function settledSteps(
  rows: { journal: ReadonlyMap<number, JournalRow>; effects: ReadonlyMap<number, SideEffectRow> },
  seq: number,
  most: number,
): { seq: number; steps: number } {
  let at = seq;
  let steps = 0;
  for (; steps < most; steps++) {
    const row = rows.journal.get(at);
    const decision = row?.status === "confirmed" ? row.decision : null;
    // Its calls own seqs at, at + 1, ... (callsOf's layout, without its array: a take walks every step of a long run).
    const width = decision && callsTools(decision) ? stepWidth(decision) : 0;
    let settled = width > 0;
    for (let i = 0; i < width && settled; i++) settled = rows.effects.get(at + i)?.status === "confirmed";
    if (!settled) break;
    at += width;
  }
  return { seq: at, steps };
}
