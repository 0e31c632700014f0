/**
 * The OpenAI-compatible chat-completions planner, as OpenAI, Azure OpenAI,
 * OpenRouter, vLLM, Ollama, llama.cpp's server and LiteLLM serve it, with
 * tool calling: the neutral transcript and tools mapped to the wire
 * ({@link chatMessages}, {@link openAITools}), the answer mapped back
 * ({@link parseCompletion}), and the HTTP errors classified. The client makes
 * exactly one request per call to `decide`; it never retries on its own,
 * because every model request must be counted in the journal before it is
 * sent. It says when to ask again: a transient error carries the server's
 * `Retry-After`.
 *
 * @module
 */

import { ModelError } from "../base/errors.ts";
import { traceHeaders } from "../base/trace.ts";
import { isTransientStatus, parseRetryAfter, serverErrorMessage } from "../base/http.ts";
import { secretForms } from "../base/log.ts";
import type { Json } from "../base/values.ts";
import { CompletionAccumulator, type SseEvent, SseParser } from "./sse.ts";
import { badAnswer, parseCompletion } from "./_openai_answer.ts";

export { parseCompletion };
import type { DecideRequest, PlannerDecision, ToolDescription, TranscriptMessage } from "./transcript.ts";

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

/** A function tool in the chat-completions `tools` list. */
export interface OpenAITool {
  /** Always `function`. */
  type: "function";
  /** The name, description and JSON Schema of the arguments. */
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

/**
 * The chat-completions `messages` of a transcript: instructions as the
 * `system` message, a call's arguments as JSON text, a result as its JSON
 * text and a failure as `{"error": ...}`, each paired with its call by id.
 */
export function chatMessages(transcript: readonly TranscriptMessage[]): ChatMessage[] {
  return transcript.map((m): ChatMessage => {
    switch (m.role) {
      case "system":
      case "user":
        return { role: m.role, content: m.text };
      case "assistant": {
        const content = m.text ?? null;
        if (m.calls.length === 0) return { role: "assistant", content };
        return {
          role: "assistant",
          content,
          tool_calls: m.calls.map((c) => ({
            id: c.id,
            type: "function",
            function: { name: c.name, arguments: JSON.stringify(c.args) },
          })),
        };
      }
      case "tool":
        return {
          role: "tool",
          tool_call_id: m.callId,
          content: m.failed ? JSON.stringify({ error: m.error }) : JSON.stringify(m.result),
        };
    }
  });
}

/** The chat-completions `tools` parameter of the neutral tool descriptions. */
export function openAITools(tools: readonly ToolDescription[]): OpenAITool[] {
  return tools.map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: t.parameters },
  }));
}

/** A fetch-compatible function (a real `fetch`, or a mock's in-process handler). */
export type FetchLike = (req: Request) => Promise<Response>;

/** Options of {@link OpenAIPlanner}. */
export interface OpenAIPlannerOptions {
  /**
   * Base URL; `/chat/completions` is appended. A URL with no path
   * (`http://127.0.0.1:11434`) gets `/v1`, where every server family serves
   * the API; any other path is used as given (Azure's
   * `https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT`,
   * OpenRouter's `https://openrouter.ai/api/v1`). A trailing
   * `/chat/completions` is dropped. See {@link chatCompletionsUrl}.
   */
  url: string;
  /** The model name sent in each request. */
  model: string;
  /** Sent as a bearer token. Never logged, and masked in whatever the server sends back. */
  apiKey?: string;
  /** Extra headers on every request (Azure's `api-key`, OpenRouter's `HTTP-Referer`, a gateway's own). */
  headers?: Record<string, string>;
  /** Extra query parameters on every request (Azure's `api-version`). */
  query?: Record<string, string>;
  /** Defaults to the global `fetch`. */
  fetch?: FetchLike;
  /** The wall clock, for a `Retry-After` given as an HTTP date. Defaults to `Date.now`. */
  now?: () => number;
  /**
   * The request field that caps the answer when a request carries
   * {@link DecideRequest.maxOutputTokens}. Default `max_tokens`, which every
   * compatible server knows (Ollama, llama.cpp's server and llamafile ignore
   * `max_completion_tokens`, so the cap would be silently lost). OpenAI's
   * reasoning models (o-series, GPT-5) refuse `max_tokens` with a 400: set
   * `max_completion_tokens` for them. Never both: OpenAI refuses a request
   * that sets the two.
   */
  maxTokensField?: MaxTokensField;
}

