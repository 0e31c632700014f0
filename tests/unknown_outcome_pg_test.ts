/**
 * Tool calls whose outcome is unknown, with real processes killed by SIGKILL
 * on PostgreSQL and the mocks over real HTTP: the tool's `maxAttempts` holds
 * across restarts, and a keyless tool's `reconcile` settles the calls a kill
 * left open, where without it every run waits for a person and one bulk
 * resolve releases them all.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import type { PgSchema } from "./_pg.ts";
import { pgTest } from "./_pg.ts";
import { Proc, runCli, until } from "../harness/procs.ts";

const PAYMENTS_TS = new URL("../examples/payments/agent.ts", import.meta.url);
const MOD_TS = new URL("../mod.ts", import.meta.url).href;
const RUNS = 10;
const ids = Array.from({ length: RUNS }, (_, i) => `pay-${i}`);

/** The payments agent with its charge_card stripped of its reconcile. */
const UNCHECKED_AGENT = `
import { defineAgent } from "${MOD_TS}";
import { chargeCard } from "${PAYMENTS_TS.href}";
export default defineAgent({
  name: "payments",
  instructions: "Charge the card.",
  tools: (ctx) => [{ ...chargeCard({ cloudUrl: ctx.env.CLOUD_URL! }), reconcile: undefined }],
});
`;

/** One worker process hosting every run, with short leases. */
function worker(env: Record<string, string>): Proc {
  return new Proc("cli/main.ts", { HEARTBEAT_S: "0.2", LEASE_S: "1", POLL_S: "0.2", ...env }, {
    args: ["worker"],
  });
}

async function statuses(pg: PgSchema): Promise<string[]> {
  const { runs } = await pg.store.operators.listRuns({ search: "pay-", limit: 100 });
  return runs.map((r) => r.status);
}

/**
 * Ten runs of charge_card, each request held by the cloud (`faults`), and
 * the worker SIGKILLed once all ten are in flight. Returns the env used.
 */
async function killMidCall(
  pg: PgSchema,
  mocks: Awaited<ReturnType<typeof serveMocks>>,
  agent: string,
  faults: { hang_next?: number; hang_after_act_next?: number },
): Promise<Record<string, string>> {
  const env = {
    DATABASE_URL: pg.url,
    MODEL_URL: mocks.modelUrl,
    MODEL: "mock-planner",
    CLOUD_URL: mocks.cloudUrl,
    AGENT: agent,
  };
  mocks.cloud.setFaults({ path: "/v1/charges", ...faults });
  for (const runId of ids) {
    await pg.store.leases.createRun({ runId, agent: "payments", goal: "Charge 12.99." }, new Date());
  }
  const first = worker(env);
  try {
    await until(
      () => Promise.resolve(mocks.cloud.requests().by_path["/v1/charges"] === RUNS),
      "all ten charges in flight",
    );
    first.kill("SIGKILL");
    assert.equal(await first.status, 137);
  } finally {
    await first.close();
  }
  mocks.cloud.clearFaults();
  mocks.cloud.releaseHung();
  return env;
}

pgTest(
  "ten runs killed mid-call of a keyless tool with reconcile end done: no resolve, no second charge",
  async (pg) => {
    const mocks = await serveMocks();
    try {
      // Five requests never reach the remote's books; five are charged and never answered.
      const env = await killMidCall(pg, mocks, PAYMENTS_TS.pathname, {
        hang_next: 5,
        hang_after_act_next: 5,
      });
      const charged = ids.filter((id) => mocks.cloud.charges(`${id}:0`).length === 1);
      assert.equal(charged.length, 5);
      const second = worker(env);
      try {
        await until(async () => (await statuses(pg)).every((s) => s === "done"), "all ten runs done");
      } finally {
        await second.close();
      }
      for (const id of ids) assert.equal(mocks.cloud.charges(`${id}:0`).length, 1, `one charge for ${id}`);
      assert.equal(
        mocks.cloud.requests().by_path["/v1/charges"],
        RUNS + 5,
        "only the uncharged were sent again",
      );
      const rows = await Promise.all(
        ids.map(async (id) => (await pg.store.reads.loadHistory(id)).effects[0]),
      );
      for (const e of rows) {
        assert.equal(e.resolved_by, null, "nobody resolved anything");
        assert.equal(e.remote, charged.includes(e.run_id) ? "reconciled" : "created");
        assert.equal(e.result, mocks.cloud.charges(e.idempotency_key)[0].id);
      }
      assert.equal(second.events("flagged").length, 0);
      assert.deepEqual(
        second.events("reconcile-answered").map((l) => l.answer).sort(),
        [...Array(5).fill("happened"), ...Array(5).fill("not_happened")],
      );
    } finally {
      await mocks.close();
    }
  },
);

