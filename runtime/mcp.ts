/**
 * An MCP server's tools as an agent's tools: {@link mcpTools} connects to a
 * server (a command spoken to over stdio, or a streamable-HTTP URL), lists
 * its tools, and gives each one to the agent with the server's JSON Schema,
 * so a call goes through intent, call and confirm like any tool's. The call
 * carries its idempotency key in the request's `_meta`, under
 * {@link IDEMPOTENCY_KEY_META}, for a server that honours it.
 *
 * MCP has no field a client can rely on to make a re-send safe, so a call
 * whose outcome is unknown (a timeout, a dropped connection, a crash after
 * the request went out) is re-sent only for tools the agent declares safe
 * (`safeToResend`, or the server's own `readOnlyHint`/`idempotentHint` when
 * the agent trusts them with `trustHints`); any other is flagged for a
 * person, as a native tool that takes no key is. What happens to each kind
 * is in `docs/mcp.md`.
 *
 * This module is its own export path (`@agent-runtime/agent-runtime/mcp`),
 * so an agent that uses no MCP server never loads the MCP SDK.
 *
 * @example
 * ```ts
 * import { defineAgent } from "../mod.ts";
 * import { mcpTools } from "./mcp.ts";
 * const tickets = mcpTools({
 *   url: "https://tickets.example.com/mcp",
 *   headers: { authorization: "Bearer <token from the environment>" },
 *   safeToResend: ["create_ticket"], // the server honours _meta["agent-runtime/idempotency-key"]
 * });
 * export default defineAgent({ name: "support", tools: tickets });
 * ```
 *
 * @module
 */

