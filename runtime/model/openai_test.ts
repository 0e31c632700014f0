import assert from "node:assert/strict";
import { ModelError } from "../base/errors.ts";
import { MockModel } from "../../mock/model.ts";
import { chatCompletionsUrl, OpenAIPlanner, parseCompletion } from "./openai.ts";

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
        choices: [{
          message: { tool_calls: [{ function: { name: "a" } }, { function: { name: "b", arguments: "{" } }] },
        }],
        usage,
      }),
      "MODEL_ARGS_NOT_JSON",
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
  const err = await planner.decide({ runId: "r", seq: 0, transcript: [], tools: [] }).then(
    () => assert.fail("a 401 was accepted"),
    (e) => e as ModelError,
  );
  assert.equal(err.code, "MODEL_HTTP");
  assert.equal(err.transient, false);
  assert.match(err.message, /^The model at http:\/\/model\.test\/v1\/chat\/completions answered HTTP 401/);
  assert.match(err.message, /HTTP 401: unauthorized: Bearer \*\*\*/);
  assert.ok(!err.message.includes(key));
});

// Regression (issue #9): a truncated answer with no content, an empty tool_calls list
// and a refusal each ended the run "done" with no tool call and nothing done.
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
    text: "All done.",
    usage: undefined,
  });
});

/** A fake server: answers every request with `status`, `body` and `headers`, and records what it got. */
function fakeServer(status: number, body: unknown, headers: Record<string, string> = {}) {
  const seen: Request[] = [];
  const bodies: Record<string, unknown>[] = [];
  const fetch = async (req: Request) => {
    seen.push(req);
    bodies.push(JSON.parse(await req.text()));
    return new Response(typeof body === "string" ? body : JSON.stringify(body), { status, headers });
  };
  return { fetch, seen, bodies };
}

const FINAL = { choices: [{ message: { role: "assistant", content: "ok" } }] };
const ASK = { runId: "r1", seq: 0, transcript: [{ role: "user" as const, text: "go" }], tools: [] };

async function failure(planner: OpenAIPlanner): Promise<ModelError> {
  return await planner.decide(ASK).then(
    () => assert.fail("the request was accepted"),
    (e) => {
      assert.ok(e instanceof ModelError, `expected a ModelError, got ${e}`);
      return e;
    },
  );
}

Deno.test("chatCompletionsUrl() adds /v1 to a base URL with no path and uses any other path as given", async (t) => {
  const cases: Array<[string, string]> = [
    ["http://127.0.0.1:11434", "http://127.0.0.1:11434/v1/chat/completions"],
    ["http://127.0.0.1:11434/", "http://127.0.0.1:11434/v1/chat/completions"],
    ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/chat/completions"],
    ["http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1/chat/completions"],
    ["http://127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000/v1/chat/completions"],
    ["https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1/chat/completions"],
    [
      "https://r.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21",
      "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
    ],
  ];
  for (const [base, expected] of cases) {
    await t.step(base, () => assert.equal(chatCompletionsUrl(base).href, expected));
  }
});

Deno.test("OpenAIPlanner reaches the mock model with a base URL with and without /v1", async (t) => {
  const model = await MockModel.open();
  for (const url of ["http://mock-model.test", "http://mock-model.test/", "http://mock-model.test/v1"]) {
    await t.step(url, async () => {
      const planner = new OpenAIPlanner({ url, model: "m", fetch: model.handler });
      const answer = await planner.decide({ ...ASK, runId: url });
      assert.deepEqual(answer.kind === "tool_calls" && answer.calls[0].name, "create_server"); // the demo script's first step
      assert.equal(model.calls(url), 1, "counted for the run named in x-agent-run");
    });
  }
});

Deno.test("a 404 from a base URL whose path has no /v1 says so and suggests /v1", async () => {
  const model = await MockModel.open();
  const planner = new OpenAIPlanner({ url: "http://mock-model.test/api", model: "m", fetch: model.handler });
  const err = await failure(planner);
  assert.equal(err.code, "MODEL_HTTP");
  assert.equal(err.transient, false);
  assert.match(
    err.message,
    /^The model at http:\/\/mock-model\.test\/api\/chat\/completions answered HTTP 404/,
  );
  assert.match(err.message, /no \/v1 segment/);
  assert.match(err.message, /MODEL_URL=http:\/\/mock-model\.test\/api\/v1/);
});

Deno.test("a 400 names the URL and the server's own message, never the key", async () => {
  const key = "sk-secret-123456";
  const server = fakeServer(400, {
    error: {
      message: "Unsupported parameter: 'foo'.",
      type: "invalid_request_error",
      param: "foo",
      code: null,
    },
  });
  const planner = new OpenAIPlanner({
    url: "https://models.test/v1",
    model: "m",
    apiKey: key,
    query: { "api-key": key, "api-version": "2024-10-21" },
    fetch: server.fetch,
  });
  const err = await failure(planner);
  assert.equal(err.transient, false);
  assert.equal(
    err.message,
    "The model at https://models.test/v1/chat/completions?api-key=***&api-version=2024-10-21 answered " +
      "HTTP 400: Unsupported parameter: 'foo'.",
  );
  assert.ok(!planner.describe.includes(key));
});

