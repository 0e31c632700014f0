/**
 * The worker entry point: settings -> store -> remotes -> loop. With no
 * `DATABASE_URL`, `MODEL_URL` or `CLOUD_URL` it runs on the embedded default:
 * PGlite under `DATA_DIR` and in-process mocks whose state persists beside it,
 * so a crash and a restart meet the same remote, as they would with servers.
 *
 * Exit codes: 0 done, 1 failed, 2 bad settings or no database, 3 fenced
 * (another worker holds the run), 4 blocked (a flagged call needs a human),
 * 5 cancelled, 6 the supervisor went away.
 *
 * @module
 */

import { hostname } from "node:os";
import { MockCloud } from "../mock/cloud.ts";
import { demoTools } from "../mock/demo_tools.ts";
import { MockModel } from "../mock/model.ts";
import { type Clock, SystemClock } from "./clock.ts";
import { loadSettings, type Settings, urlPasswordForms } from "./config.ts";
import { DEFAULT_RETRY, type WorkerDeps } from "./context.ts";
import { CRASH_POINTS, CrashPoints } from "./crashpoints.ts";
import { ConfigError, describeError, StoreError } from "./errors.ts";
import { Logger } from "./log.ts";
import { exitCodeOf, runWorker } from "./loop.ts";
import { type FetchLike, OpenAIPlanner } from "./planner.ts";
import { openStore } from "./store/open.ts";
import type { Store } from "./store/store.ts";
import { ToolRegistry } from "./tools.ts";

const USAGE = `agent-runtime worker: drives one run to its end, surviving crashes.

usage: deno task run [--flag value ...]     (every flag is also an environment variable)

  --run-id RUN_ID            the run to work (default run1)
  --goal GOAL                the goal, when the run is created
  --database-url URL         PostgreSQL; unset: embedded PGlite under --data-dir
  --data-dir DIR             embedded database and in-process mocks' state (default .data)
  --model-url URL            OpenAI-compatible endpoint; unset: in-process mock model
  --model NAME, --model-api-key KEY
  --cloud-url URL            the demo tools' cloud; unset: in-process mock cloud
  --max-steps N              decisions before guard stops the run (default 12)
  --worker NAME              written to runs.owner (default host:pid)
  --crash-at POINT, --crash-seq N, --stall-at POINT, --stall-ms MS
                             crash points: ${CRASH_POINTS.join(", ")}
  --heartbeat-s S, --lease-s S   lease timing (default 3, 12)
  --log-format text|json

exit codes: 0 done, 1 failed, 2 bad settings or no database, 3 fenced, 4 blocked, 5 cancelled, 6 supervisor gone`;

/** The remotes a worker talks to, and how they were chosen. */
export interface Remotes {
  planner: OpenAIPlanner;
  tools: ToolRegistry;
  describe: { model: string; cloud: string };
}

/**
 * The model and cloud: the URLs in `settings`, or in-process mocks whose
 * state lives under `settings.dataDir`.
 */
export async function openRemotes(settings: Settings): Promise<Remotes> {
  let modelFetch: FetchLike | undefined;
  let modelUrl = settings.modelUrl;
  let modelDescribe = settings.modelUrl ?? "";
  if (!modelUrl) {
    await Deno.mkdir(settings.dataDir, { recursive: true });
    const model = await MockModel.open({ statePath: `${settings.dataDir}/mock-model.json` });
    modelFetch = model.handler;
    modelUrl = "http://mock-model.in-process/v1";
    modelDescribe = "in-process-mock";
  }
  let cloudFetch: FetchLike | undefined;
  let cloudUrl = settings.cloudUrl;
  let cloudDescribe = settings.cloudUrl ?? "";
  if (!cloudUrl) {
    await Deno.mkdir(settings.dataDir, { recursive: true });
    const cloud = await MockCloud.open({ statePath: `${settings.dataDir}/mock-cloud.json` });
    cloudFetch = cloud.handler;
    cloudUrl = "http://mock-cloud.in-process";
    cloudDescribe = "in-process-mock";
  }
  return {
    planner: new OpenAIPlanner({
      url: modelUrl,
      model: settings.model,
      apiKey: settings.modelApiKey,
      fetch: modelFetch,
    }),
    tools: new ToolRegistry(demoTools({ cloudUrl, fetch: cloudFetch })),
    describe: { model: modelDescribe, cloud: cloudDescribe },
  };
}

