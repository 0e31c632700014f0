/**
 * What every process started from the command line shares: the logger with
 * secrets masked, the settings error report, the store with its start-up
 * message, and the stdin watch that ends an orphaned worker.
 *
 * @module
 */

import { type Clock, SystemClock } from "../runtime/base/clock.ts";
import { hostname } from "node:os";
import { FlagError, loadSettings, type Settings } from "../runtime/settings/config.ts";
import { urlPasswordForms } from "../runtime/base/urls.ts";
import { ConfigError, isDatabaseAway, StoreError } from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { Logger, StdoutLines } from "../runtime/base/log.ts";
import { openStore } from "../runtime/store/open.ts";
import { AgentModuleError } from "./agents.ts";
import type { Store } from "../runtime/store/store.ts";
import { DATABASE_BACKOFF, waitAtStart } from "./start_wait.ts";

/**
 * The start of every agent process (`run`, `worker`): `--help`, the settings
 * (a settings error printed and returned as exit code 2), the logger, and
 * the stdin watch. Returns the exit code when the process should end here.
 */
export function startProcess(
  args: string[],
  env: Record<string, string | undefined>,
  program: string,
  usage: string,
  opts: { gatherLines?: boolean } = {},
): { settings: Settings; log: Logger; clock: Clock } | number {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(usage);
    return 0;
  }
  const clock = new SystemClock();
  let settings: Settings;
  try {
    settings = loadSettings(args, env, { hostname: hostname(), pid: Deno.pid });
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, program);
    throw err;
  }
  const log = loggerFor(settings, clock, opts);
  if (settings.exitOnStdinEof) watchStdin(log);
  return { settings, log, clock };
}

/**
 * A logger for `settings`, masking the database password and the model API
 * key. With `gatherLines` (a worker, whose runs log some five lines a step
 * each) the lines of one stretch of JavaScript go to stdout in one write
 * ({@link StdoutLines}); WARN and ERROR lines, an exit and an uncaught error
 * write out what is held at once.
 */
export function loggerFor(
  settings: Pick<Settings, "databaseUrl" | "modelApiKey" | "logFormat">,
  clock: Clock = new SystemClock(),
  opts: { gatherLines?: boolean } = {},
): Logger {
  const lines = opts.gatherLines ? new StdoutLines().listen() : undefined;
  return new Logger({
    clock,
    sink: lines?.sink,
    flush: lines?.flush,
    format: settings.logFormat,
    secrets: [...urlPasswordForms(settings.databaseUrl), settings.modelApiKey].filter((s): s is string =>
      !!s
    ),
  });
}

/**
 * Prints a settings error the way every entry point does, and returns exit
 * code 2. A command line that does not parse is one line naming the flag,
 * and an agent module that cannot be used one line naming the module.
 */
export function reportConfigError(err: ConfigError, program: string): number {
  if (err instanceof FlagError || err instanceof AgentModuleError) {
    console.error(`${program}: ${err.problems[0]}`);
    return EXIT_CODES.settings;
  }
  console.error(`${program}: invalid settings:\n${err.problems.map((p) => `  - ${p}`).join("\n")}`);
  return EXIT_CODES.settings;
}

/** How {@link openStoreLogged} waits for a PostgreSQL that is away. */
export interface DatabaseWait {
  clock: Clock;
  /** Ends the wait (SIGINT, SIGTERM): {@link openStoreLogged} then returns exit code 0. */
  signal: AbortSignal;
  /** Who waits, on each line (`worker=...`): a supervisor's output holds every worker's. */
  fields?: Record<string, string>;
}

