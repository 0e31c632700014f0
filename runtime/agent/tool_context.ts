/**
 * What a tool's `run` receives besides its arguments: the call's key and
 * place, its signal, its trace headers, for an agent used as a tool the runs
 * it may start, and the waits a call may make holding no worker's slot (a
 * signal sent to its run, a time).
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
  /**
   * Takes a signal named `name` sent to this run (`client.signal`, `deno task
   * signal`), the oldest no call has taken, or says the call waits for one:
   * return the `waiting` answer's `outcome` from `run`, and the call waits
   * holding no worker's slot until a send of that name wakes it (at once) or
   * `deadlineMs` from the first wait has passed (`timed-out`). The signal is
   * the call's under its key: a re-send after a crash gets the same one
   * (`again`), and no other call gets it. A call waits for one thing: one
   * signal, or one time. Filled in by the runtime for every call it makes.
   *
   * @example
   * ```ts
   * import { z } from "zod";
   * import { defineTool } from "./tools.ts";
   * const awaitPayment = defineTool({
   *   name: "await_payment",
   *   description: "Waits until the payment provider says the order is paid (a day at most).",
   *   args: z.strictObject({ order: z.string() }),
   *   waitDeadlineMs: 2 * 86_400_000, // above the wait's own deadline, which answers first
   *   run: async (args, ctx) => {
   *     const got = await ctx.waitForSignal!(`paid-${args.order}`, { deadlineMs: 86_400_000 });
   *     if (got.kind === "waiting") return got.outcome;
   *     if (got.kind === "timed-out") return { result: { paid: false, payment: null } };
   *     return { result: { paid: true, payment: got.signal.payload } };
   *   },
   * });
   * ```
   */
  waitForSignal?(name: string, opts?: SignalWaitOptions): Promise<SignalWait>;
  /**
   * Sleeps until `time` holding no worker's slot: `waiting` (return its
   * `outcome` from `run`) until then, `woke` once it has passed. A time
   * further from now than `opts.maxMs`, or than the tool's `waitDeadlineMs`,
   * is refused (`SLEEP_INVALID`). Filled in by the runtime for every call it
   * makes.
   */
  sleepUntil?(time: Date | string, opts?: { maxMs?: number }): Promise<SleepWait>;
  /**
   * Sleeps `ms` from the call's first sleep, as {@link ToolContext.sleepUntil}:
   * the time it wakes is fixed by the first request that sleeps and kept
   * across re-sends and crashes.
   */
  sleepFor?(ms: number): Promise<SleepWait>;
}

/** What {@link ToolContext.waitForSignal} takes besides the name. */
export interface SignalWaitOptions {
  /**
   * How long the call waits, from its first wait, before it is answered
   * `timed-out`: a positive integer of milliseconds, less than the tool's
   * `waitDeadlineMs` (which fails the call `TOOL_WAIT_EXPIRED` however it
   * waits). Absent: the tool's `waitDeadlineMs` alone bounds the wait.
   */
  deadlineMs?: number;
}

/** A signal a call took, as its tool is given it. */
export interface ReceivedSignal {
  /** What happened. */
  name: string;
  /** The sender's id for it. */
  signalId: string;
  /** What the sender said with it; null when it said nothing. */
  payload: Json | null;
  /** When it was sent. */
  sentAt: Date;
  /** Its place among the run's signals, from 1. */
  seq: number;
}

/**
 * What a call's remote answers while it waits (a `ToolAccepted`, tools.ts):
 * return it from `run` as it is.
 */
export interface WaitingOutcome {
  /** Kept on the call's row while it waits (what it waits for, until when). */
  result: Json;
  /** When to look again (a send of the signal wakes it sooner). */
  accepted: { checkAfterMs: number };
}

/** How {@link ToolContext.waitForSignal} ended. */
export type SignalWait =
  /** A signal of the name, now the call's; `again` when an earlier request under its key had taken it. */
  | { kind: "received"; signal: ReceivedSignal; again: boolean }
  /** None came by the deadline (`deadline`). */
  | { kind: "timed-out"; name: string; deadline: Date }
  /** None yet: return `outcome` from `run`, and the call waits holding no slot. */
  | { kind: "waiting"; outcome: WaitingOutcome };

/** How {@link ToolContext.sleepUntil} and {@link ToolContext.sleepFor} ended. */
export type SleepWait =
  /** The time has come (`at`, the time it slept until). */
  | { kind: "woke"; at: Date }
  /** Not yet: return `outcome` from `run`, and the call sleeps holding no slot. */
  | { kind: "waiting"; outcome: WaitingOutcome; until: Date };

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
