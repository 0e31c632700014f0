/**
 * The MCP server over stdio: newline-delimited JSON-RPC on a byte stream
 * pair (the process's stdin and stdout by default), as Claude Desktop and
 * other clients start a server. Unlike the SDK's own stdio transport, the
 * end of stdin closes the server, so a server whose client quit exits
 * instead of lingering.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/stdio"
import { deserializeMessage, serializeMessage } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/stdio.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import type { JSONRPCMessage } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";

/** The longest line read, in characters: a longer one is refused and the connection closed (10 MiB). */
export const STDIO_LINE_CHARS_MAX = 10 * 1024 * 1024;

/** A transport over a readable and a writable byte stream, one JSON-RPC message a line. */
export class LineTransport implements Transport {
  /** Set by the protocol. */
  onmessage?: (message: JSONRPCMessage) => void;
  /** Set by the protocol. */
  onclose?: () => void;
  /** Set by the protocol. */
  onerror?: (error: Error) => void;
  readonly #input: ReadableStream<Uint8Array>;
  readonly #writer: WritableStreamDefaultWriter<Uint8Array>;
  readonly #reading = new AbortController();
  #closed = false;
  /** Settles once the transport is closed (stdin ended, or {@link LineTransport.close}). */
  readonly closed: Promise<void>;
  #markClosed!: () => void;

  /** Reads `input`, writes `output`. */
  constructor(input: ReadableStream<Uint8Array>, output: WritableStream<Uint8Array>) {
    this.#input = input;
    this.#writer = output.getWriter();
    this.closed = new Promise((resolve) => this.#markClosed = resolve);
  }

  /** Starts reading lines. */
  start(): Promise<void> {
    void this.#read();
    return Promise.resolve();
  }

  async #read(): Promise<void> {
    let pending = "";
    try {
      const lines = this.#input.pipeThrough(new TextDecoderStream(), { signal: this.#reading.signal });
      for await (const chunk of lines) {
        pending += chunk;
        if (pending.length > STDIO_LINE_CHARS_MAX && !pending.includes("\n")) {
          throw new Error(`A line on stdin is longer than ${STDIO_LINE_CHARS_MAX} characters`);
        }
        // Bounded by the chunk: each pass takes one line off it.
        for (let at = pending.indexOf("\n"); at >= 0; at = pending.indexOf("\n")) {
          const line = pending.slice(0, at).replace(/\r$/, "");
          pending = pending.slice(at + 1);
          if (line.trim() === "") continue;
          try {
            this.onmessage?.(deserializeMessage(line));
          } catch (err) {
            this.onerror?.(err as Error);
          }
        }
      }
    } catch (err) {
      if (!this.#closed) this.onerror?.(err as Error);
    }
    await this.close();
  }

  /** Writes one message as a line. */
  async send(message: JSONRPCMessage): Promise<void> {
    if (this.#closed) return;
    await this.#writer.write(new TextEncoder().encode(serializeMessage(message)));
  }

  /** Stops reading and closes the output. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#reading.abort();
    await this.#writer.close().catch(() => {}); // closed by the other side already
    this.onclose?.();
    this.#markClosed();
  }
}
