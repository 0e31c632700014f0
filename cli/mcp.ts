/**
 * `deno task mcp`: the agents of `--agent` as an MCP server, over stdio (the
 * way Claude Desktop and IDEs start a server) or, with `--http`, over
 * streamable HTTP at `/mcp` on loopback. Every tool call goes through the
 * client to the runs' database; the runs are driven by the workers that host
 * the agents, or, with `--with-worker` (always on the embedded database, which
 * admits no other process), by a worker in this process.
 *
 * Over stdio, stdout carries the protocol alone: every log line goes to
 * stderr. The server exits 0 when its stdin ends (the client quit) or on
 * SIGINT/SIGTERM.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { Client } from "../runtime/client/client.ts";
import { CrashPoints } from "../runtime/base/crashpoints.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { ConfigError } from "../runtime/base/errors.ts";
import { Logger } from "../runtime/base/log.ts";
import { urlPasswordForms } from "../runtime/base/urls.ts";
import { integerIn } from "../runtime/settings/config.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import { LOOPBACK_HOSTS, mcpHandler, serveMcpStdio } from "../runtime/mcp_server/mcp_server.ts";
import type { Store } from "../runtime/store/store.ts";
import { loadAgents, type LoadedAgents, prepareAgents } from "./agents.ts";
import { openStoreLogged, reportConfigError, startProcess } from "./process.ts";
import { processEnv, RUN_USAGE } from "./run.ts";

/** The usage text of `mcp`. */
export const MCP_USAGE = `agent-runtime mcp: the agents of --agent as an MCP server (stdio, or --http).

usage: deno task mcp [--agent PATH] [--database-url URL | --data-dir DIR] [--http [--host H] [--port N]] ...

  each agent is a tool: a call starts a run and answers with its final answer when it finishes within
  --answer-wait-s, else with the run's id and status; get_run, send_message, cancel_run, approve_call and
  deny_call steer it. _meta["agent-runtime/idempotency-key"] (or idempotencyKey) makes a retried call one run.

  --http                serve streamable HTTP at http://HOST:PORT/mcp instead of stdio
  --host H              interface to bind with --http (default 127.0.0.1)
  --port N              port with --http (default 8790; 0 picks a free one)
  --allowed-hosts LIST  host names a request's Host and Origin may name (default 127.0.0.1,localhost,[::1])
  --answer-wait-s S     how long an agent's tool call waits for the answer (default 5)
  --with-worker         also drive the agents' runs in this process (always, on the embedded database)
  and the settings of 'worker' (--agent, --database-url, --data-dir, the model's, the log format):
${RUN_USAGE.split("\n\nexit codes:")[0].split("\n").slice(4).join("\n")}

Over stdio every log line goes to stderr. exit codes: 0 stopped (stdin closed, SIGINT, SIGTERM), 2 settings`;

const OWN_FLAGS = {
  http: { type: "boolean" },
  host: { type: "string" },
  port: { type: "string" },
  "allowed-hosts": { type: "string" },
  "answer-wait-s": { type: "string" },
  "with-worker": { type: "boolean" },
} as const;

/** This command's own flags, and the rest for the worker's settings. */
function splitArgs(args: string[]): { own: string[]; rest: string[] } {
  const own: string[] = [];
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = args[i].replace(/^--/, "").split("=")[0];
    const spec = (OWN_FLAGS as Record<string, { type: string }>)[name];
    if (!args[i].startsWith("--") || !spec) rest.push(args[i]);
    else if (spec.type === "boolean" || args[i].includes("=")) own.push(args[i]);
    else own.push(args[i], args[++i] ?? "");
  }
  return { own, rest };
}

/** Parsed own flags, or the problem. */
function ownSettings(own: string[]): {
  http: boolean;
  host: string;
  port: number;
  hosts: string[];
  answerWaitMs?: number;
  withWorker: boolean;
} | string {
  let v;
  try {
    v = parseArgs({ args: own, strict: true, options: OWN_FLAGS }).values;
  } catch (err) {
    return (err as Error).message.split("\n")[0];
  }
  const port = integerIn("--port", v.port ?? "8790", 0, 65535);
  if (typeof port === "string") return port;
  const wait = v["answer-wait-s"] === undefined
    ? undefined
    : integerIn("--answer-wait-s", v["answer-wait-s"], 0, 50);
  if (typeof wait === "string") return wait;
  const hosts = v["allowed-hosts"]?.split(",").map((h) => h.trim()).filter(Boolean) ?? [...LOOPBACK_HOSTS];
  return {
    http: v.http === true,
    host: v.host ?? "127.0.0.1",
    port,
    hosts,
    answerWaitMs: wait === undefined ? undefined : wait * 1000,
    withWorker: v["with-worker"] === true,
  };
}

