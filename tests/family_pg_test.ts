/**
 * Agents that call agents with real processes on PostgreSQL: a worker hosting
 * `examples/team` (which hosts the two agents it calls, by itself) is killed
 * with SIGKILL while both children are being decided and the parent waits on
 * them; a new worker finishes the family with one child run per call, one
 * note per key, and every decision bought once but the answers the kill lost.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { Proc, until } from "../harness/procs.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";

const AGENT = new URL("../examples/team/agent.ts", import.meta.url).pathname;

Deno.test({
  name:
    "a worker killed by SIGKILL while a parent waits on its two children: a new worker finishes the family, one child per call",
  ignore: pgIgnore("agents that call agents"),
  fn: async () => {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "team-" });
    mocks.model.setScript({
      agent: "team",
      steps: [
        {
          calls: [{ tool: "researcher", args: { task: "alpha" } }, {
            tool: "writer",
            args: { task: "beta" },
          }],
        },
        { answer: "Both done." },
      ],
    });
    for (const agent of ["researcher", "writer"]) {
      mocks.model.setScript({
        agent,
        steps: [{ tool: "write_note", args: { title: agent, body: `${agent} notes` } }, {
          answer: `${agent} ok`,
        }],
      });
    }
    const env = {
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      AGENT,
      NOTES_DIR: `${dir}/notes`,
      POLL_S: "0.2",
      HEARTBEAT_S: "0.2",
      LEASE_S: "1",
    };
    const worker = () => new Proc("cli/main.ts", env, { args: ["worker"] });
    let w = worker();
    try {
      // Every model answer is slow: the kill lands while both children are being decided.
      mocks.model.setFaults({ delay_ms: 1_500 });
      assert.ok(
        await pg.store.leases.createRun({ runId: "t1", agent: "team", goal: "Plan the launch." }, new Date()),
      );
      const status = async (id: string) => (await pg.store.reads.getRun(id))?.status;
      await until(
        async () =>
          (await status("t1")) === "waiting" && (await status("t1.0")) === "running" &&
          (await status("t1.1")) === "running",
        "the parent to wait on its two children, both taken",
        30_000,
      );
      w.kill("SIGKILL");
      assert.equal(await w.status, 137);
      mocks.model.setFaults({ delay_ms: 0 });
      w = worker();
      await until(async () => (await status("t1")) === "done", "the family to finish", 60_000);

      const { runs } = await pg.store.operators.listRuns({ limit: 10 });
      assert.deepEqual(
        runs.map((r) => [r.run_id, r.status, r.parent_run_id, r.parent_key]).sort(),
        [["t1", "done", null, null], ["t1.0", "done", "t1", "t1:0"], ["t1.1", "done", "t1", "t1:1"]],
        w.lines.join("\n"),
      );
      const { effects } = await pg.store.reads.loadHistory("t1");
      assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.result]), [
        ["t1:0", "confirmed", "researcher ok"],
        ["t1:1", "confirmed", "writer ok"],
      ]);
      const notes = [...Deno.readDirSync(`${dir}/notes`)].map((e) => e.name).sort();
      assert.deepEqual(notes, ["t1.0_0.md", "t1.1_0.md"], "one note per key");
      // The parent's decisions were bought once each: the kill hit the children, and it slept through it.
      const parent = await pg.store.reads.loadHistory("t1");
      assert.deepEqual(parent.journal.map((j) => j.llm_attempts), [1, 1]);
      for (const child of ["t1.0", "t1.1"]) {
        const { journal } = await pg.store.reads.loadHistory(child);
        // At most one answer lost per child, to the kill.
        assert.ok(
          journal.reduce((n, j) => n + j.llm_attempts, 0) <= 3,
          `${child}: ${JSON.stringify(journal)}`,
        );
      }
    } finally {
      await w.close();
      await mocks.close();
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
