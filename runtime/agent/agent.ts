/**
 * Agents: what a user writes. An agent is a name, instructions for the model,
 * the tools it may call, the model that decides, and limits. A user's module
 * default-exports one agent (or an array of them); every process (the run
 * command, the worker, the supervisor, a compiled binary) is started with
 * that module and hosts only its agents.
 *
 * Tools and the model may be given as values, or as functions of an
 * {@link AgentContext} when they need the process's settings (a URL from the
 * environment, a directory for local state).
 *
 * @module
 */

import { checkConversation, type ConversationOptions } from "./conversation_options.ts";
import { checkRetryPolicy, type RetryPolicy } from "../base/retry.ts";
import { type Budget, checkBudget } from "./budget.ts";
import { checkLimits, type Limit } from "./limit_asks.ts";
import { describeValue, RuntimeError } from "../base/errors.ts";
import { type StorableValue, toStorable } from "../base/storable.ts";
import type { Logger } from "../base/log.ts";
import type { Planner } from "../model/planner.ts";
import type { ModelEndpoint } from "../model/endpoint.ts";
import { checkModelParams } from "../model/params.ts";
import type { ModelParams } from "../model/transcript.ts";
import { type AiSdkLanguageModel, aiSdkPlanner, isLanguageModel } from "../model/ai_sdk.ts";
import type { ArgsSchema, Json, Tool } from "./tools.ts";
import { ToolRegistry } from "./tools.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { checkOnNewVersion, checkVersion, versionDigest } from "./version.ts";

/** What a process knows when it builds an agent's tools and model. */
export interface AgentContext {
  /** The process's environment (read once at start-up). */
  env: Record<string, string | undefined>;
  /** Where this process may keep local state (the embedded database lives under it). */
  dataDir: string;
  /**
   * True when one process holds the database (the embedded default): an
   * in-process fake may stand in for a remote. False under a supervisor,
   * where many processes must meet the same remotes.
   */
  embedded: boolean;
  /**
   * The process's log, for what the tools it builds have to say as they
   * work (an MCP server's tool list changed under a running run). Absent
   * where nothing gave one (a test building tools by hand).
   */
  log?: Logger;
  /**
   * Aborts when the process stops: tools that opened a connection (an MCP
   * server's) close it then. Absent where the process's end closes them.
   */
  signal?: AbortSignal;
}

/**
 * How an agent's model is given: an endpoint, any {@link Planner}, an AI SDK
 * language model (`anthropic("claude-...")`, wrapped by `aiSdkPlanner` from
 * `./planners/ai-sdk`), or a function building either of the last two.
 */
export type AgentModel =
  | ModelEndpoint
  | Planner
  | AiSdkLanguageModel
  | ((ctx: AgentContext) => Planner | AiSdkLanguageModel | Promise<Planner | AiSdkLanguageModel>);

/** What {@link defineAgent} takes. */
export interface AgentSpec<I = string> {
  /** 1-64 letters, digits, `.`, `_` or `-`; recorded with every run of the agent. */
  name: string;
  /** The system prompt: what the agent is for and how it should work. */
  instructions?: string;
  /** The tools it may call, or a function of the process's context returning them. */
  tools: Tool[] | ((ctx: AgentContext) => Tool[] | Promise<Tool[]>);
  /**
   * Its model: an AI SDK language model (`anthropic("claude-sonnet-4-5")`), a
   * {@link Planner}, an OpenAI-compatible endpoint, or a function of the
   * process's context returning a model or a planner. Omitted: the process's
   * settings choose (`MODEL_URL`, or the embedded mock model).
   */
  model?: AgentModel;
  /** Decisions before the run fails as `guard`. Default 12. */
  maxSteps?: number;
  /** The most tool calls one answer may hold (an answer with more is refused and asked again). Default 16. */
  maxCallsPerStep?: number;
  /** How many calls of one step are sent at once; `TOOL_CONCURRENCY` overrides it. Default 4. */
  toolConcurrency?: number;
  /** A zod schema for JSON input. Omitted: the input is text. */
  input?: ArgsSchema<I>;
  /** The input used when a run is started without one (the demo's goal, say). */
  defaultInput?: I;
  /** Ceilings on each run's spend (tokens, model requests, tool requests); a run may override them. */
  budget?: Budget;
  /**
   * The model's request parameters (temperature, a cap on the answer, stop,
   * seed, reasoning effort, `extra` passed through); a run's own override
   * them field by field. Journaled with each request.
   */
  modelParams?: ModelParams;
  /**
   * How its runs ride out an outage of its model and tools, over the
   * process's settings (`RETRY_HORIZON_S`, `RETRY_BACKOFF_MS`,
   * `RETRY_BACKOFF_MAX_S`); a tool's own `retry` wins over it for that tool.
   * See {@link RetryPolicy}.
   */
  retry?: Partial<RetryPolicy>;
  /**
   * Makes each run a conversation: after each final answer it waits (holding
   * no worker slot) for the next message a person sends (`client.conversations.send`), up to
   * `idleMs`; `history` may trim what is sent to the model.
   */
  conversation?: ConversationOptions;
  /**
   * How many of a run's settled steps the model is shown: the instructions
   * and the goal, then the last `historySteps` decided steps (each with its
   * calls' results) and any step still open. Every step stays in the
   * database. Omitted: all of them, so each request carries the run's whole
   * history and costs more the longer the run; a run of thousands of steps
   * needs it (bench/README.md, "Flat at any length"). An integer from 1 to
   * 100000. In a conversation, the `history` hook is given what it keeps.
   */
  historySteps?: number;
  /**
   * The agent's version, recorded with every run a worker of it starts: 1-64
   * letters, digits, `.`, `_`, `+` or `-`. Omitted: a digest of its
   * instructions and of each tool's name, argument schema and `replaces`, so
   * any change the model sees or a tool's arguments is a new version. See
   * docs/versions.md.
   */
  version?: string;
  /**
   * What its runs do when a newer version of the agent is deployed: `stay`
   * (the default) on the version that started them, taken only by workers
   * hosting it; or `move` to the newer version at their next decision (a
   * decided call is carried by the new version's tool of its name or the one
   * that `replaces` it). Recorded with each run when it starts.
   */
  onNewVersion?: "stay" | "move";
  /**
   * Limits shared by every worker of every host on its model, provider,
   * tools, or a label its runs carry: requests, input and output tokens per
   * minute, calls in flight (docs/limits.md). A run that must wait holds no
   * slot. The process's `LIMITS` are held beside them.
   */
  limits?: readonly Limit[];
}

