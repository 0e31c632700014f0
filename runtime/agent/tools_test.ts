import assert from "node:assert/strict";
import { z } from "zod";
import { ToolError } from "../base/errors.ts";
import { defineTool, isAccepted, type ToolOutcome, ToolRegistry } from "./tools.ts";
import { checkAtOf, waitExpired } from "./accepted.ts";

const echo = defineTool({
  name: "echo",
  description: "Echo a word.",
  args: z.strictObject({ word: z.string(), times: z.number().int().default(1) }),
  run: (args) => Promise.resolve({ result: args.word.repeat(args.times) }),
});

Deno.test("defineTool() derives the model's JSON schema from zod, rejecting unknown fields", () => {
  assert.deepEqual(echo.parameters, {
    type: "object",
    properties: {
      word: { type: "string" },
      times: {
        type: "integer",
        default: 1,
        minimum: Number.MIN_SAFE_INTEGER,
        maximum: Number.MAX_SAFE_INTEGER,
      },
    },
    required: ["word"],
    additionalProperties: false,
  });
  assert.equal(echo.idempotent, true);
});

Deno.test("ToolRegistry.check() names the unknown tool and lists the available ones", () => {
  const registry = new ToolRegistry([echo]);
  const checked = registry.check("launch_rocket", {});
  assert.equal(checked.ok, false);
  assert.equal(!checked.ok && checked.code, "UNKNOWN_TOOL");
  assert.match(!checked.ok ? checked.message : "", /Unknown tool "launch_rocket"\. Available tools: echo/);
});

Deno.test("ToolRegistry.check() refuses bad and unknown arguments instead of dropping them", async (t) => {
  const registry = new ToolRegistry([echo]);
  for (const args of [{ word: 42 }, { word: "a", extra: true }, "not an object", null]) {
    await t.step(JSON.stringify(args), () => {
      const checked = registry.check("echo", args);
      assert.equal(checked.ok, false);
      assert.equal(!checked.ok && checked.code, "BAD_ARGS");
    });
  }
  const ok = registry.check("echo", { word: "hi" });
  assert.equal(ok.ok && JSON.stringify(ok.args), '{"word":"hi","times":1}');
});

Deno.test("defineTool() refuses bad names and limits with the value seen", () => {
  const base = { description: "", args: z.strictObject({}), run: () => Promise.resolve({ result: null }) };
  assert.throws(() => defineTool({ ...base, name: "has space" }), /"has space"/);
  assert.throws(
    () => defineTool({ ...base, name: "t", timeoutMs: 0 }),
    /'timeoutMs' must be a positive integer: current value is 0/,
  );
  assert.throws(() => new ToolRegistry([echo, echo]), /Two tools are named echo/);
});

Deno.test("defineTool() keeps a reconcile and its timeout (default: the tool's), and refuses a bad timeout", async () => {
  const base = { description: "", args: z.strictObject({}), run: () => Promise.resolve({ result: null }) };
  const seen: string[] = [];
  const tool = defineTool({
    ...base,
    name: "lookup",
    timeoutMs: 1_500,
    reconcile: (_args, ctx) => {
      seen.push(ctx.idempotencyKey);
      return Promise.resolve({ status: "not_happened" });
    },
  });
  assert.equal(tool.reconcileTimeoutMs, 1_500);
  const ctx = {
    idempotencyKey: "r:0",
    runId: "r",
    seq: 0,
    attempts: 1,
    signal: new AbortController().signal,
  };
  assert.deepEqual(await tool.reconcile?.({}, { ...ctx, traceHeaders: () => ({}) }), {
    status: "not_happened",
  });
  assert.deepEqual(seen, ["r:0"]);
  assert.equal(defineTool({ ...base, name: "plain" }).reconcile, undefined);
  assert.throws(
    () => defineTool({ ...base, name: "t", reconcileTimeoutMs: 2.5 }),
    /'reconcileTimeoutMs' must be a positive integer: current value is 2.5/,
  );
});

Deno.test("a tool's remote may accept a call: when to ask again is checked against the tool's waitDeadlineMs", async () => {
  assert.equal(echo.waitDeadlineMs, 3_600_000, "an hour by default");
  const job = defineTool({
    name: "job",
    description: "Start a job.",
    args: z.strictObject({}),
    waitDeadlineMs: 60_000,
    run: (_args, ctx) =>
      Promise.resolve(
        (ctx.polls ?? 0) < 2
          ? { result: { job: "j-1" }, accepted: { checkAfterMs: 5_000 } }
          : { result: "done" },
      ),
  });
  assert.equal(job.waitDeadlineMs, 60_000);
  const ctx = {
    idempotencyKey: "r:0",
    runId: "r",
    seq: 0,
    attempt: 1,
    signal: new AbortController().signal,
    traceHeaders: () => ({}),
  };
  const first = await job.run({}, ctx);
  assert.ok(isAccepted(first));
  const now = new Date(Date.UTC(2026, 0, 1));
  assert.deepEqual(checkAtOf(job, first, now), new Date(now.getTime() + 5_000));
  assert.equal(isAccepted(await job.run({}, { ...ctx, polls: 2 })), false);

  // Longer than the deadline is taken: the executor asks no later than the deadline.
  assert.deepEqual(
    checkAtOf(job, { result: null, accepted: { checkAfterMs: 60_001 } }, now),
    new Date(now.getTime() + 60_001),
  );
  for (const checkAfterMs of [0, -1, 1.5, Number.NaN, "5" as unknown as number]) {
    const outcome: ToolOutcome = { result: null, accepted: { checkAfterMs } };
    assert.throws(() => checkAtOf(job, outcome as never, now), (e: ToolError) => {
      assert.equal(e.code, "TOOL_ACCEPTED_INVALID");
      assert.equal(e.transient, false);
      assert.match(
        e.message,
        /'accepted\.checkAfterMs' must be a positive integer of milliseconds: current value is/,
      );
      return true;
    });
  }
  const expired = waitExpired(job, "r:0", new Date(now.getTime() + 60_000));
  assert.deepEqual([expired.code, expired.transient], ["TOOL_WAIT_EXPIRED", false]);
  assert.match(expired.message, /had not finished it by its deadline 2026-01-01T00:01:00.000Z/);
});

Deno.test("defineTool() refuses a waitDeadlineMs that is not a positive integer", () => {
  for (const waitDeadlineMs of [0, -5, 2.5]) {
    assert.throws(
      () =>
        defineTool({
          name: "job",
          description: "d",
          args: z.strictObject({}),
          waitDeadlineMs,
          run: () => Promise.resolve({ result: null }),
        }),
      new RegExp(`'waitDeadlineMs' must be a positive integer: current value is ${waitDeadlineMs}`),
    );
  }
});
