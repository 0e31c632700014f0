import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { loadSettings } from "../settings/config.ts";
import { agentDeps } from "../run/deps.ts";
import { ConfigError, hasCode } from "./errors.ts";
import { toolPolicy } from "../step/settle.ts";
import { backoffMs, DEFAULT_RETRY, humanMs, nextTry, type RetryPolicy } from "./retry.ts";
import { defineTool, ToolRegistry } from "../agent/tools.ts";

const MINUTE = 60_000;
const at = (ms: number) => new Date(Date.UTC(2026, 0, 1) + ms);

Deno.test("nextTry() backs off from 500 ms, doubling to the 60 s cap, and gives up at the horizon, its last try on it", () => {
  const middle = () => 0.5; // the jitter at its middle: 0.75 of each ceiling
  const since = at(0);
  const waits: number[] = [];
  let now = 0;
  // Bounded: an hour of waits of at least 375 ms.
  for (let failures = 1; failures < 10_000; failures++) {
    const next = nextTry(DEFAULT_RETRY, { failures, failingSince: since }, at(now), middle);
    if (next.kind === "give-up") {
      assert.equal(next.failingForMs, 60 * MINUTE);
      break;
    }
    assert.equal(next.givesUpAt.getTime(), at(60 * MINUTE).getTime());
    assert.equal(next.hold, next.waitMs <= 2_000, "a wait of up to 2 s is slept holding the slot");
    waits.push(next.waitMs);
    now += next.waitMs;
  }
  assert.deepEqual(waits.slice(0, 9), [375, 750, 1_500, 3_000, 6_000, 12_000, 24_000, 45_000, 45_000]);
  assert.equal(now, 60 * MINUTE, "the last wait ends on the horizon, so one request goes then");
  assert.ok(waits.length < 90, `${waits.length} tries in an hour`);
});

Deno.test("nextTry() waits what a server asks with Retry-After, capped, and never past the horizon", () => {
  const policy: RetryPolicy = { ...DEFAULT_RETRY, horizonMs: 10 * MINUTE, retryAfterMaxMs: 90_000 };
  const asked = (retryAfterMs: number, now: number) =>
    nextTry(policy, { failures: 1, failingSince: at(0), retryAfterMs }, at(now), Math.random);
  assert.deepEqual([asked(30_000, 0).kind, (asked(30_000, 0) as { waitMs: number }).waitMs], [
    "again",
    30_000,
  ]);
  assert.equal((asked(600_000, 0) as { waitMs: number }).waitMs, 90_000, "capped by retryAfterMaxMs");
  assert.equal((asked(600_000, 9.5 * MINUTE) as { waitMs: number }).waitMs, 30_000, "not past the horizon");
  assert.equal(asked(1, 10 * MINUTE).kind, "give-up");
});

Deno.test("backoffMs() stays within [c/2, c) of its ceiling for any jitter", () => {
  for (const r of [0, 0.25, 0.999]) {
    for (let attempt = 1; attempt <= 12; attempt++) {
      const c = Math.min(60_000, 500 * 2 ** (attempt - 1));
      const ms = backoffMs(DEFAULT_RETRY, attempt, () => r);
      assert.ok(ms >= c / 2 && ms < c, `attempt ${attempt}, jitter ${r}: ${ms} of ${c}`);
    }
  }
});

Deno.test("humanMs() says a duration the way the messages do", () => {
  assert.deepEqual([humanMs(250), humanMs(61_000), humanMs(5 * MINUTE), humanMs(3 * 3_600_000)], [
    "250 ms",
    "61 s",
    "5 min",
    "3 h",
  ]);
});

Deno.test("RETRY_HORIZON_S, RETRY_BACKOFF_MS and RETRY_BACKOFF_MAX_S are read as milliseconds, flags winning, only when set", () => {
  assert.deepEqual(loadSettings([], {}).retry, {}, "unset: the agent's and the defaults apply");
  assert.deepEqual(
    loadSettings(["--retry-horizon-s", "600"], {
      RETRY_HORIZON_S: "60",
      RETRY_BACKOFF_MS: "250",
      RETRY_BACKOFF_MAX_S: "4",
    })
      .retry,
    { horizonMs: 600_000, backoffBaseMs: 250, backoffMaxMs: 4_000 },
  );
  assert.deepEqual(
    loadSettings([], { RETRY_HORIZON_S: "0" }).retry,
    { horizonMs: 0 },
    "0: never asked again",
  );
});

