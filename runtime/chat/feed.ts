/**
 * A turn's chunks, followed once per process: one watcher of the run
 * (`client.stream`) per turn being read, its chunks kept in order in memory,
 * read by every response that streams the turn from any index. So two tabs,
 * a retried POST and a resume share one watcher, and a resume from index N in
 * the same process is exact. The process that streams a turn from its start
 * writes its chunks to the chat chunk log (chunk_log.ts); a process that did
 * not serves the log and polls it until `finish`, and takes the turn over
 * when the log's writer went away (docs/chat.md, "Resuming: the chunk log").
 *
 * @module
 */

import type { Client } from "../client/client.ts";
import { isUnreachable } from "../store/away.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { ChatChunker, type UIChunk } from "./chunks.ts";
import { ChunkWriter, continuation } from "./chunk_log.ts";

/** How often a feed that follows another writer's log reads it for more, in ms. */
export const CHUNK_POLL_MS = 100;
/** How long another writer's log stays still before this process takes the turn over, in ms. */
export const CHAT_TAKEOVER_MS: number = DEFAULTS.chatTakeoverMs;

/** How long a feed nobody reads keeps following its run before it stops. */
export const FEED_LINGER_MS: number = DEFAULTS.chatLingerMs;
/** The most turns a process keeps the chunks of (the oldest finished ones go first). */
export const FEEDS_MAX = 256;

/** One turn's chunks, as they are derived. */
export class TurnFeed {
  /** The run. */
  readonly runId: string;
  /** The turn. */
  readonly turn: number;
  /** The chunks so far. */
  readonly chunks: UIChunk[] = [];
  /** True once the turn's last chunk (`finish`) is in, or the feed stopped. */
  done = false;
  /** Why the feed stopped early (the run gone, the database away too long). */
  failure?: string;
  readonly #stop = new AbortController();
  #waiters: (() => void)[] = [];
  #readers = 0;
  #idleTimer?: ReturnType<typeof setTimeout>;
  #writer?: ChunkWriter;
  /** Settles when the feed's watcher has ended. */
  readonly finished: Promise<void>;

  /** Starts following turn `turn` of run `runId`. */
  constructor(
    private readonly client: Client,
    runId: string,
    turn: number,
    private readonly lingerMs: number,
    private readonly takeoverMs: number = CHAT_TAKEOVER_MS,
  ) {
    this.runId = runId;
    this.turn = turn;
    this.finished = this.#follow();
  }

  async #follow(): Promise<void> {
    const log = this.client.store.chatChunks;
    try {
      const stored = await log.read(this.runId, this.turn, 0) as UIChunk[];
      if (stored.length === 0) {
        // Nobody wrote this turn: this process streams it live and writes it.
        this.#writer = new ChunkWriter(log, this.runId, this.turn, 0);
        await this.#derive((chunks) => this.#emit(chunks), this.#stop.signal);
      } else await this.#fromLog(stored);
    } catch (err) {
      this.failure = (err as Error)?.message ?? String(err);
      if (!isUnreachable(err) && !this.#stop.signal.aborted) {
        this.#push([{ type: "error", errorText: this.failure }]);
      }
    } finally {
      await this.#writer?.flush();
      this.done = true;
      this.#wake();
      clearTimeout(this.#idleTimer);
    }
  }

