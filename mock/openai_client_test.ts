/**
 * The official `openai` npm client against the mock model over HTTP: if the
 * reference client can call tools, read answers, list models and parse errors
 * from the mock, the mock speaks the protocol the runtime's client is tested
 * against. (Dev and test use only; the runtime does not depend on it.)
 */

import assert from "node:assert/strict";
import OpenAI from "npm:openai@7.59.0";
import { DONE_MESSAGE } from "./model.ts";
import { serveMocks } from "./server.ts";

const DEMO_TOOLS = [
  ["create_server", {
    name: { type: "string" },
    spec: { type: "string", enum: ["small", "medium", "large"] },
  }],
  ["create_database", {
    name: { type: "string" },
    engine: { type: "string", enum: ["postgres", "mysql"] },
    size_gb: { type: "integer" },
  }],
  ["create_dns_record", {
    hostname: { type: "string" },
    record_type: { type: "string", enum: ["A", "AAAA", "CNAME"] },
    target: { type: "string" },
  }],
].map(([name, properties]) => ({
  type: "function" as const,
  function: {
    name: name as string,
    description: `${name}`,
    parameters: {
      type: "object",
      properties,
      required: Object.keys(properties),
      additionalProperties: false,
    },
  },
}));

function client(baseURL: string, run: string): OpenAI {
  return new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0, defaultHeaders: { "x-agent-run": run } });
}

Deno.test("the official openai client drives the mock model's demo script to its final answer", async () => {
  const mocks = await serveMocks();
  try {
    const openai = client(mocks.modelUrl, "oa1");
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: "Provision it." }];
    const called: string[] = [];
    for (let turn = 0; turn < 4; turn++) {
      const completion = await openai.chat.completions.create({
        model: "mock-planner",
        messages,
        tools: DEMO_TOOLS,
      });
      assert.equal(completion.object, "chat.completion");
      assert.equal(completion.model, "mock-planner");
      assert.ok((completion.usage?.total_tokens ?? 0) > 0);
      const choice = completion.choices[0];
      const calls = choice.message.tool_calls ?? [];
      if (calls.length === 0) {
        assert.equal(choice.finish_reason, "stop");
        assert.equal(choice.message.content, DONE_MESSAGE);
        break;
      }
      assert.equal(choice.finish_reason, "tool_calls");
      assert.equal(calls.length, 1);
      const call = calls[0];
      assert.equal(call.type, "function");
      if (call.type !== "function") throw new Error("unreachable: asserted above");
      called.push(call.function.name);
      const args = JSON.parse(call.function.arguments);
      if (turn === 0) assert.deepEqual(args, { name: "srv-1", spec: "small" });
      messages.push(choice.message);
      messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify(`id-${turn}`) });
    }
    assert.deepEqual(called, ["create_server", "create_database", "create_dns_record"]);
    assert.equal(
      mocks.model.calls("oa1"),
      4,
      "counted per run from the x-agent-run header, with no user field",
    );
  } finally {
    await mocks.close();
  }
});

Deno.test("the official openai client lists the mock's model", async () => {
  const mocks = await serveMocks();
  try {
    const ids = [];
    for await (const model of client(mocks.modelUrl, "oa2").models.list()) ids.push(model.id);
    assert.deepEqual(ids, ["mock-planner"]);
  } finally {
    await mocks.close();
  }
});

Deno.test("the official openai client parses the mock's errors: status, code, message and Retry-After", async () => {
  const mocks = await serveMocks();
  try {
    mocks.model.setFaults({ fail_next: 1, fail_status: 429, retry_after_s: 2 });
    const err = await client(mocks.modelUrl, "oa3").chat.completions.create({
      model: "mock-planner",
      messages: [{ role: "user", content: "go" }],
    }).then(() => assert.fail("a 429 was accepted"), (e) => e);
    assert.ok(err instanceof OpenAI.RateLimitError, `expected a RateLimitError, got ${err}`);
    assert.equal(err.status, 429);
    assert.equal(err.code, "injected_failure");
    assert.equal(err.type, "rate_limit_error");
    assert.match(err.message, /mock model fault: fail_next/);
    assert.equal(err.headers?.get("retry-after"), "2");

    const missing = await client(mocks.modelUrl.replace(/\/v1$/, "/v2"), "oa3").chat.completions.create({
      model: "mock-planner",
      messages: [{ role: "user", content: "go" }],
    }).then(() => assert.fail("an unknown path was accepted"), (e) => e);
    assert.ok(missing instanceof OpenAI.NotFoundError, `expected a NotFoundError, got ${missing}`);
    assert.match(missing.message, /no route for POST \/v2\/chat\/completions/);
  } finally {
    await mocks.close();
  }
});
