/**
 * Answers that stream: the text of a model's answer sent to watchers while
 * it is written, and a run's events (text, tool calls decided, tool results,
 * answers, status changes, resets) followed by a watcher.
 *
 * The worker's side ({@link DeltaPublisher}): with `STREAM_DELTAS` on, each
 * model call's text is sent on the database's notification channel
 * (`store/notify.ts`), a piece at a time, coalesced within
 * {@link DELTA_BATCH_MS}, each piece tagged with the run's epoch, the step
 * and the call's attempt (the journal row's `llm_attempts`, counted across
 * restarts). Nothing of it is journaled: the journal gets the complete answer
 * exactly as without streaming.
 *
 * The watcher's side ({@link StreamFollower}, {@link watchRun}): it listens
 * first, then reads the journal, then takes the live tail, so a late watcher
 * gets the history without a gap; events from the journal are told once
 * (by seq), and text is told only for steps the journal has not settled. The
 * reset rule: the text of a step showing is that of one (epoch, attempt);
 * text of a later one (the call was asked again, or the run was taken over)
 * first ends it with a `reset`, and text of an earlier one is dropped. So a
 * watcher that concatenates the text since a step's last reset never mixes
 * two attempts.
 *
 * @module
 */

import type { Clock } from "./clock.ts";
import { callsOf } from "./calls.ts";
import type { Logger } from "./log.ts";
import { PAYLOAD_TEXT_MAX } from "./store/notify.ts";
import type { JournalRow, RunRow, RunStatus, SideEffectRow, Store } from "./store/store.ts";
import type { Json } from "./tools.ts";

/** How long a publisher gathers text before it sends (the first piece after a pause goes at once). */
export const DELTA_BATCH_MS = 30;

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
    /** The run's status, told first and at every change. */
    type: "status";
    status: RunStatus;
    epoch: number;
    error: string | null;
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
     * (`retry`) or the run was taken over (`takeover`). Drop what the step
     * showed; text of (`epoch`, `attempt`) follows. `attempt` is 0 when a
     * takeover was seen before its first piece of text.
     */
    type: "reset";
    seq: number;
    epoch: number;
    attempt: number;
    reason: "retry" | "takeover";
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
  };

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

/** Options of {@link DeltaPublisher}. */
export interface DeltaPublisherOptions {
  /** Sends one payload (the store's `stream.notify`). */
  notify: (payload: string) => Promise<void>;
  /** Time, for the batching window. */
  clock: Clock;
  /** Told (once) when a send fails; later text of this call is dropped. */
  log?: Logger;
  /** The model call: run, epoch, step, attempt. */
  call: Omit<Delta, "offset" | "text">;
  /** The batching window. Default {@link DELTA_BATCH_MS}. */
  batchMs?: number;
}

/**
 * Sends one model call's text on the channel as it arrives: the first
 * piece after a quiet spell at once, then what arrives within `batchMs` of
 * the last send in one payload (cut to {@link PAYLOAD_TEXT_MAX} characters),
 * one send at a time so they arrive in order. Best effort: a failed send is
 * logged, and the answer (the journal's business) goes on unharmed.
 */
export class DeltaPublisher {
  readonly #o: DeltaPublisherOptions;
  readonly #batchMs: number;
  #buffer = "";
  #offset = 0;
  #lastSentMs = -Infinity;
  #timer?: AbortController;
  #chain: Promise<void> = Promise.resolve();
  #failed = false;
  #closed = false;
  /** Payloads sent (or being sent). */
  sends = 0;

  /** A publisher for one model call. */
  constructor(opts: DeltaPublisherOptions) {
    this.#o = opts;
    this.#batchMs = opts.batchMs ?? DELTA_BATCH_MS;
  }

  /** Takes a piece of text (the planner's `onDelta`). */
  push = (text: string): void => {
    if (this.#closed || this.#failed || text === "") return;
    this.#buffer += text;
    if (this.#timer) return;
    const wait = this.#lastSentMs + this.#batchMs - this.#o.clock.now().getTime();
    if (wait <= 0) {
      this.#flush();
      return;
    }
    const timer = new AbortController();
    this.#timer = timer;
    this.#o.clock.sleep(wait, timer.signal).then(() => {
      if (this.#timer === timer) {
        this.#timer = undefined;
        this.#flush();
      }
      // Aborted by close(), which flushes itself.
    }, () => undefined);
  };

