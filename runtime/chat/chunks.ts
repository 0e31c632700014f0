/**
 * One chat message's answer as the AI SDK's UI message stream (what
 * `useChat` reads): a run's events ({@link StreamEvent}, `client.stream`)
 * turned into chunks for one turn of a conversation (turn k answers message
 * k; the k-th final answer of the run ends it).
 *
 * The mapping is deterministic, so a page server that restarts derives the
 * same chunks from the journal that it served live:
 *
 * - **Steps.** `start-step` when a model request's first event arrives (its
 *   text, its tool calls or its answer), `finish-step` when the next one
 *   starts or the turn ends.
 * - **Text in fixed units.** A step's text is sent as `text-delta`s of
 *   {@link TEXT_UNIT_CHARS} characters (the last one shorter), cut at the same
 *   places live and when replayed from the journaled answer; a unit is held
 *   until it is whole or the answer is journaled. Text heard from its first
 *   character on is sent as it arrives; text joined late (a watcher that
 *   started mid-answer, or that skipped text) is held until the answer is
 *   journaled, then sent whole.
 * - **Resets.** Text of a newer attempt (the model call asked again, or the
 *   run taken over by a new worker) after units were sent is a `reset-step`:
 *   the client drops the step's parts, and the step's text starts again.
 * - **Tool calls.** `tool-input-available` per call (its `toolCallId` the
 *   call's idempotency key), `tool-output-available` on its confirm,
 *   `tool-output-error` when it failed; a flagged call (its outcome unknown)
 *   is a `tool-output-error` plus a `data-outcome` part; a call waiting on its
 *   remote is a `data-wait` part; a call that starts a child run a
 *   `data-child` part; a call that waits for a person a
 *   `tool-approval-request` (its `approvalId` the call's key), and the
 *   answer a `tool-approval-response`.
 * - **The end.** The turn's answer ends it with `finish` (`stop`); a run
 *   that failed or was cancelled first with an `error` chunk (`finish` with
 *   `error`).
 *
 * @module
 */

import type { StreamEvent } from "../run/stream.ts";
import type { Json } from "../agent/tools.ts";

/** The characters of one `text-delta` (the last of a step's text may be shorter). */
export const TEXT_UNIT_CHARS = 32;

/** A chunk of the UI message stream (the `ai` package's `UIMessageChunk`; the kinds this runtime sends). */
export type UIChunk =
  | { type: "start"; messageId?: string; messageMetadata?: Json }
  | { type: "start-step" }
  | { type: "finish-step" }
  | { type: "reset-step" }
  | { type: "finish"; finishReason?: "stop" | "error" | "other" | "tool-calls" }
  | { type: "error"; errorText: string }
  | { type: "text-start" | "text-end"; id: string }
  | { type: "text-delta"; id: string; delta: string }
  | { type: "tool-input-available"; toolCallId: string; toolName: string; input: Json }
  | { type: "tool-output-available"; toolCallId: string; output: Json }
  | { type: "tool-output-error"; toolCallId: string; errorText: string }
  | { type: "tool-output-denied"; toolCallId: string }
  | { type: "tool-approval-request"; approvalId: string; toolCallId: string }
  | { type: "tool-approval-response"; approvalId: string; approved: boolean; reason?: string }
  | { type: `data-${string}`; id?: string; data: Json; transient?: boolean };

/** An approval request as the chunker needs it (`client.operators.approvals`). */
export interface ApprovalState {
  /** The call's idempotency key. */
  key: string;
  /** pending, approved or denied. */
  status: string;
  /** A denial's reason. */
  reason?: string | null;
  /** When it was answered (orders the answers). */
  decidedAt?: Date | string | null;
}

/** A child run a call started (`client.reads.children`). */
export interface ChildState {
  /** The child's run id. */
  runId: string;
  /** Its agent. */
  agent: string;
  /** The key of the call that started it. */
  parentKey: string | null;
}

