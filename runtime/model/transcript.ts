/**
 * The conversation a planner is shown, and what it answers, in no model
 * protocol's shape: a {@link DecideRequest} carries a transcript of neutral
 * messages (system instructions, user text, assistant turns with text and
 * tool calls, tool results matched by call id) and the tools the model may
 * call; a planner answers with a {@link PlannerDecision}. Each planner maps
 * both to and from its own wire format in its own file (chat completions:
 * `openai.ts`).
 *
 * @module
 */

import type { Json } from "../base/values.ts";

/** A tool as a model is shown it, in no protocol's shape: each planner maps it to its own. */
export interface ToolDescription {
  /** The tool's unique name. */
  name: string;
  /** What the tool does. */
  description: string;
  /** The JSON Schema of its arguments (the tool's `parameters`). */
  parameters: Record<string, unknown>;
}

/** The agent's instructions. */
export interface SystemMessage {
  /** Always `system`. */
  role: "system";
  /** The instructions. */
  text: string;
}

/** Text from the user's side: the run's goal, or why an earlier answer was refused. */
export interface UserMessage {
  /** Always `user`. */
  role: "user";
  /** The text. */
  text: string;
}

/**
 * What a provider attached to a part of an answer, keyed by provider (an
 * Anthropic thinking block's `{ anthropic: { signature } }`): journaled with
 * the decision and sent back unchanged with that part on later requests.
 */
export type ProviderMetadata = Record<string, { [key: string]: Json }>;

/** One tool call in the transcript, as the journal holds it. */
export interface ToolCall {
  /**
   * Pairs the call with its {@link ToolResultMessage}. Derived from what the
   * journal holds (`call_<seq>`), never from what a model named it, so it is
   * the same in every request and after every restart.
   */
  id: string;
  /** The tool's name. */
  name: string;
  /** The arguments as decided (a JSON value; a wire format may send them as text). */
  args: Json;
  /** What the provider attached to the call (its {@link CallPart}'s), when it did. */
  providerMetadata?: ProviderMetadata;
}

/** Text the model said, as one part of its turn. */
export interface TextPart {
  /** Always `text`. */
  type: "text";
  /** The text. */
  text: string;
  /** What the provider attached to it. */
  providerMetadata?: ProviderMetadata;
}

/** The model's reasoning (a thinking block): sent back as it came, signature and all. */
export interface ReasoningPart {
  /** Always `reasoning`. */
  type: "reasoning";
  /** The reasoning text (empty for a redacted block, whose content is in its metadata). */
  text: string;
  /** What the provider attached to it (Anthropic's `signature` or `redactedData`). */
  providerMetadata?: ProviderMetadata;
}

/** A provider's own kind of part, carried only by its metadata (`anthropic.fallback`). */
export interface CustomPart {
  /** Always `custom`. */
  type: "custom";
  /** `<provider>.<kind>`. */
  kind: string;
  /** What the provider attached to it: the part itself. */
  providerMetadata?: ProviderMetadata;
}

/** Where one of the turn's own tool calls (run under this runtime's keys) stands among its parts. */
export interface CallPart {
  /** Always `call`. */
  type: "call";
  /** The call's place among the decision's calls (0 for the first), so its seq is the step's plus this. */
  index: number;
  /** What the provider attached to the call. */
  providerMetadata?: ProviderMetadata;
}

/**
 * A tool the provider ran itself (`providerExecuted`: a web search, a code
 * sandbox): done elsewhere, journaled only so the history sent back is the one
 * the provider expects. The runtime never runs it, and it owns no seq or key.
 */
export interface ProviderCallPart {
  /** Always `provider-call`. */
  type: "provider-call";
  /** The provider's id for the call (its result names it). */
  id: string;
  /** The tool's name. */
  name: string;
  /** Its input as the provider reported it. */
  input: Json;
  /** What the provider attached to it. */
  providerMetadata?: ProviderMetadata;
}

