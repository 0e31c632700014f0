/**
 * A watcher: a run's events as they happen, for `client.stream`, the page's
 * `GET /api/runs/:id/stream` and `deno task watch`. The events, the reset
 * rule and the state that tells each event once are `stream.ts`'s
 * ({@link StreamFollower}); here is what a watcher reads, when, and what it
 * holds.
 *
 * - **Listen, then read.** It listens on the stream channel first, then reads
 *   the run's whole history once, so a late watcher gets it without a gap.
 * - **Then only what may have changed.** Every later read is the run's own
 *   row without its input and output (`watch-run`) and the rows at or after
 *   the follower's mark (`read-history-from`): the lowest step whose rows may
 *   still change or appear. A run that waits for its next message has every
 *   row settled, so such a read returns none.
 * - **When.** Every `pollMs` while the run works (pending, running), every
 *   `idlePollMs` while it waits or is blocked; text of a new model call wakes
 *   it at once (the rows written before that call are read first).
 * - **What it holds.** Text received and not yet taken by the consumer waits
 *   in a {@link DeltaBuffer} of at most `bufferPieces` pieces and
 *   `bufferChars` characters; past either, what it holds is dropped and the
 *   consumer is told a `lagged` reset when it next takes an event. A
 *   consumer that stops reading costs the process that bound, not the run's
 *   text.
 * - **A database that goes away.** A read that fails because the database
 *   cannot be reached (`isUnreachable`) is told as an `unreachable` event
 *   and tried again with backoff (250 ms doubling to 5 s), for up to
 *   `retryForMs`; when it succeeds the watcher goes on from its mark. The
 *   listening connection comes back by itself (postgres.js listens again);
 *   text sent meanwhile is lost to the watcher, the journal's events are not.
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import { RuntimeError, StoreError } from "../base/errors.ts";
import { isUnreachable } from "../store/away.ts";
import type { JournalRow, SideEffectRow, Store, WatchedRun } from "../store/store.ts";
import { decodeDelta, type Delta, type StreamEvent, StreamFollower, type TextGap } from "../run/stream.ts";

/** The defaults of {@link WatchOptions}, in one place. */
export const WATCH_DEFAULTS: Readonly<Required<Omit<WatchOptions, "signal">>> = Object.freeze({
  pollMs: 250,
  idlePollMs: 2_000,
  bufferPieces: 1_024,
  bufferChars: 262_144,
  retryForMs: 600_000,
});

/** The wait before the next read after the n-th failed read of an outage: 250 ms, doubling, at most 5 s. */
export function unreachableBackoffMs(failures: number): number {
  return Math.min(5_000, 250 * 2 ** Math.min(5, Math.max(0, failures - 1)));
}

/** How long a watcher waits for its own notification to come back (see `sync` in {@link watchRun}). */
const SYNC_WAIT_MS = 1_000;

/** Options of {@link watchRun}. */
export interface WatchOptions {
  /** Ends the stream (it returns, with nothing thrown). */
  signal?: AbortSignal;
  /**
   * How often the run's rows are read while it works (pending or running)
   * and no text arrives. Default 250. Text arrives as it is sent.
   */
  pollMs?: number;
  /**
   * How often they are read while the run waits (for its next message, a
   * person's answer, a remote) or is blocked. Default 2,000. The first text
   * of a new model call wakes the watcher at once.
   */
  idlePollMs?: number;
  /** The most pieces of text held for a consumer that has not taken them. Default 1,024. */
  bufferPieces?: number;
  /** The most characters of text held for it. Default 262,144. */
  bufferChars?: number;
  /**
   * How long the watcher keeps reading again while the database cannot be
   * reached, from the first failed read of an outage; past it, it throws
   * `DB_UNREACHABLE`. Default 600,000 (ten minutes).
   */
  retryForMs?: number;
}

type WatchSettings = Required<Omit<WatchOptions, "signal">>;

