import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { type Client } from "../client/client.ts";
import { defineTool } from "../agent/tools.ts";
import type { Planner } from "../model/planner.ts";
import { scripted } from "../testdata/scripted.ts";
import { testClient } from "../../tests/_pglite.ts";

const note = defineTool({
  name: "note",
  description: "Writes a note.",
  args: z.strictObject({ text: z.string() }),
  run: (args) => Promise.resolve({ result: { noted: args.text } }),
});

const client: Client = await testClient();

/** Runs one run of an agent with `model` to its end; returns what the journal holds. */
async function runWith(name: string, model: Planner) {
  const agent = defineAgent({ name, instructions: `Be ${name}.`, tools: [note], model });
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId: `${name}-1`, input: "Take a note." });
    const finished = await client.wait(`${name}-1`, { timeoutMs: 30_000, pollMs: 10 });
    return { finished, record: await client.reads.inspect(`${name}-1`) };
  } finally {
    await worker.stop();
  }
}

const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };
const call = { name: "note", args: { text: "hi" } };

Deno.test("an answer with two tool calls is one step: both calls run under keys of their own, in one model request", async () => {
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [call, { id: "second", name: "note", args: { text: "there" } }], usage },
    { kind: "done", text: "Noted.", usage },
  ]);
  const { finished, record } = await runWith("two-calls", model);
  assert.equal(finished.status, "done");
  assert.equal(finished.output, "Noted.");
  assert.equal(asked.length, 2, "one request for the two calls, one for the answer");
  assert.deepEqual(
    record.journal.map((j) => j.seq),
    [0, 2],
    "the next decision is at seq 2: the calls own 0 and 1",
  );
  assert.deepEqual(record.journal[0].decision, {
    calls: [{ tool: "note", args: { text: "hi" } }, { tool: "note", args: { text: "there" } }],
  });
  assert.deepEqual(record.journal[0].rejections, []);
  assert.deepEqual(
    record.effects.map((e) => [e.idempotency_key, e.status, e.result]),
    [["two-calls-1:0", "confirmed", { noted: "hi" }], ["two-calls-1:1", "confirmed", { noted: "there" }]],
  );
  // The model sees one assistant turn with both calls, then each result matched by id, in the order asked.
  assert.deepEqual(asked[1].transcript.slice(2), [
    {
      role: "assistant",
      calls: [
        { id: "call_0", name: "note", args: { text: "hi" } },
        { id: "call_1", name: "note", args: { text: "there" } },
      ],
    },
    { role: "tool", callId: "call_0", name: "note", failed: false, result: { noted: "hi" } },
    { role: "tool", callId: "call_1", name: "note", failed: false, result: { noted: "there" } },
  ]);
});

Deno.test("an answer with more calls than the agent's maxCallsPerStep is refused as MODEL_TOO_MANY_CALLS, counted, and asked again", async () => {
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [call, call, call], usage },
    { kind: "tool_calls", calls: [call], usage },
    { kind: "done", text: "Noted.", usage },
  ]);
  const agent = defineAgent({ name: "capped", tools: [note], model, maxCallsPerStep: 2 });
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId: "capped-1", input: "Take a note." });
    const finished = await client.wait("capped-1", { timeoutMs: 30_000, pollMs: 10 });
    assert.equal(finished.status, "done");
  } finally {
    await worker.stop();
  }
  const record = await client.reads.inspect("capped-1");
  const refusal = "The model asked for 3 tool calls at once; at most 2 per step are allowed";
  assert.deepEqual(record.journal[0].rejections, [{ code: "MODEL_TOO_MANY_CALLS", message: refusal }]);
  assert.equal(record.journal[0].llm_attempts, 2, "the refused answer was paid for");
  assert.deepEqual(record.journal[0].usage, { prompt_tokens: 10, completion_tokens: 4, total_tokens: 14 });
  assert.deepEqual(record.effects.map((e) => e.idempotency_key), ["capped-1:0"], "one call was made");
  assert.deepEqual(asked[1].transcript.at(-1), {
    role: "user",
    text: `Your previous answer was refused (MODEL_TOO_MANY_CALLS): ${refusal}. ` +
      "Answer again with calls to listed tools, or with no tool call when the goal is complete.",
  });
});

