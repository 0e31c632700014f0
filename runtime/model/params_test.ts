import assert from "node:assert/strict";
import { checkModelParams, mergeModelParams, parseModelParams } from "./params.ts";
import { loadSettings } from "../settings/config.ts";
import type { ConfigError } from "../base/errors.ts";
import { chatParams } from "./openai.ts";
import { defineAgent } from "../agent/agent.ts";
import { RuntimeError } from "../base/errors.ts";

Deno.test("checkModelParams() names every problem at once, each with the value seen", () => {
  assert.throws(
    () =>
      checkModelParams({
        temperature: "hot",
        topP: 1.5,
        maxOutputTokens: 0,
        seed: 1.5,
        reasoningEffort: "max",
        stop: ["", 3],
        extra: { messages: [], tools: [] },
        topK: 4,
      }, "Cannot start run r1"),
    (err: RuntimeError) => {
      assert.equal(err.code, "MODEL_PARAMS_INVALID");
      for (
        const part of [
          /^Cannot start run r1: /,
          /'topK' is not a request parameter .*put others in 'extra'/,
          /'temperature' must be a number from 0 to 2: current value is "hot"/,
          /'topP' must be a number from 0 to 1: current value is 1.5/,
          /'maxOutputTokens' must be an integer of at least 1: current value is 0/,
          /'seed' must be an integer of at least 0: current value is 1.5/,
          /'reasoningEffort' must be one of none, minimal, low, medium, high, xhigh: current value is "max"/,
          /'stop' must be 1 to 16 non-empty strings/,
          /'extra' may not set messages, tools \(the runtime writes them/,
        ]
      ) assert.match(err.message, part);
      return true;
    },
  );
  assert.throws(() => checkModelParams([1], "x"), /'modelParams' must be an object/);
  assert.throws(() => checkModelParams({ extra: { note: "\u0000" } }, "x"), /MODEL_PARAMS_INVALID|'extra'/);
  assert.equal(checkModelParams(undefined, "x"), undefined);
  assert.deepEqual(checkModelParams({ temperature: 0, extra: { user: "u" } }, "x"), {
    temperature: 0,
    extra: { user: "u" },
  });
});

Deno.test("mergeModelParams() takes the run's over the agent's field by field, extra key by key", () => {
  assert.deepEqual(
    mergeModelParams(
      { temperature: 0.7, seed: 1, extra: { a: 1, b: 2 } },
      { temperature: 0, extra: { b: 3 } },
    ),
    { temperature: 0, seed: 1, extra: { a: 1, b: 3 } },
  );
  assert.deepEqual(mergeModelParams(undefined, { seed: 2 }), { seed: 2 });
  assert.equal(mergeModelParams(undefined, null), undefined);
});

Deno.test("chatParams() writes the chat-completions names, extra last", () => {
  assert.deepEqual(
    chatParams({
      temperature: 0.2,
      topP: 0.9,
      stop: ["x"],
      seed: 3,
      reasoningEffort: "low",
      extra: { seed: 4 },
    }),
    { temperature: 0.2, top_p: 0.9, stop: ["x"], seed: 4, reasoning_effort: "low" },
  );
  assert.deepEqual(chatParams(undefined), {});
});

Deno.test("defineAgent() refuses wrong modelParams with MODEL_PARAMS_INVALID", () => {
  assert.throws(
    () => defineAgent({ name: "a", tools: [], modelParams: { temperature: -1 } }),
    (err: RuntimeError) => err.code === "MODEL_PARAMS_INVALID" && /Cannot define agent "a"/.test(err.message),
  );
  assert.deepEqual(defineAgent({ name: "a", tools: [], modelParams: { seed: 1 } }).modelParams, { seed: 1 });
});

Deno.test("MODEL_PARAMS that is not JSON, or wrong, is a settings problem naming it", () => {
  assert.throws(
    () => parseModelParams("{temp", "MODEL_PARAMS"),
    /MODEL_PARAMS must be a JSON object .*"\{temp"/,
  );
  assert.throws(
    () => loadSettings([], { MODEL_PARAMS: '{"seed":-1}' }),
    (err: ConfigError) =>
      err.problems.some((p) => /MODEL_PARAMS: .*'seed' must be an integer of at least 0/.test(p)),
  );
  assert.deepEqual(loadSettings(["--model-params", '{"temperature":0}'], {}).modelParams, { temperature: 0 });
});

Deno.test("checkModelParams() refuses extra fields that ask for several answers, or take the runtime's place", async (t) => {
  const refused = (extra: Record<string, unknown>) => {
    try {
      checkModelParams({ extra }, "Cannot start run r1");
    } catch (err) {
      assert.equal((err as RuntimeError).code, "MODEL_PARAMS_INVALID");
      return (err as Error).message;
    }
    return undefined;
  };
  for (
    const [name, extra, pattern] of [
      [
        "n above 1",
        { n: 8 },
        /'extra' may not set n to 8: it asks for several answers .* only the first is read/,
      ],
      ["n as text", { n: "8" }, /may not set n to "8"/],
      ["best_of", { best_of: 3 }, /may not set best_of to 3/],
      ["Gemini's candidateCount", { candidateCount: 2 }, /may not set candidateCount to 2/],
      ["Cohere's num_generations", { num_generations: 2 }, /may not set num_generations to 2/],
      ["num_return_sequences", { num_return_sequences: 4 }, /may not set num_return_sequences to 4/],
      ["n inside an AI SDK provider's options", { local: { n: 8 } }, /may not set local\.n to 8/],
      [
        "stream_options",
        { stream_options: { include_usage: false } },
        /may not set stream_options \(the runtime/,
      ],
      ["legacy functions", { functions: [], function_call: "auto" }, /may not set functions, function_call/],
      [
        "tool_choice required",
        { tool_choice: "required" },
        /tool_choice only to "auto" or "none": .*"required"/,
      ],
      [
        "tool_choice naming a function",
        { tool_choice: { type: "function", function: { name: "x" } } },
        /tool_choice only to "auto" or "none"/,
      ],
    ] as const
  ) {
    await t.step(`refused: ${name}`, () => {
      const message = refused(extra);
      assert.ok(message, `${JSON.stringify(extra)} was accepted`);
      assert.match(message, pattern);
    });
  }
  for (
    const extra of [
      { n: 1 },
      { best_of: 1, local: { n: 1 } },
      { tool_choice: "none" },
      { tool_choice: "auto" },
      { parallel_tool_calls: false },
      { metadata: { team: "ops" } },
    ]
  ) {
    await t.step(`accepted: ${JSON.stringify(extra)}`, () => assert.equal(refused(extra), undefined));
  }
});