// The SDK's subpaths are typed by its exports' "types" condition (no ".js"), and loaded by their files.
import { Client } from "npm:@modelcontextprotocol/sdk@1.32.2/client";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/stdio"
import { StdioClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/stdio.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import {
  type CallToolResult,
  ErrorCode,
  McpError,
  type Tool as ListedTool,
  ToolListChangedNotificationSchema,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { AjvJsonSchemaValidator } from "npm:@modelcontextprotocol/sdk@1.32.2/validation/ajv";
import type { AgentContext } from "./agent.ts";
import { SystemClock } from "./clock.ts";
import { describeError, describeValue, RuntimeError, ToolError } from "./errors.ts";
import { isTransientStatus } from "./http.ts";
import { Logger } from "./log.ts";
import type { FetchLike } from "./planner.ts";
import {
  type ArgsSchema,
  defineTool,
  type Json,
  type ReconcileContext,
  type Reconciliation,
  type Tool,
  type ToolContext,
  type ToolOutcome,
} from "./tools.ts";

/**
 * The `_meta` field of every `tools/call` request that holds the call's
 * idempotency key, `<run_id>:<seq>`: the same on every re-send of the call,
 * across crashes. A server that stores its first answer under this key and
 * answers it again for a later request with the key acts once however often
 * the call is sent; tell the agent so with `safeToResend`.
 */
export const IDEMPOTENCY_KEY_META = "agent-runtime/idempotency-key";

/**
 * The `_meta` field of a `tools/call` result by which a server may say that
 * it recognised the key and answered what it stored earlier (`true`): the
 * call is then confirmed as `already_done` rather than `created`. Optional;
 * the call's outcome is the same either way.
 */
export const REPLAYED_META = "agent-runtime/idempotent-replayed";

/** A tool's annotations as its server lists them: hints, from a server that may not deserve trust. */
export interface McpToolAnnotations {
  /** A human-readable title. */
  title?: string;
  /** The tool changes nothing (MCP's default: false). */
  readOnlyHint?: boolean;
  /** The tool may destroy or overwrite (MCP's default: true). */
  destructiveHint?: boolean;
  /** The same call again has no further effect (MCP's default: false). */
  idempotentHint?: boolean;
  /** The tool reaches beyond the server (MCP's default: true). */
  openWorldHint?: boolean;
}

/** A tool as its MCP server lists it, as the options' predicates are shown it. */
export interface McpToolInfo {
  /** Its name on the server (before any `prefix`). */
  name: string;
  /** Its title, if the server gives one. */
  title?: string;
  /** What it does, as the server says. */
  description?: string;
  /** The JSON Schema of its arguments. */
  inputSchema: Record<string, unknown>;
  /** The server's hints. */
  annotations?: McpToolAnnotations;
}

/** Which tools of a server an option applies to: their names on the server, or a test of each listed tool. */
export type McpToolSelector = readonly string[] | ((tool: McpToolInfo) => boolean);

/** What every kind of server takes (see {@link mcpTools}). */
export interface McpCommonOptions {
  /** The server's name in log lines and errors. Default: the name the server gives itself. */
  name?: string;
  /** Put before every tool's name (`tickets_` gives `tickets_create`); letters, digits, `_`, `-`. Default none. */
  prefix?: string;
  /** The tools the agent is given. Default: every tool the server lists. */
  include?: McpToolSelector;
  /**
   * Tools that may be sent again after an unknown outcome: their server acts
   * once per idempotency key (it honours {@link IDEMPOTENCY_KEY_META}), or
   * they change nothing. Any other tool's call is flagged for a person then.
   */
  safeToResend?: McpToolSelector;
  /**
   * Trust this server's `readOnlyHint` and `idempotentHint`: a tool with
   * either is safe to re-send. Default false, as the MCP specification asks
   * of a client that does not know the server.
   */
  trustHints?: boolean;
  /** Tools whose every call waits for a person's approval before it is sent. Default none. */
  approval?: McpToolSelector;
  /** Milliseconds a call may take (a timeout is an unknown outcome). Default 30 000. */
  timeoutMs?: number;
  /** Requests under one key before the run fails (for tools safe to re-send). Default 4. */
  maxAttempts?: number;
  /** Milliseconds to connect and list the tools, each time the process does. Default 10 000. */
  connectTimeoutMs?: number;
  /** How this client introduces itself. Default `{ name: "agent-runtime", version: "0.1.0" }`. */
  clientInfo?: { name: string; version: string };
}

/** A server started as a command and spoken to over its stdin and stdout. */
export interface McpStdioOptions extends McpCommonOptions {
  /** The program, e.g. `npx` or `Deno.execPath()`. */
  command: string;
  /** Its arguments. */
  args?: readonly string[];
  /** Added to the small environment the MCP SDK passes on (`HOME`, `PATH`, `USER`, ...). */
  env?: Record<string, string>;
  /** Its working directory. */
  cwd?: string;
  /** Where its stderr goes: this process's (`inherit`, the default) or nowhere (`ignore`). */
  stderr?: "inherit" | "ignore";
}

/** A server reached over MCP's streamable HTTP. */
export interface McpHttpOptions extends McpCommonOptions {
  /** Its endpoint, e.g. `https://tickets.example.com/mcp`. */
  url: string | URL;
  /** Sent with every request (an `Authorization` header). Keep secrets in the environment. */
  headers?: Record<string, string>;
  /** Sends the requests instead of the global `fetch` (an in-process server in tests). */
  fetch?: FetchLike;
}

/** The MCP SDK's client transport (its `Transport`): what {@link McpTransportOptions.transport} returns. */
export type McpTransport = Transport;

/** A server reached through a transport of your own (the SDK's `InMemoryTransport`, a WebSocket). */
export interface McpTransportOptions extends McpCommonOptions {
  /** Opens a fresh transport: called on the first connect and on every reconnect. */
  transport: () => McpTransport;
}

/** Where an MCP server is and how the agent treats its tools. */
export type McpServerOptions = McpStdioOptions | McpHttpOptions | McpTransportOptions;

/**
 * An agent's `tools` from one MCP server: call it with the process's
 * {@link AgentContext} (as the runtime does when it builds the agent) to
 * connect, list and get the tools. Every call connects on its own, so each
 * process (and each restart) lists the tools again.
 */
export interface McpTools {
  /** Connects, lists the server's tools and returns them as the agent's. */
  (ctx: AgentContext): Promise<Tool[]>;
  /** Closes every connection these tools opened (a test's, or an embedder's, at its end). */
  close(): Promise<void>;
}

/**
 * An MCP server's tools, for an agent's `tools`: over stdio
 * (`{ command, args, env }`) or streamable HTTP (`{ url, headers }`), or a
 * function of the process's context returning either (a URL from the
 * environment). Each listed tool becomes a tool of the agent with the
 * server's JSON Schema (arguments are checked against it before the intent
 * row is written) and is called with its idempotency key in `_meta`
 * ({@link IDEMPOTENCY_KEY_META}). A result with `isError` is the tool's
 * answer: the call fails for good and the model is shown the server's text.
 *
 * Whether a call whose outcome is unknown may be sent again is the agent's
 * to say: `safeToResend` by name, or `trustHints` for a server whose
 * `readOnlyHint`/`idempotentHint` the agent trusts; any other tool's call is
 * flagged for a person (the run is `blocked` until `deno task resolve`). A
 * request that never left this process (the server could not be reached)
 * is sent again for every tool.
 *
 * Options are checked up front (`MCP_INVALID`); a server that cannot be
 * listed within `connectTimeoutMs` (three tries) stops the process from
 * starting (`MCP_UNREACHABLE`), since it cannot know the agent's tools. Once
 * started, a server that is down fails a call as a transient error, retried
 * with backoff. A server whose tool list changes is reported
 * (`mcp-tools-changed`), and a call to a tool it no longer lists fails with
 * `MCP_TOOL_VANISHED`.
 *
 * To give an agent the tools of several servers, or MCP tools beside its own:
 * `tools: async (ctx) => [...myTools, ...await tickets(ctx), ...await docs(ctx)]`.
 *
 * @example
 * ```ts
 * import { defineAgent } from "../mod.ts";
 * import { mcpTools } from "./mcp.ts";
 * const files = mcpTools({
 *   command: "npx",
 *   args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/reports"],
 *   trustHints: true, // our own server: its readOnlyHint tools may be re-sent
 *   timeoutMs: 10_000,
 * });
 * export default defineAgent({ name: "reports", tools: files });
 * ```
 */
export function mcpTools(options: McpServerOptions | ((ctx: AgentContext) => McpServerOptions)): McpTools {
  if (typeof options !== "function") checkOptions(options);
  const open = new Set<McpConnection>();
  const build = async (ctx: AgentContext): Promise<Tool[]> => {
    const opts = typeof options === "function" ? options(ctx) : options;
    if (typeof options === "function") checkOptions(opts);
    const log = ctx.log ?? new Logger({ clock: new SystemClock() });
    const conn = new McpConnection(opts, log);
    open.add(conn);
    const onStop = () => void conn.close().catch(() => {/* the process is going; nothing to tell */});
    ctx.signal?.addEventListener("abort", onStop, { once: true });
    try {
      const listed = await conn.start(ctx.signal);
      return toolsOf(conn, opts, listed, log);
    } catch (err) {
      ctx.signal?.removeEventListener("abort", onStop);
      open.delete(conn);
      await conn.close();
      throw err;
    }
  };
  return Object.assign(build, {
    close: async () => {
      const all = [...open];
      open.clear();
      await Promise.all(all.map((c) => c.close()));
    },
  });
}

const PREFIX = /^[A-Za-z0-9_-]{0,63}$/;
const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
/** Tries to connect and list before a process gives up starting, and the waits between them. */
const START_DELAYS_MS = [250, 1_000];
/** Pages of `tools/list` read at most (a server that pages forever is cut off). */
const MAX_LIST_PAGES = 100;
/** Calls whose request is known never to have left, remembered at most (the oldest are forgotten). */
const MAX_UNSENT = 10_000;
/** The longest text of an `isError` answer kept in the call's error. */
const MAX_ERROR_TEXT = 4_000;
/** MCP's JSON-RPC codes that say the server refused the request without acting on it. */
const REFUSALS: ReadonlySet<number> = new Set([
  ErrorCode.ParseError,
  ErrorCode.InvalidRequest,
  ErrorCode.MethodNotFound,
  ErrorCode.InvalidParams,
]);

/** Every problem with `o`, thrown together (`MCP_INVALID`). */
function checkOptions(o: McpServerOptions): void {
  const problems: string[] = [];
  const given = o as Partial<McpStdioOptions & McpHttpOptions & McpTransportOptions> | null;
  if (given === null || typeof given !== "object") {
    throw new RuntimeError(
      "MCP_INVALID",
      `Cannot use an MCP server as its options must be an object: current value is ${describeValue(given)}`,
    );
  }
  const kinds = [given.command !== undefined, given.url !== undefined, given.transport !== undefined];
  if (kinds.filter(Boolean).length !== 1) {
    problems.push("give exactly one of 'command' (stdio), 'url' (streamable HTTP) or 'transport'");
  }
  if (given.command !== undefined && (typeof given.command !== "string" || given.command === "")) {
    problems.push(`'command' must be a non-empty string: current value is ${describeValue(given.command)}`);
  }
  if (
    given.args !== undefined && !(Array.isArray(given.args) && given.args.every((a) => typeof a === "string"))
  ) {
    problems.push(`'args' must be an array of strings: current value is ${describeValue(given.args)}`);
  }
  if (given.url !== undefined) {
    let ok = false;
    try {
      const u = new URL(given.url);
      ok = u.protocol === "http:" || u.protocol === "https:";
    } catch {
      ok = false;
    }
    if (!ok) {
      problems.push(
        `'url' must be an http or https URL: current value is ${describeValue(String(given.url))}`,
      );
    }
  }
  if (given.transport !== undefined && typeof given.transport !== "function") {
    problems.push(
      `'transport' must be a function returning a transport: current value is ${typeof given.transport}`,
    );
  }
  if (given.prefix !== undefined && (typeof given.prefix !== "string" || !PREFIX.test(given.prefix))) {
    problems.push(
      `'prefix' must be up to 63 letters, digits, '_' or '-': current value is ${
        describeValue(given.prefix)
      }`,
    );
  }
  for (const name of ["include", "safeToResend", "approval"] as const) {
    const v = given[name];
    if (
      v !== undefined && typeof v !== "function" &&
      !(Array.isArray(v) && v.every((n) => typeof n === "string"))
    ) {
      problems.push(
        `'${name}' must be an array of tool names or a function of a tool: current value is ${
          describeValue(v)
        }`,
      );
    }
  }
  if (given.trustHints !== undefined && typeof given.trustHints !== "boolean") {
    problems.push(`'trustHints' must be true or false: current value is ${describeValue(given.trustHints)}`);
  }
  for (const name of ["timeoutMs", "maxAttempts", "connectTimeoutMs"] as const) {
    const v = given[name];
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 1)) {
      problems.push(`'${name}' must be a positive integer: current value is ${describeValue(v)}`);
    }
  }
  if (problems.length > 0) {
    throw new RuntimeError(
      "MCP_INVALID",
      `Cannot use MCP server ${describeServer(given)} as ${problems.join("; ")}`,
    );
  }
}

