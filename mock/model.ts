/**
 * `MockModel`: a scripted model speaking the OpenAI chat-completions protocol
 * with tool calling. It always provisions a server, then a database, then a
 * DNS record, then says it is done, and can be told to misbehave.
 *
 * @module
 */

import { sleep, waitForAbort } from "./abortable.ts";
import { DurableJsonFile } from "./durable_json_file.ts";
import { errorResponse, garbageResponse, jsonResponse } from "./http_response.ts";
import { commonRoute, isPlainObject, optionalCount } from "./json_input.ts";

/** Options of {@linkcode MockModel.open}. */
export interface MockModelOptions {
  /** JSON file holding the call counters across restarts; in-memory when omitted. */
  statePath?: string;
  /** Clock for the `created` field of answers; defaults to the real time. */
  now?: () => Date;
}

/** Ways an answer can be broken on purpose. */
export type ModelFaultMode =
  | "garbage"
  | "no_choices"
  | "unknown_tool"
  | "bad_args"
  | "bad_json_args"
  | "multi_tool";

/** Every {@linkcode ModelFaultMode}, for validation and docs. */
export const MODEL_FAULT_MODES: readonly ModelFaultMode[] = [
  "garbage",
  "no_choices",
  "unknown_tool",
  "bad_args",
  "bad_json_args",
  "multi_tool",
];

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
  /** The next N calls never answer (until the client aborts). */
  hang_next?: number;
  /** How the next `mode_next` answers are broken. */
  mode?: ModelFaultMode;
  /** How many answers get `mode`; default 1 when `mode` is set. */
  mode_next?: number;
}

/** Call counters: every request to `/v1/chat/completions`, per run (the `user` field). */
export interface ModelCallCounts {
  /** Every call. */
  total: number;
  /** Calls per run id; `anonymous` when the request had no `user`. */
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

/**
 * A scripted chat-completions model. `step` = number of `role: "tool"`
 * messages; `n` = this run's call count including the current call. Names
 * carry `n` (`srv-<n>`), so a step that is asked again shows a new number.
 *
 * @example
 * ```ts
 * const model = await MockModel.open({ now: () => new Date(0) });
 * const res = await model.handler(new Request("http://mock/v1/chat/completions", {
 *   method: "POST",
 *   body: JSON.stringify({ model: "mock", user: "run1", messages: [{ role: "user", content: "go" }] }),
 * }));
 * const answer = await res.json(); // tool call create_server {"name":"srv-1","spec":"small"}
 * ```
 */
export class MockModel {
  #state: ModelState;
  #file: DurableJsonFile<ModelState> | undefined;
  #now: () => Date;
  #faults: ModelFaultSpec = {};
  /** Aborted by `releaseHung()` to end calls held by `hang_next`. */
  #release = new AbortController();

  private constructor(state: ModelState, file: DurableJsonFile<ModelState> | undefined, now: () => Date) {
    this.#state = state;
    this.#file = file;
    this.#now = now;
  }

  /** Creates a model, loading the counters at `opts.statePath` when they exist. */
  static async open(opts: MockModelOptions = {}): Promise<MockModel> {
    const file = opts.statePath === undefined ? undefined : new DurableJsonFile<ModelState>(opts.statePath);
    const state = (await file?.read()) ?? { calls: { total: 0, by_run: {} } };
    return new MockModel(state, file, opts.now ?? (() => new Date()));
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
      case "GET /calls":
        return jsonResponse(200, this.callCounts());
    }
    const faults = {
      set: (spec: Record<string, unknown>) => this.setFaults(spec),
      get: () => this.faults(),
      clear: () => this.clearFaults(),
    };
    return await commonRoute(req, url.pathname, faults) ??
      errorResponse(404, "not_found", `no route for ${req.method} ${url.pathname}`);
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
    const run = isPlainObject(body) && typeof body.user === "string" && body.user !== ""
      ? body.user
      : "anonymous";
    const n = this.#countCall(run);

    const faults = this.#faults;
    if (faults.delay_ms) await sleep(faults.delay_ms, req.signal);
    if (spend(faults, "fail_next")) {
      return errorResponse(faults.fail_status ?? 503, "injected_failure", "mock model fault: fail_next");
    }
    if (spend(faults, "hang_next")) await waitForAbort(AbortSignal.any([req.signal, this.#release.signal]));
    if (!isPlainObject(body) || !Array.isArray(body.messages)) {
      return errorResponse(400, "invalid_request", "the body must be a JSON object with a messages array");
    }
    const mode = faults.mode !== undefined && spend(faults, "mode_next") ? faults.mode : undefined;
    if (mode === "garbage") return garbageResponse();
    const model = typeof body.model === "string" ? body.model : "mock-model";
    return jsonResponse(200, this.#answer(run, n, model, body.messages, text.length, mode));
  }

  #answer(
    run: string,
    n: number,
    model: string,
    messages: unknown[],
    request_chars: number,
    mode: ModelFaultMode | undefined,
  ): Record<string, unknown> {
    const step = messages.filter((m) => isPlainObject(m) && m.role === "tool").length;
    const tool_calls = scriptedToolCalls(step, n, messages, mode);
    const choices = mode === "no_choices" ? [] : [
      tool_calls === undefined
        ? { index: 0, message: { role: "assistant", content: DONE_MESSAGE }, finish_reason: "stop" }
        : {
          index: 0,
          message: { role: "assistant", content: null, tool_calls },
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
      usage: { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens },
    };
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

/** The tool calls of the answer, or `undefined` when the script is done. */
function scriptedToolCalls(
  step: number,
  n: number,
  messages: unknown[],
  mode: ModelFaultMode | undefined,
): ToolCall[] | undefined {
  const call = (name: string, args: unknown, suffix = ""): ToolCall => ({
    id: `call_${n}${suffix}`,
    type: "function",
    function: { name, arguments: typeof args === "string" ? args : JSON.stringify(args) },
  });
  // Broken answers need a tool even after the script is done; reuse the last one.
  const tool_step = Math.min(step, SCRIPT_TOOLS.length - 1);
  switch (mode) {
    case "unknown_tool":
      return [call("launch_rocket", {})];
    case "bad_args":
      return [call(SCRIPT_TOOLS[tool_step], tool_step === 2 ? { hostname: 42 } : { name: 42 })];
    case "bad_json_args":
      return [call(SCRIPT_TOOLS[tool_step], "{not json")];
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
  const known = new Set(["delay_ms", "fail_next", "fail_status", "hang_next", "mode", "mode_next"]);
  const unknown = Object.keys(value).filter((field) => !known.has(field));
  if (unknown.length > 0) throw new TypeError(`unknown fault field(s): ${unknown.join(", ")}`);
  const mode = value.mode;
  if (mode !== undefined && !MODEL_FAULT_MODES.includes(mode as ModelFaultMode)) {
    throw new TypeError(`mode must be one of ${MODEL_FAULT_MODES.join(", ")}, got ${JSON.stringify(mode)}`);
  }
  const fail_status = optionalCount(value, "fail_status");
  if (fail_status !== undefined && (fail_status < 100 || fail_status > 599)) {
    throw new TypeError(`fail_status must be an HTTP status 100-599, got ${fail_status}`);
  }
  const spec: ModelFaultSpec = {
    delay_ms: optionalCount(value, "delay_ms"),
    fail_next: optionalCount(value, "fail_next"),
    fail_status,
    hang_next: optionalCount(value, "hang_next"),
    mode: mode as ModelFaultMode | undefined,
    mode_next: optionalCount(value, "mode_next") ?? (mode === undefined ? undefined : 1),
  };
  return Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined)) as ModelFaultSpec;
}
