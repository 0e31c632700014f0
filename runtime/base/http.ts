/**
 * HTTP conventions the runtime's clients share with users' tools: which
 * statuses are worth asking again, the `Retry-After` header, the server's own
 * error message inside an error body, extra headers and query parameters from
 * settings, and the quoted `Idempotency-Key` of the IETF draft.
 *
 * @module
 */

/**
 * True for HTTP statuses worth sending again under the same idempotency key:
 * 408, 409, 429 and 5xx. A 409 is the Idempotency-Key draft's "a request with
 * this key is still being processed": the first request may yet succeed, so
 * the answer is to wait and ask again, never to give up on the resource.
 *
 * @example
 * ```ts
 * import { isTransientStatus } from "./http.ts";
 * console.log(isTransientStatus(409), isTransientStatus(422)); // true false
 * ```
 */
export function isTransientStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/** The longest `Retry-After` honoured as given; a later one is capped by the retry policy. */
const RETRY_AFTER_MAX_MS = 24 * 3_600_000;

/**
 * Parses a `Retry-After` header (RFC 9110: delay-seconds or an HTTP date) into
 * milliseconds from `nowMs`. Returns `undefined` when the header is absent or
 * malformed; a date in the past is 0.
 *
 * @example
 * ```ts
 * import { parseRetryAfter } from "./http.ts";
 * console.log(parseRetryAfter("3")); // 3000
 * const now = Date.parse("2030-01-01T00:00:00Z");
 * console.log(parseRetryAfter("Tue, 01 Jan 2030 00:00:05 GMT", now)); // 5000
 * ```
 */
export function parseRetryAfter(
  value: string | null | undefined,
  nowMs: number = Date.now(),
): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (text === "") return undefined;
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, RETRY_AFTER_MAX_MS);
  // Not in RFC 9110, but some servers send fractional seconds; read them rather than drop them.
  if (/^\d+\.\d+$/.test(text)) return Math.min(Math.ceil(Number(text) * 1000), RETRY_AFTER_MAX_MS);
  // An HTTP date names a weekday; a bare number with a sign or unit is malformed, not a date.
  if (!/[A-Za-z]{3}/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.min(Math.max(0, at - nowMs), RETRY_AFTER_MAX_MS);
}

/**
 * The server's own message inside an error body, as the server families put
 * it: OpenAI, Azure, vLLM, llama.cpp, LiteLLM and Ollama's compatible API
 * (`{"error": {"message"}}`), Ollama's native API (`{"error": "..."}`), older
 * vLLM (`{"object": "error", "message"}`), FastAPI-style `{"detail"}` and
 * problem details (`{"title", "detail"}`). `undefined` when there is none.
 */
export function serverErrorMessage(text: string): string | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) return undefined;
  const b = body as Record<string, unknown>;
  const error = b.error;
  if (typeof error === "string" && error !== "") return error;
  if (error !== null && typeof error === "object") {
    const message = (error as Record<string, unknown>).message;
    if (typeof message === "string" && message !== "") return message;
  }
  if (typeof b.message === "string" && b.message !== "") return b.message;
  if (typeof b.detail === "string" && b.detail !== "") {
    return typeof b.title === "string" && b.title !== "" ? `${b.title}: ${b.detail}` : b.detail;
  }
  if (typeof b.title === "string" && b.title !== "") return b.title;
  return undefined;
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Parses extra headers or query parameters given in a setting: a JSON object
 * of strings (`{"api-version": "2024-10-21"}`) or `k=v` pairs separated by
 * commas (`api-version=2024-10-21,foo=bar`). Header names must be HTTP tokens
 * and no value may hold a line break. Throws a `TypeError` saying what is
 * wrong (without echoing values, which may be secrets).
 *
 * @example
 * ```ts
 * import { parseKeyValues } from "./http.ts";
 * console.log(parseKeyValues("api-version=2024-10-21,x=1", "query"));
 * // { "api-version": "2024-10-21", x: "1" }
 * ```
 */
export function parseKeyValues(raw: string, kind: "headers" | "query"): Record<string, string> {
  const text = raw.trim();
  const out: Record<string, string> = {};
  if (text.startsWith("{")) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new TypeError("it starts with '{' but is not a JSON object");
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new TypeError("it is not a JSON object");
    }
    for (const [k, v] of Object.entries(parsed)) {
      if (typeof v !== "string") throw new TypeError(`the value of ${JSON.stringify(k)} is not a string`);
      out[k] = v;
    }
  } else if (text !== "") {
    for (const pair of text.split(",")) {
      const eq = pair.indexOf("=");
      if (eq <= 0) {
        throw new TypeError(
          `${JSON.stringify(pair.slice(0, 40))} is not name=value (use a JSON object for values with commas)`,
        );
      }
      out[pair.slice(0, eq).trim()] = pair.slice(eq + 1).trim();
    }
  }
  for (const [k, v] of Object.entries(out)) {
    if (k === "") throw new TypeError("a name is empty");
    if (kind === "headers" && !HEADER_NAME.test(k)) {
      throw new TypeError(`${JSON.stringify(k)} is not a valid header name`);
    }
    if (/[\r\n\0]/.test(v)) throw new TypeError(`the value of ${JSON.stringify(k)} holds a line break`);
  }
  return out;
}

/**
 * The `Idempotency-Key` header value for `key`, as the IETF draft defines it:
 * a Structured Field string, in double quotes, with `\` and `"` escaped.
 *
 * @example
 * ```ts
 * import { idempotencyKeyHeader } from "./http.ts";
 * const headers = { "Idempotency-Key": idempotencyKeyHeader("run1:0") }; // "\"run1:0\""
 * ```
 */
export function idempotencyKeyHeader(key: string): string {
  if (!/^[\x20-\x7e]*$/.test(key)) {
    throw new TypeError(
      `An Idempotency-Key must be printable ASCII (a Structured Field string): current value is ${
        JSON.stringify(key)
      }`,
    );
  }
  return `"${key.replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`;
}
