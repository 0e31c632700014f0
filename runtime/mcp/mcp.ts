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
 * import { defineAgent } from "../../mod.ts";
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
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import { StreamableHTTPClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import type { Tool as ListedTool } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { AjvJsonSchemaValidator } from "npm:@modelcontextprotocol/sdk@1.32.2/validation/ajv";
import type { AgentContext } from "../agent/agent.ts";
import { SystemClock } from "../base/clock.ts";
import { describeError, RuntimeError } from "../base/errors.ts";
import { Logger } from "../base/log.ts";
import {
  IDEMPOTENCY_KEY_META as KEY_META,
  McpConnection,
  type McpLink,
  REPLAYED_META as REPLAYED,
} from "./connection.ts";
import { boundedResponse, DEFAULT_MAX_RESULT_BYTES as DEFAULT_MAX } from "./limit.ts";
import { McpStdioTransport } from "./stdio.ts";
import {
  checkOptions,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_TIMEOUT_MS,
  describeServer,
  type McpServerOptions,
  type McpToolAnnotations,
  type McpToolInfo,
  type McpToolSelector,
  TOOL_NAME,
} from "./options.ts";

export type {
  McpCommonOptions,
  McpHttpOptions,
  McpServerOptions,
  McpStdioOptions,
  McpToolAnnotations,
  McpToolInfo,
  McpToolSelector,
  McpTransport,
  McpTransportOptions,
} from "./options.ts";
import { type ArgsSchema, defineTool, type Tool } from "../agent/tools.ts";

/**
 * The `_meta` field of every `tools/call` request that holds the call's
 * idempotency key, `<run_id>:<seq>`: the same on every re-send of the call,
 * across crashes. A server that stores its first answer under this key and
 * answers it again for a later request with the key acts once however often
 * the call is sent; tell the agent so with `safeToResend`.
 */
export const IDEMPOTENCY_KEY_META: "agent-runtime/idempotency-key" = KEY_META;

/**
 * The `_meta` field of a `tools/call` result by which a server may say that
 * it recognised the key and answered what it stored earlier (`true`): the
 * call is then confirmed as `already_done` rather than `created`. Optional;
 * the call's outcome is the same either way.
 */
export const REPLAYED_META: "agent-runtime/idempotent-replayed" = REPLAYED;

/**
 * The most bytes one message from a server may take unless its
 * `maxResultBytes` says otherwise: 10 MiB, what the MCP SDK's own stdio
 * client held. Past it, a call's answer fails the call for good with
 * `TOOL_RESULT_TOO_LARGE`.
 */
export const DEFAULT_MAX_RESULT_BYTES: number = DEFAULT_MAX;

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
 * An answer past `maxResultBytes` (10 MiB by default) is refused as it
 * arrives, never read whole, and fails the call for good too
 * (`TOOL_RESULT_TOO_LARGE`): the server answered, so it is not sent again.
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
 * import { defineAgent } from "../../mod.ts";
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
    const conn = new McpConnection({
      server: describeServer(opts),
      named: opts.name !== undefined,
      where: "url" in opts ? "url" : "command" in opts ? "command" : "transport",
      transport: (link) => transportOf(opts, link),
      clientInfo: opts.clientInfo ?? { name: "agent-runtime", version: "0.1.0" },
      callTimeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      connectTimeoutMs: opts.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
      log,
    });
    open.add(conn);
    const onStop = () => {
      open.delete(conn);
      void conn.close().catch(() => {/* the process is going; nothing to tell */});
    };
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
  const tools: Tool[] = [];
  const names = new Map<string, string>();
  for (const t of listed) {
    const info = infoOf(t);
    if (opts.include !== undefined && !selects(opts.include, info)) continue;
    const made = agentTool(conn, opts, t, { validator, names });
    if (typeof made === "string") log.warn("mcp-tool-skipped", { server, tool: t.name, reason: made });
    else tools.push(made);
  }
  for (const option of ["include", "safeToResend", "approval"] as const) {
    const selector = opts[option];
    if (!Array.isArray(selector)) continue;
    const unlisted = selector.filter((n) => !listed.some((t) => t.name === n));
    if (unlisted.length > 0) log.warn("mcp-names-unlisted", { server, option, names: unlisted.join(",") });
  }
  log.info("mcp-tools-listed", {
    server,
    tools: tools.map((t) => t.name).join(","),
    safe_to_resend: tools.filter((t) => t.idempotent).map((t) => t.name).join(",") || undefined,
    flagged_if_unknown: tools.filter((t) => !t.idempotent).map((t) => t.name).join(",") || undefined,
  });
  return tools;
}

/**
 * The agent's tool for the server's tool `t`, or why it is left out: a name
 * that is no agent tool's name, a tool only callable as an MCP task, an
 * inputSchema that cannot be compiled. Two server tools that would become
 * one agent tool refuse the server (`names`: agent tool → server tool).
 */
