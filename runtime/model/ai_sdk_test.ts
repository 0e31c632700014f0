import assert from "node:assert/strict";
import { APICallError, LoadAPIKeyError } from "npm:@ai-sdk/provider@4.0.38";
import type {
  LanguageModelV2,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3GenerateResult,
} from "npm:@ai-sdk/provider@4.0.38";
import { MockLanguageModelV3, MockLanguageModelV4 } from "npm:ai@7.0.173/test";
import { buildTranscript } from "../step/history.ts";
import { ModelError } from "../base/errors.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";
import type { Decision } from "../store/rows.ts";
import type { ToolDescription } from "./transcript.ts";
import type { DecideRequest, PlannerDecision } from "./transcript.ts";
import { aiSdkPrompt, aiSdkTools, aiSdkUsage } from "./_ai_sdk_wire.ts";
import { AiSdkPlanner, aiSdkPlanner, isLanguageModel } from "./ai_sdk.ts";
import { chatMessages } from "./openai.ts";

const TOOLS: ToolDescription[] = [
  {
    name: "create_server",
    description: "Create a server.",
    parameters: { type: "object", properties: { name: { type: "string" } }, required: ["name"] },
  },
];

const USAGE_V3 = {
  inputTokens: { total: 120, noCache: 20, cacheRead: 100, cacheWrite: 0 },
  outputTokens: { total: 30, text: 10, reasoning: 20 },
};

/** A v3 answer with these parts, finishing `unified`. */
function answer(
  content: LanguageModelV3Content[],
  unified: LanguageModelV3GenerateResult["finishReason"]["unified"] = "stop",
  extra: Partial<LanguageModelV3GenerateResult> = {},
): LanguageModelV3GenerateResult {
  return {
    content,
    finishReason: { unified, raw: `raw-${unified}` },
    usage: USAGE_V3,
    warnings: [],
    ...extra,
  };
}

function request(extra: Partial<DecideRequest> = {}): DecideRequest {
  return {
    runId: "r-1",
    seq: 0,
    agent: "provision",
    transcript: [{ role: "system", text: "Be brief." }, { role: "user", text: "Make a server." }],
    tools: TOOLS,
    ...extra,
  };
}

/** Asks a v3 mock once with `result`; returns the decision (or the error) and the options it was called with. */
async function decideWith(
  result: LanguageModelV3GenerateResult | LanguageModelV3["doGenerate"],
  req: DecideRequest = request(),
): Promise<{ decision?: PlannerDecision; error?: ModelError; calls: LanguageModelV3CallOptions[] }> {
  const model = new MockLanguageModelV3({ doGenerate: result });
  try {
    const decision = await aiSdkPlanner(model).decide(req);
    return { decision, calls: model.doGenerateCalls };
  } catch (err) {
    assert.ok(err instanceof ModelError, String(err));
    return { error: err, calls: model.doGenerateCalls };
  }
}
type LanguageModelV3 = MockLanguageModelV3;

Deno.test("isLanguageModel() knows a model by its specification version and doGenerate, and nothing else", () => {
  assert.equal(isLanguageModel(new MockLanguageModelV3()), true);
  assert.equal(isLanguageModel(new MockLanguageModelV4()), true);
  assert.equal(isLanguageModel({ decide: () => Promise.resolve({}) }), false);
  assert.equal(isLanguageModel({ url: "http://x/v1", model: "m" }), false);
  assert.equal(isLanguageModel(() => {}), false);
  assert.equal(isLanguageModel(null), false);
});

Deno.test("aiSdkPlanner() refuses a specification version it does not speak, naming the ones it does", () => {
  const v1 = {
    specificationVersion: "v1",
    provider: "old",
    modelId: "m",
    doGenerate: () => Promise.resolve(),
  };
  assert.throws(() => aiSdkPlanner(v1), {
    name: "RuntimeError",
    code: "MODEL_SETTINGS_INVALID",
    message: /'specificationVersion' must be one of v2, v3, v4: current value is "v1"/,
  });
  const p = aiSdkPlanner(new MockLanguageModelV4({ provider: "acme.chat", modelId: "big-1" }));
  assert.equal(p.describe, "ai-sdk acme.chat model=big-1");
  assert.equal(p.model, "big-1");
  assert.equal(p.specificationVersion, "v4");
});