/** The result of a {@link ProviderCallPart}, as the provider reported it. */
export interface ProviderResultPart {
  /** Always `provider-result`. */
  type: "provider-result";
  /** The {@link ProviderCallPart.id} it answers. */
  id: string;
  /** The tool's name. */
  name: string;
  /** The result. */
  result: Json;
  /** True when the provider reported the tool failed. */
  isError?: boolean;
  /** What the provider attached to it. */
  providerMetadata?: ProviderMetadata;
}

/**
 * One part of a model's turn, in the order the model gave them: what a
 * planner that keeps parts (the AI SDK adapter) journals with the decision,
 * so a replayed history is the one the provider expects.
 */
export type AssistantPart =
  | TextPart
  | ReasoningPart
  | CustomPart
  | CallPart
  | ProviderCallPart
  | ProviderResultPart;

/** A turn of the model: its text, its tool calls, or both. */
export interface AssistantMessage {
  /** Always `assistant`. */
  role: "assistant";
  /** What the model said, if anything. */
  text?: string;
  /** The tools it called, in order; empty when it only spoke. */
  calls: ToolCall[];
  /**
   * The turn as the model gave it, part by part (reasoning, text, its calls by
   * their place in `calls`, tools the provider ran), when the planner that
   * decided it kept them. A planner sends what its wire can carry and ignores
   * the rest (chat completions: `text` and `calls`).
   */
  parts?: AssistantPart[];
}

/**
 * The outcome of one tool call, matched to it by {@link ToolCall.id}: the
 * tool's result, or (`failed`) why there is none: the tool's error, a
 * person's denial, or that the outcome is unknown.
 */
export type ToolResultMessage =
  | {
    /** Always `tool`. */
    role: "tool";
    /** The {@link ToolCall.id} answered. */
    callId: string;
    /** The tool called (some protocols name it beside the id). */
    name: string;
    /** The call succeeded. */
    failed: false;
    /** What the tool returned. */
    result: Json;
  }
  | {
    /** Always `tool`. */
    role: "tool";
    /** The {@link ToolCall.id} answered. */
    callId: string;
    /** The tool called (some protocols name it beside the id). */
    name: string;
    /** The call failed, was refused, or its outcome is unknown. */
    failed: true;
    /** Why, in words the model can act on. */
    error: string;
  };

/** One message of a transcript. */
export type TranscriptMessage = SystemMessage | UserMessage | AssistantMessage | ToolResultMessage;

/**
 * Token counts reported by the model (the chat-completions names, as the
 * journal stores them; OpenAI reports the two details objects itself, the AI
 * SDK adapter maps its usage to them).
 */
export interface Usage {
  /** Tokens in the request, cached ones included. */
  prompt_tokens?: number;
  /** Tokens in the answer, reasoning included. */
  completion_tokens?: number;
  /** Both together. */
  total_tokens?: number;
  /** What the request's tokens were made of. */
  prompt_tokens_details?: {
    /** Read from the provider's prompt cache. */
    cached_tokens?: number;
    /** Written to the provider's prompt cache (Anthropic's `cache_creation_input_tokens`). */
    cache_write_tokens?: number;
  };
  /** What the answer's tokens were made of. */
  completion_tokens_details?: {
    /** Spent reasoning before the answer. */
    reasoning_tokens?: number;
  };
}

/** How hard a reasoning model thinks before it answers (OpenAI's `reasoning_effort` values). */
export type ReasoningEffort = "none" | "minimal" | "low" | "medium" | "high" | "xhigh";

/**
 * A model request's parameters, set per agent and per run (a run's override
 * the agent's, field by field) and journaled with the request. Each planner
 * maps them to its wire: chat completions sends `temperature`, `top_p`,
 * `stop`, `seed`, `reasoning_effort` and merges `extra` into the body; the AI
 * SDK adapter passes them as call options, `extra` as `providerOptions`.
 * The answer's cap is {@link DecideRequest.maxOutputTokens}, the smaller of
 * `maxOutputTokens` here and what a token budget leaves.
 */
