/**
 * MCP servers for tests, built with the MCP SDK's own server package, one of
 * each kind an agent meets ({@link McpTestKind}): a server that honours the
 * idempotency key a call carries in `_meta`, a read-only one, one that
 * declares nothing, and one that hangs. Each counts what it was asked and
 * what it did ({@link McpTestCounts}), in a JSON file when it has one (so a
 * stdio server a killed worker started leaves its counts, and the next one
 * carries on from them), read in-process or over HTTP (`GET /<kind>/_counts`).
 *
 * The same server answers over stdio (`mock/mcp_stdio_server.ts`), over
 * streamable HTTP ({@link serveMcpTestServers}, stateless with JSON answers),
 * or in-process ({@link McpTestServer.inMemory}).
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/mcp"
import { McpServer, type RegisteredTool } from "npm:@modelcontextprotocol/sdk@1.32.2/server/mcp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp"
import { WebStandardStreamableHTTPServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/webStandardStreamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/inMemory"
import { InMemoryTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/inMemory.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
import { z } from "npm:zod@4.6.7";
import { DurableJsonFile } from "./durable_json_file.ts";

/** The `_meta` field a call's idempotency key comes in (the runtime's `IDEMPOTENCY_KEY_META`). */
export const KEY_META = "agent-runtime/idempotency-key";
/** The result `_meta` field by which the keyed server says it answered a key it had seen. */
export const REPLAYED_META = "agent-runtime/idempotent-replayed";

/**
 * The kinds of test server, by what their tools promise:
 *
 * - `keyed`: `create_ticket {title}` acts once per idempotency key (the
 *   first answer is stored and given again, with `_meta` saying so), and
 *   `retire_tool {name}` takes a tool off the list (its list then changes
 *   under a running run);
 * - `readonly`: `get_forecast {city}` changes nothing and says so
 *   (`readOnlyHint`);
 * - `undeclared`: `send_email {to, subject}` acts on every call and declares
 *   nothing (an address without `@` gets an `isError` answer, and nothing is sent);
 * - `hanging`: `export_report {}` never answers (until the call is
 *   cancelled or the server is released);
 * - `large`: `export_logs {bytes}` answers a text of `bytes` bytes (its
 *   answer is a little longer: the JSON-RPC message around it), and
 *   `count_logs {}` a short one; each is counted, neither acts.
 */
export type McpTestKind = "keyed" | "readonly" | "undeclared" | "hanging" | "large";

/** Every kind, in a fixed order. */
export const MCP_TEST_KINDS: readonly McpTestKind[] = ["keyed", "readonly", "undeclared", "hanging", "large"];

/** The largest text `export_logs` makes (256 MiB): a test asks for what it means to send. */
const LARGE_BYTES_MAX = 256 * 1024 * 1024;

/** What a test server was asked and what it did. */
export interface McpTestCounts {
  /** Calls received, by tool (a call to a retired tool included). */
  calls: Record<string, number>;
  /** Calls received, by the idempotency key in their `_meta` (`(none)` without one). */
  byKey: Record<string, number>;
  /** Actions performed (a ticket made, an email sent), by key. */
  actionsByKey: Record<string, number>;
  /** Actions performed in all. */
  actions: number;
}

interface State extends McpTestCounts {
  /** The keyed server's first answer per key. */
  stored: Record<string, { id: string; title: string }>;
  /** Tools taken off the list (`retire_tool`). */
  retired: string[];
  next: number;
}

function emptyState(): State {
  return { calls: {}, byKey: {}, actionsByKey: {}, actions: 0, stored: {}, retired: [], next: 1 };
}

type Handler = (
  args: Record<string, unknown>,
  extra: { _meta?: Record<string, unknown>; signal: AbortSignal },
) => Promise<{
  content: { type: "text"; text: string }[];
  structuredContent?: Record<string, unknown>;
  isError?: boolean;
  _meta?: Record<string, unknown>;
}>;

/** One test server's state and tools; each connection gets an `McpServer` of its own over them. */
export class McpTestServer {
  /** Its kind. */
  readonly kind: McpTestKind;
  readonly #file?: DurableJsonFile<State>;
  #state: State;
  /** Hung calls, released by {@link releaseHung}. */
  readonly #hung = new Set<() => void>();
  /** Servers connected now, so a retired tool leaves each one's list (and each says so). */
  readonly #live = new Set<Map<string, RegisteredTool>>();

  private constructor(kind: McpTestKind, state: State, file?: DurableJsonFile<State>) {
    this.kind = kind;
    this.#state = state;
    this.#file = file;
  }

