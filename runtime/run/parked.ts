/**
 * Runs a worker host keeps in memory after letting them go, so that when it
 * takes one again (nobody else having taken it meanwhile: its epoch is the
 * next, its last owner this host) it goes on without reading the run's whole
 * history back. Two kinds are parked:
 *
 * - a conversation waiting for its next message, with its messages: only the
 *   messages sent since are read (conversations/turns.ts);
 * - a run let go to wait (a signal, a remote's job, a person, an outage's
 *   retry, a limit): only the rows of the step it waited at, and after, are
 *   read again (`historyFrom`, one statement), the only rows anyone but the
 *   run's holder writes (a webhook settling a call, say). Every earlier step
 *   was settled for good before the run went on past it.
 *
 * Either way the database work of a take stays the same however long the
 * run grows.
 *
 * @module
 */

import type { RunState } from "./context.ts";

/**
 * A run its host let go and keeps in memory, as its worker last wrote it: its
 * rows by seq, the transcript of its settled steps, and a conversation's
 * messages (absent for a run let go to wait).
 */
export type ParkedRun =
  & Pick<RunState, "journal" | "effects" | "transcript" | "conversation" | "settledAhead">
  & {
    /** The epoch the run was let go under. */
    epoch: number;
    /**
     * The step it was let go at: a conversation's last answer (replayed, then
     * the next message taken), or the step a waiting run waits at.
     */
    seq: number;
  };

/** What a host parks of a run its worker let go to wait at step `seq`: none for a conversation (parked at its answers). */
export function parkedAt(state: RunState, seq: number): ParkedRun | undefined {
  if (state.conversation) return undefined;
  return {
    epoch: state.fence.epoch,
    journal: state.journal,
    effects: state.effects,
    seq,
    ...(state.transcript ? { transcript: state.transcript } : {}),
    ...(state.settledAhead ? { settledAhead: state.settledAhead } : {}),
  };
}
