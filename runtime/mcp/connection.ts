/**
 * One process's connection to one MCP server, for `mcp.ts`: connected when
 * the process lists the server's tools, again when a call finds it dropped
 * (listing the tools again first), and closed when the process stops. Each
 * call goes out with its idempotency key in `_meta`; whatever ends it is
 * sorted into what the executor needs to know: the server's answer (a
 * result, or an `isError` failure the model sees), a request that never left
 * (sent again for any tool), or an unknown outcome (sent again only for a
 * tool safe to re-send).
 *
 * @module
 */

// The SDK's subpaths are typed by its exports' "types" condition (no ".js"), and loaded by their files.
import { Client } from "npm:@modelcontextprotocol/sdk@1.32.2/client";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import { StreamableHTTPError } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
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
import type {
  jsonSchemaValidator,
  JsonSchemaValidatorResult,
} from "npm:@modelcontextprotocol/sdk@1.32.2/validation";
import { describeError, RuntimeError, ToolError } from "../base/errors.ts";
import { isTransientStatus } from "../base/http.ts";
import type { Logger } from "../base/log.ts";
import { describeBytes, type RefusedMessage, tooLargeOf } from "./limit.ts";
import { StdioClosedError } from "./stdio.ts";
import {
  couldNotConnect,
  errorTextOf,
  fingerprint,
  mcpErrorText,
  pause,
  raced,
  resultOf,
} from "./answers.ts";
import type { ReconcileContext, Reconciliation, ToolContext, ToolOutcome } from "../agent/tools.ts";

/** The `_meta` field of a `tools/call` request that holds the call's idempotency key (see `mcp.ts`). */
export const IDEMPOTENCY_KEY_META = "agent-runtime/idempotency-key";
/** The `_meta` field of a result by which a server says it answered a key it had seen (see `mcp.ts`). */
export const REPLAYED_META = "agent-runtime/idempotent-replayed";

/** What a connection gives each transport it opens. */
export interface McpLink {
  /** The signal of the call in flight under idempotency key `key` (an HTTP request of it ends with it). */
  signalOf: (key: string) => AbortSignal | undefined;
  /** Told of each message the transport refused for its size (`mcp-too-large`). */
  refused: (refused: RefusedMessage) => void;
}

/** What a connection is made with (`mcp.ts` builds it from the options). */
export interface McpConnectionOptions {
  /** The server's name in log lines and errors, until it gives its own. */
  server: string;
  /** True when the agent named the server: its own name is then not taken. */
  named: boolean;
  /** What a person fixes when the server cannot be reached: `url`, `command` or `transport`. */
  where: string;
  /** Opens a fresh transport, linked to this connection. */
  transport: (link: McpLink) => Transport;
  /** How the client introduces itself. */
  clientInfo: { name: string; version: string };
  /** The tools' call timeout (the runtime's own ends a call; the SDK's is a backstop past it). */
  callTimeoutMs: number;
  /** Each connect and listing's timeout. */
  connectTimeoutMs: number;
  /** Where its events go. */
  log: Logger;
}

/** Tries to connect and list before a process gives up starting, and the waits between them. */
const START_DELAYS_MS = [250, 1_000];
/** Pages of `tools/list` read at most (a server that pages forever is cut off). */
const MAX_LIST_PAGES = 100;
/** Calls whose request is known never to have left, remembered at most (the oldest are forgotten). */
const MAX_UNSENT = 10_000;
/** What an error says of a call whose request may have reached the server. */
const UNKNOWN_OUTCOME = "the call's outcome is unknown";
/** MCP's JSON-RPC codes that say the server refused the request without acting on it. */
const REFUSALS: ReadonlySet<number> = new Set([
  ErrorCode.ParseError,
  ErrorCode.InvalidRequest,
  ErrorCode.MethodNotFound,
  ErrorCode.InvalidParams,
]);
/** A validator of results that takes each as it came (see where the client is made). */
const ACCEPT_ANY: jsonSchemaValidator = {
  getValidator: <T>() => (input: unknown): JsonSchemaValidatorResult<T> => ({
    valid: true,
    data: input as T,
    errorMessage: undefined,
  }),
};

