/**
 * Tools: what an agent can do. A tool is a name, a description, a schema for
 * its arguments (zod, or any `safeParse` with the JSON Schema the model sees
 * beside it), whether the remote honours an idempotency key, and a `run`
 * function. The runtime never branches on a tool's name and never reads
 * its arguments beyond validating them against the schema.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import type { Json } from "../base/values.ts";
import type { ToolDescription } from "../model/transcript.ts";
import { type CodeOf, describeValue, RuntimeError } from "../base/errors.ts";
import type { ToolContext } from "./tool_context.ts";
import { DEFAULTS } from "../base/defaults.ts";

export { idempotencyKeyHeader } from "../base/http.ts";
export type { Json, ToolDescription };
export type { ChildRunInfo, ChildRuns, ToolContext } from "./tool_context.ts";
export { isAccepted } from "./tool_outcomes.ts";
export type {
  ReconcileContext,
  Reconciliation,
  ToolAccepted,
  ToolDone,
  ToolGiveUp,
  ToolOutcome,
  ToolRetry,
} from "./tool_outcomes.ts";
import type {
  ReconcileContext,
  Reconciliation,
  ToolGiveUp,
  ToolOutcome,
  ToolRetry,
} from "./tool_outcomes.ts";

/**
 * What the runtime needs of an argument schema: a zod schema (zod 4), seen
 * structurally so the public API does not expose zod's own types.
 */
export interface ArgsSchema<Out = unknown> {
  /** Parses without throwing, as zod's `safeParse` does. */
  safeParse(input: unknown): { success: true; data: Out } | { success: false; error: unknown };
}

