/**
 * Conversations: a run that, after each final answer, waits for its next
 * message. The goal is message 0; a person's messages are `messages` rows,
 * numbered by `runs.message_count`, which the send bumps in the statement that
 * inserts the row. A worker's answer, its idle wait and its close are
 * conditioned on that count inside their own `where` clause, so a send that
 * races them is seen (an update re-reads the row it waited for), never lost:
 * the worker goes on with the new message instead.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import { readRun } from "./reads.ts";
import type { Fence, RunRow, RunStatus } from "./rows.ts";
import { FENCE, jsonParam, OPEN_STATUSES, queryRows, RUNNING_AT, statement, textParam, ts } from "./sql.ts";
import type { Json } from "../base/values.ts";

/** A row of `messages`: one message of a conversation. */
export interface MessageRow {
  /** The run (the conversation). */
  run_id: string;
  /** Its place in the conversation: 0 for the goal, then 1, 2, ... in the order they were sent. */
  seq: number;
  /** The sender's id for it (a retried send with it is one message); null for the goal. */
  message_id: string | null;
  /** What was said. */
  text: string;
  /** When it was sent. */
  created_at: Date;
  /** The journal step whose final answer answered it; null while it is not answered. */
  answer_seq: number | null;
  /** When it was answered. */
  answered_at: Date | null;
}

/** A message with its answer, as a program following a conversation reads it. */
export interface MessageWithAnswer extends MessageRow {
  /** The answer's text; null while it is not answered. */
  answer: string | null;
}

/** What a send did: the message as stored, and whether an earlier send with its id had stored it already. */
export interface SentMessage {
  /** The message (the earlier one for a duplicate). */
  message: MessageRow;
  /** True when a send with this `message_id` had stored it already: nothing was written. */
  duplicate: boolean;
}

/** Where a conversation stood after a worker's answer: idle (waiting for its next message), done, or going on. */
export interface AnswerOutcome {
  /** `waiting` (idle), `done` (closed while it worked), or `running` (more messages to answer). */
  status: RunStatus;
  /** Messages so far, the goal included. */
  messageCount: number;
}

// $1 run, $2 message_id, $3 text, $4 now. A duplicate id (committed before this statement's snapshot)
// writes nothing and returns the stored row; a racing duplicate fails the insert (23505), and the
// caller reads the row the other send stored. An idle run is woken at once (its wake time now).
const SEND_MESSAGE = statement(
  "send-message",
  `with dup as (select * from messages where run_id = $1 and message_id = $2),
       run as (
         update runs set message_count = message_count + 1,
                wake_at = case when idle_since is not null then $4::timestamptz else wake_at end,
                idle_since = null
          where run_id = $1 and conversation_idle_ms is not null and conversation_ended_at is null
            and status in ${OPEN_STATUSES} and not exists (select 1 from dup)
         returning message_count - 1 as seq),
       m as (
         insert into messages (run_id, seq, message_id, text, created_at)
         select $1, run.seq, $2, $3, $4::timestamptz from run
         returning *)
  select m.*, false as duplicate from m
  union all
  select dup.*, true from dup`,
);

// $1 run, $2 epoch, $3 the message answered, $4 the answer's step, $5 the answer, $6 when it was answered,
// $7 the idle limit's end. The run waits for its next message when none came meanwhile, or ends when it
// was closed while it worked; message 0's row (the goal) is written with its answer.
const ANSWER_MESSAGE = statement(
  "answer-message",
  `with run as (
         update runs set output = $5,
                status = case when message_count > $3 + 1 then status
                              when conversation_ended_at is not null then 'done' else 'waiting' end,
                idle_since = case when message_count > $3 + 1 or conversation_ended_at is not null then null
                                  else $6::timestamptz end,
                wake_at = case when message_count > $3 + 1 or conversation_ended_at is not null then null
                               else $7::timestamptz end,
                heartbeat_at = case when message_count > $3 + 1 then heartbeat_at end,
                updated_at = $6::timestamptz
          where run_id = $1 and ${RUNNING_AT("$2")}
         returning status, message_count, goal, created_at),
       first as (
         insert into messages (run_id, seq, message_id, text, created_at, answer_seq, answered_at)
         select $1, 0, null, run.goal, run.created_at, $4, $6::timestamptz from run where $3 = 0
         on conflict (run_id, seq) do nothing
         returning 1),
       answered as (
         update messages set answer_seq = $4, answered_at = $6::timestamptz
          where run_id = $1 and seq = $3 and $3 > 0 and answer_seq is null and exists (select 1 from run)
         returning 1)
  select status, message_count,
         (select count(*) from first)::int + (select count(*) from answered)::int as written
    from run`,
);

