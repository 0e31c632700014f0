/**
 * Regression tests for what an adversarial pass broke (issue #9), in-process
 * on the simulator: each is named after the bug it pins.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { demoTools } from "../examples/provision/tools.ts";
import { settle } from "../runtime/base/clock.ts";
import { defineTool, type Tool } from "../runtime/agent/tools.ts";
import { SIM_START_MS as SIM_START, SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const db = await openTestSim();

/** Advances the world's clock a second at a time until `pred` holds (bounded). */
async function advanceUntil(
  world: SimWorld,
  pred: () => boolean | Promise<boolean>,
  what: string,
): Promise<void> {
  // Bounded: 600 simulated seconds.
  for (let i = 0; i < 600; i++) {
    if (await pred()) return;
    await world.advance(1_000);
    await settle();
  }
  throw new Error(`never happened: ${what}`);
}

Deno.test("the retry horizon holds across restarts: workers killed between a failing model's requests do not reset it", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  world.model.setFaults({ fail_next: 1_000, fail_status: 503 });
  const hooks = { retry: { horizonMs: 60_000 } };
  // An incarnation still alive after its first request is killed; one that lets the run go (a wait longer than it
  // holds a slot for) is followed by another once the run is due, as a worker host's take would. Without
  // a durable horizon every restart would start it again.
  let proc = world.spawn({ runId: "limit", hooks });
  let seen = world.model.calls("limit");
  let kills = 0;
  let incarnations = 1;
  // Bounded: 600 simulated seconds.
  for (let i = 0; i < 600; i++) {
    const run = (await world.snapshot("limit")).run;
    if (run?.status === "failed") break;
    if (!proc.dead && world.model.calls("limit") >= seen + 1) {
      await proc.kill();
      kills++;
    }
    if (proc.dead && (run?.status !== "waiting" || (run.wake_at && run.wake_at <= world.clock.now()))) {
      seen = world.model.calls("limit");
      proc = world.spawn({ runId: "limit", hooks });
      incarnations++;
    }
    await world.advance(1_000);
    await settle();
  }
  await proc.exit;
  const snap = await world.snapshot("limit");
  assert.equal(snap.run?.status, "failed");
  assert.ok(kills >= 1 && incarnations >= 5, `${incarnations} workers, ${kills} of them killed mid-outage`);
  assert.match(
    snap.run?.error ?? "",
    /^MODEL_GAVE_UP: The model failed \d+ requests for step 0 over 6\d s \(the retry horizon is 60 s, counted from the first failure, across restarts\)/,
  );
  const row = snap.journal[0];
  assert.equal(world.model.calls("limit"), row.llm_attempts, "every request counted before it went out");
  const since = new Date(row.failing_since!).getTime() - SIM_START;
  assert.ok(since < 2_000, `the horizon runs from the first failure (${since} ms in), not from a restart`);
  const failedAt = new Date(snap.run!.updated_at).getTime() - SIM_START;
  assert.ok(failedAt >= 60_000 && failedAt < 70_000, `given up at the horizon: ${failedAt} ms in`);
});

Deno.test("a model answer holding a NUL character is refused and re-asked, not a poison run", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  world.model.setScript({
    run: "nul-answer",
    steps: [{ tool: "create_dns_record", args: { hostname: "a\u0000b", record_type: "A", target: "x" } }],
  });
  const proc = world.spawn({ runId: "nul-answer" });
  await advanceUntil(world, () => proc.dead, "the worker to end");
  const exit = await proc.exit;
  assert.equal(exit.kind, "exited");
  const snap = await world.snapshot("nul-answer");
  assert.equal(snap.run?.status, "failed", "the model never gave a storable answer");
  assert.equal(snap.journal[0].llm_attempts, 4, "bounded: four requests");
  assert.deepEqual(snap.journal[0].rejections.map((r) => r.code), [
    "MODEL_UNSTORABLE",
    "MODEL_UNSTORABLE",
    "MODEL_UNSTORABLE",
    "MODEL_UNSTORABLE",
  ]);
  assert.equal(snap.created.length, 0, "nothing acted on the refused answers");
});

Deno.test("a tool result holding a NUL character is stored (written out as \\u0000), not lost", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, {
    tools: (fetch) =>
      demoTools({ cloudUrl: "http://mock-cloud.sim", fetch }).map((t): Tool =>
        t.name === "create_server"
          ? { ...t, run: async (args, ctx) => ({ ...(await t.run(args, ctx)), result: "i-1\u0000tail" }) }
          : t
      ),
  });
  const proc = world.spawn({ runId: "nul-result" });
  await advanceUntil(world, () => proc.dead, "the worker to end");
  const snap = await world.snapshot("nul-result");
  assert.equal(snap.run?.status, "done");
  assert.equal(snap.effects[0].result, "i-1\\u0000tail");
  assert.equal(snap.effects[0].remote, "created");
  assert.equal(snap.requestsByKey["nul-result:0"], 1, "the call was sent once, not re-sent forever");
});

Deno.test("a run whose workers keep dying without progress is stopped as failed after a bounded number of claims", async () => {
  await db.freshSchema();
  // A tool whose call never returns: each incarnation dies while the call is in flight. Its request
  // limit is set past the claims bound, which is what this test is about.
  let calls = 0;
  const stuck = defineTool({
    name: "create_server",
    description: "Hangs.",
    args: z.object({}).passthrough(),
    maxAttempts: 20,
    run: () => {
      calls++;
      return new Promise(() => {});
    },
  });
  const world = await SimWorld.open(db, {
    tools: (fetch) => [stuck, ...demoTools({ cloudUrl: "http://mock-cloud.sim", fetch }).slice(1)],
  });
  let incarnations = 0;
  // Bounded: the runtime must stop the run within its limit (5) plus the claim that fails it.
  for (; incarnations < 20; incarnations++) {
    const proc = world.spawn({ runId: "poison" });
    const before = calls;
    for (let i = 0; i < 200 && calls === before && !proc.dead; i++) await settle(1);
    if (proc.dead) {
      const exit = await proc.exit;
      assert.equal(exit.kind === "exited" && exit.outcome.status, "failed");
      break;
    }
    // kill -9 with the call in flight (its exit never comes: the call never returns, as in a dead process)
    await proc.kill();
  }
  const snap = await world.snapshot("poison");
  assert.equal(snap.run?.status, "failed");
  assert.match(snap.run?.error ?? "", /^stuck: 5 workers in a row took this run and made no progress/);
  // The first worker made progress (it decided step 0); the five after it made none; the next claim stops it.
  assert.equal(incarnations, 6, "six deaths: one with progress, five without");
  assert.equal(calls, 6);
  assert.ok(world.transcript.some((l) => /level=error event=stuck run=poison claims=6 limit=5/.test(l)));
  assert.equal(world.model.calls("poison"), 1, "the decision was bought once and replayed after every death");
});

Deno.test.afterAll(async () => {
  await db.close();
});