Deno.test("aiSdkPlanner() refuses provider options that ask for several answers, as an agent's modelParams are", () => {
  const model = new MockLanguageModelV4({ provider: "local.chat", modelId: "m" });
  assert.throws(() => aiSdkPlanner(model, { params: { extra: { local: { n: 8 } } } }), {
    name: "RuntimeError",
    code: "MODEL_PARAMS_INVALID",
    message: /^Cannot use the AI SDK model local\.chat model=m: .*'extra' may not set local\.n to 8/,
  });
  assert.deepEqual(aiSdkPlanner(model, { params: { extra: { local: { n: 1 } } } }).model, "m");
});

Deno.test("the transcript becomes the AI SDK prompt: system, user, assistant turns with their parts, one tool message per step", () => {
  const signature = { anthropic: { signature: "sig-abc" } };
  const decision: Decision = {
    calls: [{ tool: "create_server", args: { name: "a" } }, { tool: "create_server", args: { name: "b" } }],
    parts: [
      { type: "reasoning", text: "Two servers, at once.", providerMetadata: signature },
      { type: "text", text: "Making both." },
      { type: "provider-call", id: "srv_1", name: "web_search", input: { query: "sizes" } },
      { type: "provider-result", id: "srv_1", name: "web_search", result: [{ url: "https://x" }] },
      { type: "call", index: 1, providerMetadata: { anthropic: { caller: { type: "direct" } } } },
      { type: "call", index: 0 },
    ],
  };
  const state = {
    goal: "Make two servers.",
    journal: new Map([[0, journalRow("r", 0, decision)]]),
    effects: new Map([
      [0, effectRow("r", 0, { tool: "create_server", args: { name: "a" } }, { result: { id: "i-1" } })],
      [
        1,
        effectRow("r", 1, { tool: "create_server", args: { name: "b" } }, {
          status: "failed",
          error: "quota",
        }),
      ],
    ]),
  };
  const prompt = aiSdkPrompt(buildTranscript(state, 2, "Be brief."));
  assert.deepEqual(prompt, [
    { role: "system", content: "Be brief." },
    { role: "user", content: [{ type: "text", text: "Make two servers." }] },
    {
      role: "assistant",
      content: [
        { type: "reasoning", text: "Two servers, at once.", providerOptions: signature },
        { type: "text", text: "Making both." },
        {
          type: "tool-call",
          toolCallId: "srv_1",
          toolName: "web_search",
          input: { query: "sizes" },
          providerExecuted: true,
        },
        {
          type: "tool-result",
          toolCallId: "srv_1",
          toolName: "web_search",
          output: { type: "json", value: [{ url: "https://x" }] },
        },
        {
          type: "tool-call",
          toolCallId: "call_1",
          toolName: "create_server",
          input: { name: "b" },
          providerOptions: { anthropic: { caller: { type: "direct" } } },
        },
        { type: "tool-call", toolCallId: "call_0", toolName: "create_server", input: { name: "a" } },
      ],
    },
    {
      role: "tool",
      content: [
        {
          type: "tool-result",
          toolCallId: "call_0",
          toolName: "create_server",
          output: { type: "json", value: { id: "i-1" } },
        },
        {
          type: "tool-result",
          toolCallId: "call_1",
          toolName: "create_server",
          output: { type: "error-text", value: "quota" },
        },
      ],
    },
  ]);
  // The chat-completions view of the same history: its text and calls, nothing it cannot send.
  assert.deepEqual(chatMessages(buildTranscript(state, 2, "Be brief."))[2], {
    role: "assistant",
    content: "Making both.",
    tool_calls: [
      { id: "call_0", type: "function", function: { name: "create_server", arguments: '{"name":"a"}' } },
      { id: "call_1", type: "function", function: { name: "create_server", arguments: '{"name":"b"}' } },
    ],
  });
});

