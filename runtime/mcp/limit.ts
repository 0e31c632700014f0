/**
 * The size limit on what an MCP server sends this process, for `mcp.ts`: a
 * message past `maxResultBytes` is refused as it arrives, its bytes counted
 * and dropped rather than kept, and the request it answered is answered here
 * instead, with a JSON-RPC error that says so ({@link tooLargeAnswer}). The
 * MCP client then rejects that request as it would any error answer, and
 * `connection.ts` recognises the refusal ({@link tooLargeOf}) and fails
 * the call for good: the server did answer, so the outcome is known.
 *
 * Over stdio the limit is applied line by line (`stdio.ts`); over
 * streamable HTTP to each response body (a JSON answer, whose request is
 * known from the request's body) or each event of a response stream
 * ({@link boundedResponse}). A line or an event past the limit is read past
 * with {@link TopLevelScan}, which finds the id of the request it answered
 * without keeping its bytes.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/shared/mediaType"
import { mediaTypeEssence } from "npm:@modelcontextprotocol/sdk@1.32.2/shared/mediaType.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import type {
  JSONRPCErrorResponse,
  McpError,
  RequestId,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { MAX_JSON_BYTES } from "../base/storable.ts";

/**
 * The most bytes one message from an MCP server may take by default (10 MiB):
 * what the MCP SDK's own stdio client buffered, so an answer that arrived
 * whole before still does. A model is seldom shown more than a few MB.
 */
export const DEFAULT_MAX_RESULT_BYTES = 10 * 1024 * 1024;

/** The largest limit that may be set: the most JSON the store keeps in one value (64 MiB). */
export const MAX_RESULT_BYTES_LIMIT = MAX_JSON_BYTES;

/**
 * The JSON-RPC error code of an answer refused here. In the range JSON-RPC
 * leaves to implementations; a refusal is known by its `data` too
 * ({@link TOO_LARGE_DATA}), since a server may use the same code.
 */
export const TOO_LARGE_CODE = -32070;

/** The field of the refusal's `data` that holds what was refused ({@link TooLarge}). */
export const TOO_LARGE_DATA = "agent-runtime/answer-too-large";

/** The longest text of an HTTP error answer read (the rest is not read). */
const ERROR_TEXT_BYTES = 16 * 1024;

/** An answer refused for its size. */
export interface TooLarge {
  /** Bytes counted: the whole message's when `whole`, else how many arrived before reading stopped. */
  bytes: number;
  /** The limit it went past. */
  limitBytes: number;
  /** True when the message was counted to its end; false when reading stopped past the limit. */
  whole: boolean;
}

/** A message refused by the limit, as the transport reports it (for a log line). */
export interface RefusedMessage extends TooLarge {
  /** The request it answered, when it was an answer and its id could be read; else undefined. */
  id?: RequestId;
}

/** `bytes` in words a person reads: `12,000,045 bytes (11.4 MiB)`. */
export function describeBytes(bytes: number): string {
  const mib = bytes / (1024 * 1024);
  return `${bytes.toLocaleString("en-US")} bytes${mib >= 1 ? ` (${mib.toFixed(1)} MiB)` : ""}`;
}

/** The error answer given, in the server's place, to request `id` whose answer was refused. */
export function tooLargeAnswer(id: RequestId, found: TooLarge): JSONRPCErrorResponse {
  const size = found.whole ? describeBytes(found.bytes) : `more than ${describeBytes(found.limitBytes)}`;
  return {
    jsonrpc: "2.0",
    id,
    error: {
      code: TOO_LARGE_CODE,
      message: `the server's answer was ${size}, over the limit of ${
        describeBytes(found.limitBytes)
      } (maxResultBytes); it was not kept`,
      data: { [TOO_LARGE_DATA]: { ...found } },
    },
  };
}

/** What an MCP error says was refused, when it is the refusal {@link tooLargeAnswer} made; else undefined. */
export function tooLargeOf(err: McpError): TooLarge | undefined {
  if (err.code !== TOO_LARGE_CODE) return undefined;
  const found = (err.data as Record<string, unknown> | undefined)?.[TOO_LARGE_DATA] as
    | Partial<TooLarge>
    | undefined;
  if (typeof found?.bytes !== "number" || typeof found.limitBytes !== "number") return undefined;
  return { bytes: found.bytes, limitBytes: found.limitBytes, whole: found.whole === true };
}

/** Options of {@link boundedResponse}. */
export interface BoundedResponseOptions {
  /** The most bytes one answer (a JSON body, an event of a stream) may take. */
  limitBytes: number;
  /**
   * The id of the request a JSON answer answers (from the request's body);
   * undefined for a GET or a notification. An event stream's answers carry
   * their own.
   */
  requestId?: RequestId;
  /** Told of each answer refused. */
  onRefused?: (refused: RefusedMessage) => void;
}

