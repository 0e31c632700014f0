import assert from "node:assert/strict";
import { AnswerTranslator, streamStart } from "./task_stream.ts";
import type { StreamEvent } from "../run/stream.ts";
import type { Task } from "./wire.ts";

const delta = (seq: number, text: string, attempt = 1): StreamEvent => ({
  type: "delta",
  seq,
  epoch: 1,
  attempt,
  offset: 0,
  text,
});

/** Each update as [artifactId, text, append, lastChunk]. */
function run(events: StreamEvent[], start = { taskId: "t", turn: 0, answeredThroughSeq: -1 }) {
  const tr = new AnswerTranslator(start);
  return events.flatMap((e) => tr.translate(e)).map((u) => [
    u.artifact.artifactId,
    u.artifact.parts[0].text,
    u.append,
    u.lastChunk,
  ]);
}

Deno.test("an answer streamed whole is appended piece by piece, then closed by an empty last chunk", () => {
  assert.deepEqual(
    run([delta(0, "Hel"), delta(0, "lo"), { type: "answer", seq: 0, text: "Hello" }]),
    [["answer-0", "Hel", false, false], ["answer-0", "lo", true, false], ["answer-0", "", true, true]],
  );
});

Deno.test("a reset (the model call asked again) restarts the artifact: the retried text is not appended to the cut one", () => {
  assert.deepEqual(
    run([
      delta(0, "Hel"),
      { type: "reset", seq: 0, epoch: 1, attempt: 2, reason: "retry", dropped: 3 },
      delta(0, "Hello", 2),
      { type: "answer", seq: 0, text: "Hello" },
    ]),
    [["answer-0", "Hel", false, false], ["answer-0", "Hello", false, false], ["answer-0", "", true, true]],
  );
});

Deno.test("a reset with no text after it ends with the whole journaled answer, not an append to the void text", () => {
  assert.deepEqual(
    run([
      delta(2, "Half"),
      { type: "reset", seq: 2, epoch: 2, attempt: 0, reason: "takeover", dropped: 4 },
      { type: "answer", seq: 2, text: "Whole answer" },
    ]),
    [["answer-0", "Half", false, false], ["answer-0", "Whole answer", false, true]],
  );
});

Deno.test("text said beside a tool call is replaced by the next step's text, and a late joiner gets the answer whole", () => {
  assert.deepEqual(
    run([
      delta(0, "Let me look"),
      { type: "tool_calls", seq: 0, calls: [{ seq: 0, tool: "lookup", args: {} }] },
      delta(1, "Found"),
      { type: "answer", seq: 1, text: "Found it" },
    ]),
    [["answer-0", "Let me look", false, false], ["answer-0", "Found", false, false], [
      "answer-0",
      "Found it",
      false,
      true,
    ]],
  );
});

Deno.test("each answer of a conversation is the artifact of its message, and steps the task carried are not told again", () => {
  assert.deepEqual(
    run([
      { type: "answer", seq: 1, text: "old" },
      { type: "answer", seq: 3, text: "first" },
      delta(5, "sec"),
      { type: "answer", seq: 5, text: "second" },
    ], { taskId: "t", turn: 1, answeredThroughSeq: 1 }),
    [["answer-1", "first", false, true], ["answer-2", "sec", false, false], [
      "answer-2",
      "second",
      false,
      true,
    ]],
  );
});

Deno.test("streamStart() begins at the first message not answered, after the last answered step", () => {
  const task = { id: "t", contextId: "t", status: { state: "TASK_STATE_WORKING" } } as Task;
  const turn = (seq: number, answerSeq: number | null) => ({
    seq,
    messageId: null,
    text: "x",
    sentAt: new Date(0),
    answer: answerSeq === null ? null : "a",
    answerSeq,
    answeredAt: null,
  });
  assert.deepEqual(streamStart(task, [turn(0, 1), turn(1, 3), turn(2, null)]), {
    taskId: "t",
    turn: 2,
    answeredThroughSeq: 3,
    state: "TASK_STATE_WORKING",
  });
  assert.deepEqual(streamStart(task, [turn(0, null)]), {
    taskId: "t",
    turn: 0,
    answeredThroughSeq: -1,
    state: "TASK_STATE_WORKING",
  });
});
