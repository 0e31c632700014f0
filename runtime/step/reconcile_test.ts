/**
 * Asking a tool's remote whether a call happened, on ManualClock: each
 * answer the runtime reads, each way the question goes wrong (a throw, an
 * answer of another shape, no answer by the tool's timeout), and a worker
 * that is stopping, which settles nothing.
 */

import assert from "node:assert/strict";
import { askRemote, type ReconcileQuestion } from "./reconcile.ts";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { NO_TELEMETRY } from "../run/telemetry.ts";
import type { RunDeps, RunState } from "../run/context.ts";
import { defineTool, type ToolSpec } from "../agent/tools.ts";
import { z } from "zod";

function setup(reconcile?: ToolSpec<{ n: number }>["reconcile"], reconcileTimeoutMs = 1_000) {
  const clock = new ManualClock();
  const lines: string[] = [];
  const deps = { clock, log: new Logger({ clock, sink: arraySink(lines) }), telemetry: NO_TELEMETRY };
  const stop = new AbortController();
  const state = { fence: { runId: "r1", epoch: 1 }, signal: stop.signal };
  const tool = defineTool({
    name: "pay",
    description: "Pays.",
    args: z.strictObject({ n: z.number() }),
    idempotent: false,
    run: () => Promise.resolve({ result: "paid" }),
    reconcile,
    reconcileTimeoutMs,
  });
  const call: ReconcileQuestion = { key: "r1:0", seq: 0, tool, args: { n: 1 }, attempts: 2 };
  const ask = () => askRemote(deps as unknown as RunDeps, state as unknown as RunState, call);
  return { clock, lines, stop, ask };
}

Deno.test("askRemote() asks once with the call's key and reads each of the three answers", async () => {
  assert.equal(await setup(undefined).ask(), undefined, "a tool with no reconcile is not asked");
  const keys: string[] = [];
  const happened = setup((_args, ctx) => {
    keys.push(`${ctx.idempotencyKey} ${ctx.attempts}`);
    return Promise.resolve({ status: "happened", result: { receipt: 7 } });
  });
  assert.deepEqual(await happened.ask(), { status: "happened", result: { receipt: 7 } });
  assert.deepEqual(keys, ["r1:0 2"]);
  assert.match(happened.lines.join("\n"), /event=reconcile-asked run=r1 seq=0 key=r1:0 tool=pay attempts=2/);
  assert.match(happened.lines.join("\n"), /event=reconcile-answered .*answer=happened/);
  assert.deepEqual(await setup(() => Promise.resolve({ status: "not_happened" })).ask(), {
    status: "not_happened",
  });
  assert.deepEqual(await setup(() => Promise.resolve({ status: "unknown", reason: "no index" })).ask(), {
    status: "unknown",
    reason: "no index",
  });
});

Deno.test("askRemote() takes a throw, an answer of another shape and no answer by the timeout as 'cannot tell'", async () => {
  assert.deepEqual(await setup(() => Promise.reject(new Error("lookup refused"))).ask(), {
    status: "unknown",
    reason: "its reconcile failed: Error: lookup refused",
    unasked: true,
  });
  const odd = await setup(() => Promise.resolve({ status: "maybe" } as never)).ask();
  assert.equal(odd?.status, "unknown");
  assert.match((odd as { reason?: string }).reason ?? "", /answered \{"status":"maybe"\}, not/);
  // A reconcile that never answers (and ignores its signal) is given up on at its own timeout.
  const hung = setup(() => new Promise(() => {}), 1_000);
  const answer = hung.ask();
  await hung.clock.advance(999);
  let settled = false;
  answer.then(() => settled = true);
  await Promise.resolve();
  assert.equal(settled, false, "not before the timeout");
  await hung.clock.advance(1);
  assert.deepEqual(await answer, {
    status: "unknown",
    reason: "its reconcile did not answer within 1000ms",
    unasked: true,
  });
});

Deno.test("askRemote() settles nothing for a worker that is stopping: the stop is rethrown", async () => {
  const s = setup(() => new Promise(() => {}));
  const answer = s.ask();
  s.stop.abort(new Error("lease lost"));
  await assert.rejects(answer, /lease lost/);
});