pgTest(
  "without reconcile the ten block, and one bulk resolve after one check of the remote releases them all",
  async (pg) => {
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "unchecked-agent-" });
    try {
      await Deno.writeTextFile(`${dir}/agent.ts`, UNCHECKED_AGENT);
      // None of the ten reached the remote's books before the kill.
      const env = await killMidCall(pg, mocks, `${dir}/agent.ts`, { hang_next: RUNS });
      const second = worker(env);
      try {
        await until(async () => (await statuses(pg)).every((s) => s === "blocked"), "all ten runs blocked");
        assert.equal(mocks.cloud.charges("pay-0:0").length, 0);

        const dry = await runCli(["resolve", "--tool", "charge_card", "--retry", "--dry-run"], env);
        assert.equal(dry.code, 0, dry.out);
        assert.match(
          dry.out,
          /^dry-run {2}would resolve 10 flagged call\(s\) of blocked runs {2}tool=charge_card/m,
        );
        for (const id of ids) assert.match(dry.out, new RegExp(`^ {2}${id}:0 {2}tool=charge_card`, "m"));
        assert.deepEqual(await statuses(pg), Array(RUNS).fill("blocked"), "a dry run changes nothing");

        const wrong = await runCli(["resolve", "--tool", "charge_card", "--retry", "--expect", "9"], env);
        assert.equal(wrong.code, 1, wrong.out);
        assert.match(
          wrong.out,
          /COUNT_CHANGED: 10 flagged call\(s\) .* not the 9 confirmed: nothing was resolved/,
        );

        const bulk = await runCli([
          "resolve",
          "--tool",
          "charge_card",
          "--retry",
          "--expect",
          "10",
          "--by",
          "ops",
        ], env);
        assert.equal(bulk.code, 0, bulk.out);
        assert.match(
          bulk.out,
          /^resolved 10 flagged call\(s\) {2}tool=charge_card {2}action=retry {2}runs_unblocked=10$/m,
        );
        await until(async () => (await statuses(pg)).every((s) => s === "done"), "all ten runs done");
      } finally {
        await second.close();
      }
      for (const id of ids) {
        assert.equal(mocks.cloud.charges(`${id}:0`).length, 1, `one charge for ${id}`);
        const e = (await pg.store.reads.loadHistory(id)).effects[0];
        assert.deepEqual([e.status, e.remote, e.attempts, e.resolved_by], ["confirmed", "created", 2, "ops"]);
      }
    } finally {
      await mocks.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

pgTest(
  "maxAttempts holds across real restarts: seven kills after the call send it four times; reopen sends once more",
  async (pg) => {
    const mocks = await serveMocks();
    try {
      const env = {
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        RUN_ID: "ma1",
      };
      const codes: number[] = [];
      for (let i = 0; i < 7; i++) {
        codes.push((await runCli(["run"], { ...env, CRASH_AT: "after_call", CRASH_SEQ: "0" })).code);
      }
      assert.deepEqual(codes, [137, 137, 137, 137, 1, 1, 1]);
      assert.equal(mocks.cloud.requests().by_key["ma1:0"], 4, "the tool's limit, across seven processes");
      const run = await pg.store.reads.getRun("ma1");
      assert.match(run?.error ?? "", /^TOOL_GAVE_UP: Tool call ma1:0 \(create_server\) was sent 4 times/);
      assert.equal((await pg.store.reads.loadHistory("ma1")).effects[0].status, "intent");

      assert.equal((await runCli(["reopen", "ma1"], env)).code, 0);
      const resumed = await runCli(["run"], env);
      assert.equal(resumed.code, 0, resumed.out);
      assert.equal(mocks.cloud.requests().by_key["ma1:0"], 5);
      const e = (await pg.store.reads.loadHistory("ma1")).effects[0];
      assert.deepEqual([e.status, e.remote], ["confirmed", "already_done"]);
      assert.equal(mocks.cloud.created("ma1:0").length, 1);
    } finally {
      await mocks.close();
    }
  },
);
