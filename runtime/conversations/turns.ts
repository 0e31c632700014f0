/**
 * A run that converses: after each final answer it waits for its next
 * message holding no worker slot, as a run waiting for an approval does.
 * Message 0 is the goal; message k+1 is taken once message k is answered,
 * so a message sent while the run works is queued and taken after the
 * current answer. Which message a final answer answers is derived from the
 * journal alone (the k-th final answer answers message k), so a restart
 * reads it back; the `messages` rows record it too (`answer_seq`).
 *
 * @module
 */

import { applyMessages, type RunDeps, type RunState } from "../run/context.ts";
import type { ConversationState } from "../agent/conversation_options.ts";
import { FencedError, RuntimeError } from "../base/errors.ts";
import type { MessageRow } from "../store/conversations.ts";
import type { RunRow } from "../store/rows.ts";
import type { Json } from "../agent/tools.ts";
import type { ParkedRun } from "../run/parked.ts";

export {
  checkConversation,
  type ConversationOptions,
  type ConversationState,
  type HistoryContext,
  type HistoryHook,
  IDLE_MS_MAX,
} from "../agent/conversation_options.ts";

/** Reads a conversation's messages back at a claim (one statement); undefined for a run that is not one. */
export async function loadConversation(
  deps: Pick<RunDeps, "store">,
  run: RunRow,
  fresh: boolean,
): Promise<ConversationState | undefined> {
  const idleMs = run.conversation_idle_ms;
  if (idleMs === null || idleMs === undefined) return undefined;
  // A run claimed for the first time has no message but its goal unless one was sent meanwhile.
  const rows = fresh && (run.message_count ?? 1) <= 1
    ? []
    : await deps.store.conversations.messagesAfter(run.run_id, -1);
  const messages = rows[0]?.seq === 0 ? rows : [goalMessage(run), ...rows];
  return { idleMs, messages, turn: 0, memos: new Map() };
}

/** Message 0 before its row is written (with its answer). */
function goalMessage(run: RunRow): MessageRow {
  return {
    run_id: run.run_id,
    seq: 0,
    message_id: null,
    text: run.goal,
    created_at: new Date(run.created_at),
    answer_seq: null,
    answered_at: null,
  };
}

/** After a final answer: the conversation goes on with the next message, or waits for one, or is done. */
export type AfterAnswer = "next" | "waiting" | "done";

/**
 * Records the final answer at `seq` to the message being answered and says
 * what comes next: `next` (another message is there: the loop goes on with
 * it), `waiting` (the run waits for its next message, released), `done`
 * (closed, or idle past its limit). An answer recorded already (a replay) is
 * not written again. Throws a {@link FencedError} when the fence refuses.
 */
export async function afterAnswer(
  deps: Pick<RunDeps, "store" | "clock" | "log">,
  state: RunState & { conversation: ConversationState },
  seq: number,
  answer: string,
): Promise<AfterAnswer> {
  const conv = state.conversation;
  const store = deps.store.conversations;
  const k = conv.turn;
  const message = conv.messages[k];
  if (message === undefined) {
    throw new RuntimeError(
      "DECISION_INVALID",
      `Run ${state.fence.runId} holds a final answer at step ${seq} for message ${k}, which was never sent`,
    );
  }
  const taken = () => takeNext(deps, state, seq);
  if (message.answer_seq === seq && message.answered_at) {
    // A replay: the answer is recorded. Messages the worker read at its claim come next.
    if (k + 1 < conv.messages.length) {
      applyMessages(state, [], k + 1);
      return "next";
    }
    const now = deps.clock.now();
    const idleUntil = new Date(new Date(message.answered_at).getTime() + conv.idleMs);
    if (now >= idleUntil) {
      if (await store.endIdle(state.fence, k, now)) {
        deps.log.info("conversation-ended", { run: state.fence.runId, messages: k + 1, reason: "idle" });
        return "done";
      }
      return await nextOrRefused(deps, state, taken);
    }
  }
  const now = deps.clock.now();
  const answeredAt = message.answered_at && message.answer_seq === seq ? new Date(message.answered_at) : now;
  const out = await store.answer(state.fence, {
    message: k,
    answerSeq: seq,
    answer,
    answeredAt,
    idleUntil: new Date(answeredAt.getTime() + conv.idleMs),
  });
  if (!out) throw await deps.store.writes.refusal(state.fence, `answer message ${k}`);
  applyMessages(state, [{ ...message, answer_seq: seq, answered_at: answeredAt }]);
  if (out.status === "waiting") {
    deps.log.info("answered", {
      run: state.fence.runId,
      message: k,
      seq,
      waiting_ms: conv.idleMs,
      output: answer,
    });
    return "waiting";
  }
  if (out.status === "done") {
    deps.log.info("conversation-ended", { run: state.fence.runId, messages: k + 1, reason: "closed" });
    return "done";
  }
  const queued = out.messageCount - k - 1;
  deps.log.info("answered", { run: state.fence.runId, message: k, seq, queued, output: answer });
  return await taken();
}

