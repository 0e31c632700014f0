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

/** Options of {@linkcode serveMocks}. */
export interface ServeMocksOptions {
  /** Interface to bind; default `127.0.0.1`. */
  hostname?: string;
  /** Port of the model server; default 0 (any free port). */
  model_port?: number;
  /** Port of the cloud server; default 0 (any free port). */
  cloud_port?: number;
  /** Model to serve; opened (persisted under `state_dir` if given) when omitted. */
  model?: MockModel;
  /** Cloud to serve; opened (persisted under `state_dir` if given) when omitted. */
  cloud?: MockCloud;
  /** Directory for `model.json` and `cloud.json`; in-memory when omitted. */
  state_dir?: string;
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
  model_url: string;
  /** Base URL of the cloud, e.g. `http://127.0.0.1:9000`. */
  cloud_url: string;
  /** Ends hung requests and shuts both servers down. Safe to call twice. */
  close(): Promise<void>;
}

/** Starts the model and cloud servers. */
export async function serveMocks(opts: ServeMocksOptions = {}): Promise<RunningMocks> {
  const hostname = opts.hostname ?? "127.0.0.1";
  if (opts.state_dir !== undefined) await Deno.mkdir(opts.state_dir, { recursive: true });
  const statePath = (name: string) => opts.state_dir === undefined ? undefined : join(opts.state_dir, name);
  const model = opts.model ?? await MockModel.open({ state_path: statePath("model.json") });
  const cloud = opts.cloud ?? await MockCloud.open({ state_path: statePath("cloud.json") });

  const model_server = listen(hostname, opts.model_port ?? 0, model.handler);
  let cloud_server: Deno.HttpServer<Deno.NetAddr>;
  try {
    cloud_server = listen(hostname, opts.cloud_port ?? 0, cloud.handler);
  } catch (err) {
    await model_server.shutdown();
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
      await Promise.all([model_server.shutdown(), cloud_server.shutdown()]);
    })();
    return closing;
  };
  const on_abort = () => void close();
  opts.signal?.addEventListener("abort", on_abort, { once: true });

  return { model, cloud, model_url: `${baseUrl(model_server)}/v1`, cloud_url: baseUrl(cloud_server), close };
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
      console.error("mock: handler failed:", err);
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

function fail(message: string): never {
  console.error(`mock: invalid setting ${message}`);
  Deno.exit(2);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      hostname: { type: "string" },
      "model-port": { type: "string" },
      "cloud-port": { type: "string" },
      "state-dir": { type: "string" },
    },
  });
  // Flags win over the environment, which wins over defaults.
  const setting = (flag: string | undefined, flag_name: string, env: string) =>
    flag === undefined ? { name: env, value: Deno.env.get(env) } : { name: flag_name, value: flag };

  const hostname = setting(values.hostname, "--hostname", "MOCK_HOSTNAME").value || "127.0.0.1";
  const model_port = setting(values["model-port"], "--model-port", "MOCK_MODEL_PORT");
  const cloud_port = setting(values["cloud-port"], "--cloud-port", "MOCK_CLOUD_PORT");
  const state_dir = setting(values["state-dir"], "--state-dir", "MOCK_STATE_DIR").value || undefined;
  const delay_raw = Deno.env.get("CLOUD_DELAY_MS");
  const delay_ms = delay_raw ? Number(delay_raw) : 0;
  if (delay_raw && (!/^\d+$/.test(delay_raw.trim()))) {
    fail(`CLOUD_DELAY_MS=${JSON.stringify(delay_raw)}: expected a non-negative integer of milliseconds`);
  }

  const ports = {
    model_port: parsePort(model_port.name, model_port.value || "9100"),
    cloud_port: parsePort(cloud_port.name, cloud_port.value || "9000"),
  };
  let mocks: RunningMocks;
  try {
    mocks = await serveMocks({ hostname, ...ports, state_dir });
  } catch (err) {
    console.error(
      `mock: cannot start on ${hostname} (model port ${ports.model_port}, cloud port ${ports.cloud_port}): ${err}`,
    );
    Deno.exit(1);
  }
  if (delay_ms > 0) mocks.cloud.setFaults({ delay_ms });
  console.log(`mock-model  url=${mocks.model_url}`);
  console.log(`mock-cloud  url=${mocks.cloud_url}${state_dir ? `  state_dir=${state_dir}` : ""}`);

  const stop = async () => {
    await mocks.close();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
}

if (import.meta.main) await main();