/** Serves MCP until stdin ends or a signal; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  const { own, rest } = splitArgs(args);
  const mine = ownSettings(own);
  if (typeof mine === "string") {
    console.error(`mcp: ${mine}. 'deno task mcp --help' lists the flags`);
    return EXIT_CODES.settings;
  }
  // Over stdio the protocol owns stdout: the settings are read, then every line is logged to stderr.
  const started = startProcess(rest, { ...env, EXIT_ON_STDIN_EOF: "0" }, "mcp", MCP_USAGE);
  if (typeof started === "number") return started;
  const { settings, clock } = started;
  const log = new Logger({
    clock,
    format: settings.logFormat,
    secrets: [...urlPasswordForms(settings.databaseUrl), settings.modelApiKey].filter((s): s is string =>
      !!s
    ),
    sink: (line) => void Deno.stderr.writeSync(new TextEncoder().encode(line + "\n")),
  });
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  let store: Store | undefined;
  let host: WorkerHost | undefined;
  try {
    const { agents } = await loadAgents(settings.agentModule, { preloaded, timeoutMs: settings.agentLoadMs });
    const opened = await openStoreLogged(settings, log, { max: 4 });
    if (typeof opened === "number") return opened;
    store = opened;
    const client = new Client(store, clock);
    if (mine.withWorker || !settings.databaseUrl) {
      const { prepared } = await prepareAgents(agents, {
        env: processEnv(env, settings),
        dataDir: settings.dataDir,
        embedded: !settings.databaseUrl,
        log,
      });
      host = new WorkerHost({
        store,
        agents: prepared,
        clock,
        log,
        crash: new CrashPoints(settings.crash, { log, clock }),
        owner: settings.worker,
        pollMs: settings.pollMs,
        heartbeatMs: settings.heartbeatMs,
        leaseMs: settings.leaseMs,
        retry: settings.retry,
      }).start();
    }
    const worker = host;
    const opts = { client, agents, answerWaitMs: mine.answerWaitMs, onRunReady: () => worker?.wake() };
    log.info("mcp", {
      transport: mine.http ? "http" : "stdio",
      store: store.describe,
      agents: agents.map((a) => a.name).join(","),
      worker: host ? settings.worker : "none",
    });
    if (mine.http) return await serveHttp({ ...opts, allowedHosts: mine.hosts }, mine, log, stop.signal);
    const server = await serveMcpStdio(opts);
    await Promise.race([
      server.closed,
      new Promise((r) => stop.signal.addEventListener("abort", r, { once: true })),
    ]);
    await server.close();
    log.info("mcp-stopped", { reason: stop.signal.aborted ? "signal" : "stdin closed" });
    return EXIT_CODES.done;
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, "mcp");
    throw err;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await host?.stop();
    await store?.client.close().catch(() => {});
  }
}

/** Serves streamable HTTP at /mcp until `signal`. */
async function serveHttp(
  opts: Parameters<typeof mcpHandler>[0],
  at: { host: string; port: number },
  log: Logger,
  signal: AbortSignal,
): Promise<number> {
  const handler = mcpHandler(opts);
  const server = Deno.serve(
    { hostname: at.host, port: at.port, onListen() {} },
    (req) =>
      new URL(req.url).pathname === "/mcp"
        ? handler(req)
        : Response.json({ code: "NOT_FOUND", message: "The MCP endpoint is /mcp" }, { status: 404 }),
  );
  log.info("mcp-listening", { url: `http://${at.host}:${server.addr.port}/mcp` });
  await new Promise((r) => signal.addEventListener("abort", r, { once: true }));
  await handler.close();
  await server.shutdown();
  log.info("mcp-stopped", { reason: "signal" });
  return EXIT_CODES.done;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