/**
 * One process's connection to one server: connected when the tools are
 * listed, again after it drops (with the tools listed again), and closed when
 * the process stops. Calls of its tools share it.
 */
export class McpConnection {
  /** The server's name in log lines and errors. */
  server: string;
  readonly #opts: McpConnectionOptions;
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

  /** A connection as `opts` describe it; nothing is opened until {@link start}. */
  constructor(opts: McpConnectionOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    this.server = opts.server;
    this.#connectTimeoutMs = opts.connectTimeoutMs;
  }

  /** Connects and lists the tools, trying three times; throws `MCP_UNREACHABLE` when it cannot. */
  async start(signal?: AbortSignal): Promise<ListedTool[]> {
    let last: unknown;
    for (let attempt = 0; attempt <= START_DELAYS_MS.length; attempt++) {
      if (attempt > 0) await pause(START_DELAYS_MS[attempt - 1], signal);
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
        `not known without them: start the server (or fix its ${this.#opts.where}), then start this ` +
        "process again",
      { cause: last },
    );
  }

  /** The connected client, connecting once however many calls ask at once. */
  #connect(): Promise<Client> {
    if (this.#client) return Promise.resolve(this.#client);
    if (this.#closed) return Promise.reject(new Error("the connection is closed: the process is stopping"));
    this.#connecting ??= (async () => {
      const client = new Client(this.#opts.clientInfo, {
        capabilities: {},
        // What a server answered is what it did: a result its own outputSchema refuses is journaled as
        // it came, not turned into a failure after the server acted.
        jsonSchemaValidator: ACCEPT_ANY,
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
        const link: McpLink = {
          signalOf: (key) => this.#inflight.get(key),
          refused: (r) =>
            this.#log.warn("mcp-too-large", {
              server: this.server,
              bytes: r.bytes,
              whole: r.whole,
              limit_bytes: r.limitBytes,
              request: r.id,
            }),
        };
        await client.connect(this.#opts.transport(link), {
          timeout: this.#connectTimeoutMs,
        });
      } catch (err) {
        await client.close().catch(() => {/* it never opened */});
        throw err;
      }
      if (this.#closed) {
        await client.close();
        throw new Error("the connection is closed: the process is stopping");
      }
      if (!this.#opts.named) this.server = client.getServerVersion()?.name || this.server;
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
        { signal: ctx.signal, timeout: this.#opts.callTimeoutMs + 5_000 },
      ) as CallToolResult;
    } catch (err) {
      if (ctx.signal.aborted) throw err;
      throw await this.#failure(err, client, name, what, ctx);
    } finally {
      this.#inflight.delete(key);
    }
    if (result.isError === true) {
      const text = errorTextOf(result);
      if (await this.#gone(client, name, ctx.signal)) throw this.#vanished(what, `with an error: ${text}`);
      throw new ToolError("MCP_TOOL_ERROR", `${what} answered with an error: ${text}`, { transient: false });
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

  /**
   * The failure of a call to a tool its server no longer lists: before the
   * request went out (it was not sent), or after the server `answered` it (an
   * error or a refusal, and the list, read again, no longer has the tool).
   */
  #vanished(what: string, answered?: string): ToolError {
    const sent = answered === undefined
      ? "the call was not sent"
      : `the call was sent, and the server answered it ${answered}`;
    return new ToolError(
      "MCP_TOOL_VANISHED",
      `${what} is no longer listed by its server (its tool list changed while this run was running): ${sent}`,
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
    if (err instanceof McpError) return await this.#refusedOrLost(err, client, name, what, ctx);
    if (err instanceof StreamableHTTPError && err.code === 404) {
      // The server no longer knows this session (it restarted): it did not take the request.
      this.#remember(ctx.idempotencyKey, ctx.attempt);
      await this.#drop(client, "the server no longer knows the session");
      return new ToolError(
        "MCP_UNREACHABLE",
        `${what}: the server dropped the session; the request was not taken`,
        { transient: true, cause: err },
      );
    }
    if (err instanceof StreamableHTTPError && err.code !== undefined) {
      const transient = isTransientStatus(err.code);
      return new ToolError(
        "MCP_HTTP",
        `${what} answered HTTP ${err.code}: ${err.message}${transient ? `; ${UNKNOWN_OUTCOME}` : ""}`,
        { transient, cause: err },
      );
    }
    if (
      couldNotConnect(err) || err instanceof StdioClosedError ||
      (err instanceof Error && err.message === "Not connected")
    ) {
      // A stdio server's closed stdin, or the SDK's own words for a transport that is closed: the request
      // was never written.
      this.#remember(ctx.idempotencyKey, ctx.attempt);
      await this.#drop(client, describeError(err));
      return new ToolError(
        "MCP_UNREACHABLE",
        `${what} could not be reached (${describeError(err)}); the request was not sent`,
        { transient: true, cause: err },
      );
    }
    if (Array.isArray((err as { issues?: unknown } | null)?.issues)) {
      // The server answered, but not with a tool result (the SDK's schema of one refused it).
      return new ToolError(
        "MCP_SERVER_ERROR",
        `${what} answered something that is not a tool result (${describeError(err)}); ${UNKNOWN_OUTCOME}`,
        { transient: true, cause: err },
      );
    }
    await this.#drop(client, describeError(err));
    const lost = `${what}: ${describeError(err)}; ${UNKNOWN_OUTCOME}`;
    return new ToolError("MCP_CONNECTION_LOST", lost, { transient: true, cause: err });
  }

  /**
   * The error an MCP error answer becomes: an answer over the size limit
   * (failed for good), a closed connection or a timeout (the outcome
   * unknown), a refusal (a tool the server no longer lists has vanished), or
   * the server's own failure.
   */
  async #refusedOrLost(
    err: McpError,
    client: Client,
    name: string,
    what: string,
    ctx: ToolContext,
  ): Promise<ToolError> {
    const tooLarge = tooLargeOf(err);
    if (tooLarge !== undefined) {
      const size = tooLarge.whole
        ? describeBytes(tooLarge.bytes)
        : `more than ${describeBytes(tooLarge.limitBytes)}`;
      return new ToolError(
        "TOOL_RESULT_TOO_LARGE",
        `${what} answered with ${size}, over this server's limit of ${describeBytes(tooLarge.limitBytes)} ` +
          "(maxResultBytes): the answer was not kept. The server did answer, so the call is failed for good " +
          "and not sent again; have the tool return less (a page, a summary), or raise maxResultBytes " +
          "in the server's mcpTools options (at most 64 MiB)",
        { transient: false, cause: err },
      );
    }
    if (err.code === ErrorCode.ConnectionClosed) {
      await this.#drop(client, "the connection closed during a call");
      return new ToolError(
        "MCP_CONNECTION_LOST",
        `${what}: the connection closed before it answered; ${UNKNOWN_OUTCOME}`,
        { transient: true, cause: err },
      );
    }
    if (err.code === ErrorCode.RequestTimeout) {
      return new ToolError("MCP_TIMEOUT", `${what} did not answer in time; ${UNKNOWN_OUTCOME}`, {
        transient: true,
        cause: err,
      });
    }
    if (REFUSALS.has(err.code)) {
      const text = mcpErrorText(err);
      if (await this.#gone(client, name, ctx.signal)) {
        return this.#vanished(what, `with a refusal: ${text}`);
      }
      return new ToolError("MCP_REFUSED", `${what} refused the call: ${text}`, {
        transient: false,
        cause: err,
      });
    }
    return new ToolError("MCP_SERVER_ERROR", `${what} failed: ${mcpErrorText(err)}; ${UNKNOWN_OUTCOME}`, {
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
