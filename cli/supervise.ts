/**
 * `deno task supervise`: the supervisor's entry point (its settings, and the
 * command that starts a worker); the supervisor itself is `supervisor/`.
 *
 * | env | flag | default |
 * | --- | --- | --- |
 * | `DATABASE_URL` | `--database-url` | required: workers in several processes share one PostgreSQL |
 * | `AGENT` | `--agent` | the demo agent |
 * | `WORKERS` | `--workers` | the number of cores |
 * | `RUNS_PER_WORKER` | `--runs-per-worker` | 100 |
 * | `POLL_S` | `--poll-s` | 3 |
 * | `TAKE_SHARE` | `--take-share` | `fair` (passed to every worker) |
 * | `RETRY_HORIZON_S`, `RETRY_BACKOFF_MS`, `RETRY_BACKOFF_MAX_S` | `--retry-horizon-s`, ... | 3600, 500, 60 (passed to every worker) |
 * | `LEASE_S`, `HEARTBEAT_S` | `--lease-s`, `--heartbeat-s` | 12, 3 |
 * | `SUPERVISOR` | `--supervisor` | `supervisor@<hostname>:<pid>` |
 * | `LOG_FORMAT` | `--log-format` | `text` |
 * | `WORKER_CONFIG` | `--worker-config` | the first `deno.json` from the working directory up |
 *
 * Everything else in its environment (`MODEL_URL`, `CLOUD_URL`, an agent's
 * own settings and keys) passes to the workers. Before it starts a worker it
 * builds the agents' tools and models as a worker would, so a missing setting
 * is reported once, here, instead of by every worker.
 *
 * It also ticks the schedules of the agents it supervises (`client.schedules`,
 * `deno task schedule`): each occurrence starts one run, which its workers
 * take, however many supervisors tick at once.
 *
 * On SIGINT or SIGTERM it sends SIGTERM to its workers, waits for them and
 * exits 0. It does not restart itself; run it under a process manager (the
 * README shows a systemd unit).
 *
 * A database that is away at its start is waited for (`database-unavailable`,
 * each try), and one that goes away later is logged at each poll and waited
 * out; neither ends it, nor costs a worker slot.
 *
 * Exit codes (`EXIT_CODES`): 0 stopped, 2 settings that cannot work (or
 * every worker refused its settings).
 *
 * @module
 */

import { availableParallelism, hostname } from "node:os";
import { basename, resolve } from "node:path";
import { agentSpecifier, loadAgents, type LoadedAgents, prepareAgents } from "./agents.ts";
import { cliEntry, findProjectConfig } from "./project.ts";
import { loggerFor, openStoreLogged, reportConfigError } from "./process.ts";
import { type Clock, SystemClock } from "../runtime/base/clock.ts";
import { AGENT_LOAD_DEFAULT_S, readRaw, SettingsReader } from "../runtime/settings/config.ts";
import { AbortedError, ConfigError, hasCode } from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import type { LogFormat, Logger } from "../runtime/base/log.ts";
import type { RetryPolicy } from "../runtime/base/retry.ts";
import type { Store } from "../runtime/store/store.ts";
import type { TakeShare } from "../runtime/base/take_share.ts";
import { processSpawner } from "../supervisor/spawn.ts";
import { Supervisor } from "../supervisor/supervisor.ts";
import { ScheduleTicker } from "../runtime/schedules/ticker.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";

/**
 * True when this program is a binary built by `deno compile` rather than
 * `deno` running a script: `Deno.execPath()` is then the program itself.
 */
export function isCompiled(execPath: string = Deno.execPath()): boolean {
  return !/^deno(\.exe)?$/i.test(basename(execPath));
}

/**
 * The command line that starts one worker process. Under `deno run` a worker
 * is `Deno.execPath()` running this program's entry point (`cli/main.ts`, or
 * the package's `./cli` from JSR, as the project's lockfile names it) with the
 * command `worker`, under `config`:
 * the project's `deno.json` (`WORKER_CONFIG`, or the one found from the
 * working directory up), so the agent module resolves through the project's
 * import map and lockfile, as it does for the supervisor (unset: no
 * `--config`, and Deno looks as it did for the supervisor). In a binary built
 * by `compile` there is no `deno` to run, so the binary runs itself with the
 * argument `worker`.
 */