// $1 run, $2 epoch, $3 the last message answered, $4 now: the idle limit passed with no new message.
const END_IDLE = statement(
  "end-idle-conversation",
  `update runs set status = 'done', heartbeat_at = null, idle_since = null, wake_at = null,
          updated_at = $4::timestamptz
    where run_id = $1 and ${RUNNING_AT("$2")} and message_count = $3 + 1
   returning status`,
);

// $1 run, $2 now. An idle conversation ends at once; one at work ends after its current answer.
const END_CONVERSATION = statement(
  "end-conversation",
  `update runs set conversation_ended_at = $2::timestamptz,
          status = case when status = 'waiting' and idle_since is not null then 'done' else status end,
          wake_at = case when status = 'waiting' and idle_since is not null then null else wake_at end,
          idle_since = case when status = 'waiting' and idle_since is not null then null else idle_since end,
          updated_at = $2::timestamptz
    where run_id = $1 and conversation_idle_ms is not null and conversation_ended_at is null
      and status in ${OPEN_STATUSES}
   returning *`,
);

// A memo's intent ($1 run, $2 epoch, $3 key, $4 now), counting the attempt; a confirmed memo is returned as it is.
const MEMO_INTENT = statement(
  "memo-intent",
  `insert into memos (run_id, key, status, attempts, epoch, intent_at)
   select $1, $3, 'intent', 1, $2, $4::timestamptz where ${FENCE}
   on conflict (run_id, key) do update
     set attempts = memos.attempts + case when memos.status = 'intent' then 1 else 0 end,
         epoch = case when memos.status = 'intent' then excluded.epoch else memos.epoch end,
         intent_at = case when memos.status = 'intent' then excluded.intent_at else memos.intent_at end
   returning *`,
);
// $1 run, $2 epoch, $3 key, $4 value, $5 now.
const MEMO_CONFIRM = statement(
  "memo-confirm",
  `update memos set status = 'confirmed', value = $4::text::jsonb, confirmed_at = $5::timestamptz
    where run_id = $1 and key = $3 and status = 'intent' and ${FENCE}
   returning *`,
);

const READ_MESSAGES = statement(
  "read-messages",
  `select * from messages where run_id = $1 and seq > $2 order by seq`,
);

