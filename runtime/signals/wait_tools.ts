/**
 * Two tools an agent offers its model that wait holding no worker's slot:
 * {@link waitForSignal} (until a named signal is sent to the run, with a
 * deadline) and {@link sleepTool} (until a time). Each is a tool as any other
 * (its calls keyed `<run>:<seq>`, intent and confirm rows, recovery); each
 * waits through its call's context (`ctx.waitForSignal`, `ctx.sleepUntil`,
 * `ctx.sleepFor`: call_waits.ts), so the same waits are open to a tool of
 * one's own.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import { DEFAULTS } from "../base/defaults.ts";
import { describeValue, RuntimeError, ToolError } from "../base/errors.ts";
import { isSignalName, SIGNAL_NAME_SHAPE } from "../base/ids.ts";
import type { SleepWait, ToolContext } from "../agent/tool_context.ts";
import { defineTool, type Tool, type ToolOutcome } from "../agent/tools.ts";

/**
 * How long past its own end a wait of these tools may still be answered as
 * it means to be: a worker that comes by later than this (the fleet down for
 * a month) finds the call failed `TOOL_WAIT_EXPIRED`, as any call past its
 * `waitDeadlineMs`. Thirty days.
 */
export const WAIT_LATE_MS = 30 * 86_400_000;

/** What {@link waitForSignal} takes besides the signal's name. */
export interface WaitForSignalOptions {
  /** The tool's name. Default: `wait_for_` and the signal's name, `.` and `:` as `_`. */
  name?: string;
  /** What the model is told the tool does. Default: it waits for the signal, at most the deadline. */
  description?: string;
  /**
   * How long one call waits for the signal, from its first wait, in
   * milliseconds. Default 86 400 000 (a day).
   */
  deadlineMs?: number;
  /**
   * What a call that saw no signal by its deadline comes to: `"answer"` (the
   * default) confirms it with `{ signal, timed_out: true, deadline }`, which
   * the model reads; `"fail"` fails it `SIGNAL_WAIT_TIMED_OUT` (the model sees
   * the failure).
   */
  onTimeout?: "answer" | "fail";
  /** Whether a person must approve each call first, as for any tool. */
  approval?: boolean;
}

/**
 * A tool that waits until the signal `signal` is sent to the run
 * (`client.signal(runId, signal, payload)`, `deno task signal`) and answers
 * with what it carried: `{ signal, signal_id, payload, sent_at }`. A signal
 * sent before the call is kept and taken at once; one sent twice under one
 * id is one signal; each signal is taken by one call. While it waits the run
 * holds no worker's slot, and a send wakes it at once.
 *
 * @example
 * ```ts
 * import { defineAgent, defineTool } from "../../mod.ts";
 * import { waitForSignal } from "./wait_tools.ts";
 * import { z } from "zod";
 * export default defineAgent({
 *   name: "orders",
 *   instructions: "Take the order, wait for its payment, then ship it.",
 *   tools: [
 *     waitForSignal("payment-received", { deadlineMs: 3 * 86_400_000 }),
 *     defineTool({
 *       name: "ship",
 *       description: "Ships the order.",
 *       args: z.strictObject({ order: z.string() }),
 *       run: (args) => Promise.resolve({ result: { shipped: args.order } }),
 *     }),
 *   ],
 * });
 * ```
 */
export function waitForSignal(signal: string, opts: WaitForSignalOptions = {}): Tool {
  if (!isSignalName(signal)) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot make a tool that waits for a signal named ${
        describeValue(signal)
      }: a name is ${SIGNAL_NAME_SHAPE}`,
    );
  }
  const name = opts.name ?? `wait_for_${signal.replace(/[.:]/g, "_")}`.slice(0, 64);
  const deadlineMs = positiveMs(name, "deadlineMs", opts.deadlineMs ?? DEFAULTS.signalWaitDeadlineMs);
  const onTimeout = opts.onTimeout ?? "answer";
  if (onTimeout !== "answer" && onTimeout !== "fail") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${name} as 'onTimeout' must be "answer" or "fail": current value is ${
        describeValue(onTimeout)
      }`,
    );
  }
  const deadlineS = Math.max(1, Math.round(deadlineMs / 1000));
  return defineTool<Record<string, never>>({
    name,
    description: opts.description ??
      `Waits until the event "${signal}" is sent to this task, and answers with what it carried; answers ` +
        `that it timed out if none comes within ${deadlineS} s.`,
    args: z.strictObject({}),
    waitDeadlineMs: deadlineMs + WAIT_LATE_MS,
    minCheckAfterMs: 1,
    approval: opts.approval,
    run: async (_args, ctx): Promise<ToolOutcome> => {
      const wait = await waitsOf(ctx, name).waitForSignal(signal, { deadlineMs });
      if (wait.kind === "waiting") return wait.outcome;
      if (wait.kind === "received") {
        const { signalId, payload, sentAt } = wait.signal;
        return {
          result: { signal, signal_id: signalId, payload, sent_at: sentAt.toISOString() },
          remote: wait.again ? "already_done" : "created",
        };
      }
      if (onTimeout === "fail") {
        throw new ToolError(
          "SIGNAL_WAIT_TIMED_OUT",
          `No signal ${signal} came by ${wait.deadline.toISOString()}`,
          { transient: false },
        );
      }
      return { result: { signal, timed_out: true, deadline: wait.deadline.toISOString() } };
    },
  });
}

