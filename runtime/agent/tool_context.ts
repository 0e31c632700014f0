/**
 * What a tool's `run` receives besides its arguments: the call's key and
 * place, its signal, its trace headers, and, for an agent used as a tool, the
 * runs it may start.
 *
 * @module
 */

import type { Budget, Json } from "../base/values.ts";

/** What a tool's `run` receives besides its arguments. */
export interface ToolContext {
  /**
   * `<run_id>:<seq>`: send it to the remote so a re-send is recognised. Over
   * HTTP, send `Idempotency-Key: idempotencyKeyHeader(ctx.idempotencyKey)`
   * (the IETF draft's quoted string).
   */
  idempotencyKey: string;
  /** The run this call belongs to. */
  runId: string;
  /** The call's own seq (the calls of a decision at seq s own s, s+1, ...: calls.ts); its key is `<run_id>:<seq>`. */
  seq: number;
  /**
   * 1 for the first request under this key, 2 for the first re-send, ...
   * A re-send that asks how an accepted job stands (`ToolAccepted` (tools.ts))
   * counts a poll instead.
   */
  attempt: number;
  /**
   * How many times this call was re-sent to ask how a job its remote accepted
   * stands (`ToolAccepted` (tools.ts)): 0 (or absent) for the request that started
   * it. The tool sends the same request under the same key each time; the
   * remote answers the job's state.
   */
  polls?: number;
  /** Aborts when the call times out or the worker stops. */
  signal: AbortSignal;
  /**
   * The trace context of this call (`traceparent`) as HTTP headers, empty with
   * telemetry off. Deno's `fetch` sends it by itself under `OTEL_DENO=true`;
   * add these to requests that go another way (an in-process handler, a queue).
   */
  traceHeaders(): Record<string, string>;
  /**
   * Runs started by this call: filled in by the runtime for every call it
   * makes (absent where a test calls a tool's `run` by hand). An agent used
   * as a tool (`agentTool`) starts its child run here; other tools ignore it.
   */
  runs?: ChildRuns;
}

/**
 * What a tool call may do with runs (`ToolContext.runs`): start the one child
 * run it owns, and look one up. The child's id is the runtime's to choose,
 * from the call's key (`<run_id>:<seq>` starts `<run_id>.<seq>`), so a re-sent
 * call finds the child it started instead of starting a second.
 */
export interface ChildRuns {
  /**
   * Starts this call's child run of `agent` with `input` (as `checkInput`
   * returns it: what is stored, and the goal the model is told), or finds
   * it when an earlier request under this key started it, and returns it as
   * it stands. Throws a permanent `ToolError` when the id cannot be
   * derived (`AGENT_CHILD_ID_TOO_LONG`) or names a run that is not this
   * call's child (`AGENT_CHILD_CONFLICT`).
   */
  startChild(
    agent: string,
    input: { input: Json; goal: string },
    opts?: { budget?: Budget },
  ): Promise<ChildRunInfo>;
  /** A run, as a child is shown; undefined when there is none. */
  get(runId: string): Promise<ChildRunInfo | undefined>;
}

/** A run as a tool call is shown it. */
export interface ChildRunInfo {
  /** The run. */
  runId: string;
  /** Its agent. */
  agent: string;
  /** Where it stands: `pending`, `running`, `waiting`, `blocked`, `done`, `failed` or `cancelled`. */
  status: string;
  /** Its final answer, once done. */
  output: string | null;
  /** Why it failed or was cancelled. */
  error: string | null;
  /** The run that started it, if any. */
  parentRunId: string | null;
  /** The key of the call that started it, if any. */
  parentKey: string | null;
}
