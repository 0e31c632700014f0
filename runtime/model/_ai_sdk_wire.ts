/**
 * The AI SDK adapter's wire, for `ai_sdk.ts` (and its tests) only: the
 * neutral transcript and tools as an AI SDK prompt and call options, a
 * `doGenerate` result of any specification version as a decision, and a
 * thrown error as a {@link ModelError}. Typed against the specification
 * package's own types (imported as types: no AI SDK code is loaded), which
 * is why this module is not an export path: its signatures name them.
 *
 * @module
 */

import type * as Spec from "npm:@ai-sdk/provider@4.0.38";
import { type CodeOf, ModelError } from "../base/errors.ts";
import { isTransientStatus, parseRetryAfter } from "../base/http.ts";
import type { Json } from "../base/values.ts";
import type { ToolDescription } from "./transcript.ts";
import type {
  AnswerCall,
  AssistantMessage,
  AssistantPart,
  DecideRequest,
  ModelParams,
  PlannerDecision,
  ProviderMetadata,
  ProviderResultPart,
  TranscriptMessage,
  Usage,
} from "./transcript.ts";

/** The specification versions the adapter speaks: `v2` (AI SDK 5), `v3` (AI SDK 6), `v4` (AI SDK 7). */
export type SpecificationVersion = "v2" | "v3" | "v4";

/** The prompt the adapter builds (v4's shape; v2 and v3 take the same but for `custom` parts, sent to v4 only). */
export type Prompt = Spec.LanguageModelV4Prompt;

/** The call options of one decision (v4's; `reasoning` is sent to v4 models only). */
export type CallOptions = Spec.LanguageModelV4CallOptions;

/** A function tool as the model is offered it. */
export type FunctionTool = Spec.LanguageModelV4FunctionTool;

/** What `doGenerate` resolves to, in any version the adapter speaks. */
export type GenerateResult =
  | Awaited<ReturnType<Spec.LanguageModelV2["doGenerate"]>>
  | Spec.LanguageModelV3GenerateResult
  | Spec.LanguageModelV4GenerateResult;

/** The AI SDK function tools of the neutral tool descriptions (their JSON Schema as `inputSchema`). */
export function aiSdkTools(tools: readonly ToolDescription[]): FunctionTool[] {
  return tools.map((t) => ({
    type: "function",
    name: t.name,
    description: t.description,
    inputSchema: t.parameters as FunctionTool["inputSchema"],
  }));
}

type PromptMessage = Spec.LanguageModelV4Message;
type AssistantContent = Extract<PromptMessage, { role: "assistant" }>["content"];
type ToolResultPart = Spec.LanguageModelV4ToolResultPart;

/** `{ providerOptions }` when there is metadata to send back, else nothing. */
function sentBack(
  metadata: ProviderMetadata | undefined,
): { providerOptions?: Spec.SharedV4ProviderOptions } {
  return metadata === undefined ? {} : { providerOptions: metadata as Spec.SharedV4ProviderOptions };
}

/**
 * The AI SDK prompt of a transcript: instructions as the `system` message,
 * user text as a text part, each assistant turn as its journaled parts in
 * order (reasoning and metadata as they came, the metadata as
 * `providerOptions`, which is how `ai` sends a part back) or as its text and
 * calls, and the results of one step's calls as one `tool` message: a result
 * as `{ type: "json" }`, a failure as `error-text`. `custom` parts are sent to
 * v4 models only (the older prompts have none).
 */
export function aiSdkPrompt(
  transcript: readonly TranscriptMessage[],
  version: SpecificationVersion = "v4",
): Prompt {
  const prompt: PromptMessage[] = [];
  for (const m of transcript) {
    switch (m.role) {
      case "system":
        prompt.push({ role: "system", content: m.text });
        break;
      case "user":
        prompt.push({ role: "user", content: [{ type: "text", text: m.text }] });
        break;
      case "assistant":
        prompt.push({ role: "assistant", content: assistantContent(m, version) });
        break;
      case "tool": {
        const part: ToolResultPart = {
          type: "tool-result",
          toolCallId: m.callId,
          toolName: m.name,
          output: m.failed ? { type: "error-text", value: m.error } : { type: "json", value: m.result },
        };
        const last = prompt.at(-1);
        if (last?.role === "tool") last.content.push(part);
        else prompt.push({ role: "tool", content: [part] });
        break;
      }
    }
  }
  return prompt;
}