/** The request field that caps an answer's tokens: see {@link OpenAIPlannerOptions.maxTokensField}. */
export type MaxTokensField = "max_tokens" | "max_completion_tokens";

/** Every {@link MaxTokensField}. */
export const MAX_TOKENS_FIELDS: readonly MaxTokensField[] = ["max_tokens", "max_completion_tokens"];

/**
 * The chat-completions URL of a base URL: `/v1` added when the base has no
 * path, a pasted `/chat/completions` not doubled, the base's own query kept
 * and `query` added.
 *
 * @example
 * ```ts
 * import { chatCompletionsUrl } from "./openai.ts";
 * console.log(chatCompletionsUrl("http://127.0.0.1:11434").href);
 * // http://127.0.0.1:11434/v1/chat/completions
 * console.log(chatCompletionsUrl("https://r.openai.azure.com/openai/deployments/d", { "api-version": "2024-10-21" }).href);
 * // https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-10-21
 * ```
 */
export function chatCompletionsUrl(base: string, query: Record<string, string> = {}): URL {
  const url = new URL(base);
  let path = url.pathname.replace(/\/+$/, "").replace(/\/chat\/completions$/, "");
  if (path === "") path = "/v1";
  url.pathname = `${path}/chat/completions`;
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  return url;
}

/** Query parameter names whose values are credentials (Azure SAS `sig`, a gateway's `key`): masked in messages. */
const SECRET_PARAM = /key|token|secret|sig|password|auth/i;

/** A URL fit for an error message: no password, no credential-looking query values. */
function shownUrl(url: URL): string {
  const shown = new URL(url);
  if (shown.password) shown.password = "***";
  for (const k of [...shown.searchParams.keys()]) {
    if (SECRET_PARAM.test(k)) shown.searchParams.set(k, "***");
  }
  return shown.href;
}

/**
 * A chat-completions client: a `Planner` (the interface is structural; it is
 * declared in `planner.ts`, which re-exports this file).
 */
export class OpenAIPlanner {
  readonly #opts: OpenAIPlannerOptions;
  /** The `fetch` given; unset: the global one, called with the URL and the request's init. */
  readonly #fetch: FetchLike | undefined;
  readonly #url: URL;
  readonly #now: () => number;
  #tools?: { array: readonly ToolDescription[]; json: string };

  /**
   * Creates a client for one endpoint and model. Throws a `TypeError` when
   * `url` is not a URL, a `RangeError` when `maxTokensField` is not one of
   * {@link MAX_TOKENS_FIELDS}.
   */
  constructor(opts: OpenAIPlannerOptions) {
    if (opts.maxTokensField !== undefined && !MAX_TOKENS_FIELDS.includes(opts.maxTokensField)) {
      throw new RangeError(
        `Cannot create the planner as 'maxTokensField' must be one of ${MAX_TOKENS_FIELDS.join(", ")}: ` +
          `current value is ${JSON.stringify(opts.maxTokensField)}`,
      );
    }
    this.#opts = opts;
    this.#fetch = opts.fetch;
    this.#url = chatCompletionsUrl(opts.url, opts.query);
    this.#now = opts.now ?? Date.now;
  }

  /** The endpoint and model. */
  get describe(): string {
    return `${this.#mask(shownUrl(this.#url))} model=${this.#opts.model}`;
  }

