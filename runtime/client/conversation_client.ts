/**
 * Conversations from outside: send a conversation (a run of an agent with
 * `conversation`) its next message, read its messages with their answers,
 * close it. `deno task send` and the page's chat are thin wrappers over it.
 * Reached as `client.conversations`; a conversation is started, waited on
 * and followed as any run is (`client.start`, `client.wait`,
 * `client.stream`).
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import { ClientError, describeValue } from "../base/errors.ts";
import type { Store } from "../store/store.ts";
import { type ConversationTurn, MESSAGE_CHARS_MAX, type RunInfo, type SendResult } from "./shapes.ts";
import { checkId, checkRunId, info, notFound } from "./checks.ts";

/**
 * The calls of a conversation over one database (`client.conversations`).
 * A message sent wakes the worker hosts the client started, so a
 * conversation waiting for it is taken at once.
 */
export class ConversationClient {
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #wakeHosts: () => void;

  /** Built by the client: its store and clock, and how to wake the worker hosts it started. */
  constructor(opts: { store: Store; clock: Clock; wakeHosts?: () => void }) {
    this.#store = opts.store;
    this.#clock = opts.clock;
    this.#wakeHosts = opts.wakeHosts ?? (() => {});
  }

  /**
   * Appends a message to a conversation (a run of an agent with
   * `conversation`) and wakes it when it waits for one; sent while the run
   * works, the message is queued and taken after the current answer. A
   * retried send with the same `messageId` is one message: it returns the
   * stored message's seq with `duplicate: true` (default id: a random one).
   * Throws `RUN_NOT_FOUND`, `NOT_A_CONVERSATION`, `CONVERSATION_ENDED` (closed,
   * idle past its limit, failed or cancelled), `MESSAGE_INVALID`.
   */
  async send(runId: string, text: string, opts: { messageId?: string } = {}): Promise<SendResult> {
    checkRunId(runId);
    if (typeof text !== "string" || text.trim() === "" || text.length > MESSAGE_CHARS_MAX) {
      throw new ClientError(
        "MESSAGE_INVALID",
        `A message is a non-empty text of at most ${MESSAGE_CHARS_MAX} characters: current value is ${
          describeValue(typeof text === "string" && text.length > 80 ? `${text.slice(0, 80)}...` : text)
        }`,
      );
    }
    const messageId = opts.messageId ?? crypto.randomUUID();
    checkId("message id", messageId, "MESSAGE_INVALID");
    const sent = await this.#store.conversations.send({ runId, messageId, text }, this.#clock.now());
    if (sent) {
      if (!sent.duplicate) this.#wakeHosts();
      return { runId, seq: sent.message.seq, messageId, duplicate: sent.duplicate };
    }
    throw await this.#notConversing(runId, "send a message to");
  }

  /**
   * Every message of a conversation with its answer, in order (the goal
   * first): what a program following along reads. `fromSeq` and `limit`
   * (default 0 and 1 000) page through a long one. Throws `RUN_NOT_FOUND` and
   * `NOT_A_CONVERSATION`.
   */
  async answers(runId: string, opts: { fromSeq?: number; limit?: number } = {}): Promise<ConversationTurn[]> {
    checkRunId(runId);
    const run = await this.#store.reads.getRun(runId);
    if (!run) throw notFound(runId);
    if (run.conversation_idle_ms === null || run.conversation_idle_ms === undefined) {
      throw await this.#notConversing(runId, "list the answers of");
    }
    const fromSeq = opts.fromSeq ?? 0;
    const limit = opts.limit ?? 1_000;
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 0 || !Number.isSafeInteger(limit) || limit < 1) {
      throw new ClientError(
        "LIMIT_INVALID",
        `'fromSeq' must be an integer 0 or more and 'limit' one 1 or more: current values are ${
          describeValue(fromSeq)
        } and ${describeValue(limit)}`,
      );
    }
    const rows = await this.#store.conversations.answers(runId, fromSeq, limit);
    const turns = rows.map((m): ConversationTurn => ({
      seq: m.seq,
      messageId: m.message_id,
      text: m.text,
      sentAt: new Date(m.created_at),
      answer: m.answer,
      answerSeq: m.answer_seq,
      answeredAt: m.answered_at ? new Date(m.answered_at) : null,
    }));
    // The goal's row is written with its answer: before that it is the run's goal.
    if (fromSeq === 0 && turns[0]?.seq !== 0) {
      turns.unshift({
        seq: 0,
        messageId: null,
        text: run.goal,
        sentAt: new Date(run.created_at),
        answer: null,
        answerSeq: null,
        answeredAt: null,
      });
      if (turns.length > limit) turns.pop();
    }
    return turns;
  }

  /**
   * Closes a conversation: one waiting for its next message is done at once
   * (its output the last answer); one at work ends after its current answer
   * (queued messages answered first). Later sends are refused. Throws
   * `RUN_NOT_FOUND`, `NOT_A_CONVERSATION`, `CONVERSATION_ENDED`.
   */
  async endConversation(runId: string): Promise<RunInfo> {
    checkRunId(runId);
    const run = await this.#store.conversations.end(runId, this.#clock.now());
    if (run) return info(run);
    throw await this.#notConversing(runId, "end");
  }

  /** Why a conversation refused `what`: no such run, not a conversation, or ended. */
  async #notConversing(runId: string, what: string): Promise<ClientError> {
    const run = await this.#store.reads.getRun(runId);
    if (!run) return notFound(runId);
    if (run.conversation_idle_ms === null || run.conversation_idle_ms === undefined) {
      return new ClientError(
        "NOT_A_CONVERSATION",
        `Cannot ${what} run ${runId}: its agent ${run.agent} does not converse (give it ` +
          `defineAgent({ conversation: { idleMs } }) and start a new run)`,
      );
    }
    const why = run.conversation_ended_at
      ? `it was closed at ${new Date(run.conversation_ended_at).toISOString()}`
      : `it is ${run.status}${run.error ? ` (${run.error})` : ""}`;
    // A conversation that failed or was cancelled keeps its history: reopening it goes on from there.
    const next = !run.conversation_ended_at && (run.status === "failed" || run.status === "cancelled")
      ? `'deno task reopen ${runId}' (client.operators.reopen) takes it up again with its history, then send again`
      : "start a new run to go on";
    return new ClientError("CONVERSATION_ENDED", `Cannot ${what} conversation ${runId}: ${why}; ${next}`);
  }
}
