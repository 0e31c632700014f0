/**
 * Budgets that survive crashes: with a tight token ceiling, no crash point on
 * any step, and no run of lost answers, makes the model bill more than the
 * ceiling plus one request. The reservation is visible in the journal while a
 * request is out, and settled at its confirm.
 */

import assert from "node:assert/strict";
import demoAgent from "../examples/provision/agent.ts";
import { defineAgent } from "../runtime/agent.ts";
import { CRASH_POINTS } from "../runtime/crashpoints.ts";
import { seededRandom, SimDb, SimWorld } from "./sim.ts";

const db = await SimDb.open();

function budgeted(tokens: number) {
  return defineAgent({
    name: "provision",
    instructions: demoAgent.instructions,
    tools: demoAgent.tools,
    defaultInput: demoAgent.defaultInput as string,
    budget: { tokens, maxOutputTokens: 200 },
  });
}

/** Runs `runId` to its end, restarting after each crash (bounded). */
async function runToEnd(world: SimWorld, runId: string, plans: { crashAt?: string; crashSeq?: number }[]) {
  for (let i = 0; i < 12; i++) {
    const plan = plans[i] ?? {};
    const exit = await world.spawn({ runId, plan: plan as never }).exit;
    if (exit.kind === "exited") return exit.outcome;
    if (exit.kind === "error") throw new Error(exit.error);
  }
  throw new Error(`${runId} never ended`);
}

Deno.test("a clean run's reservations are all settled, and the spend is what the model billed", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(100_000) });
  const outcome = await runToEnd(world, "b-clean", []);
  assert.equal(outcome.status, "done");
  const snap = await world.snapshot("b-clean");
  assert.ok(snap.journal.every((j) => j.reserved_tokens === 0), "every reservation settled at its confirm");
  const spent = snap.journal.reduce(
    (n, j) => n + Number((j.usage as { total_tokens: number }).total_tokens),
    0,
  );
  assert.equal(spent, world.model.tokens("b-clean"), "the spend is what the model billed");
  assert.deepEqual(snap.run?.budget, { tokens: 100_000, maxOutputTokens: 200 });
});

Deno.test("with a tight token ceiling, no crash point on any step bills more than the ceiling plus one request", async (t) => {
  // A clean run's bill, to set the ceiling at about two thirds of it.
  await db.freshSchema();
  const probe = await SimWorld.open(db);
  await runToEnd(probe, "b-probe", []);
  const clean = probe.model.tokens("b-probe");
  const ceiling = Math.floor(clean * 0.66);
  for (const point of CRASH_POINTS) {
    for (const seq of [0, 1, 2]) {
      await t.step(`${point} seq=${seq}`, async () => {
        await db.freshSchema();
        const world = await SimWorld.open(db, { agent: budgeted(ceiling) });
        const runId = `b-${point}-${seq}`;
        const outcome = await runToEnd(world, runId, [{ crashAt: point, crashSeq: seq }]);
        const billed = world.model.tokens(runId);
        const calls = Math.max(1, world.model.calls(runId));
        const oneRequest = Math.ceil(billed / calls) * 2; // generous bound on a single request's bill
        assert.ok(
          billed <= ceiling + oneRequest,
          `${runId}: billed ${billed} > ceiling ${ceiling} + ${oneRequest}`,
        );
        const snap = await world.snapshot(runId);
        if (outcome.status === "failed") {
          assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED: budget: \d+ tokens spent or reserved/);
        } else {
          assert.equal(outcome.status, "done");
        }
        // What the database counts (reported usage plus standing reservations) never passes the ceiling.
        const counted = snap.journal.reduce(
          (n, j) =>
            n + Number((j.usage as { total_tokens?: number } | null)?.total_tokens ?? 0) + j.reserved_tokens,
          0,
        );
        assert.ok(counted <= ceiling + oneRequest, `${runId}: counted ${counted}`);
      });
    }
  }
});

Deno.test("answers lost again and again keep their reservations: the run stops at the ceiling, never past it", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(2_000) });
  const plans = Array.from({ length: 10 }, () => ({ crashAt: "after_decide_before_journal", crashSeq: 0 }));
  const outcome = await runToEnd(world, "b-lost", plans);
  assert.equal(outcome.status, "failed");
  const snap = await world.snapshot("b-lost");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/);
  assert.equal(snap.journal[0].status, "intent", "no answer was ever recorded");
  assert.ok(snap.journal[0].reserved_tokens > 0, "the lost answers' reservations stand");
  assert.ok(snap.journal[0].reserved_tokens <= 2_000, "the reservations never passed the ceiling");
  assert.ok(world.model.tokens("b-lost") <= 2_000, `billed ${world.model.tokens("b-lost")}`);
});

Deno.test("with a tight token ceiling, seeded multi-crash schedules never bill past the ceiling plus one request", async () => {
  await db.freshSchema();
  const probe = await SimWorld.open(db);
  await runToEnd(probe, "b-probe-multi", []);
  const ceiling = Math.floor(probe.model.tokens("b-probe-multi") * 0.7);
  let stopped = 0;
  for (let seed = 1; seed <= 30; seed++) {
    await db.freshSchema();
    const random = seededRandom(seed);
    const world = await SimWorld.open(db, { agent: budgeted(ceiling), seed });
    const runId = `b-multi-${seed}`;
    // Four crashes at distinct points, each on a step drawn from the seed, then restarts to the end.
    const points = [...CRASH_POINTS].sort(() => random() - 0.5).slice(0, 4);
    const plans = points.map((point) => ({ crashAt: point, crashSeq: Math.floor(random() * 4) }));
    const outcome = await runToEnd(world, runId, plans);
    const billed = world.model.tokens(runId);
    const oneRequest = Math.ceil(billed / Math.max(1, world.model.calls(runId))) * 2;
    assert.ok(billed <= ceiling + oneRequest, `seed=${seed}: billed ${billed} > ${ceiling} + ${oneRequest}`);
    const snap = await world.snapshot(runId);
    if (outcome.status === "failed") {
      stopped++;
      assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/, `seed=${seed}`);
    } else assert.equal(outcome.status, "done", `seed=${seed}`);
    const keys = snap.created.map((c) => c.key);
    assert.equal(new Set(keys).size, keys.length, `seed=${seed}: one effect per key`);
  }
  assert.ok(stopped > 0, "the ceiling stopped some runs (it is tight)");
});

Deno.test.afterAll(async () => {
  await db.close();
});
