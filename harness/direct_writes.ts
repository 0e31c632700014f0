/**
 * Shortcuts for tests and benchmarks that put a run in a given state through
 * the store directly, as a worker would write it, without driving a worker:
 * a claim that returns only the epoch, intents that return only their
 * attempt count, and a step's decision (intent and confirm) in one call. The
 * runtime itself uses the store's own methods, which return the whole row
 * ({@link Leases.claimRun}, {@link RunWrites.journalIntentRow},
 * {@link RunWrites.journalConfirm}, {@link RunWrites.effectIntentRow}).
 *
 * @module
 */

import type { Decision, Fence, JournalRow, Store, TokenSettlement } from "../runtime/store/store.ts";
import type { Json } from "../runtime/agent/tools.ts";

/**
 * Claims a run from `seenEpoch` (a compare-and-swap on it) for `owner`.
 * Returns the new epoch, or undefined when someone else claimed it first or
 * it is closed.
 */
export async function claim(
  store: Store,
  runId: string,
  seenEpoch: number,
  owner: string,
  now: Date,
): Promise<number | undefined> {
  return (await store.leases.claimRun(runId, seenEpoch, owner, now))?.epoch;
}

/**
 * Writes step `seq`'s journal intent (or counts one more attempt on it) under
 * the fence; returns the step's `llm_attempts`, or throws a `FencedError`.
 */
export async function journalIntent(store: Store, f: Fence, seq: number, now: Date): Promise<number> {
  return (await store.writes.journalIntentRow(f, seq, now)).llm_attempts;
}

/**
 * Writes a tool call's intent under its key (or counts one more attempt on
 * it) under the fence; returns the attempt number, or throws a `FencedError`.
 */
export async function effectIntent(
  store: Store,
  f: Fence,
  e: { key: string; seq: number; tool: string; args: Json },
  now: Date,
): Promise<number> {
  return (await store.writes.effectIntentRow(f, e, now)).attempts;
}

/**
 * Writes step `seq`'s decision as a worker would, under the fence: its
 * journal intent (or one more attempt on it), then its confirm. Returns the
 * confirmed row, or throws a `FencedError`.
 */
export async function writeDecision(
  store: Store,
  f: Fence,
  seq: number,
  decided: { decision: Decision; usage?: Json; tokens?: TokenSettlement },
  now: Date,
): Promise<JournalRow> {
  const intent = await store.writes.journalIntentRow(f, seq, now);
  return await store.writes.journalConfirm(f, intent, { usage: undefined, ...decided }, now);
}