Deno.test("a decision without parts (any other planner's) is sent as its calls; custom parts go to v4 models only", () => {
  const transcript = buildTranscript(
    {
      goal: "g",
      journal: new Map([[0, journalRow("r", 0, { tool: "create_server", args: { name: "a" } })]]),
      effects: new Map([[0, effectRow("r", 0, { tool: "create_server", args: { name: "a" } }, {})]]),
    },
    1,
    "i",
  );
  assert.deepEqual(aiSdkPrompt(transcript)[2], {
    role: "assistant",
    content: [{ type: "tool-call", toolCallId: "call_0", toolName: "create_server", input: { name: "a" } }],
  });
  const custom = [{
    role: "assistant" as const,
    calls: [],
    parts: [{
      type: "custom" as const,
      kind: "anthropic.fallback",
      providerMetadata: { anthropic: { to: "x" } },
    }],
  }];
  assert.deepEqual(aiSdkPrompt(custom, "v4")[0].content, [
    { type: "custom", kind: "anthropic.fallback", providerOptions: { anthropic: { to: "x" } } },
  ]);
  assert.deepEqual(aiSdkPrompt(custom, "v3")[0].content, []);
  assert.deepEqual(aiSdkTools(TOOLS), [{
    type: "function",
    name: "create_server",
    description: "Create a server.",
    inputSchema: TOOLS[0].parameters,
  }]);
});

Deno.test("the request's parameters become call options; extra is providerOptions; the run is in the headers", async () => {
  const ask = new AbortController();
  const model = new MockLanguageModelV4({
    doGenerate: {
      content: [{ type: "text", text: "ok" }],
      finishReason: { unified: "stop", raw: "end_turn" },
      usage: USAGE_V3,
      warnings: [],
    },
  });
  const planner = aiSdkPlanner(model, {
    params: {
      temperature: 1,
      maxOutputTokens: 500,
      extra: { anthropic: { thinking: { type: "adaptive" } } },
    },
    headers: { "x-team": "ops" },
  });
  await planner.decide(request({
    maxOutputTokens: 800.7,
    params: {
      temperature: 0.2,
      topP: 0.9,
      stop: ["END"],
      seed: 7,
      reasoningEffort: "high",
      extra: { anthropic: { sendReasoning: true }, google: { safety: "off" } },
    },
    signal: ask.signal,
  }));
  assert.equal(model.doGenerateCalls.length, 1);
  const { prompt: _, tools, ...options } = model.doGenerateCalls[0];
  assert.deepEqual(tools, aiSdkTools(TOOLS));
  assert.deepEqual(options, {
    maxOutputTokens: 500, // the smaller of the request's cap and the adapter's
    temperature: 0.2,
    topP: 0.9,
    stopSequences: ["END"],
    seed: 7,
    reasoning: "high",
    providerOptions: {
      anthropic: { thinking: { type: "adaptive" }, sendReasoning: true },
      google: { safety: "off" },
    },
    headers: { "x-team": "ops", "x-agent-run": "r-1", "x-agent-name": "provision" },
    abortSignal: ask.signal,
  });
});

Deno.test("reasoning effort is not sent to a v3 model, and says so; the model's warnings come with the decision", async () => {
  const { decision, calls } = await decideWith(
    answer([{ type: "text", text: "ok" }], "stop", {
      warnings: [{ type: "unsupported", feature: "seed", details: "ignored" }, {
        type: "other",
        message: "hm",
      }],
    }),
    request({ params: { reasoningEffort: "low", seed: 3 } }),
  );
  assert.equal("reasoning" in calls[0], false);
  assert.deepEqual(decision?.warnings, [
    'reasoning effort "low" is not a call option of specification v3 models and was not sent: set it in the ' +
    "provider's options (extra)",
    "unsupported: seed (ignored)",
    "other (hm)",
  ]);
});

Deno.test("an extra that is not an object per provider is refused before anything is sent", async () => {
  const { error, calls } = await decideWith(
    answer([{ type: "text", text: "ok" }]),
    request({ params: { extra: { parallel_tool_calls: false } } }),
  );
  assert.equal(calls.length, 0);
  assert.equal(error?.code, "MODEL_CALL_INVALID");
  assert.equal(error?.transient, false);
  assert.match(error!.message, /keyed by provider .* extra\.parallel_tool_calls is false/);
});