/** The assistant message id of turn `turn`: stable, so a resumed stream continues the same message. */
export function answerMessageId(runId: string, turn: number): string {
  return `${runId}-answer-${turn}`;
}

/** Where a string may be cut at `at` without splitting a surrogate pair: `at`, or one before. */
function cutAt(text: string, at: number): number {
  if (at >= text.length || at <= 0) return Math.min(Math.max(at, 0), text.length);
  const c = text.charCodeAt(at - 1);
  return c >= 0xd800 && c <= 0xdbff ? at - 1 : at;
}

/**
 * The units of `text` from `from`: whole units only, or (with `all`) the
 * last shorter one too. Cut every {@link TEXT_UNIT_CHARS} characters counted
 * from the text's start (a surrogate pair is never split), so the same text
 * is cut the same way whether it arrives in pieces or whole.
 */
export function textUnits(text: string, from: number, all: boolean): { units: string[]; end: number } {
  const units: string[] = [];
  let at = from;
  // Bounded by the text's length: every pass moves `at` on (a unit is 31 or 32 characters).
  while (at < text.length) {
    let next = at + TEXT_UNIT_CHARS;
    if (next > text.length) {
      if (!all) break;
      next = text.length;
    } else {
      next = cutAt(text, next);
    }
    units.push(text.slice(at, next));
    at = next;
  }
  return { units, end: at };
}

/** The text of the step being written: whose it is, what was heard, what was sent. */
interface StepText {
  epoch: number;
  attempt: number;
  /** The text heard from its first character on (undefined: joined late, held until the answer). */
  heard?: string;
  /** Characters of it sent as units. */
  sent: number;
  /** The part's id while it is open. */
  id?: string;
}

/**
 * Turns the events of a run into the chunks of turn `turn` (see the
 * module's notes). Pure: fed events, approval and child states in the order
 * they were observed, it returns the chunks to send; it says when it wants
 * the approvals and children read ({@link ChatChunker.wantsCallStates}).
 */
export class ChatChunker {
  /** The run. */
  readonly runId: string;
  /** The turn: the message it answers (0: the goal). */
  readonly turn: number;
  /** True once `finish` was sent. */
  finished = false;
  #answers = 0;
  #started = false;
  #step?: number;
  #text?: StepText;
  #textParts = 0;
  /** Calls of this turn by key: tool name, and what was told of them. */
  readonly #calls = new Map<string, { tool: string; told: Set<string> }>();

  /** A chunker of one turn (0: the goal's answer). */
  constructor(runId: string, turn: number) {
    this.runId = runId;
    this.turn = turn;
  }

  /** True when the run's events have reached this turn. */
  get inTurn(): boolean {
    return this.#answers === this.turn && !this.finished;
  }