/** An agent, as {@link defineAgent} returns it. */
export interface Agent {
  /** Its unique name. */
  readonly name: string;
  /** Its system prompt. */
  readonly instructions: string;
  /** Its tools (or how to build them). */
  readonly tools: Tool[] | ((ctx: AgentContext) => Tool[] | Promise<Tool[]>);
  /** Its model, if it names one (an AI SDK language model given is here as its planner). */
  readonly model?: AgentModel;
  /** Decisions before `guard`. */
  readonly maxSteps: number;
  /** The most tool calls one answer may hold. */
  readonly maxCallsPerStep: number;
  /** How many calls of one step are sent at once. */
  readonly toolConcurrency: number;
  /** The input schema, if its input is JSON. */
  readonly input?: ArgsSchema;
  /** The input used when none is given. */
  readonly defaultInput?: Json;
  /** Ceilings on each run's spend. */
  readonly budget?: Budget;
  /** The model's request parameters, if it sets any. */
  readonly modelParams?: ModelParams;
  /** How its runs converse, when they do. */
  readonly conversation?: ConversationOptions;
  /** The settled steps its model is shown, the last of them; undefined: all. */
  readonly historySteps?: number;
  /** Its retry settings, over the process's, if it sets any. */
  readonly retry?: Partial<RetryPolicy>;
  /** Its version, if it gives one (else each process computes the digest from the tools it builds). */
  readonly version?: string;
  /** What its runs do when a newer version is deployed. */
  readonly onNewVersion?: "stay" | "move";
  /** Its limits shared by the fleet (empty: none). */
  readonly limits: readonly Limit[];
  /** Marks the object as an agent (a module's default export is checked for it). */
  readonly kind: "agent";
}

/** The system prompt of an agent that gives no instructions. */
export const DEFAULT_INSTRUCTIONS =
  "You are an agent that completes the user's goal by calling tools; call several at once when they " +
  "do not depend on each other's results. " +
  "When the goal is complete, answer with a short summary and no tool call.";

/** An agent name: a letter or digit, then up to 63 letters, digits, `.`, `_` or `-`. */
export const NAME_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/**
 * Defines an agent.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 * import { defineAgent, defineTool } from "../../mod.ts";
 * export default defineAgent({
 *   name: "greeter",
 *   instructions: "Greet the person named in the goal, then say you are done.",
 *   tools: [defineTool({
 *     name: "greet",
 *     description: "Greets someone.",
 *     args: z.strictObject({ name: z.string() }),
 *     run: (args, ctx) => Promise.resolve({ result: `hello ${args.name} (${ctx.idempotencyKey})` }),
 *   })],
 * });
 * ```
 */
