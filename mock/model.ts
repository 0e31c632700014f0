/**
 * `MockModel`: a scripted model speaking the OpenAI chat-completions protocol
 * with tool calling. Offered the demo's tools, it provisions a server, then a
 * database, then a DNS record, then says it is done. Any other agent gets the
 * script set for its run or its name, or else calls each offered tool once
 * with arguments made up from the tool's JSON Schema. It can be told to
 * misbehave.
 *
 * @module
 */

import { sleep, waitForAbort } from "./abortable.ts";
import { DurableJsonFile } from "./durable_json_file.ts";
import { errorResponse, garbageResponse, jsonResponse, openAIErrorResponse } from "./http_response.ts";
import { commonRoute, isPlainObject, optionalCount, readJsonObject } from "./json_input.ts";
import { argsFromSchema } from "./schema_args.ts";

/** Options of {@linkcode MockModel.open}. */
export interface MockModelOptions {
  /** JSON file holding the call counters across restarts; in-memory when omitted. */
  statePath?: string;
  /** Clock for the `created` field of answers; defaults to the real time. */
  now?: () => Date;
  /** Scripts to start with, as if given to {@linkcode MockModel.setScript}. Not persisted. */
  scripts?: MockScripts;
}

/**
 * One step of a script: a tool call, or a final answer with that content.
 * String values in `args` may contain `{n}`, replaced with the run's call count.
 */
export type ScriptStep = ScriptToolStep | ScriptAnswerStep;

/** A {@linkcode ScriptStep} that calls a tool. */
export interface ScriptToolStep {
  /** Name of the tool to call. */
  tool: string;
  /** Its arguments; `{n}` in string values becomes the run's call count. */
  args: Record<string, unknown>;
}

/** A {@linkcode ScriptStep} that ends the run with a final answer. */
export interface ScriptAnswerStep {
  /** Content of the final answer. */
  answer: string;
}

/** A script for one run or for every run of one agent: the body of `POST /_scripts`. */
export interface ScriptSpec {
  /** Run id (the request's `x-agent-run` header, else its `user` field); exclusive with `agent`. */
  run?: string;
  /** Agent name (the request's `x-agent-name` header); exclusive with `run`. */
  agent?: string;
  /** The steps, in order; step `i` is answered when the request holds `i` tool results. */
  steps: ScriptStep[];
}

/** Every script set, by run id and by agent name. */
export interface MockScripts {
  /** Scripts per run id; they win over agent scripts. */
  byRun?: Record<string, ScriptStep[]>;
  /** Scripts per agent name. */
  byAgent?: Record<string, ScriptStep[]>;
}

/**
 * Ways an answer can be broken on purpose, and `multi_tool`: two calls at
 * once (the step's and the next one), an answer the runtime takes since
 * steps may hold several calls (#24), kept to show it.
 */
export type ModelFaultMode =
  | "garbage"
  | "no_choices"
  | "unknown_tool"
  | "bad_args"
  | "bad_json_args"
  | "too_many_calls"
  | "multi_tool";

/** Every {@linkcode ModelFaultMode} that breaks an answer (the fuzzer draws from these), for validation and docs. */
export const MODEL_FAULT_MODES: readonly ModelFaultMode[] = [
  "garbage",
  "no_choices",
  "unknown_tool",
  "bad_args",
  "bad_json_args",
  "too_many_calls",
];

/** The calls a `too_many_calls` answer holds: more than any agent allows in one answer (maxCallsPerStep is at most 64). */
export const TOO_MANY_CALLS = 65;

/**
 * Misbehaviour for the next calls. Per call the first applicable knob wins,
 * in this order: `delay_ms`, `fail_next`, `hang_next`, `mode`. Each counter is
 * decremented when it fires. Every call counts, faulty or not.
 */