/** The server as the options name it, before it has said its own name. */
function describeServer(o: Partial<McpStdioOptions & McpHttpOptions>): string {
  if (typeof o.name === "string" && o.name !== "") return o.name;
  if (typeof o.command === "string") return [o.command, ...(o.args ?? [])].join(" ").slice(0, 120);
  if (o.url !== undefined) {
    try {
      const u = new URL(o.url);
      return `${u.origin}${u.pathname}`;
    } catch {
      return String(o.url);
    }
  }
  return "(transport)";
}

function selects(selector: McpToolSelector | undefined, tool: McpToolInfo): boolean {
  if (selector === undefined) return false;
  return typeof selector === "function" ? selector(tool) === true : selector.includes(tool.name);
}

function infoOf(t: ListedTool): McpToolInfo {
  return {
    name: t.name,
    ...(t.title !== undefined ? { title: t.title } : {}),
    ...(t.description !== undefined ? { description: t.description } : {}),
    inputSchema: t.inputSchema as Record<string, unknown>,
    ...(t.annotations !== undefined ? { annotations: t.annotations as McpToolAnnotations } : {}),
  };
}

/** The tools of `listed` the options give the agent, each bound to `conn`. */
function toolsOf(
  conn: McpConnection,
  opts: McpServerOptions,
  listed: readonly ListedTool[],
  log: Logger,
): Tool[] {
  const validator = new AjvJsonSchemaValidator();
  const server = conn.server;
  const prefix = opts.prefix ?? "";
  const tools: Tool[] = [];
  const names = new Map<string, string>();
  const safe: string[] = [];
  const flagged: string[] = [];
  const skip = (tool: string, reason: string) => log.warn("mcp-tool-skipped", { server, tool, reason });
  for (const t of listed) {
    const info = infoOf(t);
    if (opts.include !== undefined && !selects(opts.include, info)) continue;
    // MCP names may hold '.', '/' and more; an agent's tool name is the chat-completions rule.
    const name = `${prefix}${t.name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    if (!TOOL_NAME.test(name)) {
      skip(
        t.name,
        `its name as the agent's tool, ${JSON.stringify(name)}, is not 1-64 letters, digits, '_' or '-'`,
      );
      continue;
    }
    const other = names.get(name);
    if (other !== undefined) {
      throw new RuntimeError(
        "MCP_INVALID",
        `Cannot use MCP server ${server} as its tools ${JSON.stringify(other)} and ${
          JSON.stringify(t.name)
        } ` +
          `both become the agent's tool ${name}: leave one out with 'include'`,
      );
    }
    if (t.execution?.taskSupport === "required") {
      skip(t.name, "it can only be called as an MCP task, which this client does not do");
      continue;
    }
    const schema: Record<string, unknown> = { ...(t.inputSchema as Record<string, unknown>) };
    delete schema.$schema;
    let check: ReturnType<AjvJsonSchemaValidator["getValidator"]>;
    try {
      check = validator.getValidator(schema);
    } catch (err) {
      skip(t.name, `its inputSchema cannot be compiled: ${describeError(err)}`);
      continue;
    }
    names.set(name, t.name);
    const hinted = opts.trustHints === true &&
      (info.annotations?.readOnlyHint === true || info.annotations?.idempotentHint === true);
    const idempotent = selects(opts.safeToResend, info) || hinted;
    (idempotent ? safe : flagged).push(name);
    const args: ArgsSchema<Record<string, unknown>> = {
      safeParse: (input) => {
        const r = check(input);
        return r.valid
          ? { success: true, data: input as Record<string, unknown> }
          : { success: false, error: `${r.errorMessage} (the server's inputSchema)` };
      },
    };
    const needsApproval = selects(opts.approval, info);
    tools.push(defineTool({
      name,
      description: info.description ?? info.title ?? info.annotations?.title ??
        `Tool ${t.name} of ${server}.`,
      args,
      parameters: schema,
      idempotent,
      timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      maxAttempts: opts.maxAttempts,
      approval: needsApproval,
      run: (a, ctx) => conn.call(t.name, name, a, ctx),
      // A call of a tool not safe to re-send is sent again only when this process knows its
      // last request never left: MCP offers no way to ask a server whether it acted.
      reconcile: idempotent ? undefined : (_a, ctx) => Promise.resolve(conn.reconcile(name, ctx)),
      reconcileTimeoutMs: 1_000,
    }));
  }
  for (const option of ["include", "safeToResend", "approval"] as const) {
    const selector = opts[option];
    if (!Array.isArray(selector)) continue;
    const unlisted = selector.filter((n) => !listed.some((t) => t.name === n));
    if (unlisted.length > 0) {
      log.warn("mcp-names-unlisted", { server, option, names: unlisted.join(",") });
    }
  }
  log.info("mcp-tools-listed", {
    server,
    tools: tools.map((t) => t.name).join(","),
    safe_to_resend: safe.join(",") || undefined,
    flagged_if_unknown: flagged.join(",") || undefined,
  });
  return tools;
}