function assistantContent(m: AssistantMessage, version: SpecificationVersion): AssistantContent {
  const content: AssistantContent = [];
  const sent = new Set<number>();
  const call = (index: number, metadata: ProviderMetadata | undefined) => {
    const c = m.calls[index];
    if (c === undefined || sent.has(index)) return;
    sent.add(index);
    content.push({
      type: "tool-call",
      toolCallId: c.id,
      toolName: c.name,
      input: c.args,
      ...sentBack(metadata ?? c.providerMetadata),
    });
  };
  if (m.parts !== undefined) {
    for (const p of m.parts) {
      switch (p.type) {
        case "text":
          content.push({ type: "text", text: p.text, ...sentBack(p.providerMetadata) });
          break;
        case "reasoning":
          content.push({ type: "reasoning", text: p.text, ...sentBack(p.providerMetadata) });
          break;
        case "custom":
          if (version === "v4") {
            content.push({
              type: "custom",
              kind: p.kind as `${string}.${string}`,
              ...sentBack(p.providerMetadata),
            });
          }
          break;
        case "call":
          call(p.index, p.providerMetadata);
          break;
        case "provider-call":
          content.push({
            type: "tool-call",
            toolCallId: p.id,
            toolName: p.name,
            input: p.input,
            providerExecuted: true,
            ...sentBack(p.providerMetadata),
          });
          break;
        case "provider-result":
          content.push({
            type: "tool-result",
            toolCallId: p.id,
            toolName: p.name,
            output: providerOutput(p),
            ...sentBack(p.providerMetadata),
          });
          break;
      }
    }
  } else if (m.text !== undefined && m.text !== "") {
    content.push({ type: "text", text: m.text });
  }
  // Every call is sent: those the parts did not place (or all, for a planner that kept no parts) last.
  for (let i = 0; i < m.calls.length; i++) call(i, undefined);
  return content;
}

/** A provider-executed tool's result as `ai` sends it back: an error as `error-json`, text as text, else JSON. */
function providerOutput(p: ProviderResultPart): Spec.LanguageModelV4ToolResultOutput {
  if (p.isError) return { type: "error-json", value: p.result };
  return typeof p.result === "string" ? { type: "text", value: p.result } : { type: "json", value: p.result };
}

/**
 * The call options of one decision and the adapter's own warnings about
 * them: the prompt, the tools, the answer's cap, the request parameters
 * (`defaults` under the request's own, field by field; `extra` as
 * `providerOptions`, merged by provider), the run's headers and the abort
 * signal. Reasoning effort is a call option of v4 models only; for older
 * ones it is left out with a warning.
 */
export function aiSdkCallOptions(
  req: DecideRequest,
  opts: {
    version: SpecificationVersion;
    tools: FunctionTool[];
    defaults?: ModelParams;
    headers?: Record<string, string>;
    signal?: AbortSignal;
  },
): { options: CallOptions; warnings: string[] } {
  const warnings: string[] = [];
  const base = opts.defaults ?? {};
  const asked = req.params ?? {};
  const p = { ...base, ...asked };
  const cap = req.maxOutputTokens === undefined
    ? base.maxOutputTokens
    : base.maxOutputTokens === undefined
    ? req.maxOutputTokens
    : Math.min(req.maxOutputTokens, base.maxOutputTokens);
  const providerOptions = providerOptionsOf(base.extra, asked.extra);
  const headers: Record<string, string> = { ...opts.headers, "x-agent-run": req.runId };
  if (req.agent) headers["x-agent-name"] = req.agent;
  const options: CallOptions = {
    prompt: aiSdkPrompt(req.transcript, opts.version),
    ...(opts.tools.length > 0 ? { tools: opts.tools } : {}),
    ...(cap !== undefined ? { maxOutputTokens: Math.max(1, Math.floor(cap)) } : {}),
    ...(p.temperature !== undefined ? { temperature: p.temperature } : {}),
    ...(p.topP !== undefined ? { topP: p.topP } : {}),
    ...(p.stop !== undefined ? { stopSequences: p.stop } : {}),
    ...(p.seed !== undefined ? { seed: p.seed } : {}),
    ...(providerOptions !== undefined ? { providerOptions } : {}),
    headers,
    ...(opts.signal ? { abortSignal: opts.signal } : {}),
  };
  if (p.reasoningEffort !== undefined) {
    if (opts.version === "v4") options.reasoning = p.reasoningEffort;
    else {
      warnings.push(
        `reasoning effort ${JSON.stringify(p.reasoningEffort)} is not a call option of specification ` +
          `${opts.version} models and was not sent: set it in the provider's options (extra)`,
      );
    }
  }
  return { options, warnings };
}

