import assert from "node:assert/strict";
import { z } from "zod";
import { MockCloud } from "../mock/cloud.ts";
import { ManualClock } from "./clock.ts";
import { workerFor } from "./context.ts";
import { agentDeps, processDeps } from "./deps.ts";
import { ToolError } from "./errors.ts";
import { arraySink, Logger } from "./log.ts";
import { runWorker } from "./loop.ts";
import type { Planner } from "./planner.ts";
import { openPglite } from "./store/pglite.ts";
import { Store } from "./store/store.ts";
import { defineTool, idempotencyKeyHeader, type ToolOutcome, ToolRegistry } from "./tools.ts";
import type { ModelAnswer } from "./transcript.ts";

// Calls whose remote accepted them and finishes later, driven by a manual clock: each worker turn ends
// with the run asleep, the clock moves, and the next turn asks the remote again under the same key.

/** A planner answering `answers` in turn (the last one again when they run out). */
function scripted(answers: ModelAnswer[]): { planner: Planner; asked: () => number } {
  let n = 0;
  return {
    planner: {
      describe: "script",
      decide: () => Promise.resolve(answers[Math.min(n++, answers.length - 1)]),
    },
    asked: () => n,
  };
}

async function world(answers: ModelAnswer[], toolOpts: { waitDeadlineMs?: number; jobMs?: number } = {}) {
  const clock = new ManualClock();
  const store = new Store(await openPglite());
  await store.applySchema();
  const cloud = await MockCloud.open({ now: () => clock.now(), jobDurationMs: toolOpts.jobMs ?? 30_000 });
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const job = defineTool({
    name: "render",
    description: "Renders a report; takes a while.",
    args: z.strictObject({ title: z.string() }),
    waitDeadlineMs: toolOpts.waitDeadlineMs,
    run: async (args, ctx): Promise<ToolOutcome> => {
      const res = await cloud.handler(
        new Request("http://cloud/v1/jobs", {
          method: "POST",
          headers: {
            "idempotency-key": idempotencyKeyHeader(ctx.idempotencyKey),
            "content-type": "application/json",
          },
          body: JSON.stringify({ kind: "report", title: args.title }),
        }),
      );
      const body = await res.json();
      if (res.status === 202) {
        return { result: { job: body.job_id }, accepted: { checkAfterMs: body.retry_after_ms } };
      }
      if (body.status === "failed") throw new ToolError("REPORT_FAILED", body.error, { transient: false });
      return { result: body.result };
    },
  });
  const { planner, asked } = scripted(answers);
  const deps = workerFor(
    processDeps({ store, clock, log, owner: "w1", random: () => 0.5 }),
    agentDeps(
      {
        agent: { name: "reports", instructions: "Render.", tools: [], maxSteps: 10 },
        planner,
        tools: new ToolRegistry([job]),
      } as never,
    ),
  );
  return { clock, store, cloud, deps, lines, asked };
}

const render = (title: string) => ({ name: "render", args: { title } });

Deno.test("a call its remote accepted: the run sleeps without a worker, is asked again under its key when due, and finishes", async () => {
  const w = await world([
    { kind: "tool_calls", calls: [render("q1"), render("q2")] },
    { kind: "done", text: "Rendered." },
  ]);
  try {
    const first = await runWorker(w.deps, "r1", "Render two reports.");
    assert.equal(first.status, "waiting");
    const asleep = await w.store.getRun("r1");
    assert.equal(asleep?.status, "waiting");
    assert.equal(asleep?.heartbeat_at, null, "no worker holds a sleeping run: its lease is let go");
    assert.equal(asleep?.wake_at?.getTime(), w.clock.now().getTime() + 30_000);
    let { effects } = await w.store.loadHistory("r1");
    assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.attempts, e.polls]), [
      ["r1:0", "waiting", 1, 0],
      ["r1:1", "waiting", 1, 0],
    ]);
    // Before it is due, a worker does not take it.
    const early = await runWorker(w.deps, "r1", "Render two reports.");
    assert.equal(early.alreadyClosed, true);
    await w.clock.advance(10_000);
    assert.equal((await runWorker(w.deps, "r1", "x")).alreadyClosed, true);
    await w.clock.advance(20_000);
    const done = await runWorker(w.deps, "r1", "Render two reports.");
    assert.equal(done.status, "done", w.lines.join("\n"));
    ({ effects } = await w.store.loadHistory("r1"));
    assert.deepEqual(effects.map((e) => [e.status, e.attempts, e.polls]), [["confirmed", 1, 1], [
      "confirmed",
      1,
      1,
    ]]);
    assert.equal(w.cloud.jobs().length, 2, "one job per call");
    assert.equal(w.asked(), 2, "the next decision was asked once, after both jobs were done");
    assert.ok(
      w.lines.some((l) => / event=intent run=r1 seq=1 key=r1:1 tool=render attempt=1 poll=1$/.test(l)),
    );
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a call not done by its tool's waitDeadlineMs fails TOOL_WAIT_EXPIRED without another request", async () => {
  const w = await world(
    [{ kind: "tool_calls", calls: [render("slow")] }, { kind: "done", text: "Gave up." }],
    { waitDeadlineMs: 20_000, jobMs: 60_000 },
  );
  try {
    assert.equal((await runWorker(w.deps, "r2", "x")).status, "waiting");
    // The remote said 60 s; the call is asked again at its deadline, 20 s, and no later.
    assert.equal((await w.store.getRun("r2"))?.wake_at?.getTime(), w.clock.now().getTime() + 20_000);
    await w.clock.advance(20_000);
    const end = await runWorker(w.deps, "r2", "x");
    assert.equal(end.status, "done", w.lines.join("\n"));
    const e = (await w.store.loadHistory("r2")).effects[0];
    assert.equal(e.status, "failed");
    assert.match(
      e.error ?? "",
      /^render: the remote accepted call r2:0 but had not finished it by its deadline/,
    );
    assert.equal(w.cloud.requests().by_path["/v1/jobs"], 1, "no request past the deadline");
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a call settled from outside while its run sleeps: the run is woken and goes on with that result", async () => {
  const w = await world([{ kind: "tool_calls", calls: [render("hand")] }, {
    kind: "done",
    text: "Rendered.",
  }]);
  try {
    assert.equal((await runWorker(w.deps, "r3", "x")).status, "waiting");
    const out = await w.store.settleCall("r3:0", { result: { url: "by-hand" } }, "alice", w.clock.now());
    assert.equal(out.effect?.status, "confirmed");
    const end = await runWorker(w.deps, "r3", "x");
    assert.equal(end.status, "done", w.lines.join("\n"));
    const e = (await w.store.loadHistory("r3")).effects[0];
    assert.deepEqual([e.status, e.remote, e.result], ["confirmed", "resolved", { url: "by-hand" }]);
    assert.equal(w.cloud.requests().by_path["/v1/jobs"], 1, "the remote was not asked again");
  } finally {
    await w.store.client.close();
  }
});
