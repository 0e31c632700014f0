/**
 * Where a process that takes a turn over continues (chunk_log.ts): after the
 * steps the log finished, from the derivation; inside a step, a `reset-step`
 * and the derived step once it is finished; nothing while the derivation has
 * nothing new, or the log has its finish.
 */

import assert from "node:assert/strict";
import { continuation } from "./chunk_log.ts";
import type { UIChunk } from "./chunks.ts";

const start: UIChunk = { type: "start", messageId: "r-answer-0" };
const call: UIChunk = { type: "tool-input-available", toolCallId: "r:0", toolName: "t", input: {} };
const out: UIChunk = { type: "tool-output-available", toolCallId: "r:0", output: 1 };
const wait: UIChunk = { type: "data-wait", data: { key: "r:0" } };
const text = (d: string): UIChunk[] => [
  { type: "text-start", id: "text-0" },
  { type: "text-delta", id: "text-0", delta: d },
  { type: "text-end", id: "text-0" },
];
const S: UIChunk = { type: "start-step" };
const F: UIChunk = { type: "finish-step" };
const END: UIChunk = { type: "finish", finishReason: "stop" };

Deno.test("continuation: at a step boundary, the derived chunks after the log's finished steps", () => {
  // The log counts a transient wait the derivation never saw: the steps still line up.
  const stored = [start, S, call, wait, out, F];
  const derived = [start, S, call, out, F, S, ...text("hi"), F, END];
  assert.deepEqual(continuation(stored, derived), [S, ...text("hi"), F, END]);
  assert.equal(continuation(stored, derived.slice(0, 5)), undefined, "nothing new derived yet");
  assert.equal(
    continuation([...stored, S, ...text("hi"), F, END], derived),
    undefined,
    "the log has its finish",
  );
});

Deno.test("continuation: inside a step, a reset-step and the derived step once it is finished", () => {
  const stored = [start, S, call, out, F, S, { type: "text-start", id: "text-0" } as UIChunk, {
    type: "text-delta",
    id: "text-0",
    delta: "Attempt 1 sa",
  } as UIChunk];
  const derived = [start, S, call, out, F, S];
  assert.equal(continuation(stored, derived), undefined, "the step is not finished where it is derived");
  const whole = [...derived, ...text("Attempt 2 says hi"), F, END];
  assert.deepEqual(continuation(stored, whole), [
    { type: "reset-step" },
    ...text("Attempt 2 says hi"),
    F,
    END,
  ]);
  // A step left waiting for a person is derived the same: no takeover until it moves.
  const asked: UIChunk = { type: "tool-approval-request", approvalId: "r:0", toolCallId: "r:0" };
  assert.equal(continuation([start, S, call, asked], [start, S, call, asked]), undefined);
});