Deno.test("several tool calls are one decision; text with a normal finish is the final answer", async (t) => {
  await t.step("two calls, their ids and inputs, no parts (nothing to send back)", async () => {
    const { decision, calls } = await decideWith(answer([
      { type: "tool-call", toolCallId: "t1", toolName: "create_server", input: '{"name":"a"}' },
      { type: "tool-call", toolCallId: "t2", toolName: "create_server", input: "" },
    ], "tool-calls"));
    assert.equal(calls.length, 1, "one doGenerate per decision");
    assert.deepEqual(decision, {
      kind: "tool_calls",
      calls: [{ id: "t1", name: "create_server", args: { name: "a" } }, {
        id: "t2",
        name: "create_server",
        args: {},
      }],
      usage: {
        prompt_tokens: 120,
        completion_tokens: 30,
        total_tokens: 150,
        prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 20 },
      },
    });
  });
  await t.step("text beside calls is kept in the parts (so the history shows it) and as text", async () => {
    const { decision } = await decideWith(answer([
      { type: "text", text: "On it." },
      { type: "tool-call", toolCallId: "t1", toolName: "create_server", input: '{"name":"a"}' },
    ], "tool-calls"));
    assert.equal(decision?.kind === "tool_calls" && decision.text, "On it.");
    assert.deepEqual(decision?.parts, [{ type: "text", text: "On it." }, { type: "call", index: 0 }]);
  });
  await t.step("text and stop: done, with no parts", async () => {
    const { decision } = await decideWith(
      answer([{ type: "text", text: "All " }, { type: "text", text: "made." }]),
    );
    assert.equal(decision?.kind, "done");
    assert.equal(decision?.kind === "done" && decision.text, "All made.");
    assert.equal(decision?.parts, undefined);
  });
  await t.step("a stop with calls is still the calls (servers that say stop with tool calls)", async () => {
    const { decision } = await decideWith(answer([
      { type: "tool-call", toolCallId: "t1", toolName: "create_server", input: '{"name":"a"}' },
    ], "stop"));
    assert.equal(decision?.kind, "tool_calls");
  });
});

Deno.test("truncated, filtered, failed, empty and unparseable answers are the planner's bad answers, with their usage", async (t) => {
  const cases: Array<[string, LanguageModelV3GenerateResult, string, RegExp]> = [
    [
      "length",
      answer([{ type: "text", text: "I will now" }], "length"),
      "MODEL_TRUNCATED",
      /cut off .*length/,
    ],
    [
      "length with a call (its input may be cut too)",
      answer(
        [{ type: "tool-call", toolCallId: "t", toolName: "create_server", input: '{"name":"a"}' }],
        "length",
      ),
      "MODEL_TRUNCATED",
      /cut off/,
    ],
    [
      "content-filter, with what was said",
      answer([{ type: "text", text: "I can't help with that." }], "content-filter"),
      "MODEL_FILTERED",
      /withheld or refused .*"I can't help with that\."/,
    ],
    ["error", answer([{ type: "text", text: "x" }], "error"), "MODEL_NO_MESSAGE", /ended in an error/],
    ["other", answer([{ type: "text", text: "x" }], "other"), "MODEL_NO_MESSAGE", /did not end normally/],
    ["empty", answer([]), "MODEL_EMPTY", /neither a tool call nor any text/],
    ["only whitespace", answer([{ type: "text", text: "  \n" }]), "MODEL_EMPTY", /neither/],
    ["tool-calls with no call", answer([], "tool-calls"), "MODEL_EMPTY", /holds no tool call/],
    [
      "input that is not JSON",
      answer(
        [{ type: "tool-call", toolCallId: "t", toolName: "create_server", input: '{"name":' }],
        "tool-calls",
      ),
      "MODEL_ARGS_NOT_JSON",
      /call to create_server are not JSON: "\{\\"name\\":"/,
    ],
    [
      "a call with no tool name",
      answer([{ type: "tool-call", toolCallId: "t", toolName: "", input: "{}" }], "tool-calls"),
      "MODEL_BAD_TOOL_CALL",
      /no tool name/,
    ],
  ];
  for (const [name, result, code, message] of cases) {
    await t.step(name, async () => {
      const { error } = await decideWith(result);
      assert.equal(error?.code, code);
      assert.equal(error?.badAnswer, true);
      assert.match(error!.message, message);
      assert.equal(error?.usage?.total_tokens, 150, "the refused answer's usage is kept: it was paid for");
    });
  }
});

