/**
 * Any AI SDK language model as an agent's model: `anthropic("claude-...")`,
 * `openai("gpt-...")`, `google("gemini-...")`, `createOpenAICompatible(...)`
 * and the rest of the AI SDK's provider packages, behind the {@link Planner}
 * interface. `defineAgent({ model })` recognises a language model and wraps
 * it with {@link aiSdkPlanner}; call that yourself to give options.
 *
 * The adapter speaks the provider specification's versions `v2` (AI SDK 5),
 * `v3` (6) and `v4` (7) itself, from their types alone: the library loads no
 * AI SDK code, and the `ai` package is not needed at run time. It calls
 * `doGenerate` exactly once per decision and never retries (a provider's
 * retries live in `ai`'s `generateText`, which is not used: every model
 * request is counted in the journal before it is sent); the run's abort
 * signal is the call's `abortSignal`.
 *
 * The transcript becomes the model's prompt (system, user, assistant and
 * tool messages) and the tools function tools with their JSON Schema. The
 * answer becomes a decision: its tool calls (several are one decision), or
 * its text as the final answer when it finished normally; a truncated,
 * filtered, failed or empty answer is a bad answer, refused and asked again
 * as the chat-completions planner's are. What must reach the model again is
 * journaled with the decision as its `parts` and sent back unchanged on every
 * later request: reasoning with its provider metadata (Anthropic's signed
 * thinking blocks), the metadata of text and calls, and the tools the
 * provider ran itself (`providerExecuted`) with their results, which the
 * runtime never runs and never gives a seq or a key. Usage (input, output,
 * cached and reasoning tokens) is the journal's `Usage`. An `APICallError`
 * is transient (with the server's `Retry-After`) or permanent by its status.
 *
 * @example
 * ```ts
 * import { createOpenAICompatible } from "npm:@ai-sdk/openai-compatible@3.0.92";
 * import { aiSdkPlanner } from "./ai_sdk.ts";
 * const model = createOpenAICompatible({ name: "local", baseURL: "http://127.0.0.1:11434/v1" })("llama3.1");
 * const planner = aiSdkPlanner(model, { params: { temperature: 0 } });
 * console.log(planner.describe); // ai-sdk local.chat model=llama3.1
 * ```
 *
 * @module
 */

import { ModelError, RuntimeError } from "../base/errors.ts";
import { gatherStream } from "./_ai_sdk_stream.ts";
import { checkModelParams } from "./params.ts";
import type { Planner } from "./planner.ts";
import type { ToolDescription } from "./transcript.ts";
import type { DecideRequest, ModelParams, PlannerDecision } from "./transcript.ts";
// The request parameters the options take, and the parts of an answer the adapter journals (the neutral
// transcript's types, named on this path because its planner is the one that keeps them).
export type {
  AssistantPart,
  CallPart,
  CustomPart,
  ModelParams,
  ProviderCallPart,
  ProviderMetadata,
  ProviderResultPart,
  ReasoningEffort,
  ReasoningPart,
  TextPart,
} from "./transcript.ts";
import {
  aiSdkAnswer,
  aiSdkCallOptions,
  aiSdkError,
  aiSdkPrompt,
  aiSdkTools,
  type FunctionTool,
  type GenerateResult,
  type SpecificationVersion,
} from "./_ai_sdk_wire.ts";

/**
 * An AI SDK language model, as far as the adapter needs to know it: what a
 * provider package's model function returns (`anthropic("claude-...")`),
 * of any specification version. Structural, so a model built on any copy of
 * `@ai-sdk/provider` fits.
 */
export interface AiSdkLanguageModel {
  /** `v2` (AI SDK 5), `v3` (6) or `v4` (7); {@link aiSdkPlanner} refuses another. */
  readonly specificationVersion: string;
  /** The provider's id, e.g. `anthropic.messages`. */
  readonly provider: string;
  /** The model's id, e.g. `claude-sonnet-4-5`. */
  readonly modelId: string;
  /** One (non-streaming) request; the adapter calls it once per decision. */
  doGenerate(options: never): PromiseLike<unknown>;
}