/** What {@link defineTool} takes. */
export interface ToolSpec<A> {
  /** 1-64 letters, digits, `_` or `-` (the chat-completions rule for function names). */
  name: string;
  /** Shown to the model. */
  description: string;
  /** The arguments' schema. Use `z.strictObject` so unknown fields are rejected, not dropped. */
  args: ArgsSchema<A>;
  /**
   * The JSON Schema of the arguments, as the model is shown it. Default:
   * derived from `args`, which must then be a zod schema. Give it when `args`
   * is not zod but checks the same schema (an MCP server's `inputSchema`,
   * checked by a JSON Schema validator: `runtime/mcp/mcp.ts`).
   */
  parameters?: Record<string, unknown>;
  /**
   * True (the default) when the remote honours the idempotency key, so a call
   * whose outcome is unknown may be re-sent. False: such a call is flagged for
   * a human instead.
   */
  idempotent?: boolean;
  /** Per-request timeout, through `ctx.signal`. Default 30 000. */
  timeoutMs?: number;
  /**
   * Requests under one key whose outcome no worker lived to record (each
   * worker stopped mid-call) before the call is given up (`TOOL_GAVE_UP`, or
   * flagged for a tool that takes no key). Failures a worker saw and recorded
   * (a refused connection, a timeout, 5xx, 429) do not count here: they are
   * retried until the retry horizon (`retry`). Default 4.
   */
  maxAttempts?: number;
  /**
   * How this tool's calls ride out an outage of its remote: each field given
   * replaces the agent's (then the process's, `RETRY_HORIZON_S`, ...). See
   * {@link ToolRetry}.
   */
  retry?: ToolRetry;
  /**
   * What becomes of a call still failing when its retry horizon has passed:
   * `"fail-run"` (the default) fails the run `TOOL_GAVE_UP`; `"answer"` makes
   * the failure the call's result, which the model sees (the run goes on);
   * a function gives that answer's text. Choose an answer for a call that is
   * safe to decide about again (a lookup), since the remote may have acted
   * on a request whose answer was lost.
   */
  onGiveUp?: "fail-run" | "answer" | ((failure: ToolGiveUp) => string);
  /**
   * The least time, in milliseconds, before a call its remote accepted is
   * asked again, whatever the remote says (`accepted.checkAfterMs`): doubled
   * for each time it was asked, up to the tool's `backoffMaxMs`, so a remote
   * that keeps saying "not yet, ask again at once" is asked less and less
   * often. Default 1 000.
   */
  minCheckAfterMs?: number;
  /**
   * How long a call may wait on its remote after the remote first accepted
   * it ({@link ToolAccepted}) before it fails as not finished in time.
   * Default 3 600 000 (an hour).
   */
  waitDeadlineMs?: number;
  /**
   * Whether a person must approve a call before it is sent: always (`true`),
   * or when this predicate on the validated arguments says so. An approval
   * holds for the exact arguments it was given for, under the call's key.
   */
  approval?: boolean | ((args: A) => boolean);
  /**
   * The names this tool had in earlier versions of its agent (a rename): a
   * call decided for one of them, not yet sent when its run moved to this
   * version, is carried by this tool, its arguments checked against this
   * tool's schema (defaults applied) before it is sent. See docs/versions.md.
   */
  replaces?: readonly string[];
  /**
   * What its calls do to the world: `"world"` (the default: they act on a
   * remote, create, send, charge, change) or `"read"` (they only read). In a
   * fork of a run (docs/fork.md), a call of a `"world"` tool is never sent
   * unless the fork is live: it is answered from the original run's recorded
   * result for the same arguments, else from {@link ToolSpec.stub}, else
   * flagged for a person; a `"read"` tool's calls run live.
   */
  effect?: ToolEffect;
  /**
   * Answers a call in a fork without its remote, when the original run made
   * no call with these arguments: returns the result the model is shown (a
   * made-up id, a canned answer). Called only in a fork that is not live, for
   * a tool whose `effect` is `"world"`; must not act on any remote. A stub
   * that throws leaves the call flagged, with the error as the reason.
   */
  stub?(args: A, ctx: StubContext): Json | Promise<Json>;
  /** Performs the call. Throw a `ToolError` (`mod.ts`) to say whether a re-send may help. */
  run(args: A, ctx: ToolContext): Promise<ToolOutcome>;
  /**
   * Asks the remote whether a call whose outcome is unknown happened, by its
   * key (a lookup by the reference `run` sent): see {@link Reconciliation}.
   * The runtime asks before it would flag a call of a tool that takes no key
   * (after a crash or an unknown-outcome error), and before it gives up at
   * `maxAttempts`; it asks once each time, and never sends while it asks.
   * Read-only: it must not perform the call itself.
   */
  reconcile?(args: A, ctx: ReconcileContext): Promise<Reconciliation>;
  /** Timeout of one `reconcile`, through `ctx.signal` (then it counts as `unknown`). Default `timeoutMs`. */
  reconcileTimeoutMs?: number;
}

/** What a tool's calls do to the world ({@link ToolSpec.effect}). */
export type ToolEffect = "world" | "read";

/** What a tool's {@link ToolSpec.stub} is given with the call's arguments. */
export interface StubContext {
  /** The fork's key of the call, `<forkRunId>:<seq>`. */
  idempotencyKey: string;
  /** The fork's run id. */
  runId: string;
  /** The call's seq. */
  seq: number;
  /** The run this one is a fork of; null for a dry run with no original (an evaluation's input). */
  forkedFrom: string | null;
}