Deno.test("Retry-After on a 429 or 503 is carried as retryAfterMs, in seconds or as an HTTP date", async (t) => {
  const now = Date.parse("2030-01-01T00:00:00Z");
  const cases: Array<[string, number, string | undefined, number | undefined]> = [
    ["seconds on a 429", 429, "7", 7_000],
    ["an HTTP date on a 503", 503, "Tue, 01 Jan 2030 00:00:12 GMT", 12_000],
    ["a date in the past is now", 503, "Mon, 31 Dec 2029 23:59:00 GMT", 0],
    ["none", 429, undefined, undefined],
    ["garbage", 429, "soon", undefined],
    ["not on a permanent error", 400, "7", undefined],
  ];
  for (const [name, status, header, expected] of cases) {
    await t.step(name, async () => {
      const server = fakeServer(
        status,
        { error: { message: "slow down" } },
        header ? { "retry-after": header } : {},
      );
      const err = await failure(
        new OpenAIPlanner({ url: "http://m.test/v1", model: "m", fetch: server.fetch, now: () => now }),
      );
      assert.equal(err.retryAfterMs, expected);
      assert.equal(err.transient, status !== 400);
    });
  }
});

Deno.test("extra headers and query parameters go on the wire; the body has only what every server takes", async () => {
  const server = fakeServer(200, FINAL);
  const planner = new OpenAIPlanner({
    url: "https://r.openai.azure.com/openai/deployments/gpt-4o",
    model: "gpt-4o",
    headers: { "api-key": "azure-key", "HTTP-Referer": "https://example.test" },
    query: { "api-version": "2024-10-21" },
    fetch: server.fetch,
  });
  await planner.decide({ ...ASK, agent: "provision" });
  const req = server.seen[0];
  assert.equal(
    req.url,
    "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
  );
  assert.equal(req.headers.get("api-key"), "azure-key");
  assert.equal(req.headers.get("http-referer"), "https://example.test");
  assert.equal(req.headers.get("x-agent-run"), "r1");
  assert.equal(req.headers.get("x-agent-name"), "provision");
  assert.equal(req.headers.get("authorization"), null, "no key given, no bearer sent");
  assert.deepEqual(
    Object.keys(server.bodies[0]).sort(),
    ["messages", "model"],
    "no tools offered: no tools list",
  );

  const tools = [{ name: "t", description: "d", parameters: {} }];
  await planner.decide({ ...ASK, tools });
  const body = server.bodies[1];
  assert.deepEqual(Object.keys(body).sort(), ["messages", "model", "tools"]);
  assert.deepEqual(body.tools, [{
    type: "function",
    function: { name: "t", description: "d", parameters: {} },
  }]);
  for (const refused of ["parallel_tool_calls", "user", "tool_choice"]) {
    assert.ok(!(refused in body), refused);
  }
});

interface Fixture {
  family: string;
  base_url: string;
  headers?: Record<string, string>;
  query?: Record<string, string>;
  refused_request_fields: string[];
  answers: Array<{ name: string; body: unknown; expect: Record<string, unknown> }>;
  errors: Array<{
    name: string;
    status: number;
    headers?: Record<string, string>;
    now?: string;
    body: unknown;
    expect_message: string;
    transient: boolean;
    retry_after_ms?: number;
  }>;
}

const FIXTURES = new URL("./testdata/model_servers/", import.meta.url);

Deno.test("each server family's recorded answers and errors are understood", async (t) => {
  const names = [...Deno.readDirSync(FIXTURES)].map((e) => e.name).filter((n) => n.endsWith(".json")).sort();
  assert.deepEqual(names, [
    "azure.json",
    "litellm.json",
    "llamacpp.json",
    "ollama.json",
    "openai.json",
    "openrouter.json",
    "vllm.json",
  ]);
  for (const name of names) {
    const fx = JSON.parse(Deno.readTextFileSync(new URL(name, FIXTURES))) as Fixture;
    await t.step(fx.family, async (t) => {
      for (const answer of fx.answers) {
        await t.step(answer.name, () => {
          const parsed = parseCompletion(JSON.stringify(answer.body));
          const { usage: _usage, ...rest } = parsed;
          assert.deepEqual(rest, answer.expect);
        });
      }
      await t.step(
        "the request carries the family's settings and none of the fields it refuses",
        async () => {
          const server = fakeServer(200, fx.answers[0].body);
          const planner = new OpenAIPlanner({
            url: fx.base_url,
            model: "m",
            headers: fx.headers,
            query: fx.query,
            fetch: server.fetch,
          });
          const tools = [{ name: "create_server", description: "d", parameters: {} }];
          await planner.decide({ ...ASK, tools });
          const url = new URL(server.seen[0].url);
          assert.match(url.pathname, /\/chat\/completions$/);
          for (const [k, v] of Object.entries(fx.query ?? {})) assert.equal(url.searchParams.get(k), v);
          for (const [k, v] of Object.entries(fx.headers ?? {})) {
            assert.equal(server.seen[0].headers.get(k), v);
          }
          for (const field of fx.refused_request_fields) {
            assert.ok(!(field in server.bodies[0]), field);
          }
        },
      );
      for (const error of fx.errors) {
        await t.step(`HTTP ${error.status}: ${error.name}`, async () => {
          const server = fakeServer(error.status, error.body, error.headers);
          const now = error.now ? Date.parse(error.now) : Date.now();
          const err = await failure(
            new OpenAIPlanner({
              url: fx.base_url,
              model: "m",
              query: fx.query,
              fetch: server.fetch,
              now: () => now,
            }),
          );
          assert.ok(err.message.includes(error.expect_message), err.message);
          assert.ok(err.message.includes(new URL(server.seen[0].url).host), err.message);
          assert.equal(err.transient, error.transient);
          if (error.retry_after_ms !== undefined) assert.equal(err.retryAfterMs, error.retry_after_ms);
        });
      }
    });
  }
});