/**
 * The next message, once the one answered at `seq` is: read with those sent
 * since the worker last looked (only those: per answer, one short read).
 */
async function takeNext(
  deps: Pick<RunDeps, "store" | "log">,
  state: RunState & { conversation: ConversationState },
  seq: number,
): Promise<AfterAnswer> {
  const { messages, turn: k } = state.conversation;
  const since = await deps.store.conversations.messagesAfter(
    state.fence.runId,
    messages[messages.length - 1].seq,
  );
  if (messages.length + since.length <= k + 1) {
    throw new FencedError(
      "STALLED",
      `Run ${state.fence.runId} counts a message after message ${k} that its messages table does not hold`,
    );
  }
  applyMessages(state, since, k + 1);
  deps.log.info("message-taken", { run: state.fence.runId, message: k + 1, seq: seq + 1 });
  return "next";
}

/** After a refused idle end: another message came (go on with it), or the run is no longer this worker's. */
async function nextOrRefused(
  deps: Pick<RunDeps, "store">,
  state: RunState,
  taken: () => Promise<AfterAnswer>,
): Promise<AfterAnswer> {
  const run = await deps.store.conversations.run(state.fence.runId);
  if (!run || run.epoch !== state.fence.epoch || run.status !== "running") {
    throw await deps.store.writes.refusal(state.fence, "end an idle conversation");
  }
  return await taken();
}

/**
 * A conversation its worker host keeps in memory while it waits for its next
 * message: the run's rows as the worker last wrote them, so the host that
 * takes it again (and nobody took it in between: its epoch is the next) goes
 * on without reading its whole history back, reading only the messages sent
 * since. Per message, the database work stays the same however long the
 * conversation grows.
 */
export type ParkedConversation = ParkedRun & {
  /** Its messages, and the one last answered. */
  conversation: ConversationState;
};

/**
 * A parked conversation taken again: the messages sent since it was let go,
 * read and appended to a copy (the parked one stays as it was let go).
 */
export async function resumeConversation(
  deps: Pick<RunDeps, "store">,
  runId: string,
  parked: ParkedConversation,
): Promise<ConversationState> {
  const conv = parked.conversation;
  const last = conv.messages[conv.messages.length - 1].seq;
  const since = await deps.store.conversations.messagesAfter(runId, last);
  return { ...conv, messages: [...conv.messages, ...since], memos: new Map(conv.memos) };
}

/** The largest key {@link HistoryContext.remember} takes, in characters. */
const MEMO_KEY_MAX = 200;

/**
 * {@link HistoryContext.remember} for the run `state` holds: a value stored
 * under `key` is returned without running `compute`; otherwise the attempt is
 * written first (fenced), then `compute` runs, then its value is written.
 */
export async function remember<T extends Json>(
  deps: Pick<RunDeps, "store" | "clock" | "log">,
  state: Pick<RunState, "fence"> & { conversation: ConversationState },
  key: string,
  compute: () => Promise<T>,
): Promise<T> {
  if (typeof key !== "string" || key === "" || key.length > MEMO_KEY_MAX) {
    throw new RuntimeError(
      "AGENT_INVALID",
      `A remembered value's key is a text of 1 to ${MEMO_KEY_MAX} characters: current value is ${
        JSON.stringify(key)
      }`,
    );
  }
  const memos = state.conversation.memos;
  if (memos.has(key)) return memos.get(key) as T;
  const store = deps.store.conversations;
  const row = await store.memoIntent(state.fence, key, deps.clock.now());
  if (!row) throw await deps.store.writes.refusal(state.fence, `remember ${key}`);
  if (row.status === "confirmed") {
    deps.log.info("memo-replayed", { run: state.fence.runId, key });
    memos.set(key, row.value as Json);
    return row.value as T;
  }
  deps.log.info("memo", { run: state.fence.runId, key, attempt: row.attempts });
  const value = await compute();
  const done = await store.memoConfirm(state.fence, key, value, deps.clock.now());
  if (!done) throw await deps.store.writes.refusal(state.fence, `remember ${key}`);
  memos.set(key, done.value as Json);
  return done.value as T;
}
