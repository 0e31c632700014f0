/**
 * The stream channel: the database's own notifications (`pg_notify` and
 * `LISTEN`, which PGlite has too), on one channel per schema, so runs of two
 * deployments sharing a server never hear each other. What travels on it is
 * `stream.ts`'s business; here are its two statements and the listening.
 *
 * @module
 */

import { listenThrough, type SqlClient } from "./driver.ts";
import { queryRows, statement } from "./sql.ts";

// A channel name is an identifier: at most 63 bytes, cut here as LISTEN would cut it, and plain (lower
// case, letters, digits and `_`), so it needs no quoting anywhere (PGlite's unlisten quotes nothing).
const STREAM_CHANNEL = statement(
  "stream-channel",
  `select left('ar_stream_' || regexp_replace(lower(current_schema()), '[^a-z0-9_]', '_', 'g'), 63) as channel`,
);

// Sent on its own, outside any transaction: delivered when it commits, in commit order.
const NOTIFY_STREAM = statement("notify-stream", `select pg_notify($1, $2)::text as sent`);

/** Every statement of this file. */
export const NOTIFY_STATEMENTS = [STREAM_CHANNEL, NOTIFY_STREAM] as const;

/**
 * A notification payload's limit is 8000 bytes: a sender keeps each one
 * well below it (a payload's text is cut into pieces of at most
 * {@link PAYLOAD_TEXT_MAX} characters, whose JSON is at most six bytes a
 * character).
 */
export const PAYLOAD_TEXT_MAX = 1000;

/** Notifying and listening on the stream channel of one store's schema. */
export class StreamChannel {
  readonly #client: SqlClient;
  #channel?: Promise<string>;

  /** Wraps a driver. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /** The channel's name (read once: the schema a connection uses does not change). */
  channel(): Promise<string> {
    this.#channel ??= queryRows<{ channel: string }>(this.#client, STREAM_CHANNEL, []).then((r) =>
      r[0].channel
    );
    // A failed read is not kept: the next call asks again.
    this.#channel.catch(() => this.#channel = undefined);
    return this.#channel;
  }

  /** Sends one payload (at most 8000 bytes) to every listener of the channel. */
  async notify(payload: string): Promise<void> {
    await queryRows(this.#client, NOTIFY_STREAM, [await this.channel(), payload]);
  }

  /** Listens on the channel until the returned function is called; `STREAM_UNSUPPORTED` without a `listen`. */
  async listen(onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    return await listenThrough(this.#client, await this.channel(), onPayload);
  }
}