export interface ModelFaultSpec {
  /** Wait this long before answering (given up when the request is aborted). */
  delay_ms?: number;
  /** The next N calls get `fail_status` with a JSON error. */
  fail_next?: number;
  /** Status of `fail_next` answers; default 503. */
  fail_status?: number;
  /** Sent as `Retry-After` (seconds) with `fail_next` answers; default none. */
  retry_after_s?: number;
  /** The next N calls never answer (until the client aborts). */
  hang_next?: number;
  /** How the next `mode_next` answers are broken. */
  mode?: ModelFaultMode;
  /** How many answers get `mode`; default 1 when `mode` is set. */
  mode_next?: number;
}

/**
 * Call counters: every request to `/v1/chat/completions`, per run (the
 * `x-agent-run` header, else the `user` field).
 */
export interface ModelCallCounts {
  /** Every call. */
  total: number;
  /** Calls per run id; `anonymous` when the request had neither `user` nor `x-agent-run`. */
  by_run: Record<string, number>;
}

/** A tool call in an OpenAI chat-completions answer. */
export interface ToolCall {
  /** `call_<n>`. */
  id: string;
  /** Always `function`. */
  type: "function";
  /** The function and its JSON-encoded arguments. */
  function: { name: string; arguments: string };
}

interface ModelState {
  calls: ModelCallCounts;
}

/** The tools of the script, in the order the model asks for them. */
const SCRIPT_TOOLS = ["create_server", "create_database", "create_dns_record"] as const;

/** Content of the final answer. */
export const DONE_MESSAGE = "Provisioned a server, a database and a DNS record.";

/** Content of the final answer once a script has run out of steps. */
export const SCRIPT_DONE_MESSAGE = "Done.";

/** Content of the final answer of an agent offering no tools (and no script). */
export const NOTHING_TO_DO_MESSAGE = "Nothing to do.";

/** A run's or an agent's plan: the steps, then `end` as the final answer. */
interface Plan {
  steps: ({ tool: string; args: unknown } | ScriptAnswerStep)[];
  end: string;
}

/** The scripts set, by run id and by agent name. */
interface ScriptTables {
  byRun: Map<string, ScriptStep[]>;
  byAgent: Map<string, ScriptStep[]>;
}

/** A decided answer: tool calls, or a final answer. */
type Decision = { tool_calls: ToolCall[] } | { content: string };

/**
 * A scripted chat-completions model. `step` = number of `role: "tool"`
 * messages; `n` = this run's call count including the current call. Names
 * carry `n` (`srv-<n>`), so a step that is asked again shows a new number.
 *
 * What a request gets, first match wins: the script of its run (the
 * `x-agent-run` header, else `user`), the script of its agent (the `x-agent-name`
 * header), the demo script when the offered tools are the demo's three (or
 * when neither `tools` nor `x-agent-name` is sent), else one call per offered tool, in order, with
 * arguments from {@linkcode argsFromSchema}, then the final answer
 * `Called <name1>, <name2>.`.
 *
 * @example
 * ```ts
 * const model = await MockModel.open({ now: () => new Date(0) });
 * const res = await model.handler(new Request("http://mock/v1/chat/completions", {
 *   method: "POST",
 *   headers: { "x-agent-run": "run1" },
 *   body: JSON.stringify({ model: "mock", messages: [{ role: "user", content: "go" }] }),
 * }));
 * const answer = await res.json(); // tool call create_server {"name":"srv-1","spec":"small"}
 * ```
 */
export class MockModel {
  #state: ModelState;
  #file: DurableJsonFile<ModelState> | undefined;
  #now: () => Date;
  #faults: ModelFaultSpec = {};
  /** Tokens billed per run, from the usage of every answer sent. */
  #billed = new Map<string, number>();
  #scripts: ScriptTables;
  /** Aborted by `releaseHung()` to end calls held by `hang_next`. */
  #release = new AbortController();

  private constructor(
    state: ModelState,
    file: DurableJsonFile<ModelState> | undefined,
    now: () => Date,
    scripts: ScriptTables,
  ) {
    this.#state = state;
    this.#file = file;
    this.#now = now;
    this.#scripts = scripts;
  }

