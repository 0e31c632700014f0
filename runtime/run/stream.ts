/**
 * Answers that stream: the text of a model's answer sent to watchers while
 * it is written, and a run's events (text, tool calls decided, tool results,
 * answers, status changes, resets) followed by a watcher.
 *
 * The worker's side (`DeltaPublisher`, deltas.ts): with `STREAM_DELTAS` on,
 * each model call's text is sent on the database's notification channel
 * (`store/notify.ts`), a piece at a time, each piece tagged with the run's
 * epoch, the step and the call's attempt (the journal row's `llm_attempts`,
 * counted across restarts), encoded as {@link encodeDelta} says. Nothing of
 * it is journaled: the journal gets the complete answer exactly as without
 * streaming.
 *
 * The watcher's state ({@link StreamFollower}; the watcher itself, which
 * listens, reads and polls, is `watch.ts`): events from the journal are told
 * once (by seq), and text is told only for steps the journal has not
 * settled. The reset rule: the text of a step showing is that of one (epoch,
 * attempt); text of a later one (the call was asked again, or the run was
 * taken over) first ends it with a `reset`, and text of an earlier one is
 * dropped; text a watcher dropped because its consumer fell behind ends it
 * with a `reset` too (`lagged`). So a watcher that concatenates the text
 * since a step's last reset never mixes two attempts.
 *
 * @module
 */

import { callsOf } from "./calls.ts";
import type { JournalRow, RunStatus, SideEffectRow, WatchedRun } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";

/** One piece of an answer's text, as it travels on the channel (decoded). */
export interface Delta {
  /** The run. */
  runId: string;
  /** The epoch of the worker that asked the model. */
  epoch: number;
  /** The step being decided. */
  seq: number;
  /** The model call's attempt for that step (1 for its first request, across restarts). */
  attempt: number;
  /** Where in the attempt's text the piece begins (characters, UTF-16 units). */
  offset: number;
  /** The text. */
  text: string;
}

/** A run's events, as {@link watchRun} (`client.stream`) tells them. */
export type StreamEvent =
  | {
    /** The run's status, told first and at every change (of the status, or of `idle`). */
    type: "status";
    status: RunStatus;
    epoch: number;
    error: string | null;
    /** True when the run is a conversation waiting for its next message (status `waiting`). */
    idle: boolean;
  }
  | {
    /** A piece of the answer being written for step `seq` by (epoch, attempt). */
    type: "delta";
    seq: number;
    epoch: number;
    attempt: number;
    offset: number;
    text: string;
  }
  | {
    /**
     * The text shown for step `seq` is void: the model call was asked again
     * (`retry`), the run was taken over (`takeover`), or text was dropped
     * because the consumer did not take it in time (`lagged`: the watcher
     * holds a bounded amount, see `watch.ts`). Drop what the step showed;
     * text of (`epoch`, `attempt`) follows (after a `lagged` reset, from
     * where the dropped text ended: its first `offset` is above 0). `attempt`
     * is 0 when a takeover was seen before its first piece of text.
     */
    type: "reset";
    seq: number;
    epoch: number;
    attempt: number;
    reason: "retry" | "takeover" | "lagged";
    /** Characters of text dropped. */
    dropped: number;
  }
  | {
    /** Step `seq` decided tool calls (journaled); `text` is what the model said with them. */
    type: "tool_calls";
    seq: number;
    calls: { seq: number; tool: string; args: Json }[];
  }
  | {
    /** A tool call settled (or changed status: flagged, failed, waiting, denied). */
    type: "tool_result";
    seq: number;
    key: string;
    tool: string;
    status: string;
    result: Json | null;
    error: string | null;
  }
  | {
    /** The final answer, as journaled: what the deltas of step `seq` since its last reset add up to. */
    type: "answer";
    seq: number;
    text: string;
  }
  | {
    /**
     * The run's rows could not be read: the database is away (refused,
     * reset, restarting). The watcher reads again in `retryInMs` and goes on
     * from where it was; text sent meanwhile is lost to it, the journal's
     * events are not.
     */
    type: "unreachable";
    /** What the read failed with. */
    error: string;
    /** When it reads again. */
    retryInMs: number;
  };