/** The specification versions the adapter speaks: `v2` (AI SDK 5), `v3` (AI SDK 6), `v4` (AI SDK 7). */
export const AI_SDK_SPECIFICATION_VERSIONS: readonly string[] = ["v2", "v3", "v4"];

/**
 * True when `value` looks like an AI SDK language model: an object with a
 * string `specificationVersion` and a `doGenerate` method. Duck-typed, so
 * the library needs no AI SDK code; {@link aiSdkPlanner} then refuses a
 * version it does not speak.
 */
export function isLanguageModel(value: unknown): value is AiSdkLanguageModel {
  if (typeof value !== "object" || value === null) return false;
  const v = value as { specificationVersion?: unknown; doGenerate?: unknown };
  return typeof v.specificationVersion === "string" && typeof v.doGenerate === "function";
}

/** Options of {@link aiSdkPlanner}. */
export interface AiSdkPlannerOptions {
  /**
   * Request parameters under the request's own (the agent's and the run's),
   * field by field; `extra` is the call's `providerOptions` (keyed by
   * provider: `{ anthropic: { thinking: { type: "enabled", budgetTokens:
   * 2048 } } }`), merged by provider, the request's winning.
   * `maxOutputTokens` caps an answer when the request sets no cap, and
   * bounds the one it sets.
   */
  params?: ModelParams;
  /** Headers on every request, besides `x-agent-run` and `x-agent-name` (the run and the agent asking). */
  headers?: Record<string, string>;
  /** The wall clock, for a `Retry-After` given as an HTTP date. Defaults to `Date.now`. */
  now?: () => number;
}

/**
 * The {@link Planner} of an AI SDK language model. Throws
 * `MODEL_SETTINGS_INVALID` for a specification version the adapter does not
 * speak, `MODEL_PARAMS_INVALID` for `params` an agent's `modelParams` could
 * not hold.
 *
 * @example
 * ```ts
 * import { createAnthropic } from "npm:@ai-sdk/anthropic@4.0.105";
 * import { aiSdkPlanner } from "./ai_sdk.ts";
 * const anthropic = createAnthropic({ apiKey: "sk-ant-..." });
 * const planner = aiSdkPlanner(anthropic("claude-sonnet-4-5"), {
 *   params: { maxOutputTokens: 4096, extra: { anthropic: { thinking: { type: "enabled", budgetTokens: 2048 } } } },
 * });
 * console.log(planner.model); // claude-sonnet-4-5
 * ```
 */
export function aiSdkPlanner(model: AiSdkLanguageModel, opts: AiSdkPlannerOptions = {}): AiSdkPlanner {
  return new AiSdkPlanner(model, opts);
}

/** A {@link Planner} over one AI SDK language model; see {@link aiSdkPlanner}. */
export class AiSdkPlanner implements Planner {
  readonly #model: AiSdkLanguageModel;
  readonly #version: SpecificationVersion;
  readonly #opts: AiSdkPlannerOptions;
  readonly #now: () => number;
  #tools?: { array: readonly ToolDescription[]; tools: FunctionTool[]; chars: number };

  /** Wraps `model`; throws `MODEL_SETTINGS_INVALID` for a specification version it does not speak, `MODEL_PARAMS_INVALID` for wrong `params`. */
  constructor(model: AiSdkLanguageModel, opts: AiSdkPlannerOptions = {}) {
    const version: unknown = model.specificationVersion;
    if (typeof version !== "string" || !AI_SDK_SPECIFICATION_VERSIONS.includes(version)) {
      throw new RuntimeError(
        "MODEL_SETTINGS_INVALID",
        `Cannot use the AI SDK model ${model.provider} model=${model.modelId} as its 'specificationVersion' ` +
          `must be one of ${AI_SDK_SPECIFICATION_VERSIONS.join(", ")}: current value is ${
            JSON.stringify(version)
          }. Use a provider package made for AI SDK 5, 6 or 7`,
      );
    }
    this.#model = model;
    this.#version = version as SpecificationVersion;
    // Checked as an agent's and a run's are: `extra` asking for several answers is refused here too.
    const params = checkModelParams(
      opts.params,
      `Cannot use the AI SDK model ${model.provider} model=${model.modelId}`,
    );
    this.#opts = { ...opts, params };
    this.#now = opts.now ?? Date.now;
  }