  /**
   * Creates a model, loading the counters at `opts.statePath` when they exist.
   * Throws a `TypeError` when `opts.scripts` is malformed.
   */
  static async open(opts: MockModelOptions = {}): Promise<MockModel> {
    const scripts = parseScripts(opts.scripts ?? {});
    const file = opts.statePath === undefined ? undefined : new DurableJsonFile<ModelState>(opts.statePath);
    const state = (await file?.read()) ?? { calls: { total: 0, by_run: {} } };
    return new MockModel(state, file, opts.now ?? (() => new Date()), scripts);
  }

  /**
   * Answers one HTTP request. Rejects (with the abort reason) only when a
   * call held by `hang_next` or `delay_ms` is aborted.
   */
  handler = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    switch (`${req.method} ${url.pathname}`) {
      case "POST /v1/chat/completions":
        return await this.#handleCompletion(req);
      case "GET /v1/models":
        // What clients (and `openai.models.list()`) call to check an endpoint.
        return jsonResponse(200, {
          object: "list",
          data: [{ id: "mock-planner", object: "model", created: 0, owned_by: "agent-runtime" }],
        });
      case "GET /calls":
        return jsonResponse(200, this.callCounts());
      case "GET /_scripts":
        return jsonResponse(200, this.scripts());
      case "POST /_scripts":
        return await this.#handleSetScript(req);
      case "DELETE /_scripts":
        this.clearScripts();
        return jsonResponse(200, { ok: true });
    }
    const faults = {
      set: (spec: Record<string, unknown>) => this.setFaults(spec),
      get: () => this.faults(),
      clear: () => this.clearFaults(),
    };
    return await commonRoute(req, url.pathname, faults) ??
      openAIErrorResponse(404, "not_found", `no route for ${req.method} ${url.pathname}`);
  };

  /** Calls made by `run`, or by everyone when `run` is omitted. */
  calls(run?: string): number {
    return run === undefined ? this.#state.calls.total : this.#state.calls.by_run[run] ?? 0;
  }

  /** All call counters (a copy). */
  callCounts(): ModelCallCounts {
    return structuredClone(this.#state.calls);
  }

  /** Replaces the fault spec. Throws a `TypeError` when it is malformed. */
  setFaults(spec: ModelFaultSpec): void {
    this.#faults = parseFaultSpec(spec);
  }

  /** Removes every fault. */
  clearFaults(): void {
    this.#faults = {};
  }

  /** The fault spec in force, with its remaining counters. */
  faults(): ModelFaultSpec {
    return { ...this.#faults };
  }

  /**
   * Sets the script of one run or of one agent, replacing its earlier one.
   * Throws a `TypeError` when `spec` is malformed.
   */
  setScript(spec: ScriptSpec): void {
    const { run, agent, steps } = parseScriptSpec(spec);
    if (run !== undefined) this.#scripts.byRun.set(run, steps);
    else this.#scripts.byAgent.set(agent!, steps);
  }

  /** Removes every script. */
  clearScripts(): void {
    this.#scripts.byRun.clear();
    this.#scripts.byAgent.clear();
  }

  /** Every script set (a copy). */
  scripts(): Required<MockScripts> {
    return structuredClone({
      byRun: Object.fromEntries(this.#scripts.byRun),
      byAgent: Object.fromEntries(this.#scripts.byAgent),
    });
  }

  /** Ends every call currently held by `hang_next` (they reject), e.g. before shutting a server down. */
  releaseHung(): void {
    this.#release.abort(new DOMException("mock model released hung requests", "AbortError"));
    this.#release = new AbortController();
  }

  async #handleCompletion(req: Request): Promise<Response> {
    const text = await req.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    // Count before anything else: a real provider may bill any request that reached it.
    // The runtime names the run in the x-agent-run header; `user` is read for older clients.
    const run = req.headers.get("x-agent-run") ||
      (isPlainObject(body) && typeof body.user === "string" && body.user !== "" ? body.user : "anonymous");
    const agent = req.headers.get("x-agent-name") || undefined;
    const n = this.#countCall(run);

    const faults = this.#faults;
    if (faults.delay_ms) await sleep(faults.delay_ms, req.signal);
    if (spend(faults, "fail_next")) {
      const headers: Record<string, string> = faults.retry_after_s === undefined
        ? {}
        : { "Retry-After": String(faults.retry_after_s) };
      return openAIErrorResponse(
        faults.fail_status ?? 503,
        "injected_failure",
        "mock model fault: fail_next",
        headers,
      );
    }
    if (spend(faults, "hang_next")) await waitForAbort(AbortSignal.any([req.signal, this.#release.signal]));
    if (!isPlainObject(body) || !Array.isArray(body.messages)) {
      return openAIErrorResponse(
        400,
        "invalid_request",
        "the body must be a JSON object with a messages array",
      );
    }
    const mode = faults.mode !== undefined && spend(faults, "mode_next") ? faults.mode : undefined;
    if (mode === "garbage") return garbageResponse();
    const model = typeof body.model === "string" ? body.model : "mock-model";
    const decision = this.#decide(run, agent, n, body.messages, body.tools, mode);
    return jsonResponse(200, this.#answer(run, n, model, decision, text.length, mode));
  }

  async #handleSetScript(req: Request): Promise<Response> {
    const spec = await readJsonObject(req);
    if (spec === undefined) return errorResponse(400, "bad_json", "The body must be a JSON object");
    try {
      this.setScript(spec as unknown as ScriptSpec);
    } catch (err) {
      if (err instanceof TypeError) return errorResponse(400, "bad_script", err.message);
      throw err;
    }
    return jsonResponse(200, this.scripts());
  }

  /** What to answer: the run's script, the agent's, the demo's, or one call per offered tool. */
  #decide(
    run: string,
    agent: string | undefined,
    n: number,
    messages: unknown[],
    tools: unknown,
    mode: ModelFaultMode | undefined,
  ): Decision {
    const step = messages.filter((m) => isPlainObject(m) && m.role === "tool").length;
    const script = this.#scripts.byRun.get(run) ??
      (agent === undefined ? undefined : this.#scripts.byAgent.get(agent));
    if (script !== undefined) {
      const steps = script.map((s) => "tool" in s ? { tool: s.tool, args: withCallCount(s.args, n) } : s);
      return planned({ steps, end: SCRIPT_DONE_MESSAGE }, step, n, mode);
    }
    // An agent with no tools sends none (OpenAI refuses an empty list); a hand-written
    // request without tools (no x-agent-name either) gets the demo.
    const offered = offeredTools(tools) ?? (agent === undefined ? undefined : []);
    if (offered === undefined || isDemoToolset(offered)) {
      const tool_calls = scriptedToolCalls(step, n, messages, mode);
      return tool_calls === undefined ? { content: DONE_MESSAGE } : { tool_calls };
    }
    return planned(genericPlan(offered, n), step, n, mode);
  }

  #answer(
    run: string,
    n: number,
    model: string,
    decision: Decision,
    request_chars: number,
    mode: ModelFaultMode | undefined,
  ): Record<string, unknown> {
    const choices = mode === "no_choices" ? [] : [
      "content" in decision
        ? { index: 0, message: { role: "assistant", content: decision.content }, finish_reason: "stop" }
        : {
          index: 0,
          message: { role: "assistant", content: null, tool_calls: decision.tool_calls },
          finish_reason: "tool_calls",
        },
    ];
    // Derived from sizes only, so identical inputs give identical answers.
    const prompt_tokens = Math.ceil(request_chars / 4);
    const completion_tokens = Math.ceil(JSON.stringify(choices).length / 4);
    return {
      id: `chatcmpl-${run}-${n}`,
      object: "chat.completion",
      created: Math.floor(this.#now().getTime() / 1000),
      model,
      choices,
      usage: this.#bill(run, {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
      }),
    };
  }

  /** Adds an answer's usage to what `run` was billed (in memory), and returns it. */
  #bill<U extends { total_tokens: number }>(run: string, usage: U): U {
    this.#billed.set(run, (this.#billed.get(run) ?? 0) + usage.total_tokens);
    return usage;
  }

  /** Tokens billed to `run` in the answers it was sent (lost ones too): what a real provider would charge. */
  tokens(run: string): number {
    return this.#billed.get(run) ?? 0;
  }

  /** Counts a call for `run`, persists, and returns the run's new count. */
  #countCall(run: string): number {
    const calls = this.#state.calls;
    calls.total++;
    const n = (calls.by_run[run] ?? 0) + 1;
    calls.by_run[run] = n;
    this.#file?.writeSync(this.#state);
    return n;
  }
}

/** A tool call with id `call_<n><suffix>`; string `args` are sent as they are. */
function toolCall(n: number, name: string, args: unknown, suffix = ""): ToolCall {
  return {
    id: `call_${n}${suffix}`,
    type: "function",
    function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  };
}

/**
 * The offered tools (OpenAI format) as name and parameters, in order, skipping
 * malformed entries; `undefined` when the request has no `tools` field.
 */
function offeredTools(tools: unknown): { name: string; parameters: unknown }[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool) => {
    const fn = isPlainObject(tool) ? tool.function : undefined;
    if (!isPlainObject(fn) || typeof fn.name !== "string" || fn.name === "") return [];
    return [{ name: fn.name, parameters: fn.parameters ?? { type: "object", properties: {} } }];
  });
}