/** Where a watcher dropped text its consumer did not take in time: the step, whose text it was, where it ended. */
export interface TextGap {
  /** The step. */
  seq: number;
  /** The epoch of the latest text dropped. */
  epoch: number;
  /** Its model call's attempt. */
  attempt: number;
  /** Where the text dropped ends in that attempt's text (what follows begins there). */
  end: number;
}

/** Encodes a delta for the channel: short keys, the text cut by the caller to {@link PAYLOAD_TEXT_MAX}. */
export function encodeDelta(d: Delta): string {
  return JSON.stringify({ v: 1, r: d.runId, e: d.epoch, s: d.seq, a: d.attempt, o: d.offset, t: d.text });
}

/** Decodes a payload of the channel; undefined for anything that is not a delta of this version. */
export function decodeDelta(payload: string): Delta | undefined {
  let p: unknown;
  try {
    p = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (p === null || typeof p !== "object") return undefined;
  const o = p as Record<string, unknown>;
  const int = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
  if (o.v !== 1 || typeof o.r !== "string" || typeof o.t !== "string") return undefined;
  if (!int(o.e) || !int(o.s) || !int(o.a) || !int(o.o)) return undefined;
  return {
    runId: o.r,
    epoch: o.e as number,
    seq: o.s as number,
    attempt: o.a as number,
    offset: o.o as number,
    text: o.t,
  };
}

/** The statuses a stream ends at: the run will not change again by itself. */
export const STREAM_END_STATUSES: readonly RunStatus[] = ["done", "failed", "cancelled"];

interface Showing {
  epoch: number;
  attempt: number;
  /** Where the text shown ends. */
  end: number;
}

/** What a follower needs of the run's own row: `store.reads.watchRun`'s columns. */
export type FollowedRun = Pick<WatchedRun, "status" | "epoch" | "error"> & { idle?: boolean };

/** The tool-call statuses a row never leaves (nothing updates a confirmed or failed call). */
const FINAL_CALL_STATUSES: ReadonlySet<string> = new Set(["confirmed", "failed"]);

/**
 * The watcher's state: what it has told, so the journal's events are told
 * once and the text shown for a step is always one attempt's, and which
 * steps' rows may still change, so a later read need not read the others
 * again ({@link StreamFollower.mark}). Pure: fed the run's rows (all of
 * them, or only those at or after the mark) and the text in the order it was
 * received, it returns the events to tell.
 */
export class StreamFollower {
  readonly #runId: string;
  #status?: RunStatus;
  #idle = false;
  #epoch = 0;
  /** Steps whose decision the journal holds: no text is told for them any more. */
  readonly #decided = new Set<number>();
  /** Each tool call's status as last told, by seq. */
  readonly #effects = new Map<number, string>();
  /** The text showing for steps not yet decided. */
  readonly #showing = new Map<number, Showing>();
  /** Steps whose decision was asked for and not yet written (a journal row at `intent`). */
  readonly #asking = new Set<number>();
  /** Calls of written decisions that are not settled for good: no row yet, or one that may still change. */
  readonly #unsettled = new Set<number>();
  /** One past the highest step a row, or a written decision's call, names. */
  #next = 0;

  /** A follower of one run. */
  constructor(runId: string) {
    this.#runId = runId;
  }

  /** True once the run has been seen at a status streams end at. */
  get ended(): boolean {
    return this.#status !== undefined && STREAM_END_STATUSES.includes(this.#status);
  }

  /** True while the run, as last seen, waits (for a message, a person, a remote) or is blocked. */
  get waiting(): boolean {
    return this.#status === "waiting" || this.#status === "blocked";
  }

  /**
   * The lowest step whose rows may still change or appear: every row below
   * it is final (a confirmed decision, a confirmed or failed call) and no new
   * row can be written there, so a read of the rows at or after it misses
   * nothing. Rows at an old step that still change are those of the step
   * being decided and of calls not settled (one waiting on its remote, one
   * flagged for a person, one not yet sent because it waits for approval):
   * the mark stays at the lowest of them. A new decision is written only
   * after the calls before it have settled, so it comes after them all.
   */
  get mark(): number {
    let mark = this.#next;
    for (const seq of this.#asking) if (seq < mark) mark = seq;
    for (const seq of this.#unsettled) if (seq < mark) mark = seq;
    return mark;
  }

  /** True when step `seq` shows no text yet and is not decided: a delta for it opens a new model call. */
  isNewCall(seq: number): boolean {
    return !this.#decided.has(seq) && !this.#showing.has(seq);
  }

  /** The steps `journal` decides that were not told decided yet. */
  newlyDecided(journal: readonly JournalRow[]): Set<number> {
    return new Set(
      journal.filter((j) => j.status === "confirmed" && j.decision && !this.#decided.has(j.seq)).map((j) =>
        j.seq
      ),
    );
  }

  /** The events the run's rows, read now, add to what was told. */
  rows(
    run: FollowedRun,
    journal: readonly JournalRow[],
    effects: readonly SideEffectRow[],
    opts: { steps?: "only" } = {},
  ): StreamEvent[] {
    const out: StreamEvent[] = [];
    // `steps: "only"`: the steps' events alone, the run's epoch and status left for a later call.
    const whole = opts.steps !== "only";
    if (whole && run.epoch > this.#epoch) {
      // A takeover: text still showing for a step the journal has not decided was the old worker's
      // (a step it decides now was answered by that text: its answer follows, no reset).
      if (this.#epoch > 0) {
        const decided = this.newlyDecided(journal);
        for (const [seq, s] of this.#showing) {
          if (s.epoch < run.epoch && !decided.has(seq)) {
            out.push({
              type: "reset",
              seq,
              epoch: run.epoch,
              attempt: 0,
              reason: "takeover",
              dropped: s.end,
            });
            this.#showing.set(seq, { epoch: run.epoch, attempt: 0, end: 0 });
          }
        }
      }
      this.#epoch = run.epoch;
    }
    // Decisions and tool calls by seq: a step's calls follow its decision.
    const bySeq = new Map<number, { j?: JournalRow; e?: SideEffectRow }>();
    for (const j of journal) bySeq.set(j.seq, { ...bySeq.get(j.seq), j });
    for (const e of effects) bySeq.set(e.seq, { ...bySeq.get(e.seq), e });
    for (const seq of [...bySeq.keys()].sort((a, b) => a - b)) {
      const { j, e } = bySeq.get(seq)!;
      if (j) out.push(...this.#decision(j));
      if (e) out.push(...this.#call(e));
    }
    // Last: a run's end follows its answer.
    const idle = run.idle === true;
    if (whole && (run.status !== this.#status || idle !== this.#idle)) {
      this.#status = run.status;
      this.#idle = idle;
      out.push({ type: "status", status: run.status, epoch: run.epoch, error: run.error, idle });
    }
    return out;
  }

  /** A journal row: told once decided; until then its step may still change. */
  #decision(j: JournalRow): StreamEvent[] {
    this.#next = Math.max(this.#next, j.seq + 1);
    if (j.status !== "confirmed" || !j.decision) {
      this.#asking.add(j.seq);
      return [];
    }
    this.#asking.delete(j.seq);
    if (this.#decided.has(j.seq)) return [];
    this.#decided.add(j.seq);
    this.#showing.delete(j.seq);
    if ("done" in j.decision) return [{ type: "answer", seq: j.seq, text: j.decision.message }];
    const calls = callsOf(j.decision, j.seq);
    for (const c of calls) {
      // A call told settled already (in this read, or an earlier one) stays settled.
      if (!FINAL_CALL_STATUSES.has(this.#effects.get(c.seq) ?? "")) this.#unsettled.add(c.seq);
      this.#next = Math.max(this.#next, c.seq + 1);
    }
    return [{
      type: "tool_calls",
      seq: j.seq,
      calls: calls.map((c) => ({ seq: c.seq, tool: c.tool, args: c.args })),
    }];
  }

  /** A tool-call row: told at each change of status; settled for good once confirmed or failed. */
  #call(e: SideEffectRow): StreamEvent[] {
    this.#next = Math.max(this.#next, e.seq + 1);
    if (FINAL_CALL_STATUSES.has(e.status)) this.#unsettled.delete(e.seq);
    else this.#unsettled.add(e.seq);
    if (e.status === "intent" || this.#effects.get(e.seq) === e.status) return [];
    this.#effects.set(e.seq, e.status);
    return [{
      type: "tool_result",
      seq: e.seq,
      key: e.idempotency_key,
      tool: e.tool,
      status: e.status,
      result: e.result,
      error: e.error,
    }];
  }

  /** The events a delta received now adds: none, the delta, or a reset and then the delta. */
  delta(d: Delta): StreamEvent[] {
    if (d.runId !== this.#runId || this.#decided.has(d.seq) || d.epoch < this.#epoch) return [];
    const out: StreamEvent[] = [];
    const showing = this.#showing.get(d.seq);
    if (showing !== undefined && showing.attempt !== 0) {
      const order = d.epoch - showing.epoch || d.attempt - showing.attempt;
      // Text of an attempt that was superseded: a stalled old worker still writing.
      if (order < 0) return [];
      if (order > 0) {
        out.push({
          type: "reset",
          seq: d.seq,
          epoch: d.epoch,
          attempt: d.attempt,
          reason: d.epoch > showing.epoch ? "takeover" : "retry",
          dropped: showing.end,
        });
        this.#showing.delete(d.seq);
      }
    } else if (showing !== undefined && d.epoch < showing.epoch) {
      return [];
    }
    const current = this.#showing.get(d.seq);
    let { offset, text } = d;
    if (current && current.attempt !== 0) {
      // A piece told already (it cannot happen on one channel, but a payload seen twice is harmless).
      if (offset + text.length <= current.end) return out;
      if (offset < current.end) {
        text = text.slice(current.end - offset);
        offset = current.end;
      }
    }
    this.#showing.set(d.seq, { epoch: d.epoch, attempt: d.attempt, end: offset + text.length });
    if (d.epoch > this.#epoch) this.#epoch = d.epoch;
    out.push({ type: "delta", seq: d.seq, epoch: d.epoch, attempt: d.attempt, offset, text });
    return out;
  }

  /**
   * The events a gap in the text adds (text the watcher dropped because its
   * consumer fell behind): a `lagged` reset, so the consumer drops what the
   * step showed; the text that follows joins where the dropped text ended.
   * None for a step already decided (its journaled event says it all) or
   * for text of an attempt already superseded.
   */
  gap(g: TextGap): StreamEvent[] {
    if (this.#decided.has(g.seq) || g.epoch < this.#epoch) return [];
    const showing = this.#showing.get(g.seq);
    if (showing !== undefined && (g.epoch - showing.epoch || g.attempt - showing.attempt) < 0) return [];
    this.#showing.set(g.seq, { epoch: g.epoch, attempt: g.attempt, end: g.end });
    if (g.epoch > this.#epoch) this.#epoch = g.epoch;
    return [{
      type: "reset",
      seq: g.seq,
      epoch: g.epoch,
      attempt: g.attempt,
      reason: "lagged",
      dropped: showing?.end ?? 0,
    }];
  }
}
