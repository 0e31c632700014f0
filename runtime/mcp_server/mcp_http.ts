/**
 * The MCP server over streamable HTTP, as a fetch handler a user mounts in
 * `Deno.serve`, Hono or any server of web-standard `Request`s: one session
 * per client (`Mcp-Session-Id`), each its own connection (server.ts), so a
 * server may ask its client mid-call (elicitation) and read its name.
 *
 * Against DNS rebinding, every request's `Host` must name an allowed host
 * (default loopback: `127.0.0.1`, `localhost`, `[::1]`, any port) and an
 * `Origin`, when sent, an allowed host or origin; anything else is refused
 * 403 before the protocol reads it. Sessions are bounded: at most
 * `sessionsMax`, the one idle longest closed for a new one, and each closed
 * once idle `sessionIdleMs`.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/index"
import type { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server/index.js";
import { RuntimeError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { McpCalls, type McpCallsOptions } from "./tool_calls.ts";
import { createMcpServer, type ServerInfo } from "./server.ts";

/** The hosts a request may name by default: loopback. */
export const LOOPBACK_HOSTS: readonly string[] = ["127.0.0.1", "localhost", "[::1]"];

/** Options of {@link mcpHandler}. */
export interface McpHandlerOptions extends McpCallsOptions, ServerInfo {
  /** Host names (no port) a request's `Host` and `Origin` may name. Default {@link LOOPBACK_HOSTS}. */
  allowedHosts?: readonly string[];
  /** Whole origins (`https://app.example.com`) accepted besides those of the allowed hosts. */
  allowedOrigins?: readonly string[];
  /** Sessions held at once. Default 256. */
  sessionsMax?: number;
  /** A session unused this long is closed, in ms. Default 1 800 000. */
  sessionIdleMs?: number;
}

/** The handler: a function of a request, with a way to close every session. */
export interface McpHandler {
  /** Answers one request. */
  (req: Request): Promise<Response>;
  /** Closes every session (their open streams end). */
  close(): Promise<void>;
  /** Sessions open now. */
  sessions(): number;
}

interface Session {
  server: Server;
  transport: WebStandardStreamableHTTPServerTransport;
  lastUsedMs: number;
}

/** A JSON-RPC error as an HTTP answer. */
function rpcError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: "2.0", error: { code, message }, id: null }, { status });
}

/** The host part of a `Host` header or a URL's host, lower case, port dropped (`[::1]:80` is `[::1]`). */
export function hostName(host: string): string {
  const h = host.trim().toLowerCase();
  if (h.startsWith("[")) return h.slice(0, h.indexOf("]") + 1);
  return h.replace(/:\d*$/, "");
}

/** Why a request's `Host` or `Origin` is refused, or undefined when both are allowed. */
export function originProblem(
  req: Request,
  hosts: readonly string[],
  origins: readonly string[],
): string | undefined {
  const host = req.headers.get("host");
  if (host === null || !hosts.includes(hostName(host))) {
    return `Host ${JSON.stringify(host)} is not this server's (allowed: ${hosts.join(", ")})`;
  }
  const origin = req.headers.get("origin");
  if (origin === null || origins.includes(origin)) return undefined;
  let originHost: string | undefined;
  try {
    originHost = hostName(new URL(origin).host);
  } catch {
    originHost = undefined;
  }
  return originHost !== undefined && hosts.includes(originHost)
    ? undefined
    : `Origin ${JSON.stringify(origin)} may not call this server (allowed: ${hosts.join(", ")})`;
}

/**
 * A fetch handler serving `opts.agents` over streamable HTTP through
 * `opts.client`. Mount it where clients are to find it (`/mcp`):
 *
 * @example
 * ```ts ignore
 * const handler = mcpHandler({ client, agents: [notes] });
 * Deno.serve({ hostname: "127.0.0.1", port: 8790 }, handler);
 * ```
 */
export function mcpHandler(opts: McpHandlerOptions): McpHandler {
  const calls = new McpCalls(opts);
  const hosts = (opts.allowedHosts ?? LOOPBACK_HOSTS).map((h) => h.toLowerCase());
  const origins = opts.allowedOrigins ?? [];
  const sessionsMax = opts.sessionsMax ?? DEFAULTS.mcpSessionsMax;
  const idleMs = opts.sessionIdleMs ?? DEFAULTS.mcpSessionIdleMs;
  if (!Number.isInteger(sessionsMax) || sessionsMax < 1 || !Number.isInteger(idleMs) || idleMs < 1) {
    throw new RuntimeError(
      "MCP_SERVER_INVALID",
      `Cannot serve MCP as 'sessionsMax' and 'sessionIdleMs' must be positive integers: current values are ` +
        `${sessionsMax} and ${idleMs}`,
    );
  }
  const sessions = new Map<string, Session>();
  const now = () => calls.client.clock.now().getTime();

  /** Closes idle sessions, and the one idle longest when full. */
  const evict = async () => {
    const stale = [...sessions.entries()].filter(([, s]) => now() - s.lastUsedMs >= idleMs);
    if (sessions.size - stale.length >= sessionsMax) {
      const oldest = [...sessions.entries()].sort((a, b) => a[1].lastUsedMs - b[1].lastUsedMs)[0];
      stale.push(oldest);
    }
    for (const [id, s] of stale) {
      sessions.delete(id);
      await s.server.close();
    }
  };

  const open = async (): Promise<Session> => {
    await evict();
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => crypto.randomUUID(),
      onsessioninitialized: (id) => void sessions.set(id, session),
      onsessionclosed: (id) => void sessions.delete(id),
    });
    const server = createMcpServer(calls, opts);
    const session: Session = { server, transport, lastUsedMs: now() };
    await server.connect(transport);
    return session;
  };

  const handler = async (req: Request): Promise<Response> => {
    const problem = originProblem(req, hosts, origins);
    if (problem !== undefined) return rpcError(403, -32000, `Forbidden: ${problem}`);
    const id = req.headers.get("mcp-session-id");
    if (id !== null) {
      const session = sessions.get(id);
      if (!session) return rpcError(404, -32001, "Session not found: initialize a new one");
      session.lastUsedMs = now();
      return await session.transport.handleRequest(req);
    }
    if (req.method !== "POST") {
      return rpcError(400, -32000, "Bad Request: no Mcp-Session-Id header; start with an initialize POST");
    }
    const session = await open();
    const response = await session.transport.handleRequest(req);
    // A first request that was no initialize made no session: nothing keeps its server.
    if (session.transport.sessionId === undefined) await session.server.close();
    return response;
  };
  return Object.assign(handler, {
    close: async () => {
      const all = [...sessions.values()];
      sessions.clear();
      await Promise.all(all.map((s) => s.server.close()));
    },
    sessions: () => sessions.size,
  });
}
