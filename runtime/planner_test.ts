import assert from "node:assert/strict";
import { ModelError } from "./errors.ts";
import { OpenAIPlanner, parseCompletion } from "./planner.ts";

function refusal(text: string): ModelError {
  try {
    parseCompletion(text);
  } catch (err) {
    assert.ok(err instanceof ModelError, `expected a ModelError, got ${err}`);
    assert.equal(err.badAnswer, true);
    return err;
  }
  assert.fail(`parseCompletion accepted ${text}`);
}

Deno.test("parseCompletion() refuses each kind of unusable answer with its own code", async (t) => {
  const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
  const cases: Array<[string, string, unknown]> = [
    ["<html>oops", "MODEL_NOT_JSON", undefined],
    [JSON.stringify({ choices: [], usage }), "MODEL_NO_CHOICES", usage],
    [JSON.stringify({ choices: [{}], usage }), "MODEL_NO_MESSAGE", usage],
    [
      JSON.stringify({
        choices: [{ message: { tool_calls: [{ function: { name: "a" } }, { function: { name: "b" } }] } }],
        usage,
      }),
      "MODEL_MULTIPLE_TOOLS",
      usage,
    ],
    [
      JSON.stringify({
        choices: [{ message: { tool_calls: [{ function: { name: "a", arguments: "{x" } }] } }],
      }),
      "MODEL_ARGS_NOT_JSON",
      undefined,
    ],
  ];
  for (const [text, code, expectedUsage] of cases) {
    await t.step(code, () => {
      const err = refusal(text);
      assert.equal(err.code, code);
      assert.deepEqual(err.usage, expectedUsage, "a refused answer keeps the usage it reported");
    });
  }
});

// Regression: a JSON `null` body, a null choice or a null tool call threw a
// TypeError, which escaped the re-ask path and ended the worker with the run
// left running.
Deno.test("parseCompletion() refuses null bodies, choices and tool calls instead of throwing a TypeError", () => {
  assert.equal(refusal("null").code, "MODEL_NO_CHOICES");
  assert.equal(refusal(JSON.stringify({ choices: [null] })).code, "MODEL_NO_MESSAGE");
  assert.equal(
    refusal(JSON.stringify({ choices: [{ message: { tool_calls: [null] } }] })).code,
    "MODEL_BAD_TOOL_CALL",
  );
});

Deno.test("OpenAIPlanner masks its API key in whatever the provider sends back", async () => {
  const key = "sk-test-0123456789abcdef";
  const echo = (req: Request) =>
    Promise.resolve(new Response(`unauthorized: ${req.headers.get("authorization")}`, { status: 401 }));
  const planner = new OpenAIPlanner({ url: "http://model.test/v1", model: "m", apiKey: key, fetch: echo });
  const err = await planner.decide({ runId: "r", seq: 0, messages: [], tools: [] }).then(
    () => assert.fail("a 401 was accepted"),
    (e) => e as ModelError,
  );
  assert.equal(err.code, "MODEL_HTTP");
  assert.equal(err.transient, false);
  assert.match(err.message, /HTTP 401: unauthorized: Bearer \*\*\*/);
  assert.ok(!err.message.includes(key));
});

// Regression (issue #9): a truncated answer with no content, an empty tool_calls list
// and a refusal each ended the run "done steps=0" with nothing done.
Deno.test("parseCompletion() refuses truncated, empty and refused answers instead of taking them as done", () => {
  const answer = (message: Record<string, unknown>, finish_reason = "stop") =>
    JSON.stringify({ choices: [{ message: { role: "assistant", ...message }, finish_reason }] });
  assert.equal(refusal(answer({ content: null }, "length")).code, "MODEL_TRUNCATED");
  assert.equal(refusal(answer({ content: "Half an ans" }, "length")).code, "MODEL_TRUNCATED");
  assert.equal(refusal(answer({ content: null, tool_calls: [] })).code, "MODEL_EMPTY");
  assert.equal(refusal(answer({ content: "   " })).code, "MODEL_EMPTY");
  assert.equal(refusal(answer({ content: null, refusal: "I can't help with that." })).code, "MODEL_REFUSED");
  assert.equal(refusal(answer({ content: "" }, "content_filter")).code, "MODEL_FILTERED");
  assert.deepEqual(parseCompletion(answer({ content: "All done." })), {
    kind: "done",
    message: "All done.",
    usage: undefined,
  });
});

Deno.test("OpenAIPlanner masks a key's JSON-escaped form too (a key holding a quote or a newline)", async () => {
  const key = 'sk-"quoted"-key';
  const echo = (req: Request) =>
    Promise.resolve(new Response(JSON.stringify({ error: req.headers.get("x-echo") }), { status: 400 }));
  const planner = new OpenAIPlanner({
    url: "http://model.test/v1",
    model: "m",
    apiKey: key,
    fetch: (req) => echo(new Request(req, { headers: { "x-echo": `got ${key}` } })),
  });
  const err = await planner.decide({ runId: "r", seq: 0, messages: [], tools: [] }).then(
    () => assert.fail("a 400 was accepted"),
    (e) => e as ModelError,
  );
  assert.ok(!err.message.includes('\\"quoted\\"'), err.message);
  assert.match(err.message, /got \*\*\*/);
});
