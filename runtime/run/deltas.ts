/**
 * The worker's side of a streamed answer: with `STREAM_DELTAS` on, each model
 * call's text is sent on the database's notification channel
 * (`store/notify.ts`) a piece at a time, coalesced within
 * {@link DELTA_BATCH_MS}, each piece tagged as `stream.ts` encodes it.
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import type { Logger } from "../base/log.ts";
import { PAYLOAD_TEXT_MAX } from "../store/notify.ts";
import { type Delta, encodeDelta } from "./stream.ts";

/** How long a publisher gathers text before it sends (the first piece after a pause goes at once). */
export const DELTA_BATCH_MS = 30;

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
