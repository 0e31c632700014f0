/**
 * #24's tools that take minutes, with real processes on PostgreSQL: a job
 * tool whose remote (the mock cloud over HTTP) finishes after `JOB_TEST_MS`
 * (default 8000; `JOB_TEST_MS=30000` is the issue's 30 s). 100 runs wait on
 * it holding no worker slots while a worker with 10 slots drives other runs,
 * each call is re-sent under its own key until the job is done, a SIGKILL of
 * the worker while they wait loses nothing, and a call settled from outside
 * finishes its run.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { Proc, until } from "../harness/procs.ts";
import { connect } from "../runtime/client/client.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";

const JOB_MS = Number(Deno.env.get("JOB_TEST_MS") ?? 8000);
const REPORTS = 100;
const NOTES = 20;

const root = new URL("..", import.meta.url).pathname;

Deno.test({
  name: `100 runs wait on a ${JOB_MS} ms job holding no worker slot, survive a SIGKILL, and finish once each`,
  ignore: pgIgnore("jobs that take minutes"),
  fn: async () => {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "jobs-" });
    const agentPath = `${dir}/agents.ts`;
    await Deno.writeTextFile(
      agentPath,
      `import reports from "${root}examples/jobs/agent.ts";\nimport notes from "${root}examples/notes/agent.ts";\n` +
        `export default [reports, notes];\n`,
    );
    const env = {
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      AGENT: agentPath,
      NOTES_DIR: `${dir}/notes`,
      JOB_MS: String(JOB_MS),
      RUNS_PER_WORKER: "10",
      POLL_S: "0.2",
      // Short enough that the killed worker's runs are taken again soon, long beside a busy machine's pauses:
      // a lease lost mid-call would buy a decision twice, which this test counts.
      HEARTBEAT_S: "0.5",
      LEASE_S: "4",
    };
    const client = await connect({ databaseUrl: pg.url });
    const worker = () => new Proc("cli/main.ts", env, { args: ["worker"] });
    let w = worker();
    try {
      const now = new Date();
      for (let i = 0; i < REPORTS; i++) {
        assert.ok(
          await pg.store.leases.createRun({ runId: `rep-${i}`, agent: "reports", goal: `Report ${i}.` }, now),
        );
      }
      assert.ok(
        await pg.store.leases.createRun({ runId: "rep-settle", agent: "reports", goal: "By hand." }, now),
      );
      const statuses = async () => {
        const { runs } = await client.reads.list({ limit: 1000 });
        return new Map(runs.map((r) => [r.run_id, r.status]));
      };
      // Ten slots, 101 runs: each run's job is accepted and its run let go, so all of them get taken.
      await until(
        async () => {
          const s = await statuses();
          return [...s.values()].filter((x) => x === "waiting").length === REPORTS + 1;
        },
        "every report run to wait on its job",
        60_000,
      );
      const accepted = w.events("accepted").length;
      assert.equal(accepted, REPORTS + 1, "one accepted answer per call so far");

      // Meanwhile the worker's slots are free: other runs go through.
      for (let i = 0; i < NOTES; i++) {
        assert.ok(
          await pg.store.leases.createRun(
            { runId: `note-${i}`, agent: "notes", goal: `Note ${i}.` },
            new Date(),
          ),
        );
      }
      await until(
        async () => {
          const s = await statuses();
          return Array.from({ length: NOTES }, (_, i) => s.get(`note-${i}`)).every((x) => x === "done");
        },
        "the notes runs to finish while the reports wait",
        60_000,
      );
      const mid = await statuses();
      const doneReports = [...mid].filter(([id, st]) => id.startsWith("rep-") && st === "done").length;
      // Settled from outside: a webhook says the job is done.
      const settled = await client.operators.settleCall(
        "rep-settle:0",
        { result: { url: "https://reports/by-hand" } },
        {
          by: "webhook",
        },
      );
      assert.equal(settled.effect.status, "confirmed");

      // Killed while the calls wait: nothing is lost, a new worker takes them up when they are due.
      w.kill("SIGKILL");
      assert.equal(await w.status, 137);
      w = worker();
      await until(
        async () => {
          const s = await statuses();
          return [...s.values()].every((x) => x === "done");
        },
        "every run to finish",
        JOB_MS * 3 + 60_000,
      );

      const jobs = mocks.cloud.jobs();
      assert.equal(jobs.length, REPORTS + 1, "one job per call, never a second under a key");
      for (let i = 0; i < REPORTS; i++) {
        const { effects, journal } = await pg.store.reads.loadHistory(`rep-${i}`);
        assert.equal(effects.length, 1);
        const e = effects[0];
        assert.equal(e.status, "confirmed", `rep-${i}`);
        assert.equal(e.attempts, 1, "a poll is no attempt");
        assert.ok(e.polls >= 1, `rep-${i} was asked again under its key`);
        assert.equal((e.result as { status?: string }).status, "done");
        assert.deepEqual(journal.map((j) => j.llm_attempts), [1, 1], "each decision bought once");
      }
      const byHand = (await pg.store.reads.loadHistory("rep-settle")).effects[0];
      assert.deepEqual([byHand.status, byHand.remote, byHand.resolved_by], [
        "confirmed",
        "resolved",
        "webhook",
      ]);
      assert.deepEqual(byHand.result, { url: "https://reports/by-hand" });
      console.log(
        `jobs: ${REPORTS + 1} runs waited on a ${JOB_MS} ms job; ${accepted} accepted before the kill, ` +
          `${NOTES} other runs finished meanwhile (${doneReports} reports done by then), ` +
          `${mocks.cloud.requests().by_path["/v1/jobs"] ?? "?"} job requests, ${jobs.length} jobs`,
      );
    } finally {
      await w.close();
      await client.close();
      await mocks.close();
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