  /** The turn's chunks as derived from the journal and the live text, each batch given to `emit`. */
  async #derive(emit: (chunks: UIChunk[]) => void, signal: AbortSignal): Promise<void> {
    const chunker = new ChatChunker(this.runId, this.turn);
    for await (const e of this.client.stream(this.runId, { signal })) {
      emit(chunker.event(e));
      if (chunker.finished) break;
      const approvalsMayMove = e.type === "tool_calls" || e.type === "status" || e.type === "tool_result";
      if (approvalsMayMove && chunker.wantsCallStates()) {
        const [approvals, children] = await Promise.all([
          this.client.operators.approvals(this.runId),
          this.client.reads.children(this.runId),
        ]);
        emit(chunker.callStates(
          approvals.map((a) => ({
            key: a.idempotency_key,
            status: a.status,
            reason: a.reason,
            decidedAt: a.decided_at,
          })),
          children,
        ));
      }
    }
  }

  /**
   * A turn another writer logged (this process did not stream it from its
   * start): the stored chunks, then the log polled for more until `finish`.
   * Meanwhile the turn is derived here too; when the log has not grown for
   * `takeoverMs` and the derivation has chunks after where the log stopped
   * (its writer went away), this process continues from there
   * ({@link continuation}) and becomes the turn's writer.
   */
  async #fromLog(stored: UIChunk[]): Promise<void> {
    const log = this.client.store.chatChunks;
    this.#push(stored);
    if (stored.at(-1)?.type === "finish") return; // the whole turn: nothing to follow
    const derived: UIChunk[] = [];
    const deriveStop = new AbortController();
    const stopDeriving = () => deriveStop.abort();
    this.#stop.signal.addEventListener("abort", stopDeriving);
    let failed: unknown;
    const deriving = this.#derive(
      (chunks) => this.#writer ? this.#emit(chunks) : derived.push(...chunks),
      deriveStop.signal,
    ).catch((err) => failed = err);
    try {
      // Bounded by the turn: its finish in the log, this process taking over, a failure, or the feed stopped.
      for (let quiet = 0; this.chunks.at(-1)?.type !== "finish" && !this.#stop.signal.aborted;) {
        await new Promise((resolve) => setTimeout(resolve, CHUNK_POLL_MS));
        if (failed !== undefined) throw failed;
        const more = await log.read(this.runId, this.turn, this.chunks.length) as UIChunk[];
        if (more.length > 0) {
          quiet = 0;
          this.#push(more);
          continue;
        }
        if (++quiet * CHUNK_POLL_MS < this.takeoverMs) continue;
        const rest = continuation(this.chunks, derived);
        if (rest === undefined) continue;
        this.#writer = new ChunkWriter(log, this.runId, this.turn, this.chunks.length);
        this.#emit(rest);
        await deriving;
        if (failed !== undefined) throw failed;
        return;
      }
    } finally {
      deriveStop.abort();
      this.#stop.signal.removeEventListener("abort", stopDeriving);
      await deriving;
    }
  }

  #emit(chunks: UIChunk[]): void {
    this.#push(chunks);
    this.#writer?.add(chunks);
  }

  #push(chunks: UIChunk[]): void {
    if (chunks.length === 0) return;
    this.chunks.push(...chunks);
    this.#wake();
  }

  #wake(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const f of w) f();
  }

  /**
   * The chunks from index `from` on, as they come, until the turn's end or
   * `signal` aborts. A negative `from` counts back from the chunks there are
   * when it is called (`-2`: the last two).
   */
  async *read(from: number, signal?: AbortSignal): AsyncGenerator<UIChunk, void, undefined> {
    let at = from < 0 ? Math.max(0, this.chunks.length + from) : from;
    this.#readers++;
    clearTimeout(this.#idleTimer);
    const wake = () => this.#wake();
    signal?.addEventListener("abort", wake);
    try {
      // Bounded by the turn: it ends with its finish, a failure, or the reader going away.
      for (;;) {
        while (at < this.chunks.length) yield this.chunks[at++];
        if (this.done || signal?.aborted) return;
        await new Promise<void>((resolve) => this.#waiters.push(resolve));
      }
    } finally {
      signal?.removeEventListener("abort", wake);
      this.#readers--;
      if (this.#readers === 0 && !this.done) {
        this.#idleTimer = setTimeout(() => this.stop(), this.lingerMs);
      }
    }
  }

  /** Stops following the run (the chunks so far stay). */
  stop(): void {
    this.#stop.abort();
  }
}

/** The feeds of one process, by run and turn, at most {@link FEEDS_MAX}. */
export class Feeds {
  readonly #feeds = new Map<string, TurnFeed>();

  /** The feeds of `client`'s runs. */
  constructor(private readonly client: Client, private readonly lingerMs = FEED_LINGER_MS) {}

  /** The feed of turn `turn` of `runId`: the one kept, or a new one (a stopped one is started again). */
  get(runId: string, turn: number): TurnFeed {
    const id = `${turn}@${runId}`;
    const kept = this.#feeds.get(id);
    // A feed still following, or one that reached its turn's end, is the turn's; a stopped one starts again.
    if (kept && (!kept.done || kept.chunks.at(-1)?.type === "finish")) {
      this.#feeds.delete(id);
      this.#feeds.set(id, kept);
      return kept;
    }
    const feed = new TurnFeed(this.client, runId, turn, this.lingerMs);
    this.#feeds.set(id, feed);
    this.#evict();
    return feed;
  }

  #evict(): void {
    // Bounded by FEEDS_MAX: the oldest finished feeds go first; an unfinished one is stopped and dropped.
    for (const [id, feed] of this.#feeds) {
      if (this.#feeds.size <= FEEDS_MAX) return;
      feed.stop();
      this.#feeds.delete(id);
    }
  }

  /** Stops every feed and waits for their watchers to end. */
  async close(): Promise<void> {
    const all = [...this.#feeds.values()];
    this.#feeds.clear();
    for (const f of all) f.stop();
    await Promise.all(all.map((f) => f.finished));
  }
}