/**
 * `response` with its body bounded as the MCP SDK's streamable-HTTP client
 * will read it: an error answer's text cut at 16 KiB; a JSON answer read up
 * to the limit (past it, reading stops and the answer becomes
 * {@link tooLargeAnswer}); an event stream passed on event by event
 * ({@link boundedEvents}), an event past the limit dropped as it arrives and
 * the request it answered refused in its place. Any other body is left as it
 * is (the SDK does not read it).
 */
export async function boundedResponse(response: Response, opts: BoundedResponseOptions): Promise<Response> {
  const body = response.body;
  if (body === null) return response;
  const headers = new Headers(response.headers);
  headers.delete("content-length");
  const init = { status: response.status, statusText: response.statusText, headers };
  if (!response.ok) {
    const head = await readAtMost(body, ERROR_TEXT_BYTES);
    return new Response(bodyOf(head.whole ? head.bytes : head.bytes.subarray(0, ERROR_TEXT_BYTES)), init);
  }
  const type = mediaTypeEssence(response.headers.get("content-type") ?? undefined);
  if (type === "application/json" && opts.requestId !== undefined) {
    const read = await readAtMost(body, opts.limitBytes);
    if (read.whole) return new Response(bodyOf(read.bytes), init);
    const found = { bytes: read.bytes.length, limitBytes: opts.limitBytes, whole: false };
    opts.onRefused?.({ ...found, id: opts.requestId });
    headers.set("content-type", "application/json");
    return new Response(JSON.stringify(tooLargeAnswer(opts.requestId, found)), init);
  }
  if (type === "text/event-stream") return new Response(body.pipeThrough(boundedEvents(opts)), init);
  return response;
}

/** Bytes read from a stream, as a body (they are never a view of shared memory). */
function bodyOf(bytes: Uint8Array): BodyInit {
  return bytes as Uint8Array<ArrayBuffer>;
}

/**
 * The bytes of `body` up to `limit`: all of them (`whole`), or, once more
 * arrived, what did (at least `limit + 1` bytes) with the rest left unread.
 */