const LIST_ANSWERS = statement(
  "list-answers",
  `select m.*, j.decision->>'message' as answer
     from messages m left join journal j on j.run_id = m.run_id and j.seq = m.answer_seq
    where m.run_id = $1 and m.seq >= $2
    order by m.seq limit $3`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const CONVERSATION_STATEMENTS = [
  SEND_MESSAGE,
  ANSWER_MESSAGE,
  END_IDLE,
  END_CONVERSATION,
  READ_MESSAGES,
  LIST_ANSWERS,
  MEMO_INTENT,
  MEMO_CONFIRM,
] as const;

/** A row of `memos`: a value a history hook computed once (a summary), journaled as a decision is. */
export interface MemoRow {
  /** The run. */
  run_id: string;
  /** The hook's name for it. */
  key: string;
  /** `intent` while its work is (or was) under way, `confirmed` once its value is written. */
  status: "intent" | "confirmed";
  /** The value, once confirmed. */
  value: Json | null;
  /** Times its work was started, counted before each. */
  attempts: number;
  /** The epoch that wrote it last. */
  epoch: number;
  /** When its latest attempt began. */
  intent_at: Date;
  /** When its value was written. */
  confirmed_at: Date | null;
}

/** The statements of conversations: a send, a worker's answer and idle end, a close, and the reads. */
export class Conversations {
  readonly #client: SqlClient;

  /** Wraps a driver. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Appends a message to a conversation that is still open, waking it when
   * it waits for one, or finds the message an earlier send with the same id
   * stored. Undefined when the run is not an open conversation (the caller
   * reads the run to say why).
   */
  async send(
    msg: { runId: string; messageId: string; text: string },
    now: Date,
  ): Promise<SentMessage | undefined> {
    const params = [msg.runId, msg.messageId, textParam(msg.text), ts(now)];
    let rows: (MessageRow & { duplicate: boolean })[];
    try {
      rows = await queryRows(this.#client, SEND_MESSAGE, params);
    } catch (err) {
      // A send with the same id committed while this one waited for the run's row: it is the message.
      if ((err as { code?: unknown }).code !== "23505") throw err;
      rows = await queryRows(this.#client, SEND_MESSAGE, params);
    }
    const [row] = rows;
    if (!row) return undefined;
    const { duplicate, ...message } = row;
    return { message, duplicate };
  }

  /**
   * Records the answer to message `message` (given at step `answerSeq`),
   * fenced on the worker's epoch; the run then waits for its next message
   * (idle until `idleUntil`), ends (closed while it worked), or goes on when
   * another message came meanwhile. Undefined when the fence refused it.
   */
  async answer(
    f: Fence,
    a: { message: number; answerSeq: number; answer: string; answeredAt: Date; idleUntil: Date },
  ): Promise<AnswerOutcome | undefined> {
    const [row] = await queryRows<{ status: RunStatus; message_count: number }>(
      this.#client,
      ANSWER_MESSAGE,
      [f.runId, f.epoch, a.message, a.answerSeq, textParam(a.answer), ts(a.answeredAt), ts(a.idleUntil)],
    );
    return row ? { status: row.status, messageCount: row.message_count } : undefined;
  }

  /**
   * Ends a conversation whose idle limit passed with `lastMessage` its last
   * message. False when a message came meanwhile or the fence refused it.
   */
  async endIdle(f: Fence, lastMessage: number, now: Date): Promise<boolean> {
    const rows = await queryRows(this.#client, END_IDLE, [f.runId, f.epoch, lastMessage, ts(now)]);
    return rows.length === 1;
  }

  /** Closes an open conversation (at once when idle, else after its current answer); undefined when it is not one. */
  async end(runId: string, now: Date): Promise<RunRow | undefined> {
    const [row] = await queryRows<RunRow>(this.#client, END_CONVERSATION, [runId, ts(now)]);
    return row;
  }

  /** The messages of a run after `afterSeq` (-1: all of them), in order. */
  async messagesAfter(runId: string, afterSeq: number): Promise<MessageRow[]> {
    return await queryRows<MessageRow>(this.#client, READ_MESSAGES, [runId, afterSeq]);
  }

  /** Up to `limit` messages from `fromSeq` on, each with its answer, in order. */
  async answers(runId: string, fromSeq: number, limit: number): Promise<MessageWithAnswer[]> {
    return await queryRows<MessageWithAnswer>(this.#client, LIST_ANSWERS, [runId, fromSeq, limit]);
  }

  /**
   * Records that the work of memo `key` begins (counting the attempt), fenced;
   * a confirmed memo comes back as it is (its value, to replay). Undefined
   * when the fence refused it.
   */
  async memoIntent(f: Fence, key: string, now: Date): Promise<MemoRow | undefined> {
    const [row] = await queryRows<MemoRow>(this.#client, MEMO_INTENT, [f.runId, f.epoch, key, ts(now)]);
    return row;
  }

  /** Writes memo `key`'s value, fenced; undefined when the fence (or its state) refused it. */
  async memoConfirm(f: Fence, key: string, value: Json, now: Date): Promise<MemoRow | undefined> {
    const [row] = await queryRows<MemoRow>(this.#client, MEMO_CONFIRM, [
      f.runId,
      f.epoch,
      key,
      jsonParam(value, `memo ${key}`),
      ts(now),
    ]);
    return row;
  }

  /** The run, for a caller explaining a refusal. */
  async run(runId: string): Promise<RunRow | undefined> {
    return await readRun(this.#client, runId);
  }
}
