import assert from "node:assert/strict";
import {
  asSchema,
  readUIMessageStream,
  type UIMessage,
  type UIMessageChunk,
  uiMessageChunkSchema,
} from "npm:ai@7.0.173";
import { ChatChunker, TEXT_UNIT_CHARS, textUnits, type UIChunk } from "./chunks.ts";
import type { StreamEvent } from "../run/stream.ts";

/** Every chunk checked against the `ai` package's own chunk schema; the message it assembles. */
async function assemble(chunks: UIChunk[]): Promise<UIMessage> {
  const schema = asSchema(uiMessageChunkSchema);
  for (const c of chunks) {
    const v = await schema.validate!(c);
    assert.ok(v.success, `${JSON.stringify(c)}: ${!v.success && v.error}`);
  }
  const stream = new ReadableStream<UIMessageChunk>({
    start(controller) {
      for (const c of chunks) controller.enqueue(c as UIMessageChunk);
      controller.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, terminateOnError: true })) last = m;
  assert.ok(last);
  return last;
}

function feed(chunker: ChatChunker, events: StreamEvent[]): UIChunk[] {
  return events.flatMap((e) => chunker.event(e));
}

const status = (s: "running" | "waiting" | "done" | "failed", idle = false): StreamEvent => ({
  type: "status",
  status: s,
  epoch: 1,
  error: s === "failed" ? "MODEL_GAVE_UP: gone" : null,
  idle,
});
const delta = (seq: number, epoch: number, attempt: number, offset: number, text: string): StreamEvent => ({
  type: "delta",
  seq,
  epoch,
  attempt,
  offset,
  text,
});
const ANSWER = "The build is green on main, and the deploy went out cleanly an hour ago.";

Deno.test("textUnits cuts a text at the same places whether it arrives in pieces or whole", () => {
  const whole = textUnits(ANSWER, 0, true).units;
  assert.equal(whole.join(""), ANSWER);
  assert.ok(whole.slice(0, -1).every((u) => u.length === TEXT_UNIT_CHARS));
  let heard = "";
  let sent = 0;
  const live: string[] = [];
  for (const piece of ANSWER.match(/.{1,7}/g)!) {
    heard += piece;
    const got = textUnits(heard, sent, false);
    live.push(...got.units);
    sent = got.end;
  }
  live.push(...textUnits(heard, sent, true).units);
  assert.deepEqual(live, whole);
  // A surrogate pair is never split: a unit ending on its first half gives it to the next.
  const emoji = "a".repeat(TEXT_UNIT_CHARS - 1) + "😀" + "b";
  const units = textUnits(emoji, 0, true).units;
  assert.equal(units[0], "a".repeat(TEXT_UNIT_CHARS - 1));
  assert.equal(units[1], "😀b");
});

Deno.test("a turn of a tool call and a streamed answer: steps, the call by its key, the text once", async () => {
  const chunker = new ChatChunker("chat-1", 1);
  const events: StreamEvent[] = [
    status("running"),
    // Turn 0 (the goal): told, not this turn's.
    { type: "tool_calls", seq: 0, calls: [{ seq: 0, tool: "lookup", args: { q: "a" } }] },
    {
      type: "tool_result",
      seq: 0,
      key: "chat-1:0",
      tool: "lookup",
      status: "confirmed",
      result: 1,
      error: null,
    },
    { type: "answer", seq: 1, text: "first" },
    // Turn 1.
    { type: "tool_calls", seq: 2, calls: [{ seq: 2, tool: "lookup", args: { q: "b" } }] },
    {
      type: "tool_result",
      seq: 2,
      key: "chat-1:2",
      tool: "lookup",
      status: "confirmed",
      result: { ok: true },
      error: null,
    },
    delta(3, 1, 1, 0, ANSWER.slice(0, 40)),
    delta(3, 1, 1, 40, ANSWER.slice(40)),
    { type: "answer", seq: 3, text: ANSWER },
    status("waiting", true),
  ];
  const chunks = feed(chunker, events);
  assert.deepEqual(chunks.map((c) => c.type), [
    "start",
    "start-step",
    "tool-input-available",
    "tool-output-available",
    "finish-step",
    "start-step",
    "text-start",
    "text-delta",
    "text-delta",
    "text-delta",
    "text-end",
    "finish-step",
    "finish",
  ]);
  assert.equal(chunker.finished, true);
  const message = await assemble(chunks);
  assert.equal(message.id, "chat-1-answer-1");
  const text = message.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);
  assert.deepEqual(text, [ANSWER]);
  const tool = message.parts.find((p) => p.type === "tool-lookup") as { toolCallId: string; state: string };
  assert.equal(tool.toolCallId, "chat-1:2");
  assert.equal(tool.state, "output-available");
});

Deno.test("replayed from the journal, a turn streamed live without a reset gives the same chunks", () => {
  const live = feed(new ChatChunker("c", 0), [
    status("running"),
    ...ANSWER.match(/.{1,5}/g)!.map((p, i) => delta(0, 1, 1, i * 5, p)),
    { type: "answer", seq: 0, text: ANSWER },
  ]);
  const replayed = feed(new ChatChunker("c", 0), [status("waiting", true), {
    type: "answer",
    seq: 0,
    text: ANSWER,
  }]);
  assert.deepEqual(replayed, live);
});