/** True when the offered tools are exactly the demo's three, in any order. */
function isDemoToolset(tools: { name: string }[]): boolean {
  const names = new Set(tools.map((t) => t.name));
  return tools.length === SCRIPT_TOOLS.length && SCRIPT_TOOLS.every((name) => names.has(name));
}

/** One call per offered tool, in order, with arguments from its schema; then a summary. */
function genericPlan(tools: { name: string; parameters: unknown }[], n: number): Plan {
  return {
    steps: tools.map((t) => ({
      tool: t.name,
      args: argsFromSchema(t.parameters, { n, name: t.name }),
    })),
    end: tools.length === 0 ? NOTHING_TO_DO_MESSAGE : `Called ${tools.map((t) => t.name).join(", ")}.`,
  };
}

/** Copies `value`, replacing `{n}` in every string with the call count. */
function withCallCount<T>(value: T, n: number): T {
  if (typeof value === "string") return value.replaceAll("{n}", String(n)) as T;
  if (Array.isArray(value)) return value.map((item) => withCallCount(item, n)) as T;
  if (isPlainObject(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withCallCount(v, n)])) as T;
  }
  return value;
}

/**
 * The answer at `step` of a plan, or the broken answer `mode` asks for. Broken
 * answers need a tool even where the plan answers; they use the last tool step
 * at or before `step` (else the first), or an unknown tool when the plan has none.
 */
