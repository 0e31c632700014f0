import assert from "node:assert/strict";
import { failed, finished } from "./ended.ts";
import { NO_TELEMETRY, runTraceId, telemetryEnabled, telemetryFromEnv } from "./telemetry.ts";
import { traceHeaders } from "../base/trace.ts";

Deno.test("telemetry is off unless OTEL_DENO is true or 1", () => {
  assert.equal(telemetryEnabled({}), false);
  assert.equal(telemetryEnabled({ OTEL_DENO: "false" }), false);
  assert.equal(telemetryEnabled({ OTEL_DENO: "true" }), true);
  assert.equal(telemetryEnabled({ OTEL_DENO: "1" }), true);
  assert.equal(telemetryFromEnv({}), NO_TELEMETRY);
});

Deno.test("the no-op telemetry calls through, returns what the function returns, and rethrows", async () => {
  const at = { fence: { runId: "r", epoch: 1 }, seq: 0 };
  const seven = finished(7, {});
  assert.equal(await NO_TELEMETRY.step(at, () => Promise.resolve(seven)), seven);
  const boom = failed(new Error("boom"), {});
  assert.equal(await NO_TELEMETRY.act(at, () => Promise.resolve(boom)), boom);
  assert.equal(
    await NO_TELEMETRY.modelCall("m", () => Promise.resolve({ usage: 1 })).then((a) => a.usage),
    1,
  );
  await assert.rejects(
    NO_TELEMETRY.recover({ ...at, rows: 1, strandedCalls: 0 }, () => Promise.reject(new Error("boom"))),
    /boom/,
  );
  assert.deepEqual(NO_TELEMETRY.traceHeaders(), {});
  assert.deepEqual(traceHeaders(), {}, "no global propagator without OTEL_DENO");
});

Deno.test("a run's trace id is 32 hex digits, the same for the same run, different for another", () => {
  assert.match(runTraceId("demo"), /^[0-9a-f]{32}$/);
  assert.equal(runTraceId("demo"), runTraceId("demo"));
  assert.notEqual(runTraceId("demo"), runTraceId("demo2"));
});
