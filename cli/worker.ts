/**
 * `worker`: one process hosting many runs of the agents in its module. It
 * takes runs itself (pending ones, and ones whose lease expired), up to
 * `RUNS_PER_WORKER` at once, and renews all their leases with one statement
 * per heartbeat. A supervisor keeps `WORKERS` of these alive; one can also be
 * started by hand next to others on the same PostgreSQL.
 *
 * On SIGINT or SIGTERM it stops its runs at their next step, clears their
 * leases so another worker takes them at once, and exits 0.
 *
 * @module
 */

import { CrashPoints } from "../runtime/crashpoints.ts";
import { ConfigError, hasCode } from "../runtime/errors.ts";
import { WorkerHost } from "../runtime/host.ts";
import { describeModels, loadAgents, type LoadedAgents, prepareAgents } from "./agents.ts";
import { openStoreLogged, reportConfigError, startProcess } from "./process.ts";
import { processEnv, RUN_USAGE } from "./run.ts";

/** The usage text of `worker`. */
export const WORKER_USAGE = `agent-runtime worker: one process hosting many runs of the agents in --agent.

usage: deno task worker [--flag value ...]   (every flag is also an environment variable: --poll-s is POLL_S)

  --agent PATH               the agent module (default: the demo)
  --runs-per-worker N        runs held at once (default 100)
  --poll-s S                 how often an idle worker looks for runs (default 3)
  --take-share fair|all      fair: a poll takes no more than this worker's share by capacity among the live
                             workers hosting its agents, so new work is spread; all: every free slot (default fair)
  --database-url URL         PostgreSQL shared with other workers; unset: embedded PGlite under --data-dir
  --worker NAME              written to runs.owner (default host:pid)
  and the settings of 'run' (model, cloud, lease, crash points, log format):
${RUN_USAGE.split("\n").slice(4).filter((l) => !l.includes("--runs-per-worker N, --poll-s")).join("\n")}`;

/** Runs a worker host until a signal; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  const started = startProcess(args, env, "worker", WORKER_USAGE);
  if (typeof started === "number") return started;
  const { settings, log, clock } = started;
  const embedded = !settings.databaseUrl;
  let prepared;
  let models;
  // A worker holds no run until its agents are built, so a server its tools are listed from that is
  // down (MCP_UNREACHABLE) is waited for, with backoff, rather than ending the worker: under a
  // supervisor an exit would be a restart loop, and the fleet should take runs once the server is back.
  for (let waitMs = 1_000;; waitMs = Math.min(30_000, waitMs * 2)) {
    try {
      const { agents } = await loadAgents(settings.agentModule, {
        preloaded,
        timeoutMs: settings.agentLoadMs,
      });
      ({ prepared, models } = await prepareAgents(agents, {
        env: processEnv(env, settings),
        dataDir: settings.dataDir,
        embedded,
        log,
      }));
      break;
    } catch (err) {
      if (err instanceof ConfigError) return reportConfigError(err, "worker");
      if (!hasCode(err, "MCP_UNREACHABLE")) throw err;
      log.warn("tools-unreachable", { error: err.message, retry_ms: waitMs });
      await clock.sleep(waitMs);
    }
  }
  // A pool a few connections wide: statements queue in the driver, and the
  // heartbeat needs one free now and then. Many runs, few connections.
  const store = await openStoreLogged(settings, log, {
    max: Math.min(8, Math.max(2, settings.runsPerWorker)),
  });
  if (typeof store === "number") return store;
  const host = new WorkerHost({
    store,
    agents: prepared,
    clock,
    log,
    crash: new CrashPoints(settings.crash, { log, clock }),
    owner: settings.worker,
    heartbeatMs: settings.heartbeatMs,
    leaseMs: settings.leaseMs,
    streamDeltas: settings.streamDeltas,
    groupCommitMs: settings.groupCommitMs,
    runsPerWorker: settings.runsPerWorker,
    pollMs: settings.pollMs,
    takeShare: settings.takeShare,
    // MAX_STEPS, when set, replaces each agent's own maxSteps.
    maxSteps: settings.maxSteps,
    toolConcurrency: settings.toolConcurrency,
    retry: settings.retry,
  });
  const onSignal = () => void host.stop("signal");
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    log.info("backends", {
      store: store.describe,
      agents: prepared.map((p) => p.agent.name).join(","),
      // Each agent's own: which server its requests go to is per agent (model_endpoint.ts).
      models: describeModels(prepared, models),
    });
    host.start();
    await host.finished;
    await host.stop();
    log.info("worker-stopped", { owner: settings.worker });
    return 0;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await store.client.close().catch(() => {});
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