/**
 * Opens the store for `settings`, saying so first when the embedded database
 * is about to be created (initdb takes seconds). While another process holds
 * the embedded database it waits up to `dataDirWaitMs`, logging
 * `waiting-for-data-dir` once with the holder's pid (and `data-dir-free` when
 * the wait ends).
 *
 * A PostgreSQL that is away (`isDatabaseAway`: unreachable, or refusing
 * writes) is waited for when `waitForDatabase` is given, for as long as it
 * takes or until its signal, each try logged as `database-unavailable` with
 * the wait before the next ({@link DATABASE_BACKOFF}), and
 * `database-available` once it answers (an embedded database is never away,
 * but the signal ends its wait for the directory too). Without it, a
 * database away is logged as `store-unavailable` and returned as exit code 7.
 * Any other {@link StoreError} is a setting to fix: logged as
 * `store-unavailable` and returned as exit code 2.
 */
export async function openStoreLogged(
  settings: Pick<Settings, "databaseUrl" | "dataDir"> & { dataDirWaitMs?: number },
  log: Logger,
  opts: { max?: number; waitForDatabase?: DatabaseWait } = {},
): Promise<Store | number> {
  if (!settings.databaseUrl && !(await exists(`${settings.dataDir}/pglite/PG_VERSION`))) {
    log.info("creating-database", {
      store: `pglite:${settings.dataDir}/pglite`,
      note: "first start, a few seconds",
    });
  }
  let waited = false;
  const open = () =>
    openStore(settings, {
      max: opts.max,
      lockWait: {
        waitMs: settings.dataDirWaitMs ?? 0,
        onWait: ({ holder, waitMs }) => {
          waited = true;
          log.warn("waiting-for-data-dir", {
            store: `pglite:${settings.dataDir}/pglite`,
            holder_pid: holder,
            wait_s: waitMs / 1000,
            note: "another process (the page, or a worker) has the embedded database open; " +
              "this one goes on as soon as it exits (DATA_DIR_WAIT_S bounds the wait)",
          });
        },
      },
    });
  const wait = opts.waitForDatabase;
  try {
    let store: Store;
    if (wait) {
      const opened = await waitAtStart({
        attempt: open,
        isAway: (err) => !!settings.databaseUrl && isDatabaseAway(err),
        onAway: ({ error, attempt, retryMs }) =>
          log.warn("database-unavailable", {
            ...wait.fields,
            code: (error as StoreError).code,
            attempt,
            retry_ms: retryMs,
            error: (error as StoreError).message,
          }),
        clock: wait.clock,
        backoff: DATABASE_BACKOFF,
        signal: wait.signal,
        discard: (late) => late.client.close(),
      });
      store = opened.value;
      if (opened.attempts > 1) {
        log.info("database-available", {
          ...wait.fields,
          store: store.describe,
          attempts: opened.attempts,
          waited_ms: opened.waitedMs,
        });
      }
    } else {
      store = await open();
    }
    if (waited) log.info("data-dir-free", { store: `pglite:${settings.dataDir}/pglite` });
    return store;
  } catch (err) {
    if (wait?.signal.aborted) return EXIT_CODES.done;
    if (isDatabaseAway(err)) {
      log.error("store-unavailable", {
        code: err.code,
        error: err.message,
        note: "the database is away: nothing was started; run the same command again once it is back",
      });
      return EXIT_CODES.databaseAway;
    }
    if (err instanceof StoreError) {
      log.error("store-unavailable", { code: err.code, error: err.message });
      return EXIT_CODES.settings;
    }
    throw err;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false; // missing, or not reachable: opening the store says which
  }
}

/**
 * Exits when stdin reaches EOF: a worker started by a supervisor stops when
 * the supervisor dies, instead of running on as an orphan nobody watches.
 */
export function watchStdin(log: Logger): void {
  (async () => {
    const buf = new Uint8Array(256);
    // Bounded by the process: each read either returns bytes or ends the loop.
    for (;;) {
      const n = await Deno.stdin.read(buf).catch(() => null);
      if (n === null) break;
    }
    log.warn("supervisor-gone", { reason: "stdin closed" });
    Deno.exit(EXIT_CODES.supervisorGone);
  })();
}
