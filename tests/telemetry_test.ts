/**
 * Telemetry with real processes: a worker with `OTEL_DENO=true` exports to a
 * local OTLP/HTTP receiver, is killed at `after_call`, and a second worker
 * resumes the run. One trace holds both attempts, the step spans carry the
 * idempotency key, the re-sent call says `already_done`, the model spans
 * carry GenAI token usage, and the mock cloud saw `traceparent`.
 */
import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { runTraceId } from "../runtime/run/telemetry.ts";
import { startOtlpReceiver } from "../harness/otlp_receiver.ts";
import { runWorkerToEnd, until } from "../harness/procs.ts";
import { seedDataDir } from "./_pg.ts";

Deno.test("a crash at after_call and its resume are one trace with both worker attempts", async () => {
  const receiver = startOtlpReceiver();
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-otel-" });
  await seedDataDir(dir);
  const run = "otel-demo";
  const env = {
    DATA_DIR: dir,
    MODEL_URL: mocks.modelUrl,
    MODEL: "mock-planner",
    CLOUD_URL: mocks.cloudUrl,
    RUN_ID: run,
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_SERVICE_NAME: "agent-runtime-test",
  };
  try {
    const first = await runWorkerToEnd({ ...env, CRASH_AT: "after_call" });
    assert.equal(first.code, 137, first.lines.join("\n"));
    const second = await runWorkerToEnd(env);
    assert.equal(second.code, 0, second.lines.join("\n"));
    await until(
      () =>
        Promise.resolve(
          receiver.spans.some((s) => s.name === "agent.attempt" && s.attributes["agent.run.epoch"] === 2),
        ),
      "the second attempt's span",
      10_000,
    );
    const ofRun = receiver.spans.filter((s) => s.traceId === runTraceId(run));
    const attempts = ofRun.filter((s) => s.name === "agent.attempt");
    const byEpoch = new Map(attempts.map((s) => [s.attributes["agent.run.epoch"], s]));
    assert.deepEqual([...byEpoch.keys()].sort(), [1, 2], JSON.stringify(attempts));
    // The killed worker exported nothing of its own; the next one recorded it from its rows.
    assert.equal(byEpoch.get(1)!.attributes["agent.attempt.outcome"], "lost");
    assert.equal(byEpoch.get(1)!.attributes["agent.attempt.reconstructed"], true);
    assert.ok(byEpoch.get(1)!.startMs <= byEpoch.get(2)!.startMs);
    assert.equal(byEpoch.get(2)!.attributes["agent.attempt.outcome"], "done");
    assert.equal(
      byEpoch.get(2)!.attributes["agent.previous_owner"],
      byEpoch.get(1)!.attributes["agent.worker.owner"],
    );

    const steps = ofRun.filter((s) => s.name === "agent.step");
    assert.deepEqual(steps.map((s) => s.attributes["agent.step.seq"]).sort(), [0, 1, 2, 3]);
    const step0 = steps.find((s) => s.attributes["agent.step.seq"] === 0)!;
    assert.equal(step0.attributes["agent.idempotency_key"], `${run}:0`);
    assert.equal(step0.attributes["agent.tool.remote"], "already_done");
    assert.equal(step0.attributes["agent.tool.attempts"], 2);
    for (const s of steps) assert.equal(s.parentSpanId, byEpoch.get(2)!.spanId);
    for (const name of ["agent.decide", "agent.act"]) {
      const child = ofRun.find((s) => s.name === name && s.parentSpanId === step0.spanId);
      assert.ok(child, `step 0 has an ${name} child`);
    }

    // The stranded call is re-sent during recovery, under the same key.
    const resent = ofRun.find((s) => s.name === "execute_tool create_server")!;
    assert.equal(resent.attributes["agent.idempotency_key"], `${run}:0`);
    assert.equal(resent.attributes["agent.tool.outcome"], "already_done");
    assert.equal(resent.attributes["gen_ai.tool.name"], "create_server");
    const recover = ofRun.find((s) => s.spanId === resent.parentSpanId)!;
    assert.equal(recover.name, "agent.recover");

    const chats = ofRun.filter((s) => s.attributes["gen_ai.operation.name"] === "chat");
    assert.equal(chats.length, 3, "steps 1-3 asked the model; step 0 was replayed");
    for (const c of chats) {
      assert.equal(c.attributes["gen_ai.request.model"], "mock-planner");
      assert.ok(Number(c.attributes["gen_ai.usage.input_tokens"]) > 0);
      assert.ok(Number(c.attributes["gen_ai.usage.output_tokens"]) > 0);
    }

    // The trace context reached the cloud, from both attempts, in the run's trace.
    const seen = mocks.cloud.traceparents(`${run}:0`);
    assert.equal(seen.length, 2, JSON.stringify(seen));
    for (const tp of seen) assert.match(tp, new RegExp(`^00-${runTraceId(run)}-[0-9a-f]{16}-01$`));

    await until(
      () => Promise.resolve(receiver.points.some((p) => p.name === "agent.tool.calls")),
      "the tool-call counter",
      10_000,
    );
    const toolCalls = receiver.points.filter((p) => p.name === "agent.tool.calls");
    assert.ok(toolCalls.some((p) => p.attributes["agent.tool.outcome"] === "already_done" && p.value === 1));
    assert.ok(receiver.points.some((p) => p.name === "agent.recoveries" && p.value === 1));
    assert.ok(receiver.points.some((p) => p.name === "agent.steps" && p.value === 4));
  } finally {
    await mocks.close();
    await receiver.close();
    await Deno.remove(dir, { recursive: true });
  }
});
