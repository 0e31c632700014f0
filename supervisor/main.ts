/**
 * `deno task supervise`: the supervisor's entry point.
 *
 * | env | flag | default |
 * | --- | --- | --- |
 * | `DATABASE_URL` | `--database-url` | required: workers in several processes share one PostgreSQL |
 * | `MODEL_URL`, `CLOUD_URL` | `--model-url`, `--cloud-url` | required (`deno task mock` serves both) |
 * | `POLL_S` | `--poll-s` | 3 |
 * | `LEASE_S`, `HEARTBEAT_S` | `--lease-s`, `--heartbeat-s` | 12, 3 |
 * | `MAX_WORKERS` | `--max-workers` | 8 |
 * | `SUPERVISOR` | `--supervisor` | `supervisor@<hostname>:<pid>` |
 * | `LOG_FORMAT` | `--log-format` | `text` |
 *
 * On SIGINT or SIGTERM it stops taking runs, sends SIGTERM to its workers,
 * waits for them and exits 0. It does not restart itself; run it under a
 * process manager (the README shows a systemd unit).
 *
 * A binary built with `deno compile -A -o agent-supervisor supervisor/main.ts`
 * starts its workers as `agent-supervisor worker`: that first argument makes
 * this entry point run the worker (`runtime/main.ts`) instead.
 *
 * Exit codes: 0 stopped cleanly, 2 bad settings or no database.
 *
 * @module
 */

import { hostname } from "node:os";
import { SystemClock } from "../runtime/clock.ts";
import { readRaw, SettingsReader, urlPassword } from "../runtime/config.ts";
import { ConfigError, StoreError } from "../runtime/errors.ts";
import { type LogFormat, Logger } from "../runtime/log.ts";
import { main as workerMain, reportConfigError } from "../runtime/main.ts";
import { openStore } from "../runtime/store/open.ts";
import { processSpawner } from "./spawn.ts";
import { Supervisor } from "./supervisor.ts";

/** Validated settings of a supervisor. */
export interface SupervisorSettings {
  databaseUrl: string;
  modelUrl: string;
  cloudUrl: string;
  pollMs: number;
  leaseMs: number;
  heartbeatMs: number;
  maxWorkers: number;
  name: string;
  logFormat: LogFormat;
}

const NAMES = [
  "DATABASE_URL",
  "MODEL_URL",
  "CLOUD_URL",
  "POLL_S",
  "LEASE_S",
  "HEARTBEAT_S",
  "MAX_WORKERS",
  "SUPERVISOR",
  "LOG_FORMAT",
] as const;

/**
 * Reads and validates the supervisor's settings; throws a {@link ConfigError}
 * listing every problem. Without `DATABASE_URL` it refuses: the embedded
 * PGlite database belongs to one process, and a supervisor's workers are
 * several processes.
 */
export function loadSupervisorSettings(
  args: string[],
  env: Record<string, string | undefined>,
  defaults: { hostname: string; pid: number } = { hostname: "localhost", pid: 0 },
): SupervisorSettings {
  const { values, positionals } = readRaw(args, env, NAMES);
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
      "DATABASE_URL is not set. The supervisor runs each worker as its own process, and the embedded PGlite " +
        "database allows one process per directory, so it needs PostgreSQL: start it with 'docker compose up -d', " +
        "load the tables with 'psql postgresql://durable:durable@localhost:5433/durable -f schema.sql', then set " +
        "DATABASE_URL=postgresql://durable:durable@localhost:5433/durable",
    );
  }
  const modelUrl = r.url("MODEL_URL", ["http:", "https:"], "http://127.0.0.1:9100/v1");
  const cloudUrl = r.url("CLOUD_URL", ["http:", "https:"], "http://127.0.0.1:9000");
  for (
    const [name, example] of [["MODEL_URL", "http://127.0.0.1:9100/v1"], [
      "CLOUD_URL",
      "http://127.0.0.1:9000",
    ]]
  ) {
    if (values[name] === undefined) {
      r.problems.push(
        `${name} is not set. Workers of one supervisor must share one model and one cloud (in-process mocks ` +
          `would each keep their own state): start the mocks with 'deno task mock' and set ${name}=${example}`,
      );
    }
  }
  const settings: SupervisorSettings = {
    databaseUrl: databaseUrl ?? "",
    modelUrl: modelUrl ?? "",
    cloudUrl: cloudUrl ?? "",
    pollMs: r.seconds("POLL_S", 3),
    ...r.lease(),
    maxWorkers: r.int("MAX_WORKERS", 8, 1, 10_000),
    name: r.str("SUPERVISOR", `supervisor@${defaults.hostname}:${defaults.pid}`),
    logFormat: r.logFormat(),
  };
  r.done();
  return settings;
}

/** Runs the supervisor until SIGINT or SIGTERM; returns the exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  if (args[0] === "worker") return await workerMain(args.slice(1), env);
  let settings: SupervisorSettings;
  try {
    settings = loadSupervisorSettings(args, env, { hostname: hostname(), pid: Deno.pid });
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, "supervisor");
    throw err;
  }
  const clock = new SystemClock();
  const log = new Logger({
    clock,
    format: settings.logFormat,
    secrets: [urlPassword(settings.databaseUrl)].filter((s): s is string => !!s),
  });
  let store;
  try {
    store = await openStore({ databaseUrl: settings.databaseUrl, dataDir: "" });
  } catch (err) {
    if (err instanceof StoreError) {
      log.error("store-unavailable", { code: err.code, error: err.message });
      return 2;
    }
    throw err;
  }
  const supervisor = new Supervisor({
    store,
    clock,
    log,
    name: settings.name,
    leaseMs: settings.leaseMs,
    pollMs: settings.pollMs,
    heartbeatMs: settings.heartbeatMs,
    maxWorkers: settings.maxWorkers,
    spawn: processSpawner(settings),
  });
  const onSignal = () => void supervisor.stop();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    await supervisor.run();
    log.info("stopped", { name: settings.name });
    return 0;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await store.client.close();
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
