/**
 * The conversation sent to the model, rebuilt from the run's rows: the goal,
 * then for each decided step an assistant tool call and the tool's result,
 * then, for the step being decided, why earlier answers were refused. Neutral
 * ({@link TranscriptMessage}): each planner maps it to its own wire format.
 *
 * @module
 */

import type { RunState } from "../run/context.ts";
import type { AssistantMessage, ProviderMetadata, TranscriptMessage } from "../model/transcript.ts";
import { callsOf, type StepCall } from "../run/calls.ts";
import type { SettledTranscript } from "../run/tallied.ts";
import type { Decision } from "../store/rows.ts";

/** What a tool result says of a call whose outcome no row records (at intent, flagged, or never sent). */
export const UNKNOWN_OUTCOME = "The outcome of this call is unknown";

/** The id of the call at `seq`: derived from the journal, so every request (and restart) names it alike. */
export function callId(seq: number): string {
  return `call_${seq}`;
}

/**
 * The transcript for deciding step `seq`, under the agent's `instructions`.
 * In a conversation each earlier final answer is an assistant turn, followed
 * by the message taken after it. The settled steps come from (and go to) the
 * state's `transcript` ({@link SettledTranscript}); the messages are a new array.
 * With `historySteps`, only the last that many settled steps follow the goal
 * (each whole: a call beside its result), so a step's transcript, and its cost,
 * stay the same size however long the run grows; steps still open always follow.
 */
export function buildTranscript(
  state: Pick<RunState, "goal" | "journal" | "effects" | "conversation" | "transcript">,
  seq: number,
  instructions: string,
  historySteps?: number,
): TranscriptMessage[] {
  const kept = state.transcript;
  const settled: SettledTranscript = kept && kept.instructions === instructions && kept.upTo <= seq ? kept : {
    instructions,
    messages: [{ role: "system", text: instructions }, { role: "user", text: state.goal }],
    upTo: 0,
    answers: 0,
    starts: [],
  };
  state.transcript = settled;
  let answers = settled.answers;
  const tail: TranscriptMessage[] = [];
  for (let s = settled.upTo; s < seq; s++) {
    const final = tail.length === 0 && isSettled(state, s, answers);
    const before = settled.messages.length;
    answers = stepMessages(state, s, answers, final ? settled.messages : tail);
    if (final) {
      if (settled.messages.length > before) settled.starts.push(before);
      settled.upTo = s + 1;
      settled.answers = answers;
    }
  }
  const transcript = shown(settled, historySteps).concat(tail);
  for (const rejection of state.journal.get(seq)?.rejections ?? []) {
    transcript.push({
      role: "user",
      text: `Your previous answer was refused (${rejection.code}): ${rejection.message}. ` +
        "Answer again with calls to listed tools, or with no tool call when the goal is complete.",
    });
  }
  return transcript;
}

/** The settled messages shown, as a new array: the instructions, the goal, and the last `historySteps` steps (all without it). */
function shown(settled: SettledTranscript, historySteps: number | undefined): TranscriptMessage[] {
  const { messages, starts } = settled;
  if (historySteps === undefined || starts.length <= historySteps) return messages.slice();
  return messages.slice(0, 2).concat(messages.slice(starts[starts.length - historySteps]));
}

/** The call statuses a row never leaves. */
const FINAL = new Set(["confirmed", "failed"]);

/**
 * True when step `s`'s messages can never change: no row there (a seq a
 * call of an earlier step owns), or its decision with every call settled
 * for good, or, in a conversation, an answer with the message taken after it.
 */
function isSettled(
  state: Pick<RunState, "journal" | "effects" | "conversation">,
  s: number,
  answers: number,
) {
  const row = state.journal.get(s);
  if (!row) return true;
  const decision = row.decision;
  if (!decision) return false;
  if ("done" in decision && state.conversation) return state.conversation.messages[answers + 1] !== undefined;
  return callsOf(decision, s).every((c) => FINAL.has(state.effects.get(c.seq)?.status ?? ""));
}

/** Appends step `s`'s messages to `out`; returns the final answers counted after it. */
function stepMessages(
  state: Pick<RunState, "journal" | "effects" | "conversation">,
  s: number,
  answers: number,
  out: TranscriptMessage[],
): number {
  const decision = state.journal.get(s)?.decision;
  if (!decision) return answers;
  if ("done" in decision && state.conversation) {
    out.push({ role: "assistant", text: decision.message, calls: [] });
    const next = state.conversation.messages[answers + 1];
    if (next) out.push({ role: "user", text: next.text });
    return answers + 1;
  }
  const calls = callsOf(decision, s);
  if (calls.length === 0) return answers;
  // One assistant turn with every call of the step, then each call's result, in the order asked.
  out.push(assistantTurn(decision, calls));
  for (const c of calls) {
    const id = callId(c.seq);
    const effect = state.effects.get(c.seq);
    // A confirmed call (sent, reconciled or resolved by a person) has its result; a failed one
    // (the tool's error, or a person's denial) its reason; anything else is not known.
    if (effect?.status === "confirmed") {
      out.push({ role: "tool", callId: id, name: c.tool, failed: false, result: effect.result });
    } else {
      // Every write of a failed row gives its reason; the column alone allows none.
      const error = effect?.status === "failed" ? effect.error ?? "The call failed" : UNKNOWN_OUTCOME;
      out.push({ role: "tool", callId: id, name: c.tool, failed: true, error });
    }
  }
  return answers;
}

/**
 * The assistant turn of a decided step: its calls, and, when the planner that
 * decided it kept the answer's parts, those parts as they were journaled (a
 * call's provider metadata on the call too, its text as `text`), so a planner
 * that sends them back sends what the provider gave.
 */
function assistantTurn(decision: Decision, calls: readonly StepCall[]): AssistantMessage {
  const parts = decision.parts;
  if (parts === undefined) {
    return {
      role: "assistant",
      calls: calls.map((c) => ({ id: callId(c.seq), name: c.tool, args: c.args })),
    };
  }
  const metadata = new Map<number, ProviderMetadata>();
  let text = "";
  for (const p of parts) {
    if (p.type === "call" && p.providerMetadata !== undefined) metadata.set(p.index, p.providerMetadata);
    if (p.type === "text") text += p.text;
  }
  return {
    role: "assistant",
    ...(text !== "" ? { text } : {}),
    calls: calls.map((c) => {
      const providerMetadata = metadata.get(c.index);
      return {
        id: callId(c.seq),
        name: c.tool,
        args: c.args,
        ...(providerMetadata ? { providerMetadata } : {}),
      };
    }),
    parts,
  };
}
