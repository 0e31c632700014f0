/**
 * The spans and counters of runs that end badly (a call flagged, a tool given
 * up on, a model given up on) and of one that ends well, as a recording
 * tracer and meter see them: the outcome of a part of a step that threw is
 * read from the rows it left, like that of one that returned.
 */
import assert from "node:assert/strict";
import { metrics, trace } from "npm:@opentelemetry/api@1.10.0";
import { z } from "zod";
import { SystemClock } from "../base/clock.ts";
import { runDepsFor } from "./context.ts";
import { agentDeps, processDeps } from "./deps.ts";
import { ToolError } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import { OtelTelemetry } from "./telemetry.ts";
import { defineTool, type Tool, ToolRegistry } from "../agent/tools.ts";
import type { PlannerDecision } from "../model/transcript.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

type Attrs = Record<string, unknown>;

interface RecordedSpan {
  name: string;
  attributes: Attrs;
  status?: { code: number; message?: string };
  exceptions: unknown[];
}

/** A tracer and a meter that keep what they are told, installed as the global providers. */
function recorder() {
  const spans: RecordedSpan[] = [];
  const counted: { name: string; value: number; attributes: Attrs }[] = [];
  const span = (name: string, attributes: Attrs = {}) => {
    const s: RecordedSpan = { name, attributes: { ...attributes }, exceptions: [] };
    spans.push(s);
    const api = {
      setAttribute: (k: string, v: unknown) => (s.attributes[k] = v, api),
      setAttributes: (a: Attrs) => (Object.assign(s.attributes, a), api),
      setStatus: (st: { code: number; message?: string }) => (s.status = st, api),
      recordException: (e: unknown) => void s.exceptions.push(e),
      end: () => {},
      isRecording: () => true,
      spanContext: () => ({ traceId: "0".repeat(31) + "1", spanId: "0".repeat(15) + "1", traceFlags: 1 }),
    };
    return api;
  };
  const tracer = {
    startSpan: (name: string, opts?: { attributes?: Attrs }) => span(name, opts?.attributes),
    startActiveSpan: (
      name: string,
      opts: { attributes?: Attrs },
      _ctx: unknown,
      fn: (s: unknown) => unknown,
    ) => fn(span(name, opts?.attributes)),
  };
  const meter = {
    createCounter: (name: string) => ({
      add: (value: number, attributes: Attrs = {}) => counted.push({ name, value, attributes }),
    }),
  };
  // deno-lint-ignore no-explicit-any
  assert.ok(trace.setGlobalTracerProvider({ getTracer: () => tracer } as any), "no tracer provider before");
  // deno-lint-ignore no-explicit-any
  assert.ok(metrics.setGlobalMeterProvider({ getMeter: () => meter } as any), "no meter provider before");
  return {
    spans,
    counted,
    /** The spans named `name`, in the order they started. */
    named: (name: string) => spans.filter((s) => s.name === name),
    /** What the counter `name` was given, with attributes `match`. */
    sum: (name: string, match: Attrs) =>
      counted.filter((c) => c.name === name && Object.entries(match).every(([k, v]) => c.attributes[k] === v))
        .reduce((n, c) => n + c.value, 0),
    close: () => {
      trace.disable();
      metrics.disable();
    },
  };
}

/** A planner answering `answers` in turn (the last one again when they run out). */
function scripted(answers: PlannerDecision[]): Planner {
  let asked = 0;
  return {
    describe: "script",
    decide: () => Promise.resolve(answers[Math.min(asked++, answers.length - 1)]),
  };
}

const ERROR = 2; // SpanStatusCode.ERROR

