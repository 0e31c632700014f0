/**
 * What a user gives {@link mcpTools} (mcp.ts) for one MCP server, and the
 * checks that refuse options that cannot work, all problems at once.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
import { describeValue, RuntimeError } from "../base/errors.ts";
import type { FetchLike } from "../model/planner.ts";
import { describeBytes, MAX_RESULT_BYTES_LIMIT } from "./limit.ts";

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
  /**
   * The most bytes one message from the server may take as it arrives (over
   * stdio a line, over HTTP a JSON body or one event of a stream): a larger
   * answer to a call is refused as it arrives, without being kept, and fails
   * the call for good with `TOOL_RESULT_TOO_LARGE` (the model is told; the
   * call is not sent again). Default {@link DEFAULT_MAX_RESULT_BYTES}
   * (10 MiB), at most 64 MiB (what the store keeps in one value). Not for
   * `transport`, which bounds its own messages.
   */
  maxResultBytes?: number;
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

const PREFIX = /^[A-Za-z0-9_-]{0,63}$/;
export const TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
export const DEFAULT_TIMEOUT_MS = 30_000;
export const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/** Every problem with `o`, thrown together (`MCP_INVALID`). */
export function checkOptions(o: McpServerOptions): void {
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
  const max = given.maxResultBytes;
  if (max !== undefined && !(Number.isSafeInteger(max) && max >= 1 && max <= MAX_RESULT_BYTES_LIMIT)) {
    problems.push(
      `'maxResultBytes' must be an integer from 1 to ${MAX_RESULT_BYTES_LIMIT} (${
        describeBytes(MAX_RESULT_BYTES_LIMIT)
      }, the most the store keeps in one value): current value is ${describeValue(max)}`,
    );
  }
  if (max !== undefined && given.transport !== undefined) {
    problems.push(
      "'maxResultBytes' is for a 'command' or 'url' server: a 'transport' bounds its own messages",
    );
  }
  if (problems.length > 0) {
    throw new RuntimeError(
      "MCP_INVALID",
      `Cannot use MCP server ${describeServer(given)} as ${problems.join("; ")}`,
    );
  }
}

/** The server as the options name it, before it has said its own name. */
export function describeServer(o: Partial<McpStdioOptions & McpHttpOptions>): string {
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
