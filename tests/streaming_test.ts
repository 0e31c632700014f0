/**
 * Answers that stream (#26, must-show 3): a model that writes its answer in
 * 50 chunks; a watcher (`client.stream`) receives the text in order as it is
 * written, the journaled answer equals the text since the step's last reset,
 * and a model call asked again (a retry in-process on PGlite; a worker
 * SIGKILLed mid-stream on PostgreSQL, watched from another process) shows a
 * reset, then the second attempt's text, never a mix of both.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent.ts";
import { connect } from "../runtime/client.ts";
import { OpenAIPlanner } from "../runtime/planner.ts";
import { defineTool } from "../runtime/tools.ts";
import type { StreamEvent } from "../runtime/stream.ts";
import { MockModel } from "../mock/model.ts";
import { DEFAULT_RETRY } from "../runtime/deps.ts";

/** The answer of call n: distinct per call, so a mix of two attempts would show. */
const ANSWER = "Attempt {n} writes this answer piece by piece, " +
  "and every piece belongs to it. ".repeat(4);

const lookup = defineTool({
  name: "lookup",
  description: "Looks a word up.",
  args: z.strictObject({ q: z.string() }),
  run: (args) => Promise.resolve({ result: { meaning: `of ${args.q}` } }),
});

/** The text each step's deltas add up to since its last reset. */
function textSinceReset(events: StreamEvent[], seq: number): string {
  let text = "";
  for (const e of events) {
    if (e.type === "reset" && e.seq === seq) text = "";
    if (e.type === "delta" && e.seq === seq) text += e.text;
  }
  return text;
}

Deno.test("on PGlite, a watcher in the worker's process sees the answer streamed, then journaled; a retried call resets", async () => {
  const model = await MockModel.open({ now: () => new Date(0) });
  let failed = false;
  model.setStream({
    chunks: 50,
    chunkMs: 2,
    // The first streamed answer breaks off after 20 pieces: the call is asked again (attempt 2).
    onChunk: (c) => {
      if (c.n === 2 && c.index === 20 && !failed) {
        failed = true;
        throw new Error("connection reset by the mock");
      }
    },
  });
  const agent = defineAgent({
    name: "streamer",
    instructions: "Look the word up, then explain.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({ agent: "streamer", steps: [{ tool: "lookup", args: { q: "tea" } }, { answer: ANSWER }] });
  const client = await connect({ memory: true });
  const worker = await client.startWorker([agent], {
    pollMs: 20,
    streamDeltas: true,
    retry: { ...DEFAULT_RETRY, backoffBaseMs: 1, backoffMaxMs: 5 },
  });
  try {
    await client.start(agent, { runId: "stream-1", input: "tea" });
    const events: StreamEvent[] = [];
    for await (const e of client.stream("stream-1", { pollMs: 20 })) events.push(e);
    const kinds = events.map((e) => e.type);
    assert.equal(kinds.at(-1), "status");
    assert.deepEqual(events.at(-1), { type: "status", status: "done", epoch: 1, error: null });
    // The step at seq 1 was answered by call 3 after call 2 broke off: one reset, then call 3's text.
    const resets = events.filter((e) => e.type === "reset");
    assert.equal(resets.length, 1, JSON.stringify(resets));
    assert.deepEqual({ ...resets[0], dropped: 0 }, {
      type: "reset",
      seq: 1,
      epoch: 1,
      attempt: 2,
      reason: "retry",
      dropped: 0,
    });
    const answer = events.find((e) => e.type === "answer");
    assert.ok(answer && answer.type === "answer");
    assert.equal(answer.text, ANSWER.replace("{n}", "3"));
    assert.equal(textSinceReset(events, 1), answer.text, "the journaled answer is the text since the reset");
    // What was dropped was call 2's, and none of it came after the reset.
    const afterReset = events.slice(events.indexOf(resets[0]));
    assert.ok(afterReset.every((e) => e.type !== "delta" || e.attempt === 2));
    assert.match(textSinceReset(events.slice(0, events.indexOf(resets[0])), 1), /^Attempt 2 writes/);
    // The order a reader expects: the call decided, its result, then the answer's text, then the answer.
    const first = (t: StreamEvent["type"]) => kinds.indexOf(t);
    assert.ok(first("tool_calls") < first("tool_result"));
    assert.ok(first("tool_result") < first("delta"));
    assert.ok(kinds.lastIndexOf("delta") < first("answer"));
    const record = await client.inspect("stream-1");
    assert.equal(record.journal[1].llm_attempts, 2, "the broken answer was paid for and asked again once");
  } finally {
    await worker.stop();
    await client.close();
  }
});

Deno.test("a watcher that connects after the run ended gets its history from the journal, then the end", async () => {
  const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 5 } });
  const agent = defineAgent({
    name: "late",
    instructions: "Answer.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({ agent: "late", steps: [{ tool: "lookup", args: { q: "x" } }, { answer: "fine" }] });
  const client = await connect({ memory: true });
  const worker = await client.startWorker([agent], { pollMs: 20, streamDeltas: true });
  try {
    await client.start(agent, { runId: "late-1", input: "x" });
    await client.wait("late-1", { pollMs: 10 });
    const events: StreamEvent[] = [];
    for await (const e of client.stream("late-1")) events.push(e);
    assert.deepEqual(events.map((e) => e.type), ["tool_calls", "tool_result", "answer", "status"]);
    assert.deepEqual(events[0], {
      type: "tool_calls",
      seq: 0,
      calls: [{ seq: 0, tool: "lookup", args: { q: "x" } }],
    });
    await assert.rejects(
      (async () => {
        for await (const _ of client.stream("no-such-run")) break;
      })(),
      /RUN_NOT_FOUND|no-such-run/,
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});
