/**
 * The conversation sent to the model, rebuilt from the run's rows: the goal,
 * then for each decided step an assistant tool call and the tool's result,
 * then, for the step being decided, why earlier answers were refused.
 *
 * @module
 */

import type { RunState } from "./context.ts";
import type { ChatMessage } from "./planner.ts";

/** The chat messages for deciding step `seq`, under the agent's `instructions`. */
export function buildMessages(state: RunState, seq: number, instructions: string): ChatMessage[] {
  const messages: ChatMessage[] = [
    { role: "system", content: instructions },
    { role: "user", content: state.goal },
  ];
  for (let s = 0; s < seq; s++) {
    const decision = state.journal.get(s)?.decision;
    if (!decision || !("tool" in decision)) continue;
    const id = `call_${s}`;
    messages.push({
      role: "assistant",
      content: null,
      tool_calls: [{
        id,
        type: "function",
        function: { name: decision.tool, arguments: JSON.stringify(decision.args) },
      }],
    });
    const effect = state.effects.get(s);
    let content: string;
    if (effect?.status === "confirmed") content = JSON.stringify(effect.result);
    else if (effect?.status === "failed") content = JSON.stringify({ error: effect.error });
    else content = JSON.stringify({ error: "The outcome of this call is unknown" });
    messages.push({ role: "tool", tool_call_id: id, content });
  }
  for (const rejection of state.journal.get(seq)?.rejections ?? []) {
    messages.push({
      role: "user",
      content: `Your previous answer was refused (${rejection.code}): ${rejection.message}. ` +
        "Answer again with exactly one call to a listed tool, or with no tool call when the goal is complete.",
    });
  }
  return messages;
}
