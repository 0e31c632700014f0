/**
 * An AI SDK model's streamed answer (`doStream`) gathered into the result
 * `doGenerate` would have given, so the adapter maps both the same way: text
 * and reasoning parts joined by id in the order they started, tool calls and
 * provider results as the stream states them whole, the finish reason, usage
 * and warnings. Only siblings import this file.
 *
 * @module
 */

import { ModelError } from "../base/errors.ts";
import type { GenerateResult } from "./_ai_sdk_wire.ts";

type Part = Record<string, unknown>;

function isRecord(value: unknown): value is Part {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads a `doStream` result's parts to the end, passing each piece of answer
 * text to `onDelta`, and returns the result as `doGenerate` shapes it. A
 * stream's `error` part is thrown (the adapter classifies it as it does a
 * thrown error); a stream that ends without its `finish` part is a transient
 * `MODEL_UNREACHABLE` (the answer was lost on the way).
 */
export async function gatherStream(
  streamed: { stream: ReadableStream<unknown>; request?: unknown; response?: unknown },
  onDelta: (text: string) => void,
  who: string,
): Promise<GenerateResult> {
  const content: Part[] = [];
  // Open text and reasoning parts by id: their deltas are appended to the part in `content`.
  const open = new Map<string, Part>();
  let finish: Part | undefined;
  let warnings: unknown[] = [];
  let response: Part | undefined = isRecord(streamed.response) ? { ...streamed.response } : undefined;
  let parts = 0;
  const reader = streamed.stream.getReader();
  try {
    // Bounded by the stream: the provider ends it (or the request's signal does).
    for (;;) {
      let next: ReadableStreamReadResult<unknown>;
      try {
        next = await reader.read();
      } catch (err) {
        if (finish) break;
        throw new ModelError(
          "MODEL_UNREACHABLE",
          `The streamed answer of ${who} was cut off after ${parts} parts: ${(err as Error)?.message ?? err}`,
          { transient: true, cause: err },
        );
      }
      if (next.done) break;
      parts++;
      const p = next.value;
      if (!isRecord(p)) continue;
      const id = typeof p.id === "string" ? p.id : "";
      switch (p.type) {
        case "stream-start":
          if (Array.isArray(p.warnings)) warnings = p.warnings;
          break;
        case "response-metadata": {
          const { type: _t, ...meta } = p;
          response = { ...response, ...meta };
          break;
        }
        case "text-start":
        case "reasoning-start": {
          const kind = p.type === "text-start" ? "text" : "reasoning";
          const part: Part = { type: kind, text: "" };
          if (p.providerMetadata !== undefined) part.providerMetadata = p.providerMetadata;
          content.push(part);
          open.set(`${kind}:${id}`, part);
          break;
        }
        case "text-delta":
        case "reasoning-delta": {
          const kind = p.type === "text-delta" ? "text" : "reasoning";
          let part = open.get(`${kind}:${id}`);
          if (!part) {
            // A delta with no start: a part of its own.
            part = { type: kind, text: "" };
            content.push(part);
            open.set(`${kind}:${id}`, part);
          }
          const delta = typeof p.delta === "string" ? p.delta : "";
          part.text = (part.text as string) + delta;
          if (kind === "text" && delta !== "") onDelta(delta);
          break;
        }
        case "text-end":
        case "reasoning-end": {
          const kind = p.type === "text-end" ? "text" : "reasoning";
          const part = open.get(`${kind}:${id}`);
          // The metadata a part ends with (a thinking block's signature) is the part's.
          if (part && p.providerMetadata !== undefined) part.providerMetadata = p.providerMetadata;
          open.delete(`${kind}:${id}`);
          break;
        }
        case "tool-call":
        case "tool-result":
        case "file":
        case "source":
        case "custom":
          content.push(p);
          break;
        case "finish":
          finish = p;
          break;
        case "error":
          throw p.error ?? new Error(`the stream of ${who} reported an error`);
          // tool-input-start/-delta/-end come whole in the tool-call part; raw is the provider's own.
      }
    }
  } finally {
    reader.releaseLock();
    await streamed.stream.cancel().catch(() => {});
  }
  if (!finish) {
    throw new ModelError(
      "MODEL_UNREACHABLE",
      `The streamed answer of ${who} ended after ${parts} parts without its finish: it was cut off`,
      { transient: true },
    );
  }
  return {
    content,
    finishReason: finish.finishReason,
    usage: finish.usage,
    warnings,
    ...(finish.providerMetadata !== undefined ? { providerMetadata: finish.providerMetadata } : {}),
    ...(streamed.request !== undefined ? { request: streamed.request } : {}),
    ...(response !== undefined ? { response } : {}),
  } as unknown as GenerateResult;
}
