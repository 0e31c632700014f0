import assert from "node:assert/strict";
import { MockModel, type ScriptStep } from "../../mock/model.ts";
import { ModelError } from "../base/errors.ts";
import type { DecideRequest } from "./transcript.ts";
import { OpenAIPlanner, parseCompletion } from "./openai.ts";
import { CompletionAccumulator, SseParser } from "./sse.ts";

Deno.test("SseParser joins data lines, skips comments and takes events split anywhere", () => {
  const body = ": keep-alive\r\ndata: one\r\ndata: two\r\n\r\nevent: done\ndata: [DONE]\n\ndata: cut";
  // Every split point gives the same events.
  for (let at = 0; at <= body.length; at++) {
    const p = new SseParser();
    const events = [...p.push(body.slice(0, at)), ...p.push(body.slice(at))];
    assert.deepEqual(events, [
      { event: "message", data: "one\ntwo" },
      { event: "done", data: "[DONE]" },
    ], `split at ${at}`);
    assert.deepEqual(p.end(), [], "an event not closed by a blank line is dropped");
  }
});

Deno.test("SseParser takes a lone carriage return as a line end, and a value without a colon as empty", () => {
  const p = new SseParser();
  assert.deepEqual(p.push("data\rdata:x\r\r"), [{ event: "message", data: "\nx" }]);
});

Deno.test("CompletionAccumulator builds the non-streamed body: text, tool calls by index, usage, finish reason", () => {
  const acc = new CompletionAccumulator();
  const added = [
    { id: "c1", model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" } }] },
    { choices: [{ index: 0, delta: { content: "Hel" } }] },
    { choices: [{ index: 0, delta: { content: "lo" } }] },
    {
      choices: [{
        index: 0,
        delta: {
          tool_calls: [{ index: 1, id: "b", type: "function", function: { name: "g", arguments: "" } }],
        },
      }],
    },
    {
      choices: [{
        index: 0,
        delta: {
          tool_calls: [{ index: 0, id: "a", type: "function", function: { name: "f", arguments: '{"x"' } }],
        },
      }],
    },
    { choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ":1}" } }] } }] },
    {
      choices: [{
        index: 0,
        delta: { tool_calls: [{ index: 1, function: { name: "g", arguments: "{}" } }] },
      }],
    },
    { choices: [{ index: 0, delta: {}, finish_reason: "tool_calls" }] },
    { choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
  ].map((c) => acc.add(c));
  assert.deepEqual(added, ["", "Hel", "lo", "", "", "", "", "", ""]);
  assert.deepEqual(acc.body(), {
    id: "c1",
    object: "chat.completion",
    model: "m",
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content: "Hello",
        tool_calls: [
          { id: "a", type: "function", function: { name: "f", arguments: '{"x":1}' } },
          { id: "b", type: "function", function: { name: "g", arguments: "{}" } },
        ],
      },
      finish_reason: "tool_calls",
    }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
  });
});

Deno.test("CompletionAccumulator keeps an error chunk, so the answer is refused with what the server said", () => {
  const acc = new CompletionAccumulator();
  acc.add({ error: { message: "overloaded" } });
  assert.throws(() => parseCompletion(JSON.stringify(acc.body())), (e) => {
    assert.ok(e instanceof ModelError);
    assert.equal(e.code, "MODEL_NO_CHOICES");
    assert.match(e.message, /overloaded/);
    return true;
  });
});

const request = (runId: string, onDelta?: (t: string) => void): DecideRequest => ({
  runId,
  seq: 0,
  agent: "streamer",
  transcript: [{ role: "system", text: "be brief" }, { role: "user", text: "go" }],
  tools: [{ name: "lookup", description: "looks up", parameters: { type: "object", properties: {} } }],
  ...(onDelta ? { onDelta } : {}),
});

Deno.test("a streamed answer is the same decision as the non-streamed one, text and tool calls alike", async (t) => {
  const long = "A long answer, written piece by piece: ".repeat(8) + "done é 😀.";
  for (
    const [name, steps] of [
      ["text", [{ answer: long }]],
      ["tool call", [{ tool: "lookup", args: { q: 'a quoted "value" 😀', n: 3 } }]],
      ["two calls", [{
        calls: [{ tool: "lookup", args: { q: "x" } }, { tool: "lookup", args: { q: "y" } }],
      }]],
    ] as [string, ScriptStep[]][]
  ) {
    await t.step(name, async () => {
      const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 7 } });
      const planner = new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler });
      // Two runs with the same script: the answers differ only in the run's call count, which is 1 for both.
      model.setScript({ run: "plain", steps: [...steps] });
      model.setScript({ run: "streamed", steps: [...steps] });
      const plain = await planner.decide(request("plain"));
      const deltas: string[] = [];
      const streamed = await planner.decide(request("streamed", (d) => deltas.push(d)));
      assert.deepEqual(streamed, plain);
      if (plain.kind === "done") {
        assert.equal(deltas.join(""), plain.text);
        assert.equal(deltas.length, 7);
      } else {
        assert.deepEqual(deltas, [], "a tool call's arguments are not text: no deltas");
      }
    });
  }
});

Deno.test("a streamed answer cut off before its end is a transient MODEL_UNREACHABLE, not an answer", async () => {
  const sse = (lines: string[]) =>
    new Response(lines.map((l) => `data: ${l}\n\n`).join(""), {
      headers: { "content-type": "text/event-stream" },
    });
  const planner = new OpenAIPlanner({
    url: "http://mock/v1",
    model: "m",
    fetch: () =>
      Promise.resolve(sse([JSON.stringify({ choices: [{ index: 0, delta: { content: "Half an ans" } }] })])),
  });
  const seen: string[] = [];
  await assert.rejects(planner.decide(request("r", (d) => seen.push(d))), (e) => {
    assert.ok(e instanceof ModelError);
    assert.equal(e.code, "MODEL_UNREACHABLE");
    assert.equal(e.transient, true);
    return true;
  });
  assert.deepEqual(seen, ["Half an ans"]);
});

Deno.test("a server that ignores stream: true and answers JSON is read as a plain answer", async () => {
  const model = await MockModel.open({ now: () => new Date(0) });
  model.setScript({ run: "r", steps: [{ answer: "plain" }] });
  const planner = new OpenAIPlanner({
    url: "http://mock/v1",
    model: "m",
    fetch: async (req) => {
      const body = await req.json();
      assert.equal(body.stream, true);
      assert.deepEqual(body.stream_options, { include_usage: true });
      delete body.stream;
      return await model.handler(
        new Request(req.url, { method: "POST", headers: req.headers, body: JSON.stringify(body) }),
      );
    },
  });
  const seen: string[] = [];
  const answer = await planner.decide(request("r", (d) => seen.push(d)));
  assert.equal(answer.kind === "done" && answer.text, "plain");
  assert.deepEqual(seen, []);
});