/** A tool as the runtime holds it. */
export interface Tool {
  /** The tool's unique name. */
  readonly name: string;
  /** Shown to the model. */
  readonly description: string;
  /** The arguments' schema (zod, or another `safeParse`). */
  readonly args: ArgsSchema;
  /** Whether the remote honours the idempotency key. */
  readonly idempotent: boolean;
  /** Per-request timeout. */
  readonly timeoutMs: number;
  /** Requests under one key whose outcome no worker recorded before the call is given up. */
  readonly maxAttempts: number;
  /** How its calls ride out an outage (each field unset: the agent's). */
  readonly retry: ToolRetry;
  /** What becomes of a call still failing past its retry horizon. */
  readonly onGiveUp: "fail-run" | "answer" | ((failure: ToolGiveUp) => string);
  /** The least time before an accepted call is asked again, doubled per poll. */
  readonly minCheckAfterMs: number;
  /** How long a call may wait on its remote after it first accepted the call. */
  readonly waitDeadlineMs: number;
  /** The JSON Schema the model sees: the spec's `parameters`, or derived from `args`. */
  readonly parameters: Record<string, unknown>;
  /** The names it had in earlier versions of its agent, whose decided calls it carries. */
  readonly replaces?: readonly string[];
  /** What its calls do to the world: `"world"` calls are never sent by a fork that is not live. */
  readonly effect: ToolEffect;
  /** Answers a call in a fork without its remote, when the tool offers it ({@link ToolSpec.stub}). */
  readonly stub?: (args: unknown, ctx: StubContext) => Json | Promise<Json>;
  /** True when a call with these (validated) arguments needs a person's approval first. */
  needsApproval(args: unknown): boolean;
  /** Performs the call with arguments already checked against `args`. */
  run(args: unknown, ctx: ToolContext): Promise<ToolOutcome>;
  /** Looks a call up on the remote by its key, when the tool can ({@link ToolSpec.reconcile}). */
  readonly reconcile?: (args: unknown, ctx: ReconcileContext) => Promise<Reconciliation>;
  /** Timeout of one `reconcile`. */
  readonly reconcileTimeoutMs: number;
}

const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Defines a tool.
 *
 * @example
 * ```ts
 * import { z } from "zod";
 * import { defineTool } from "./tools.ts";
 * const ping = defineTool({
 *   name: "ping",
 *   description: "Ping a host.",
 *   args: z.strictObject({ host: z.string() }),
 *   run: (args, ctx) => Promise.resolve({ result: `pong ${args.host} ${ctx.idempotencyKey}` }),
 * });
 * ```
 */
