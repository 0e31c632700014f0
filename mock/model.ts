/**
 * `MockModel`: a scripted model speaking the OpenAI chat-completions protocol
 * with tool calling. Offered the demo's tools, it provisions a server, then a
 * database, then a DNS record, then says it is done. Any other agent gets the
 * script set for its run or its name, or else calls each offered tool once
 * with arguments made up from the tool's JSON Schema. A script step may hold
 * several calls, and the demo and the generic plan can answer several calls
 * at once (`parallel`), as models do with independent calls. It can be told
 * to misbehave.
 *
 * @module
 */

import { sleep, waitForAbort } from "./abortable.ts";
import { DurableJsonFile } from "./durable_json_file.ts";
import { errorResponse, garbageResponse, jsonResponse, openAIErrorResponse } from "./http_response.ts";
import { commonRoute, isPlainObject, optionalCount, readJsonObject } from "./json_input.ts";
import { argsFromSchema } from "./schema_args.ts";
import { type MockStreamOptions, streamedAnswer } from "./model_stream.ts";
import { type Arrival, RateLimiter, type RateLimitSpec } from "./rate_limit.ts";

export type { MockChunk, MockStreamOptions } from "./model_stream.ts";
export { type Arrival, busiestWindow, type RateLimitSpec } from "./rate_limit.ts";

/** Options of {@linkcode MockModel.open}. */
export interface MockModelOptions {
  /** JSON file holding the call counters across restarts; in-memory when omitted. */
  statePath?: string;
  /** Clock for the `created` field of answers; defaults to the real time. */
  now?: () => Date;
  /** Scripts to start with, as if given to {@linkcode MockModel.setScript}. Not persisted. */
  scripts?: MockScripts;
  /**
   * How many calls of the demo's or the generic plan one answer holds, at most, for runs and agents
   * with no entry in the script table; default 1 (one call per answer). See {@linkcode MockModel}.
   */
  parallel?: number;
  /**
   * Request-body fields this model refuses, as OpenAI refuses a parameter a
   * model does not take: a request carrying one is answered 400 with
   * `{"error": {"param": field, "code": "unsupported_parameter", ...}}`
   * (counted like any call). Default none.
   */
  refuseParams?: readonly string[];
  /**
   * How a request with `stream: true` is answered: as server-sent events,
   * the answer cut into `chunks` pieces `chunkMs` apart, `onChunk` called
   * before each (see {@linkcode MockModel.setStream}). Default 20 pieces, no
   * delay.
   */
  stream?: MockStreamOptions;
  /**
   * A provider's rate limit: at most `requests` answered in any sliding
   * `windowMs`; a request past it is answered 429 with a `Retry-After` of
   * whole seconds until there is room, as a provider does (see
   * {@linkcode MockModel.setRateLimit}). Default none.
   */
  rateLimit?: RateLimitSpec;
}

/**
 * One step of a script: a tool call, several tool calls in one answer, or a
 * final answer with that content. String values in `args` may contain `{n}`,
 * replaced with the run's call count.
 */
export type ScriptStep = ScriptToolStep | ScriptCallsStep | ScriptAnswerStep;

/** A {@linkcode ScriptStep} that calls a tool. */
export interface ScriptToolStep {
  /** Name of the tool to call. */
  tool: string;
  /** Its arguments; `{n}` in string values becomes the run's call count. */
  args: Record<string, unknown>;
}

/**
 * A {@linkcode ScriptStep} answered with two or more tool calls in one message,
 * as models do when the calls are independent. Ids are `call_<n>`, `call_<n>_2`, ...
 */
export interface ScriptCallsStep {
  /** The calls, in the order the answer lists them; 2 or more. */
  calls: ScriptToolStep[];
}

/** A {@linkcode ScriptStep} that ends the run with a final answer. */
export interface ScriptAnswerStep {
  /** Content of the final answer; `{n}` becomes the run's call count. */
  answer: string;
}

/**
 * A script for one run or for every run of one agent: the body of `POST /_scripts`.
 * It holds either `steps`, or `parallel` alone: no scripted steps, but the demo's
 * or the generic plan answered up to `parallel` calls at a time.
 */