  /** Sends what is left and waits until every send has settled. */
  async close(): Promise<void> {
    if (this.#closed) return await this.#chain;
    this.#timer?.abort();
    this.#timer = undefined;
    this.#flush();
    this.#closed = true;
    await this.#chain;
  }

  #flush(): void {
    if (this.#buffer === "" || this.#failed) return;
    const text = this.#buffer;
    this.#buffer = "";
    this.#lastSentMs = this.#o.clock.now().getTime();
    // Bounded by the text: each pass takes up to PAYLOAD_TEXT_MAX characters, never half a surrogate pair.
    for (let at = 0; at < text.length;) {
      let end = Math.min(text.length, at + PAYLOAD_TEXT_MAX);
      if (end < text.length && /[\uD800-\uDBFF]/.test(text[end - 1])) end--;
      const payload = encodeDelta({ ...this.#o.call, offset: this.#offset, text: text.slice(at, end) });
      this.#offset += end - at;
      at = end;
      this.sends++;
      this.#chain = this.#chain.then(() => this.#failed ? undefined : this.#o.notify(payload)).catch(
        (err) => {
          if (!this.#failed) {
            this.#o.log?.warn("stream-failed", {
              run: this.#o.call.runId,
              seq: this.#o.call.seq,
              attempt: this.#o.call.attempt,
              error: (err as Error)?.message ?? String(err),
            });
          }
          this.#failed = true;
        },
      );
    }
  }
}

/** How long a watcher waits for its own notification to come back (see `watchRun`). */
const SYNC_WAIT_MS = 1_000;

/** The statuses a stream ends at: the run will not change again by itself. */
export const STREAM_END_STATUSES: readonly RunStatus[] = ["done", "failed", "cancelled"];

interface Showing {
  epoch: number;
  attempt: number;
  /** Where the text shown ends. */
  end: number;
}

/**
 * The watcher's state: what it has told, so the journal's events are told
 * once and the text shown for a step is always one attempt's. Pure: fed the
 * run's rows and the deltas in the order they were received, it returns the
 * events to tell.
 */
export class StreamFollower {
  readonly #runId: string;
  #status?: RunStatus;
  #epoch = 0;
  /** Steps whose decision the journal holds: no text is told for them any more. */
  readonly #decided = new Set<number>();
  /** Each tool call's status as last told, by seq. */
  readonly #effects = new Map<number, string>();
  /** The text showing for steps not yet decided. */
  readonly #showing = new Map<number, Showing>();

  /** A follower of one run. */
  constructor(runId: string) {
    this.#runId = runId;
  }

  /** True once the run has been seen at a status streams end at. */
  get ended(): boolean {
    return this.#status !== undefined && STREAM_END_STATUSES.includes(this.#status);
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
    run: RunRow,
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
      if (j && j.status === "confirmed" && j.decision && !this.#decided.has(seq)) {
        this.#decided.add(seq);
        this.#showing.delete(seq);
        if ("done" in j.decision) out.push({ type: "answer", seq, text: j.decision.message });
        else {
          out.push({
            type: "tool_calls",
            seq,
            calls: callsOf(j.decision, seq).map((c) => ({ seq: c.seq, tool: c.tool, args: c.args })),
          });
        }
      }
      if (e && e.status !== "intent" && this.#effects.get(seq) !== e.status) {
        this.#effects.set(seq, e.status);
        out.push({
          type: "tool_result",
          seq,
          key: e.idempotency_key,
          tool: e.tool,
          status: e.status,
          result: e.result,
          error: e.error,
        });
      }
    }
    // Last: a run's end follows its answer.
    if (whole && run.status !== this.#status) {
      this.#status = run.status;
      out.push({ type: "status", status: run.status, epoch: run.epoch, error: run.error });
    }
    return out;
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
}

/** Options of {@link watchRun}. */
export interface WatchOptions {
  /** Ends the stream (it returns, with nothing thrown). */
  signal?: AbortSignal;
  /**
   * How often the journal is read for decisions, tool results and status
   * changes while no text arrives. Default 250. Text arrives as it is sent.
   */
  pollMs?: number;
}