export function defineTool<A>(spec: ToolSpec<A>): Tool {
  if (!TOOL_NAME.test(spec.name)) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define a tool named ${JSON.stringify(spec.name)}: a name is 1-64 letters, digits, '_' or '-'`,
    );
  }
  const timeoutMs = spec.timeoutMs ?? 30_000;
  const maxAttempts = spec.maxAttempts ?? 4;
  const reconcileTimeoutMs = spec.reconcileTimeoutMs ?? timeoutMs;
  const waitDeadlineMs = spec.waitDeadlineMs ?? 3_600_000;
  const minCheckAfterMs = spec.minCheckAfterMs ?? 1_000;
  const positive = { timeoutMs, maxAttempts, reconcileTimeoutMs, waitDeadlineMs, minCheckAfterMs };
  for (const [option, value] of Object.entries(positive)) {
    if (!Number.isInteger(value) || value < 1) {
      throw new RuntimeError(
        "TOOL_INVALID",
        `Cannot define tool ${spec.name} as '${option}' must be a positive integer: current value is ${value}`,
      );
    }
  }
  const retry = toolRetry(spec.name, spec.retry);
  const onGiveUp = spec.onGiveUp ?? "fail-run";
  if (onGiveUp !== "fail-run" && onGiveUp !== "answer" && typeof onGiveUp !== "function") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${spec.name} as 'onGiveUp' must be "fail-run", "answer" or a function: current ` +
        `value is ${describeValue(onGiveUp)}`,
    );
  }
  const reconcile = spec.reconcile;
  if (reconcile !== undefined && typeof reconcile !== "function") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${spec.name} as 'reconcile' must be a function: current value is ${typeof reconcile}`,
    );
  }
  const parameters = parametersOf(spec);
  const replaces = replacesOf(spec);
  return {
    name: spec.name,
    description: spec.description,
    args: spec.args,
    idempotent: spec.idempotent ?? true,
    timeoutMs,
    maxAttempts,
    retry,
    onGiveUp,
    minCheckAfterMs,
    waitDeadlineMs,
    parameters,
    replaces,
    needsApproval: (args) =>
      typeof spec.approval === "function" ? spec.approval(args as A) === true : spec.approval === true,
    run: (args, ctx) => spec.run(args as A, ctx),
    reconcile: reconcile && ((args, ctx) => reconcile.call(spec, args as A, ctx)),
    reconcileTimeoutMs,
    ...forkOptionsOf(spec),
  };
}

/** A tool's `effect` and `stub`, checked: what a fork does with its calls. */
function forkOptionsOf<A>(
  spec: ToolSpec<A>,
): { effect: ToolEffect; stub?: (args: unknown, ctx: StubContext) => Json | Promise<Json> } {
  const effect: unknown = spec.effect ?? DEFAULTS.toolEffect;
  if (effect !== "world" && effect !== "read") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${spec.name} as 'effect' must be "world" or "read": current value is ${
        describeValue(effect)
      }`,
    );
  }
  const stub: unknown = spec.stub;
  if (stub !== undefined && typeof stub !== "function") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${spec.name} as 'stub' must be a function: current value is ${typeof stub}`,
    );
  }
  const given = spec.stub;
  return { effect, ...(given ? { stub: (args, ctx) => given.call(spec, args as A, ctx) } : {}) };
}

/** A tool's `replaces`, checked: tool names, none its own. */
function replacesOf<A>(spec: ToolSpec<A>): readonly string[] {
  const given: unknown = spec.replaces;
  if (given === undefined) return [];
  const problem = (what: string) =>
    new RuntimeError("TOOL_INVALID", `Cannot define tool ${spec.name} as 'replaces' ${what}`);
  if (!Array.isArray(given) || !given.every((n) => typeof n === "string" && TOOL_NAME.test(n))) {
    throw problem(`must be an array of tool names: current value is ${describeValue(given)}`);
  }
  if (given.includes(spec.name)) throw problem(`names the tool itself (${spec.name})`);
  return Object.freeze([...new Set(given as string[])]);
}

/**
 * The JSON Schema of a tool's arguments, as the model is shown it: the one
 * given as `parameters` (copied), or its zod schema's, without `$schema`.
 */
function parametersOf<A>(spec: ToolSpec<A>): Record<string, unknown> {
  const given: unknown = spec.parameters;
  if (given !== undefined && (given === null || typeof given !== "object" || Array.isArray(given))) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${spec.name} as 'parameters' must be a JSON Schema object: current value is ${
        describeValue(given)
      }`,
    );
  }
  const parameters = given !== undefined
    ? structuredClone(given) as Record<string, unknown>
    : zodParameters(spec.name, spec.args as unknown as z.ZodType);
  delete parameters.$schema;
  return parameters;
}