  /** `tools` as the `tools` parameter's JSON, kept for the array it was made from (a registry hands out one array). */
  #toolsJson(tools: readonly ToolDescription[]): string {
    if (this.#tools?.array !== tools) {
      this.#tools = { array: tools, json: JSON.stringify(openAITools(tools)) };
    }
    return this.#tools.json;
  }

  /** Replaces the API key, in every form it can be printed in ({@link secretForms}), with `***`. */
  #mask(text: string): string {
    const key = this.#opts.apiKey;
    if (!key) return text;
    for (const form of secretForms(key)) text = text.replaceAll(form, "***");
    return text;
  }

  /** The model name sent in each request. */
  get model(): string {
    return this.#opts.model;
  }

  /** The endpoint's host (`api.openai.com`, `127.0.0.1:9100`): what a limit on a provider names. */
  get provider(): string {
    return this.#url.host;
  }

  /**
   * The characters of the request's prompt as this planner sends it (its
   * `messages` and `tools`), the basis of a budgeted request's reservation.
   */
  promptChars(req: Pick<DecideRequest, "transcript" | "tools">): number {
    return JSON.stringify(chatMessages(req.transcript)).length + this.#toolsJson(req.tools).length;
  }

  /** Sends one chat-completions request and parses the answer. */
  async decide(req: DecideRequest): Promise<PlannerDecision> {
    const { body, wireParams, capped, streamed } = this.#body(req);
    const url = this.#url;
    let res: Response;
    let text: string;
    try {
      const init = { method: "POST", headers: this.#headers(req), body, signal: req.signal };
      // The global fetch takes the URL and init as they are: a Request built first would be copied again.
      res = await (this.#fetch ? this.#fetch(new Request(url, init)) : fetch(url, init));
      if (streamed && res.ok && isEventStream(res)) {
        return parseCompletion(JSON.stringify(await this.#readStream(res, req.onDelta!)));
      }
      text = this.#mask(await res.text());
    } catch (err) {
      if (err instanceof ModelError) throw err;
      throw new ModelError(
        "MODEL_UNREACHABLE",
        `The model at ${this.#mask(shownUrl(url))} could not be reached: ${
          this.#mask((err as Error).message)
        }`,
        { transient: true, cause: err },
      );
    }
    if (res.status < 200 || res.status >= 300) throw this.#httpError(res, text, wireParams, capped);
    return parseCompletion(text);
  }

  /** The request's headers: the run (and agent) travel as headers, with the trace context and the key. */
  #headers(req: DecideRequest): Headers {
    const headers = new Headers(this.#opts.headers);
    headers.set("content-type", "application/json");
    // Deno's fetch sends the trace context itself (OTEL_DENO); a handler called in-process needs it here.
    if (this.#opts.fetch) { for (const [k, v] of Object.entries(traceHeaders())) headers.set(k, v); }
    // A gateway or the mock can attribute requests without a body field that some servers refuse.
    headers.set("x-agent-run", req.runId);
    if (req.agent) headers.set("x-agent-name", req.agent);
    if (this.#opts.apiKey) headers.set("authorization", `Bearer ${this.#opts.apiKey}`);
    return headers;
  }

  /**
   * The request's body. Only what every server family accepts. No
   * `parallel_tool_calls` (reasoning models and some servers refuse it: the
   * runtime refuses a second call itself), no `user` (deprecated by OpenAI), no
   * `tool_choice` ("auto" is the default with tools, and vLLM refuses it unless
   * started with a flag), and no empty `tools` list (OpenAI refuses `[]`). The
   * tools' schemas are the same on every request of a registry: serialised once
   * (#11). A budgeted request carries its answer's cap, in the one field chosen
   * (never both); the parameters go in the wire's names, `extra` merged in as
   * given. Streamed only when someone watches (`onDelta`): the answer is the
   * same either way.
   */
  #body(
    req: DecideRequest,
  ): { body: string; wireParams: Record<string, unknown>; capped: boolean; streamed: boolean } {
    const capped = req.maxOutputTokens !== undefined;
    const cap = capped
      ? `,${JSON.stringify(this.#opts.maxTokensField ?? "max_tokens")}:${
        Math.max(1, Math.floor(req.maxOutputTokens!))
      }`
      : "";
    const wireParams = chatParams(req.params);
    const paramsJson = Object.entries(wireParams).map(([k, v]) =>
      `,${JSON.stringify(k)}:${JSON.stringify(v)}`
    ).join("");
    const streamed = req.onDelta !== undefined;
    const tools = req.tools.length > 0 ? `,"tools":${this.#toolsJson(req.tools)}` : "";
    const messages = JSON.stringify(chatMessages(req.transcript));
    const body = `{"model":${
      JSON.stringify(req.params?.model ?? this.#opts.model)
    },"messages":${messages}${tools}${cap}${paramsJson}${streamed ? STREAM_FIELDS : ""}}`;
    return { body, wireParams, capped, streamed };
  }

  /**
   * The error for an answer with an error status, saying what to change where
   * it can tell: a base URL without /v1, a parameter the server refused, a cap
   * in the field the server does not take.
   */
  #httpError(res: Response, text: string, wireParams: Record<string, unknown>, capped: boolean): ModelError {
    const transient = isTransientStatus(res.status);
    const said = serverErrorMessage(text) ?? text.slice(0, 200);
    let message = `The model at ${this.#mask(shownUrl(this.#url))} answered HTTP ${res.status}${
      said ? `: ${said}` : ""
    }`;
    if (res.status === 404 && !/(^|\/)v1(\/|$)/.test(new URL(this.#opts.url).pathname)) {
      message += `. The base URL's path has no /v1 segment: most servers serve the API under /v1 ` +
        `(try MODEL_URL=${this.#mask(shownUrl(withV1(this.#opts.url)))})`;
    }
    const refused = res.status === 400 ? refusedParams(text, said ?? "", Object.keys(wireParams)) : [];
    if (refused.length > 0) {
      const them = refused.length > 1 ? "them" : "it";
      return new ModelError(
        "MODEL_PARAMS_REFUSED",
        `${message.replace(/\.+$/, "")}. The server refused the request parameter${
          refused.length > 1 ? "s" : ""
        } ${
          refused.map((k) => `${k}=${JSON.stringify(wireParams[k])}`).join(", ")
        }: remove or change ${them} in the agent's modelParams or the run's (MODEL_PARAMS), or use a model that ` +
          `takes ${them}`,
      );
    }
    const field = this.#opts.maxTokensField ?? "max_tokens";
    if (res.status === 400 && capped && /max_(completion_)?tokens/.test(said ?? "")) {
      const other = field === "max_tokens" ? "max_completion_tokens" : "max_tokens";
      message +=
        `. The request capped its answer with ${field} (the run has a token budget); if the server ` +
        `wants ${other}, set MODEL_MAX_TOKENS_FIELD=${other} (or maxTokensField in the agent's model)`;
    }
    return new ModelError("MODEL_HTTP", message, {
      transient,
      retryAfterMs: transient ? parseRetryAfter(res.headers.get("retry-after"), this.#now()) : undefined,
    });
  }

  /**
   * Reads a streamed answer to its end, passing each piece of text to
   * `onDelta` as it arrives, and returns the body a non-streamed request
   * would have got. A stream cut off before its end (no `[DONE]` and no
   * finish reason) is an answer lost on the way: a transient
   * `MODEL_UNREACHABLE`, asked again like a failed request.
   */
  async #readStream(res: Response, onDelta: (text: string) => void): Promise<Record<string, unknown>> {
    const parser = new SseParser();
    const acc = new CompletionAccumulator();
    const decoder = new TextDecoder();
    let done = false;
    const take = (events: SseEvent[]) => {
      for (const ev of events) {
        if (done) return;
        const data = ev.data.trim();
        if (data === "[DONE]") {
          done = true;
          return;
        }
        let chunk: unknown;
        try {
          chunk = JSON.parse(this.#mask(data));
        } catch {
          throw badAnswer(
            "MODEL_NOT_JSON",
            `A chunk of the model's streamed answer is not JSON: ${
              JSON.stringify(this.#mask(data).slice(0, 120))
            }`,
          );
        }
        const added = acc.add(chunk);
        if (added !== "") onDelta(added);
      }
    };
    try {
      // Bounded by the body: the server ends it (or the request's signal does).
      for await (const piece of res.body ?? new ReadableStream<Uint8Array>()) {
        take(parser.push(decoder.decode(piece, { stream: true })));
        if (done) break;
      }
      take(parser.push(decoder.decode() + "\n\n"));
    } catch (err) {
      if (err instanceof ModelError) throw err;
      throw new ModelError(
        "MODEL_UNREACHABLE",
        `The model's streamed answer from ${
          this.#mask(shownUrl(this.#url))
        } was cut off after ${acc.chunks} ` +
          `chunks: ${this.#mask((err as Error).message)}`,
        { transient: true, cause: err },
      );
    } finally {
      if (done) await res.body?.cancel().catch(() => {});
    }
    const body = acc.body();
    const finished = (body.choices as { finish_reason?: unknown }[])[0]?.finish_reason;
    if (!done && (finished === null || finished === undefined) && body.error === undefined) {
      throw new ModelError(
        "MODEL_UNREACHABLE",
        `The model's streamed answer from ${
          this.#mask(shownUrl(this.#url))
        } ended after ${acc.chunks} chunks ` +
          "without a finish reason or [DONE]: it was cut off",
        { transient: true },
      );
    }
    return body;
  }
}

/** Asks for a streamed answer with its usage in a last chunk (OpenAI sends none otherwise). */
const STREAM_FIELDS = `,"stream":true,"stream_options":{"include_usage":true}`;

/** True when a response is server-sent events (a server that ignores `stream` answers JSON: read as such). */
function isEventStream(res: Response): boolean {
  return (res.headers.get("content-type") ?? "").toLowerCase().includes("text/event-stream");
}

/**
 * A request's parameters as chat-completions body fields: `temperature`,
 * `top_p`, `stop`, `seed`, `reasoning_effort`, then `extra`'s fields as given
 * (a field of `extra` replaces one of those of the same name).
 */
export function chatParams(params: DecideRequest["params"]): Record<string, Json> {
  if (!params) return {};
  const out: Record<string, Json> = {};
  if (params.temperature !== undefined) out.temperature = params.temperature;
  if (params.topP !== undefined) out.top_p = params.topP;
  if (params.stop !== undefined) out.stop = params.stop;
  if (params.seed !== undefined) out.seed = params.seed;
  if (params.reasoningEffort !== undefined) out.reasoning_effort = params.reasoningEffort;
  return { ...out, ...params.extra };
}

/**
 * The request parameters a 400 answer refuses: the one its error names in
 * `param` (OpenAI's shape), or those of `sent` its message names.
 */
function refusedParams(body: string, said: string, sent: readonly string[]): string[] {
  if (sent.length === 0) return [];
  let named: unknown;
  try {
    named = (JSON.parse(body) as { error?: { param?: unknown } })?.error?.param;
  } catch {
    named = undefined;
  }
  if (typeof named === "string" && sent.includes(named)) return [named];
  const word = (k: string) =>
    new RegExp(`(^|[^A-Za-z0-9_])${k.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}([^A-Za-z0-9_]|$)`);
  return sent.filter((k) => word(k).test(said));
}

function withV1(base: string): URL {
  const url = new URL(base);
  url.pathname = url.pathname.replace(/\/+$/, "") + "/v1";
  return url;
}