export interface ModelParams {
  /**
   * The model's name, over the one its endpoint names (a run's own: a fork
   * onto another model, an evaluation's variant). A chat-completions planner
   * sends it as `model`; the AI SDK planner, whose model is an object, refuses
   * a name other than its own.
   */
  model?: string;
  /** Sampling temperature. */
  temperature?: number;
  /** Nucleus sampling. */
  topP?: number;
  /** The most tokens an answer may take (reasoning included). */
  maxOutputTokens?: number;
  /** Sequences that end the answer. */
  stop?: string[];
  /** A seed, for servers that sample reproducibly with one. */
  seed?: number;
  /** How hard a reasoning model thinks. */
  reasoningEffort?: ReasoningEffort;
  /**
   * Anything else, passed through as it is: merged into the request body
   * (chat completions, e.g. `{ parallel_tool_calls: false }`), or the AI SDK's
   * `providerOptions` (keyed by provider, e.g. `{ anthropic: { ... } }`).
   */
  extra?: Record<string, Json>;
}

/** One question to the model. */
export interface DecideRequest {
  /** The run asking (a planner may send it, e.g. as the `x-agent-run` header). */
  runId: string;
  /** The step being decided. */
  seq: number;
  /** The agent asking (sent as the `x-agent-name` header, so a mock can follow a per-agent script). */
  agent?: string;
  /** The conversation so far: the instructions and the goal first. */
  transcript: TranscriptMessage[];
  /** The tools the model may call (one array per registry: a planner may key a cache on it). */
  tools: ToolDescription[];
  /**
   * The most tokens the answer may take (reasoning included), set when the
   * run has a token budget: the request's reservation holds no more. A
   * planner passes it to its server as the answer's cap; an answer that
   * takes more all the same is counted in full, and the run stops at its
   * next request.
   */
  maxOutputTokens?: number;
  /**
   * The request's parameters (the agent's, overridden by the run's); the
   * answer's cap is not here but in {@link maxOutputTokens}.
   */
  params?: Omit<ModelParams, "maxOutputTokens">;
  /** Aborts the request. */
  signal?: AbortSignal;
  /**
   * Set when the answer's text is being watched (`STREAM_DELTAS`): a planner
   * that can stream asks its server to, and calls this with each piece of
   * text as it arrives. The answer it returns is the same as without
   * streaming; only the complete answer is journaled. A planner that cannot
   * stream ignores it.
   */
  onDelta?: (text: string) => void;
}

/** A tool call as a model asked for it. */
export interface AnswerCall {
  /** The model's own id for the call, when it gave one (the journal names calls itself). */
  id?: string;
  /** The tool's name. */
  name: string;
  /** The arguments, parsed from whatever the wire carried. */
  args: unknown;
}

/**
 * What a planner decided for one step: tool calls (one or more, run together;
 * more than the agent's `maxCallsPerStep` is refused, `MODEL_TOO_MANY_CALLS`),
 * or done with a final text.
 */
export type PlannerDecision =
  | {
    /** Call tools. */
    kind: "tool_calls";
    /** The calls, in the model's order. */
    calls: AnswerCall[];
    /** What the model said beside them, if anything. */
    text?: string;
    /** What the answer cost. */
    usage?: Usage;
    /** The answer part by part, to journal with the decision (see {@link AssistantMessage.parts}). */
    parts?: AssistantPart[];
    /** What the model's library warned of (a setting it ignored, say): logged as `model-warning`. */
    warnings?: string[];
  }
  | {
    /** The goal is complete. */
    kind: "done";
    /** The final answer. */
    text: string;
    /** What the answer cost. */
    usage?: Usage;
    /** The answer part by part, to journal with the decision (see {@link AssistantMessage.parts}). */
    parts?: AssistantPart[];
    /** What the model's library warned of (a setting it ignored, say): logged as `model-warning`. */
    warnings?: string[];
  };
