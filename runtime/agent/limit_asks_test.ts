import assert from "node:assert/strict";
import { checkLabels, checkLimits, describeAsk, modelAsks, parseLimits, toolAsks } from "./limit_asks.ts";
import { defineAgent } from "./agent.ts";
import { RuntimeError } from "../base/errors.ts";

const refusal = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof RuntimeError);
    return `${err.code}: ${err.message}`;
  }
  assert.fail("not refused");
};

Deno.test("checkLimits() reports every problem at once, each by its place in the list", () => {
  const message = refusal(() =>
    checkLimits([
      { model: "gpt-4o", requestsPerMinute: 50 },
      { model: "gpt-4o", tool: "x", inFlight: 1 },
      { label: "tenant" },
      { tool: "t", inFlight: 0, windowS: 0 },
      { provider: "", requestsPerMinut: 5, inFlight: 1 },
      "nope",
    ], "LIMITS")
  );
  assert.equal(
    message,
    "LIMITS_INVALID: LIMITS: " +
      "limit 1: must name exactly one of model, provider, tool, label: current value names model and tool; " +
      "limit 2: must set at least one of requestsPerMinute, inputTokensPerMinute, outputTokensPerMinute, inFlight; " +
      "limit 3: 'inFlight' must be a positive integer: current value is 0; " +
      "limit 3: 'windowS' must be a number of seconds from 0.1 to 60: current value is 0; " +
      "limit 4: unknown field 'requestsPerMinut'; a limit has model, provider, tool, label, requestsPerMinute, " +
      "inputTokensPerMinute, outputTokensPerMinute, inFlight, windowS, fairBy; " +
      "limit 4: 'provider' must be a name, or *: current value is \"\"; " +
      "limit 5: must be an object",
  );
  assert.deepEqual(checkLimits(undefined, "x"), []);
});

Deno.test("parseLimits() reads LIMITS as JSON and says what is wrong with it", () => {
  assert.deepEqual(parseLimits('[{"tool":"create_server","inFlight":2}]'), [{
    tool: "create_server",
    inFlight: 2,
  }]);
  assert.match(refusal(() => parseLimits("{")), /^LIMITS_INVALID: LIMITS must be a JSON array of limits/);
  assert.match(refusal(() => parseLimits('{"model":"m"}')), /'limits' must be an array/);
});

Deno.test("defineAgent() takes limits and refuses bad ones as AGENT_INVALID", () => {
  const model = { describe: "none", decide: () => Promise.resolve({ kind: "done" as const, text: "" }) };
  const agent = defineAgent({ name: "limited", tools: [], model, limits: [{ model: "*", inFlight: 2 }] });
  assert.deepEqual(agent.limits, [{ model: "*", inFlight: 2 }]);
  assert.deepEqual(defineAgent({ name: "free", tools: [], model }).limits, []);
  assert.equal(
    refusal(() => defineAgent({ name: "bad", tools: [], model, limits: [{ model: "m" }] })),
    'AGENT_INVALID: Cannot define agent "bad": limit 0: must set at least one of requestsPerMinute, ' +
      "inputTokensPerMinute, outputTokensPerMinute, inFlight",
  );
});

Deno.test("checkLabels() takes names and values of the run id's alphabet, at most 16", () => {
  assert.deepEqual(checkLabels({ tenant: "acme", "team.x": "a:b" }, "run"), {
    tenant: "acme",
    "team.x": "a:b",
  });
  assert.equal(checkLabels({}, "run"), undefined);
  assert.match(
    refusal(() => checkLabels({ tenant: 3 }, "Run r")),
    /^LABELS_INVALID: Run r: the value of label tenant/,
  );
  assert.match(
    refusal(() => checkLabels({ "no space": "x" }, "Run r")),
    /the label name "no space" is not one/,
  );
  assert.match(refusal(() => checkLabels(["x"], "Run r")), /'labels' must be an object/);
});

Deno.test("modelAsks(): a request falls under its model's, its provider's and its labels' limits, one ask a key", () => {
  const limits = checkLimits([
    { model: "gpt-4o", requestsPerMinute: 600, inputTokensPerMinute: 60_000, windowS: 1 },
    { model: "other", requestsPerMinute: 1 },
    { provider: "*", inFlight: 8, fairBy: "tenant" },
    { label: "tenant", outputTokensPerMinute: 3_000 },
    { model: "gpt-4o", requestsPerMinute: 300, inFlight: 4 }, // the process's, on the same key
    { tool: "*", inFlight: 1 },
  ], "x");
  const asks = modelAsks(limits, {
    model: "gpt-4o",
    provider: "api.openai.com",
    labels: { tenant: "acme" },
    inputTokens: 120,
  });
  assert.deepEqual(asks, [
    {
      key: "model:gpt-4o",
      described: "5 requests, 1000 input tokens per 1 s; 4 in flight",
      windowMs: 1_000,
      requests: 5, // the tighter: 300 a minute is 5 a second
      inputTokens: 1_000,
      outputTokens: undefined,
      inFlight: 4,
      estimatedInput: 120,
      estimatedOutput: 4_096, // no cap on the answer: the default estimate
    },
    {
      key: "provider:api.openai.com",
      described: "8 in flight",
      windowMs: 60_000,
      requests: undefined,
      inputTokens: undefined,
      outputTokens: undefined,
      inFlight: 8,
      estimatedInput: 120,
      estimatedOutput: 4_096,
      group: "acme",
    },
    {
      key: "label:tenant=acme",
      described: "3000 output tokens per 60 s",
      windowMs: 60_000,
      requests: undefined,
      inputTokens: undefined,
      outputTokens: 3_000,
      inFlight: undefined,
      estimatedInput: 120,
      estimatedOutput: 4_096,
    },
  ]);
  assert.deepEqual(
    modelAsks(limits, { inputTokens: 1, maxOutputTokens: 10 }),
    [],
    "no model, no provider, no label",
  );
  assert.deepEqual(modelAsks([], { model: "gpt-4o", inputTokens: 1 }), []);
});

Deno.test("toolAsks(): a call falls under its tool's limits; a limit under one request a window still lets one go", () => {
  const limits = checkLimits([{ tool: "create_server", requestsPerMinute: 30, windowS: 1 }, {
    model: "*",
    inFlight: 1,
  }], "x");
  assert.deepEqual(toolAsks(limits, "create_server").map((a) => [a.key, a.requests, a.described]), [
    ["tool:create_server", 1, "1 request per 1 s"],
  ]);
  assert.deepEqual(toolAsks(limits, "create_database"), []);
  assert.equal(describeAsk({ windowMs: 1_500, inFlight: 2 }), "2 in flight");
});