Deno.test("parseCompletion() reads the text parts of array content and treats null arguments as none", () => {
  const parts = {
    choices: [{ message: { content: [{ type: "text", text: "a" }, { type: "image" }, { text: "b" }] } }],
  };
  assert.deepEqual(parseCompletion(JSON.stringify(parts)), { kind: "done", text: "ab", usage: undefined });
  const nullArgs = { choices: [{ message: { tool_calls: [{ function: { name: "t", arguments: null } }] } }] };
  assert.deepEqual(parseCompletion(JSON.stringify(nullArgs)), {
    kind: "tool_calls",
    calls: [{ name: "t", args: {} }],
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
  const err = await planner.decide({ runId: "r", seq: 0, transcript: [], tools: [] }).then(
    () => assert.fail("a 400 was accepted"),
    (e) => e as ModelError,
  );
  assert.ok(!err.message.includes('\\"quoted\\"'), err.message);
  assert.match(err.message, /got \*\*\*/);
});

Deno.test("OpenAIPlanner masks a key holding a quote and a backslash however deep the provider's body echoes it", async () => {
  const key = 'sk-q"uote\\slash';
  // A gateway's error wrapping its upstream's JSON error, which quotes the key: escaped twice in the body.
  const body = JSON.stringify({ error: JSON.stringify({ error: `bad key ${key}` }), key });
  const planner = new OpenAIPlanner({
    url: "http://model.test/v1",
    model: "m",
    apiKey: key,
    fetch: () => Promise.resolve(new Response(body, { status: 401 })),
  });
  const err = await planner.decide({ runId: "r", seq: 0, transcript: [], tools: [] }).then(
    () => assert.fail("a 401 was accepted"),
    (e) => e as ModelError,
  );
  assert.ok(!err.message.includes("sk-q"), err.message);
  assert.match(err.message, /HTTP 401: .*bad key \*\*\*/);
});

Deno.test("a 200 carrying an error object in place of choices is refused with the server's message", () => {
  const err = refusal(JSON.stringify({ error: { message: "upstream timed out", code: 504 } }));
  assert.equal(err.code, "MODEL_NO_CHOICES");
  assert.match(err.message, /upstream timed out/);
});

Deno.test("a budgeted request carries its answer's cap in the one field chosen; an unbudgeted one carries none", async () => {
  const bodies: Record<string, unknown>[] = [];
  const fetch = async (req: Request) => {
    bodies.push(await req.json());
    return Response.json({
      choices: [{ message: { role: "assistant", content: "ok" }, finish_reason: "stop" }],
    });
  };
  const ask = (planner: OpenAIPlanner, maxOutputTokens?: number) =>
    planner.decide({
      runId: "r",
      seq: 0,
      transcript: [{ role: "user", text: "go" }],
      tools: [],
      maxOutputTokens,
    });
  await ask(new OpenAIPlanner({ url: "http://m/v1", model: "m", fetch }), 300);
  await ask(
    new OpenAIPlanner({ url: "http://m/v1", model: "m", fetch, maxTokensField: "max_completion_tokens" }),
    300,
  );
  await ask(new OpenAIPlanner({ url: "http://m/v1", model: "m", fetch }));
  assert.deepEqual(bodies.map((b) => [b.max_tokens, b.max_completion_tokens]), [
    [300, undefined],
    [undefined, 300],
    [undefined, undefined],
  ]);
  assert.throws(
    () => new OpenAIPlanner({ url: "http://m/v1", model: "m", maxTokensField: "max_output_tokens" as never }),
    (e: Error) =>
      e instanceof RangeError &&
      /'maxTokensField' must be one of max_tokens, max_completion_tokens/.test(e.message),
  );
});
