/**
 * Response builders shared by the mock servers, including the deliberately
 * broken ones used by the fault knobs.
 *
 * @module
 */

/** A JSON response; `body` is serialised unless it is already a string. */
export function jsonResponse(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return new Response(text, { status, headers: { "content-type": "application/json", ...headers } });
}

/** A JSON error response of the shape `{ error, message }`. */
export function errorResponse(status: number, error: string, message: string): Response {
  return jsonResponse(status, { error, message });
}

/**
 * An RFC 9457 problem details response (`application/problem+json`) with
 * `type`, `title`, `status` and `detail`, plus `code` (a short stable name).
 */
export function problemResponse(
  status: number,
  code: string,
  title: string,
  detail: string,
  headers: Record<string, string> = {},
): Response {
  const body = { type: `https://mock-cloud.test/problems/${code}`, title, status, detail, code };
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/problem+json", ...headers },
  });
}

/**
 * An error in the OpenAI API's shape: `{"error": {"message", "type", "param", "code"}}`, what
 * the official clients parse.
 */
export function openAIErrorResponse(
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): Response {
  const type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error";
  return jsonResponse(status, { error: { message, type, param: null, code } }, headers);
}

/** A 200 whose body is not JSON, like a proxy's error page. */
export function garbageResponse(): Response {
  return new Response("<html>oops", { status: 200, headers: { "content-type": "text/html" } });
}

/** The error a {@linkcode droppedResponse} body fails with. */
export class ConnectionDroppedError extends Error {
  /** @param message why the answer was lost */
  constructor(message = "connection dropped") {
    super(message);
    this.name = "ConnectionDroppedError";
  }
}

/**
 * A response whose body errors at once: over HTTP the connection breaks
 * mid-response, and an in-process caller gets an error when reading the body.
 * The status is kept so that only reading the body reveals the loss.
 */
export function droppedResponse(status: number): Response {
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.error(new ConnectionDroppedError());
    },
  });
  return new Response(body, { status, headers: { "content-type": "application/json" } });
}