/** What {@link sleepTool} takes. */
export interface SleepToolOptions {
  /** The tool's name. Default `sleep`. */
  name?: string;
  /** What the model is told the tool does. Default: it pauses the task, at most `maxMs`. */
  description?: string;
  /** The longest one call may sleep, in milliseconds. Default 86 400 000 (a day). */
  maxMs?: number;
  /**
   * What the model gives: `"seconds"` (the default), how long to pause from
   * the call's first request; or `"until"`, an ISO 8601 time to pause until.
   */
  takes?: "seconds" | "until";
}

/**
 * A tool that pauses the run holding no worker's slot, at most `maxMs`, and
 * answers `{ slept_until }` once the time has passed: for the `seconds` the
 * model gives (from the call's first request), or until the time it gives
 * (`takes: "until"`). The time is fixed by the call's first request and kept
 * across crashes: the run goes on at that time, once.
 */
export function sleepTool(opts: SleepToolOptions = {}): Tool {
  const name = opts.name ?? "sleep";
  const maxMs = positiveMs(name, "maxMs", opts.maxMs ?? DEFAULTS.sleepMaxMs);
  const maxS = Math.max(1, Math.floor(maxMs / 1000));
  const common = { name, waitDeadlineMs: maxMs + WAIT_LATE_MS, minCheckAfterMs: 1 };
  const answer = (slept: SleepWait): ToolOutcome =>
    slept.kind === "waiting" ? slept.outcome : { result: { slept_until: slept.at.toISOString() } };
  if (opts.takes === "until") {
    return defineTool<{ until: string }>({
      ...common,
      description: opts.description ??
        `Pauses this task until a time (at most ${maxS} s from now), then answers.`,
      args: z.strictObject({
        until: z.string().describe("An ISO 8601 time to pause until, such as 2026-01-01T09:00:00Z"),
      }),
      run: async (args, ctx) => answer(await waitsOf(ctx, name).sleepUntil(args.until, { maxMs })),
    });
  }
  if (opts.takes !== undefined && opts.takes !== "seconds") {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${name} as 'takes' must be "seconds" or "until": current value is ${
        describeValue(opts.takes)
      }`,
    );
  }
  return defineTool<{ seconds: number }>({
    ...common,
    description: opts.description ??
      `Pauses this task for a number of seconds (at most ${maxS}), then answers.`,
    args: z.strictObject({
      seconds: z.number().int().min(0).max(maxS).describe(`How many seconds to pause (at most ${maxS})`),
    }),
    run: async (args, ctx) => answer(await waitsOf(ctx, name).sleepFor(args.seconds * 1000)),
  });
}

/** The waits of a call's context, which the runtime gives every call it makes. */
function waitsOf(
  ctx: ToolContext,
  tool: string,
): Required<Pick<ToolContext, "waitForSignal" | "sleepUntil" | "sleepFor">> {
  const { waitForSignal, sleepUntil, sleepFor } = ctx;
  if (!waitForSignal || !sleepUntil || !sleepFor) {
    throw new ToolError(
      "WAIT_OUTSIDE_RUNTIME",
      `The tool ${tool} waits holding no worker's slot, which only the runtime can do: call it from an ` +
        `agent's run (its context has no waits)`,
      { transient: false },
    );
  }
  return { waitForSignal, sleepUntil, sleepFor };
}

/** A tool option of milliseconds, checked: a positive integer. */
function positiveMs(tool: string, option: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new RuntimeError(
      "TOOL_INVALID",
      `Cannot define tool ${tool} as '${option}' must be a positive integer of milliseconds: current value is ${
        describeValue(value)
      }`,
    );
  }
  return value;
}
