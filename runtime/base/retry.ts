/**
 * The retry policy: how a request that failed is asked again. A leaf (it
 * imports nothing but the errors), so the agent's definition, its tools and
 * the loop all read one declaration of it.
 *
 * @module
 */

import { describeValue, RuntimeError } from "./errors.ts";

/**
 * Limits on retries and re-asks. Two kinds of limit, for two kinds of
 * trouble: a count bounds what an outage cannot explain (answers the runtime
 * refused, and requests whose worker died before it could record how they
 * ended), and a time bounds what an outage can (requests that failed with a
 * refused or reset connection, a timeout, 5xx or 429, each recorded on its
 * row: they are asked again, under the same key, until `horizonMs` has passed
 * since the first of them). Both are counted in the database, so they hold
 * across restarts.
 */
export interface RetryPolicy {
  /**
   * Model requests per step that end without a usable answer for a reason an
   * outage does not explain: answers refused (and re-asked), and answers lost
   * with a worker that stopped before it could record them. Default 4.
   */
  maxModelAttempts: number;
  /**
   * How long requests that fail as in an outage are asked again, in
   * milliseconds from the first such failure of a step's model request or of
   * a tool call (`RETRY_HORIZON_S`). Past it the model gives up
   * (`MODEL_GAVE_UP`) and so does a tool (`TOOL_GAVE_UP`, or its
   * `onGiveUp`). Default 3 600 000 (an hour): a ten-minute outage is ridden
   * out.
   */
  horizonMs: number;
  /** First backoff delay; doubled per failure, with jitter (`RETRY_BACKOFF_MS`). Default 500. */
  backoffBaseMs: number;
  /** Cap on one backoff delay (`RETRY_BACKOFF_MAX_S`). Default 60 000. */
  backoffMaxMs: number;
  /**
   * The longest wait a worker sleeps holding the run's slot; a longer one lets
   * the run go (`waiting` until it is due, no lease, no slot) and a worker
   * takes it again then. Default 2 000.
   */
  holdSlotMaxMs: number;
  /** Model request timeout. Default 60 000. */
  modelTimeoutMs: number;
  /**
   * Cap on a wait a server asks for with `Retry-After` (which replaces the
   * backoff when given). Default 300 000; unset: `backoffMaxMs`.
   */
  retryAfterMaxMs?: number;
}

/** Default {@link RetryPolicy}. */
export const DEFAULT_RETRY: RetryPolicy = {
  maxModelAttempts: 4,
  horizonMs: 3_600_000,
  backoffBaseMs: 500,
  backoffMaxMs: 60_000,
  holdSlotMaxMs: 2_000,
  modelTimeoutMs: 60_000,
  retryAfterMaxMs: 300_000,
};

/** The fields of {@link RetryPolicy} an agent (`defineAgent({ retry })`) or a process may set. */
export const RETRY_FIELDS = [
  "maxModelAttempts",
  "horizonMs",
  "backoffBaseMs",
  "backoffMaxMs",
  "holdSlotMaxMs",
  "modelTimeoutMs",
  "retryAfterMaxMs",
] as const satisfies readonly (keyof RetryPolicy)[];

/**
 * `given` checked as part of a retry policy (an agent's `retry`, say): each
 * field it sets a safe integer, from 1 (`horizonMs` and `holdSlotMaxMs` from
 * 0), and no field it does not know. Throws `AGENT_INVALID` (or `code`) with
 * `where` and every problem.
 */