async function readAtMost(
  body: ReadableStream<Uint8Array>,
  limit: number,
): Promise<{ bytes: Uint8Array; whole: boolean }> {
  const reader = body.getReader();
  const parts: Uint8Array[] = [];
  let total = 0;
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return { bytes: joined(parts, total), whole: true };
      parts.push(value);
      total += value.length;
      if (total > limit) {
        await reader.cancel();
        return { bytes: joined(parts, total), whole: false };
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/** The `parts` (of `total` bytes) as one array; the part itself when there is one. */
export function joined(parts: readonly Uint8Array[], total: number): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const LF = 10;
const CR = 13;
const QUOTE = 34;
const BACKSLASH = 92;
const ENCODER = new TextEncoder();

/** What the top level of a refused message said: enough to answer the request it answered. */
export interface TopLevel {
  /** Its `id`, when it had a top-level one that is a string or a number. */
  id?: RequestId;
  /** It had a top-level `result` or `error` (a response). */
  response: boolean;
  /** It had a top-level `method` (a request or a notification of the server's). */
  method: boolean;
}

/** Top-level keys whose presence is noted; any other is skipped unread. */
const NOTED = new Set(["id", "result", "error", "method"]);
/** Bytes of a top-level key, and of the id's value, kept at most (an id is short). */
const KEY_BYTES_MAX = 16;
const ID_BYTES_MAX = 256;

/**
 * A scan of a JSON text's top level as its bytes go by, each byte looked at
 * once and none kept but the top-level keys' names and the `id`'s value: it
 * tracks only nesting and strings below the top. What {@link MessageLines}
 * runs over a line too long to keep.
 */
export class TopLevelScan {
  #depth = 0;
  #inString = false;
  #escaped = false;
  /** At the top level, the next string is a key. */
  #expectKey = false;
  /** The bytes of the top-level key being read (null when none is). */
  #key: number[] | null = null;
  #lastKey = "";
  /** The bytes of the `id`'s value being read (null when it is not being read). */
  #id: number[] | null = null;
  #idText?: string;
  readonly #keys = new Set<string>();

  /** Reads the next bytes of the text. */
  feed(bytes: Uint8Array): void {
    // Where the next quote and backslash are, found once per stretch of a string (never behind `i`).
    let quoteAt = -1;
    let backslashAt = -1;
    for (let i = 0; i < bytes.length; i++) {
      if (this.#inString && !this.#escaped && this.#key === null && this.#id === null) {
        // Inside a string nothing but its end matters: go to the next quote or backslash.
        if (quoteAt < i) quoteAt = indexOr(bytes, QUOTE, i);
        if (backslashAt < i) backslashAt = indexOr(bytes, BACKSLASH, i);
        i = Math.min(quoteAt, backslashAt);
        if (i === bytes.length) break;
      }
      const b = bytes[i];
      if (this.#id !== null && this.#id.length < ID_BYTES_MAX) this.#id.push(b);
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (b === BACKSLASH) this.#escaped = true;
        else if (b === QUOTE) {
          this.#inString = false;
          if (this.#key !== null) this.#endKey();
        } else if (this.#key !== null && this.#key.length <= KEY_BYTES_MAX) this.#key.push(b);
        continue;
      }
      switch (b) {
        case QUOTE:
          this.#inString = true;
          if (this.#depth === 1 && this.#expectKey) {
            this.#key = [];
            this.#expectKey = false;
          }
          break;
        case 123: // {
        case 91: // [
          this.#depth++;
          if (this.#depth === 1) this.#expectKey = b === 123;
          break;
        case 125: // }
        case 93: // ]
          if (this.#depth === 1) this.#endValue(true);
          this.#depth--;
          break;
        case 58: // :
          if (this.#depth === 1 && this.#lastKey === "id") this.#id = [];
          break;
        case 44: // ,
          if (this.#depth === 1) {
            this.#endValue(true);
            this.#expectKey = true;
          }
          break;
      }
    }
  }

  #endKey(): void {
    this.#lastKey = this.#key!.length > KEY_BYTES_MAX ? "" : String.fromCharCode(...this.#key!);
    if (NOTED.has(this.#lastKey)) this.#keys.add(this.#lastKey);
    this.#key = null;
  }

  /** The top-level value ends (at `,` or the closing bracket, which `dropLast` leaves out of the id). */
  #endValue(dropLast: boolean): void {
    if (this.#id !== null) {
      const bytes = dropLast && this.#id.length < ID_BYTES_MAX ? this.#id.slice(0, -1) : this.#id;
      this.#idText = String.fromCharCode(...bytes).trim();
      this.#id = null;
    }
    this.#lastKey = "";
  }

  /** What the top level said, read so far. */
  result(): TopLevel {
    let id: RequestId | undefined;
    if (this.#idText !== undefined) {
      try {
        const v = JSON.parse(this.#idText);
        if (typeof v === "string" || (typeof v === "number" && Number.isFinite(v))) id = v;
      } catch {
        id = undefined; // not an id a request could have: nothing to answer
      }
    }
    return {
      ...(id === undefined ? {} : { id }),
      response: this.#keys.has("result") || this.#keys.has("error"),
      method: this.#keys.has("method"),
    };
  }
}

/** The index of the first `byte` in `bytes` from `from`, or `bytes.length` when there is none. */
function indexOr(bytes: Uint8Array, byte: number, from: number): number {
  const at = bytes.indexOf(byte, from);
  return at === -1 ? bytes.length : at;
}

/**
 * A stream of server-sent events passed on an event at a time: each event's
 * bytes are held until the blank line that ends it, and an event past the
 * limit is dropped as its bytes arrive (counted and scanned for its top
 * level, not kept). When the dropped event was an answer to a request, the
 * request is answered in its place with {@link tooLargeAnswer}, as an event
 * of its own; the events after it go on.
 */
export function boundedEvents(opts: BoundedResponseOptions): TransformStream<Uint8Array, Uint8Array> {
  let held: Uint8Array[] = [];
  let bytes = 0;
  /** The scan of the event being dropped, while one is. */
  let over: TopLevelScan | undefined;
  /** The current line has a character other than CR (it is not the blank line that ends an event). */
  let lineHasText = false;
  const take = (part: Uint8Array) => {
    if (part.length === 0) return;
    bytes += part.length;
    if (over) {
      over.feed(part);
    } else if (bytes > opts.limitBytes) {
      // The event's lines (`event:`, `id:`, `data: {...}`) hold no quote or bracket before its JSON.
      over = new TopLevelScan();
      for (const h of held) over.feed(h);
      over.feed(part);
      held = [];
    } else {
      held.push(part);
    }
  };
  const endEvent = (out: TransformStreamDefaultController<Uint8Array>) => {
    if (over) {
      const top = over.result();
      const found = { bytes, limitBytes: opts.limitBytes, whole: true };
      const answers = top.response && !top.method && top.id !== undefined;
      opts.onRefused?.({ ...found, ...(answers ? { id: top.id } : {}) });
      if (answers) {
        out.enqueue(
          ENCODER.encode(`event: message\ndata: ${JSON.stringify(tooLargeAnswer(top.id!, found))}\n\n`),
        );
      }
    } else {
      for (const part of held) out.enqueue(part);
    }
    held = [];
    bytes = 0;
    over = undefined;
  };
  return new TransformStream({
    transform(chunk, out) {
      let from = 0;
      while (from < chunk.length) {
        const lf = chunk.indexOf(LF, from);
        const end = lf === -1 ? chunk.length : lf;
        // A line of text has a byte other than one trailing CR before its LF.
        if (end - from > (chunk[end - 1] === CR ? 1 : 0)) lineHasText = true;
        take(chunk.subarray(from, lf === -1 ? end : lf + 1));
        if (lf === -1) break;
        const blank = !lineHasText;
        lineHasText = false;
        if (blank) endEvent(out);
        from = lf + 1;
      }
    },
    flush(out) {
      // A stream that ends inside an event: what was held goes on (the parser drops an unended event).
      if (bytes > 0) endEvent(out);
    },
  });
}
