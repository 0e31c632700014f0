/**
 * Regression tests for what an adversarial pass broke (issue #9), in-process
 * on the simulator: each is named after the bug it pins.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { demoTools } from "../examples/provision/tools.ts";
import { settle } from "../runtime/clock.ts";
import { defineTool, type Tool } from "../runtime/tools.ts";
import { SimDb, SimWorld } from "./sim.ts";

const db = await SimDb.open();

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

Deno.test("the model request limit holds across restarts: a worker killed between attempts does not reset it", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  world.model.setFaults({ fail_next: 1_000, fail_status: 503 });
  // Each incarnation is killed after its second request: without a durable limit
  // every restart would buy up to four more.
  let proc = world.spawn({ runId: "limit" });
  for (let restart = 0; restart < 5; restart++) {
    const before = world.model.calls("limit");
    await advanceUntil(
      world,
      async () =>
        world.model.calls("limit") >= before + 2 || proc.dead ||
        (await world.snapshot("limit")).run?.status === "failed",
      "two more requests",
    );
    if ((await world.snapshot("limit")).run?.status === "failed") break;
    await proc.kill();
    proc = world.spawn({ runId: "limit" });
  }
  await advanceUntil(
    world,
    async () => (await world.snapshot("limit")).run?.status === "failed",
    "the run to fail",
  );
  await proc.exit;
  const snap = await world.snapshot("limit");
  assert.equal(snap.journal[0].llm_attempts, 4, "the journal counts four requests in all");
  assert.equal(world.model.calls("limit"), 4, "the model was paid four times, whatever the restarts");
  assert.match(snap.run?.error ?? "", /failed 4 requests for step 0 \(the limit, counted across restarts\)/);
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