Deno.test("a provider-executed call is journaled as done elsewhere and never becomes a call of ours", async (t) => {
  const search = [
    {
      type: "tool-call",
      toolCallId: "srvtoolu_1",
      toolName: "web_search",
      input: '{"query":"dns ttl"}',
      providerExecuted: true,
    },
    {
      type: "tool-result",
      toolCallId: "srvtoolu_1",
      toolName: "web_search",
      result: [{ url: "https://example.test/ttl", title: "TTL" }],
    },
  ] as LanguageModelV3Content[];
  await t.step(
    "with only its text after it, a stop is the final answer, the search kept in the parts",
    async () => {
      const { decision } = await decideWith(answer([...search, { type: "text", text: "Use 300 s." }]));
      assert.deepEqual(decision, {
        kind: "done",
        text: "Use 300 s.",
        usage: decision?.usage,
        parts: [
          { type: "provider-call", id: "srvtoolu_1", name: "web_search", input: { query: "dns ttl" } },
          {
            type: "provider-result",
            id: "srvtoolu_1",
            name: "web_search",
            result: [{ url: "https://example.test/ttl", title: "TTL" }],
          },
          { type: "text", text: "Use 300 s." },
        ],
      });
    },
  );
  await t.step(
    "beside a call of ours, only ours is a call; the search keeps its place in the parts",
    async () => {
      const { decision } = await decideWith(answer([
        ...search,
        { type: "tool-call", toolCallId: "toolu_9", toolName: "create_server", input: '{"name":"a"}' },
      ], "tool-calls"));
      assert.equal(decision?.kind, "tool_calls");
      assert.deepEqual(decision?.kind === "tool_calls" && decision.calls, [
        { id: "toolu_9", name: "create_server", args: { name: "a" } },
      ]);
      assert.deepEqual(decision?.parts?.map((p) => p.type), ["provider-call", "provider-result", "call"]);
    },
  );
  await t.step("a failed provider tool is kept as an error, and sent back as error-json", async () => {
    const { decision } = await decideWith(answer([
      search[0],
      { ...search[1], result: { errorCode: "unavailable" }, isError: true } as LanguageModelV3Content,
      { type: "text", text: "Search is down; 300 s is usual." },
    ]));
    const result = decision?.parts?.[1];
    assert.deepEqual(result, {
      type: "provider-result",
      id: "srvtoolu_1",
      name: "web_search",
      result: { errorCode: "unavailable" },
      isError: true,
    });
    const prompt = aiSdkPrompt([{ role: "assistant", calls: [], parts: decision!.parts }]);
    assert.deepEqual(
      (prompt[0].content as { output?: unknown }[])[1].output,
      { type: "error-json", value: { errorCode: "unavailable" } },
    );
  });
});

Deno.test("reasoning and its provider metadata are kept with the decision, exactly as given", async () => {
  const thinking = { anthropic: { signature: "EqQBCkYIBxgCKkA...==" } };
  const { decision } = await decideWith(answer([
    { type: "reasoning", text: "Server first.", providerMetadata: thinking },
    { type: "reasoning", text: "", providerMetadata: { anthropic: { redactedData: "opaque" } } },
    {
      type: "tool-call",
      toolCallId: "t",
      toolName: "create_server",
      input: '{"name":"a"}',
      providerMetadata: { google: { thoughtSignature: "ts-1" } },
    },
    // Metadata with nothing in it is not worth a part (openai-compatible attaches `{ name: {} }`).
    { type: "text", text: "", providerMetadata: { acme: {} } },
  ], "tool-calls"));
  assert.deepEqual(decision?.parts, [
    { type: "reasoning", text: "Server first.", providerMetadata: thinking },
    { type: "reasoning", text: "", providerMetadata: { anthropic: { redactedData: "opaque" } } },
    { type: "call", index: 0, providerMetadata: { google: { thoughtSignature: "ts-1" } } },
  ]);
});

