/**
 * `deno task ui`: serves the web page over the runs' database.
 *
 * ```sh
 * deno task ui [--host 127.0.0.1] [--port 8787] [--token TOKEN] [--read-only]
 *              [--agent PATH] [--database-url URL | --data-dir DIR]
 * ```
 *
 * Exit codes: 0 stopped by a signal, 2 bad settings or no database.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { DATA_DIR_WAIT_DEFAULT_S, integerIn, SettingsReader } from "../runtime/settings/config.ts";
import { StoreError } from "../runtime/base/errors.ts";
import { openStore } from "../runtime/store/open.ts";
import { serveUi, UiError } from "./server.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import { loadAgents } from "../cli/agents.ts";
import { mcpHandler } from "../runtime/mcp_server/mcp_server.ts";

/** The usage text of `ui`. */
export const UI_USAGE = `usage: deno task ui [--host H] [--port N] [--token TOKEN] [--read-only] [--by NAME]
  Serves a page with every run: a list, and each run's timeline with one lane per worker epoch;
  cancel, reopen and resolve flagged calls from it. It updates while runs progress.
  --host H            interface to bind (env UI_HOST; default 127.0.0.1; IPv6 as ::1 or [::1]); beyond loopback
                      a token is required
  --port N            port (env UI_PORT; default 8787; 0 picks a free one)
  --token TOKEN       required on every request (env UI_TOKEN); open the page with ?token=TOKEN
  --read-only         show runs, refuse every action
  --by NAME           recorded as who resolved or cancelled (default ui)
  --agent PATH        serve the agents of this module over A2A 1.0 at /a2a/<name> (docs/a2a.md) and as
                      MCP tools at /mcp (docs/mcp-server.md), behind the token; a worker hosting them drives
                      their runs
settings: --database-url URL (env DATABASE_URL, PostgreSQL) or --data-dir DIR (env DATA_DIR, embedded,
default .data). The embedded database allows one process at a time: while the page has it open, 'run' and
'worker' on the same directory wait for it (and the page for them), up to DATA_DIR_WAIT_S (default 60 s;
0: refuse at once); use PostgreSQL to watch runs live from another process.`;

/** Runs the page until SIGINT or SIGTERM; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  signal?: AbortSignal,
): Promise<number> {
  let v;
  try {
    v = parseArgs({
      args,
      strict: true,
      options: {
        host: { type: "string" },
        port: { type: "string" },
        token: { type: "string" },
        "read-only": { type: "boolean" },
        by: { type: "string" },
        agent: { type: "string" },
        "database-url": { type: "string" },
        "data-dir": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (err) {
    console.error(`ui: ${(err as Error).message.split("\n")[0]}. 'deno task ui --help' lists the flags`);
    return 2;
  }
  if (v.help) {
    console.log(UI_USAGE);
    return 0;
  }
  const port = integerIn("--port", v.port ?? (env.UI_PORT || "8787"), 0, 65535);
  if (typeof port === "string") {
    console.error(`ui: ${port}`);
    return 2;
  }
  const host = v.host ?? (env.UI_HOST || "127.0.0.1");
  const token = v.token ?? (env.UI_TOKEN || undefined);
  const wait = new SettingsReader({ DATA_DIR_WAIT_S: env.DATA_DIR_WAIT_S || undefined });
  const waitMs = wait.seconds("DATA_DIR_WAIT_S", DATA_DIR_WAIT_DEFAULT_S, 0);
  if (wait.problems.length > 0) {
    console.error(`ui: ${wait.problems[0]}`);
    return 2;
  }
  let a2a: Agent[] = [];
  try {
    if (v.agent) a2a = (await loadAgents(v.agent)).agents;
  } catch (err) {
    console.error(`ui: ${(err as Error).message}`);
    return 2;
  }
  const dataDir = v["data-dir"] ?? (env.DATA_DIR || ".data");
  let client: Client;
  try {
    client = new Client(
      await openStore({ databaseUrl: v["database-url"] ?? (env.DATABASE_URL || undefined), dataDir }, {
        lockWait: {
          waitMs,
          onWait: ({ holder }) =>
            console.log(
              `ui  waiting for the embedded database ${dataDir}: pid ${holder} has it open (a worker?); ` +
                `the page starts as soon as it exits, or gives up after ${waitMs / 1000} s (DATA_DIR_WAIT_S)`,
            ),
        },
      }),
      new SystemClock(),
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
  try {
    const ui = await serveUi({
      client,
      host,
      port,
      token,
      readOnly: v["read-only"] === true,
      actor: v.by ?? "ui",
      a2a,
      // The same agents as MCP tools; not on a read-only page (a call starts a run).
      ...(a2a.length > 0 && v["read-only"] !== true
        ? {
          mcp: mcpHandler({
            client,
            agents: a2a,
            allowedHosts: [host.replace(/^\[|\]$/g, ""), "127.0.0.1", "localhost"],
          }),
        }
        : {}),
      signal: stop.signal,
    });
    console.log(
      `ui  url=${ui.url}/${token ? "?token=..." : ""}  store=${client.store.client.describe}${
        v["read-only"] ? "  read_only=true" : ""
      }${
        a2a.length > 0 && !v["read-only"]
          ? `  a2a=${a2a.map((a) => `/a2a/${a.name}`).join(",")}  mcp=/mcp`
          : ""
      }`,
    );
    await new Promise<void>((resolve) =>
      stop.signal.addEventListener("abort", () => resolve(), { once: true })
    );
    await ui.close().catch(() => {}); // the signal has shut it down already
    return 0;
  } catch (err) {
    if (err instanceof UiError || err instanceof Deno.errors.AddrInUse) {
      console.error(`ui: ${err instanceof UiError ? `${err.code}: ` : ""}${(err as Error).message}`);
      return 2;
    }
    throw err;
  } finally {
    if (!signal) {
      Deno.removeSignalListener("SIGINT", onSignal);
      Deno.removeSignalListener("SIGTERM", onSignal);
    }
    await client.close();
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
