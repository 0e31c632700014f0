/**
 * Starting worker processes, with the command line the entry point gives
 * (`cli/supervise.ts`: `deno run cli/main.ts worker`, or a compiled binary
 * running itself with `worker`).
 *
 * Each worker gets a piped stdin that the supervisor never writes to or
 * closes, and `EXIT_ON_STDIN_EOF=1`: if the supervisor dies, even by
 * `kill -9`, the kernel closes the pipe and the worker exits instead of
 * running on unwatched. Its stdout and stderr are the supervisor's.
 *
 * @module
 */

import type { RetryPolicy } from "../runtime/base/retry.ts";
import type { SpawnWorker, WorkerHandle } from "./supervisor.ts";

/** Settings passed to every worker. */
export interface WorkerEnv {
  databaseUrl: string;
  /** The agent module as a specifier every worker can import (absolute); unset: the demo. */
  agentModule?: string;
  runsPerWorker: number;
  pollMs: number;
  /** `TAKE_SHARE` of every worker. */
  takeShare: "fair" | "all";
  heartbeatMs: number;
  leaseMs: number;
  logFormat: "text" | "json";
  /** How long a worker may take to import the agent module. */
  agentLoadMs: number;
  /** The retry settings given to the supervisor (`RETRY_HORIZON_S`, ...): each one set is passed on. */
  retry?: Partial<RetryPolicy>;
}

// Settings a worker must not inherit from the supervisor's environment: runs
// are chosen by the workers, and crash injection is for single workers.
const CLEARED = ["RUN_ID", "GOAL", "INPUT", "CRASH_AT", "CRASH_SEQ", "STALL_AT", "STALL_MS", "DATA_DIR"];

/**
 * A {@link SpawnWorker} that starts real processes running `command`. A worker inherits the
 * supervisor's environment (the agent's own settings, `MODEL_URL`, API keys),
 * with the supervisor's choices on top.
 */
export function processSpawner(env: WorkerEnv, command: readonly string[]): SpawnWorker {
  return (workerName: string): WorkerHandle => {
    // The supervisor's environment minus what a worker must not inherit (removed,
    // not emptied: an empty RUN_ID is a settings error).
    const childEnv: Record<string, string> = Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([k]) => !CLEARED.includes(k)),
    );
    Object.assign(childEnv, {
      WORKER: workerName,
      DATABASE_URL: env.databaseUrl,
      AGENT: env.agentModule ?? "",
      RUNS_PER_WORKER: String(env.runsPerWorker),
      POLL_S: String(env.pollMs / 1000),
      TAKE_SHARE: env.takeShare,
      HEARTBEAT_S: String(env.heartbeatMs / 1000),
      LEASE_S: String(env.leaseMs / 1000),
      LOG_FORMAT: env.logFormat,
      AGENT_LOAD_S: String(env.agentLoadMs / 1000),
      EXIT_ON_STDIN_EOF: "1",
      ...retryEnv(env.retry),
    });
    const child = new Deno.Command(command[0], {
      args: command.slice(1),
      clearEnv: true,
      env: childEnv,
      stdin: "piped",
      stdout: "inherit",
      stderr: "inherit",
    }).spawn();
    // A worker killed by a signal reports 128 + its number (137 for SIGKILL).
    const exited = child.status.then((s) => s.code);
    return {
      pid: child.pid,
      exited,
      kill(signal: Deno.Signal) {
        try {
          child.kill(signal);
        } catch (err) {
          // Already exited (and reaped): nothing to signal.
          if (!(err instanceof TypeError || err instanceof Deno.errors.NotFound)) throw err;
        }
      },
    };
  };
}

/** The retry settings set, as a worker's environment (`RETRY_HORIZON_S`, `RETRY_BACKOFF_MS`, `RETRY_BACKOFF_MAX_S`). */
function retryEnv(retry: Partial<RetryPolicy> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (retry?.horizonMs !== undefined) out.RETRY_HORIZON_S = String(retry.horizonMs / 1000);
  if (retry?.backoffBaseMs !== undefined) out.RETRY_BACKOFF_MS = String(retry.backoffBaseMs);
  if (retry?.backoffMaxMs !== undefined) out.RETRY_BACKOFF_MAX_S = String(retry.backoffMaxMs / 1000);
  return out;
}
