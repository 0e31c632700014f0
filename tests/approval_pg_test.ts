/**
 * Approvals with real processes on PostgreSQL: a supervisor whose one worker
 * holds one run at a time; runs that wait for a person release that slot;
 * `deno task approve` lets one finish with one effect per key, and
 * `deno task deny` makes the model see the refusal.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { pgTest } from "./_pg.ts";
import { Proc, startSupervisor, until } from "./_procs.ts";

const TOOLS_TS = new URL("../examples/provision/tools.ts", import.meta.url).href;
const MOD_TS = new URL("../mod.ts", import.meta.url).href;

/** The demo agent, with create_server needing a person's approval. */
const AGENT_SOURCE = `
import { defineAgent } from "${MOD_TS}";
import { demoTools } from "${TOOLS_TS}";
export default defineAgent({
  name: "guarded",
  instructions: "Provision what the goal asks for.",
  defaultInput: "Provision a server, a database and a DNS record.",
  tools: (ctx) =>
    demoTools({ cloudUrl: ctx.env.CLOUD_URL! }).map((t) =>
      t.name === "create_server" ? { ...t, needsApproval: () => true } : t
    ),
});
`;

async function command(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
  const proc = new Proc("cli/main.ts", env, { args });
  const code = await proc.status;
  return { code, out: proc.lines.join("\n") };
}

/** The guarded agent in a temp folder, the mocks, and the settings a process needs for them. */
async function withGuarded(
  pg: { url: string },
  fn: (env: Record<string, string>, mocks: Awaited<ReturnType<typeof serveMocks>>) => Promise<void>,
): Promise<void> {
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "guarded-agent-" });
  try {
    await Deno.writeTextFile(`${dir}/agent.ts`, AGENT_SOURCE);
    await fn({
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      AGENT: `${dir}/agent.ts`,
    }, mocks);
  } finally {
    await mocks.close();
    await Deno.remove(dir, { recursive: true });
  }
}

pgTest(
  "approve and deny with real processes: waiting runs hold no worker, one effect per key",
  (pg) =>
    withGuarded(pg, async (env, mocks) => {
      const sup = startSupervisor({ ...env, DATABASE_URL: pg.url, WORKERS: "1", RUNS_PER_WORKER: "1" });
      try {
        for (const id of ["gate-a", "gate-b"]) {
          await pg.store.createRun({ runId: id, agent: "guarded", goal: "provision" }, new Date());
        }
        // One worker with one slot: both runs reach their approval only if the first one let the slot go.
        await until(async () => {
          const { runs } = await pg.store.listRuns({ status: "waiting", limit: 10 });
          return runs.length === 2;
        }, "both runs to wait for approval");
        assert.equal(mocks.cloud.created().length, 0, "nothing sent before a person said yes");

        const approve = await command(["approve", "gate-a:0", "--by", "alice"], env);
        assert.equal(approve.code, 0, approve.out);
        assert.match(approve.out, /^approved {2}key=gate-a:0 {2}tool=create_server .*by=alice/m);
        const deny = await command(["deny", "gate-b:0", "--reason", "not this week", "--by", "bob"], env);
        assert.equal(deny.code, 0, deny.out);
        await until(async () => {
          const { runs } = await pg.store.listRuns({ status: "done", limit: 10 });
          return runs.length === 2;
        }, "both runs to finish");

        const keys = mocks.cloud.created().map((c) => c.key).sort();
        assert.deepEqual(
          keys,
          ["gate-a:0", "gate-a:1", "gate-a:2", "gate-b:1", "gate-b:2"],
          "one effect per key",
        );
        const { effects } = await pg.store.loadHistory("gate-b");
        assert.equal(effects[0].status, "failed");
        assert.equal(effects[0].error, "denied by bob: not this week");
        assert.equal(effects[0].attempts, 0);
        const again = await command(["approve", "gate-a:0"], env);
        assert.equal(again.code, 1);
        assert.match(again.out, /NOT_PENDING/);
      } finally {
        await sup.close();
      }
    }),
);

pgTest(
  "approved calls survive kill -9 between the approval and the call, and between the call and its confirm",
  (pg) =>
    withGuarded(pg, async (env, mocks) => {
      for (const point of ["before_intent", "after_call"]) {
        const runId = `crash-${point.replace("_", "-")}`;
        const asked = await command(["run"], { ...env, RUN_ID: runId });
        assert.equal(asked.code, 4, asked.out); // waiting: a person must act
        assert.equal((await command(["approve", `${runId}:0`, "--by", "alice"], env)).code, 0);
        const killed = await command(["run"], { ...env, RUN_ID: runId, CRASH_AT: point, CRASH_SEQ: "0" });
        assert.equal(killed.code, 137, killed.out);
        const resumed = await command(["run"], { ...env, RUN_ID: runId });
        assert.equal(resumed.code, 0, resumed.out);
        const keys = mocks.cloud.created().map((c) => c.key).filter((k) => k.startsWith(`${runId}:`)).sort();
        assert.deepEqual(keys, [`${runId}:0`, `${runId}:1`, `${runId}:2`], `${point}: one effect per key`);
        const { effects } = await pg.store.loadHistory(runId);
        assert.equal(effects[0].remote, point === "after_call" ? "already_done" : "created");
      }
    }),
);

pgTest(
  "an approval given for other arguments is not used for these, with real processes",
  (pg) =>
    withGuarded(pg, async (env, mocks) => {
      // A person approved create_server for other arguments under this key (an earlier request, say).
      await pg.store.createRun({ runId: "other-args", agent: "guarded", goal: "provision" }, new Date());
      await pg.store.client.query(
        `insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at,
                              decided_by, decided_at, epoch)
       values ('other-args:0', 'other-args', 0, 'create_server', '{"name":"srv-9","spec":"large"}', 'not-these',
               'approved', now(), 'alice', now(), 0)`,
      );
      const run = await command(["run"], { ...env, RUN_ID: "other-args" });
      assert.equal(run.code, 4, run.out);
      assert.match(run.out, /event=waiting-for-approval run=other-args .*asked_before="for other arguments"/);
      const request = await pg.store.getApproval("other-args:0");
      assert.equal(request?.status, "pending");
      assert.notEqual(request?.args_hash, "not-these");
      assert.equal(mocks.cloud.created().length, 0, "nothing was sent on the strength of the other approval");
    }),
);