  /** The provider and model, e.g. `ai-sdk anthropic.messages model=claude-sonnet-4-5`. */
  get describe(): string {
    return `ai-sdk ${this.#model.provider} model=${this.#model.modelId}`;
  }

  /** The model's id, for telemetry (`gen_ai.request.model`). */
  get model(): string {
    return this.#model.modelId;
  }

  /** The AI SDK provider's id (`anthropic.messages`): what a limit on a provider names. */
  get provider(): string {
    return this.#model.provider;
  }

  /** The specification version the model implements. */
  get specificationVersion(): string {
    return this.#version;
  }

  /** `tools` as function tools, kept for the array they were made from (a registry hands out one array). */
  #toolsOf(tools: readonly ToolDescription[]): { tools: FunctionTool[]; chars: number } {
    if (this.#tools?.array !== tools) {
      const mapped = aiSdkTools(tools);
      this.#tools = { array: tools, tools: mapped, chars: JSON.stringify(mapped).length };
    }
    return this.#tools;
  }

  /** The characters of the prompt and tools this planner sends for `req` (a budgeted request's reservation). */
  promptChars(req: Pick<DecideRequest, "transcript" | "tools">): number {
    return JSON.stringify(aiSdkPrompt(req.transcript, this.#version)).length + this.#toolsOf(req.tools).chars;
  }

  /**
   * Asks the model once and maps its answer to a decision: with `doGenerate`,
   * or, when the request is watched (`onDelta`), with `doStream`, its text
   * passed on as it arrives and the answer mapped as `doGenerate`'s would be.
   */
  async decide(req: DecideRequest): Promise<PlannerDecision> {
    const named = req.params?.model;
    if (named !== undefined && named !== this.#model.modelId) {
      throw new ModelError(
        "MODEL_PARAMS_REFUSED",
        `This run asks for model ${JSON.stringify(named)}, and its agent's AI SDK model is ` +
          `${this.#model.provider} model=${this.#model.modelId}, an object that cannot change its name: give ` +
          `the run an agent whose model is the one wanted (a fork's or an evaluation's 'agent') instead of 'model'`,
        { transient: false },
      );
    }
    // Read once: the journal's deadline arms its timer when a planner reads the signal.
    const signal = req.signal;
    const { options, warnings } = aiSdkCallOptions(req, {
      version: this.#version,
      tools: this.#toolsOf(req.tools).tools,
      defaults: this.#opts.params,
      headers: this.#opts.headers,
      signal,
    });
    let result: GenerateResult;
    const who = `${this.#model.provider} model=${this.#model.modelId}`;
    try {
      // One call, whatever the version: the answer is read by its shape (v2's finish reason and usage differ).
      const model = this.#model as unknown as {
        doGenerate(o: typeof options): PromiseLike<GenerateResult>;
        doStream?(o: typeof options): PromiseLike<{ stream: ReadableStream<unknown> }>;
      };
      // Watched (req.onDelta): streamed, and gathered into what doGenerate would have answered.
      result = req.onDelta && typeof model.doStream === "function"
        ? await gatherStream(await model.doStream(options), req.onDelta, who)
        : await model.doGenerate(options);
    } catch (err) {
      if (err instanceof ModelError) throw err;
      throw aiSdkError(err, {
        who,
        signal,
        now: this.#now,
      });
    }
    return aiSdkAnswer(result, warnings);
  }
}
