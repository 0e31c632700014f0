import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { runPostgresMatrix } from "../harness/crash_matrix.ts";
import { baselineOf, checkInvariants } from "../harness/invariants.ts";
import { spawnWorker } from "../harness/pg.ts";
import { readSnapshot } from "../harness/sim.ts";
import { freshSchema, pgIgnore, TEST_DATABASE_URL } from "./_pg.ts";

Deno.test({
  name: "the crash matrix with real processes killed by SIGKILL against PostgreSQL",
  ignore: pgIgnore("crash matrix --postgres"),
  async fn() {
    const result = await runPostgresMatrix({ databaseUrl: TEST_DATABASE_URL!, concurrency: 4 });
    const failed = result.cases.filter((c) => c.verdict === "failed");
    assert.deepEqual(
      failed.map((c) => `${c.point}@${c.seq}: ${c.problems.join("; ")}\n${c.transcript.join("\n")}`),
      [],
    );
    assert.equal(result.passed, 24);
    assert.deepEqual(
      result.cases.filter((c) => c.verdict === "not reached").map((c) => `${c.point}@${c.seq}`),
      ["before_intent@3", "after_intent@3", "after_call@3", "after_confirm@3"],
    );
  },
});

Deno.test({
  name:
    "the crash matrix on a step of three calls, each call killed at every tool point, with real processes on PostgreSQL",
  ignore: pgIgnore("crash matrix --postgres --parallel 3"),
  async fn() {
    const result = await runPostgresMatrix({ databaseUrl: TEST_DATABASE_URL!, concurrency: 4, parallel: 3 });
    const failed = result.cases.filter((c) => c.verdict === "failed");
    assert.deepEqual(
      failed.map((c) => `${c.point}@${c.seq}: ${c.problems.join("; ")}\n${c.transcript.join("\n")}`),
      [],
    );
    assert.deepEqual(result.baseline, { llmCalls: 2, steps: 2 });
    assert.equal(result.passed, 18);
    assert.deepEqual(
      result.cases.filter((c) => c.verdict === "not reached").map((c) => `${c.point}@${c.seq}`),
      ["before_intent@3", "after_intent@3", "after_call@3", "after_confirm@3"],
    );
    // Each tool point fired at each of the three calls, in a process SIGKILLed with the step's others in flight.
    for (const point of ["before_intent", "after_intent", "after_call", "after_confirm"]) {
      assert.deepEqual(
        result.cases.filter((c) => c.point === point && c.verdict === "passed").map((c) => c.seq),
        [0, 1, 2],
      );
    }
  },
});

Deno.test({
  name:
    "a real worker stalled at after_decide is fenced on its first write after another process steals the run",
  ignore: pgIgnore("stall and steal with real processes"),
  async fn() {
    const pg = await freshSchema();
    const mocks = await serveMocks({ modelPort: 0, cloudPort: 0 });
    try {
      const env = (extra: Record<string, string> = {}) => ({
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        RUN_ID: "steal",
        ...extra,
      });
      const a = spawnWorker(env({ WORKER: "A", STALL_AT: "after_decide", STALL_MS: "12000" }));
      const stalled = await a.waitFor("event=stall point=after_decide seq=0");
      if (!stalled) assert.fail(`A never stalled:\n${(await a.result).lines.join("\n")}`);
      const b = await spawnWorker(env({ WORKER: "B" })).result;
      assert.equal(b.code, 0, b.lines.join("\n"));
      assert.ok(b.lines.some((l) => l.includes("claimed") && l.includes("epoch=2")), b.lines.join("\n"));
      const afterB = await readSnapshot(pg.store, mocks.model, mocks.cloud, "steal");
      const aResult = await a.result;
      const aLog = aResult.lines.join("\n");
      assert.equal(aResult.code, 3, aLog);
      const woke = aResult.lines.findIndex((l) => l.includes(" event=stall-woke "));
      assert.ok(woke >= 0, aLog);
      // Its next line is the refusal of its first write. The lease keeper may say first that the lease it could
      // not renew while stalled has ended (its timer and the write's answer race once the process wakes).
      const next = aResult.lines.slice(woke + 1).filter((l) => !/ event=lease-lost run=steal /.test(l));
      assert.match(
        next[0] ?? "",
        /level=warn event=fenced .*Write refused \(tool intent key=steal:0\)/,
        aLog,
      );
      const final = await readSnapshot(pg.store, mocks.model, mocks.cloud, "steal");
      assert.equal(JSON.stringify(final), JSON.stringify(afterB), "A wrote or sent something after waking");
      assert.equal(final.run?.owner, "B");
      // What a clean run costs, measured with a real process too.
      const clean = await spawnWorker(env({ RUN_ID: "steal-clean" })).result;
      assert.equal(clean.code, 0, clean.lines.join("\n"));
      const baseline = baselineOf(await readSnapshot(pg.store, mocks.model, mocks.cloud, "steal-clean"));
      assert.deepEqual(checkInvariants(final, { runId: "steal", baseline, lostAnswers: 0 }), []);
    } finally {
      await mocks.close();
      await pg.drop();
    }
  },
});