function planned(plan: Plan, step: number, n: number, mode: ModelFaultMode | undefined): Decision {
  const tool_steps = plan.steps.flatMap((s, i) => "tool" in s ? [{ i, ...s }] : []);
  if (mode !== undefined && mode !== "no_choices") {
    const current = tool_steps.findLast((s) => s.i <= step) ?? tool_steps[0] ??
      { i: -1, tool: "launch_rocket", args: {} };
    if (mode === "unknown_tool") return { tool_calls: [toolCall(n, "launch_rocket", {})] };
    if (mode === "bad_args") return { tool_calls: [toolCall(n, current.tool, breakArgs(current.args))] };
    if (mode === "bad_json_args") return { tool_calls: [toolCall(n, current.tool, "{not json")] };
    if (mode === "too_many_calls") {
      return {
        tool_calls: Array.from(
          { length: TOO_MANY_CALLS },
          (_, i) => toolCall(n, current.tool, current.args, `_${i + 1}`),
        ),
      };
    }
    const next = tool_steps.find((s) => s.i > current.i) ?? current;
    return {
      tool_calls: [toolCall(n, current.tool, current.args), toolCall(n, next.tool, next.args, "_2")],
    };
  }
  const at = plan.steps[step];
  if (at === undefined) return { content: plan.end };
  return "tool" in at ? { tool_calls: [toolCall(n, at.tool, at.args)] } : { content: at.answer };
}

