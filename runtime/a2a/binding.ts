/**
 * What both HTTP bindings share: reading a request's body (bounded, UTF-8,
 * JSON), the two streams (a message's and a subscription's) as server-sent
 * events, and the refusal of an error that is not the protocol's.
 *
 * @module
 */

import { MESSAGE_CHARS_MAX } from "../client/shapes.ts";
import { hasCode } from "../base/errors.ts";
import { REFUSED_INPUT_CODES } from "../client/checks.ts";
import type { A2aOperations } from "./operations.ts";
import { checkHistoryLength, checkMessage, paramsObject } from "./requests.ts";
import type { StreamEvent } from "../run/stream.ts";
import { followTask, streamStart } from "./task_stream.ts";
import { stateOf, taskAndTurns } from "./tasks.ts";
import { A2aError, type StreamResponse, TERMINAL_STATES } from "./wire.ts";

/**
 * The most bytes of a request body read (refused past it): the longest
 * message ({@link MESSAGE_CHARS_MAX} characters), each written as a six-byte
 * JSON escape, with 64 KiB for the rest.
 */
export const BODY_BYTES_MAX = 6 * MESSAGE_CHARS_MAX + 64 * 1024;

/** The headers of a server-sent event stream. */
export const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  "connection": "keep-alive",
  "x-accel-buffering": "no",
});

/** The body as JSON: at most {@link BODY_BYTES_MAX} bytes of UTF-8 (no byte read as U+FFFD). */
export async function readJson(req: Request): Promise<unknown> {
  const declared = Number(req.headers.get("content-length") ?? "0");
  if (declared > BODY_BYTES_MAX) throw tooLarge();
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (req.body) {
    for await (const chunk of req.body) {
      size += chunk.byteLength;
      if (size > BODY_BYTES_MAX) throw tooLarge();
      chunks.push(chunk);
    }
  }
  const whole = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) whole.set(c, at), at += c.byteLength;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(whole);
  } catch {
    throw new A2aError("JSONParseError", "The body is not UTF-8 text: send JSON encoded as UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new A2aError("JSONParseError", `The body is not JSON: ${(err as Error).message}`);
  }
}

function tooLarge(): A2aError {
  return new A2aError(
    "InvalidRequestError",
    `The body is larger than ${BODY_BYTES_MAX} bytes: a message holds at most ${MESSAGE_CHARS_MAX} characters`,
  );
}

/**
 * A thrown error as the protocol's: an {@link A2aError} as it is, a refusal
 * of the client's for what was given as invalid parameters, anything else an
 * internal error whose text goes to the log only (a database's or a driver's
 * text is not the caller's to read).
 */
export function asA2aError(err: unknown): A2aError {
  if (err instanceof A2aError) return err;
  if (hasCode(err, REFUSED_INPUT_CODES)) {
    return new A2aError("InvalidParamsError", err.message, { cause: err });
  }
  console.error("a2a: request failed:", err);
  return new A2aError("InternalError", "The agent's server failed to answer this request; its log says why", {
    cause: err,
  });
}

/**
 * The stream of a message just sent: the task as it stands, then its
 * updates. The send happens before the first event, so a refusal is the
 * request's error, not the stream's. A message to a conversation is sent
 * once the run is watched, so no piece of its answer is written before the
 * stream listens.
 */
export async function messageStream(
  ops: A2aOperations,
  params: Record<string, unknown>,
  signal: AbortSignal,
): Promise<AsyncGenerator<StreamResponse, void, undefined>> {
  const historyLength = checkHistoryLength(paramsObject(params.configuration).historyLength);
  const msg = checkMessage(params);
  const target = msg.taskId ?? msg.contextId;
  let early: AsyncGenerator<StreamEvent, void, undefined> | undefined;
  if (target !== undefined && ops.agent.conversation) {
    const run = await ops.run(target).catch(() => undefined); // the send says why it is refused
    if (run) {
      early = ops.client.stream(run.runId, { signal });
      // Its first event comes after it listens: an earlier answer (told by the task) or the status before the send.
      await early.next();
    }
  }
  try {
    const sent = await ops.send(params);
    return await taskStream(ops, sent.run.runId, { signal, historyLength, events: early });
  } catch (err) {
    await early?.return(undefined);
    throw err;
  }
}

/** The stream of a task not finished (`SubscribeToTask`); a finished one is `UnsupportedOperationError`. */
export async function subscription(
  ops: A2aOperations,
  taskId: string,
  signal: AbortSignal,
): Promise<AsyncGenerator<StreamResponse, void, undefined>> {
  const run = await ops.run(taskId);
  const state = stateOf(run);
  if (TERMINAL_STATES.includes(state)) {
    throw new A2aError(
      "UnsupportedOperationError",
      `Task ${taskId} is ${state}: a finished task has no updates to subscribe to; 'GetTask' reads it`,
    );
  }
  return await taskStream(ops, run.runId, { signal });
}

async function taskStream(
  ops: A2aOperations,
  runId: string,
  opts: {
    signal: AbortSignal;
    historyLength?: number;
    events?: AsyncGenerator<StreamEvent, void, undefined>;
  },
): Promise<AsyncGenerator<StreamResponse, void, undefined>> {
  const { historyLength } = opts;
  // The turns are read whole whatever the history shown: the stream begins after the last answered one.
  const { task, turns } = await taskAndTurns(ops.client, await ops.run(runId));
  if (historyLength !== undefined) {
    if (historyLength === 0) delete task.history;
    else task.history = task.history?.slice(-historyLength);
  }
  const start = streamStart(task, turns);
  return (async function* () {
    yield { task };
    yield* followTask(ops, start, opts.signal, opts.events);
  })();
}

/**
 * Server-sent events from `events`, each `data: <JSON of wrap(event)>`; a
 * failure after the first event is sent as `event: error` with `fail(err)`.
 * The events stop when the client goes away (`abort` is aborted).
 */
export function sseResponse(
  events: AsyncGenerator<StreamResponse, void, undefined>,
  opts: { wrap: (e: StreamResponse) => unknown; fail: (err: A2aError) => unknown; abort: AbortController },
): Response {
  const encoder = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await events.next();
        if (next.done) return controller.close();
        // JSON has no raw line break in it, so one data line holds the whole event.
        controller.enqueue(encoder.encode(`data: ${JSON.stringify(opts.wrap(next.value))}\n\n`));
      } catch (err) {
        if (opts.abort.signal.aborted) return controller.close();
        const failure = JSON.stringify(opts.fail(asA2aError(err)));
        controller.enqueue(encoder.encode(`event: error\ndata: ${failure}\n\n`));
        controller.close();
      }
    },
    async cancel() {
      opts.abort.abort();
      await events.return(undefined);
    },
  });
  return new Response(body, { headers: SSE_HEADERS });
}