export interface ScriptSpec {
  /** Run id (the request's `x-agent-run` header, else its `user` field); exclusive with `agent`. */
  run?: string;
  /** Agent name (the request's `x-agent-name` header); exclusive with `run`. */
  agent?: string;
  /**
   * The steps, in order. A request holding `k` tool results and final answers (a conversation's
   * earlier turns) is answered from the step where the `k`-th place (counted from 0) of the script
   * lies: a step of one call or an answer takes one place, a `calls` step one per call. Exclusive
   * with `parallel`.
   */
  steps?: ScriptStep[];
  /** At most this many calls per answer of the demo's or the generic plan (a positive integer). */
  parallel?: number;
}

/** Every script set, by run id and by agent name. */
export interface MockScripts {
  /** Scripts per run id; they win over agent scripts. */
  byRun?: Record<string, ScriptStep[]>;
  /** Scripts per agent name. */
  byAgent?: Record<string, ScriptStep[]>;
  /**
   * Calls per answer set with `parallel` instead of steps, per run and per agent; listed by
   * {@linkcode MockModel.scripts} only when one is set.
   */
  parallel?: { byRun?: Record<string, number>; byAgent?: Record<string, number> };
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

/** One call a plan makes: the tool and its arguments (a string is sent as it is). */
interface PlannedCall {
  tool: string;
  args: unknown;
}

/** A step of a plan: the calls of one answer, or a final answer. */
type PlanStep = { calls: PlannedCall[] } | ScriptAnswerStep;

/**
 * A run's or an agent's plan: the steps, then `end` as the final answer. With
 * `parallel` above 1, an answer also takes the one-call steps after its own,
 * up to `parallel` calls.
 */
interface Plan {
  steps: PlanStep[];
  end: string;
  parallel: number;
}

/** What the script table holds for a run or an agent: scripted steps, or calls per answer. */
type ScriptEntry = { steps: ScriptStep[] } | { parallel: number };

/** The scripts set, by run id and by agent name. */
interface ScriptTables {
  byRun: Map<string, ScriptEntry>;
  byAgent: Map<string, ScriptEntry>;
}

/** A decided answer: tool calls, or a final answer. */
type Decision = { tool_calls: ToolCall[] } | { content: string };

/**
 * A scripted chat-completions model. `k` = number of `role: "tool"` messages
 * (results of calls already made); `n` = this run's call count including the
 * current call. Names carry `n` (`srv-<n>`), so a step that is asked again
 * shows a new number.
 *
 * What a request gets, first match wins: the script of its run (the
 * `x-agent-run` header, else `user`), the script of its agent (the `x-agent-name`
 * header), the demo script when the offered tools are the demo's three (or
 * when neither `tools` nor `x-agent-name` is sent), else one call per offered tool, in order, with
 * arguments from {@linkcode argsFromSchema}, then the final answer
 * `Called <name1>, <name2>.`.
 *
 * Which step: every plan is a list of calls, counted from 0, and a request
 * holding `k` tool results is answered from call `k` on. A one-call step is
 * one call; a script's `calls` step answers all its calls in one message (so a
 * request landing inside it, after a broken answer, gets the rest of it). The
 * demo and the generic plan answer up to `parallel` consecutive calls at once
 * (the script table's `parallel` for the run or agent, else the option,
 * default 1); their calls are independent: a DNS record answered with its
 * server targets the server's name from the same answer. Counting results, not
 * assistant turns, keeps a plan in step whatever grouping the earlier answers
 * had (a `multi_tool` answer too).
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
  /** Scripts by the model named in a request's body (see {@linkcode MockModel.setModelScript}). */
  #byModel = new Map<string, ScriptStep[]>();
  /** Calls per answer of the demo's and the generic plan, for runs and agents the table does not name. */
  #parallel: number;
  /** Body fields answered with a 400 (see {@linkcode MockModelOptions.refuseParams}). */
  #refuseParams: readonly string[];
  /** Aborted by `releaseHung()` to end calls held by `hang_next`. */
  #release = new AbortController();
  /** How `stream: true` requests are answered. */
  #stream: MockStreamOptions = {};
  /** The rate limit, if set, and the log of every request's arrival. */
  #rate = new RateLimiter();

