/**
 * For a tool's author going past {@link defineTool}'s first page (the
 * package's `./tools` path): the helpers for a tool that calls an HTTP remote
 * (the idempotency key's header, which statuses are worth another try, a
 * `Retry-After`, the remote's own words for a 5xx, the trace headers); each
 * kind of outcome a tool returns, by name; how a tool's calls ride out an
 * outage and what becomes of them past it; what a tool's `reconcile` is given
 * and answers; the child runs a tool may start; an agent offered as a tool;
 * the waits a call may make holding no worker's slot (a signal sent to its
 * run, a time: `ctx.waitForSignal`, `ctx.sleepUntil`, `ctx.sleepFor`) and the
 * two tools built on them, {@link waitForSignal} and {@link sleepTool}; and
 * the codes a program names its own failures with.
 *
 * `mod.ts` keeps what every agent's author uses: `defineTool`, `ToolContext`,
 * `ToolOutcome` (the union of the outcomes named here), `ToolError`.
 *
 * @example A tool that calls its remote with the run's idempotency key and says which failures are worth another try
 * ```ts
 * import { z } from "zod";
 * import { defineTool, type ToolContext, ToolError } from "./mod.ts";
 * import { type FetchLike, idempotencyKeyHeader, isTransientStatus, parseRetryAfter } from "./tools.ts"; // the package's "/tools" path
 *
 * // A remote that says "busy, try again in 2 s" the first time and answers the second.
 * let asked = 0;
 * const remote: FetchLike = (req) => {
 *   asked++;
 *   return Promise.resolve(
 *     asked === 1
 *       ? new Response("busy", { status: 429, headers: { "retry-after": "2" } })
 *       : Response.json({ charged: req.headers.get("idempotency-key") }),
 *   );
 * };
 *
 * const charge = defineTool({
 *   name: "charge",
 *   description: "Charge a card once.",
 *   args: z.strictObject({ cents: z.number().int() }),
 *   run: async (args, ctx) => {
 *     const res = await remote(
 *       new Request("http://pay.test/charges", {
 *         method: "POST",
 *         headers: { "idempotency-key": idempotencyKeyHeader(ctx.idempotencyKey) },
 *         body: JSON.stringify(args),
 *       }),
 *     );
 *     if (!res.ok) {
 *       throw new ToolError("CHARGE_HTTP", `the remote said ${res.status}`, {
 *         transient: isTransientStatus(res.status),
 *         retryAfterMs: parseRetryAfter(res.headers.get("retry-after")),
 *       });
 *     }
 *     return { result: await res.json() };
 *   },
 * });
 * // The runtime gives run() the whole context; this example calls it by hand with the key alone.
 * const ctx = { idempotencyKey: "run42:3" } as ToolContext;
 * // The 429 is a transient failure: the runtime re-sends under the same key after the 2 s asked for.
 * const busy = await charge.run({ cents: 500 }, ctx).then(() => undefined, (e: ToolError) => e);
 * if (!busy?.transient || busy.retryAfterMs !== 2000) throw new Error(`unexpected: ${busy}`);
 * const done = await charge.run({ cents: 500 }, ctx);
 * // The header carries the key as a quoted string, as the IETF draft has it.
 * if (JSON.stringify(done) !== JSON.stringify({ result: { charged: '"run42:3"' } })) throw new Error(JSON.stringify(done));
 * ```
 *
 * @module
 */

// A tool that calls an HTTP remote.
export {
  idempotencyKeyHeader,
  isTransientStatus,
  parseRetryAfter,
  serverErrorMessage,
} from "./runtime/base/http.ts";
export { traceHeaders } from "./runtime/base/trace.ts";
export type { FetchLike } from "./runtime/model/openai.ts";

// Each outcome by name, a tool's retry and give-up options, reconciling, child runs, an agent as a tool.
export type {
  ChildRunInfo,
  ChildRuns,
  ReconcileContext,
  Reconciliation,
  StubContext,
  ToolAccepted,
  ToolDone,
  ToolEffect,
  ToolGiveUp,
  ToolRetry,
} from "./runtime/agent/tools.ts";
export type { AgentToolOptions } from "./runtime/agent/agent_tool.ts";

// Waits that hold no worker's slot: a signal sent to the run, a time.
export type {
  ReceivedSignal,
  SignalWait,
  SignalWaitOptions,
  SleepWait,
  WaitingOutcome,
} from "./runtime/agent/tool_context.ts";
export {
  sleepTool,
  type SleepToolOptions,
  waitForSignal,
  type WaitForSignalOptions,
} from "./runtime/signals/wait_tools.ts";

// A program's own error codes, outside ERROR_CODES.
export { type CodeOf, type OwnCode, ownCode } from "./runtime/base/errors.ts";