Deno.test("a wrong retry setting is one problem naming it and the value seen", () => {
  const problems = (env: Record<string, string>) => {
    try {
      loadSettings([], env);
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      return err.problems;
    }
    assert.fail("accepted");
  };
  assert.deepEqual(problems({ RETRY_HORIZON_S: "forever" }), [
    'RETRY_HORIZON_S must be a number of seconds from 0 to 604800: current value is "forever"',
  ]);
  assert.deepEqual(problems({ RETRY_BACKOFF_MS: "0" }), [
    'RETRY_BACKOFF_MS must be a number of milliseconds from 1 to 600000: current value is "0"',
  ]);
  assert.deepEqual(problems({ RETRY_BACKOFF_MS: "5000", RETRY_BACKOFF_MAX_S: "1" }), [
    "RETRY_BACKOFF_MAX_S must be no shorter than RETRY_BACKOFF_MS: current values are 1 s and 5000 ms",
  ]);
});

Deno.test("a tool's retry wins over its agent's, and an agent's over the process's settings, field by field", () => {
  const lookup = defineTool({
    name: "lookup",
    description: "Looks something up.",
    args: z.strictObject({}),
    retry: { horizonMs: 2 * MINUTE },
    run: () => Promise.resolve({ result: "ok" }),
  });
  const plain = defineTool({
    name: "plain",
    description: "Does something.",
    args: z.strictObject({}),
    run: () => Promise.resolve({ result: "ok" }),
  });
  const agent = defineAgent({ name: "layered", tools: [lookup, plain], retry: { backoffMaxMs: 10_000 } });
  const deps = agentDeps(
    {
      agent,
      planner: { describe: "none", decide: () => Promise.reject(new Error("unused")) },
      tools: new ToolRegistry([lookup, plain]),
    },
    { retry: { horizonMs: 30 * MINUTE, backoffMaxMs: 20_000, backoffBaseMs: 100 } },
  );
  assert.deepEqual(
    [deps.retry.horizonMs, deps.retry.backoffMaxMs, deps.retry.backoffBaseMs, deps.retry.maxModelAttempts],
    [30 * MINUTE, 10_000, 100, 4],
    "the process's over the defaults, the agent's over the process's",
  );
  assert.equal(toolPolicy(deps, lookup).horizonMs, 2 * MINUTE, "the tool's own horizon");
  assert.equal(toolPolicy(deps, lookup).backoffMaxMs, 10_000, "its agent's cap, which it does not set");
  assert.equal(toolPolicy(deps, plain).horizonMs, 30 * MINUTE);
});

Deno.test("defineTool() and defineAgent() refuse retry settings that cannot work, naming each", () => {
  const spec = {
    name: "t",
    description: "d",
    args: z.strictObject({}),
    run: () => Promise.resolve({ result: 1 }),
  };
  assert.throws(
    () => defineTool({ ...spec, retry: { horizonMs: -1 } }),
    (e: Error) =>
      hasCode(e, "TOOL_INVALID") &&
      /'retry\.horizonMs' must be an integer of milliseconds from 0/.test(e.message),
  );
  assert.throws(
    () => defineTool({ ...spec, onGiveUp: "shrug" as never }),
    (e: Error) =>
      hasCode(e, "TOOL_INVALID") && /'onGiveUp' must be "fail-run", "answer" or a function/.test(e.message),
  );
  assert.throws(
    () => defineTool({ ...spec, minCheckAfterMs: 0 }),
    (e: Error) =>
      hasCode(e, "TOOL_INVALID") && /'minCheckAfterMs' must be a positive integer/.test(e.message),
  );
  assert.throws(
    () => defineAgent({ name: "a", tools: [], retry: { horizonMs: 1.5, patience: 3 } as never }),
    (e: Error) =>
      hasCode(e, "AGENT_INVALID") && /'retry\.patience' is not a retry setting/.test(e.message) &&
      /'retry\.horizonMs' must be an integer from 0: current value is 1\.5/.test(e.message),
  );
});
