/**
 * `deno task dev`: the page and a worker host in one process on the embedded
 * database, so a person starts a conversation and chats from the browser with
 * no PostgreSQL. The embedded database admits one process at a time: `ui` and
 * `worker` cannot share it, this command is both. With no `MODEL_URL` the
 * agents answer with the mock model, in this process (served on a loopback
 * port of its own), its counters kept under the data directory as `deno task
 * run` keeps them.
 *
 * ```sh
 * deno task dev [--agent PATH] [--port N] [--data-dir DIR] [--host H] [--token TOKEN]
 * ```
 *
 * Exit codes: 0 stopped by a signal, 2 bad settings or the database held by another process.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { Logger } from "../runtime/base/log.ts";
import { DATA_DIR_WAIT_DEFAULT_S, integerIn, SettingsReader } from "../runtime/settings/config.ts";
import { ConfigError, RuntimeError, StoreError } from "../runtime/base/errors.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import type { WorkerHost } from "../runtime/host/host.ts";
import { mcpHandler } from "../runtime/mcp_server/mcp_server.ts";
import { MockModel } from "../mock/model.ts";
import { loadAgents } from "../cli/agents.ts";
import { serveUi, UiError } from "./server.ts";

/** The agent module `dev` chats with when given no `--agent`: a conversation agent. */
export const DEV_AGENT_DEFAULT: string = new URL("../examples/chat/agent.ts", import.meta.url).href;

/** The usage text of `dev`. */
export const DEV_USAGE =
  `usage: deno task dev [--agent PATH] [--port N] [--data-dir DIR] [--host H] [--token TOKEN]
  The page and a worker in one process on the embedded database (no PostgreSQL): start a chat with the
  module's conversing agent from the page ("New chat"), watch its runs, answer its approvals. The agents are
  also served over A2A at /a2a/<name> and as MCP tools at /mcp.
  --agent PATH        the agent module (default: examples/chat/agent.ts, a conversation agent); a new chat
                      starts a run of its first agent with 'conversation'
  --port N            port (env UI_PORT; default 8787; 0 picks a free one)
  --data-dir DIR      the embedded database and the mock model's state (env DATA_DIR; default .data)
  --host H            interface to bind (env UI_HOST; default 127.0.0.1); beyond loopback a token is required
  --token TOKEN       required on every request (env UI_TOKEN); open the page with ?token=TOKEN
model: MODEL_URL and MODEL (and the other MODEL_* settings) as for 'run'; unset, the in-process mock model.
The embedded database admits one process: while another has it open this waits for it up to DATA_DIR_WAIT_S
(default 60 s). For PostgreSQL run 'deno task worker' and 'deno task ui' instead.`;

/** The settings `dev` was started with. */
interface DevSettings {
  agent: string;
  port: number;
  host: string;
  token?: string;
  dataDir: string;
  waitMs: number;
}