  /** True when calls of this turn are not settled: their approvals and children are worth reading. */
  wantsCallStates(): boolean {
    if (!this.inTurn) return false;
    for (const c of this.#calls.values()) if (!c.told.has("output")) return true;
    return false;
  }

  /** The chunks one event adds. */
  event(e: StreamEvent): UIChunk[] {
    if (this.finished) return [];
    if (e.type === "answer") return this.#answer(e.seq, e.text);
    if (!this.inTurn) return [];
    switch (e.type) {
      case "delta":
        return this.#delta(e);
      case "reset":
        return this.#reset(e);
      case "tool_calls":
        return this.#toolCalls(e.seq, e.calls);
      case "tool_result":
        return this.#toolResult(e);
      case "status":
        return this.#status(e);
      default:
        return [];
    }
  }

  #begin(): UIChunk[] {
    if (this.#started) return [];
    this.#started = true;
    return [{ type: "start", messageId: answerMessageId(this.runId, this.turn) }];
  }

  /** Opens step `seq` (closing the one before): the chunks that takes. */
  #openStep(seq: number): UIChunk[] {
    const out = this.#begin();
    if (this.#step === seq) return out;
    if (this.#step !== undefined) out.push(...this.#closeStep());
    this.#step = seq;
    this.#text = undefined;
    out.push({ type: "start-step" });
    return out;
  }

  #closeStep(): UIChunk[] {
    const out: UIChunk[] = [];
    if (this.#text?.id) out.push({ type: "text-end", id: this.#text.id });
    this.#text = undefined;
    if (this.#step !== undefined) out.push({ type: "finish-step" });
    this.#step = undefined;
    return out;
  }

  /** Sends the units of `text` from what was sent on (all of it, the last short unit too, with `all`). */
  #sendText(t: StepText, text: string, all: boolean): UIChunk[] {
    const { units, end } = textUnits(text, t.sent, all);
    if (units.length === 0) return [];
    const out: UIChunk[] = [];
    if (!t.id) {
      t.id = `text-${this.#textParts++}`;
      out.push({ type: "text-start", id: t.id });
    }
    for (const delta of units) out.push({ type: "text-delta", id: t.id, delta });
    t.sent = end;
    return out;
  }

  #delta(e: Extract<StreamEvent, { type: "delta" }>): UIChunk[] {
    const out = this.#openStep(e.seq);
    let t = this.#text;
    if (t && (e.epoch > t.epoch || (e.epoch === t.epoch && e.attempt > t.attempt))) {
      // A newer attempt's text without a reset told first (a takeover seen as its text): the same rule.
      out.push(...this.#dropText());
      t = undefined;
    }
    if (!t) {
      t = { epoch: e.epoch, attempt: e.attempt, heard: e.offset === 0 ? "" : undefined, sent: 0 };
      this.#text = t;
    }
    if (t.attempt === 0) Object.assign(t, { epoch: e.epoch, attempt: e.attempt });
    if (t.heard === undefined) return out;
    if (e.offset !== t.heard.length) {
      // Text missed in between: hold the rest until the answer is journaled.
      if (e.offset > t.heard.length) t.heard = undefined;
      else t.heard = t.heard.slice(0, e.offset) + e.text;
      if (t.heard === undefined) return out;
      return [...out, ...this.#sendText(t, t.heard, false)];
    }
    t.heard += e.text;
    return [...out, ...this.#sendText(t, t.heard, false)];
  }

  /** Drops the step's text: a `reset-step` when any was sent (the client drops the step's parts). */
  #dropText(): UIChunk[] {
    const t = this.#text;
    this.#text = undefined;
    if (!t || t.sent === 0) return [];
    // The step's calls are dropped with it by the client: told again if any (a text step has none).
    return [{ type: "reset-step" }];
  }

  #reset(e: Extract<StreamEvent, { type: "reset" }>): UIChunk[] {
    if (this.#step !== e.seq) return [];
    if (e.reason === "lagged") {
      // Text was skipped: what was sent is still the text's beginning; the rest waits for the answer.
      if (this.#text) this.#text.heard = undefined;
      return [];
    }
    const out = this.#dropText();
    this.#text = { epoch: e.epoch, attempt: e.attempt, heard: "", sent: 0 };
    return out;
  }

  #answer(seq: number, text: string): UIChunk[] {
    if (this.#answers !== this.turn) {
      this.#answers++;
      return [];
    }
    this.#answers++;
    const out = this.#openStep(seq);
    let t = this.#text;
    // What was sent must be the answer's beginning; otherwise the step starts its text again.
    if (t && t.sent > 0 && !text.startsWith((t.heard ?? "").slice(0, t.sent))) {
      out.push(...this.#dropText());
      t = undefined;
    }
    if (t && t.sent > 0 && t.heard === undefined) {
      // Held after a skip: the units sent are the answer's beginning only if they were heard so.
      t.heard = text;
    }
    t ??= { epoch: 0, attempt: 0, heard: "", sent: 0 };
    this.#text = t;
    out.push(...this.#sendText(t, text, true));
    out.push(...this.#closeStep(), { type: "finish", finishReason: "stop" });
    this.finished = true;
    return out;
  }

  #toolCalls(seq: number, calls: { seq: number; tool: string; args: Json }[]): UIChunk[] {
    const out = this.#openStep(seq);
    if (this.#text?.id) {
      out.push({ type: "text-end", id: this.#text.id });
      this.#text.id = undefined;
    }
    for (const c of calls) {
      const key = `${this.runId}:${c.seq}`;
      if (this.#calls.has(key)) continue;
      this.#calls.set(key, { tool: c.tool, told: new Set(["input"]) });
      out.push({ type: "tool-input-available", toolCallId: key, toolName: c.tool, input: c.args });
    }
    return out;
  }

  #toolResult(e: Extract<StreamEvent, { type: "tool_result" }>): UIChunk[] {
    const call = this.#calls.get(e.key);
    if (!call || call.told.has("output")) return [];
    if (e.status === "confirmed") {
      call.told.add("output");
      return [{ type: "tool-output-available", toolCallId: e.key, output: e.result }];
    }
    if (e.status === "failed") {
      call.told.add("output");
      return [{ type: "tool-output-error", toolCallId: e.key, errorText: e.error ?? "the call failed" }];
    }
    if (e.status === "flagged" && !call.told.has("flagged")) {
      call.told.add("flagged");
      const why = e.error ?? "the call's outcome is unknown";
      return [
        { type: "tool-output-error", toolCallId: e.key, errorText: `outcome unknown: ${why}` },
        {
          type: "data-outcome",
          id: e.key,
          data: { key: e.key, tool: e.tool, outcome: "unknown", error: why },
        },
      ];
    }
    if (e.status === "waiting" && !call.told.has("waiting")) {
      call.told.add("waiting");
      return [{ type: "data-wait", id: e.key, data: { key: e.key, tool: e.tool, waitsFor: "remote" } }];
    }
    return [];
  }

  #status(e: Extract<StreamEvent, { type: "status" }>): UIChunk[] {
    if (e.status !== "failed" && e.status !== "cancelled" && e.status !== "done") return [];
    // The run ended before this turn's answer: a closed conversation, a failure, a cancel.
    const out = [...this.#begin(), ...this.#closeStep()];
    if (e.status !== "done") out.push({ type: "error", errorText: e.error ?? `the run was ${e.status}` });
    out.push({ type: "finish", finishReason: e.status === "done" ? "other" : "error" });
    this.finished = true;
    return out;
  }

  /** The chunks the calls' approval requests and child runs, read now, add (each told once). */
  callStates(approvals: readonly ApprovalState[], children: readonly ChildState[]): UIChunk[] {
    if (!this.inTurn) return [];
    const out: UIChunk[] = [];
    const decidedAt = (a: ApprovalState) => a.decidedAt ? new Date(a.decidedAt).getTime() : 0;
    const mine = approvals.filter((a) => this.#calls.has(a.key));
    for (const a of mine) {
      const call = this.#calls.get(a.key)!;
      if (call.told.has("approval")) continue;
      call.told.add("approval");
      out.push({ type: "tool-approval-request", approvalId: a.key, toolCallId: a.key });
    }
    const answered = mine.filter((a) => a.status !== "pending").sort((a, b) =>
      decidedAt(a) - decidedAt(b) || (a.key < b.key ? -1 : 1)
    );
    for (const a of answered) {
      const call = this.#calls.get(a.key)!;
      if (call.told.has("answer")) continue;
      call.told.add("answer");
      const approved = a.status === "approved";
      out.push({
        type: "tool-approval-response",
        approvalId: a.key,
        approved,
        ...(a.reason ? { reason: a.reason } : {}),
      });
      if (!approved) {
        call.told.add("output");
        out.push({ type: "tool-output-denied", toolCallId: a.key });
      }
    }
    for (const c of children) {
      const call = c.parentKey ? this.#calls.get(c.parentKey) : undefined;
      if (!call || call.told.has("child")) continue;
      call.told.add("child");
      out.push({
        type: "data-child",
        id: c.parentKey!,
        data: { key: c.parentKey, runId: c.runId, agent: c.agent },
      });
    }
    return out;
  }
}
