/**
 * AI SDK language models as agents' models, with the real provider packages
 * and no network: `@ai-sdk/openai-compatible` against the mock model over
 * HTTP, and `@ai-sdk/anthropic` against the fake Messages API
 * (`mock/anthropic.ts`), each driving a run of the demo's tools to its end in
 * a worker hosted in this process.
 */

import assert from "node:assert/strict";
import { createAnthropic } from "npm:@ai-sdk/anthropic@4.0.105";
import { createOpenAICompatible } from "npm:@ai-sdk/openai-compatible@3.0.92";
import { defineAgent, Logger, ModelError } from "../mod.ts";
import type { JournalRow } from "../store.ts";
import { aiSdkPlanner } from "../runtime/model/ai_sdk.ts";
import { arraySink } from "../runtime/base/log.ts";
import { DEFAULT_RETRY } from "../runtime/run/deps.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { DEMO_GOAL } from "../examples/provision/agent.ts";
import { DONE_MESSAGE } from "../mock/model.ts";
import { serveAnthropic } from "../mock/anthropic.ts";
import { ANTHROPIC_STEPS } from "./testdata/ai_sdk/script.ts";
import { serveMocks } from "../mock/server.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import { MockLanguageModelV3 } from "npm:ai@7.0.173/test";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "npm:@ai-sdk/provider@4.0.38";
import { testClient } from "./_pglite.ts";

const FAST_RETRY = { ...DEFAULT_RETRY, backoffBaseMs: 2, backoffMaxMs: 10, retryAfterMaxMs: 20 };

/** Runs `agent` once to its end in a worker of this process; returns the run, its rows and its log events. */
async function runToEnd(agent: Agent, runId: string) {
  const lines: string[] = [];
  const log = new Logger({ clock: new SystemClock(), sink: arraySink(lines), format: "json" });
  const client = await testClient();
  try {
    const worker = await client.startWorker([agent], { log, retry: FAST_RETRY, pollMs: 20 });
    try {
      await client.start(agent, { runId });
      const run = await client.wait(runId, { timeoutMs: 30_000, pollMs: 20 });
      const { journal, effects } = await client.store.reads.loadHistory(runId);
      const events = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      return { run, journal, effects, events, lines };
    } finally {
      await worker.stop();
    }
  } finally {
    await client.close();
  }
}

function demoAgentWith(model: Agent["model"], cloudUrl: string, name = "provision"): Agent {
  return defineAgent({ name, tools: demoTools({ cloudUrl }), model, defaultInput: DEMO_GOAL });
}

Deno.test("the demo on @ai-sdk/openai-compatible against the mock model over HTTP runs to its end, decisions stored as the built-in planner's", async () => {
  const mocks = await serveMocks();
  try {
    const model = createOpenAICompatible({ name: "mock", baseURL: mocks.modelUrl })("mock-planner");
    const { run, journal, effects } = await runToEnd(demoAgentWith(model, mocks.cloudUrl), "aisdk-oc");
    assert.equal(run.status, "done", run.error ?? "");
    assert.equal(run.output, DONE_MESSAGE);
    assert.equal(mocks.model.calls("aisdk-oc"), 4, "one request per step");
    assert.deepEqual(journal.map((j) => [j.seq, j.llm_attempts]), [[0, 1], [1, 1], [2, 1], [3, 1]]);
    // The same bytes the chat-completions planner stores: no parts for an answer with nothing to send back.
    assert.deepEqual(journal[0].decision, { tool: "create_server", args: { name: "srv-1", spec: "small" } });
    assert.deepEqual(journal[3].decision, { done: true, message: DONE_MESSAGE });
    assert.deepEqual(effects.map((e) => [e.idempotency_key, e.remote]), [
      ["aisdk-oc:0", "created"],
      ["aisdk-oc:1", "created"],
      ["aisdk-oc:2", "created"],
    ]);
    // The DNS record points at the server the model made: the tool results reached it over the AI SDK's wire.
    const created = mocks.cloud.created("aisdk-oc:");
    assert.deepEqual(created.map((r) => r.kind).sort(), ["database", "dns_record", "server"]);
    const server = created.find((r) => r.kind === "server")?.payload.name;
    assert.equal(created.find((r) => r.kind === "dns_record")?.payload.target, server);
    const usage = journal[0].usage as Record<string, number>;
    assert.ok(
      usage.prompt_tokens > 0 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens,
    );
  } finally {
    await mocks.close();
  }
});

