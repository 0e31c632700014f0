/**
 * `worker`: one process hosting many runs of the agents in its module. It
 * takes runs itself (pending ones, and ones whose lease expired), up to
 * `RUNS_PER_WORKER` at once, and renews all their leases with one statement
 * per heartbeat. A supervisor keeps `WORKERS` of these alive; one can also be
 * started by hand next to others on the same PostgreSQL.
 *
 * Started alone (not by a supervisor, which ticks them itself) it also ticks
 * the schedules of its agents (`deno task schedule`).
 *
 * On SIGINT or SIGTERM it stops its runs at their next step, clears their
 * leases so another worker takes them at once, and exits 0.
 *
 * Before it holds any run it waits for what it cannot go on without and
 * that is away for now: the server its tools are listed from
 * (`tools-unreachable`), and its PostgreSQL, unreachable or refusing writes
 * (`database-unavailable`, with the wait before the next try; see
 * `start_wait.ts`). A signal or its stdin closing ends the wait. It exits 2
 * only for settings that cannot work (`EXIT_CODES.settings`).
 *
 * @module
 */

import type { PreparedAgent } from "../runtime/agent/agent.ts";
import type { Clock } from "../runtime/base/clock.ts";
import type { Settings } from "../runtime/settings/config.ts";
import { CrashPoints } from "../runtime/base/crashpoints.ts";
import { AbortedError, ConfigError, hasCode } from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import { ScheduleTicker } from "../runtime/schedules/ticker.ts";
import type { Logger } from "../runtime/base/log.ts";
import type { Store } from "../runtime/store/store.ts";
import { describeModels, loadAgents, type LoadedAgents, prepareAgents } from "./agents.ts";
import { openStoreLogged, reportConfigError, startProcess } from "./process.ts";
import { processEnv, RUN_USAGE } from "./run.ts";
import { TOOLS_BACKOFF, waitAtStart } from "./start_wait.ts";

/** The usage text of `worker`. */
export const WORKER_USAGE = `agent-runtime worker: one process hosting many runs of the agents in --agent.

usage: deno task worker [--flag value ...]   (every flag is also an environment variable: --poll-s is POLL_S)

  --agent PATH               the agent module (default: the demo); PATH,PATH hosts several, e.g. an agent's old
                             version beside its new one during a rollout (docs/versions.md)
  --runs-per-worker N        runs held at once (default 100)
  --poll-s S                 how often an idle worker looks for runs (default 3)
  --take-share fair|all      fair: a poll takes no more than this worker's share by capacity among the live
                             workers hosting its agents, so new work is spread; all: every free slot (default fair)
  --database-url URL         PostgreSQL shared with other workers; unset: embedded PGlite under --data-dir
  --worker NAME              written to runs.owner (default host:pid)
  and the settings of 'run' (model, cloud, lease, crash points, log format):
${
  RUN_USAGE.split("\n\nexit codes:")[0].split("\n").slice(4)
    .filter((l) => !l.includes("--runs-per-worker N, --poll-s")).join("\n")
}

Started alone (not by a supervisor, which does it), it also ticks its agents' schedules (deno task schedule).

A database or a tools' server that is away at start is waited for (database-unavailable, tools-unreachable:
again after 1 s, 2 s, 4 s, ...); SIGINT, SIGTERM or a closed stdin end the wait.

exit codes: 0 stopped, 2 settings that cannot work (a malformed value, a password or role refused, a database
that does not exist), 6 supervisor gone (stdin closed)`;

