/**
 * The UI message stream's wire: its headers and its framing (the `ai`
 * package's `ui-message-stream-headers.ts` and
 * `json-to-sse-transform-stream.ts`): each chunk `data: <JSON>\n\n`, the end
 * `data: [DONE]\n\n`.
 *
 * @module
 */

import type { UIChunk } from "./chunks.ts";

/** The headers of a UI message stream response. */
export const UI_MESSAGE_STREAM_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  "connection": "keep-alive",
  "x-vercel-ai-ui-message-stream": "v1",
  "x-accel-buffering": "no",
});

/** One chunk as a server-sent event. */
export function sseChunk(chunk: UIChunk): string {
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

/** The stream's last event. */
export const SSE_DONE = "data: [DONE]\n\n";

/**
 * A response streaming `chunks` (ended with `[DONE]` when they end); the
 * iteration is ended when the reader goes away.
 */
export function uiMessageStreamResponse(
  chunks: AsyncGenerator<UIChunk, void, undefined>,
  headers: Record<string, string> = {},
): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const got = await chunks.next();
      if (got.done) {
        controller.enqueue(encoder.encode(SSE_DONE));
        controller.close();
        return;
      }
      controller.enqueue(encoder.encode(sseChunk(got.value)));
    },
    async cancel() {
      await chunks.return(undefined);
    },
  });
  return new Response(body, { headers: { ...UI_MESSAGE_STREAM_HEADERS, ...headers } });
}