export function checkRetryPolicy(
  given: unknown,
  where: string,
  code: "AGENT_INVALID" | "TOOL_INVALID" = "AGENT_INVALID",
): Partial<RetryPolicy> | undefined {
  if (given === undefined) return undefined;
  if (given === null || typeof given !== "object" || Array.isArray(given)) {
    throw new RuntimeError(
      code,
      `${where}: 'retry' must be an object: current value is ${describeValue(given)}`,
    );
  }
  const out: Partial<RetryPolicy> = {};
  const problems: string[] = [];
  for (const [field, value] of Object.entries(given)) {
    if (!(RETRY_FIELDS as readonly string[]).includes(field)) {
      problems.push(`'retry.${field}' is not a retry setting (${RETRY_FIELDS.join(", ")})`);
      continue;
    }
    if (value === undefined) continue;
    const least = field === "horizonMs" || field === "holdSlotMaxMs" ? 0 : 1;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < least) {
      problems.push(
        `'retry.${field}' must be an integer from ${least}: current value is ${describeValue(value)}`,
      );
      continue;
    }
    out[field as keyof RetryPolicy] = value;
  }
  if (problems.length > 0) throw new RuntimeError(code, `${where}: ${problems.join("; ")}`);
  return out;
}

/** The fields of `value` that are set: spread over defaults, an unset field keeps the default. */
export function definedFields<T extends object>(value: T | undefined): Partial<T> {
  if (value === undefined) return {};
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** Exponential backoff with jitter: a delay in [c/2, c) where c = min(max, base * 2^(attempt-1)). */
export function backoffMs(
  policy: Pick<RetryPolicy, "backoffBaseMs" | "backoffMaxMs">,
  attempt: number,
  random: () => number,
): number {
  const ceiling = Math.min(
    policy.backoffMaxMs,
    policy.backoffBaseMs * 2 ** Math.min(Math.max(0, attempt - 1), 52),
  );
  return Math.floor(ceiling / 2 + (random() * ceiling) / 2);
}

/**
 * The wait before attempt `attempt + 1`: what the server asked for with
 * `Retry-After` (capped by `retryAfterMaxMs`, else `backoffMaxMs`), or else
 * {@link backoffMs}.
 */
export function retryDelayMs(
  policy: Pick<RetryPolicy, "backoffBaseMs" | "backoffMaxMs" | "retryAfterMaxMs">,
  attempt: number,
  random: () => number,
  retryAfterMs: number | undefined,
): number {
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs) || retryAfterMs < 0) {
    return backoffMs(policy, attempt, random);
  }
  return Math.min(Math.ceil(retryAfterMs), policy.retryAfterMaxMs ?? policy.backoffMaxMs);
}

/**
 * What becomes of a request that failed as in an outage, its failure
 * recorded: asked `again` after `waitMs` (held: slept by the worker that
 * holds the run; otherwise the run is let go until `at`), or given up once the
 * horizon has passed since the first failure. The last wait ends at the
 * horizon, so one request is sent then.
 */
export type NextTry =
  | { kind: "again"; waitMs: number; at: Date; hold: boolean; givesUpAt: Date }
  | { kind: "give-up"; failingForMs: number };

/**
 * Decides {@link NextTry} for a request whose `failures`-th failure was just
 * recorded, failing since `failingSince` (both read from its row), the server
 * maybe asking for `retryAfterMs`.
 */
export function nextTry(
  policy: RetryPolicy,
  failed: { failures: number; failingSince: Date; retryAfterMs?: number },
  now: Date,
  random: () => number,
): NextTry {
  const failingForMs = Math.max(0, now.getTime() - failed.failingSince.getTime());
  if (failingForMs >= policy.horizonMs) return { kind: "give-up", failingForMs };
  const waitMs = Math.min(
    retryDelayMs(policy, failed.failures, random, failed.retryAfterMs),
    policy.horizonMs - failingForMs,
  );
  return {
    kind: "again",
    waitMs,
    at: new Date(now.getTime() + waitMs),
    hold: waitMs <= policy.holdSlotMaxMs,
    givesUpAt: new Date(failed.failingSince.getTime() + policy.horizonMs),
  };
}

/** A duration for people: `250 ms`, `45 s`, `12 min`, `3 h`, `2 d`, rounded down. */
export function humanMs(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.floor(ms))} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min`;
  if (s < 172_800) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86_400)} d`;
}
