/**
 * The chat chunk log: the UI message stream chunks a chat turn was sent as,
 * by index (`chat_chunks`, runtime/chat/feed.ts). A batch is appended all or
 * nothing: an index another writer wrote first refuses the whole batch, and
 * the writer that was refused stops writing that turn.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { SqlClient } from "./driver.ts";
import { jsonParam, queryRows, statement } from "./sql.ts";

// $1 run, $2 turn, $3 the batch's first index, $4 the chunks (a JSON array). No `on conflict`: an index
// written already fails the statement (23505), so no batch lands in part beside another writer's.
const APPEND = statement(
  "chat-chunks-append",
  `insert into chat_chunks (run_id, turn, idx, chunk)
   select $1, $2::int, $3::int + (o - 1)::int, c
     from jsonb_array_elements($4::text::jsonb) with ordinality as t(c, o)`,
);

// $1 run, $2 turn, $3 the first index read: the chunks from it on, in order.
const READ = statement(
  "chat-chunks-read",
  `select idx, chunk from chat_chunks where run_id = $1 and turn = $2::int and idx >= $3::int order by idx`,
);

/** Every statement of this audience. */
export const CHAT_CHUNK_STATEMENTS = [APPEND, READ] as const;

/** The chat chunk log of the turns streamed. */
export class ChatChunks {
  readonly #client: SqlClient;

  /** Over one driver. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Appends `chunks` at indexes `from`, `from + 1`, ...: true when written,
   * false when any of those indexes was written already (nothing is written).
   */
  async append(runId: string, turn: number, from: number, chunks: readonly Json[]): Promise<boolean> {
    if (chunks.length === 0) return true;
    try {
      await queryRows(this.#client, APPEND, [runId, turn, from, jsonParam(chunks as Json, "chat chunks")]);
      return true;
    } catch (err) {
      if ((err as { code?: unknown }).code !== "23505") throw err;
      return false;
    }
  }

  /** The chunks of turn `turn` of `runId` from index `from` on, in order (stored without gaps). */
  async read(runId: string, turn: number, from = 0): Promise<Json[]> {
    const rows = await queryRows<{ idx: number; chunk: Json }>(this.#client, READ, [runId, turn, from]);
    return rows.map((r) => r.chunk);
  }
}