/** The options with their defaults; `WATCH_INVALID` naming every value out of range. */
function watchSettings(runId: string, opts: WatchOptions): WatchSettings {
  const s: WatchSettings = {
    pollMs: opts.pollMs ?? WATCH_DEFAULTS.pollMs,
    idlePollMs: opts.idlePollMs ?? WATCH_DEFAULTS.idlePollMs,
    bufferPieces: opts.bufferPieces ?? WATCH_DEFAULTS.bufferPieces,
    bufferChars: opts.bufferChars ?? WATCH_DEFAULTS.bufferChars,
    retryForMs: opts.retryForMs ?? WATCH_DEFAULTS.retryForMs,
  };
  const problems = (Object.entries(s) as [keyof WatchSettings, number][])
    .filter(([name, v]) => !Number.isSafeInteger(v) || v < (name === "retryForMs" ? 0 : 1))
    .map(([name, v]) =>
      `'${name}' must be an integer ${name === "retryForMs" ? 0 : 1} or more: current value is ${v}`
    );
  if (problems.length > 0) {
    throw new RuntimeError("WATCH_INVALID", `Cannot watch run ${runId} as ${problems.join("; ")}`);
  }
  return s;
}

/** What a watcher holds for its consumer: a piece of text received, or a gap where pieces were dropped. */
export type HeldText = Delta | TextGap;

/** True for a gap. */
function isGap(h: HeldText): h is TextGap {
  return !("text" in h);
}

/** True when gap `a` is of later text than gap `b` (by step, epoch, attempt, then where it ends). */
function laterGap(a: TextGap, b: TextGap): boolean {
  return (a.seq - b.seq || a.epoch - b.epoch || a.attempt - b.attempt || a.end - b.end) > 0;
}

/**
 * The text a watcher holds until its consumer takes it, in the order it
 * was received, bounded: past `pieces` pieces or `chars` characters, all it
 * holds is dropped and replaced by one gap, for the latest step it held
 * text of (an earlier step's text is void by then: that step is decided, and
 * its journaled event says what it was). So it never holds more than
 * `pieces` pieces (and one gap) or `chars` characters.
 */
export class DeltaBuffer {
  /** The most pieces held. */
  readonly maxPieces: number;
  /** The most characters held. */
  readonly maxChars: number;
  #held: HeldText[] = [];
  #pieces = 0;
  #chars = 0;
  /** Pieces dropped since the buffer was made. */
  dropped = 0;

  /** An empty buffer with these bounds. */
  constructor(limits: { pieces: number; chars: number }) {
    this.maxPieces = limits.pieces;
    this.maxChars = limits.chars;
  }

  /** Entries held (pieces and gaps). */
  get length(): number {
    return this.#held.length;
  }

  /** Pieces held. */
  get pieces(): number {
    return this.#pieces;
  }

  /** Characters of text held. */
  get chars(): number {
    return this.#chars;
  }

  /** Holds a piece; past a bound, drops everything held for one gap. */
  push(d: Delta): void {
    this.#held.push(d);
    this.#pieces++;
    this.#chars += d.text.length;
    if (this.#pieces > this.maxPieces || this.#chars > this.maxChars) this.#overflow();
  }

  #overflow(): void {
    let gap: TextGap | undefined;
    for (const h of this.#held) {
      const g = isGap(h)
        ? h
        : { seq: h.seq, epoch: h.epoch, attempt: h.attempt, end: h.offset + h.text.length };
      if (gap === undefined || laterGap(g, gap)) gap = g;
    }
    this.dropped += this.#pieces;
    this.#held = gap ? [gap] : [];
    this.#pieces = 0;
    this.#chars = 0;
  }

  /** The step of the first entry held, if any. */
  firstSeq(): number | undefined {
    return this.#held[0]?.seq;
  }

  /** True when an entry held is of a step `pred` accepts. */
  some(pred: (seq: number) => boolean): boolean {
    return this.#held.some((h) => pred(h.seq));
  }

  /** Takes the first entry. */
  shift(): HeldText | undefined {
    const h = this.#held.shift();
    if (h !== undefined && !isGap(h)) {
      this.#pieces--;
      this.#chars -= h.text.length;
    }
    return h;
  }

  /** Takes every entry. */
  takeAll(): HeldText[] {
    const all = this.#held;
    this.#held = [];
    this.#pieces = 0;
    this.#chars = 0;
    return all;
  }
}

/** The events of an entry held. */
function tellHeld(follower: StreamFollower, h: HeldText): StreamEvent[] {
  return isGap(h) ? follower.gap(h) : follower.delta(h);
}