/** Builds a worker's dependencies from settings, a store and remotes. */
export function workerDeps(
  settings: Settings,
  store: Store,
  remotes: Remotes,
  log: Logger,
  clock: Clock,
): WorkerDeps {
  return {
    store,
    planner: remotes.planner,
    tools: remotes.tools,
    clock,
    log,
    crash: new CrashPoints(settings.crash, { log, clock }),
    owner: settings.worker,
    maxSteps: settings.maxSteps,
    heartbeatMs: settings.heartbeatMs,
    leaseMs: settings.leaseMs,
    retry: DEFAULT_RETRY,
    random: Math.random,
  };
}

/** A logger for `settings`, masking the database password and the model API key. */
export function loggerFor(settings: Settings, clock: Clock): Logger {
  return new Logger({
    clock,
    format: settings.logFormat,
    secrets: [...urlPasswordForms(settings.databaseUrl), settings.modelApiKey].filter((s): s is string =>
      !!s
    ),
  });
}

/** Prints a settings error the way every entry point does, and returns exit code 2. */
export function reportConfigError(err: ConfigError, program: string): number {
  console.error(`${program}: invalid settings:\n${err.problems.map((p) => `  - ${p}`).join("\n")}`);
  return 2;
}

/** Runs one worker on one run; returns the process exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(USAGE);
    return 0;
  }
  const clock = new SystemClock();
  let settings: Settings;
  try {
    settings = loadSettings(args, env, { hostname: hostname(), pid: Deno.pid });
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, "agent-runtime");
    throw err;
  }
  const log = loggerFor(settings, clock);
  if (settings.exitOnStdinEof) watchStdin(log);
  let store: Store;
  if (!settings.databaseUrl && !(await exists(`${settings.dataDir}/pglite/PG_VERSION`))) {
    // initdb inside PGlite takes a few seconds; say so instead of sitting silent.
    log.info("creating-database", {
      store: `pglite:${settings.dataDir}/pglite`,
      note: "first start, a few seconds",
    });
  }
  try {
    store = await openStore(settings);
  } catch (err) {
    if (err instanceof StoreError) {
      log.error("store-unavailable", { code: err.code, error: err.message });
      return 2;
    }
    throw err;
  }
  try {
    const remotes = await openRemotes(settings);
    log.info("backends", {
      store: store.describe,
      model: remotes.describe.model,
      cloud: remotes.describe.cloud,
    });
    log.info("registry", { tools: remotes.tools.names.join(",") });
    const outcome = await runWorker(
      workerDeps(settings, store, remotes, log, clock),
      settings.runId,
      settings.goal,
    );
    return exitCodeOf(outcome);
  } catch (err) {
    log.error("worker-error", { run: settings.runId, error: describeError(err) });
    return 1;
  } finally {
    await store.client.close().catch((e) => log.warn("store-close-failed", { error: describeError(e) }));
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/**
 * Exits when stdin reaches EOF: a worker started by a supervisor stops when
 * the supervisor dies, instead of running on as an orphan nobody watches.
 */
function watchStdin(log: Logger): void {
  (async () => {
    const buf = new Uint8Array(256);
    // Bounded by the process: each read either returns bytes or ends the loop.
    for (;;) {
      const n = await Deno.stdin.read(buf).catch(() => null);
      if (n === null) break;
    }
    log.warn("supervisor-gone", { reason: "stdin closed" });
    Deno.exit(6);
  })();
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
