/**
 * The model, behind the {@link Planner} interface, and its real
 * implementation: a client of the OpenAI-compatible chat-completions API with
 * tool calling. The client makes exactly one request per call to `decide`; it
 * never retries on its own, because every model request must be counted in
 * the journal before it is sent.
 *
 * @module
 */

import { ModelError } from "./errors.ts";
import { traceHeaders } from "./telemetry.ts";
import type { OpenAITool } from "./tools.ts";

/** A chat message in the chat-completions format. */
export type ChatMessage =
  | { role: "system" | "user"; content: string }
  | { role: "assistant"; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: "tool"; tool_call_id: string; content: string };

/** A tool call inside an assistant message. */
export interface ChatToolCall {
  /** Pairs the call with its tool message. */
  id: string;
  /** Always `function`. */
  type: "function";
  /** The function's name and its JSON-encoded arguments. */
  function: { name: string; arguments: string };
}

/** Token counts reported by the model. */
export interface Usage {
  /** Tokens in the request. */
  prompt_tokens?: number;
  /** Tokens in the answer. */
  completion_tokens?: number;
  /** Both together. */
  total_tokens?: number;
}

/** What the model decided for one step. */
export type ModelAnswer =
  | { kind: "tool"; tool: string; args: unknown; usage?: Usage }
  | { kind: "done"; message: string; usage?: Usage };

/** One question to the model. */
export interface DecideRequest {
  /** The run asking (sent as `user`). */
  runId: string;
  /** The step being decided. */
  seq: number;
  /** The agent asking (sent as the `x-agent-name` header, so a mock can follow a per-agent script). */
  agent?: string;
  /** The conversation so far. */
  messages: ChatMessage[];
  /** The tools the model may call. */
  tools: OpenAITool[];
  /** Aborts the request. */
  signal?: AbortSignal;
}

/** Asks a model what to do next. One call is one (billable) request. */
export interface Planner {
  /** A short description for the start-up log, e.g. the endpoint. */
  readonly describe: string;
  /** The model's name, for telemetry (`gen_ai.request.model`), when known. */
  readonly model?: string;
  /**
   * Asks once. Throws a {@link ModelError}: `transient` when asking again may
   * help, `badAnswer` when an answer arrived but cannot be used.
   */
  decide(req: DecideRequest): Promise<ModelAnswer>;
}

/** A fetch-compatible function (a real `fetch`, or a mock's in-process handler). */
export type FetchLike = (req: Request) => Promise<Response>;

/** Options of {@link OpenAIPlanner}. */
export interface OpenAIPlannerOptions {
  /** Base URL, e.g. `http://127.0.0.1:9100/v1`; `/chat/completions` is appended. */
  url: string;
  /** The model name sent in each request. */
  model: string;
  /** Sent as a bearer token. Never logged. */
  apiKey?: string;
  /** Defaults to the global `fetch`. */
  fetch?: FetchLike;
}

/** True for HTTP statuses worth asking again: 408, 429 and 5xx. */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** A chat-completions client. */
export class OpenAIPlanner implements Planner {
  readonly #opts: OpenAIPlannerOptions;
  readonly #fetch: FetchLike;

  /** Creates a client for one endpoint and model. */
  constructor(opts: OpenAIPlannerOptions) {
    this.#opts = opts;
    this.#fetch = opts.fetch ?? ((req) => fetch(req));
  }

  /** The endpoint and model. */
  get describe(): string {
    return `${this.#opts.url} model=${this.#opts.model}`;
  }

  /** Replaces the API key, as written and JSON-escaped, with `***`. */
  #mask(text: string): string {
    const key = this.#opts.apiKey;
    if (!key) return text;
    for (const form of [key, JSON.stringify(key).slice(1, -1)]) text = text.replaceAll(form, "***");
    return text;
  }

  /** The model name sent in each request. */
  get model(): string {
    return this.#opts.model;
  }

  /** Sends one chat-completions request and parses the answer. */
  async decide(req: DecideRequest): Promise<ModelAnswer> {
    const headers: Record<string, string> = { "content-type": "application/json", "x-agent-run": req.runId };
    // Deno's fetch sends the trace context itself (OTEL_DENO); a handler called in-process needs it here.
    if (this.#opts.fetch) Object.assign(headers, traceHeaders());
    if (req.agent) headers["x-agent-name"] = req.agent;
    if (this.#opts.apiKey) headers.authorization = `Bearer ${this.#opts.apiKey}`;
    const body = JSON.stringify({
      model: this.#opts.model,
      messages: req.messages,
      tools: req.tools,
      tool_choice: "auto",
      parallel_tool_calls: false,
      // Lets a provider (and the mock) attribute requests to a run.
      user: req.runId,
    });
    const url = this.#opts.url.replace(/\/+$/, "") + "/chat/completions";
    let text: string;
    let status: number;
    try {
      const res = await this.#fetch(new Request(url, { method: "POST", headers, body, signal: req.signal }));
      status = res.status;
      text = await res.text();
      // A provider that echoes the request (headers in an error page, say) must not
      // carry the key into logs, stored errors or decisions.
      text = this.#mask(text);
    } catch (err) {
      throw new ModelError(
        "MODEL_UNREACHABLE",
        `The model at ${url} could not be reached: ${this.#mask((err as Error).message)}`,
        {
          transient: true,
          cause: err,
        },
      );
    }
    if (status < 200 || status >= 300) {
      throw new ModelError(
        "MODEL_HTTP",
        `The model answered HTTP ${status}: ${text.slice(0, 200)}`,
        { transient: isTransientStatus(status) },
      );
    }
    return parseCompletion(text);
  }
}

function badAnswer(code: string, message: string, usage?: Usage): ModelError {
  return new ModelError(code, message, {
    badAnswer: true,
    usage: usage as Record<string, unknown> | undefined,
  });
}

/** Parses a chat-completions response body into a {@link ModelAnswer}. */
export function parseCompletion(text: string): ModelAnswer {
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
    throw badAnswer("MODEL_NO_CHOICES", "The model's answer has no choices", usage);
  }
  const first = b.choices[0] as { message?: Record<string, unknown> } | null;
  const message = first && typeof first === "object" ? first.message : undefined;
  if (!message || typeof message !== "object") {
    throw badAnswer("MODEL_NO_MESSAGE", "The model's first choice has no message", usage);
  }
  const calls = message.tool_calls;
  if (Array.isArray(calls) && calls.length > 1) {
    throw badAnswer(
      "MODEL_MULTIPLE_TOOLS",
      `The model asked for ${calls.length} tool calls at once; exactly one per step is allowed`,
      usage,
    );
  }
  if (Array.isArray(calls) && calls.length === 1) {
    const call = calls[0] as { function?: { name?: unknown; arguments?: unknown } } | null;
    const fn = call && typeof call === "object" ? call.function : undefined;
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
    } else if (fn.arguments !== undefined && typeof fn.arguments === "object") {
      args = fn.arguments;
    }
    return { kind: "tool", tool: fn.name, args, usage };
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
  const content = typeof message.content === "string" ? message.content : "";
  if (content.trim() === "") {
    throw badAnswer(
      "MODEL_EMPTY",
      "The model's answer has neither a tool call nor any text: call one tool, or say what was done",
      usage,
    );
  }
  return { kind: "done", message: content, usage };
}