/** One read of the run: its row, and its rows (all the first time, then those at or after the mark). */
interface RunRead {
  run: WatchedRun;
  journal: JournalRow[];
  effects: SideEffectRow[];
}

/**
 * The events of one read and of the text held with it, in the order a
 * reader expects: text of a step already showing (or decided in these
 * rows) was written before them and is told first, so an answer follows its
 * text; a new model call's text follows the rows (the results before it).
 */
function* tellRead(
  follower: StreamFollower,
  read: RunRead,
  held: HeldText[],
  deciding: ReadonlySet<number>,
): Generator<StreamEvent> {
  const { run, journal, effects } = read;
  const early: HeldText[] = [];
  const later: HeldText[] = [];
  for (const h of held) (follower.isNewCall(h.seq) && !deciding.has(h.seq) ? later : early).push(h);
  // A call that started and was decided between two reads: the steps before it are told first.
  const fresh = early.filter((h) => follower.isNewCall(h.seq)).map((h) => h.seq);
  if (fresh.length > 0) {
    const before = Math.min(...fresh);
    yield* follower.rows(
      run,
      journal.filter((j) => j.seq < before),
      effects.filter((e) => e.seq < before),
      { steps: "only" },
    );
  }
  for (const h of early) yield* tellHeld(follower, h);
  yield* follower.rows(run, journal, effects);
  for (const h of later) yield* tellHeld(follower, h);
}

/**
 * A run's events: its history from the journal first, then the live tail,
 * until the run is done, failed or cancelled, or `signal` aborts (see the
 * module's notes for what it reads and when). Listens before it reads, so
 * nothing written between the two is missed. Closes its subscription however
 * the iteration ends. Throws `WATCH_INVALID` for an option out of range,
 * `STREAM_UNSUPPORTED` when the store cannot listen, and `DB_UNREACHABLE`
 * when the database stayed away longer than `retryForMs`.
 */
export async function* watchRun(
  store: Store,
  clock: Clock,
  runId: string,
  opts: WatchOptions = {},
): AsyncGenerator<StreamEvent, void, undefined> {
  const settings = watchSettings(runId, opts);
  const follower = new StreamFollower(runId);
  const buffer = new DeltaBuffer({ pieces: settings.bufferPieces, chars: settings.bufferChars });
  const channel = await Listening.open(store, clock, runId, buffer);
  let first = true;
  const read = async (): Promise<RunRead | undefined> => {
    const run = await store.reads.watchRun(runId);
    if (!run) return undefined;
    const rows = first
      ? await store.reads.loadHistory(runId)
      : await store.reads.historyFrom(runId, follower.mark);
    first = false;
    return { run, ...rows };
  };
  const stop = () => channel.wake();
  opts.signal?.addEventListener("abort", stop);
  try {
    let nextReadAt = -Infinity;
    // The outage under way: when its first read failed, and how many have.
    let outage: { sinceMs: number; failures: number } | undefined;
    // Bounded by the run's end, the signal, or an outage longer than retryForMs.
    for (;;) {
      if (opts.signal?.aborted) return;
      const now = clock.now().getTime();
      // A new model call's first text waits for the rows written before it (the last step's results).
      if (now >= nextReadAt || (outage === undefined && buffer.some((seq) => follower.isNewCall(seq)))) {
        let got: RunRead | undefined;
        try {
          got = await read();
        } catch (err) {
          outage = stillAway(err, outage, now, runId, settings.retryForMs);
          const retryInMs = unreachableBackoffMs(outage.failures);
          nextReadAt = now + retryInMs;
          yield { type: "unreachable", error: (err as Error)?.message ?? String(err), retryInMs };
          continue;
        }
        outage = undefined;
        if (!got) return;
        const deciding = follower.newlyDecided(got.journal);
        if (deciding.size > 0 && channel.heardText) await channel.sync();
        yield* tellRead(follower, got, buffer.takeAll(), deciding);
        if (follower.ended) return;
        nextReadAt = clock.now().getTime() + (follower.waiting ? settings.idlePollMs : settings.pollMs);
      }
      // Bounded by the buffer; a new call's text stays held for the read above.
      for (
        let seq = buffer.firstSeq();
        seq !== undefined && !follower.isNewCall(seq);
        seq = buffer.firstSeq()
      ) {
        yield* tellHeld(follower, buffer.shift()!);
      }
      // A new call's text is read for at once, unless the database is away (then at the next try).
      if (buffer.length > 0 && outage === undefined) continue;
      await channel.napUntil(nextReadAt);
    }
  } finally {
    opts.signal?.removeEventListener("abort", stop);
    await channel.close();
  }
}