  private constructor(
    state: ModelState,
    file: DurableJsonFile<ModelState> | undefined,
    opts: {
      now: () => Date;
      scripts: ScriptTables;
      parallel: number;
      refuseParams: readonly string[];
      stream?: MockStreamOptions;
    },
  ) {
    this.#state = state;
    this.#file = file;
    this.#now = opts.now;
    this.#scripts = opts.scripts;
    this.#parallel = opts.parallel;
    this.#refuseParams = opts.refuseParams;
    this.#stream = opts.stream ?? {};
  }

  /**
   * Sets the provider's rate limit (undefined lifts it): at most `requests`
   * answered in any sliding `windowMs`, a request past it answered 429 with
   * `Retry-After`. Over HTTP: `POST /_rate_limit` with the spec, `DELETE` to
   * lift it. Throws a `TypeError` for a malformed spec.
   */
  setRateLimit(spec: RateLimitSpec | undefined): void {
    this.#rate.set(spec);
  }

  /**
   * Every chat request's arrival, oldest first, with its time and whether
   * the rate limit refused it (`GET /arrivals` over HTTP): the rate the
   * provider saw, to be read second by second.
   */
  arrivals(): Arrival[] {
    return this.#rate.arrivals();
  }

  /**
   * Creates a model, loading the counters at `opts.statePath` when they exist.
   * Throws a `TypeError` when `opts.scripts` or `opts.parallel` is malformed.
   */
  static async open(opts: MockModelOptions = {}): Promise<MockModel> {
    const scripts = parseScripts(opts.scripts ?? {});
    const parallel = opts.parallel ?? 1;
    if (!isPositiveInteger(parallel)) {
      throw new TypeError(
        `Cannot open the mock model as 'parallel' must be a positive integer: current value is ${
          JSON.stringify(parallel)
        }`,
      );
    }
    const file = opts.statePath === undefined ? undefined : new DurableJsonFile<ModelState>(opts.statePath);
    const state = (await file?.read()) ?? { calls: { total: 0, by_run: {} } };
    const model = new MockModel(state, file, {
      now: opts.now ?? (() => new Date()),
      scripts,
      parallel,
      refuseParams: [...(opts.refuseParams ?? [])],
      stream: opts.stream,
    });
    model.setRateLimit(opts.rateLimit);
    return model;
  }