export function defineAgent<I = string>(spec: AgentSpec<I>): Agent {
  const problem = (what: string) =>
    new RuntimeError("AGENT_INVALID", `Cannot define agent ${JSON.stringify(spec.name)}: ${what}`);
  if (typeof spec.name !== "string" || !NAME_PATTERN.test(spec.name)) {
    throw problem("a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit");
  }
  const maxSteps = spec.maxSteps ?? DEFAULTS.maxSteps;
  if (!Number.isInteger(maxSteps) || maxSteps < 1 || maxSteps > 10_000) {
    throw problem(`'maxSteps' must be an integer from 1 to 10000: current value is ${spec.maxSteps}`);
  }
  const limit = (name: "maxCallsPerStep" | "toolConcurrency", fallback: number): number => {
    const v = spec[name] ?? fallback;
    if (!Number.isInteger(v) || v < 1 || v > 64) {
      throw problem(`'${name}' must be an integer from 1 to 64: current value is ${spec[name]}`);
    }
    return v;
  };
  const maxCallsPerStep = limit("maxCallsPerStep", DEFAULTS.maxCallsPerStep);
  const toolConcurrency = limit("toolConcurrency", DEFAULTS.toolConcurrency);
  if (!Array.isArray(spec.tools) && typeof spec.tools !== "function") {
    throw problem("'tools' must be an array of defineTool() results or a function returning one");
  }
  if (Array.isArray(spec.tools)) new ToolRegistry(spec.tools); // names unique and valid, checked now
  if (spec.input !== undefined && typeof spec.input?.safeParse !== "function") {
    throw problem("'input' must be a zod schema");
  }
  // An AI SDK language model is wrapped now, so a version the adapter does not speak is refused here.
  let model = spec.model;
  if (typeof model === "function" && "specificationVersion" in model && "languageModel" in model) {
    throw problem(
      "'model' is an AI SDK provider, not one of its models: call it with a model id, " +
        'e.g. model: anthropic("claude-sonnet-4-5")',
    );
  }
  if (isLanguageModel(model)) {
    try {
      model = aiSdkPlanner(model);
    } catch (err) {
      throw problem((err as Error).message);
    }
  }
  return Object.freeze({
    kind: "agent" as const,
    name: spec.name,
    instructions: spec.instructions ?? DEFAULT_INSTRUCTIONS,
    tools: spec.tools,
    model,
    maxSteps,
    maxCallsPerStep,
    toolConcurrency,
    input: spec.input as ArgsSchema | undefined,
    defaultInput: spec.defaultInput as Json | undefined,
    budget: (() => {
      try {
        return checkBudget(spec.budget, `Cannot define agent ${JSON.stringify(spec.name)}`);
      } catch (err) {
        throw problem((err as Error).message.replace(/^.*?: budget/, "budget"));
      }
    })(),
    modelParams: checkModelParams(spec.modelParams, `Cannot define agent ${JSON.stringify(spec.name)}`),
    conversation: checkConversation(spec.conversation, `Cannot define agent ${JSON.stringify(spec.name)}`),
    historySteps: checkHistorySteps(spec.historySteps, problem),
    retry: checkRetryPolicy(spec.retry, `Cannot define agent ${JSON.stringify(spec.name)}`),
    ...(spec.version === undefined
      ? {}
      : { version: checkVersion(spec.version, `Cannot define agent ${JSON.stringify(spec.name)}`) }),
    onNewVersion: checkOnNewVersion(spec.onNewVersion, `Cannot define agent ${JSON.stringify(spec.name)}`),
    limits: checkLimits(spec.limits, `Cannot define agent ${JSON.stringify(spec.name)}`, "AGENT_INVALID"),
  });
}

/** The largest `historySteps` an agent may give. */
export const HISTORY_STEPS_MAX = 100_000;

/** An agent's `historySteps`, checked: undefined, or an integer from 1 to {@link HISTORY_STEPS_MAX}. */
export function checkHistorySteps(value: unknown, problem: (what: string) => Error): number | undefined {
  if (value === undefined) return undefined;
  if (Number.isInteger(value) && (value as number) >= 1 && (value as number) <= HISTORY_STEPS_MAX) {
    return value as number;
  }
  throw problem(
    `'historySteps' must be an integer from 1 to ${HISTORY_STEPS_MAX}: current value is ${value}`,
  );
}

/** True when `value` came from {@link defineAgent}. */
export function isAgent(value: unknown): value is Agent {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "agent";
}

/** True when an agent's model is a ready {@link Planner}. */
export function isPlanner(value: unknown): value is Planner {
  return typeof value === "object" && value !== null && typeof (value as Planner).decide === "function";
}

/**
 * Checks a run's input against the agent and returns what is stored and
 * what the model is told: text as it is, JSON validated by the agent's schema
 * (as it is stored: a Date as its text). What the database cannot store (a
 * NUL, a lone surrogate, NaN, a cycle, ...: storable.ts) is `INPUT_INVALID`.
 */
