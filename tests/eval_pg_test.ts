/**
 * An evaluation with real processes on PostgreSQL, the mock model and the
 * mock cloud over HTTP: 50 recorded runs of the demo, each forked at step 0
 * onto two variants (two scripted models of the mock: `mock-a` decides what
 * the demo decided, `mock-b` something else), every case run a dry run,
 * scored by two scorers. A `deno task eval` SIGKILLed half-way and started
 * again prints the same table as one that ran through; the cloud sees no
 * request from any case run; the spend stays within the budget.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { DONE_MESSAGE, type ScriptStep } from "../mock/model.ts";
import { Client } from "../runtime/client/client.ts";
import demo from "../examples/provision/agent.ts";
import { pgTest } from "./_pg.ts";
import { Proc, runCli, until } from "../harness/procs.ts";
import { MODEL_B_STEPS } from "./_fork.ts";

const RECORDED = 50;

pgTest(
  "an eval of two variants over 50 recorded runs: killed half-way, resumed, the same table",
  async (pg) => {
    const mocks = await serveMocks();
    const dataDir = await Deno.makeTempDir({ prefix: "eval-" });
    const env = {
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
    };
    const client = new Client(pg.store);
    try {
      const worker = await client.startWorker([demo], {
        pollMs: 20,
        context: { env, dataDir, embedded: false },
      });
      try {
        for (let i = 1; i <= RECORDED; i++) {
          await client.start(demo, {
            runId: `rec-${String(i).padStart(2, "0")}`,
          });
        }
        for (let i = 1; i <= RECORDED; i++) {
          const done = await client.wait(`rec-${String(i).padStart(2, "0")}`, {
            timeoutMs: 60_000,
            pollMs: 20,
          });
          assert.equal(done.status, "done");
        }
      } finally {
        await worker.stop();
      }
      // mock-a decides what the recorded runs decided (their calls are answered from their records).
      const { journal } = await pg.store.reads.loadHistory("rec-01");
      const stepsA: ScriptStep[] = journal.flatMap((j) =>
        j.decision && "tool" in j.decision
          ? [{ tool: j.decision.tool, args: j.decision.args as Record<string, unknown> }]
          : []
      );
      mocks.model.setModelScript("mock-a", [...stepsA, { answer: DONE_MESSAGE }]);
      mocks.model.setModelScript("mock-b", MODEL_B_STEPS);
      const cloudBefore = mocks.cloud.requests();
      assert.equal(cloudBefore.total, 3 * RECORDED);

      const budget = 4_000_000;
      const args = (id: string) => [
        "eval",
        "--id",
        id,
        "--recorded",
        "provision",
        "--variant",
        "a=mock-a",
        "--variant",
        "b=mock-b",
        "--scorer",
        "exact",
        "--scorer",
        "contains=Provisioned",
        "--budget-tokens",
        String(budget),
      ];
      const killed = new Proc("cli/main.ts", env, { args: args("e1") });
      await until(
        async () => {
          const { runs } = await pg.store.operators.listRuns({ status: "done", search: "e1-", limit: 200 });
          return runs.length >= RECORDED;
        },
        "half of the case runs to be done",
        120_000,
        50,
      );
      killed.kill("SIGKILL");
      assert.equal(await killed.status, 137);
      const made = (await pg.store.operators.listRuns({ search: "e1-", limit: 200 })).total;
      assert.ok(made <= 2 * RECORDED, `${made} case runs made before the kill`);

      const resumed = await runCli(args("e1"), env);
      assert.equal(resumed.code, 0, resumed.out);
      const through = await runCli(args("e2"), env);
      assert.equal(through.code, 0, through.out);
      const table = (out: string, id: string) =>
        out.split("\n").filter((l) => !/^(time|spend):/.test(l) && !/^ts=/.test(l)).join("\n").replaceAll(
          `${id}-`,
          "ID-",
        )
          .replace(`eval ${id} `, "eval ID ");
      assert.equal(table(resumed.out, "e1"), table(through.out, "e2"));
      console.log(resumed.out);

      const lines = resumed.out.split("\n");
      const row = (v: string) => lines.find((l) => l.startsWith(`${v} `))?.split(/\s+/);
      // VARIANT CASES PASSED PASS_RATE EXACT CONTAINS TOKENS COST STEPS
      assert.deepEqual(row("a")?.slice(0, 6), ["a", "50", "50", "100%", "50", "50"]);
      assert.deepEqual(row("b")?.slice(0, 6), ["b", "50", "0", "0%", "0", "50"]);
      assert.equal(row("a")?.[8], String(4 * RECORDED), "four decisions per case");
      assert.deepEqual(mocks.cloud.requests(), cloudBefore, "no case run sent anything to the cloud");
      const spent = Number(/^spend: tokens=(\d+) of (\d+) budgeted/m.exec(resumed.out)?.[1]);
      assert.ok(spent > 0 && spent <= budget, `spent ${spent} of ${budget}`);
      // Each of the 100 case runs made once: the resumed evaluation made none twice.
      assert.equal((await pg.store.operators.listRuns({ search: "e1-", limit: 200 })).total, 2 * RECORDED);
    } finally {
      await mocks.close();
      await Deno.remove(dataDir, { recursive: true });
    }
  },
);