  /**
   * Answers one HTTP request. Rejects (with the abort reason) only when a
   * call held by `hang_next` or `delay_ms` is aborted.
   */
  handler = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    switch (`${req.method} ${url.pathname}`) {
      case "POST /v1/chat/completions": {
        const arrived: { arrival?: Arrival } = {};
        const res = await this.#handleCompletion(req, arrived);
        if (arrived.arrival) arrived.arrival.status = res.status;
        return res;
      }
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
      case "GET /arrivals":
        return jsonResponse(200, this.arrivals());
      case "POST /_rate_limit":
        return await this.#handleSetRateLimit(req);
      case "DELETE /_rate_limit":
        this.setRateLimit(undefined);
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

  /**
   * Sets how a request with `stream: true` is answered from now on. Throws a
   * `TypeError` when `chunks` is not a positive integer or `chunkMs` not a
   * number of 0 or more.
   */
  setStream(opts: MockStreamOptions): void {
    if (opts.chunks !== undefined && !isPositiveInteger(opts.chunks)) {
      throw new TypeError(
        `Cannot stream as 'chunks' must be a positive integer: current value is ${
          JSON.stringify(opts.chunks)
        }`,
      );
    }
    if (opts.chunkMs !== undefined && !(Number.isFinite(opts.chunkMs) && opts.chunkMs >= 0)) {
      throw new TypeError(
        `Cannot stream as 'chunkMs' must be a number of 0 or more: current value is ${
          JSON.stringify(opts.chunkMs)
        }`,
      );
    }
    this.#stream = { ...opts };
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
    const { run, agent, steps, parallel } = parseScriptSpec(spec);
    const entry: ScriptEntry = steps === undefined ? { parallel: parallel! } : { steps };
    if (run !== undefined) this.#scripts.byRun.set(run, entry);
    else this.#scripts.byAgent.set(agent!, entry);
  }

  /**
   * Sets the script answered to requests that name `model` in their body
   * (`undefined` removes it): a second scripted model on the same server, as
   * a fork or an evaluation onto another model sends (`modelParams.model`).
   * A run's script wins over it, and it wins over an agent's. Over HTTP:
   * `POST /_scripts` with `{ "model": NAME, "steps": [...] }`. Throws a
   * `TypeError` for malformed steps.
   */
  setModelScript(model: string, steps: ScriptStep[] | undefined): void {
    if (steps === undefined) {
      this.#byModel.delete(model);
      return;
    }
    const parsed = parseScriptSpec({ agent: model, steps });
    this.#byModel.set(model, parsed.steps!);
  }

  /** Removes every script. */
  clearScripts(): void {
    this.#scripts.byRun.clear();
    this.#scripts.byAgent.clear();
    this.#byModel.clear();
  }

  /** Every script set (a copy); `parallel` is listed only when a script set one. */
  scripts(): MockScripts & Required<Pick<MockScripts, "byRun" | "byAgent">> {
    const steps = (table: Map<string, ScriptEntry>) =>
      Object.fromEntries([...table].flatMap(([id, entry]) => "steps" in entry ? [[id, entry.steps]] : []));
    const parallel = (table: Map<string, ScriptEntry>) =>
      Object.fromEntries(
        [...table].flatMap(([id, entry]) => "parallel" in entry ? [[id, entry.parallel]] : []),
      );
    const listed = {
      byRun: steps(this.#scripts.byRun),
      byAgent: steps(this.#scripts.byAgent),
    };
    const by = { byRun: parallel(this.#scripts.byRun), byAgent: parallel(this.#scripts.byAgent) };
    const any_parallel = Object.keys(by.byRun).length + Object.keys(by.byAgent).length > 0;
    return structuredClone(any_parallel ? { ...listed, parallel: by } : listed);
  }

  /** Ends every call currently held by `hang_next` (they reject), e.g. before shutting a server down. */
  releaseHung(): void {
    this.#release.abort(new DOMException("mock model released hung requests", "AbortError"));
    this.#release = new AbortController();
  }

  async #handleCompletion(req: Request, arrived: { arrival?: Arrival }): Promise<Response> {
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
    // The rate limit comes first, as a provider's gateway refuses before the model is reached.
    const { retryAfterS, arrival } = this.#rate.arrive(run, this.#now().getTime());
    arrived.arrival = arrival;
    if (retryAfterS !== undefined) {
      return openAIErrorResponse(429, "rate_limit_exceeded", "mock model rate limit: too many requests", {
        "Retry-After": String(retryAfterS),
      });
    }

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
    const refused = this.#refuseParams.find((field) => field in body);
    if (refused !== undefined) {
      return jsonResponse(400, {
        error: {
          message: `Unsupported parameter: '${refused}' is not supported with this model.`,
          type: "invalid_request_error",
          param: refused,
          code: "unsupported_parameter",
        },
      });
    }
    const mode = faults.mode !== undefined && spend(faults, "mode_next") ? faults.mode : undefined;
    if (mode === "garbage") return garbageResponse();
    const model = typeof body.model === "string" ? body.model : "mock-model";
    const decision = this.#decide(run, agent, n, body.messages, body.tools, mode, model);
    // A streamed request is billed as the same request without its stream fields, so the same question
    // gets the same usage streamed or not (the runtime journals an answer's usage).
    const { stream: _s, stream_options: _o, ...unstreamed } = body;
    const chars = body.stream === true ? JSON.stringify(unstreamed).length : text.length;
    const answer = this.#answer(run, n, model, decision, chars, mode);
    if (body.stream === true) {
      const options = isPlainObject(body.stream_options) ? body.stream_options : {};
      return streamedAnswer(answer, {
        ...this.#stream,
        run,
        n,
        includeUsage: options.include_usage === true,
        signal: req.signal,
      });
    }
    return jsonResponse(200, answer);
  }

  async #handleSetRateLimit(req: Request): Promise<Response> {
    const spec = await readJsonObject(req);
    if (spec === undefined) return errorResponse(400, "bad_json", "The body must be a JSON object");
    try {
      this.setRateLimit(spec as unknown as RateLimitSpec);
    } catch (err) {
      if (err instanceof TypeError) return errorResponse(400, "bad_rate_limit", err.message);
      throw err;
    }
    return jsonResponse(200, this.#rate.spec ?? {});
  }

  async #handleSetScript(req: Request): Promise<Response> {
    const spec = await readJsonObject(req);
    if (spec === undefined) return errorResponse(400, "bad_json", "The body must be a JSON object");
    try {
      if (typeof spec.model === "string") {
        const { model, steps } = spec;
        this.setModelScript(model, steps === undefined ? undefined : steps as unknown as ScriptStep[]);
        return jsonResponse(200, { model, steps: this.#byModel.get(model) ?? null });
      }
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
    model?: string,
  ): Decision {
    // The calls already made (each has its result in the request, whatever answers they came in) and
    // the answers already given (a conversation's earlier turns): where in its plan this request is.
    const k = messages.filter((m) =>
      isPlainObject(m) &&
      (m.role === "tool" ||
        (m.role === "assistant" && !(Array.isArray(m.tool_calls) && m.tool_calls.length > 0)))
    ).length;
    const byModel = model === undefined ? undefined : this.#byModel.get(model);
    const entry: ScriptEntry | undefined = this.#scripts.byRun.get(run) ??
      (byModel ? { steps: byModel } : undefined) ??
      (agent === undefined ? undefined : this.#scripts.byAgent.get(agent));
    if (entry !== undefined && "steps" in entry) {
      return planned(scriptPlan(entry.steps, n), k, n, mode);
    }
    const parallel = entry?.parallel ?? this.#parallel;
    // An agent with no tools sends none (OpenAI refuses an empty list); a hand-written
    // request without tools (no x-agent-name either) gets the demo.
    const offered = offeredTools(tools) ?? (agent === undefined ? undefined : []);
    if (offered === undefined || isDemoToolset(offered)) {
      return planned(demoPlan(k, n, messages, parallel), k, n, mode);
    }
    return planned(genericPlan(offered, n, parallel), k, n, mode);
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

/** The calls of one answer, with ids `call_<n>`, `call_<n>_2`, `call_<n>_3`, ... */
function toolCalls(n: number, calls: PlannedCall[]): ToolCall[] {
  return calls.map((c, i) => toolCall(n, c.tool, c.args, i === 0 ? "" : `_${i + 1}`));
}

/** One call per offered tool, in order, with arguments from its schema; then a summary. */
function genericPlan(tools: { name: string; parameters: unknown }[], n: number, parallel: number): Plan {
  return {
    steps: tools.map((t) => ({
      calls: [{ tool: t.name, args: argsFromSchema(t.parameters, { n, name: t.name }) }],
    })),
    end: tools.length === 0 ? NOTHING_TO_DO_MESSAGE : `Called ${tools.map((t) => t.name).join(", ")}.`,
    parallel,
  };
}

/** A script as a plan, `{n}` filled in; its `calls` steps group the calls, so `parallel` is 1. */
function scriptPlan(script: ScriptStep[], n: number): Plan {
  const call = (s: ScriptToolStep): PlannedCall => ({ tool: s.tool, args: withCallCount(s.args, n) });
  const steps = script.map((s): PlanStep =>
    "answer" in s
      ? { answer: withCallCount(s.answer, n) }
      : { calls: "calls" in s ? s.calls.map(call) : [call(s)] }
  );
  return { steps, end: SCRIPT_DONE_MESSAGE, parallel: 1 };
}

/**
 * The demo: a server, a database, a DNS record, then {@linkcode DONE_MESSAGE}.
 * The record targets the first server the assistant asked for in `messages`,
 * or, when the server is asked for in this very answer (`k` = 0), its name here.
 */
function demoPlan(k: number, n: number, messages: unknown[], parallel: number): Plan {
  const target = firstServerName(messages) ?? (k === 0 ? `srv-${n}` : "srv-unknown");
  const calls: PlannedCall[] = [
    { tool: "create_server", args: { name: `srv-${n}`, spec: "small" } },
    { tool: "create_database", args: { name: `db-${n}`, engine: "postgres", size_gb: 10 } },
    {
      tool: "create_dns_record",
      args: { hostname: `app-${n}.example.test`, record_type: "CNAME", target },
    },
  ];
  return { steps: calls.map((c) => ({ calls: [c] })), end: DONE_MESSAGE, parallel };
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
 * The answer from call `k` of a plan on, or the broken answer `mode` asks for.
 * Broken answers need a tool even where the plan answers; they use the last
 * call at or before `k` (else the first), or an unknown tool when the plan has none.
 */
function planned(plan: Plan, k: number, n: number, mode: ModelFaultMode | undefined): Decision {
  // Where each step's calls start in the plan's list of calls; an answer takes one place.
  const placed: { at: number; step: PlanStep }[] = [];
  let at = 0;
  for (const step of plan.steps) {
    placed.push({ at, step });
    at += "calls" in step ? step.calls.length : 1;
  }
  if (mode !== undefined && mode !== "no_choices") {
    const numbered = placed.flatMap(({ at, step }) =>
      "calls" in step ? step.calls.map((c, i) => ({ at: at + i, ...c })) : []
    );
    const current = numbered.findLast((c) => c.at <= k) ?? numbered[0] ??
      { at: -1, tool: "launch_rocket", args: {} };
    if (mode === "unknown_tool") return { tool_calls: [toolCall(n, "launch_rocket", {})] };
    if (mode === "bad_args") return { tool_calls: [toolCall(n, current.tool, breakArgs(current.args))] };
    if (mode === "bad_json_args") return { tool_calls: [toolCall(n, current.tool, "{not json")] };
    if (mode === "too_many_calls") return { tool_calls: toolCalls(n, Array(TOO_MANY_CALLS).fill(current)) };
    const next = numbered.find((c) => c.at > current.at) ?? current;
    return { tool_calls: toolCalls(n, [current, next]) };
  }
  const index = placed.findLastIndex(({ at }) => at <= k);
  const here = placed[index];
  if (here === undefined || ("answer" in here.step ? k > here.at : k >= here.at + here.step.calls.length)) {
    return { content: plan.end };
  }
  if ("answer" in here.step) return { content: here.step.answer };
  // The rest of this step, then (when the plan answers several at once) the one-call steps after it.
  const calls = here.step.calls.slice(k - here.at);
  for (const { step } of placed.slice(index + 1)) {
    if (calls.length >= plan.parallel || !("calls" in step) || step.calls.length !== 1) break;
    calls.push(step.calls[0]);
  }
  return { tool_calls: toolCalls(n, calls) };
}

/** Arguments that fail validation: the first one with a value of another type, like the demo's `{ name: 42 }`. */
function breakArgs(args: unknown): unknown {
  const first = isPlainObject(args) ? Object.entries(args)[0] : undefined;
  if (first === undefined) return 42;
  return { [first[0]]: typeof first[1] === "number" ? "42" : 42 };
}

/**
 * The `name` argument of the first `create_server` call the assistant made,
 * so the DNS record points at the server actually created in this run;
 * `undefined` when the history has none.
 */
function firstServerName(messages: unknown[]): string | undefined {
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
  return undefined;
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

/** True for an integer of 1 or more. */
function isPositiveInteger(value: unknown): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= 1;
}

/** Validates `MockModelOptions.scripts`; throws a `TypeError` naming the bad part. */
function parseScripts(value: unknown): ScriptTables {
  if (!isPlainObject(value)) throw new TypeError("Scripts must be an object with byRun and byAgent");
  const unknown = Object.keys(value).filter((field) => !["byRun", "byAgent", "parallel"].includes(field));
  if (unknown.length > 0) throw new TypeError(`Unknown scripts field(s): ${unknown.join(", ")}`);
  const parallel = value.parallel ?? {};
  if (!isPlainObject(parallel)) {
    throw new TypeError("The parallel field must be an object with byRun and byAgent");
  }
  const unknown_parallel = Object.keys(parallel).filter((field) => field !== "byRun" && field !== "byAgent");
  if (unknown_parallel.length > 0) {
    throw new TypeError(`Unknown parallel field(s): ${unknown_parallel.join(", ")}`);
  }
  const table = (field: "byRun" | "byAgent", key: "run" | "agent") => {
    const entries = value[field] ?? {};
    if (!isPlainObject(entries)) throw new TypeError(`The ${field} field must be an object of step lists`);
    const counts = parallel[field] ?? {};
    if (!isPlainObject(counts)) {
      throw new TypeError(`The parallel.${field} field must be an object of call counts`);
    }
    const specs = [
      ...Object.entries(entries).map(([id, steps]) => ({ id, spec: { [key]: id, steps } })),
      ...Object.entries(counts).map(([id, count]) => ({ id, spec: { [key]: id, parallel: count } })),
    ];
    const tables = new Map<string, ScriptEntry>();
    for (const { id, spec } of specs) {
      if (tables.has(id)) {
        throw new TypeError(
          `Script of ${key} ${JSON.stringify(id)}: it is listed in both ${field} and parallel.${field}; ` +
            "a script has either steps or parallel",
        );
      }
      try {
        const parsed = parseScriptSpec(spec);
        tables.set(id, parsed.steps === undefined ? { parallel: parsed.parallel! } : { steps: parsed.steps });
      } catch (err) {
        if (err instanceof TypeError) {
          throw new TypeError(`Script of ${key} ${JSON.stringify(id)}: ${err.message}`);
        }
        throw err;
      }
    }
    return tables;
  };
  return { byRun: table("byRun", "run"), byAgent: table("byAgent", "agent") };
}

/** Validates a {@linkcode ScriptSpec}; throws a `TypeError` naming the bad part. */
function parseScriptSpec(value: unknown): ScriptSpec {
  if (!isPlainObject(value)) throw new TypeError("A script must be a JSON object");
  const unknown = Object.keys(value).filter((field) =>
    !["run", "agent", "steps", "parallel"].includes(field)
  );
  if (unknown.length > 0) throw new TypeError(`Unknown script field(s): ${unknown.join(", ")}`);
  const { run, agent, steps, parallel } = value;
  if ((run === undefined) === (agent === undefined)) {
    throw new TypeError("A script needs exactly one of run and agent");
  }
  for (const [field, id] of [["run", run], ["agent", agent]] as const) {
    if (id !== undefined && (typeof id !== "string" || id === "")) {
      throw new TypeError(`The ${field} must be a non-empty string, got ${JSON.stringify(id)}`);
    }
  }
  const who = run === undefined ? { agent: agent as string } : { run: run as string };
  if (parallel !== undefined) {
    if (steps !== undefined) {
      throw new TypeError(
        "A script has either steps or parallel, not both: parallel groups the demo's or the generic " +
          "plan's calls, and a script groups its own with a calls step",
      );
    }
    if (!isPositiveInteger(parallel)) {
      throw new TypeError(
        `The parallel must be a positive integer of calls per answer, got ${JSON.stringify(parallel)}`,
      );
    }
    return { ...who, parallel };
  }
  if (!Array.isArray(steps)) throw new TypeError("The steps must be an array");
  return { ...who, steps: steps.map(parseScriptStep) };
}

function parseScriptStep(value: unknown, i: number): ScriptStep {
  const where = `Step ${i}`;
  if (!isPlainObject(value)) {
    throw new TypeError(`${where} must be an object with tool and args, calls, or answer`);
  }
  const fields = Object.keys(value).sort().join(",");
  if (fields === "answer") {
    if (typeof value.answer !== "string") throw new TypeError(`${where}: answer must be a string`);
    return { answer: value.answer };
  }
  if (fields === "calls") {
    const calls = value.calls;
    if (!Array.isArray(calls) || calls.length < 2) {
      const seen = Array.isArray(calls) ? `${calls.length} call(s)` : JSON.stringify(calls);
      throw new TypeError(
        `${where}: calls must be an array of 2 or more { tool, args } objects, got ${seen}; ` +
          "a single call is written { tool, args }",
      );
    }
    return { calls: calls.map((call, j) => parseToolStep(call, `${where}, call ${j}`)) };
  }
  if (fields !== "args,tool") {
    throw new TypeError(
      `${where} must have tool and args, calls, or answer alone; got ${fields || "no fields"}`,
    );
  }
  return parseToolStep(value, where);
}

/** Validates one `{ tool, args }` (a step, or a call of a `calls` step); `where` names it in errors. */
function parseToolStep(value: unknown, where: string): ScriptToolStep {
  if (!isPlainObject(value)) throw new TypeError(`${where} must be an object with tool and args`);
  const fields = Object.keys(value).sort().join(",");
  if (fields !== "args,tool") {
    throw new TypeError(`${where} must have tool and args alone; got ${fields || "no fields"}`);
  }
  if (typeof value.tool !== "string" || value.tool === "") {
    throw new TypeError(`${where}: tool must be a non-empty string`);
  }
  if (!isPlainObject(value.args)) throw new TypeError(`${where}: args must be a JSON object`);
  return { tool: value.tool, args: structuredClone(value.args) };
}