/**
 * A read that failed while the database is away: the outage counted from
 * its first failed read, and given up past `retryForMs` (`DB_UNREACHABLE`).
 * Any other error is thrown as it is.
 */
function stillAway(
  err: unknown,
  outage: { sinceMs: number; failures: number } | undefined,
  now: number,
  runId: string,
  retryForMs: number,
): { sinceMs: number; failures: number } {
  if (!isUnreachable(err)) throw err;
  const away = { sinceMs: outage?.sinceMs ?? now, failures: (outage?.failures ?? 0) + 1 };
  if (now - away.sinceMs >= retryForMs) {
    throw new StoreError(
      "DB_UNREACHABLE",
      `Cannot watch run ${runId}: the database could not be read for ${now - away.sinceMs} ms ` +
        `(${away.failures} reads; the last failed with: ${
          (err as Error)?.message ?? String(err)
        }). Watch it ` +
        `again once the database is back`,
      { cause: err },
    );
  }
  return away;
}

/**
 * A watcher's side of the notification channel: a run's text as it arrives,
 * into the watcher's buffer; a ping to wait on every notification committed
 * before it; and a nap that new text (or {@link Listening.wake}) ends.
 */
class Listening {
  /** True once any text of the run has arrived. */
  heardText = false;
  #ring?: () => void;
  #ping = "";
  #pinged?: () => void;
  #closed = false;
  #unlisten: () => Promise<void> = () => Promise.resolve();

  private constructor(private readonly store: Store, private readonly clock: Clock) {}

  /** Listens for `runId`'s text, pushing each piece into `buffer`. */
  static async open(store: Store, clock: Clock, runId: string, buffer: DeltaBuffer): Promise<Listening> {
    const l = new Listening(store, clock);
    l.#unlisten = await store.stream.listen((payload) => {
      if (l.#closed) return;
      if (payload === l.#ping) return l.#pinged?.();
      const d = decodeDelta(payload);
      if (d === undefined || d.runId !== runId) return;
      l.heardText = true;
      buffer.push(d);
      l.#ring?.();
    });
    return l;
  }

  /**
   * Waits until every notification committed before now has arrived: the
   * journal's answer can be read before the last pieces of its text are
   * delivered (another connection), but a notification of ours, sent after
   * the read, arrives after them (notifications are delivered in commit order).
   */
  async sync(): Promise<void> {
    this.#ping = JSON.stringify({ v: 1, ping: crypto.randomUUID() });
    const heard = new Promise<void>((resolve) => this.#pinged = resolve);
    const nap = new AbortController();
    try {
      // A watcher that cannot notify goes on without the wait: the text it shows may then end early.
      const sent = await this.store.stream.notify(this.#ping).then(() => true, () => false);
      if (sent) {
        await Promise.race([
          heard,
          this.clock.sleep(SYNC_WAIT_MS, nap.signal).catch(() => undefined),
        ]);
      }
    } finally {
      nap.abort();
      this.#pinged = undefined;
    }
  }

  /** Sleeps until `untilMs`, new text, or {@link wake}. */
  async napUntil(untilMs: number): Promise<void> {
    const nap = new AbortController();
    await Promise.race([
      // The nap is aborted once the race is over: its rejection means nothing.
      this.clock.sleep(Math.max(0, untilMs - this.clock.now().getTime()), nap.signal).catch(() => undefined),
      new Promise<void>((resolve) => this.#ring = resolve),
    ]);
    this.#ring = undefined;
    nap.abort();
  }

  /** Ends a nap at once. */
  wake(): void {
    this.#ring?.();
  }

  /** Stops listening. With the database away there is nothing to unlisten: its connection is gone with it. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#unlisten().catch((err) => {
      if (!isUnreachable(err)) throw err;
    });
  }
}