export function workerCommand(
  compiled: boolean = isCompiled(),
  config?: string,
): string[] {
  if (compiled) return [Deno.execPath(), "worker"];
  return [
    Deno.execPath(),
    "run",
    "-A",
    "--no-prompt",
    "--unstable-no-legacy-abort",
    ...(config === undefined ? [] : ["--config", config]),
    cliEntry(config),
    "worker",
  ];
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Validated settings of a supervisor. */
export interface SupervisorSettings {
  databaseUrl: string;
  agentModule?: string;
  workers: number;
  runsPerWorker: number;
  pollMs: number;
  /** How much of the takeable work each worker's poll takes (`TAKE_SHARE`), passed to every worker. */
  takeShare: TakeShare;
  leaseMs: number;
  heartbeatMs: number;
  name: string;
  logFormat: LogFormat;
  /** How long the agent module may take to import, here and in every worker (`AGENT_LOAD_S`). */
  agentLoadMs: number;
  /** The `deno.json` workers run under (`WORKER_CONFIG`), absolute; unset: the one found from the working directory up. */
  workerConfig?: string;
  /** The workers' retry policy, the fields set (`RETRY_HORIZON_S`, ...), passed to every worker. */
  retry: Partial<RetryPolicy>;
}

/** The supervisor's settings, as environment variable names (flags in kebab case). */
export const SUPERVISOR_SETTING_NAMES: readonly string[] = [
  "DATABASE_URL",
  "AGENT",
  "WORKERS",
  "RUNS_PER_WORKER",
  "POLL_S",
  "TAKE_SHARE",
  "LEASE_S",
  "HEARTBEAT_S",
  "SUPERVISOR",
  "LOG_FORMAT",
  "AGENT_LOAD_S",
  "WORKER_CONFIG",
  "RETRY_HORIZON_S",
  "RETRY_BACKOFF_MS",
  "RETRY_BACKOFF_MAX_S",
];

/** The usage text of `supervise`. */
export const SUPERVISE_USAGE = `agent-runtime supervise: keeps worker processes alive; each hosts many runs.

usage: deno task supervise [--flag value ...]   (every flag is also an environment variable: --poll-s is POLL_S)

  --database-url URL         PostgreSQL shared by the workers (required)
  --agent PATH               the agent module the workers host (default: the demo); PATH,PATH for several
  --workers N                worker processes (default: the number of cores)
  --runs-per-worker N        runs each worker holds at once (default 100)
  --poll-s S                 how often workers look for runs, and the supervisor for frozen workers (default 3)
  --take-share fair|all      fair: each worker's poll takes no more than its share by capacity among the live
                             workers (of every supervisor) hosting its agents; all: every free slot (default fair)
  --lease-s S, --heartbeat-s S   lease timing (default 12, 3)
  --supervisor NAME          this supervisor's name (default supervisor@host:pid)
  --log-format text|json
  --agent-load-s S           how long the agent module may take to import, here and in each worker (default 30)
  --worker-config PATH       the deno.json the workers run under, so the agent module resolves through its
                             imports and lockfile (default: the first deno.json from the working directory up)
  --retry-horizon-s S        how long a model or tool request failing as in an outage (refused connection,
                             timeout, 5xx, 429) is asked again, from its first failure (default 3600); a run
                             waits in between holding no worker slot
  --retry-backoff-ms MS, --retry-backoff-max-s S
                             the first wait between those requests, doubled each time up to the cap
                             (default 500, 60); an agent's or a tool's own retry settings win

The rest of the environment (MODEL_URL, MODEL, MODEL_API_KEY, CLOUD_URL, an agent's own
settings) passes to the workers.

It also ticks the schedules of the agents in --agent (deno task schedule): each occurrence starts one run,
however many supervisors tick.

A database that is away (at start, or later) is waited for; workers wait for it too.

exit codes: 0 stopped, 2 settings that cannot work (a malformed value, a password or role refused, a database that
does not exist), or every worker exited 2`;

/**
 * Reads and validates the supervisor's settings; throws a {@link ConfigError}
 * listing every problem. Without `DATABASE_URL` it refuses: the embedded
 * PGlite database belongs to one process, and a supervisor's workers are
 * several processes.
 */
export function loadSupervisorSettings(
  args: string[],
  env: Record<string, string | undefined>,
  defaults: { hostname: string; pid: number; cores: number } = { hostname: "localhost", pid: 0, cores: 2 },
): SupervisorSettings {
  const { values, positionals } = readRaw(args, env, SUPERVISOR_SETTING_NAMES);
  const r = new SettingsReader(values);
  if (positionals.length > 0) {
    r.problems.push(
      `Unexpected argument ${JSON.stringify(positionals[0])}: settings are flags like --poll-s 3`,
    );
  }
  const databaseUrl = r.url(
    "DATABASE_URL",
    ["postgres:", "postgresql:"],
    "postgres://user:password@host:5432/db",
  );
  if (values.DATABASE_URL === undefined) {
    r.problems.push(
      "DATABASE_URL is not set. The supervisor runs its workers as separate processes, and the embedded PGlite " +
        "database allows one process per directory, so it needs PostgreSQL: start it with 'docker compose up -d', " +
        "then set DATABASE_URL=postgresql://durable:durable@localhost:5433/durable (the tables are created at " +
        "start, in schema agent_runtime)",
    );
  }
  const settings: SupervisorSettings = {
    databaseUrl: databaseUrl ?? "",
    agentModule: r.str("AGENT"),
    workers: r.int("WORKERS", Math.max(1, defaults.cores), 1, 1_000),
    runsPerWorker: r.int("RUNS_PER_WORKER", DEFAULTS.runsPerWorker, 1, 100_000),
    pollMs: r.seconds("POLL_S", DEFAULTS.pollMs / 1000),
    takeShare: r.takeShare(),
    ...r.lease(),
    name: r.str("SUPERVISOR", `supervisor@${defaults.hostname}:${defaults.pid}`),
    logFormat: r.logFormat(),
    agentLoadMs: r.seconds("AGENT_LOAD_S", AGENT_LOAD_DEFAULT_S),
    workerConfig: r.str("WORKER_CONFIG"),
    retry: r.retry(),
  };
  if (settings.workerConfig !== undefined) {
    const given = settings.workerConfig;
    settings.workerConfig = resolve(given);
    if (!isFile(settings.workerConfig)) {
      r.problems.push(
        `WORKER_CONFIG names no file: current value is ${JSON.stringify(given)}. Give the path of your ` +
          "project's deno.json, or leave it unset to use the first deno.json from the working directory up",
      );
    }
  }
  r.done();
  return settings;
}

/** Runs the supervisor until SIGINT or SIGTERM; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(SUPERVISE_USAGE);
    return 0;
  }
  let settings: SupervisorSettings;
  let agentNames: string[];
  try {
    settings = loadSupervisorSettings(args, env, {
      hostname: hostname(),
      pid: Deno.pid,
      cores: availableParallelism(),
    });
    // Build the agents as a worker under this supervisor would, so a missing
    // setting is said once here rather than by every worker it starts.
    const { agents } = await loadAgents(settings.agentModule, { preloaded, timeoutMs: settings.agentLoadMs });
    agentNames = agents.map((a) => a.name);
    // The check's connections (an MCP server's tools are listed) are closed once it is done.
    const checked = new AbortController();
    try {
      await prepareAgents(agents, { env, dataDir: ".data", embedded: false, signal: checked.signal });
    } catch (err) {
      // A server the tools are listed from is down: its workers wait for it (worker.ts), so say so and go on.
      if (!hasCode(err, "MCP_UNREACHABLE")) throw err;
      console.error(`warning: ${err.message} (the workers will wait for it)`);
    } finally {
      checked.abort();
    }
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, "supervisor");
    throw err;
  }
  const clock = new SystemClock();
  const log = loggerFor({ ...settings, modelApiKey: env.MODEL_API_KEY }, clock);
  // SIGINT and SIGTERM stop it at any point: while it waits for its database, and once it supervises.
  const stopping = new AbortController();
  const onSignal = () =>
    stopping.abort(new AbortedError("The supervisor was asked to stop (SIGINT or SIGTERM)"));
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    // A database that is away at its start (a host booting, a failover) is waited for, as its
    // workers wait for it: exiting would leave the restart to a process manager, and exit 2
    // would say that the settings are wrong.
    const store = await openStoreLogged({ databaseUrl: settings.databaseUrl, dataDir: "" }, log, {
      waitForDatabase: { clock, signal: stopping.signal, fields: { supervisor: settings.name } },
    });
    if (typeof store === "number") {
      if (stopping.signal.aborted) log.info("stopped", { name: settings.name, note: "while waiting" });
      return store;
    }
    try {
      return await supervise(settings, { store, clock, log, stopping: stopping.signal, agents: agentNames });
    } finally {
      await store.client.close();
    }
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}

/**
 * Keeps the workers alive until `stopping` aborts (or every worker refused its settings), and ticks the
 * schedules of `agents` meanwhile (beside any other supervisor's or host's ticker); returns the exit code.
 */
async function supervise(
  settings: SupervisorSettings,
  ctx: { store: Store; clock: Clock; log: Logger; stopping: AbortSignal; agents: string[] },
): Promise<number> {
  const { store, clock, log } = ctx;
  const ticker = new ScheduleTicker({ store, clock, log, agents: ctx.agents, name: settings.name });
  const supervisor = new Supervisor({
    store,
    clock,
    log,
    name: settings.name,
    workers: settings.workers,
    leaseMs: settings.leaseMs,
    pollMs: settings.pollMs,
    heartbeatMs: settings.heartbeatMs,
    spawn: processSpawner({
      ...settings,
      agentModule: settings.agentModule === undefined ? undefined : agentSpecifier(settings.agentModule),
    }, workerCommand(isCompiled(), settings.workerConfig ?? findProjectConfig())),
  });
  const stop = () => void supervisor.stop();
  ctx.stopping.addEventListener("abort", stop, { once: true });
  try {
    // A signal that came while the store opened: no worker is started.
    if (!ctx.stopping.aborted) {
      ticker.start();
      await supervisor.run();
    }
    await ticker.stop();
    log.info("stopped", { name: settings.name });
    return supervisor.refused ? EXIT_CODES.settings : EXIT_CODES.done;
  } finally {
    ctx.stopping.removeEventListener("abort", stop);
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