/** Arguments that fail validation: the first one with a value of another type, like the demo's `{ name: 42 }`. */
function breakArgs(args: unknown): unknown {
  const first = isPlainObject(args) ? Object.entries(args)[0] : undefined;
  if (first === undefined) return 42;
  return { [first[0]]: typeof first[1] === "number" ? "42" : 42 };
}

/** The tool calls of the answer, or `undefined` when the script is done. */
function scriptedToolCalls(
  step: number,
  n: number,
  messages: unknown[],
  mode: ModelFaultMode | undefined,
): ToolCall[] | undefined {
  const call = (name: string, args: unknown, suffix = "") => toolCall(n, name, args, suffix);
  // Broken answers need a tool even after the script is done; reuse the last one.
  const tool_step = Math.min(step, SCRIPT_TOOLS.length - 1);
  switch (mode) {
    case "unknown_tool":
      return [call("launch_rocket", {})];
    case "bad_args":
      return [call(SCRIPT_TOOLS[tool_step], tool_step === 2 ? { hostname: 42 } : { name: 42 })];
    case "bad_json_args":
      return [call(SCRIPT_TOOLS[tool_step], "{not json")];
    case "too_many_calls":
      return Array.from(
        { length: TOO_MANY_CALLS },
        (_, i) => call(SCRIPT_TOOLS[tool_step], scriptArgs(tool_step, n, messages), `_${i + 1}`),
      );
    case "multi_tool": {
      const next_step = Math.min(tool_step + 1, SCRIPT_TOOLS.length - 1);
      return [
        call(SCRIPT_TOOLS[tool_step], scriptArgs(tool_step, n, messages)),
        call(SCRIPT_TOOLS[next_step], scriptArgs(next_step, n, messages), "_2"),
      ];
    }
  }
  if (step >= SCRIPT_TOOLS.length) return undefined;
  return [call(SCRIPT_TOOLS[step], scriptArgs(step, n, messages))];
}

function scriptArgs(step: number, n: number, messages: unknown[]): Record<string, unknown> {
  if (step === 0) return { name: `srv-${n}`, spec: "small" };
  if (step === 1) return { name: `db-${n}`, engine: "postgres", size_gb: 10 };
  return { hostname: `app-${n}.example.test`, record_type: "CNAME", target: firstServerName(messages) };
}

/**
 * The `name` argument of the first `create_server` call the assistant made,
 * so the DNS record points at the server actually created in this run.
 * Falls back to `srv-unknown` when the history has none.
 */
function firstServerName(messages: unknown[]): string {
  for (const message of messages) {
    if (!isPlainObject(message) || message.role !== "assistant" || !Array.isArray(message.tool_calls)) {
      continue;
    }
    for (const tool_call of message.tool_calls) {
      const fn = isPlainObject(tool_call) ? tool_call.function : undefined;
      if (!isPlainObject(fn) || fn.name !== "create_server" || typeof fn.arguments !== "string") continue;
      try {
        const args: unknown = JSON.parse(fn.arguments);
        if (isPlainObject(args) && typeof args.name === "string") return args.name;
      } catch {
        // An unparseable earlier call is skipped, as a real model would ignore it.
      }
    }
  }
  return "srv-unknown";
}

/** Spends one unit of a positive counter; false when it is exhausted. */
function spend(spec: ModelFaultSpec, field: "fail_next" | "hang_next" | "mode_next"): boolean {
  const left = spec[field] ?? 0;
  if (left <= 0) return false;
  spec[field] = left - 1;
  return true;
}

