import assert from "node:assert/strict";
import { hasCode } from "../base/errors.ts";
import { type ModelEndpoint, resolveEndpoint } from "./endpoint.ts";

const SETTINGS = {
  MODEL_URL: "https://shared.example/v1",
  MODEL: "shared-model",
  MODEL_API_KEY: "shared-key",
  MODEL_HEADERS: "x-team=ops,api-key=shared-header-key",
  MODEL_QUERY: "api-version=2024-10-21",
  MODEL_MAX_TOKENS_FIELD: "max_completion_tokens",
};

/** The parts of a resolved endpoint a case checks. */
function resolved(endpoint: ModelEndpoint, env: Record<string, string | undefined>) {
  const { options, keyFrom, settingsApplied } = resolveEndpoint({ name: "a" }, endpoint, env);
  return {
    url: options.url,
    model: options.model,
    apiKey: options.apiKey,
    keyFrom,
    headers: options.headers,
    query: options.query,
    maxTokensField: options.maxTokensField,
    settingsApplied,
  };
}

Deno.test("resolveEndpoint() keeps what an agent names and fills the rest from its server's settings", async (t) => {
  await t.step("an agent naming nothing gets the settings' server whole", () => {
    assert.deepEqual(resolved({}, SETTINGS), {
      url: "https://shared.example/v1",
      model: "shared-model",
      apiKey: "shared-key",
      keyFrom: "MODEL_API_KEY",
      headers: { "x-team": "ops", "api-key": "shared-header-key" },
      query: { "api-version": "2024-10-21" },
      maxTokensField: "max_completion_tokens",
      settingsApplied: true,
    });
  });
  await t.step("an agent's own url on another server gets nothing of the settings", () => {
    assert.deepEqual(resolved({ url: "http://127.0.0.1:8000/v1", model: "local" }, SETTINGS), {
      url: "http://127.0.0.1:8000/v1",
      model: "local",
      apiKey: undefined,
      keyFrom: undefined,
      headers: {},
      query: {},
      maxTokensField: undefined,
      settingsApplied: false,
    });
  });
  await t.step("a key variable the agent names is read across servers", () => {
    const env = { ...SETTINGS, LOCAL_KEY: "local-key" };
    const got = resolved({ url: "http://127.0.0.1:8000/v1", model: "local", apiKeyEnv: "LOCAL_KEY" }, env);
    assert.equal(got.apiKey, "local-key");
    assert.equal(got.keyFrom, "LOCAL_KEY");
  });
  await t.step("an agent's own url on MODEL_URL's origin is filled from the settings", () => {
    const got = resolved({ url: "https://shared.example/other/v1" }, SETTINGS);
    assert.equal(got.url, "https://shared.example/other/v1");
    assert.equal(got.model, "shared-model");
    assert.equal(got.apiKey, "shared-key");
    assert.equal(got.settingsApplied, true);
  });
  await t.step("with no MODEL_URL the settings fill an agent's endpoint (a key kept out of code)", () => {
    const { MODEL_URL: _, ...noUrl } = SETTINGS;
    const got = resolved({ url: "https://api.openai.com/v1", model: "gpt-4o-mini" }, noUrl);
    assert.equal(got.model, "gpt-4o-mini", "its own model name");
    assert.equal(got.apiKey, "shared-key");
    assert.equal(got.keyFrom, "MODEL_API_KEY");
  });
  await t.step(
    "an agent's own model, max-tokens field, header and query parameter win over the settings",
    () => {
      const got = resolved({
        model: "mine",
        maxTokensField: "max_tokens",
        headers: { "API-Key": "own-header-key" },
        query: { "api-version": "2025-01-01" },
      }, SETTINGS);
      assert.equal(got.url, "https://shared.example/v1");
      assert.equal(got.model, "mine");
      assert.equal(got.maxTokensField, "max_tokens");
      assert.deepEqual(
        got.headers,
        { "x-team": "ops", "API-Key": "own-header-key" },
        "names match in any case",
      );
      assert.deepEqual(got.query, { "api-version": "2025-01-01" });
    },
  );
});

Deno.test("resolveEndpoint() refuses an agent's own url with no model name when MODEL names another server's", () => {
  assert.throws(
    () => resolveEndpoint({ name: "a" }, { url: "http://127.0.0.1:8000/v1" }, SETTINGS),
    (err: Error) => {
      assert.ok(hasCode(err, "MODEL_MISSING"));
      assert.match(err.message, /Agent a has no model: it names its own url http:\/\/127\.0\.0\.1:8000\/v1/);
      assert.match(
        err.message,
        /MODEL is the model of MODEL_URL \(https:\/\/shared\.example\/v1\), another server/,
      );
      return true;
    },
  );
});

Deno.test("resolveEndpoint() says which setting is missing when nothing names a server or a model", async (t) => {
  for (
    const [name, endpoint, env, pattern] of [
      ["no url at all", {}, {}, /now MODEL_URL is missing/],
      ["a url with no model", {}, { MODEL_URL: "http://127.0.0.1:9/v1" }, /now MODEL is missing/],
    ] as const
  ) {
    await t.step(name, () => {
      assert.throws(() => resolveEndpoint({ name: "a" }, endpoint, env), (err: Error) => {
        assert.ok(hasCode(err, "MODEL_MISSING"));
        assert.match(err.message, pattern);
        return true;
      });
    });
  }
});
