import assert from "node:assert/strict";
import { CRASH_POINTS } from "../runtime/base/crashpoints.ts";
import { matrixPlanner, type MatrixResult, runMatrix, summaryLine } from "./crash_matrix.ts";
import { measureBaseline } from "./fence.ts";
import { baselineOf, checkInvariants, checkPointOutcome, ownerSeq } from "./invariants.ts";
import { multiCrash } from "./multi_crash.ts";
import { SimDb, SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

// One PGlite for the file (a cold start costs seconds); every run in it has its own run id or schema.
const TOOL_POINTS = ["before_intent", "after_intent", "after_call", "after_confirm"];

Deno.test("the in-process crash matrix, its checks, and multi-crash runs", async (t) => {
  const db = await openTestSim();
  try {
    let first = "";
    let table: string[] = [];
    const rows = (r: MatrixResult) =>
      r.cases.map((c) => `${c.point}@${c.seq} ${c.verdict} ${c.llmCalls} ${c.remote}`);
    await t.step("passes every reachable case and reports done-step tool points as not reached", async () => {
      const result = await runMatrix(db);
      first = result.transcript;
      table = rows(result);
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
    await t.step(
      "with the demo's model given as an AI SDK provider (openai-compatible, the same mock): every case as with the built-in planner",
      async () => {
        const result = await runMatrix(db, { model: "ai-sdk" });
        assert.equal(summaryLine(result), "crash-matrix: 24 passed, 0 failed, 4 not reached");
        assert.deepEqual(rows(result), table);
        // Not the built-in planner under another name: the requests are the AI SDK provider's own.
        const world = await SimWorld.open(db);
        const agents: string[] = [];
        const make = matrixPlanner("ai-sdk")!;
        const exit = await world.spawn({
          runId: "cm-ua",
          planner: (fetch) =>
            make((req) => {
              agents.push(req.headers.get("user-agent") ?? "");
              return fetch(req);
            }),
        }).exit;
        assert.equal(exit.kind === "exited" && exit.outcome.status, "done");
        assert.equal(agents.length, 4);
        assert.ok(agents.every((a) => a.includes("ai-sdk-openai-compatible/")), agents.join("\n"));
      },
    );
    let three = "";
    await t.step(
      "a step of three calls: every tool point at every call, the model points at seq 0 and the done-step",
      async () => {
        const result = await runMatrix(db, { parallel: 3 });
        three = result.transcript;
        const failed = result.cases.filter((c) => c.verdict === "failed");
        assert.deepEqual(failed.map((c) => `${c.point}@${c.seq}: ${c.problems.join("; ")}`), []);
        // One decision of three calls at seq 0, then done at seq 3: two model calls in a clean run.
        assert.deepEqual(result.baseline, { llmCalls: 2, steps: 2 });
        const cells = (verdict: string) =>
          result.cases.filter((c) => c.verdict === verdict).map((c) => `${c.point}@${c.seq}`);
        assert.deepEqual(cells("not reached"), TOOL_POINTS.map((p) => `${p}@3`));
        assert.deepEqual(cells("passed"), [
          ...["before_decide", "after_decide_before_journal", "after_decide"].flatMap((
            p,
          ) => [`${p}@0`, `${p}@3`]),
          ...TOOL_POINTS.flatMap((p) => [0, 1, 2].map((seq) => `${p}@${seq}`)),
        ]);
        assert.equal(summaryLine(result), "crash-matrix: 18 passed, 0 failed, 4 not reached");
        const lost = result.cases.filter((c) => c.point === "after_decide_before_journal");
        assert.ok(lost.every((c) => c.llmCalls === 3));
        const afterCall = result.cases.filter((c) => c.point === "after_call" && c.verdict === "passed");
        assert.deepEqual(afterCall.map((c) => c.remote), ["already_done", "already_done", "already_done"]);
        // Not vacuous: some kill landed with the step's calls at different points (one confirmed, another
        // acted on but unrecorded, say), so the others were in flight when the process died.
        const mixed = result.cases.filter((c) =>
          new Set(c.atCrash.split(" ").map((x) => x.split("=")[1])).size > 1
        );
        assert.ok(mixed.length >= 3, result.cases.map((c) => `${c.point}@${c.seq} ${c.atCrash}`).join("\n"));
        assert.ok(
          result.cases.some((c) => /=confirmed\+acted/.test(c.atCrash) && /=intent\+acted/.test(c.atCrash)),
          "no kill landed between one call's confirm and another's",
        );
      },
    );
    await t.step("the three-call matrix writes a byte-identical transcript twice", async () => {
      const second = await runMatrix(db, { parallel: 3 });
      assert.ok(three.length > 10_000, "the first transcript is missing");
      assert.equal(second.transcript, three);
    });
    await checksCatchBreakage(t, db);
    await checksOfThreeCalls(t, db);
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

async function checksOfThreeCalls(t: Deno.TestContext, db: SimDb): Promise<void> {
  const world = await SimWorld.open(db, { modelParallel: 3 });
  const runId = "doctored3";
  await world.spawn({ runId }).exit;
  const clean = await world.snapshot(runId);
  const baseline = baselineOf(clean);
  const opts = { runId, baseline };
  assert.deepEqual(checkInvariants(clean, { ...opts, lostAnswers: 0 }), []);
  assert.deepEqual(clean.journal.map((j) => j.seq), [0, 3]);

  await t.step("a call's seq belongs to the decision with the largest seq at or before it", () => {
    assert.deepEqual([0, 1, 2, 3, 4].map((s) => ownerSeq(clean.journal, s)), [0, 0, 0, 3, 3]);
    assert.equal(ownerSeq([], 5), 5);
  });
  await t.step("an after_call check of the third call reads that call's row and key", () => {
    const atCrash = structuredClone(clean);
    atCrash.effects[2].status = "intent";
    atCrash.created = atCrash.created.filter((r) => r.key !== `${runId}:2`);
    const problems = checkPointOutcome("after_call", 2, atCrash, clean, opts).join("\n");
    assert.match(problems, /the remote had not acted under doctored3:2/);
    assert.match(problems, /doctored3:2 ended remote=created, expected already_done/);
    assert.doesNotMatch(problems, /doctored3:[01]/);
  });
  await t.step("a next decision asked twice", () => {
    const atCrash = structuredClone(clean);
    atCrash.effects[1].status = "intent";
    const final = structuredClone(clean);
    final.journal[1].llm_attempts = 2;
    assert.match(
      checkPointOutcome("after_intent", 1, atCrash, final, opts).join("\n"),
      /the decision after step 0 \(seq=3\) cost 2 model calls, expected 1/,
    );
  });
  await t.step("a call of the step sent twice after a model-side crash", () => {
    const atCrash = structuredClone(clean);
    atCrash.effects = [];
    atCrash.created = [];
    atCrash.modelCalls = 1;
    const final = structuredClone(clean);
    final.requestsByKey[`${runId}:2`] = 2;
    assert.match(
      checkPointOutcome("after_decide", 0, atCrash, final, opts).join("\n"),
      /tool call doctored3:2 ended remote=created after 1 attempt\(s\) and 2 request\(s\)/,
    );
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