Deno.test("three calls in one answer over @ai-sdk/openai-compatible are one decision of three calls", async () => {
  const mocks = await serveMocks({ modelParallel: 3 });
  try {
    const model = createOpenAICompatible({ name: "mock", baseURL: mocks.modelUrl })("mock-planner");
    const { run, journal, effects } = await runToEnd(demoAgentWith(model, mocks.cloudUrl), "aisdk-oc3");
    assert.equal(run.status, "done", run.error ?? "");
    assert.deepEqual(journal.map((j) => j.seq), [0, 3]);
    assert.deepEqual(
      journal[0].decision && "calls" in journal[0].decision && journal[0].decision.calls.map((c) => c.tool),
      ["create_server", "create_database", "create_dns_record"],
    );
    assert.equal(effects.length, 3);
    assert.equal(mocks.model.calls("aisdk-oc3"), 2);
  } finally {
    await mocks.close();
  }
});

const THINKING = {
  maxOutputTokens: 1024,
  extra: { anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } },
};

function anthropicModel(url: string) {
  return aiSdkPlanner(createAnthropic({ baseURL: url, apiKey: "test-key" })("claude-sonnet-4-5"), {
    params: THINKING,
  });
}

Deno.test("@ai-sdk/anthropic against the fake Messages API: parallel tool use and signed thinking, sent back unchanged", async () => {
  const anthropic = serveAnthropic();
  const mocks = await serveMocks();
  try {
    anthropic.fake.setAgentScript("ops", ANTHROPIC_STEPS);
    const agent = demoAgentWith(anthropicModel(anthropic.url), mocks.cloudUrl, "ops");
    const { run, journal, effects, events } = await runToEnd(agent, "claude-1");
    assert.equal(run.status, "done", run.error ?? "");
    assert.equal(run.output, "Provisioned web-1, db-1 and app.example.test.");
    const requests = anthropic.fake.requests("claude-1");
    assert.deepEqual(requests.map((r) => r.status), [200, 200, 200], "one request per step, none refused");
    // Each later request carried every thinking block given before, its signature checked by the fake.
    assert.deepEqual(requests.map((r) => r.verifiedThinking), [0, 1, 2]);
    assert.equal(requests[0].body.max_tokens, 2048, "the answer's cap plus the thinking budget");
    // The two tools of the first answer are one decision of two calls, journaled with the signed thinking.
    const first = journal[0].decision as Extract<JournalRow["decision"], { calls: unknown }>;
    assert.deepEqual(first.calls.map((c) => c.tool), ["create_server", "create_database"]);
    assert.deepEqual(first.parts, [
      {
        type: "reasoning",
        text: ANTHROPIC_STEPS[0].thinking,
        providerMetadata: {
          anthropic: { signature: await anthropic.fake.signature(ANTHROPIC_STEPS[0].thinking!) },
        },
      },
      { type: "text", text: "Creating the server and the database." },
      { type: "call", index: 0 },
      { type: "call", index: 1 },
    ]);
    assert.deepEqual(journal.map((j) => j.seq), [0, 2, 3]);
    assert.deepEqual(effects.map((e) => [e.idempotency_key, e.remote]), [
      ["claude-1:0", "created"],
      ["claude-1:1", "created"],
      ["claude-1:2", "created"],
    ]);
    // What the second request sent back for the first turn, in Anthropic's own blocks.
    const messages = requests[1].body.messages as { role: string; content: Record<string, unknown>[] }[];
    assert.deepEqual(messages[1].content.map((b) => b.type), ["thinking", "text", "tool_use", "tool_use"]);
    assert.deepEqual(messages[2].content.map((b) => [b.type, b.tool_use_id]), [
      ["tool_result", "call_0"],
      ["tool_result", "call_1"],
    ]);
    // Usage in the journal's names, cache detail included.
    const usage = journal[0].usage as Record<string, unknown>;
    assert.deepEqual(usage.prompt_tokens_details, { cached_tokens: 0, cache_write_tokens: 0 });
    assert.ok((usage.total_tokens as number) > 0);
    assert.equal(events.filter((e) => e.event === "model-warning").length, 0, JSON.stringify(events));
  } finally {
    await mocks.close();
    await anthropic.close();
  }
});

