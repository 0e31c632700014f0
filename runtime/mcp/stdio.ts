/**
 * The stdio transport of `mcp.ts`: starts an MCP server as a command and
 * speaks JSON-RPC with it over its stdin and stdout, one message a line (the
 * MCP SDK's wire format, `serializeMessage`/`deserializeMessage`).
 *
 * It stands in for the SDK's `StdioClientTransport`, whose read buffer joins
 * every chunk to all that came before and looks for a newline in the whole
 * again (time that grows with the square of a message's size, spent without
 * yielding), and which closes the connection on a message past its 10 MiB
 * buffer, leaving the call's outcome unknown. Here each chunk is looked at
 * once as it arrives ({@link MessageLines}); a line is joined and parsed when
 * its newline comes; and a line past the limit is counted but not kept: its
 * bytes are read past while a small scan of its top level finds the id of
 * the request it answers (`TopLevelScan`), and that request is answered
 * with a refusal (`limit.ts`). The connection goes on.
 *
 * @module
 */

// The SDK's subpaths are typed by its exports' "types" condition (no ".js"), and loaded by their files.
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/stdio"
import { getDefaultEnvironment } from "npm:@modelcontextprotocol/sdk@1.32.2/client/stdio.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/stdio"
import { deserializeMessage, serializeMessage } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/stdio.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/transport"
import type { Transport } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/transport.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import type { JSONRPCMessage } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import {
  describeBytes,
  joined,
  type RefusedMessage,
  tooLargeAnswer,
  type TopLevel,
  TopLevelScan,
} from "./limit.ts";

const LF = 10;
const CR = 13;
const ENCODER = new TextEncoder();
/** Milliseconds a server is given to exit after its stdin closes, and again after SIGTERM. */
const EXIT_GRACE_MS = 2_000;

/**
 * Splits a byte stream into lines as chunks arrive, each chunk looked at
 * once: a line's pieces are held (not joined) until its newline comes, then
 * given to `onLine` whole. A line that grows past `limitBytes` is no longer
 * held: its bytes are counted and scanned (`TopLevelScan`) until its
 * newline, and `onOversized` is told its size and top level. Nothing past
 * `limitBytes` (plus the chunk in hand) is ever kept.
 */
export class MessageLines {
  readonly #limitBytes: number;
  readonly #onLine: (line: Uint8Array) => void;
  readonly #onOversized: (bytes: number, top: TopLevel) => void;
  #parts: Uint8Array[] = [];
  #held = 0;
  /** The scan of the line being read past, while one is. */
  #over?: TopLevelScan;

  /** Lines of at most `limitBytes` bytes (the newline not counted) go to `onLine`. */
  constructor(opts: {
    limitBytes: number;
    onLine: (line: Uint8Array) => void;
    onOversized: (bytes: number, top: TopLevel) => void;
  }) {
    this.#limitBytes = opts.limitBytes;
    this.#onLine = opts.onLine;
    this.#onOversized = opts.onOversized;
  }

  /** Bytes of the current line held now (for tests: never more than the limit). */
  get heldBytes(): number {
    return this.#over ? 0 : this.#held;
  }

  /** Takes the next chunk of the stream. */
  push(chunk: Uint8Array): void {
    let from = 0;
    while (from <= chunk.length) {
      const lf = chunk.indexOf(LF, from);
      const piece = chunk.subarray(from, lf === -1 ? chunk.length : lf);
      if (this.#over) {
        this.#over.feed(piece);
        this.#held += piece.length;
      } else if (this.#held + piece.length > this.#limitBytes) {
        const scan = new TopLevelScan();
        for (const part of this.#parts) scan.feed(part);
        scan.feed(piece);
        this.#over = scan;
        this.#parts = [];
        this.#held += piece.length;
      } else if (piece.length > 0) {
        this.#parts.push(piece);
        this.#held += piece.length;
      }
      if (lf === -1) return;
      this.#endLine();
      from = lf + 1;
    }
  }

  #endLine(): void {
    const over = this.#over;
    const held = this.#held;
    const parts = this.#parts;
    this.#over = undefined;
    this.#parts = [];
    this.#held = 0;
    if (over) {
      this.#onOversized(held, over.result());
      return;
    }
    if (held === 0) return;
    let line = joined(parts, held);
    if (line[line.length - 1] === CR) line = line.subarray(0, -1);
    if (line.length > 0) this.#onLine(line);
  }
}

/** A request that could not be written: the server's stdin is closed, so it did not get the request. */
export class StdioClosedError extends Error {
  /** Says why nothing could be written. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StdioClosedError";
  }
}

/** Options of {@link McpStdioTransport}. */
export interface McpStdioTransportOptions {
  /** The program. */
  command: string;
  /** Its arguments. */
  args?: readonly string[];
  /** Added to the few variables the MCP SDK passes on (`HOME`, `PATH`, ...); nothing else is inherited. */
  env?: Record<string, string>;
  /** Its working directory. */
  cwd?: string;
  /** Where its stderr goes: this process's (`inherit`, the default) or nowhere (`ignore`). */
  stderr?: "inherit" | "ignore";
  /** The most bytes one message (a line) may take; a longer one is refused. */
  limitBytes: number;
  /** Told of each message refused. */
  onRefused?: (refused: RefusedMessage) => void;
}

/** An MCP client transport to a server started as a command, spoken to over its stdin and stdout. */
export class McpStdioTransport implements Transport {
  /** Set by the MCP client: the connection closed (the server exited, or {@link close}). */
  onclose?: () => void;
  /** Set by the MCP client: something went wrong that does not close the connection. */
  onerror?: (error: Error) => void;
  /** Set by the MCP client: a message from the server. */
  onmessage?: (message: JSONRPCMessage) => void;
  readonly #opts: McpStdioTransportOptions;
  readonly #lines: MessageLines;
  readonly #decoder = new TextDecoder();
  #child?: Deno.ChildProcess;
  #writer?: WritableStreamDefaultWriter<Uint8Array>;
  #reader?: ReadableStreamDefaultReader<Uint8Array>;
  #reading?: Promise<void>;
  #closing?: Promise<void>;

