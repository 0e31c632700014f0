/**
 * Limits shared by the fleet, in a step: a request (the model's, or a tool
 * call's) takes its reservations under the keys it falls under before it goes
 * out, and releases them when it ends, settled to what its answer used; a
 * provider's `Retry-After` holds the provider's keys for every worker. A
 * request refused ends its stage in a value (`limited`), and the run is let
 * go until it may try again (`waiting` with `wake_at`, no lease, no slot),
 * with `runs.error` saying which limit it waits for and until when.
 *
 * An agent with no limits pays nothing here: no key, no statement.
 *
 * @module
 */

import type { RunDeps, RunState } from "../run/context.ts";
import { DEFAULTS } from "../base/defaults.ts";
import type { LimitAsk, LimitRefusal } from "../store/store.ts";

/** The reservations a request holds, for its release. */
export interface HeldLimits {
  /** The reservations' ids. */
  readonly ids: readonly string[];
  /** What was asked under each key. */
  readonly asks: readonly LimitAsk[];
}

/** A request that holds nothing: no limit covers it. */
export const NOTHING_HELD: HeldLimits = Object.freeze({ ids: Object.freeze([]), asks: Object.freeze([]) });

/** A request refused by a limit: the run waits for `key` until `wakeAt` (or until woken sooner). */
export interface Limited {
  kind: "limited";
  /** The key refused. */
  key: string;
  /** When the run may try again. */
  wakeAt: Date;
  /** What it waits for, in words for people (`runs`, the page). */
  reason: string;
}

/** What taking a request's limits came to. */
export type LimitTaken = { kind: "taken"; held: HeldLimits } | Limited;

/**
 * Takes the request's reservations (`asks`, none: nothing is sent), or says
 * the run must wait. `what` names the request for people ("the model's
 * request for step 3"). Throws the fence's refusal when the run is no longer
 * this worker's.
 */
export async function takeLimits(
  deps: RunDeps,
  state: RunState,
  seq: number,
  asks: readonly LimitAsk[],
  what: string,
): Promise<LimitTaken> {
  if (asks.length === 0) return { kind: "taken", held: NOTHING_HELD };
  const now = deps.clock.now();
  const taken = await deps.store.limits.take(state.fence, seq, asks, {
    now,
    staleBefore: new Date(now.getTime() - deps.leaseMs),
    retryMs: DEFAULTS.limitRetryMs,
  });
  if (taken.kind === "fenced") throw await deps.store.writes.refusal(state.fence, "limit take");
  if (taken.kind === "granted") return { kind: "taken", held: { ids: taken.ids, asks } };
  const ask = asks.find((a) => a.key === taken.key);
  const until = taken.wakeAt.toISOString();
  const reason = `Waiting until ${until} for the limit on ${taken.key}` +
    `${ask ? ` (${ask.described})` : ""}: ${what} ${refusalText(taken.why)}`;
  deps.log.info("limited", { run: state.fence.runId, seq, key: taken.key, why: taken.why, until });
  return { kind: "limited", key: taken.key, wakeAt: taken.wakeAt, reason };
}

/** Why a take was refused, in words. */
function refusalText(why: LimitRefusal): string {
  switch (why) {
    case "held":
      return "waits out the provider's Retry-After, held for every worker";
    case "probe":
      return "waits while one request tries the provider after its Retry-After";
    case "requests":
      return "waits for a request of the window to age out";
    case "input_tokens":
      return "waits for input tokens of the window to age out";
    case "output_tokens":
      return "waits for output tokens of the window to age out";
    case "in_flight":
      return "waits for a call in flight to end";
    case "queue":
      return "waits behind runs ahead of it in the queue";
  }
}

/** How a request ended, for the release of what it held. */
export interface RequestEnd {
  /** The answer's usage, when one came (a model's): its tokens settle the reservation. */
  usage?: unknown;
  /** Why it failed, when it did: a transient failure with a Retry-After holds the provider's keys. */
  error?: unknown;
}

/**
 * Releases what a request held, settled to the tokens its answer used (an
 * answer that reported none keeps the estimate); when the provider said when
 * to come back (a 429 or 503 with `Retry-After`), the keys of the provider's
 * own (`model:`, `provider:`, `tool:`; a label's are this fleet's) are held
 * for every worker until then. The first run waiting for a call in flight it
 * freed is woken. A release the database refuses is logged: what it held ends
 * with the run's lease anyway, and its tokens count at their estimate.
 */
export async function releaseLimits(
  deps: RunDeps,
  state: RunState,
  held: HeldLimits,
  end: RequestEnd = {},
): Promise<void> {
  if (held.ids.length === 0) return;
  const now = deps.clock.now();
  const usage = usageOf(end.usage);
  const retryAfterMs = retryAfterOf(end.error);
  const providers = held.asks.filter((a) => !a.key.startsWith("label:")).map((a) => a.key);
  const inFlight = held.asks.filter((a) => a.inFlight !== undefined).map((a) => a.key);
  try {
    await deps.store.limits.release(held.ids, now, {
      inputTokens: usage?.input,
      outputTokens: usage?.output,
      ...(retryAfterMs !== undefined && providers.length > 0
        ? { hold: { until: new Date(now.getTime() + retryAfterMs), keys: providers } }
        : {}),
      ...(inFlight.length > 0 ? { wake: { keys: inFlight, count: 1 } } : {}),
    });
  } catch (err) {
    deps.log.warn("limit-release-failed", { run: state.fence.runId, error: (err as Error).message });
    return;
  }
  if (retryAfterMs !== undefined && providers.length > 0) {
    deps.log.warn("limit-held", {
      run: state.fence.runId,
      keys: providers.join(","),
      until: new Date(now.getTime() + retryAfterMs).toISOString(),
    });
  }
}

/** The input and output tokens a usage report says, if it says them. */
function usageOf(usage: unknown): { input?: number; output?: number } | undefined {
  if (usage === null || typeof usage !== "object") return undefined;
  const u = usage as Record<string, unknown>;
  const n = (v: unknown) => typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined;
  return { input: n(u.prompt_tokens), output: n(u.completion_tokens) };
}

/** The wait a transient failure's server asked for (its `Retry-After`), if it said. */
function retryAfterOf(error: unknown): number | undefined {
  if (error === null || typeof error !== "object") return undefined;
  const e = error as { transient?: unknown; retryAfterMs?: unknown };
  return e.transient === true && typeof e.retryAfterMs === "number" && e.retryAfterMs > 0
    ? e.retryAfterMs
    : undefined;
}

/**
 * Lets the run go until it may try again, waiting for a limit (fenced: it
 * throws the refusal when the run is no longer this worker's).
 */
export async function waitForLimit(deps: RunDeps, state: RunState, limited: Limited): Promise<void> {
  const now = deps.clock.now();
  if (!await deps.store.limits.waitRun(state.fence, limited.wakeAt, limited.reason, now)) {
    throw await deps.store.writes.refusal(state.fence, "limit wait");
  }
}
