/**
 * Serves {@linkcode MockModel} and {@linkcode MockCloud} over HTTP, as a
 * library function for tests and as a command (`deno task mock`).
 *
 * @module
 */

import { join } from "node:path";
import { parseArgs } from "node:util";
import { MockCloud } from "./cloud.ts";
import { ConnectionDroppedError } from "./http_response.ts";
import { MockModel } from "./model.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { describeError } from "../runtime/base/errors.ts";
import { Logger } from "../runtime/base/log.ts";

// The runtime's logger (logfmt on stdout, one line per event): the mocks'
// lines parse like every other program's. Immutable, so shared safely.
const log = new Logger({ clock: new SystemClock() });

/** Options of {@linkcode serveMocks}. */
export interface ServeMocksOptions {
  /** Interface to bind; default `127.0.0.1`. */
  hostname?: string;
  /** Port of the model server; default 0 (any free port). */
  modelPort?: number;
  /** Port of the cloud server; default 0 (any free port). */
  cloudPort?: number;
  /** Model to serve; opened (persisted under `stateDir` if given) when omitted. */
  model?: MockModel;
  /** Cloud to serve; opened (persisted under `stateDir` if given) when omitted. */
  cloud?: MockCloud;
  /** Directory for `model.json` and `cloud.json`; in-memory when omitted. */
  stateDir?: string;
  /** `parallel` of the model opened when `model` is omitted (see `MockModelOptions.parallel`); default 1. */
  modelParallel?: number;
  /** Closes both servers when aborted. */
  signal?: AbortSignal;
}

/** The running mock servers returned by {@linkcode serveMocks}. */
export interface RunningMocks {
  /** The served model. */
  model: MockModel;
  /** The served cloud. */
  cloud: MockCloud;
  /** Base URL of the OpenAI-compatible API, e.g. `http://127.0.0.1:9100/v1`. */
  modelUrl: string;
  /** Base URL of the cloud, e.g. `http://127.0.0.1:9000`. */
  cloudUrl: string;
  /** Ends hung requests and shuts both servers down. Safe to call twice. */
  close(): Promise<void>;
}

/** Starts the model and cloud servers. */
export async function serveMocks(opts: ServeMocksOptions = {}): Promise<RunningMocks> {
  const hostname = opts.hostname ?? "127.0.0.1";
  if (opts.stateDir !== undefined) await Deno.mkdir(opts.stateDir, { recursive: true });
  const statePath = (name: string) => opts.stateDir === undefined ? undefined : join(opts.stateDir, name);
  const model = opts.model ??
    await MockModel.open({ statePath: statePath("model.json"), parallel: opts.modelParallel });
  const cloud = opts.cloud ?? await MockCloud.open({ statePath: statePath("cloud.json") });

  const modelServer = listen(hostname, opts.modelPort ?? 0, model.handler);
  let cloudServer: Deno.HttpServer<Deno.NetAddr>;
  try {
    cloudServer = listen(hostname, opts.cloudPort ?? 0, cloud.handler);
  } catch (err) {
    await modelServer.shutdown();
    throw err;
  }
  // A wildcard bind is reachable through loopback; print an address clients can use.
  const url_host = hostname === "0.0.0.0" || hostname === "::" ? "127.0.0.1" : hostname;
  const baseUrl = (server: Deno.HttpServer<Deno.NetAddr>) => `http://${url_host}:${server.addr.port}`;

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= (async () => {
      opts.signal?.removeEventListener("abort", on_abort);
      // Shutdown waits for in-flight requests, so first end the ones held on purpose.
      model.releaseHung();
      cloud.releaseHung();
      await Promise.all([modelServer.shutdown(), cloudServer.shutdown()]);
    })();
    return closing;
  };
  const on_abort = () => void close();
  opts.signal?.addEventListener("abort", on_abort, { once: true });

  return { model, cloud, modelUrl: `${baseUrl(modelServer)}/v1`, cloudUrl: baseUrl(cloudServer), close };
}

function listen(
  hostname: string,
  port: number,
  handler: (req: Request) => Promise<Response>,
): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({
    hostname,
    port,
    onListen() {},
    // Handlers reject when a delayed or hung request is aborted, and dropped
    // answers error their body on purpose; nobody is left to answer either way,
    // so stay quiet. Anything else is a bug worth a log line.
    onError(err) {
      const expected = err instanceof ConnectionDroppedError ||
        (err instanceof DOMException && (err.name === "AbortError" || err.name === "TimeoutError"));
      if (expected) return new Response(null, { status: 499 }); // nginx's "client closed request"
      log.error("mock-handler-failed", { error: describeError(err) });
      return new Response(null, { status: 500 });
    },
  }, handler);
}

