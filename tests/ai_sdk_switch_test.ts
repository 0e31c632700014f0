/**
 * #25's fourth promise: a team switching provider changes one line of its
 * agent module. Two modules that differ in their `model` line alone, one on
 * Anthropic's Messages API (`@ai-sdk/anthropic`, the fake) and one on an
 * OpenAI-compatible server (`@ai-sdk/openai-compatible`, the mock model),
 * each run to done by `deno run cli/main.ts run --agent`.
 */

import assert from "node:assert/strict";
import { serveAnthropic } from "../mock/anthropic.ts";
import { DONE_MESSAGE } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { parseLine, runCliIsolated } from "../harness/procs.ts";
import { ANTHROPIC_STEPS } from "./testdata/ai_sdk/script.ts";
import { seedDataDir } from "./_pg.ts";

const DIR = new URL("./testdata/ai_sdk/", import.meta.url);
const ANTHROPIC_AGENT = new URL("switch_anthropic.ts", DIR).pathname;
const LOCAL_AGENT = new URL("switch_local.ts", DIR).pathname;

Deno.test("the same agent module on two providers differs in one line, and both run to done", async () => {
  const [a, b] = await Promise.all([Deno.readTextFile(ANTHROPIC_AGENT), Deno.readTextFile(LOCAL_AGENT)]);
  const left = a.split("\n");
  const right = b.split("\n");
  assert.equal(left.length, right.length);
  const changed = left.flatMap((line, i) => line === right[i] ? [] : [[line.trim(), right[i].trim()]]);
  assert.deepEqual(changed, [[
    'model: (ctx) => providers(ctx).anthropic("claude-sonnet-4-5"),',
    'model: (ctx) => providers(ctx).local("mock-planner"),',
  ]]);

  const anthropic = serveAnthropic();
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "aisdk-switch-" });
  await Promise.all(["sw-a", "sw-l"].map((runId) => seedDataDir(`${dir}/${runId}`)));
  try {
    anthropic.fake.setAgentScript("switch", ANTHROPIC_STEPS);
    const run = (agent: string, runId: string) =>
      runCliIsolated(["run", "--agent", agent], {
        RUN_ID: runId,
        DATA_DIR: `${dir}/${runId}`,
        CLOUD_URL: mocks.cloudUrl,
        MODEL_URL: mocks.modelUrl,
        ANTHROPIC_BASE_URL: anthropic.url,
        ANTHROPIC_API_KEY: "test-key",
      });
    const [onAnthropic, onLocal] = await Promise.all([
      run(ANTHROPIC_AGENT, "sw-a"),
      run(LOCAL_AGENT, "sw-l"),
    ]);
    for (
      const [name, result, model, output] of [
        [
          "anthropic",
          onAnthropic,
          "ai-sdk anthropic.messages model=claude-sonnet-4-5",
          ANTHROPIC_STEPS[2].text,
        ],
        ["local", onLocal, "ai-sdk local.chat model=mock-planner", DONE_MESSAGE],
      ] as const
    ) {
      assert.equal(result.code, 0, `${name}:\n${result.out}`);
      const lines = result.out.split("\n").map(parseLine).filter((l) => l !== undefined);
      assert.equal(lines.find((l) => l.event === "backends")?.model, model, result.out);
      assert.equal(lines.find((l) => l.event === "done")?.output, output, result.out);
      assert.equal(lines.filter((l) => l.event === "confirmed").length, 3, result.out);
    }
    assert.equal(anthropic.fake.calls("sw-a"), 3);
    assert.equal(mocks.model.calls("sw-l"), 4);
  } finally {
    await mocks.close();
    await anthropic.close();
    await Deno.remove(dir, { recursive: true });
  }
});
