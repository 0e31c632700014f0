/**
 * How an agent converses, as `defineAgent({ conversation })` takes it: the
 * idle limit and the history hook, checked; and what a worker knows of a
 * conversation while it drives one. A leaf beside the agent, so the agent's
 * definition does not import the worker's loop (conversations/turns.ts).
 *
 * @module
 */

import { RuntimeError } from "../base/errors.ts";
import type { MessageRow } from "../store/conversations.ts";
import type { TranscriptMessage } from "../model/transcript.ts";
import type { Json } from "./tools.ts";

/** The largest idle limit a conversation may set: 30 days. */
export const IDLE_MS_MAX = 30 * 24 * 3_600_000;

/**
 * What a conversation's history hook is given beside the transcript: the run
 * and the step being decided, and the number of messages in the transcript.
 */
export interface HistoryContext {
  /** The run. */
  runId: string;
  /** The step being decided. */
  seq: number;
  /** Messages of the conversation so far (the goal counts as one). */
  messages: number;
  /**
   * Runs `compute` once for this run and `key`, journaled as a decision is:
   * its attempt is written (and counted) before it runs, its value after, and
   * a restart returns the stored value instead of running it again. For work
   * that costs, such as a summary bought from a model; the value is JSON.
   */
  remember<T extends Json>(key: string, compute: () => Promise<T>): Promise<T>;
}

/**
 * Trims or summarises what is sent to the model: given the whole transcript
 * rebuilt from the database (system instructions first, then every message,
 * call, result and answer in order), returns the transcript to send. What is
 * stored stays complete. It must keep each tool call beside its result.
 */
export type HistoryHook = (
  transcript: TranscriptMessage[],
  ctx: HistoryContext,
) => TranscriptMessage[] | Promise<TranscriptMessage[]>;

/** How an agent converses (`defineAgent({ conversation })`). */
export interface ConversationOptions {
  /**
   * How long a conversation waits for its next message after an answer
   * before it ends (status `done`, with the last answer as its output).
   */
  idleMs: number;
  /** Trims or summarises the transcript sent to the model (see {@link HistoryHook}). */
  history?: HistoryHook;
}

/** The agent's conversation options, checked; throws a message naming what is wrong. */
export function checkConversation(value: unknown, what: string): ConversationOptions | undefined {
  if (value === undefined) return undefined;
  const problem = (detail: string) => new RuntimeError("AGENT_INVALID", `${what}: ${detail}`);
  if (value === null || typeof value !== "object") {
    throw problem(`'conversation' must be an object like { idleMs: 600000 }: current value is ${value}`);
  }
  const { idleMs, history } = value as { idleMs?: unknown; history?: unknown };
  if (typeof idleMs !== "number" || !Number.isInteger(idleMs) || idleMs < 1 || idleMs > IDLE_MS_MAX) {
    throw problem(
      `'conversation.idleMs' must be an integer from 1 to ${IDLE_MS_MAX} (30 days): current value is ${idleMs}`,
    );
  }
  if (history !== undefined && typeof history !== "function") {
    throw problem("'conversation.history' must be a function (transcript, ctx) => transcript");
  }
  return Object.freeze({ idleMs, ...(history ? { history: history as HistoryHook } : {}) });
}

/** A conversation as its worker knows it: every message read back, and the one being answered. */
export interface ConversationState {
  /** The run's idle limit. */
  idleMs: number;
  /**
   * Messages by seq (0: the goal), as read at the claim and extended as answers take new ones; replaced,
   * never changed in place (`applyMessages` in run/context.ts).
   */
  readonly messages: readonly MessageRow[];
  /** The message being answered: the number of final answers the loop has passed. */
  readonly turn: number;
  /** Values the history hook remembered ({@link HistoryContext.remember}), by key, as read or written. */
  memos: Map<string, Json>;
}