function agentTool(
  conn: McpConnection,
  opts: McpServerOptions,
  t: ListedTool,
  seen: { validator: AjvJsonSchemaValidator; names: Map<string, string> },
): Tool | string {
  const info = infoOf(t);
  // MCP names may hold '.', '/' and more; an agent's tool name is the chat-completions rule.
  const name = `${opts.prefix ?? ""}${t.name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
  if (!TOOL_NAME.test(name)) {
    return `its name as the agent's tool, ${JSON.stringify(name)}, is not 1-64 letters, digits, '_' or '-'`;
  }
  const other = seen.names.get(name);
  if (other !== undefined) {
    throw new RuntimeError(
      "MCP_INVALID",
      `Cannot use MCP server ${conn.server} as its tools ${JSON.stringify(other)} and ${
        JSON.stringify(t.name)
      } ` +
        `both become the agent's tool ${name}: leave one out with 'include'`,
    );
  }
  if (t.execution?.taskSupport === "required") {
    return "it can only be called as an MCP task, which this client does not do";
  }
  const schema: Record<string, unknown> = { ...(t.inputSchema as Record<string, unknown>) };
  delete schema.$schema;
  let check: ReturnType<AjvJsonSchemaValidator["getValidator"]>;
  try {
    check = seen.validator.getValidator(schema);
  } catch (err) {
    return `its inputSchema cannot be compiled: ${describeError(err)}`;
  }
  seen.names.set(name, t.name);
  const hinted = opts.trustHints === true &&
    (info.annotations?.readOnlyHint === true || info.annotations?.idempotentHint === true);
  const idempotent = selects(opts.safeToResend, info) || hinted;
  const args: ArgsSchema<Record<string, unknown>> = {
    safeParse: (input) => {
      const r = check(input);
      return r.valid
        ? { success: true, data: input as Record<string, unknown> }
        : { success: false, error: `${r.errorMessage} (the server's inputSchema)` };
    },
  };
  return defineTool({
    name,
    description: info.description ?? info.title ?? info.annotations?.title ??
      `Tool ${t.name} of ${conn.server}.`,
    args,
    parameters: schema,
    idempotent,
    timeoutMs: opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxAttempts: opts.maxAttempts,
    approval: selects(opts.approval, info),
    run: (a, ctx) => conn.call(t.name, name, a, ctx),
    // A call of a tool not safe to re-send is sent again only when this process knows its
    // last request never left: MCP offers no way to ask a server whether it acted.
    reconcile: idempotent ? undefined : (_a, ctx) => Promise.resolve(conn.reconcile(name, ctx)),
    reconcileTimeoutMs: 1_000,
  });
}

/**
 * A new transport of the kind `o` names. Over stdio and HTTP, a message past
 * `maxResultBytes` is refused as it arrives (`limit.ts`); over HTTP, each
 * call's request ends with the call.
 */
function transportOf(o: McpServerOptions, link: McpLink): Transport {
  if ("transport" in o) return o.transport();
  const limitBytes = o.maxResultBytes ?? DEFAULT_MAX;
  if ("command" in o) {
    return new McpStdioTransport({
      command: o.command,
      args: o.args,
      env: o.env,
      cwd: o.cwd,
      stderr: o.stderr ?? "inherit",
      limitBytes,
      onRefused: link.refused,
    });
  }
  const base = o.fetch;
  const send = async (url: string | URL, init?: RequestInit): Promise<Response> => {
    // A call's own signal ends its POST when the call times out, so no request outlives its call.
    const request = requestOfBody(init?.body);
    const callSignal = request.key === undefined ? undefined : link.signalOf(request.key);
    const signal = callSignal && init?.signal
      ? AbortSignal.any([init.signal, callSignal])
      : callSignal ?? init?.signal;
    const withSignal = { ...init, signal };
    const response = await (base ? base(new Request(url, withSignal)) : fetch(url, withSignal));
    return await boundedResponse(response, { limitBytes, requestId: request.id, onRefused: link.refused });
  };
  return new StreamableHTTPClientTransport(new URL(o.url), {
    requestInit: o.headers ? { headers: o.headers } : undefined,
    fetch: send,
  });
}

/** The id of the request a POST body holds, and the key a `tools/call` carries in its `_meta`. */
function requestOfBody(body: unknown): { id?: string | number; key?: string } {
  if (typeof body !== "string") return {};
  try {
    const message = JSON.parse(body);
    const id = message?.method !== undefined ? message.id : undefined;
    const key = message?.params?._meta?.[IDEMPOTENCY_KEY_META];
    return {
      ...(typeof id === "string" || typeof id === "number" ? { id } : {}),
      ...(typeof key === "string" ? { key } : {}),
    };
  } catch {
    return {};
  }
}
