/**
 * What a process has and what an agent has: two values, each with one
 * builder that fills in the defaults, so a caller (a test above all) names
 * only what it changes.
 *
 * The line between them: whatever must be judged the same by every process
 * that drives a run of the agent belongs to the agent, because every process
 * hosting it builds the same {@link AgentDeps} from the same module. That is
 * what the agent is (its name, instructions, tools, model) and every limit
 * counted in the database across workers (steps, model requests per step,
 * claims without progress): were such a limit the process's, a run's fate
 * would depend on which worker happened to take it. What processes may differ
 * in without changing what becomes of a run belongs to the process: its
 * connection, clock, log, name, lease timings (one heartbeat renews every run
 * it holds), crash plan, jitter and telemetry.
 *
 * A run's budget is neither: it is the run's own (an agent's is its default,
 * and a run may override it), read from the run's row.
 *
 * @module
 */

import type { ConversationOptions } from "../agent/conversation_options.ts";
import { type PreparedAgent, preparedVersion } from "../agent/agent.ts";
import { type Limit, NO_LIMITS } from "../agent/limit_asks.ts";
import { type Clock, SystemClock } from "../base/clock.ts";
import { CrashPoints } from "../base/crashpoints.ts";
import { Logger } from "../base/log.ts";
import type { Planner } from "../model/planner.ts";
import type { Store } from "../store/store.ts";
import { type Telemetry, telemetryFromEnv } from "./telemetry.ts";
import { DEFAULT_RETRY, definedFields, type RetryPolicy } from "../base/retry.ts";
import type { ToolRegistry } from "../agent/tools.ts";
import type { ModelParams } from "../model/transcript.ts";
import { DEFAULTS } from "../base/defaults.ts";

// Where they were declared before the retry policy had a file of its own (retry.ts): importers keep working.
export { DEFAULT_RETRY, type RetryPolicy } from "../base/retry.ts";

/** Default of {@link AgentDeps.maxClaimsWithoutProgress}. */
export const DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS = 5;

/**
 * The part of a process's dependencies a user chooses for a worker it hosts
 * in its own process (`client.startWorker`); {@link processDeps} defaults each.
 */
export interface ProcessSettings {
  /** Where events go. */
  log: Logger;
  /** Written to `runs.owner`. */
  owner: string;
  /** How often the leases are refreshed: one heartbeat renews every run the process holds. */
  heartbeatMs: number;
  /** How old a heartbeat may be before a run counts as abandoned. */
  leaseMs: number;
  /**
   * Stream each model answer and send its text to watchers as it is
   * written, through the database's notifications (`STREAM_DELTAS`; see
   * `stream.ts`). Default false: answers arrive whole, and a step costs no
   * statement more. Whatever it is, the journal holds the same.
   */
  streamDeltas?: boolean;
  /**
   * Group commit (`GROUP_COMMIT_MS`): the longest, in milliseconds, one of
   * the process's writes waits to share a statement and a commit with the
   * writes of its other runs (`store/group_commit.ts`). Default 0: off, every
   * write alone. A write that finds no statement in flight never waits.
   */
  groupCommitMs?: number;
}

/** What one process has, shared by every agent and every run it drives (no module-level state). */
export interface ProcessDeps extends ProcessSettings {
  /** Every statement the process runs. */
  store: Store;
  /** Time, for timestamps, sleeps and timeouts. */
  clock: Clock;
  /** The crash points, armed or not: a crash kills the whole process, every run in it. */
  crash: CrashPoints;
  /** Jitter source in [0, 1): `Math.random` in production, seeded per simulated process in the harness. */
  random: () => number;
  /** Spans and counters. */
  telemetry: Telemetry;
}

/** What {@link processDeps} takes: a store; everything else has a default. */
export interface ProcessDepsOptions extends Partial<ProcessDeps> {
  /** Every statement the process runs. */
  store: Store;
}

/**
 * Builds a process's dependencies with defaults: the system clock, a logger
 * on stdout, no crash points, owner `worker:<pid>`, a 3 s heartbeat and a
 * 12 s lease, `Math.random`, and telemetry when `OTEL_DENO` is on. Only the
 * fields of {@link ProcessDeps} are read, so a caller may pass a larger
 * options object (a host's) as it is.
 */
export function processDeps(opts: ProcessDepsOptions): ProcessDeps {
  const clock = opts.clock ?? new SystemClock();
  const log = opts.log ?? new Logger({ clock });
  const groupCommitMs = opts.groupCommitMs ?? 0;
  return {
    // Every run of the process shares this store, so one group commit batches all their writes.
    store: groupCommitMs > 0 ? opts.store.grouped({ maxWaitMs: groupCommitMs, clock }) : opts.store,
    groupCommitMs,
    clock,
    log,
    crash: opts.crash ?? CrashPoints.none({ log, clock }),
    owner: opts.owner ?? `worker:${Deno.pid}`,
    heartbeatMs: opts.heartbeatMs ?? DEFAULTS.heartbeatMs,
    leaseMs: opts.leaseMs ?? DEFAULTS.leaseMs,
    streamDeltas: opts.streamDeltas ?? false,
    random: opts.random ?? Math.random,
    telemetry: opts.telemetry ?? telemetryFromEnv(),
  };
}

