import assert from "node:assert/strict";
import { CRASH_POINTS } from "../runtime/crashpoints.ts";
import { runMatrix, summaryLine } from "./crash_matrix.ts";
import { measureBaseline } from "./fence.ts";
import { baselineOf, checkInvariants, checkPointOutcome } from "./invariants.ts";
import { multiCrash } from "./multi_crash.ts";
import { SimDb, SimWorld } from "./sim.ts";

// One PGlite for the file (a cold start costs seconds); every run in it has its own run id or schema.
const TOOL_POINTS = ["before_intent", "after_intent", "after_call", "after_confirm"];

Deno.test("the in-process crash matrix, its checks, and multi-crash runs", async (t) => {
  const db = await SimDb.open();
  try {
    let first = "";
    await t.step("passes every reachable case and reports done-step tool points as not reached", async () => {
      const result = await runMatrix(db);
      first = result.transcript;
      const failed = result.cases.filter((c) => c.verdict === "failed");
      assert.deepEqual(failed.map((c) => `${c.point}@${c.seq}: ${c.problems.join("; ")}`), []);
      assert.equal(result.baseline.steps, 4);
      assert.equal(result.cases.length, CRASH_POINTS.length * 4);
      const notReached = result.cases.filter((c) => c.verdict === "not reached");
      assert.deepEqual(notReached.map((c) => `${c.point}@${c.seq}`), TOOL_POINTS.map((p) => `${p}@3`));
      assert.equal(result.passed, 24);
      assert.equal(summaryLine(result), "crash-matrix: 24 passed, 0 failed, 4 not reached");
      const lost = result.cases.filter((c) => c.point === "after_decide_before_journal");
      assert.ok(lost.every((c) => c.llmCalls === result.baseline.llmCalls + 1));
      const afterCall = result.cases.filter((c) => c.point === "after_call" && c.verdict === "passed");
      assert.ok(afterCall.every((c) => c.remote === "already_done"));
    });
    await t.step("a second run writes a byte-identical transcript", async () => {
      const second = await runMatrix(db);
      assert.ok(first.length > 10_000, "the first transcript is missing");
      assert.equal(second.transcript, first);
    });
    await checksCatchBreakage(t, db);
    await t.step(
      "a run crashed at a different point on each of several restarts finishes intact",
      async () => {
        await multiCrashSeeds(db);
      },
    );
  } finally {
    await db.close();
  }
});

async function checksCatchBreakage(t: Deno.TestContext, db: SimDb): Promise<void> {
  const world = await SimWorld.open(db);
  const runId = "doctored";
  await world.spawn({ runId }).exit;
  const clean = await world.snapshot(runId);
  const baseline = baselineOf(clean);
  const opts = { runId, baseline, lostAnswers: 0 };
  assert.deepEqual(checkInvariants(clean, opts), []);
  const copy = () => structuredClone(clean);

  await t.step("the checks catch a second resource under one key", () => {
    const s = copy();
    s.created.push({ ...s.created[0], id: "i-9999999" });
    assert.match(checkInvariants(s, opts).join("\n"), /2 resources under doctored:0/);
  });
  await t.step("a gap in seq", () => {
    const s = copy();
    s.journal.splice(1, 1);
    assert.match(checkInvariants(s, opts).join("\n"), /gap or duplicate/);
  });
  await t.step("a confirmed row overwritten", () => {
    const s = copy();
    s.effects[0].result = "i-0000042";
    assert.match(checkInvariants(s, { ...opts, earlier: [clean] }).join("\n"), /was overwritten/);
  });
  await t.step("a model call nobody counted", () => {
    const s = copy();
    s.modelCalls += 1;
    assert.match(checkInvariants(s, opts).join("\n"), /mock model counted 5/);
  });
  await t.step("a step bought twice", () => {
    const s = copy();
    s.journal[0].llm_attempts = 2;
    s.modelCalls += 1;
    assert.match(checkInvariants(s, opts).join("\n"), /expected 4/);
  });
  await t.step("an after_call restart that created a second resource", () => {
    const atCrash = copy();
    atCrash.effects[0].status = "intent";
    const problems = checkPointOutcome("after_call", 0, atCrash, clean, { runId, baseline });
    assert.match(problems.join("\n"), /remote=created, expected already_done/);
  });
}

async function multiCrashSeeds(db: SimDb): Promise<void> {
  const baseline = await measureBaseline(db);
  const firedPoints = new Set<string>();
  let mostFired = 0;
  for (let seed = 1; seed <= 30; seed++) {
    const r = await multiCrash(db, baseline, { seed, crashes: 5 });
    assert.deepEqual(r.problems, [], `seed=${seed}\n${r.transcript.join("\n")}`);
    const fired = r.crashes.filter((c) => c.fired);
    for (const c of fired) firedPoints.add(c.point);
    mostFired = Math.max(mostFired, fired.length);
  }
  // Not vacuous: every point fired somewhere, and some run died several times in a row.
  assert.deepEqual([...firedPoints].sort(), [...CRASH_POINTS].sort());
  assert.ok(mostFired >= 4, `at most ${mostFired} crashes fired in one run`);
}
