/**
 * The mock model's streamed answers: a chat completion sent as server-sent
 * `chat.completion.chunk` events, its text (and its tool calls' arguments)
 * cut into a chosen number of pieces written a chosen time apart, with a hook
 * called before each piece (a test kills a worker there).
 *
 * @module
 */

import { sleep } from "./abortable.ts";

/** One piece of a streamed answer, as {@linkcode MockStreamOptions.onChunk} is told of it. */
export interface MockChunk {
  /** The run the request named. */
  run: string;
  /** The run's call count for this request (1 for its first request). */
  n: number;
  /** The piece's place among the answer's pieces, from 0. */
  index: number;
  /** How many pieces the answer is cut into. */
  count: number;
  /** The text the piece carries (content, or a tool call's arguments). */
  text: string;
}

/** How the mock streams an answer to a request with `stream: true`. */
export interface MockStreamOptions {
  /** Pieces the answer's text (or each call's arguments) is cut into, at most. Default 20. */
  chunks?: number;
  /** Time before each piece. Default 0. */
  chunkMs?: number;
  /** Called (and awaited) just before each piece is written. */
  onChunk?: (chunk: MockChunk) => void | Promise<void>;
}

/** Cuts `text` into at most `count` pieces of nearly equal length, never inside a surrogate pair. */
export function pieces(text: string, count: number): string[] {
  const chars = Array.from(text);
  if (chars.length === 0) return [];
  const n = Math.max(1, Math.min(count, chars.length));
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    out.push(
      chars.slice(Math.floor((i * chars.length) / n), Math.floor(((i + 1) * chars.length) / n)).join(""),
    );
  }
  return out;
}

/**
 * The SSE response for a non-streamed answer `answer` (the body the mock
 * would have sent): its content and its tool calls' arguments in pieces,
 * then the finish reason, then (with `include_usage`) the usage in a chunk of
 * its own, then `[DONE]`, as OpenAI streams.
 */
export function streamedAnswer(
  answer: Record<string, unknown>,
  opts: MockStreamOptions & { run: string; n: number; includeUsage: boolean; signal: AbortSignal },
): Response {
  const choice = (answer.choices as Record<string, unknown>[])[0] as
    | {
      message: {
        content: string | null;
        tool_calls?: { id: string; function: { name: string; arguments: string } }[];
      };
      finish_reason: string;
    }
    | undefined;
  const base = {
    id: answer.id,
    object: "chat.completion.chunk",
    created: answer.created,
    model: answer.model,
  };
  const count = opts.chunks ?? 20;
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
    ...base,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  // Each piece with the text the hook is told of; the opening and closing chunks carry none.
  const planned: { body: unknown; text?: string }[] = [];
  if (choice) {
    planned.push({ body: chunk({ role: "assistant", content: "" }) });
    for (const text of pieces(choice.message.content ?? "", count)) {
      planned.push({ body: chunk({ content: text }), text });
    }
    for (const [index, call] of (choice.message.tool_calls ?? []).entries()) {
      planned.push({
        body: chunk({
          tool_calls: [{
            index,
            id: call.id,
            type: "function",
            function: { name: call.function.name, arguments: "" },
          }],
        }),
      });
      for (const text of pieces(call.function.arguments, count)) {
        planned.push({ body: chunk({ tool_calls: [{ index, function: { arguments: text } }] }), text });
      }
    }
    planned.push({ body: chunk({}, choice.finish_reason) });
  }
  if (opts.includeUsage || !choice) planned.push({ body: { ...base, choices: [], usage: answer.usage } });
  const total = planned.filter((p) => p.text !== undefined).length;
  const encoder = new TextEncoder();
  async function* events(): AsyncGenerator<Uint8Array> {
    let index = 0;
    for (const p of planned) {
      if (p.text !== undefined) {
        if (opts.chunkMs) await sleep(opts.chunkMs, opts.signal);
        await opts.onChunk?.({ run: opts.run, n: opts.n, index: index++, count: total, text: p.text });
      }
      yield encoder.encode(`data: ${JSON.stringify(p.body)}\n\n`);
    }
    yield encoder.encode("data: [DONE]\n\n");
  }
  return new Response(ReadableStream.from(events()), {
    status: 200,
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache" },
  });
}