/** What one agent has in this process: itself, its prepared tools and model, and the limits on its runs. */
export interface AgentDeps {
  /** The agent's name, recorded with runs it creates; a run of another agent is refused. */
  agent: string;
  /** The agent's version in this process (agent/version.ts), recorded with each run it starts. */
  version: string;
  /** True when the agent lets its runs move to a newer version at their next decision (`onNewVersion: "move"`). */
  mayMove: boolean;
  /** The system prompt. */
  instructions: string;
  /** The model. */
  planner: Planner;
  /** The tools its runs may use. */
  tools: ToolRegistry;
  /** The most steps (decisions) a run may take before `guard` fails it. */
  maxSteps: number;
  /** The most tool calls one answer may hold; an answer with more is refused and asked again. */
  maxCallsPerStep: number;
  /** How many calls of one step are in flight at once (`TOOL_CONCURRENCY`). */
  toolConcurrency: number;
  /** The model's request parameters the agent sets (a run's own override them). */
  modelParams?: ModelParams;
  /** Limits on re-asks, retries and waits, counted across restarts: the process's, under the agent's own. */
  retry: RetryPolicy;
  /**
   * Claims in a row that may find no progress (no new confirmed decision or
   * settled tool call since the claim before) before the run is failed: a run
   * whose workers keep dying is stopped instead of restarted forever. Counted
   * on the run's row, so every process must judge it alike.
   */
  maxClaimsWithoutProgress: number;
  /** How its runs converse, when they do (the agent's `conversation`). */
  conversation?: ConversationOptions;
  /** The settled steps the model is shown, the last of them (the agent's `historySteps`); undefined: all. */
  historySteps?: number;
  /**
   * The limits shared by the fleet its requests are held to: the agent's and
   * the process's (`LIMITS`). Empty: no request takes a reservation, and a
   * step costs no statement more.
   */
  limits: readonly Limit[];
}

/** What {@link agentDeps} may change of an agent's own limits (a process's `MAX_STEPS`, a test's fast retry). */
export interface AgentOptions {
  /** Replaces the agent's `maxSteps`. */
  maxSteps?: number;
  /** Replaces the agent's `toolConcurrency`. */
  toolConcurrency?: number;
  /**
   * The process's retry policy (`RETRY_HORIZON_S`, ... or a test's), over
   * {@link DEFAULT_RETRY}; the agent's own `retry` fields win over it.
   */
  retry?: Partial<RetryPolicy>;
  /** Default {@link DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS}. */
  maxClaimsWithoutProgress?: number;
  /**
   * The process's limits shared by the fleet (`LIMITS`), held beside the
   * agent's own `limits` (two on one key: the tighter of each amount).
   */
  limits?: readonly Limit[];
}

/**
 * Builds an agent's dependencies from the agent as prepared for this process:
 * its name, instructions and `maxSteps`, its tools and model, and the limits
 * in `opts` (only those fields are read) or their defaults.
 */
export function agentDeps(prepared: PreparedAgent, opts: AgentOptions = {}): AgentDeps {
  return {
    agent: prepared.agent.name,
    version: preparedVersion(prepared),
    mayMove: prepared.agent.onNewVersion === "move",
    instructions: prepared.agent.instructions,
    planner: prepared.planner,
    tools: prepared.tools,
    maxSteps: opts.maxSteps ?? prepared.agent.maxSteps,
    // An agent object not made by defineAgent (a test's) may lack the newer limits: their defaults then.
    maxCallsPerStep: prepared.agent.maxCallsPerStep ?? DEFAULTS.maxCallsPerStep,
    toolConcurrency: opts.toolConcurrency ?? prepared.agent.toolConcurrency ?? DEFAULTS.toolConcurrency,
    modelParams: prepared.agent.modelParams,
    retry: { ...DEFAULT_RETRY, ...definedFields(opts.retry), ...definedFields(prepared.agent.retry) },
    maxClaimsWithoutProgress: opts.maxClaimsWithoutProgress ?? DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS,
    ...(prepared.agent.conversation ? { conversation: prepared.agent.conversation } : {}),
    ...(prepared.agent.historySteps ? { historySteps: prepared.agent.historySteps } : {}),
    // An agent object not made by defineAgent (a test's) may lack limits.
    limits: [...(prepared.agent.limits ?? NO_LIMITS), ...(opts.limits ?? NO_LIMITS)],
  };
}
