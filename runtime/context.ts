/**
 * What one worker incarnation holds while it drives one run: its
 * dependencies, and the run's state as read back from the database at claim
 * time and extended only by rows this worker has committed since.
 *
 * @module
 */

import type { PreparedAgent } from "./agent.ts";
import type { Budget } from "./budget.ts";
import { type Clock, SystemClock } from "./clock.ts";
import { CrashPoints } from "./crashpoints.ts";
import { Logger } from "./log.ts";
import type { Planner } from "./planner.ts";
import type { Decision, Fence, JournalRow, SideEffectRow, Store } from "./store/store.ts";
import { NO_TELEMETRY, type Telemetry, telemetryFromEnv } from "./telemetry.ts";
import type { Tool, ToolRegistry } from "./tools.ts";

/** Limits on retries and re-asks. */
export interface RetryPolicy {
  /** Model requests per step for transient errors and rejected answers together. Default 4. */
  maxModelAttempts: number;
  /** First backoff delay; doubled per attempt, with jitter. Default 200. */
  backoffBaseMs: number;
  /** Cap on one backoff delay. Default 5 000. */
  backoffMaxMs: number;
  /** Model request timeout. Default 60 000. */
  modelTimeoutMs: number;
  /**
   * Cap on a wait a server asks for with `Retry-After` (which replaces the
   * backoff when given). Default 60 000; unset: `backoffMaxMs`.
   */
  retryAfterMaxMs?: number;
}

/** Default {@link RetryPolicy}. */
export const DEFAULT_RETRY: RetryPolicy = {
  maxModelAttempts: 4,
  backoffBaseMs: 200,
  backoffMaxMs: 5_000,
  modelTimeoutMs: 60_000,
  retryAfterMaxMs: 60_000,
};

/** Everything a worker needs, passed in (no module-level state). */
export interface WorkerDeps {
  /** The agent's name, recorded with runs it creates; a run of another agent is refused. */
  agent: string;
  /** The system prompt. */
  instructions: string;
  /** Every statement the worker runs. */
  store: Store;
  /** The model. */
  planner: Planner;
  /** The tools this run may use. */
  tools: ToolRegistry;
  /** Time, for timestamps, sleeps and timeouts. */
  clock: Clock;
  /** Where events go. */
  log: Logger;
  /** The crash points, armed or not. */
  crash: CrashPoints;
  /** Written to `runs.owner`. */
  owner: string;
  /** The most steps (decisions) a run may take before `guard` fails it. */
  maxSteps: number;
  /** How often the lease is refreshed. */
  heartbeatMs: number;
  /** How old a heartbeat may be before the run counts as abandoned. */
  leaseMs: number;
  /** Limits on re-asks, retries and waits. */
  retry: RetryPolicy;
  /** Jitter source in [0, 1): `Math.random` in production, seeded in the harness. */
  random: () => number;
  /**
   * Claims in a row that may find no progress (no new confirmed decision or
   * settled tool call since the claim before) before the run is failed: a run
   * whose workers keep dying is stopped instead of restarted forever. Default
   * {@link DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS}.
   */
  maxClaimsWithoutProgress?: number;
  /** Spans and counters; {@link workerDeps} turns them on with `OTEL_DENO`. Default: none. */
  telemetry?: Telemetry;
}

/** The worker's telemetry, or the no-op. */
export function telemetryOf(deps: WorkerDeps): Telemetry {
  return deps.telemetry ?? NO_TELEMETRY;
}

/** Default of {@link WorkerDeps.maxClaimsWithoutProgress}. */
export const DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS = 5;

/** The run as this worker knows it. */
export interface RunState {
  /** The run and the epoch this worker holds. */
  fence: Fence;
  /** The run's goal, sent to the model. */
  goal: string;
  /** Journal rows by `seq`. */
  journal: Map<number, JournalRow>;
  /** Tool calls by `seq`. */
  effects: Map<number, SideEffectRow>;
  /** Model requests paid for across the whole run (sum of `llm_attempts`). */
  llmCalls: number;
  /** Aborts when this worker must stop (fenced, lease lost, done). */
  signal: AbortSignal;
  /** The run's ceilings, if any. */
  budget?: Budget;
  /**
   * The error the run's last worker let it go with (`runs.error` of a run
   * still running: kept while claims find no progress), if any: a limit
   * reached since names it as the likely cause.
   */
  lastWorkerError?: string;
  /**
   * The decision this worker has just committed, with its tool and arguments
   * as the schema parsed them, so `act` does not parse them a second time
   * (#11). A replayed decision has none here and is checked by `act`.
   */
  checked?: { decision: Decision; tool: Tool; args: unknown };
}

/** What {@link workerDeps} takes: a store and a prepared agent; everything else has a default. */
export interface WorkerDepsOptions
  extends Partial<Omit<WorkerDeps, "store" | "planner" | "tools" | "agent">> {
  /** Every statement the worker runs. */
  store: Store;
  /** The agent, with its tools and model built. */
  agent: PreparedAgent;
}

/**
 * Builds a worker's dependencies with defaults: the system clock, a logger
 * on stdout, no crash points, owner `worker:<pid>`, the agent's `maxSteps`,
 * a 3 s heartbeat and a 12 s lease, {@link DEFAULT_RETRY}, `Math.random`,
 * and telemetry when `OTEL_DENO` is on.
 */
export function workerDeps(opts: WorkerDepsOptions): WorkerDeps {
  const { agent: prepared, ...rest } = opts;
  const clock = rest.clock ?? new SystemClock();
  const log = rest.log ?? new Logger({ clock });
  return {
    instructions: prepared.agent.instructions,
    maxSteps: prepared.agent.maxSteps,
    owner: `worker:${Deno.pid}`,
    heartbeatMs: 3_000,
    leaseMs: 12_000,
    retry: DEFAULT_RETRY,
    random: Math.random,
    crash: rest.crash ?? CrashPoints.none({ log, clock }),
    ...rest,
    telemetry: rest.telemetry ?? telemetryFromEnv(),
    agent: prepared.agent.name,
    planner: prepared.planner,
    tools: prepared.tools,
    clock,
    log,
  };
}

/** The idempotency key of step `seq` of run `runId`. */
export function idempotencyKey(runId: string, seq: number): string {
  return `${runId}:${seq}`;
}

/**
 * The wait before attempt `attempt + 1`: what the server asked for with
 * `Retry-After` (capped by `retryAfterMaxMs`, else `backoffMaxMs`), or else
 * {@link backoffMs}.
 */
export function retryDelayMs(
  policy: RetryPolicy,
  attempt: number,
  random: () => number,
  retryAfterMs: number | undefined,
): number {
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs) || retryAfterMs < 0) {
    return backoffMs(policy, attempt, random);
  }
  return Math.min(Math.ceil(retryAfterMs), policy.retryAfterMaxMs ?? policy.backoffMaxMs);
}

/** Exponential backoff with jitter: a delay in [c/2, c) where c = min(max, base * 2^(attempt-1)). */
export function backoffMs(policy: RetryPolicy, attempt: number, random: () => number): number {
  const ceiling = Math.min(policy.backoffMaxMs, policy.backoffBaseMs * 2 ** Math.max(0, attempt - 1));
  return Math.floor(ceiling / 2 + (random() * ceiling) / 2);
}