/** Parses a port setting, or exits 2 with a one-line error naming it. */
function parsePort(setting: string, raw: string): number {
  const port = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || port > 65535) {
    fail(`${setting}=${JSON.stringify(raw)}: expected an integer 0-65535`);
  }
  return port;
}

/** The usage text of `deno task mock`. */
export const MOCK_USAGE = `mock: serves the mock model and the mock cloud over HTTP.

usage: deno task mock [--flag value ...]

  --hostname HOST        interface to bind (env MOCK_HOSTNAME, default 127.0.0.1)
  --model-port PORT      model port, 0 = any free port (env MOCK_MODEL_PORT, default 9100)
  --cloud-port PORT      cloud port, 0 = any free port (env MOCK_CLOUD_PORT, default 9000)
  --state-dir DIR        keep state in DIR/model.json and DIR/cloud.json (env MOCK_STATE_DIR, default in memory)
  --model-parallel N     the model answers up to N calls of the demo's or the generic plan at once
                         (env MOCK_MODEL_PARALLEL, default 1)
  -h, --help             print this and exit
  env CLOUD_DELAY_MS     initial delay_ms fault on every cloud endpoint (default 0)

Flags win over the environment. Stop with Ctrl-C (exit 0).`;

function fail(message: string): never {
  console.error(`mock: invalid setting ${message}`);
  Deno.exit(2);
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        hostname: { type: "string" },
        "model-port": { type: "string" },
        "cloud-port": { type: "string" },
        "state-dir": { type: "string" },
        "model-parallel": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    // One line naming the flag, never a stack trace.
    console.error(
      `mock: ${(err as Error).message}. Known flags: --hostname, --model-port, --cloud-port, ` +
        "--state-dir, --model-parallel, --help",
    );
    Deno.exit(2);
  }
  if (values.help) {
    console.log(MOCK_USAGE);
    Deno.exit(0);
  }
  // Flags win over the environment, which wins over defaults.
  const setting = (flag: string | undefined, flag_name: string, env: string) =>
    flag === undefined ? { name: env, value: Deno.env.get(env) } : { name: flag_name, value: flag };

  const hostname = setting(values.hostname, "--hostname", "MOCK_HOSTNAME").value || "127.0.0.1";
  const modelPort = setting(values["model-port"], "--model-port", "MOCK_MODEL_PORT");
  const cloudPort = setting(values["cloud-port"], "--cloud-port", "MOCK_CLOUD_PORT");
  const stateDir = setting(values["state-dir"], "--state-dir", "MOCK_STATE_DIR").value || undefined;
  const parallel = setting(values["model-parallel"], "--model-parallel", "MOCK_MODEL_PARALLEL");
  const modelParallel = Number(parallel.value || "1");
  if (!/^\d+$/.test((parallel.value || "1").trim()) || modelParallel < 1) {
    fail(
      `${parallel.name}=${JSON.stringify(parallel.value)}: expected a positive integer of calls per answer`,
    );
  }
  const delay_raw = Deno.env.get("CLOUD_DELAY_MS");
  const delay_ms = delay_raw ? Number(delay_raw) : 0;
  if (delay_raw && (!/^\d+$/.test(delay_raw.trim()))) {
    fail(`CLOUD_DELAY_MS=${JSON.stringify(delay_raw)}: expected a non-negative integer of milliseconds`);
  }

  const ports = {
    modelPort: parsePort(modelPort.name, modelPort.value || "9100"),
    cloudPort: parsePort(cloudPort.name, cloudPort.value || "9000"),
  };
  let mocks: RunningMocks;
  try {
    mocks = await serveMocks({ hostname, ...ports, stateDir, modelParallel });
  } catch (err) {
    log.error("mock-start-failed", {
      hostname,
      model_port: ports.modelPort,
      cloud_port: ports.cloudPort,
      error: describeError(err),
    });
    Deno.exit(1);
  }
  if (delay_ms > 0) mocks.cloud.setFaults({ delay_ms });
  log.info("mock-model", { url: mocks.modelUrl, parallel: modelParallel > 1 ? modelParallel : undefined });
  log.info("mock-cloud", { url: mocks.cloudUrl, state_dir: stateDir });

  const stop = async () => {
    await mocks.close();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}

if (import.meta.main) await main();