Deno.test("spans and counters read a part's outcome from the rows it left, whether it returned or threw", async (t) => {
  const rec = recorder();
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const clock = new SystemClock();
  const proc = processDeps({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink([]) }),
    owner: "w1",
    random: () => 0.5,
    telemetry: new OtelTelemetry(),
  });
  // A retry horizon of 1 ms: a call failing as in an outage is sent once more (after 1 ms), then given up.
  const retry = {
    maxModelAttempts: 3,
    modelTimeoutMs: 5_000,
    backoffBaseMs: 1,
    backoffMaxMs: 1,
    horizonMs: 1,
  };
  const run = (name: string, tools: Tool[], answers: PlannerDecision[]) => {
    const agent = { name, instructions: "Do it.", tools: [], maxSteps: 10 };
    const deps = runDepsFor(
      proc,
      agentDeps({ agent, planner: scripted(answers), tools: new ToolRegistry(tools) } as never, { retry }),
    );
    return claimAndDrive(deps, `${name}-1`, "goal");
  };
  const usage = { prompt_tokens: 5, completion_tokens: 2 };
  const answer = (name: string, args: unknown = {}): PlannerDecision => ({
    kind: "tool_calls",
    calls: [{ name, args: args as never }],
    usage,
  });
  const done: PlannerDecision = { kind: "done", text: "Done.", usage };
  const unknown = () => Promise.reject(new ToolError("LOST", "the connection dropped", { transient: true }));
  try {
    await t.step("a keyless call with an unknown outcome, after a refused answer: flagged", async () => {
      const charge = defineTool({
        name: "charge",
        description: "Charges.",
        args: z.strictObject({}),
        idempotent: false,
        run: unknown,
      });
      const out = await run("flag", [charge], [
        { kind: "tool_calls", calls: [], text: "Hm." },
        answer("charge"),
      ]);
      assert.equal(out.status, "blocked", out.error);
      const [decideSpan] = rec.named("agent.decide");
      assert.deepEqual(
        [
          decideSpan.attributes["agent.decision.llm_attempts"],
          decideSpan.attributes["agent.decision.rejections"],
        ],
        [2, 1],
      );
      assert.equal(decideSpan.attributes["gen_ai.tool.name"], "charge");
      assert.equal(rec.sum("agent.retries", { "agent.retry.kind": "model" }), 1);
      const [call] = rec.named("execute_tool charge");
      assert.deepEqual([call.attributes["agent.tool.outcome"], call.attributes["agent.tool.attempts"]], [
        "flagged",
        1,
      ]);
      // Flagged is an end, not an exception: the span says it is an error, with the flag's reason.
      assert.equal(call.status?.code, ERROR);
      assert.match(call.status?.message ?? "", /^flagged: it failed with an unknown outcome/);
      assert.equal(call.exceptions.length, 0);
      assert.equal(
        rec.sum("agent.tool.calls", { "gen_ai.tool.name": "charge", "agent.tool.outcome": "flagged" }),
        1,
      );
      for (const name of ["agent.act", "agent.step"]) {
        const [s] = rec.named(name);
        assert.equal(s.attributes["agent.tool.status"], "flagged", name);
        assert.equal(s.attributes["agent.idempotency_key"], "flag-1:0", name);
        assert.equal(s.status?.code, ERROR, name);
      }
    });

    await t.step(
      "an idempotent call that keeps failing: given up on at its retry horizon, left at intent",
      async () => {
        const ping = defineTool({
          name: "ping",
          description: "Pings.",
          args: z.strictObject({}),
          run: unknown,
        });
        const out = await run("give-up", [ping], [answer("ping")]);
        assert.equal(out.status, "failed");
        assert.match(out.error ?? "", /TOOL_GAVE_UP/);
        const [call] = rec.named("execute_tool ping");
        assert.deepEqual([call.attributes["agent.tool.outcome"], call.attributes["agent.tool.attempts"]], [
          "intent",
          2,
        ]);
        assert.equal(call.status?.code, ERROR);
        assert.equal(rec.sum("agent.retries", { "agent.retry.kind": "tool" }), 1);
        assert.equal(
          rec.sum("agent.tool.calls", { "gen_ai.tool.name": "ping", "agent.tool.outcome": "intent" }),
          1,
        );
        const step = rec.named("agent.step").find((s) => s.attributes["agent.run.id"] === "give-up-1")!;
        assert.deepEqual([step.attributes["agent.tool.status"], step.attributes["agent.tool.attempts"]], [
          "intent",
          2,
        ]);
      },
    );

    await t.step("a model that never answers usably: given up on, every paid request counted", async () => {
      const before = rec.sum("agent.retries", { "agent.retry.kind": "model" });
      const out = await run("mute", [], [{ kind: "tool_calls", calls: [], text: "Hm." }]);
      assert.equal(out.status, "failed");
      assert.match(out.error ?? "", /MODEL_GAVE_UP/);
      const decideSpan = rec.named("agent.decide").find((s) => s.attributes["agent.run.id"] === "mute-1")!;
      assert.deepEqual(
        [
          decideSpan.attributes["agent.decision.llm_attempts"],
          decideSpan.attributes["agent.decision.rejections"],
        ],
        [3, 3],
      );
      assert.equal(decideSpan.status?.code, ERROR);
      assert.equal(rec.sum("agent.retries", { "agent.retry.kind": "model" }) - before, 2);
    });

    await t.step("a call that is confirmed, then done: created, and the last step says done", async () => {
      const note = defineTool({
        name: "note",
        description: "Notes.",
        args: z.strictObject({ text: z.string() }),
        run: (args) => Promise.resolve({ result: { noted: args.text } }),
      });
      const out = await run("fine", [note], [answer("note", { text: "hi" }), done]);
      assert.equal(out.status, "done", out.error);
      const steps = rec.named("agent.step").filter((s) => s.attributes["agent.run.id"] === "fine-1");
      assert.deepEqual(
        steps.map((s) => [s.attributes["agent.tool.status"], s.attributes["agent.step.done"]]),
        [
          ["confirmed", undefined],
          [undefined, true],
        ],
      );
      assert.equal(steps[0].attributes["agent.tool.remote"], "created");
      assert.equal(
        rec.sum("agent.tool.calls", { "gen_ai.tool.name": "note", "agent.tool.outcome": "created" }),
        1,
      );
      assert.equal(rec.sum("agent.steps", {}), 5, "every step counted, the failed ones too");
    });

    await t.step(
      "an answer's cached and reasoning tokens are on its model span and its decision's",
      async () => {
        const detailed = {
          prompt_tokens: 900,
          completion_tokens: 60,
          total_tokens: 960,
          prompt_tokens_details: { cached_tokens: 800, cache_write_tokens: 12 },
          completion_tokens_details: { reasoning_tokens: 40 },
        };
        const out = await run("cache", [], [{ kind: "done", text: "Done.", usage: detailed }]);
        assert.equal(out.status, "done", out.error);
        const expected = {
          "gen_ai.usage.input_tokens": 900,
          "gen_ai.usage.output_tokens": 60,
          "gen_ai.usage.cache_read.input_tokens": 800,
          "gen_ai.usage.cache_creation.input_tokens": 12,
          "gen_ai.usage.reasoning.output_tokens": 40,
        };
        const chat = rec.named("chat").at(-1)!;
        const decide = rec.named("agent.decide").find((s) => s.attributes["agent.run.id"] === "cache-1")!;
        for (const span of [chat, decide]) {
          for (const [k, v] of Object.entries(expected)) {
            assert.equal(span.attributes[k], v, `${span.name} ${k}`);
          }
        }
      },
    );
  } finally {
    rec.close();
    await store.client.close();
  }
});
