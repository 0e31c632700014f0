/**
 * The small readings an MCP connection makes: a server's answer as the value
 * the model is shown or as the call's error text, an error's text with its
 * code said once, whether a failure says nothing was sent, what a listed
 * tool's fingerprint is; and two waits that end when a signal aborts.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import type {
  CallToolResult,
  McpError,
  Tool as ListedTool,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import type { Json } from "../agent/tools.ts";

/** The longest text of an `isError` answer kept in the call's error. */
const MAX_ERROR_TEXT = 4_000;

/** Waits `ms` (real time: a process is starting), or until `signal` aborts. */
export function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", stop, { once: true });
  });
}

/** `p`, or the reason `signal` aborts with, whichever comes first. */
export function raced<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    // Nobody waits for `p` now: a failure of it later (a connection refused) must not go unhandled, which
    // would end the process.
    p.catch(() => {});
    return Promise.reject(signal.reason);
  }
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
export function couldNotConnect(err: unknown): boolean {
  const refused = /connection refused|ECONNREFUSED|tcp connect error|dns error|failed to lookup address/i;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (refused.test(e.message)) return true;
  }
  return false;
}

/** A result the model is shown: the structured content, else the text, else the content as it came. */
export function resultOf(r: CallToolResult): Json {
  if (r.structuredContent !== undefined) return r.structuredContent as Json;
  const content: readonly { type: string; text?: string }[] = r.content ?? [];
  if (content.length > 0 && content.every((c) => c.type === "text")) {
    return content.map((c) => c.text ?? "").join("\n");
  }
  return content as unknown as Json;
}

/**
 * An MCP error's text, its code said once: the SDK puts `MCP error <code>: `
 * before the message, and a server that threw an `McpError` sent a message
 * that already began so, which the client wrapped again.
 */
export function mcpErrorText(err: McpError): string {
  const prefix = /^MCP error -?\d+: /;
  let text = err.message;
  while (prefix.test(text)) text = text.replace(prefix, "");
  return `MCP error ${err.code}: ${text}`;
}

/** The text of an `isError` answer, as the call's error. */
export function errorTextOf(r: CallToolResult): string {
  const content: readonly { type: string; text?: string }[] = r.content ?? [];
  const text = content.length > 0 && content.every((c) => c.type === "text")
    ? content.map((c) => c.text ?? "").join("\n")
    : JSON.stringify(r.structuredContent ?? content);
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}...` : text;
}

/** What a list says of each tool, to tell a changed tool from an unchanged one. */
export function fingerprint(t: ListedTool): string {
  return JSON.stringify([t.inputSchema, t.annotations ?? null]);
}