function parseFaultSpec(value: unknown): ModelFaultSpec {
  if (!isPlainObject(value)) throw new TypeError("a fault spec must be a JSON object");
  const known = new Set([
    "delay_ms",
    "fail_next",
    "fail_status",
    "retry_after_s",
    "hang_next",
    "mode",
    "mode_next",
  ]);
  const unknown = Object.keys(value).filter((field) => !known.has(field));
  if (unknown.length > 0) throw new TypeError(`unknown fault field(s): ${unknown.join(", ")}`);
  const mode = value.mode;
  const modes = [...MODEL_FAULT_MODES, "multi_tool"];
  if (mode !== undefined && !modes.includes(mode as ModelFaultMode)) {
    throw new TypeError(`mode must be one of ${modes.join(", ")}, got ${JSON.stringify(mode)}`);
  }
  const fail_status = optionalCount(value, "fail_status");
  if (fail_status !== undefined && (fail_status < 100 || fail_status > 599)) {
    throw new TypeError(`fail_status must be an HTTP status 100-599, got ${fail_status}`);
  }
  const spec: ModelFaultSpec = {
    delay_ms: optionalCount(value, "delay_ms"),
    fail_next: optionalCount(value, "fail_next"),
    fail_status,
    retry_after_s: optionalCount(value, "retry_after_s"),
    hang_next: optionalCount(value, "hang_next"),
    mode: mode as ModelFaultMode | undefined,
    mode_next: optionalCount(value, "mode_next") ?? (mode === undefined ? undefined : 1),
  };
  return Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined)) as ModelFaultSpec;
}

/** Validates `MockModelOptions.scripts`; throws a `TypeError` naming the bad part. */
function parseScripts(value: unknown): ScriptTables {
  if (!isPlainObject(value)) throw new TypeError("Scripts must be an object with byRun and byAgent");
  const unknown = Object.keys(value).filter((field) => field !== "byRun" && field !== "byAgent");
  if (unknown.length > 0) throw new TypeError(`Unknown scripts field(s): ${unknown.join(", ")}`);
  const table = (field: "byRun" | "byAgent", key: "run" | "agent") => {
    const entries = value[field] ?? {};
    if (!isPlainObject(entries)) throw new TypeError(`The ${field} field must be an object of step lists`);
    return new Map(
      Object.entries(entries).map(([id, steps]) => {
        try {
          return [id, parseScriptSpec({ [key]: id, steps }).steps];
        } catch (err) {
          if (err instanceof TypeError) {
            throw new TypeError(`Script of ${key} ${JSON.stringify(id)}: ${err.message}`);
          }
          throw err;
        }
      }),
    );
  };
  return { byRun: table("byRun", "run"), byAgent: table("byAgent", "agent") };
}

/** Validates a {@linkcode ScriptSpec}; throws a `TypeError` naming the bad part. */
function parseScriptSpec(value: unknown): ScriptSpec {
  if (!isPlainObject(value)) throw new TypeError("A script must be a JSON object");
  const unknown = Object.keys(value).filter((field) => !["run", "agent", "steps"].includes(field));
  if (unknown.length > 0) throw new TypeError(`Unknown script field(s): ${unknown.join(", ")}`);
  const { run, agent, steps } = value;
  if ((run === undefined) === (agent === undefined)) {
    throw new TypeError("A script needs exactly one of run and agent");
  }
  for (const [field, id] of [["run", run], ["agent", agent]] as const) {
    if (id !== undefined && (typeof id !== "string" || id === "")) {
      throw new TypeError(`The ${field} must be a non-empty string, got ${JSON.stringify(id)}`);
    }
  }
  if (!Array.isArray(steps)) throw new TypeError("The steps must be an array");
  return {
    ...(run === undefined ? { agent: agent as string } : { run: run as string }),
    steps: steps.map(parseScriptStep),
  };
}

function parseScriptStep(value: unknown, i: number): ScriptStep {
  const where = `Step ${i}`;
  if (!isPlainObject(value)) throw new TypeError(`${where} must be an object with tool and args, or answer`);
  const fields = Object.keys(value).sort().join(",");
  if (fields === "answer") {
    if (typeof value.answer !== "string") throw new TypeError(`${where}: answer must be a string`);
    return { answer: value.answer };
  }
  if (fields !== "args,tool") {
    throw new TypeError(
      `${where} must have either tool and args, or answer alone; got ${fields || "no fields"}`,
    );
  }
  if (typeof value.tool !== "string" || value.tool === "") {
    throw new TypeError(`${where}: tool must be a non-empty string`);
  }
  if (!isPlainObject(value.args)) throw new TypeError(`${where}: args must be a JSON object`);
  return { tool: value.tool, args: structuredClone(value.args) };
}