Deno.test("a 529 overload from the fake is a transient error with its retry-after; the run waits and goes on", async () => {
  const anthropic = serveAnthropic();
  const mocks = await serveMocks();
  try {
    const planner = anthropicModel(anthropic.url);
    anthropic.fake.overloadNext(1, 7);
    const err = await planner.decide({
      runId: "o-1",
      seq: 0,
      transcript: [{ role: "system", text: "s" }, { role: "user", text: "u" }],
      tools: [],
    }).catch((e) => e);
    assert.ok(err instanceof ModelError, String(err));
    assert.deepEqual([err.code, err.transient, err.retryAfterMs], ["MODEL_HTTP", true, 7_000]);
    assert.match(err.message, /answered HTTP 529: Overloaded/);
    assert.equal(anthropic.fake.calls("o-1"), 1, "no hidden retry inside the provider");

    anthropic.fake.setAgentScript("ops", ANTHROPIC_STEPS);
    anthropic.fake.overloadNext(1, 3);
    const { run, journal, events } = await runToEnd(
      demoAgentWith(planner, mocks.cloudUrl, "ops"),
      "claude-529",
    );
    assert.equal(run.status, "done", run.error ?? "");
    const retry = events.find((e) => e.event === "model-retry");
    assert.equal(retry?.code, "MODEL_HTTP");
    assert.equal(retry?.retry_after_ms, 3_000, "the server's wait, capped by the policy for the test");
    assert.equal(journal[0].llm_attempts, 2, "the overloaded request was counted");
    assert.equal(anthropic.fake.calls("claude-529"), 4);
  } finally {
    await mocks.close();
    await anthropic.close();
  }
});

Deno.test("the fake refuses a thinking block that comes back changed, so the checks above can fail", async () => {
  const anthropic = serveAnthropic();
  try {
    const planner = anthropicModel(anthropic.url);
    const signature = await anthropic.fake.signature("I thought this.");
    const ask = (text: string) =>
      planner.decide({
        runId: "tamper",
        seq: 1,
        transcript: [
          { role: "system", text: "s" },
          { role: "user", text: "u" },
          {
            role: "assistant",
            calls: [{ id: "call_0", name: "create_server", args: { name: "a", spec: "small" } }],
            parts: [
              { type: "reasoning", text, providerMetadata: { anthropic: { signature } } },
              { type: "call", index: 0 },
            ],
          },
          { role: "tool", callId: "call_0", name: "create_server", failed: false, result: { id: "i-1" } },
        ],
        tools: [],
      });
    const err = await ask("I thought this, edited.").catch((e) => e);
    assert.ok(err instanceof ModelError, String(err));
    assert.equal(err.code, "MODEL_HTTP");
    assert.equal(err.transient, false);
    assert.match(err.message, /HTTP 400: messages\.1\.content\.0: Invalid `signature` in `thinking` block/);
    // Unchanged, the same history is taken.
    const decision = await ask("I thought this.");
    assert.equal(decision.kind, "done");
    assert.deepEqual(anthropic.fake.requests("tamper").map((r) => [r.status, r.verifiedThinking]), [
      [400, 0],
      [
        200,
        1,
      ],
    ]);
  } finally {
    await anthropic.close();
  }
});

