import assert from "node:assert/strict";
import { z } from "zod";
import { MockCloud } from "../../mock/cloud.ts";
import { ManualClock } from "../base/clock.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { ToolError } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import { defineTool, idempotencyKeyHeader, type ToolOutcome, ToolRegistry } from "../agent/tools.ts";
import type { PlannerDecision } from "../model/transcript.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

// Calls whose remote accepted them and finishes later, driven by a manual clock: each worker turn ends
// with the run asleep, the clock moves, and the next turn asks the remote again under the same key.

/** A planner answering `answers` in turn (the last one again when they run out). */
function scripted(answers: PlannerDecision[]): { planner: Planner; asked: () => number } {
  let n = 0;
  return {
    planner: {
      describe: "script",
      decide: () => Promise.resolve(answers[Math.min(n++, answers.length - 1)]),
    },
    asked: () => n,
  };
}

async function world(
  answers: PlannerDecision[],
  toolOpts: { waitDeadlineMs?: number; jobMs?: number; checkAfterMs?: number } = {},
) {
  const clock = new ManualClock();
  const store = new Store(await openTestPglite());
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
        return {
          result: { job: body.job_id },
          accepted: { checkAfterMs: toolOpts.checkAfterMs ?? body.retry_after_ms },
        };
      }
      if (body.status === "failed") throw new ToolError("REPORT_FAILED", body.error, { transient: false });
      return { result: body.result };
    },
  });
  const { planner, asked } = scripted(answers);
  const deps = runDepsFor(
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
    const first = await claimAndDrive(w.deps, "r1", "Render two reports.");
    assert.equal(first.status, "waiting");
    const asleep = await w.store.reads.getRun("r1");
    assert.equal(asleep?.status, "waiting");
    assert.equal(asleep?.heartbeat_at, null, "no worker holds a sleeping run: its lease is let go");
    assert.equal(asleep?.wake_at?.getTime(), w.clock.now().getTime() + 30_000);
    let { effects } = await w.store.reads.loadHistory("r1");
    assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.attempts, e.polls]), [
      ["r1:0", "waiting", 1, 0],
      ["r1:1", "waiting", 1, 0],
    ]);
    // Before it is due, a worker does not take it.
    const early = await claimAndDrive(w.deps, "r1", "Render two reports.");
    assert.equal(early.alreadyClosed, true);
    await w.clock.advance(10_000);
    assert.equal((await claimAndDrive(w.deps, "r1", "x")).alreadyClosed, true);
    await w.clock.advance(20_000);
    const done = await claimAndDrive(w.deps, "r1", "Render two reports.");
    assert.equal(done.status, "done", w.lines.join("\n"));
    ({ effects } = await w.store.reads.loadHistory("r1"));
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
    assert.equal((await claimAndDrive(w.deps, "r2", "x")).status, "waiting");
    // The remote said 60 s; the call is asked again at its deadline, 20 s, and no later.
    assert.equal((await w.store.reads.getRun("r2"))?.wake_at?.getTime(), w.clock.now().getTime() + 20_000);
    await w.clock.advance(20_000);
    const end = await claimAndDrive(w.deps, "r2", "x");
    assert.equal(end.status, "done", w.lines.join("\n"));
    const e = (await w.store.reads.loadHistory("r2")).effects[0];
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
    assert.equal((await claimAndDrive(w.deps, "r3", "x")).status, "waiting");
    const out = await w.store.operators.settleCall(
      "r3:0",
      { result: { url: "by-hand" } },
      "alice",
      w.clock.now(),
    );
    assert.equal(out.effect?.status, "confirmed");
    const end = await claimAndDrive(w.deps, "r3", "x");
    assert.equal(end.status, "done", w.lines.join("\n"));
    const e = (await w.store.reads.loadHistory("r3")).effects[0];
    assert.deepEqual([e.status, e.remote, e.result], ["confirmed", "resolved", { url: "by-hand" }]);
    assert.equal(w.cloud.requests().by_path["/v1/jobs"], 1, "the remote was not asked again");
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a settle that lands between the worker taking the run and its re-send: the worker goes on with the settled call, not stalled", async () => {
  const w = await world([{ kind: "tool_calls", calls: [render("race")] }, {
    kind: "done",
    text: "Rendered.",
  }]);
  try {
    assert.equal((await claimAndDrive(w.deps, "r4", "x")).status, "waiting");
    await w.clock.advance(30_000);
    // The worker is due and takes the run; just before its re-send's intent is written, a webhook settles
    // the call (planted from outside, around the store's write, as the adversarial pass's race did).
    const intent = w.store.writes.effectIntentRow.bind(w.store.writes);
    let planted = 0;
    w.store.writes.effectIntentRow = async (...args: Parameters<typeof intent>) => {
      if (args[1].key === "r4:0" && planted++ === 0) {
        const out = await w.store.operators.settleCall(
          "r4:0",
          { result: { url: "webhook" } },
          "hook",
          w.clock.now(),
        );
        assert.equal(out.settled, true);
      }
      return await intent(...args);
    };
    const end = await claimAndDrive(w.deps, "r4", "x");
    assert.equal(planted, 1, "the settle landed inside the turn");
    assert.equal(end.status, "done", w.lines.join("\n"));
    assert.ok(
      w.lines.some((l) => / event=settled-meanwhile run=r4 seq=0 key=r4:0 status=confirmed by=hook$/.test(l)),
    );
    assert.ok(!w.lines.some((l) => / event=stalled /.test(l)), "the worker did not stop");
    const e = (await w.store.reads.loadHistory("r4")).effects[0];
    assert.deepEqual([e.status, e.remote, e.result], ["confirmed", "resolved", { url: "webhook" }]);
    assert.equal(w.cloud.requests().by_path["/v1/jobs"], 1, "the remote was not asked again");
    assert.equal(w.asked(), 2, "the next decision was asked once");
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a remote that says 'ask again in 1 ms' is asked no sooner than the floor, which doubles with each poll", async () => {
  const w = await world(
    [{ kind: "tool_calls", calls: [render("hurry")] }, { kind: "done", text: "Gave up." }],
    { checkAfterMs: 1, jobMs: 3_600_000, waitDeadlineMs: 60_000 },
  );
  try {
    const waits: number[] = [];
    let end = await claimAndDrive(w.deps, "r5", "x");
    // Bounded: the call's deadline ends it; 200 turns would mean no floor.
    for (let i = 0; i < 200 && end.status === "waiting"; i++) {
      const run = await w.store.reads.getRun("r5");
      const wait = new Date(run!.wake_at!).getTime() - w.clock.now().getTime();
      waits.push(wait);
      await w.clock.advance(wait);
      end = await claimAndDrive(w.deps, "r5", "x");
    }
    assert.equal(end.status, "done");
    // 1 s, then doubled per poll up to the backoff cap (60 s), and never past the deadline (60 s in all).
    assert.deepEqual(waits, [1_000, 2_000, 4_000, 8_000, 16_000, 29_000]);
    const e = (await w.store.reads.loadHistory("r5")).effects[0];
    // The last wake is the deadline itself: the call fails there without a request.
    assert.equal(
      e.polls,
      5,
      "five polls in a minute, where 'ask again in 1 ms' would have asked 60,000 times",
    );
    assert.equal(w.cloud.requests().by_path["/v1/jobs"], 6, "the first request and five polls");
    assert.match(e.error ?? "", /TOOL_WAIT_EXPIRED|had not finished it by its deadline/);
    assert.ok(
      w.lines.some((l) =>
        / event=check-after-raised run=r5 seq=0 key=r5:0 polls=0 asked_ms=1 floor_ms=1000$/.test(l)
      ),
    );
  } finally {
    await w.store.client.close();
  }
});
