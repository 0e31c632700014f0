/**
 * Where one response of a turn stops for a person. The AI SDK's chat client
 * (`useChat`, `AbstractChat`) sends an approval answered with
 * `addToolApprovalResponse` only once the response it is reading has
 * finished (`sendAutomaticallyWhen` is asked when the chat is ready), as the
 * SDK's own server ends a response at a call that waits for approval. A
 * response that went on waiting for the answer would wait forever: so a
 * response stops after the approval requests nobody has answered yet, with
 * `finish-step` (a step open) and `finish` (`tool-calls`), and the POST that
 * carries the answer continues the same message from the chunk after them.
 *
 * @module
 */

import type { UIChunk } from "./chunks.ts";

/** What a response reads a turn from: its chunks so far, and a reader from an index on. */
export interface ChunkSource {
  /** The chunks so far. */
  readonly chunks: readonly UIChunk[];
  /** The chunks from index `from` (not negative) on, as they come, until the turn's end. */
  read(from: number, signal?: AbortSignal): AsyncGenerator<UIChunk, void, undefined>;
}

/** True when a step is open just before index `at`. */
function stepOpenAt(chunks: readonly UIChunk[], at: number): boolean {
  for (let i = Math.min(at, chunks.length) - 1; i >= 0; i--) {
    if (chunks[i].type === "start-step") return true;
    if (chunks[i].type === "finish-step") return false;
  }
  return false;
}

/**
 * The chunks of `source` from `from` (negative: the last N) until the turn's
 * end, or until approval requests that `stillAsked` says are not all
 * answered (asked once per batch of requests sent together): then the step
 * is finished and the response with `finish` (`tool-calls`).
 */
export async function* untilAsked(
  source: ChunkSource,
  from: number,
  stillAsked: (keys: string[]) => Promise<boolean>,
  signal?: AbortSignal,
): AsyncGenerator<UIChunk, void, undefined> {
  let at = from < 0 ? Math.max(0, source.chunks.length + from) : from;
  let open = stepOpenAt(source.chunks, at);
  let asked: string[] = [];
  for await (const c of source.read(at, signal)) {
    at++;
    yield c;
    if (c.type === "start-step") open = true;
    else if (c.type === "finish-step") open = false;
    else if (c.type === "tool-approval-request") asked.push(c.approvalId);
    // Requests sent together are stopped after together.
    if (asked.length === 0 || source.chunks[at]?.type === "tool-approval-request") continue;
    if (await stillAsked(asked)) {
      if (open) yield { type: "finish-step" };
      yield { type: "finish", finishReason: "tool-calls" };
      return;
    }
    asked = [];
  }
}

/**
 * The index just after the approval requests for `keys` in `source`, read
 * as they come (the turn's end first: undefined). Where the POST answering
 * them continues the message.
 */
export async function afterRequests(
  source: ChunkSource,
  keys: readonly string[],
  signal?: AbortSignal,
): Promise<number | undefined> {
  const missing = new Set(keys);
  let at = 0;
  if (missing.size === 0) return undefined;
  for await (const c of source.read(0, signal)) {
    at++;
    if (c.type === "tool-approval-request") missing.delete(c.approvalId);
    if (missing.size === 0) return at;
  }
  return undefined;
}