/** The JSON Schema of a zod schema, or why there is none. */
function zodParameters(name: string, args: z.ZodType): Record<string, unknown> {
  try {
    return z.toJSONSchema(args, { io: "input" }) as Record<string, unknown>;
  } catch (err) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${name}: its argument schema cannot be expressed as JSON Schema (${
        (err as Error).message
      }); give its JSON Schema as 'parameters'`,
      { cause: err },
    );
  }
}

/** The result of checking a model's tool call against the registry. */
export type CheckedCall =
  | { ok: true; tool: Tool; args: unknown }
  | { ok: false; code: Exclude<CodeOf<"Rejection">, "MODEL_UNSTORABLE">; message: string };

/** The set of tools a run may use, by name. */
export class ToolRegistry {
  readonly #tools: Map<string, Tool>;
  /** The tool that carries each name an earlier version had (its `replaces`). */
  readonly #carriers = new Map<string, Tool>();
  #descriptions?: ToolDescription[];

  /**
   * Registers `tools`; two tools with one name are an error, and so are two
   * tools replacing one name, or a tool replacing the name of another.
   */
  constructor(tools: Tool[]) {
    this.#tools = new Map();
    for (const tool of tools) {
      if (this.#tools.has(tool.name)) {
        throw new RuntimeError("TOOL_INVALID", `Two tools are named ${tool.name}: names must be unique`);
      }
      this.#tools.set(tool.name, tool);
    }
    for (const tool of tools) {
      for (const old of tool.replaces ?? []) {
        const other = this.#tools.get(old) ?? this.#carriers.get(old);
        if (other) {
          throw new RuntimeError(
            "TOOL_INVALID",
            `Tool ${tool.name} replaces ${old}, which ${
              other.name === old ? "is a tool of this version" : `${other.name} replaces too`
            }: a name is carried by one tool`,
          );
        }
        this.#carriers.set(old, tool);
      }
    }
  }

  /** The tools, in registration order. */
  get all(): Tool[] {
    return [...this.#tools.values()];
  }

  /** The registered names, in registration order. */
  get names(): string[] {
    return [...this.#tools.keys()];
  }

  /** The tool named `name`, if registered. */
  get(name: string): Tool | undefined {
    return this.#tools.get(name);
  }

  /** The tools as a model is shown them, in registration order (built once: the registry never changes). */
  descriptions(): ToolDescription[] {
    // #11: asked for on every decision; one array serves them all, so a planner
    // may key its serialised form on it. Callers only read it.
    this.#descriptions ??= [...this.#tools.values()].map((t) => ({
      name: t.name,
      description: t.description,
      parameters: t.parameters,
    }));
    return this.#descriptions;
  }

  /**
   * The tool that carries a call decided for `name`: the tool of that name,
   * else the one that replaces it (an earlier version's name), if any.
   */
  carrier(name: string): Tool | undefined {
    return this.#tools.get(name) ?? this.#carriers.get(name);
  }

  /**
   * Checks that `name` is registered and `args` fit its schema; returns the
   * parsed arguments. A decided call (`carried`) may also name a tool of an
   * earlier version that one of these replaces; a model's fresh answer may not.
   */
  check(name: string, args: unknown, opts: { carried?: boolean } = {}): CheckedCall {
    const tool = opts.carried ? this.carrier(name) : this.#tools.get(name);
    if (!tool) {
      return {
        ok: false,
        code: "UNKNOWN_TOOL",
        message: `Unknown tool ${JSON.stringify(name)}${
          opts.carried ? ", and no tool of this version replaces it" : ""
        }. Available tools: ${this.names.join(", ")}`,
      };
    }
    const parsed = tool.args.safeParse(args);
    if (!parsed.success) {
      return {
        ok: false,
        code: "BAD_ARGS",
        message: `Arguments for ${name}${
          tool.name === name ? "" : ` (carried by ${tool.name})`
        } do not fit its schema: ${describeIssues(parsed.error)}`,
      };
    }
    return { ok: true, tool, args: parsed.data };
  }
}

function describeIssues(error: unknown): string {
  return error instanceof z.ZodError ? z.prettifyError(error) : String(error);
}

/** A tool's `retry`, checked: each field given a whole number of milliseconds (the horizon from 0). */
function toolRetry(name: string, given: ToolRetry | undefined): ToolRetry {
  if (given === undefined) return {};
  if (given === null || typeof given !== "object") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${name} as 'retry' must be an object: current value is ${describeValue(given)}`,
    );
  }
  const out: ToolRetry = {};
  for (const field of ["horizonMs", "backoffBaseMs", "backoffMaxMs"] as const) {
    const value = given[field];
    if (value === undefined) continue;
    const least = field === "horizonMs" ? 0 : 1;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < least) {
      throw new RuntimeError(
        "TOOL_INVALID",
        `Cannot define tool ${name} as 'retry.${field}' must be an integer of milliseconds from ${least}: ` +
          `current value is ${describeValue(value)}`,
      );
    }
    out[field] = value;
  }
  return out;
}
