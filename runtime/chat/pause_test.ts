import assert from "node:assert/strict";
import type { UIChunk } from "./chunks.ts";
import { afterRequests, type ChunkSource, untilAsked } from "./pause.ts";

/** A turn's chunks, all there already, and the turn over when `ended`; more may be pushed. */
function source(chunks: UIChunk[], ended = true): ChunkSource & { push(c: UIChunk[]): void; end(): void } {
  let wake: (() => void) | undefined;
  let done = ended;
  return {
    chunks,
    push(more) {
      chunks.push(...more);
      wake?.();
    },
    end() {
      done = true;
      wake?.();
    },
    async *read(from) {
      let at = from;
      for (;;) {
        while (at < chunks.length) yield chunks[at++];
        if (done) return;
        await new Promise<void>((r) => wake = r);
      }
    },
  };
}

const asked = (key: string): UIChunk => ({ type: "tool-approval-request", approvalId: key, toolCallId: key });
const call = (key: string): UIChunk => ({
  type: "tool-input-available",
  toolCallId: key,
  toolName: "ship",
  input: {},
});
const TURN: UIChunk[] = [
  { type: "start", messageId: "r-answer-0" },
  { type: "start-step" },
  call("r:0"),
  call("r:1"),
  asked("r:0"),
  asked("r:1"),
  { type: "tool-approval-response", approvalId: "r:0", approved: true },
  { type: "tool-approval-response", approvalId: "r:1", approved: true },
  { type: "tool-output-available", toolCallId: "r:0", output: 1 },
  { type: "tool-output-available", toolCallId: "r:1", output: 2 },
  { type: "finish-step" },
  { type: "finish", finishReason: "stop" },
];

async function all(chunks: AsyncIterable<UIChunk>): Promise<UIChunk[]> {
  const out: UIChunk[] = [];
  for await (const c of chunks) out.push(c);
  return out;
}

Deno.test("a response stops after the approval requests sent together that are not answered, ending its step", async () => {
  const seen: string[][] = [];
  const stillAsked = (keys: string[]) => {
    seen.push(keys);
    return Promise.resolve(true);
  };
  const out = await all(untilAsked(source(TURN.slice(0, 6), false), 0, stillAsked));
  assert.deepEqual(out, [
    ...TURN.slice(0, 6),
    { type: "finish-step" },
    { type: "finish", finishReason: "tool-calls" },
  ]);
  assert.deepEqual(seen, [["r:0", "r:1"]], "asked once, for both");
});

Deno.test("answered approvals do not stop a response: the turn to its end", async () => {
  const out = await all(untilAsked(source([...TURN]), 0, () => Promise.resolve(false)));
  assert.deepEqual(out, TURN);
  // From the last three: nothing asked, nothing stopped.
  assert.deepEqual(
    await all(untilAsked(source([...TURN]), -3, () => Promise.reject(new Error("asked")))),
    TURN.slice(-3),
  );
});

Deno.test("a response resumed after the step closed stops with finish alone", async () => {
  const chunks: UIChunk[] = [{ type: "start" }, { type: "start-step" }, { type: "finish-step" }, {
    type: "data-wait",
    data: 1,
  }, asked("r:2")];
  const out = await all(untilAsked(source(chunks, false), 3, () => Promise.resolve(true)));
  assert.deepEqual(out, [chunks[3], chunks[4], { type: "finish", finishReason: "tool-calls" }]);
});

Deno.test("the answering POST continues after the requests, waiting for them to come", async () => {
  const s = source(TURN.slice(0, 5), false);
  const after = afterRequests(s, ["r:0", "r:1"]);
  s.push(TURN.slice(5, 8));
  assert.equal(await after, 6);
  const none = source(TURN.slice(0, 2), false);
  const never = afterRequests(none, ["r:9"]);
  none.end();
  assert.equal(await never, undefined, "the turn ended first");
  assert.equal(await afterRequests(source([...TURN]), []), undefined);
});