/**
 * `extra` as `providerOptions`: keyed by provider, each an object; the
 * request's entry for a provider merged over the defaults'. Throws a
 * permanent `MODEL_CALL_INVALID` for an entry that is not an object.
 */
function providerOptionsOf(
  base: Record<string, Json> | undefined,
  asked: Record<string, Json> | undefined,
): Spec.SharedV4ProviderOptions | undefined {
  if (base === undefined && asked === undefined) return undefined;
  const out: Record<string, Record<string, Json>> = {};
  for (const extra of [base, asked]) {
    for (const [provider, value] of Object.entries(extra ?? {})) {
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        throw new ModelError(
          "MODEL_CALL_INVALID",
          "The request parameters' 'extra' are an AI SDK model's providerOptions, keyed by provider with an " +
            'object each (e.g. { anthropic: { thinking: { type: "enabled", budgetTokens: 2048 } } }): ' +
            `extra.${provider} is ${JSON.stringify(value)}`,
        );
      }
      out[provider] = { ...out[provider], ...value };
    }
  }
  return out as Spec.SharedV4ProviderOptions;
}
/** A finish reason of any version: v2's string, or v3's and v4's `{ unified, raw }`. */
function finishOf(result: { finishReason?: unknown }): { unified: string; raw?: string } {
  const f = result.finishReason;
  if (typeof f === "string") return { unified: f === "unknown" ? "other" : f, raw: f };
  if (typeof f === "object" && f !== null) {
    const { unified, raw } = f as { unified?: unknown; raw?: unknown };
    return {
      unified: typeof unified === "string" ? unified : "other",
      raw: typeof raw === "string" ? raw : undefined,
    };
  }
  return { unified: "other" };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The usage of any version in the journal's names: v3's and v4's
 * `{ inputTokens: { total, cacheRead, cacheWrite }, outputTokens: { total,
 * reasoning } }`, or v2's flat counts; the total computed when not given.
 * Cached tokens count in `prompt_tokens` and reasoning tokens in
 * `completion_tokens`, as the provider counts them, so budgets see them.
 */
export function aiSdkUsage(usage: unknown): Usage | undefined {
  if (!isRecord(usage)) return undefined;
  const n = (v: unknown) => typeof v === "number" && Number.isFinite(v) ? v : undefined;
  let input: number | undefined;
  let output: number | undefined;
  let total: number | undefined;
  let cached: number | undefined;
  let written: number | undefined;
  let reasoning: number | undefined;
  if (isRecord(usage.inputTokens) || isRecord(usage.outputTokens)) {
    const i = isRecord(usage.inputTokens) ? usage.inputTokens : {};
    const o = isRecord(usage.outputTokens) ? usage.outputTokens : {};
    input = n(i.total);
    output = n(o.total);
    cached = n(i.cacheRead);
    written = n(i.cacheWrite);
    reasoning = n(o.reasoning);
  } else {
    input = n(usage.inputTokens);
    output = n(usage.outputTokens);
    total = n(usage.totalTokens);
    cached = n(usage.cachedInputTokens);
    reasoning = n(usage.reasoningTokens);
  }
  if (total === undefined && (input !== undefined || output !== undefined)) {
    total = (input ?? 0) + (output ?? 0);
  }
  const out: Usage = {};
  if (input !== undefined) out.prompt_tokens = input;
  if (output !== undefined) out.completion_tokens = output;
  if (total !== undefined) out.total_tokens = total;
  if (cached !== undefined || written !== undefined) {
    out.prompt_tokens_details = {
      ...(cached !== undefined ? { cached_tokens: cached } : {}),
      ...(written !== undefined ? { cache_write_tokens: written } : {}),
    };
  }
  if (reasoning !== undefined) out.completion_tokens_details = { reasoning_tokens: reasoning };
  return Object.keys(out).length > 0 ? out : undefined;
}

/** A warning of any version as one line: `unsupported: seed`, `other: ...`. */
function warningText(w: unknown): string {
  if (!isRecord(w)) return String(w);
  const what = [w.feature, w.setting, isRecord(w.tool) ? w.tool.name : undefined]
    .find((x) => typeof x === "string");
  const detail = [w.details, w.message].find((x) => typeof x === "string");
  return `${String(w.type ?? "warning")}${what ? `: ${what}` : ""}${detail ? ` (${detail})` : ""}`;
}

/** Provider metadata worth keeping: an object with some provider's entry not empty. */
function metadataOf(value: unknown): ProviderMetadata | undefined {
  if (!isRecord(value)) return undefined;
  const kept = Object.entries(value).filter(([, v]) => isRecord(v) && Object.keys(v).length > 0);
  return kept.length > 0 ? Object.fromEntries(kept) as ProviderMetadata : undefined;
}

/** `metadata` as a part's optional field. */
function withMetadata(metadata: ProviderMetadata | undefined): { providerMetadata?: ProviderMetadata } {
  return metadata === undefined ? {} : { providerMetadata: metadata };
}

/** A JSON value for the journal (what `JSON` would make of it; `null` for what it cannot hold). */
function jsonOf(value: unknown): Json {
  if (value === undefined) return null;
  try {
    return JSON.parse(JSON.stringify(value) ?? "null") as Json;
  } catch {
    return null; // a cycle or a bigint: no JSON value
  }
}

function badAnswer(code: CodeOf<"ModelError">, message: string, usage: Usage | undefined): ModelError {
  return new ModelError(code, message, {
    badAnswer: true,
    usage: usage as Record<string, unknown> | undefined,
  });
}

/**
 * A `doGenerate` result (of any version) as a {@link PlannerDecision}:
 *
 * - tool calls (not provider-executed), one or more, are the decision's calls,
 *   their JSON input parsed (not JSON: `MODEL_ARGS_NOT_JSON`), unless the
 *   answer finished `length` or `interrupted` (`MODEL_TRUNCATED`),
 *   `content-filter` (`MODEL_FILTERED`) or `error` (`MODEL_NO_MESSAGE`);
 * - with none, text is the final answer when the answer finished `stop` (or
 *   `tool-calls` when the provider ran its own tools and then spoke):
 *   `done`, with the tools the provider ran kept in its parts; `length`,
 *   `interrupted`, `content-filter`, `error` and `other` are refused with
 *   the codes above, and an answer with no text is `MODEL_EMPTY`.
 *
 * Every part that must reach the model again (reasoning, provider metadata,
 * provider-executed calls and their results, text beside calls) is in
 * `parts`; an answer with none (bare calls, or a final text) carries no
 * `parts`, so its decision is stored as the chat-completions planner's is.
 * Files, sources and approval requests are not kept (a warning says so for
 * files and approval requests). A refused answer's error carries its usage.
 */
export function aiSdkAnswer(result: GenerateResult, warnings: readonly string[] = []): PlannerDecision {
  const usage = aiSdkUsage(result.usage);
  const notes = [...warnings, ...(result.warnings ?? []).map(warningText)];
  const finish = finishOf(result);
  const parts: AssistantPart[] = [];
  const calls: AnswerCall[] = [];
  let text = "";
  let providerRan = false;
  for (const part of (result.content ?? []) as unknown[]) {
    if (!isRecord(part)) continue;
    const metadata = metadataOf(part.providerMetadata);
    switch (part.type) {
      case "text": {
        const said = typeof part.text === "string" ? part.text : "";
        if (said === "" && metadata === undefined) break;
        text += said;
        parts.push({ type: "text", text: said, ...withMetadata(metadata) });
        break;
      }
      case "reasoning":
        parts.push({
          type: "reasoning",
          text: typeof part.text === "string" ? part.text : "",
          ...withMetadata(metadata),
        });
        break;
      case "custom":
        parts.push({ type: "custom", kind: String(part.kind), ...withMetadata(metadata) });
        break;
      case "tool-call": {
        const name = part.toolName;
        if (typeof name !== "string" || name === "") {
          throw badAnswer("MODEL_BAD_TOOL_CALL", "The model's tool call has no tool name", usage);
        }
        if (part.providerExecuted === true) {
          providerRan = true;
          parts.push({
            type: "provider-call",
            id: String(part.toolCallId),
            name,
            input: providerInput(part.input),
            ...withMetadata(metadata),
          });
          break;
        }
        const id = typeof part.toolCallId === "string" ? { id: part.toolCallId } : {};
        calls.push({ ...id, name, args: clientInput(name, part.input, usage) });
        parts.push({ type: "call", index: calls.length - 1, ...withMetadata(metadata) });
        break;
      }
      case "tool-result":
        // Only the provider's own tools have results in an answer; a preliminary one is replaced by the final.
        if (part.preliminary === true) break;
        providerRan = true;
        parts.push({
          type: "provider-result",
          id: String(part.toolCallId),
          name: String(part.toolName),
          result: jsonOf(part.result),
          ...(part.isError === true ? { isError: true } : {}),
          ...withMetadata(metadata),
        });
        break;
      case "file":
      case "reasoning-file":
        notes.push(`the answer's ${part.type} part (${String(part.mediaType)}) is not kept in the journal`);
        break;
      case "tool-approval-request":
        notes.push(
          `a tool the provider runs asked for approval (call ${String(part.toolCallId)}); approving ` +
            "provider-executed tools is not supported, so it was not approved",
        );
        break;
      default:
        break; // sources: what the answer cited, nothing the model needs back
    }
  }
  const kept = parts.some((p) =>
    p.providerMetadata !== undefined || (p.type !== "call" && !(p.type === "text" && calls.length === 0))
  );
  const extras = {
    ...(kept ? { parts } : {}),
    ...(notes.length > 0 ? { warnings: notes } : {}),
  };
  const raw = finish.raw !== undefined ? `, raw ${JSON.stringify(finish.raw)}` : "";
  const refuse = (): ModelError | undefined => {
    switch (finish.unified) {
      case "length":
      case "interrupted":
        return badAnswer(
          "MODEL_TRUNCATED",
          `The model's answer was cut off (finish reason ${finish.unified}${raw}); answer in fewer words`,
          usage,
        );
      case "content-filter":
        return badAnswer(
          "MODEL_FILTERED",
          `The model's answer was withheld or refused (finish reason content-filter${raw})${
            text.trim() !== "" ? `: ${JSON.stringify(clip(text, 200))}` : ""
          }`,
          usage,
        );
      case "error":
        return badAnswer(
          "MODEL_NO_MESSAGE",
          `The model's answer ended in an error (finish reason error${raw}); answer again`,
          usage,
        );
    }
    return undefined;
  };
  if (calls.length > 0) {
    const refused = refuse();
    if (refused) throw refused;
    return { kind: "tool_calls", calls, ...(text.trim() !== "" ? { text } : {}), usage, ...extras };
  }
  const refused = refuse();
  if (refused) throw refused;
  if (finish.unified === "other" || (finish.unified === "tool-calls" && !providerRan)) {
    throw badAnswer(
      finish.unified === "other" ? "MODEL_NO_MESSAGE" : "MODEL_EMPTY",
      finish.unified === "other"
        ? `The model's answer did not end normally (finish reason other${raw}); answer again`
        : "The model's answer says it called tools but holds no tool call: call one of the listed tools, or say what was done",
      usage,
    );
  }
  if (text.trim() === "") {
    throw badAnswer(
      "MODEL_EMPTY",
      "The model's answer has neither a tool call nor any text: call a tool, or say what was done",
      usage,
    );
  }
  return { kind: "done", text, usage, ...extras };
}

/** A client tool call's input: JSON text parsed (empty is `{}`), or refused as not JSON. */
function clientInput(name: string, input: unknown, usage: Usage | undefined): unknown {
  if (typeof input !== "string") return input ?? {};
  if (input.trim() === "") return {};
  try {
    return JSON.parse(input);
  } catch {
    throw badAnswer(
      "MODEL_ARGS_NOT_JSON",
      `The arguments of the model's call to ${name} are not JSON: ${JSON.stringify(input.slice(0, 120))}`,
      usage,
    );
  }
}

/** A provider-executed call's input as journaled: its JSON parsed, or the text kept as it came. */
function providerInput(input: unknown): Json {
  if (typeof input !== "string") return jsonOf(input);
  if (input.trim() === "") return {};
  try {
    return JSON.parse(input) as Json;
  } catch {
    return input;
  }
}

/** The fields of a thrown value the classification reads. */
interface ThrownLike {
  name?: unknown;
  message?: unknown;
  isRetryable?: unknown;
  statusCode?: unknown;
  responseHeaders?: unknown;
}

/** The AI SDK's errors for an answer that arrived but could not be read: bad answers, asked again. */
const UNREADABLE_ANSWER: ReadonlySet<string> = new Set([
  "AI_InvalidResponseDataError",
  "AI_JSONParseError",
  "AI_TypeValidationError",
  "AI_EmptyResponseBodyError",
]);

function clip(text: string, max = 300): string {
  return text.length > max ? `${text.slice(0, max)}...` : text;
}

/**
 * What `doGenerate` threw, as a {@link ModelError}:
 *
 * - an `APICallError` (duck-typed by its `isRetryable`: a provider may bundle
 *   its own copy of the class) with an HTTP status: `MODEL_HTTP`, transient
 *   when the SDK says it is retryable or the status is (408, 409, 429, 5xx),
 *   with the server's `retry-after-ms` or `Retry-After`; with a 2xx status
 *   (an answer that could not be read) a bad answer, `MODEL_NOT_JSON`;
 *   without a status (no answer): `MODEL_UNREACHABLE`, transient when
 *   retryable;
 * - an abort (the run's signal, the model timeout): `MODEL_UNREACHABLE`,
 *   transient (the journal turns it into the worker's stop or the timeout);
 * - the SDK's errors for an unreadable answer: a bad answer, `MODEL_NOT_JSON`;
 * - any other SDK error (`AI_*`: a missing API key, a setting the provider
 *   cannot take): permanent, `MODEL_CALL_INVALID`;
 * - anything else (what a fetch throws on a refused connection): transient,
 *   `MODEL_UNREACHABLE`, as the chat-completions planner has it.
 */
export function aiSdkError(
  err: unknown,
  opts: { who: string; signal?: AbortSignal; now: () => number },
): ModelError {
  if (err instanceof ModelError) return err;
  const who = `The model ${opts.who}`;
  const e = (typeof err === "object" && err !== null ? err : {}) as ThrownLike;
  const said = clip(typeof e.message === "string" ? e.message : String(err));
  if (opts.signal?.aborted || e.name === "AbortError" || e.name === "TimeoutError") {
    return new ModelError("MODEL_UNREACHABLE", `${who} was not heard to the end: the request was aborted`, {
      transient: true,
      cause: err,
    });
  }
  if (typeof e.isRetryable === "boolean") {
    const status = typeof e.statusCode === "number" ? e.statusCode : undefined;
    if (status === undefined) {
      return new ModelError("MODEL_UNREACHABLE", `${who} could not be reached: ${said}`, {
        transient: e.isRetryable,
        cause: err,
      });
    }
    if (status >= 200 && status < 300) {
      return new ModelError(
        "MODEL_NOT_JSON",
        `${who} answered HTTP ${status} with a body that could not be read: ${said}`,
        {
          badAnswer: true,
          cause: err,
        },
      );
    }
    const transient = e.isRetryable || isTransientStatus(status);
    return new ModelError("MODEL_HTTP", `${who} answered HTTP ${status}: ${said}`, {
      transient,
      retryAfterMs: transient ? retryAfter(e.responseHeaders, opts.now()) : undefined,
      cause: err,
    });
  }
  const name = typeof e.name === "string" ? e.name : "";
  if (UNREADABLE_ANSWER.has(name)) {
    return new ModelError("MODEL_NOT_JSON", `${who} gave an answer that could not be read: ${said}`, {
      badAnswer: true,
      cause: err,
    });
  }
  if (name.startsWith("AI_")) {
    // Refused before it was sent, or in a way asking again cannot change.
    return new ModelError("MODEL_CALL_INVALID", `${who} refused the call (${name}): ${said}`, { cause: err });
  }
  return new ModelError("MODEL_UNREACHABLE", `${who} could not be reached: ${said}`, {
    transient: true,
    cause: err,
  });
}

/** The wait a server asked for: `retry-after-ms` (OpenAI's), else `retry-after` (seconds or an HTTP date). */
function retryAfter(headers: unknown, nowMs: number): number | undefined {
  if (!isRecord(headers)) return undefined;
  const lower = new Map(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), String(v)]));
  const ms = lower.get("retry-after-ms");
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  return parseRetryAfter(lower.get("retry-after"), nowMs);
}
