/**
 * A chat-completions answer read back: every tool call of the first choice,
 * or its text as the final answer, and the usage reported; an answer that
 * cannot be used is a `badAnswer` {@link ModelError}, counted and re-asked.
 *
 * @module
 */

import { type CodeOf, ModelError } from "../base/errors.ts";
import { serverErrorMessage } from "../base/http.ts";
import type { AnswerCall, PlannerDecision, Usage } from "./transcript.ts";

export function badAnswer(code: CodeOf<"ModelError">, message: string, usage?: Usage): ModelError {
  return new ModelError(code, message, {
    badAnswer: true,
    usage: usage as Record<string, unknown> | undefined,
  });
}

/**
 * Parses a chat-completions response body into a {@link PlannerDecision}:
 * every tool call of the first choice, or its text as the final answer.
 * Throws a `badAnswer` {@link ModelError} (carrying the usage reported) for
 * an answer that cannot be used.
 */
export function parseCompletion(text: string): PlannerDecision {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw badAnswer(
      "MODEL_NOT_JSON",
      `The model's answer is not JSON: ${JSON.stringify(text.slice(0, 120))}`,
    );
  }
  const b = (body ?? {}) as { choices?: unknown; usage?: Usage };
  const usage = b.usage && typeof b.usage === "object" ? b.usage : undefined;
  if (!Array.isArray(b.choices) || b.choices.length === 0) {
    // Some gateways answer 200 with an error object in place of choices: show what it said.
    const said = serverErrorMessage(text);
    throw badAnswer("MODEL_NO_CHOICES", `The model's answer has no choices${said ? `: ${said}` : ""}`, usage);
  }
  const first = b.choices[0] as { message?: Record<string, unknown> } | null;
  const message = first && typeof first === "object" ? first.message : undefined;
  if (!message || typeof message !== "object") {
    throw badAnswer("MODEL_NO_MESSAGE", "The model's first choice has no message", usage);
  }
  const calls = message.tool_calls;
  // Every call is parsed: how many a step may hold is the runtime's rule (step/decide.ts), not the wire's.
  if (Array.isArray(calls) && calls.length > 0) {
    const text = contentText(message.content);
    return {
      kind: "tool_calls",
      calls: calls.map((call) => answerCall(call, usage)),
      ...(text.trim() !== "" ? { text } : {}),
      usage,
    };
  }
  // No tool call: a final answer, unless the answer is unusable. A refusal, an
  // answer cut off by the token limit, or an empty one is not "done": it is
  // refused and re-asked (within the limit) like any other bad answer.
  const finish = (first as { finish_reason?: unknown }).finish_reason;
  if (typeof message.refusal === "string" && message.refusal.trim() !== "") {
    throw badAnswer(
      "MODEL_REFUSED",
      `The model refused: ${JSON.stringify(message.refusal.slice(0, 200))}`,
      usage,
    );
  }
  if (finish === "length") {
    throw badAnswer(
      "MODEL_TRUNCATED",
      "The model's answer was cut off by its token limit (finish_reason length); answer in fewer words",
      usage,
    );
  }
  if (finish === "content_filter") {
    throw badAnswer("MODEL_FILTERED", "The model's answer was withheld by a content filter", usage);
  }
  const content = contentText(message.content);
  if (content.trim() === "") {
    throw badAnswer(
      "MODEL_EMPTY",
      "The model's answer has neither a tool call nor any text: call one tool, or say what was done",
      usage,
    );
  }
  return { kind: "done", text: content, usage };
}

/** One entry of `tool_calls` as a neutral call, or the refusal of a malformed one. */
function answerCall(call: unknown, usage: Usage | undefined): AnswerCall {
  const c = call as { id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
  const fn = c && typeof c === "object" ? c.function : undefined;
  if (!fn || typeof fn.name !== "string") {
    throw badAnswer("MODEL_BAD_TOOL_CALL", "The model's tool call has no function name", usage);
  }
  let args: unknown = {};
  if (typeof fn.arguments === "string" && fn.arguments.trim() !== "") {
    try {
      args = JSON.parse(fn.arguments);
    } catch {
      throw badAnswer(
        "MODEL_ARGS_NOT_JSON",
        `The arguments of the model's call to ${fn.name} are not JSON: ${
          JSON.stringify(fn.arguments.slice(0, 120))
        }`,
        usage,
      );
    }
  } else if (fn.arguments !== null && typeof fn.arguments === "object") {
    // Ollama's native API (and some of its compatible answers) sends the arguments as an object.
    args = fn.arguments;
  }
  const id = (c as { id?: unknown }).id;
  return { ...(typeof id === "string" ? { id } : {}), name: fn.name, args };
}

/** The text of a message's content: a string, or an array of parts whose text parts are joined. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) =>
      part !== null && typeof part === "object" && typeof (part as { text?: unknown }).text === "string"
        ? (part as { text: string }).text
        : ""
    )
    .join("");
}