  /** A transport to the server `opts` describe; nothing starts before {@link start}. */
  constructor(opts: McpStdioTransportOptions) {
    this.#opts = opts;
    this.#lines = new MessageLines({
      limitBytes: opts.limitBytes,
      onLine: (line) => this.#message(line),
      onOversized: (bytes, top) => this.#refuse(bytes, top),
    });
  }

  /** Starts the server; throws when the command cannot be started. */
  // deno-lint-ignore require-await
  async start(): Promise<void> {
    if (this.#child) throw new Error("McpStdioTransport already started");
    const o = this.#opts;
    const child = new Deno.Command(o.command, {
      args: [...(o.args ?? [])],
      // As the SDK's transport does: a small environment, not this process's (which holds its secrets).
      env: { ...getDefaultEnvironment(), ...o.env },
      clearEnv: true,
      cwd: o.cwd,
      stdin: "piped",
      stdout: "piped",
      stderr: o.stderr === "ignore" ? "null" : "inherit",
    }).spawn();
    this.#child = child;
    this.#writer = child.stdin.getWriter();
    this.#reader = child.stdout.getReader();
    this.#reading = this.#read(this.#reader);
  }

  /**
   * Writes `message` as one line to the server's stdin. Throws
   * {@link StdioClosedError} when the server cannot have got it (the
   * transport is closed, or the server's end of the pipe is).
   */
  async send(message: JSONRPCMessage): Promise<void> {
    const child = this.#child;
    if (!child || !this.#writer || this.#closing) {
      throw new StdioClosedError("the connection to the server is closed: nothing was written");
    }
    try {
      await this.#writer.write(ENCODER.encode(serializeMessage(message)));
    } catch (err) {
      // A pipe whose reader is gone takes nothing: not a byte of the line reached the server.
      if (!(err instanceof Deno.errors.BrokenPipe)) throw err;
      const exited = await exitsWithin(child.status, EXIT_GRACE_MS);
      throw new StdioClosedError(
        `the server ${exited ? "has exited" : "closed its stdin"}: nothing was written`,
        { cause: err },
      );
    }
  }

  /** Reads the server's stdout until it ends (the server exited) or the transport closes. */
  async #read(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<void> {
    try {
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        this.#lines.push(value);
      }
    } catch (err) {
      if (!this.#closing) this.onerror?.(err instanceof Error ? err : new Error(String(err)));
    }
    // The server closed its stdout (it exited): the connection is over.
    if (!this.#closing) void this.close();
  }

  #message(line: Uint8Array): void {
    try {
      this.onmessage?.(deserializeMessage(this.#decoder.decode(line)));
    } catch (err) {
      // A line that is not a JSON-RPC message is reported and skipped, as the SDK's transport does.
      this.onerror?.(err instanceof Error ? err : new Error(String(err)));
    }
  }

  #refuse(bytes: number, top: TopLevel): void {
    const found = { bytes, limitBytes: this.#opts.limitBytes, whole: true };
    const answers = top.response && !top.method && top.id !== undefined;
    this.#opts.onRefused?.({ ...found, ...(answers ? { id: top.id } : {}) });
    if (answers) {
      try {
        this.onmessage?.(tooLargeAnswer(top.id!, found));
      } catch (err) {
        this.onerror?.(err instanceof Error ? err : new Error(String(err)));
      }
      return;
    }
    this.onerror?.(
      new Error(
        `Dropped a message of ${describeBytes(bytes)} from the MCP server, over the limit of ${
          describeBytes(found.limitBytes)
        }${
          top.method ? " (a request or notification of the server's)" : " (no answer to a request of ours)"
        }`,
      ),
    );
  }

  /**
   * Closes stdin (a server exits when it ends), then waits for the server to
   * exit: SIGTERM after 2 s, SIGKILL after 2 s more. Calls `onclose` once.
   */
  close(): Promise<void> {
    const child = this.#child;
    if (!child) return Promise.resolve();
    this.#closing ??= (async () => {
      // Not awaited first: a write the server never reads would hold the close; killing it ends both.
      const stdinClosed = this.#writer?.close().catch(() => {/* the server is gone: its stdin with it */});
      for (const signal of ["SIGTERM", "SIGKILL"] as const) {
        if (await exitsWithin(child.status, EXIT_GRACE_MS)) break;
        try {
          child.kill(signal);
        } catch {
          break; // it exited meanwhile
        }
      }
      await child.status;
      await stdinClosed;
      // A grandchild may hold the pipe open after the server exits: stop reading rather than wait for it.
      await this.#reader?.cancel().catch(() => {/* already ended */});
      await this.#reading;
      this.onclose?.();
    })();
    return this.#closing;
  }
}

/** True when `status` settles within `ms`. */
async function exitsWithin(status: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  try {
    return await Promise.race([status.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}