  /** A server of `kind`, its state read from (and written to) `statePath` when given. */
  static async open(kind: McpTestKind, opts: { statePath?: string } = {}): Promise<McpTestServer> {
    if (!MCP_TEST_KINDS.includes(kind)) {
      throw new TypeError(`kind must be one of ${MCP_TEST_KINDS.join(", ")}: current value is ${kind}`);
    }
    const file = opts.statePath ? new DurableJsonFile<State>(opts.statePath) : undefined;
    return new McpTestServer(kind, (await file?.read()) ?? emptyState(), file);
  }

  /** What it was asked and did so far. */
  counts(): McpTestCounts {
    const { calls, byKey, actionsByKey, actions } = structuredClone(this.#state);
    return { calls, byKey, actionsByKey, actions };
  }

  /** Answers every hung call (with an error), so nothing is left waiting. */
  releaseHung(): void {
    for (const release of [...this.#hung]) release();
    this.#hung.clear();
  }

  #save(): void {
    this.#file?.writeSync(this.#state);
  }

  /** Counts a call before its tool does anything: written down before any answer. */
  #count(tool: string, meta: Record<string, unknown> | undefined): string | undefined {
    const key = typeof meta?.[KEY_META] === "string" ? meta[KEY_META] as string : undefined;
    const s = this.#state;
    s.calls[tool] = (s.calls[tool] ?? 0) + 1;
    s.byKey[key ?? "(none)"] = (s.byKey[key ?? "(none)"] ?? 0) + 1;
    this.#save();
    return key;
  }

  #acted(key: string | undefined): void {
    const s = this.#state;
    s.actions++;
    s.actionsByKey[key ?? "(none)"] = (s.actionsByKey[key ?? "(none)"] ?? 0) + 1;
  }