/** `p`, or the reason `signal` aborts with, whichever comes first. */
function raced<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(signal.reason);
    signal.addEventListener("abort", abort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/**
 * True when `err` says a connection was never made (refused, no such host):
 * nothing was sent. Read from the error's text, as `fetch` gives nothing
 * better; anything else counts as a request that may have gone out.
 */
function couldNotConnect(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (
      /connection refused|ECONNREFUSED|tcp connect error|dns error|failed to lookup address/i.test(e.message)
    ) {
      return true;
    }
  }
  return false;
}

/** The key a `tools/call` body carries in its `_meta`, if `body` is one. */
function keyOfBody(body: unknown): string | undefined {
  if (typeof body !== "string" || !body.includes(IDEMPOTENCY_KEY_META)) return undefined;
  try {
    const key = JSON.parse(body)?.params?._meta?.[IDEMPOTENCY_KEY_META];
    return typeof key === "string" ? key : undefined;
  } catch {
    return undefined;
  }
}

/** A result the model is shown: the structured content, else the text, else the content as it came. */
function resultOf(r: CallToolResult): Json {
  if (r.structuredContent !== undefined) return r.structuredContent as Json;
  const content: readonly { type: string; text?: string }[] = r.content ?? [];
  if (content.length > 0 && content.every((c) => c.type === "text")) {
    return content.map((c) => c.text ?? "").join("\n");
  }
  return content as unknown as Json;
}