export function checkInput(agent: Agent, input: unknown): { input: Json; goal: string } {
  const given = input === undefined ? agent.defaultInput : input;
  if (agent.input) {
    const parsed = agent.input.safeParse(given);
    if (!parsed.success) {
      const detail = (parsed.error as { message?: string })?.message ?? String(parsed.error);
      throw new RuntimeError(
        "INPUT_INVALID",
        `The input of agent ${agent.name} does not fit its schema: ${detail.slice(0, 500)}`,
      );
    }
    const stored = storableInput(agent, parsed.data);
    return { input: stored.value, goal: typeof stored.value === "string" ? stored.value : stored.json };
  }
  if (typeof given !== "string" || given.trim() === "") {
    throw new RuntimeError(
      "INPUT_INVALID",
      `Agent ${agent.name} takes text input (a non-empty string) and ${givenInput(given)} was given: ` +
        `pass a goal (GOAL, --goal or { input: "..." }), or give the agent an input schema for other values`,
    );
  }
  storableInput(agent, given);
  return { input: given, goal: given };
}

/** What a text agent was given instead of text, for its refusal: the kind of value and (a start of) it. */
function givenInput(value: unknown): string {
  if (value === undefined) return "no input";
  if (typeof value === "string") return value === "" ? "an empty string" : "only whitespace";
  if (value === null) return "null";
  const kind = Array.isArray(value)
    ? "an array"
    : typeof value === "object"
    ? "an object"
    : `a ${typeof value}`;
  return `${kind} (${describeValue(value, 80)})`;
}

/** The input as it is stored, or `INPUT_INVALID` saying what the database cannot hold. */
function storableInput(agent: Agent, value: unknown): StorableValue {
  const stored = toStorable(value);
  if (!stored.ok) {
    throw new RuntimeError(
      "INPUT_INVALID",
      `The input of agent ${agent.name} cannot be stored: it holds ${stored.reason}. Give text or JSON without it`,
    );
  }
  return stored;
}

/** An agent with its tools built and its model chosen, ready to drive runs in this process. */
export interface PreparedAgent {
  /** The agent. */
  agent: Agent;
  /** Its tools. */
  tools: ToolRegistry;
  /** Its model. */
  planner: Planner;
  /**
   * Its version in this process: the agent's own, or the digest of its
   * instructions and the tools built here (agent/version.ts). Absent on a
   * value built by hand: {@link preparedVersion} computes it then.
   */
  version?: string;
}

/** The version of a prepared agent: the one it carries, the agent's own, or the digest of its tools. */
export function preparedVersion(prepared: Pick<PreparedAgent, "agent" | "tools" | "version">): string {
  return prepared.version ?? prepared.agent.version ??
    versionDigest(prepared.agent.instructions, prepared.tools.all);
}

/** Builds an agent's tools for this process (and nothing else: the replay check calls none of them). */
export async function buildTools(agent: Agent, ctx: AgentContext): Promise<ToolRegistry> {
  return new ToolRegistry(typeof agent.tools === "function" ? await agent.tools(ctx) : agent.tools);
}

/**
 * Builds an agent's tools and model for this process. `fallbackModel` is
 * asked for a planner when the agent names an endpoint or nothing (the
 * process's settings decide then).
 */
export async function prepareAgent(
  agent: Agent,
  ctx: AgentContext,
  fallbackModel: (endpoint: ModelEndpoint) => Planner | Promise<Planner>,
): Promise<PreparedAgent> {
  const tools = await buildTools(agent, ctx);
  let planner: Planner;
  if (isPlanner(agent.model)) planner = agent.model;
  else if (isLanguageModel(agent.model)) planner = aiSdkPlanner(agent.model); // an agent not made by defineAgent
  else if (typeof agent.model === "function") {
    const built = await agent.model(ctx);
    planner = isLanguageModel(built) ? aiSdkPlanner(built) : built;
  } else planner = await fallbackModel(agent.model ?? {});
  return { agent, tools, planner, version: preparedVersion({ agent, tools }) };
}

/**
 * The agents a module exports: its default export (an agent or an array of
 * agents). Throws `AGENT_MODULE_INVALID` saying what was found instead.
 */
export function agentsOf(mod: Record<string, unknown>, where: string): Agent[] {
  const found = mod.default;
  const list = Array.isArray(found) ? found : [found];
  if (found === undefined || list.length === 0 || !list.every(isAgent)) {
    throw new RuntimeError(
      "AGENT_MODULE_INVALID",
      `${where} must default-export an agent from defineAgent() (or an array of them): found ${
        found === undefined
          ? "no default export"
          : Array.isArray(found)
          ? "an array of other values"
          : typeof found
      }`,
    );
  }
  const names = new Set<string>();
  for (const a of list) {
    if (names.has(a.name)) {
      throw new RuntimeError("AGENT_MODULE_INVALID", `${where} exports two agents named ${a.name}`);
    }
    names.add(a.name);
  }
  return list;
}