/**
 * A run's events: its history from the journal first, then the live tail,
 * until the run is done, failed or cancelled, or `signal` aborts. Listens
 * before it reads, so nothing written between the two is missed. Closes its
 * subscription however the iteration ends. Throws `STREAM_UNSUPPORTED` when
 * the store cannot listen.
 */
export async function* watchRun(
  store: Store,
  clock: Clock,
  runId: string,
  opts: WatchOptions = {},
): AsyncGenerator<StreamEvent, void, undefined> {
  const pollMs = opts.pollMs ?? 250;
  const follower = new StreamFollower(runId);
  const queue: Delta[] = [];
  let ring: (() => void) | undefined;
  let heardText = false;
  let ping = "";
  let pinged: (() => void) | undefined;
  const unlisten = await store.stream.listen((payload) => {
    if (payload === ping) return pinged?.();
    const d = decodeDelta(payload);
    if (d === undefined || d.runId !== runId) return;
    heardText = true;
    queue.push(d);
    ring?.();
  });
  // Waits until every notification committed before now has arrived: the journal's answer can be read
  // before the last pieces of its text are delivered (another connection), but a notification of ours,
  // sent after the read, arrives after them (notifications are delivered in commit order).
  const sync = async () => {
    ping = JSON.stringify({ v: 1, ping: crypto.randomUUID() });
    const heard = new Promise<void>((resolve) => pinged = resolve);
    const nap = new AbortController();
    try {
      // A watcher that cannot notify goes on without the wait: the text it shows may then end early.
      const sent = await store.stream.notify(ping).then(() => true, () => false);
      if (sent) await Promise.race([heard, clock.sleep(SYNC_WAIT_MS, nap.signal).catch(() => undefined)]);
    } finally {
      nap.abort();
      pinged = undefined;
    }
  };
  const stop = () => ring?.();
  opts.signal?.addEventListener("abort", stop);
  try {
    let readAt = -Infinity;
    // Bounded by the run's end or the signal.
    for (;;) {
      if (opts.signal?.aborted) return;
      const due = clock.now().getTime() - readAt >= pollMs;
      // A new model call's first text waits for the rows written before it (the last step's results).
      if (due || queue.some((d) => follower.isNewCall(d.seq))) {
        readAt = clock.now().getTime();
        const run = await store.getRun(runId);
        if (!run) return;
        const { journal, effects } = await store.loadHistory(runId);
        const deciding = follower.newlyDecided(journal);
        if (deciding.size > 0 && heardText) await sync();
        // Text of a step already showing, or decided in these rows, was written before them: told first,
        // so its answer follows its text. A new call's text follows the rows (the results before it).
        const early: Delta[] = [];
        const later: Delta[] = [];
        for (const d of queue.splice(0)) {
          (follower.isNewCall(d.seq) && !deciding.has(d.seq) ? later : early).push(d);
        }
        // A call that started and was decided between two reads: the steps before it are told first.
        const fresh = early.filter((d) => follower.isNewCall(d.seq)).map((d) => d.seq);
        if (fresh.length > 0) {
          const before = Math.min(...fresh);
          yield* follower.rows(
            run,
            journal.filter((j) => j.seq < before),
            effects.filter((e) => e.seq < before),
            {
              steps: "only",
            },
          );
        }
        for (const d of early) yield* follower.delta(d);
        yield* follower.rows(run, journal, effects);
        for (const d of later) yield* follower.delta(d);
        if (follower.ended) return;
      }
      // Bounded by the queue; a new call's text stays queued for the read above.
      while (queue.length > 0 && !follower.isNewCall(queue[0].seq)) yield* follower.delta(queue.shift()!);
      if (queue.length > 0) continue;
      const nap = new AbortController();
      await Promise.race([
        // The nap is aborted once the race is over: its rejection means nothing.
        clock.sleep(Math.max(0, readAt + pollMs - clock.now().getTime()), nap.signal).catch(() => undefined),
        new Promise<void>((resolve) => ring = resolve),
      ]);
      ring = undefined;
      nap.abort();
    }
  } finally {
    opts.signal?.removeEventListener("abort", stop);
    await unlisten();
  }
}