/** The text of an `isError` answer, as the call's error. */
function errorTextOf(r: CallToolResult): string {
  const content: readonly { type: string; text?: string }[] = r.content ?? [];
  const text = content.length > 0 && content.every((c) => c.type === "text")
    ? content.map((c) => c.text ?? "").join("\n")
    : JSON.stringify(r.structuredContent ?? content);
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}...` : text;
}

/** What a list says of each tool, to tell a changed tool from an unchanged one. */
function fingerprint(t: ListedTool): string {
  return JSON.stringify([t.inputSchema, t.annotations ?? null]);
}

/**
 * One process's connection to one server: connected when the tools are
 * listed, again after it drops (with the tools listed again), and closed when
 * the process stops. Calls of its tools share it.
 */
class McpConnection {
  /** The server's name in log lines and errors. */
  server: string;
  readonly #opts: McpServerOptions;
  readonly #log: Logger;
  readonly #connectTimeoutMs: number;
  #client?: Client;
  #connecting?: Promise<Client>;
  /** The tools the server lists now, by name (as last listed). */
  #listed = new Map<string, ListedTool>();
  /** Set when the server said its list changed, or on a reconnect: list again before the next call. */
  #stale = false;
  #closed = false;
  /** Calls whose last request (the attempt held) is known never to have left this process, by key. */
  readonly #unsent = new Map<string, number>();
  /** The signal of each call in flight over HTTP, by key: it aborts that call's own POST. */
  readonly #inflight = new Map<string, AbortSignal>();

  constructor(opts: McpServerOptions, log: Logger) {
    this.#opts = opts;
    this.#log = log;
    this.server = describeServer(opts);
    this.#connectTimeoutMs = opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  }

  /** Connects and lists the tools, trying three times; throws `MCP_UNREACHABLE` when it cannot. */
  async start(signal?: AbortSignal): Promise<ListedTool[]> {
    let last: unknown;
    for (let attempt = 0; attempt <= START_DELAYS_MS.length; attempt++) {
      if (attempt > 0) await raced(new Promise((r) => setTimeout(r, START_DELAYS_MS[attempt - 1])), signal);
      try {
        const client = await this.#connect();
        await this.#list(client, signal, false);
        return [...this.#listed.values()];
      } catch (err) {
        last = err;
        if (signal?.aborted || this.#closed) break;
        await this.#drop(this.#client, `listing failed: ${describeError(err)}`);
      }
    }
    throw new RuntimeError(
      "MCP_UNREACHABLE",
      `Cannot list the tools of MCP server ${this.server}: ${describeError(last)}. The agent's tools are ` +
        `not known without them: start the server (or fix its ${
          "url" in this.#opts ? "url" : "command"
        }), then start this process again`,
      { cause: last },
    );
  }

  /** A new transport of the kind the options name. */
  #transport(): Transport {
    const o = this.#opts;
    if ("transport" in o) return o.transport();
    if ("command" in o) {
      return new StdioClientTransport({
        command: o.command,
        args: [...(o.args ?? [])],
        env: o.env, // the SDK adds them to its default environment
        cwd: o.cwd,
        stderr: o.stderr ?? "inherit",
      });
    }
    const base = o.fetch;
    const send = (url: string | URL, init?: RequestInit): Promise<Response> => {
      // A call's own signal ends its POST when the call times out, so no request outlives its call.
      const key = keyOfBody(init?.body);
      const callSignal = key === undefined ? undefined : this.#inflight.get(key);
      const signal = callSignal && init?.signal
        ? AbortSignal.any([init.signal, callSignal])
        : callSignal ?? init?.signal;
      const withSignal = { ...init, signal };
      return base ? base(new Request(url, withSignal)) : fetch(url, withSignal);
    };
    return new StreamableHTTPClientTransport(new URL(o.url), {
      requestInit: o.headers ? { headers: o.headers } : undefined,
      fetch: send,
    });
  }

  /** The connected client, connecting once however many calls ask at once. */
  #connect(): Promise<Client> {
    if (this.#client) return Promise.resolve(this.#client);
    if (this.#closed) return Promise.reject(new Error("the connection is closed: the process is stopping"));
    this.#connecting ??= (async () => {
      const client = new Client(this.#opts.clientInfo ?? { name: "agent-runtime", version: "0.1.0" }, {
        capabilities: {},
      });
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
        if (this.#client === client) this.#stale = true;
        return Promise.resolve();
      });
      client.onclose = () => {
        if (this.#client !== client) return;
        this.#client = undefined;
        if (!this.#closed) this.#log.warn("mcp-disconnected", { server: this.server });
      };
      try {
        await client.connect(this.#transport(), { timeout: this.#connectTimeoutMs });
      } catch (err) {
        await client.close().catch(() => {/* it never opened */});
        throw err;
      }
      if (this.#closed) {
        await client.close();
        throw new Error("the connection is closed: the process is stopping");
      }
      if (this.#opts.name === undefined) this.server = client.getServerVersion()?.name || this.server;
      this.#client = client;
      return client;
    })().finally(() => this.#connecting = undefined);
    return this.#connecting;
  }

  /** Forgets `client` (if it is still the one) and closes it. */
  async #drop(client: Client | undefined, reason: string): Promise<void> {
    if (!client) return;
    if (this.#client === client) {
      this.#client = undefined;
      this.#log.warn("mcp-disconnected", { server: this.server, reason });
    }
    await client.close().catch(() => {/* already gone */});
  }

  /** Lists every tool (every page); reports how the list changed when `report`. */
  async #list(client: Client, signal: AbortSignal | undefined, report: boolean): Promise<void> {
    const tools: ListedTool[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_LIST_PAGES; page++) {
      const r = await client.listTools(cursor === undefined ? undefined : { cursor }, {
        timeout: this.#connectTimeoutMs,
        signal,
      });
      tools.push(...r.tools);
      cursor = r.nextCursor;
      if (cursor === undefined) break;
    }
    const now = new Map(tools.map((t) => [t.name, t]));
    if (report) {
      const was = this.#listed;
      const added = [...now.keys()].filter((n) => !was.has(n));
      const removed = [...was.keys()].filter((n) => !now.has(n));
      const changed = [...now.keys()].filter((n) =>
        was.has(n) && fingerprint(was.get(n)!) !== fingerprint(now.get(n)!)
      );
      if (added.length + removed.length + changed.length > 0) {
        this.#log.warn("mcp-tools-changed", {
          server: this.server,
          added: added.join(",") || undefined,
          removed: removed.join(",") || undefined,
          changed: changed.join(",") || undefined,
          note: "the agent's tools are those listed when this process started; a call to a removed tool " +
            "fails with MCP_TOOL_VANISHED",
        });
      }
    }
    this.#listed = now;
    if (this.#client === client) this.#stale = false;
  }

  /** Connected, with the list fresh if the server said it changed (or the connection is new). */
  async #ready(signal: AbortSignal): Promise<Client> {
    const fresh = this.#client === undefined;
    const client = await raced(this.#connect(), signal);
    if (fresh) {
      this.#log.info("mcp-connected", { server: this.server });
      this.#stale = true;
    }
    if (this.#stale) await this.#list(client, signal, true);
    return client;
  }

  /** Performs one call of the server's tool `name` (the agent's `agentName`). */
  async call(name: string, agentName: string, args: unknown, ctx: ToolContext): Promise<ToolOutcome> {
    const key = ctx.idempotencyKey;
    const what = agentName === name
      ? `${name} (MCP server ${this.server})`
      : `${agentName} (tool ${name} of MCP server ${this.server})`;
    let client: Client;
    try {
      client = await this.#ready(ctx.signal);
    } catch (err) {
      // Nothing of this call has left the process: it may be sent again, whatever the tool.
      this.#remember(key, ctx.attempt);
      if (ctx.signal.aborted) throw err;
      throw new ToolError(
        "MCP_UNREACHABLE",
        `${what} could not be reached (${describeError(err)}); the request was not sent`,
        { transient: true, cause: err },
      );
    }
    this.#unsent.delete(key);
    if (!this.#listed.has(name)) throw this.#vanished(what);
    this.#inflight.set(key, ctx.signal);
    let result: CallToolResult;
    try {
      result = await client.callTool(
        { name, arguments: args as Record<string, unknown>, _meta: { [IDEMPOTENCY_KEY_META]: key } },
        undefined,
        // The runtime's own timeout ends the call through ctx.signal; the SDK's is a backstop past it.
        { signal: ctx.signal, timeout: (this.#opts.timeoutMs ?? DEFAULT_TIMEOUT_MS) + 5_000 },
      ) as CallToolResult;
    } catch (err) {
      if (ctx.signal.aborted) throw err;
      throw await this.#failure(err, client, name, what, ctx);
    } finally {
      this.#inflight.delete(key);
    }
    if (result.isError === true) {
      if (await this.#gone(client, name, ctx.signal)) throw this.#vanished(what);
      throw new ToolError("MCP_TOOL_ERROR", `${what} answered with an error: ${errorTextOf(result)}`, {
        transient: false,
      });
    }
    const replayed = (result._meta as Record<string, unknown> | undefined)?.[REPLAYED_META] === true;
    return { result: resultOf(result), remote: replayed ? "already_done" : "created" };
  }

  /**
   * What a `reconcile` of a tool not safe to re-send answers: `not_happened`
   * when this process knows the call's last request never left it, else
   * `unknown` (the call is flagged for a person).
   */
  reconcile(agentName: string, ctx: ReconcileContext): Reconciliation {
    if (this.#unsent.get(ctx.idempotencyKey) === ctx.attempts) {
      this.#unsent.delete(ctx.idempotencyKey);
      return { status: "not_happened" };
    }
    return {
      status: "unknown",
      reason: `MCP has no way to ask ${this.server} whether it acted on ${agentName}; declare the tool in ` +
        "'safeToResend' if the server honours the call's _meta idempotency key",
    };
  }

  #remember(key: string, attempt: number): void {
    this.#unsent.delete(key);
    this.#unsent.set(key, attempt);
    if (this.#unsent.size > MAX_UNSENT) this.#unsent.delete(this.#unsent.keys().next().value!);
  }

  #vanished(what: string): ToolError {
    return new ToolError(
      "MCP_TOOL_VANISHED",
      `${what} is no longer listed by its server: its tool list changed while this run was running, and the ` +
        "call was not sent",
      { transient: false },
    );
  }

  /** True when the server, listed again, no longer has `name` (a failed listing says nothing: false). */
  async #gone(client: Client, name: string, signal: AbortSignal): Promise<boolean> {
    try {
      await this.#list(client, signal, true);
    } catch (err) {
      this.#log.warn("mcp-list-failed", { server: this.server, error: describeError(err) });
      return false;
    }
    return !this.#listed.has(name);
  }

  /** The error a failed request becomes: whether it may have reached the server, and whether to retry. */
  async #failure(
    err: unknown,
    client: Client,
    name: string,
    what: string,
    ctx: ToolContext,
  ): Promise<ToolError> {
    const unknown = "the call's outcome is unknown";
    if (err instanceof McpError) {
      if (err.code === ErrorCode.ConnectionClosed) {
        await this.#drop(client, "the connection closed during a call");
        return new ToolError(
          "MCP_CONNECTION_LOST",
          `${what}: the connection closed before it answered; ${unknown}`,
          {
            transient: true,
            cause: err,
          },
        );
      }
      if (err.code === ErrorCode.RequestTimeout) {
        return new ToolError("MCP_TIMEOUT", `${what} did not answer in time; ${unknown}`, {
          transient: true,
          cause: err,
        });
      }
      if (REFUSALS.has(err.code)) {
        if (await this.#gone(client, name, ctx.signal)) return this.#vanished(what);
        return new ToolError("MCP_REFUSED", `${what} refused the call: ${err.message}`, {
          transient: false,
          cause: err,
        });
      }
      return new ToolError("MCP_SERVER_ERROR", `${what} failed: ${err.message}; ${unknown}`, {
        transient: true,
        cause: err,
      });
    }
    if (err instanceof StreamableHTTPError && err.code === 404) {
      // The server no longer knows this session (it restarted): it did not take the request.
      this.#remember(ctx.idempotencyKey, ctx.attempt);
      await this.#drop(client, "the server no longer knows the session");
      return new ToolError(
        "MCP_UNREACHABLE",
        `${what}: the server dropped the session; the request was not taken`,
        {
          transient: true,
          cause: err,
        },
      );
    }
    if (err instanceof StreamableHTTPError && err.code !== undefined) {
      const transient = isTransientStatus(err.code);
      return new ToolError(
        "MCP_HTTP",
        `${what} answered HTTP ${err.code}: ${err.message}${transient ? `; ${unknown}` : ""}`,
        {
          transient,
          cause: err,
        },
      );
    }
    if (couldNotConnect(err) || (err instanceof Error && err.message === "Not connected")) {
      // The SDK's own words for a transport that is closed: the request was never written.
      this.#remember(ctx.idempotencyKey, ctx.attempt);
      await this.#drop(client, describeError(err));
      return new ToolError(
        "MCP_UNREACHABLE",
        `${what} could not be reached (${describeError(err)}); the request was not sent`,
        {
          transient: true,
          cause: err,
        },
      );
    }
    await this.#drop(client, describeError(err));
    return new ToolError("MCP_CONNECTION_LOST", `${what}: ${describeError(err)}; ${unknown}`, {
      transient: true,
      cause: err,
    });
  }

  /** Closes the connection for good. */
  async close(): Promise<void> {
    this.#closed = true;
    const client = this.#client;
    this.#client = undefined;
    await client?.close().catch(() => {/* already gone */});
  }
}