Deno.test("usage of every version maps to the journal's names", () => {
  assert.deepEqual(aiSdkUsage(USAGE_V3), {
    prompt_tokens: 120,
    completion_tokens: 30,
    total_tokens: 150,
    prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 20 },
  });
  assert.deepEqual(
    aiSdkUsage({
      inputTokens: 10,
      outputTokens: 5,
      totalTokens: 16,
      cachedInputTokens: 4,
      reasoningTokens: 2,
    }),
    {
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 16,
      prompt_tokens_details: { cached_tokens: 4 },
      completion_tokens_details: { reasoning_tokens: 2 },
    },
  );
  assert.deepEqual(
    aiSdkUsage({ inputTokens: { total: 7 }, outputTokens: { total: undefined } }),
    { prompt_tokens: 7, total_tokens: 7 },
  );
  assert.equal(aiSdkUsage({ inputTokens: {}, outputTokens: {} }), undefined);
  assert.equal(aiSdkUsage(undefined), undefined);
});

Deno.test("a v2 model (AI SDK 5) is spoken to as well: its string finish reason and flat usage", async () => {
  const calls: unknown[] = [];
  const v2: LanguageModelV2 = {
    specificationVersion: "v2",
    provider: "old.chat",
    modelId: "m2",
    supportedUrls: {},
    doGenerate: (options) => {
      calls.push(options);
      return Promise.resolve({
        content: [
          { type: "reasoning", text: "hmm", providerMetadata: { old: { sig: "s" } } },
          { type: "tool-call", toolCallId: "c", toolName: "create_server", input: '{"name":"z"}' },
        ],
        finishReason: "tool-calls",
        usage: { inputTokens: 3, outputTokens: 4, totalTokens: 7 },
        warnings: [{ type: "unsupported-setting", setting: "seed", details: "no seeds here" }],
      });
    },
    doStream: () => Promise.reject(new Error("not used")),
  };
  const planner = aiSdkPlanner(v2);
  const decision = await planner.decide(request({ params: { seed: 1 } }));
  assert.equal(calls.length, 1);
  assert.deepEqual(decision, {
    kind: "tool_calls",
    calls: [{ id: "c", name: "create_server", args: { name: "z" } }],
    usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
    parts: [{ type: "reasoning", text: "hmm", providerMetadata: { old: { sig: "s" } } }, {
      type: "call",
      index: 0,
    }],
    warnings: ["unsupported-setting: seed (no seeds here)"],
  });
  // Its call options carry no `reasoning` (a v4 option), even when asked for.
  await planner.decide(request({ params: { reasoningEffort: "high" } }));
  assert.equal(calls.length, 2);
  assert.equal("reasoning" in (calls[1] as object), false);
});

Deno.test("the provider's errors are transient with the server's Retry-After, or permanent", async (t) => {
  const apiError = (
    statusCode: number | undefined,
    headers: Record<string, string> = {},
    retryable?: boolean,
  ) =>
    new APICallError({
      message: statusCode === undefined ? "Cannot connect to API: refused" : `status ${statusCode}`,
      url: "http://model.test/v1/messages",
      requestBodyValues: {},
      statusCode,
      responseHeaders: headers,
      ...(retryable === undefined ? {} : { isRetryable: retryable }),
    });
  const cases: Array<[string, unknown, Partial<ModelError>]> = [
    ["429 with retry-after seconds", apiError(429, { "retry-after": "7" }), {
      code: "MODEL_HTTP",
      transient: true,
      retryAfterMs: 7_000,
    }],
    ["529 overloaded with retry-after-ms", apiError(529, { "retry-after-ms": "1500", "retry-after": "9" }), {
      code: "MODEL_HTTP",
      transient: true,
      retryAfterMs: 1_500,
    }],
    ["503 with an HTTP date", apiError(503, { "retry-after": "Thu, 01 Jan 2026 00:00:30 GMT" }), {
      code: "MODEL_HTTP",
      transient: true,
      retryAfterMs: 30_000,
    }],
    ["400 is permanent (and its retry-after is not read)", apiError(400, { "retry-after": "5" }), {
      code: "MODEL_HTTP",
      transient: false,
      retryAfterMs: undefined,
    }],
    ["401 is permanent", apiError(401), { code: "MODEL_HTTP", transient: false }],
    ["no status, retryable: unreachable", apiError(undefined, {}, true), {
      code: "MODEL_UNREACHABLE",
      transient: true,
    }],
    ["200 that could not be read: a bad answer", apiError(200), {
      code: "MODEL_NOT_JSON",
      badAnswer: true,
      transient: false,
    }],
    [
      "a missing API key: refused before sending",
      new LoadAPIKeyError({ message: "Anthropic API key is missing" }),
      {
        code: "MODEL_CALL_INVALID",
        transient: false,
      },
    ],
    ["what a fetch throws: unreachable", new TypeError("error sending request: connection refused"), {
      code: "MODEL_UNREACHABLE",
      transient: true,
    }],
  ];
  for (const [name, thrown, expected] of cases) {
    await t.step(name, async () => {
      const model = new MockLanguageModelV3({ doGenerate: () => Promise.reject(thrown) });
      const planner = new AiSdkPlanner(model, { now: () => Date.UTC(2026, 0, 1) });
      const err = await planner.decide(request()).catch((e) => e);
      assert.ok(err instanceof ModelError, String(err));
      assert.equal(model.doGenerateCalls.length, 1, "no hidden retry");
      for (const [k, v] of Object.entries(expected)) assert.equal(err[k as keyof ModelError], v, k);
      assert.equal(err.cause, thrown);
      assert.match(err.message, /^The model mock-provider model=mock-model-id /);
    });
  }
});