/** The settings from the flags and the environment, or the exit code after saying what is wrong. */
function devSettings(args: string[], env: Record<string, string | undefined>): DevSettings | number {
  let v;
  try {
    v = parseArgs({
      args,
      strict: true,
      options: {
        agent: { type: "string" },
        port: { type: "string" },
        host: { type: "string" },
        token: { type: "string" },
        "data-dir": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    console.error(`dev: ${(err as Error).message.split("\n")[0]}. 'deno task dev --help' lists the flags`);
    return 2;
  }
  if (v.help) {
    console.log(DEV_USAGE);
    return 0;
  }
  const port = integerIn("--port", v.port ?? (env.UI_PORT || "8787"), 0, 65535);
  const wait = new SettingsReader({ DATA_DIR_WAIT_S: env.DATA_DIR_WAIT_S || undefined });
  const waitMs = wait.seconds("DATA_DIR_WAIT_S", DATA_DIR_WAIT_DEFAULT_S, 0);
  const problem = typeof port === "string" ? port : wait.problems[0];
  if (problem !== undefined) {
    console.error(`dev: ${problem}`);
    return 2;
  }
  return {
    agent: v.agent ?? DEV_AGENT_DEFAULT,
    port: port as number,
    host: v.host ?? (env.UI_HOST || "127.0.0.1"),
    token: v.token ?? (env.UI_TOKEN || undefined),
    dataDir: v["data-dir"] ?? (env.DATA_DIR || ".data"),
    waitMs,
  };
}

/** The mock model on a loopback port of its own, when no `MODEL_URL` is set; its state under `dataDir`. */
async function mockModel(dataDir: string): Promise<{ url: string; close(): Promise<void> }> {
  await Deno.mkdir(dataDir, { recursive: true });
  const model = await MockModel.open({ statePath: `${dataDir}/mock-model.json`, stream: { chunkMs: 15 } });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, model.handler);
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, close: () => server.shutdown() };
}

/** Runs the page and a worker until SIGINT or SIGTERM (or `signal`); returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  signal?: AbortSignal,
): Promise<number> {
  const s = devSettings(args, env);
  if (typeof s === "number") return s;
  let agents: Agent[];
  try {
    agents = (await loadAgents(s.agent)).agents;
  } catch (err) {
    console.error(`dev: ${(err as Error).message}`);
    return 2;
  }
  const chatAgent = agents.find((a) => a.conversation !== undefined);
  const clock = new SystemClock();
  let client: Client;
  try {
    client = new Client(
      await openStore({ dataDir: s.dataDir }, {
        lockWait: {
          waitMs: s.waitMs,
          onWait: ({ holder }) =>
            console.log(
              `dev  waiting for the embedded database ${s.dataDir}: pid ${holder} has it open; this starts as ` +
                `soon as it exits, or gives up after ${s.waitMs / 1000} s (DATA_DIR_WAIT_S)`,
            ),
        },
      }),
      clock,
    );
  } catch (err) {
    if (err instanceof StoreError) {
      console.error(`${err.code}: ${err.message}`);
      return 2;
    }
    throw err;
  }
  const stop = new AbortController();
  signal?.addEventListener("abort", () => stop.abort(), { once: true });
  const onSignal = () => stop.abort();
  if (!signal) {
    Deno.addSignalListener("SIGINT", onSignal);
    Deno.addSignalListener("SIGTERM", onSignal);
  }
  const mock = env.MODEL_URL ? undefined : await mockModel(s.dataDir);
  let worker: WorkerHost | undefined;
  try {
    const log = new Logger({ clock, level: "INFO" });
    worker = await client.startWorker(agents, {
      owner: `dev:${Deno.pid}`,
      log,
      streamDeltas: true,
      context: {
        env: mock ? { ...env, MODEL_URL: mock.url, MODEL: "mock-planner" } : env,
        dataDir: s.dataDir,
        embedded: true,
        log,
        signal: stop.signal,
      },
    });
    const ui = await serveUi({
      client,
      host: s.host,
      port: s.port,
      token: s.token,
      actor: "dev",
      a2a: agents,
      mcp: mcpHandler({
        client,
        agents,
        allowedHosts: [s.host.replace(/^\[|\]$/g, ""), "127.0.0.1", "localhost"],
      }),
      chatAgent,
      signal: stop.signal,
    });
    console.log(
      `dev  url=${ui.url}/${s.token ? "?token=..." : ""}  store=${client.store.client.describe}  agents=${
        agents.map((a) => a.name).join(",")
      }  chat=${chatAgent?.name ?? "none (no agent with conversation)"}  model=${
        mock ? "in-process-mock" : env.MODEL_URL
      }  a2a=/a2a/<name>  mcp=/mcp`,
    );
    await new Promise<void>((resolve) =>
      stop.signal.aborted ? resolve() : stop.signal.addEventListener("abort", () => resolve(), { once: true })
    );
    await ui.close().catch(() => {}); // the signal has shut it down already
    return 0;
  } catch (err) {
    if (err instanceof UiError || err instanceof Deno.errors.AddrInUse || err instanceof ConfigError) {
      console.error(`dev: ${err instanceof RuntimeError ? `${err.code}: ` : ""}${(err as Error).message}`);
      return 2;
    }
    if (err instanceof RuntimeError) {
      // An agent that cannot be built here (no model for it, a bad setting): say so, as the commands do.
      console.error(`dev: ${err.code}: ${err.message}`);
      return 2;
    }
    throw err;
  } finally {
    if (!signal) {
      Deno.removeSignalListener("SIGINT", onSignal);
      Deno.removeSignalListener("SIGTERM", onSignal);
    }
    await worker?.stop();
    await mock?.close();
    await client.close();
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