/** Runs a worker host until a signal; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  const started = startProcess(args, env, "worker", WORKER_USAGE, { gatherLines: true });
  if (typeof started === "number") return started;
  const { settings, log, clock } = started;
  // SIGINT and SIGTERM end the worker at any point: while it waits for the server its tools are
  // listed from or for its database (before it holds any run), and once its host runs.
  const stopping = new AbortController();
  const onSignal = () => stopping.abort(new AbortedError("The worker was asked to stop (SIGINT or SIGTERM)"));
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  let store: Store | undefined;
  try {
    const built = await prepareWaiting(settings, { env, preloaded, log, clock, signal: stopping.signal });
    if (typeof built === "number") return built;
    const { prepared, models } = built;
    // A pool a few connections wide: statements queue in the driver, and the
    // heartbeat needs one free now and then. Many runs, few connections.
    // A database that is away (stopped, restarting, failing over) is waited for, like the tools'
    // server: the process holds no run yet, and exiting would cost the slot (exit 2) or spin a
    // restart loop, while the same settings work once the database is back.
    const opened = await openStoreLogged(settings, log, {
      max: Math.min(8, Math.max(2, settings.runsPerWorker)),
      waitForDatabase: { clock, signal: stopping.signal, fields: { worker: settings.worker } },
    });
    if (typeof opened === "number") {
      if (stopping.signal.aborted) {
        log.info("worker-stopped", { owner: settings.worker, note: "while waiting" });
      }
      return opened;
    }
    store = opened;
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
      // Alone, it ticks its agents' schedules; a supervisor's workers (EXIT_ON_STDIN_EOF=1) leave it to the supervisor.
      companions: settings.exitOnStdinEof ? [] : [
        new ScheduleTicker({
          store,
          clock,
          log,
          agents: prepared.map((p) => p.agent.name),
          name: settings.worker,
        }),
      ],
      limits: settings.limits,
    });
    log.info("backends", {
      store: store.describe,
      agents: prepared.map((p) => p.agent.name).join(","),
      // Each agent's model (its own endpoint, or the process's settings): which server its requests reach.
      models: describeModels(prepared, models),
    });
    host.start();
    // A signal that came while the store opened stops the host at once.
    if (stopping.signal.aborted) void host.stop("signal");
    else stopping.signal.addEventListener("abort", () => void host.stop("signal"), { once: true });
    await host.finished;
    await host.stop();
    log.info("worker-stopped", { owner: settings.worker });
    return EXIT_CODES.done;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await store?.client.close().catch(() => {});
  }
}

/**
 * The worker's agents, built. A worker holds no run until its agents are
 * built, so a server its tools are listed from that is down
 * (`MCP_UNREACHABLE`) is waited for, with backoff, rather than ending the
 * worker: under a supervisor an exit would be a restart loop, and the fleet
 * should take runs once the server is back. Returns an exit code instead
 * for a settings error (2) or a signal while waiting (0).
 */
async function prepareWaiting(
  settings: Settings,
  ctx: {
    env: Record<string, string | undefined>;
    preloaded?: LoadedAgents;
    log: Logger;
    clock: Clock;
    signal: AbortSignal;
  },
): Promise<{ prepared: PreparedAgent[]; models: Map<string, string> } | number> {
  const { log, signal } = ctx;
  try {
    const { value } = await waitAtStart({
      attempt: async () => {
        const { agents } = await loadAgents(settings.agentModule, {
          preloaded: ctx.preloaded,
          timeoutMs: settings.agentLoadMs,
        });
        return await prepareAgents(agents, {
          env: processEnv(ctx.env, settings),
          dataDir: settings.dataDir,
          embedded: !settings.databaseUrl,
          log,
        });
      },
      isAway: (err) => hasCode(err, "MCP_UNREACHABLE"),
      onAway: ({ error, retryMs }) =>
        log.warn("tools-unreachable", { error: (error as Error).message, retry_ms: retryMs }),
      clock: ctx.clock,
      backoff: TOOLS_BACKOFF,
      signal,
    });
    return value;
  } catch (err) {
    if (signal.aborted) {
      log.info("worker-stopped", { owner: settings.worker, note: "while waiting" });
      return EXIT_CODES.done;
    }
    if (err instanceof ConfigError) return reportConfigError(err, "worker");
    throw err;
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