Deno.test("through the journal: reasoning metadata and a provider-executed call go back unchanged; only our call gets a key", async () => {
  const mocks = await serveMocks();
  const usage = {
    inputTokens: { total: 900, noCache: 100, cacheRead: 800, cacheWrite: 0 },
    outputTokens: { total: 60, text: 20, reasoning: 40 },
  };
  const first: LanguageModelV3GenerateResult = {
    content: [
      {
        type: "reasoning",
        text: "Look the size up first.",
        providerMetadata: { acme: { signature: "s-1" } },
      },
      {
        type: "tool-call",
        toolCallId: "ws_1",
        toolName: "web_search",
        input: '{"q":"size"}',
        providerExecuted: true,
      },
      { type: "tool-result", toolCallId: "ws_1", toolName: "web_search", result: { answer: "small" } },
      {
        type: "tool-call",
        toolCallId: "t_1",
        toolName: "create_server",
        input: '{"name":"web-1","spec":"small"}',
      },
    ],
    finishReason: { unified: "tool-calls", raw: "tool_use" },
    usage,
    warnings: [{ type: "unsupported", feature: "seed" }],
  };
  const done: LanguageModelV3GenerateResult = {
    content: [{ type: "text", text: "Made web-1." }],
    finishReason: { unified: "stop", raw: "end_turn" },
    usage,
    warnings: [],
  };
  const model = new MockLanguageModelV3({ doGenerate: [first, done] });
  try {
    const { run, journal, effects, events } = await runToEnd(demoAgentWith(model, mocks.cloudUrl), "rt-1");
    assert.equal(run.status, "done", run.error ?? "");
    assert.equal(model.doGenerateCalls.length, 2);
    const decision = journal[0].decision!;
    assert.deepEqual(decision, {
      tool: "create_server",
      args: { name: "web-1", spec: "small" },
      parts: [
        {
          type: "reasoning",
          text: "Look the size up first.",
          providerMetadata: { acme: { signature: "s-1" } },
        },
        { type: "provider-call", id: "ws_1", name: "web_search", input: { q: "size" } },
        { type: "provider-result", id: "ws_1", name: "web_search", result: { answer: "small" } },
        { type: "call", index: 0 },
      ],
    });
    const second = model.doGenerateCalls[1] as LanguageModelV3CallOptions;
    assert.deepEqual(second.prompt[2], {
      role: "assistant",
      content: [
        {
          type: "reasoning",
          text: "Look the size up first.",
          providerOptions: { acme: { signature: "s-1" } },
        },
        {
          type: "tool-call",
          toolCallId: "ws_1",
          toolName: "web_search",
          input: { q: "size" },
          providerExecuted: true,
        },
        {
          type: "tool-result",
          toolCallId: "ws_1",
          toolName: "web_search",
          output: { type: "json", value: { answer: "small" } },
        },
        {
          type: "tool-call",
          toolCallId: "call_0",
          toolName: "create_server",
          input: { name: "web-1", spec: "small" },
        },
      ],
    });
    // The search was the provider's: no row, no key, no request to the cloud for it.
    assert.deepEqual(effects.map((e) => e.idempotency_key), ["rt-1:0"]);
    assert.deepEqual(journal.map((j) => j.seq), [0, 1]);
    assert.deepEqual(journal[0].usage, {
      prompt_tokens: 900,
      completion_tokens: 60,
      total_tokens: 960,
      prompt_tokens_details: { cached_tokens: 800, cache_write_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 40 },
    });
    assert.equal(
      journal[0].spent_tokens,
      960,
      "the budget counts every token, cached and reasoning ones too",
    );
    const warning = events.find((e) => e.event === "model-warning");
    assert.equal(warning?.warnings, "unsupported: seed");
  } finally {
    await mocks.close();
  }
});
