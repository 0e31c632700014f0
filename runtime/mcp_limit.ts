/**
 * The size limit on what an MCP server sends this process, for `mcp.ts`: a
 * message past `maxResultBytes` is refused as it arrives, its bytes counted
 * and dropped rather than kept, and the request it answered is answered here
 * instead, with a JSON-RPC error that says so ({@link tooLargeAnswer}). The
 * MCP client then rejects that request as it would any error answer, and
 * `mcp_connection.ts` recognises the refusal ({@link tooLargeOf}) and fails
 * the call for good: the server did answer, so the outcome is known.
 *
 * Over stdio the limit is applied line by line (`mcp_stdio.ts`); over
 * streamable HTTP to each response body (a JSON answer) or each event of a
 * response stream ({@link boundedResponse}), the answer's request known from
 * the request body.
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
import { MAX_JSON_BYTES } from "./store/storable.ts";

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
  /** The id of the request the response answers (from its body); undefined for a GET or a notification. */
  requestId?: RequestId;
  /** Told of each answer refused. */
  onRefused?: (refused: RefusedMessage) => void;
}

/**
 * `response` with its body bounded as the MCP SDK's streamable-HTTP client
 * will read it: an error answer's text cut at 16 KiB; a JSON answer read up
 * to the limit (past it, reading stops and the answer becomes
 * {@link tooLargeAnswer}); an event stream passed on event by event, an event
 * past the limit dropped as it arrives (and, for a POST's stream, the
 * refusal given in its place). Any other body is left as it is (the SDK
 * does not read it).
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
const ENCODER = new TextEncoder();

/**
 * A stream of server-sent events passed on an event at a time: each event's
 * bytes are held until the blank line that ends it, and an event past the
 * limit is dropped as its bytes arrive (counted, not kept). For a POST's
 * stream the first dropped event is answered in the request's place with
 * {@link tooLargeAnswer}, as an event of its own.
 */
export function boundedEvents(opts: BoundedResponseOptions): TransformStream<Uint8Array, Uint8Array> {
  let held: Uint8Array[] = [];
  let bytes = 0;
  let over = false;
  let answered = false;
  /** The current line has a character other than CR (it is not the blank line that ends an event). */
  let lineHasText = false;
  const take = (part: Uint8Array) => {
    if (part.length === 0) return;
    bytes += part.length;
    if (over) return;
    if (bytes > opts.limitBytes) {
      over = true;
      held = [];
    } else {
      held.push(part);
    }
  };
  const endEvent = (out: TransformStreamDefaultController<Uint8Array>) => {
    if (over) {
      const found = { bytes, limitBytes: opts.limitBytes, whole: true };
      opts.onRefused?.({ ...found, ...(opts.requestId === undefined ? {} : { id: opts.requestId }) });
      if (opts.requestId !== undefined && !answered) {
        answered = true;
        out.enqueue(
          ENCODER.encode(
            `event: message\ndata: ${JSON.stringify(tooLargeAnswer(opts.requestId, found))}\n\n`,
          ),
        );
      }
    } else {
      for (const part of held) out.enqueue(part);
    }
    held = [];
    bytes = 0;
    over = false;
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
