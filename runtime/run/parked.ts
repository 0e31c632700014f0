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

/**
 * The runs a host keeps parked, oldest first, bounded twice: at most
 * `maxRuns` runs, and at most `maxRows` rows among them (a run's journal and
 * tool-call rows and a conversation's messages). A parked run holds every row
 * it has, about a kilobyte each (a run of 10,000 steps, 20,000 rows, held 19
 * MB more than one of 15: `bench:long`), so a count alone let a host of long
 * runs grow without bound while they waited. Past either bound the oldest go;
 * a run not kept is taken again the long way, its history read back.
 */
export class ParkedRuns {
  readonly #runs = new Map<string, { parked: ParkedRun; rows: number }>();
  #rows = 0;

  constructor(readonly maxRuns: number, readonly maxRows: number) {}

  /** Runs kept. */
  get size(): number {
    return this.#runs.size;
  }

  /** Rows kept, over every run. */
  get rows(): number {
    return this.#rows;
  }

  /** The run parked as `runId`, which is no longer kept; undefined if none is. */
  take(runId: string): ParkedRun | undefined {
    const kept = this.#runs.get(runId);
    if (kept === undefined) return undefined;
    this.#runs.delete(runId);
    this.#rows -= kept.rows;
    return kept.parked;
  }

  /** Keeps `parked` as the newest; drops the oldest (it too, if it alone is past `maxRows`) while past a bound. */
  park(runId: string, parked: ParkedRun): void {
    this.take(runId);
    const rows = rowsOf(parked);
    this.#runs.set(runId, { parked, rows });
    this.#rows += rows;
    // Bounded: each turn drops one run, and there are no more than were kept.
    while (this.#runs.size > this.maxRuns || this.#rows > this.maxRows) {
      this.take(this.#runs.keys().next().value!);
    }
  }
}

/** The rows a parked run holds: its journal's, its tool calls', and a conversation's messages. */
function rowsOf(parked: ParkedRun): number {
  return parked.journal.size + parked.effects.size + (parked.conversation?.messages.length ?? 0);
}