Deno.test("the run's abort signal reaches doGenerate, and an abort is the journal's to judge", async () => {
  const stop = new AbortController();
  let seen: AbortSignal | undefined;
  const model = new MockLanguageModelV3({
    doGenerate: (options) =>
      new Promise((_, reject) => {
        seen = options.abortSignal;
        options.abortSignal?.addEventListener("abort", () => reject(options.abortSignal?.reason), {
          once: true,
        });
        stop.abort(new DOMException("the worker is stopping", "AbortError"));
      }),
  });
  const err = await aiSdkPlanner(model).decide(request({ signal: stop.signal })).catch((e) => e);
  assert.equal(seen, stop.signal);
  assert.ok(err instanceof ModelError);
  assert.equal(err.code, "MODEL_UNREACHABLE");
  assert.equal(err.transient, true);
  assert.match(err.message, /aborted/);
});

Deno.test("promptChars() counts the prompt and tools the planner sends", () => {
  const planner = aiSdkPlanner(new MockLanguageModelV3());
  const req = request();
  assert.equal(
    planner.promptChars(req),
    JSON.stringify(aiSdkPrompt(req.transcript)).length + JSON.stringify(aiSdkTools(TOOLS)).length,
  );
});

Deno.test("defineAgent() takes a language model as its model, wraps it, and refuses a provider given for a model", async () => {
  const { defineAgent, prepareAgent } = await import("../agent/agent.ts");
  const model = new MockLanguageModelV4({ provider: "acme.chat", modelId: "m4" });
  const agent = defineAgent({ name: "direct", tools: [], model });
  assert.ok(agent.model instanceof AiSdkPlanner);
  const ctx = { env: {}, dataDir: ".data", embedded: true };
  const noFallback = () => Promise.reject(new Error("the fallback is not asked for a language model"));
  assert.equal((await prepareAgent(agent, ctx, noFallback)).planner.describe, "ai-sdk acme.chat model=m4");
  // A function of the process's context may return a language model too.
  const built = defineAgent({
    name: "built",
    tools: [],
    model: (c) => new MockLanguageModelV3({ modelId: c.dataDir }),
  });
  assert.equal((await prepareAgent(built, ctx, noFallback)).planner.model, ".data");
  const v1 = {
    specificationVersion: "v1",
    provider: "old",
    modelId: "m",
    doGenerate: () => Promise.resolve(),
  };
  assert.throws(() => defineAgent({ name: "old", tools: [], model: v1 }), {
    code: "AGENT_INVALID",
    message:
      /Cannot define agent "old": Cannot use the AI SDK model old model=m as its 'specificationVersion'/,
  });
  const provider = Object.assign((id: string) => new MockLanguageModelV4({ modelId: id }), {
    specificationVersion: "v4",
    languageModel: (id: string) => new MockLanguageModelV4({ modelId: id }),
  });
  assert.throws(
    () => defineAgent({ name: "p", tools: [], model: provider as never }),
    { code: "AGENT_INVALID", message: /'model' is an AI SDK provider, not one of its models/ },
  );
});