Deno.test("one bad call refuses the whole answer: no call of it is sent, and the refusal names the call", async () => {
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [call, { name: "note", args: { text: 5 } }], usage },
    { kind: "done", text: "Nothing.", usage },
  ]);
  const { finished, record } = await runWith("half-bad", model);
  assert.equal(finished.status, "done");
  assert.equal(record.effects.length, 0, "the good call was not sent on a refused answer");
  assert.equal(record.journal[0].rejections[0].code, "BAD_ARGS");
  assert.match(record.journal[0].rejections[0].message, /^call 2 of 2: /);
  assert.equal(asked.length, 2);
});

Deno.test("an answer listing no tool calls is refused as MODEL_EMPTY and asked again", async () => {
  const { model } = scripted([
    { kind: "tool_calls", calls: [], text: "Thinking." },
    { kind: "done", text: "Nothing to do." },
  ]);
  const { finished, record } = await runWith("no-calls", model);
  assert.equal(finished.output, "Nothing to do.");
  assert.deepEqual(record.journal[0].rejections.map((r) => r.code), ["MODEL_EMPTY"]);
  assert.equal(record.effects.length, 0);
});

Deno.test("a planner is asked with the neutral transcript and tools, the call id derived from the step", async () => {
  const { model, asked } = scripted([
    { kind: "tool_calls", calls: [{ ...call, id: "the-models-own-id" }] },
    { kind: "done", text: "Noted." },
  ]);
  await runWith("neutral", model);
  assert.deepEqual(asked[0].tools, [{
    name: "note",
    description: "Writes a note.",
    parameters: {
      type: "object",
      properties: { text: { type: "string" } },
      required: ["text"],
      additionalProperties: false,
    },
  }]);
  assert.deepEqual(asked[1].transcript, [
    { role: "system", text: "Be neutral." },
    { role: "user", text: "Take a note." },
    { role: "assistant", calls: [{ id: "call_0", name: "note", args: { text: "hi" } }] },
    { role: "tool", callId: "call_0", name: "note", failed: false, result: { noted: "hi" } },
  ]);
  assert.equal(asked[1].tools, asked[0].tools, "one array per registry");
});

Deno.test.afterAll(async () => {
  await client.close();
});

Deno.test("an agent's historySteps shows the model the goal and its last steps only, each call beside its result; every step stays stored", async () => {
  const steps = Array.from({ length: 6 }, (_, i) => ({
    kind: "tool_calls" as const,
    calls: [{ name: "note", args: { text: `n${i}` } }],
    usage,
  }));
  const { model, asked } = scripted([...steps, { kind: "done", text: "Noted.", usage }]);
  const agent = defineAgent({ name: "windowed", tools: [note], model, historySteps: 2 });
  const worker = await client.startWorker([agent], { pollMs: 10 });
  try {
    await client.start(agent, { runId: "windowed-1", input: "Take six notes." });
    assert.equal((await client.wait("windowed-1", { timeoutMs: 30_000, pollMs: 10 })).status, "done");
    const record = await client.reads.inspect("windowed-1");
    assert.equal(record.effects.length, 6, "every call is stored");
  } finally {
    await worker.stop();
  }
  // Each request: the instructions, the goal, then at most two steps (a call and its result each).
  assert.deepEqual(asked.map((a) => a.transcript.length), [2, 4, 6, 6, 6, 6, 6]);
  const last = asked[6].transcript;
  assert.deepEqual(last.slice(0, 2).map((m) => m.role), ["system", "user"]);
  assert.equal((last[1] as { text: string }).text, "Take six notes.");
  assert.deepEqual(
    last.slice(2).map((m) => m.role === "tool" ? m.callId : m.role === "assistant" ? m.calls[0].id : ""),
    [
      "call_4",
      "call_4",
      "call_5",
      "call_5",
    ],
  );
});