  /** A fresh `McpServer` with this server's tools (less the retired ones); `signal` ends its hung calls. */
  server(signal?: AbortSignal): McpServer {
    const server = new McpServer({ name: `mcp-test-${this.kind}`, version: "1.0.0" });
    const registered = new Map<string, RegisteredTool>();
    const add = (
      name: string,
      config: {
        description: string;
        inputSchema: z.ZodRawShape;
        annotations?: { readOnlyHint?: boolean; idempotentHint?: boolean };
      },
      handler: Handler,
    ) => {
      if (this.#state.retired.includes(name)) return;
      registered.set(name, server.registerTool(name, config, handler as never));
    };
    const text = (value: unknown) => [{ type: "text" as const, text: JSON.stringify(value) }];
    if (this.kind === "keyed") {
      add("create_ticket", {
        description: "Open a support ticket. Returns its id. Acts once per idempotency key.",
        inputSchema: { title: z.string().min(1).max(200) },
      }, (args, extra) => {
        const key = this.#count("create_ticket", extra._meta);
        if (key === undefined) {
          return Promise.resolve({ content: text(`no ${KEY_META} in _meta: refused`), isError: true });
        }
        const s = this.#state;
        const seen = s.stored[key];
        if (seen) {
          return Promise.resolve({
            content: text(seen),
            structuredContent: seen,
            _meta: { [REPLAYED_META]: true },
          });
        }
        const ticket = { id: `T-${String(s.next++).padStart(6, "0")}`, title: String(args.title) };
        s.stored[key] = ticket;
        this.#acted(key);
        this.#save();
        return Promise.resolve({ content: text(ticket), structuredContent: ticket });
      });
      add("retire_tool", {
        description: "Take a tool of this server off its list.",
        inputSchema: { name: z.string() },
      }, (args, extra) => {
        this.#count("retire_tool", extra._meta);
        const name = String(args.name);
        if (!this.#state.retired.includes(name)) this.#state.retired.push(name);
        this.#save();
        // Off every connected server's list; each tells its client its list changed.
        for (const live of this.#live) live.get(name)?.remove();
        return Promise.resolve({ content: text({ retired: name }) });
      });
    } else if (this.kind === "readonly") {
      add("get_forecast", {
        description: "Tomorrow's weather for a city. Changes nothing.",
        inputSchema: { city: z.string().min(1) },
        annotations: { readOnlyHint: true },
      }, (args, extra) => {
        this.#count("get_forecast", extra._meta);
        return Promise.resolve({ content: text({ city: args.city, forecast: "sunny", high_c: 21 }) });
      });
    } else if (this.kind === "undeclared") {
      add("send_email", {
        description: "Send an email.",
        inputSchema: { to: z.string().min(1), subject: z.string() },
      }, (args, extra) => {
        const key = this.#count("send_email", extra._meta);
        if (!String(args.to).includes("@")) {
          return Promise.resolve({
            content: [{ type: "text", text: `no mailbox ${args.to}: nothing sent` }],
            isError: true,
          });
        }
        this.#acted(key);
        this.#save();
        return Promise.resolve({ content: text({ sent: true, n: this.#state.actions }) });
      });
    } else if (this.kind === "large") {
      add("export_logs", {
        description: "Export the logs as text of the given size in bytes.",
        inputSchema: { bytes: z.number().int().min(0).max(LARGE_BYTES_MAX) },
      }, (args, extra) => {
        this.#count("export_logs", extra._meta);
        return Promise.resolve({ content: [{ type: "text", text: "x".repeat(Number(args.bytes)) }] });
      });
      add("count_logs", {
        description: "Count the log lines.",
        inputSchema: {},
      }, (_args, extra) => {
        this.#count("count_logs", extra._meta);
        return Promise.resolve({ content: text({ lines: 42 }) });
      });
    } else {
      add("export_report", {
        description: "Export the quarterly report.",
        inputSchema: {},
      }, (_args, extra) => {
        this.#count("export_report", extra._meta);
        const stops = [extra.signal, ...(signal ? [signal] : [])];
        return new Promise((resolve) => {
          const release = () => {
            this.#hung.delete(release);
            resolve({ content: text("released unanswered"), isError: true });
          };
          this.#hung.add(release);
          for (const s of stops) {
            if (s.aborted) release();
            else s.addEventListener("abort", release, { once: true });
          }
        });
      });
    }
    this.#live.add(registered);
    const close = server.server.onclose;
    server.server.onclose = () => {
      this.#live.delete(registered);
      close?.();
    };
    return server;
  }

  /** A client transport to a fresh server in this process (for `mcpTools({ transport })`). */
  inMemory(): Transport {
    const [client, server] = InMemoryTransport.createLinkedPair();
    // The server end is connected before the client starts: its messages wait in the pair's queue.
    void this.server().connect(server);
    return client;
  }

  /**
   * Answers one streamable-HTTP request (stateless: a fresh server and
   * transport each; JSON answers, or an event stream with `sse`), or
   * `GET .../_counts` with the counts.
   */
  async handle(req: Request, opts: { sse?: boolean } = {}): Promise<Response> {
    if (req.method === "GET" && new URL(req.url).pathname.endsWith("/_counts")) {
      return Response.json(this.counts());
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: opts.sse !== true,
    });
    const server = this.server(req.signal);
    await server.connect(transport);
    let response: Response;
    try {
      response = await transport.handleRequest(req);
    } catch (err) {
      await server.close();
      throw err;
    }
    if (opts.sse !== true || response.body === null) {
      await server.close();
      return response;
    }
    // An event stream is still being written when it is returned: its server closes when it ends.
    const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
    response.body.pipeTo(writable).catch(() => {/* the client went away */}).finally(() => server.close());
    return new Response(readable, { status: response.status, headers: response.headers });
  }
}

/** Test servers over streamable HTTP on 127.0.0.1, one path each: `<url>/<kind>/mcp`. */
export interface McpTestHttp {
  /** The base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** The endpoint of one kind's server. */
  endpoint(kind: McpTestKind): string;
  /** The servers, by kind. */
  servers: Record<McpTestKind, McpTestServer>;
  /** Releases hung calls and stops serving. */
  close(): Promise<void>;
}

/**
 * Serves one server of each kind over streamable HTTP on 127.0.0.1 (port 0
 * unless given): `POST <url>/<kind>/mcp`, and `GET <url>/<kind>/_counts`.
 * With `stateDir`, each keeps its state in `<stateDir>/<kind>.json`; with
 * `sse`, each answer is an event stream rather than a JSON body.
 */
export async function serveMcpTestServers(
  opts: { port?: number; stateDir?: string; sse?: boolean } = {},
): Promise<McpTestHttp> {
  const servers = {} as Record<McpTestKind, McpTestServer>;
  for (const kind of MCP_TEST_KINDS) {
    servers[kind] = await McpTestServer.open(kind, {
      statePath: opts.stateDir ? `${opts.stateDir}/${kind}.json` : undefined,
    });
  }
  const stop = new AbortController();
  const http = Deno.serve({
    hostname: "127.0.0.1",
    port: opts.port ?? 0,
    signal: stop.signal,
    onListen() {},
    // A client that gave up (a timeout, a killed worker): nobody is left to answer.
    onError: () => new Response(null, { status: 499 }),
  }, (req) => {
    const kind = new URL(req.url).pathname.split("/")[1] as McpTestKind;
    const server = servers[kind];
    if (!server) {
      return Response.json({ error: `no server at ${new URL(req.url).pathname}` }, { status: 404 });
    }
    return server.handle(req, { sse: opts.sse });
  });
  const url = `http://127.0.0.1:${http.addr.port}`;
  return {
    url,
    endpoint: (kind) => `${url}/${kind}/mcp`,
    servers,
    close: async () => {
      for (const s of Object.values(servers)) s.releaseHung();
      stop.abort();
      await http.finished;
    },
  };
}
