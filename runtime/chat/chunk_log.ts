/**
 * A turn's chunks kept in the chat chunk log (`chat_chunks`): the writer that
 * appends what a feed emits in batches, and where a process that takes a
 * turn over from a writer that went away continues.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { ChatChunks } from "../store/chat_chunks.ts";
import type { UIChunk } from "./chunks.ts";

/** How often a feed's writer appends what was emitted since its last batch, in ms. */
export const CHUNK_FLUSH_MS = 100;

/**
 * Appends a turn's chunks from index `from` on, in batches: every
 * {@link CHUNK_FLUSH_MS} and at {@link ChunkWriter.close}. When another
 * writer wrote an index first, its batch is refused whole and this writer
 * stops (`lost`): the log stays the first writer's.
 */
export class ChunkWriter {
  #pending: UIChunk[] = [];
  #next: number;
  #timer?: ReturnType<typeof setTimeout>;
  #flushing: Promise<void> = Promise.resolve();
  /** True once a batch was refused: this writer writes nothing more. */
  lost = false;
  /** Batches written. */
  writes = 0;

  /** Writes turn `turn` of `runId` from index `from`. */
  constructor(
    private readonly log: ChatChunks,
    private readonly runId: string,
    private readonly turn: number,
    from: number,
    private readonly flushMs = CHUNK_FLUSH_MS,
  ) {
    this.#next = from;
  }

  /** Queues `chunks`, to be appended with the next batch. */
  add(chunks: readonly UIChunk[]): void {
    if (this.lost || chunks.length === 0) return;
    this.#pending.push(...chunks);
    this.#timer ??= setTimeout(() => {
      this.#timer = undefined;
      void this.flush();
    }, this.flushMs);
  }

  /** Appends what is queued (after any batch under way); never throws (a failed batch stops the writer). */
  flush(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#flushing = this.#flushing.then(async () => {
      if (this.lost || this.#pending.length === 0) return;
      const batch = this.#pending;
      this.#pending = [];
      try {
        const written = await this.log.append(this.runId, this.turn, this.#next, batch as unknown as Json[]);
        if (!written) this.lost = true;
        this.#next += batch.length;
        this.writes++;
      } catch {
        // The database away or closed: the log ends here, and a later reader takes the turn over.
        this.lost = true;
      }
    });
    return this.#flushing;
  }
}

/**
 * Where a process that takes a turn over continues after the stored chunks
 * `stored` (a writer that went away left them), given the turn's chunks as
 * this process derived them from the journal (`derived`): its chunks after the
 * steps the log has finished. When the log stops inside a step, a
 * `reset-step` first (the client drops the step's parts), then the derived
 * step's chunks after its `start-step`, once the derivation has finished that
 * step. Undefined while the derivation has nothing after where the log stopped.
 */
export function continuation(stored: readonly UIChunk[], derived: readonly UIChunk[]): UIChunk[] | undefined {
  if (stored.at(-1)?.type === "finish") return undefined;
  const finished = stored.filter((c) => c.type === "finish-step").length;
  const lastStart = stored.findLastIndex((c) => c.type === "start-step");
  const lastFinish = stored.findLastIndex((c) => c.type === "finish-step");
  const insideStep = lastStart > lastFinish;
  let at = derived.findIndex((c) => c.type === "start"); // the derivation's own start is the log's
  if (at < 0) return undefined;
  at++;
  for (let seen = 0; seen < finished; at++) {
    if (at >= derived.length) return undefined;
    if (derived[at].type === "finish-step") seen++;
  }
  if (!insideStep) return at < derived.length ? derived.slice(at) : undefined;
  // The log stopped inside step `finished`: once the derivation has finished that step (or the turn), its
  // step from after its start-step. Not sooner: a step the writer left waiting (an approval, a remote) is
  // derived the same, and nothing would tell a writer gone from one waiting.
  while (at < derived.length && derived[at].type !== "start-step") at++;
  const end = derived.findIndex((c, i) => i > at && (c.type === "finish-step" || c.type === "finish"));
  if (at >= derived.length || end < 0) return undefined;
  return [{ type: "reset-step" }, ...derived.slice(at + 1)];
}