Deno.test("a takeover mid-answer is a reset-step, and the message shows the second attempt's text once", async () => {
  const first = "The first worker wrote this much before it died, and more";
  const chunks = feed(new ChatChunker("c", 0), [
    status("running"),
    delta(0, 1, 1, 0, first),
    { type: "reset", seq: 0, epoch: 2, attempt: 0, reason: "takeover", dropped: first.length },
    delta(0, 2, 2, 0, ANSWER.slice(0, 50)),
    delta(0, 2, 2, 50, ANSWER.slice(50)),
    { type: "answer", seq: 0, text: ANSWER },
  ]);
  assert.equal(chunks.filter((c) => c.type === "reset-step").length, 1);
  const message = await assemble(chunks);
  const text = message.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);
  assert.deepEqual(text, [ANSWER]);
});

Deno.test("text joined mid-answer is held until the answer is journaled, then sent whole", async () => {
  const chunker = new ChatChunker("c", 0);
  const held = feed(chunker, [status("running"), delta(0, 1, 1, 30, ANSWER.slice(30, 60))]);
  assert.deepEqual(held.map((c) => c.type), ["start", "start-step"]);
  const rest = chunker.event({ type: "answer", seq: 0, text: ANSWER });
  const message = await assemble([...held, ...rest]);
  assert.equal((message.parts.find((p) => p.type === "text") as { text: string }).text, ANSWER);
});

Deno.test("a flagged call is an error part and a data-outcome; a wait and a child are data parts", async () => {
  const chunker = new ChatChunker("r", 0);
  const chunks = feed(chunker, [
    status("running"),
    {
      type: "tool_calls",
      seq: 0,
      calls: [{ seq: 0, tool: "pay", args: { cents: 5 } }, { seq: 1, tool: "helper", args: { task: "x" } }],
    },
    {
      type: "tool_result",
      seq: 0,
      key: "r:0",
      tool: "pay",
      status: "flagged",
      result: null,
      error: "timed out",
    },
    { type: "tool_result", seq: 1, key: "r:1", tool: "helper", status: "waiting", result: null, error: null },
  ]);
  assert.ok(chunker.wantsCallStates());
  chunks.push(...chunker.callStates([], [{ runId: "r:1-child", agent: "helper", parentKey: "r:1" }]));
  chunks.push(...chunker.callStates([], [{ runId: "r:1-child", agent: "helper", parentKey: "r:1" }]));
  assert.deepEqual(chunks.slice(4).map((c) => c.type), [
    "tool-output-error",
    "data-outcome",
    "data-wait",
    "data-child",
  ]);
  const outcome = chunks.find((c) => c.type === "data-outcome") as unknown as {
    data: { outcome: string; key: string };
  };
  assert.deepEqual([outcome.data.key, outcome.data.outcome], ["r:0", "unknown"]);
  const message = await assemble(chunks);
  assert.equal((message.parts.find((p) => p.type === "tool-pay") as { state: string }).state, "output-error");
});

Deno.test("an approval: asked, answered, then the call's output; a denial is output-denied", async () => {
  const chunker = new ChatChunker("r", 0);
  const chunks = feed(chunker, [
    status("running"),
    {
      type: "tool_calls",
      seq: 0,
      calls: [{ seq: 0, tool: "refund", args: { cents: 5 } }, { seq: 1, tool: "refund", args: { cents: 9 } }],
    },
  ]);
  chunks.push(
    ...chunker.callStates([{ key: "r:0", status: "pending" }, { key: "r:1", status: "pending" }], []),
  );
  chunks.push(
    ...chunker.callStates([{ key: "r:0", status: "pending" }, { key: "r:1", status: "pending" }], []),
  );
  chunks.push(...chunker.callStates([
    { key: "r:0", status: "approved", decidedAt: "2026-01-01T00:00:02Z" },
    { key: "r:1", status: "denied", reason: "too much", decidedAt: "2026-01-01T00:00:01Z" },
  ], []));
  chunks.push(...chunker.event({
    type: "tool_result",
    seq: 0,
    key: "r:0",
    tool: "refund",
    status: "confirmed",
    result: "refunded",
    error: null,
  }));
  chunks.push(...chunker.event({ type: "answer", seq: 2, text: "Refunded 5 cents." }));
  assert.deepEqual(chunks.slice(4).map((c) => c.type), [
    "tool-approval-request",
    "tool-approval-request",
    "tool-approval-response",
    "tool-output-denied",
    "tool-approval-response",
    "tool-output-available",
    "finish-step",
    "start-step",
    "text-start",
    "text-delta",
    "text-end",
    "finish-step",
    "finish",
  ]);
  const message = await assemble(chunks);
  const states = message.parts.filter((p) => p.type === "tool-refund").map((p) =>
    (p as { state: string }).state
  );
  assert.deepEqual(states, ["output-available", "output-denied"]);
});

Deno.test("a run that fails before the turn's answer ends the stream with an error and finish", async () => {
  const chunks = feed(new ChatChunker("r", 0), [
    status("running"),
    delta(0, 1, 1, 0, "par"),
    status("failed"),
  ]);
  assert.deepEqual(chunks.slice(-2), [
    { type: "error", errorText: "MODEL_GAVE_UP: gone" },
    { type: "finish", finishReason: "error" },
  ]);
  for (const c of chunks) assert.ok((await asSchema(uiMessageChunkSchema).validate!(c)).success);
});
