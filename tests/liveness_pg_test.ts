/**
 * Liveness with real processes on PostgreSQL: a run that fails in a worker
 * does not get the worker killed, and a single `run` says what happened; a
 * stolen run's lease is never renewed by the worker that lost it; a worker
 * whose supervisor died by SIGKILL exits on its own.
 */

import assert from "node:assert/strict";
import { claim } from "../harness/direct_writes.ts";
import { freshSchema, pgIgnore, type PgSchema } from "./_pg.ts";
import { alive, parseLine, Proc, runCliIsolated, startSupervisor, until } from "../harness/procs.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

/**
 * An agent module: its own model decides to call `work` once (arguments
 * saying whether the run's id starts with `poison`), then is done. `work`
 * posts to WORK_URL under the idempotency key; for a poison run its approval
 * rule throws, an error the runtime does not classify.
 */
const AGENT_SOURCE = `
import { z } from "npm:zod@4.6.7";
import { defineAgent, defineTool } from "${MOD_TS}";

export default defineAgent({
  name: "mixed",
  model: {
    describe: "a script",
    decide: (req) => Promise.resolve(req.seq === 0
      ? { kind: "tool_calls", calls: [{ name: "work", args: { poison: req.runId.startsWith("poison") } }] }
      : { kind: "done", text: "worked" }),
  },
  tools: (ctx) => [defineTool({
    name: "work",
    description: "Works for a while.",
    args: z.strictObject({ poison: z.boolean() }),
    approval: (args) => {
      if (args.poison) throw new TypeError("the approval rule broke");
      return false;
    },
    run: async (_args, call) => {
      const res = await fetch(ctx.env.WORK_URL!, {
        method: "POST",
        headers: { "idempotency-key": call.idempotencyKey },
        signal: call.signal,
      });
      return { result: await res.text() };
    },
  })],
});
`;

/**
 * The remote `work` calls: answers after `delayMs` (or when the caller gives
 * up, so no request outlives the test), counting the requests under each key.
 */
function workServer(delayMs: number) {
  const requests: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    requests.push(req.headers.get("idempotency-key") ?? "");
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, delayMs);
      req.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      }, { once: true });
    });
    return new Response("worked");
  });
  const sends = (key: string) => requests.filter((k) => k === key).length;
  return { server, requests, sends, url: `http://127.0.0.1:${server.addr.port}/work` };
}

interface World {
  pg: PgSchema;
  agentPath: string;
  work: ReturnType<typeof workServer>;
}

async function withWorld(delayMs: number, fn: (w: World) => Promise<void>): Promise<void> {
  const pg = await freshSchema();
  const dir = await Deno.makeTempDir({ prefix: "liveness-agent-" });
  const work = workServer(delayMs);
  try {
    const agentPath = `${dir}/mixed_agent.ts`;
    await Deno.writeTextFile(agentPath, AGENT_SOURCE);
    await fn({ pg, agentPath, work });
  } finally {
    await work.server.shutdown();
    await Deno.remove(dir, { recursive: true });
    await pg.drop();
  }
}

Deno.test({
  name:
    "a run that throws in a supervised worker does not get the worker killed: its other runs are sent once",
  ignore: pgIgnore("poison run under the supervisor"),
  fn: () =>
    // Each call takes longer than the lease: under the old rule (a stale run lease means a frozen worker) the
    // poison run's lapsed lease got the worker killed mid-call, and every healthy call was sent again.
    withWorld(5_000, async ({ pg, agentPath, work }) => {
      const fine = Array.from({ length: 8 }, (_, i) => `fine-${i}`);
      for (const id of ["poison-1", ...fine]) {
        assert.ok(await pg.store.leases.createRun({ runId: id, agent: "mixed", goal: "work" }, new Date()));
      }
      let sup: Proc | undefined;
      try {
        sup = startSupervisor({
          DATABASE_URL: pg.url,
          AGENT: agentPath,
          WORK_URL: work.url,
          WORKERS: "1",
          LEASE_S: "3",
          HEARTBEAT_S: "0.3",
        });
        const finished = async () => {
          const runs = (await pg.store.operators.listRuns({ limit: 100 })).runs;
          return runs.filter((r) => r.status === "done").length === fine.length &&
            runs.some((r) => r.run_id === "poison-1" && r.status === "failed");
        };
        await until(finished, "the healthy runs to finish and the poison run to fail", 120_000);
        sup.kill("SIGTERM");
        assert.equal(await sup.status, 0, sup.lines.join("\n"));

        assert.deepEqual(sup.events("replacing"), [], "a worker was killed as frozen");
        assert.equal(sup.events("worker-started").length, 1, sup.lines.join("\n"));
        // Every healthy call went out once: 8 sends for 8 calls.
        assert.deepEqual(fine.map((id) => work.sends(`${id}:0`)), fine.map(() => 1), work.requests.join(","));
        assert.equal(work.requests.length, fine.length, "the poison run's call never went out");
        const errors = sup.events("worker-error").filter((e) => e.run === "poison-1");
        assert.equal(errors.length, 6, sup.lines.join("\n"));
        assert.ok(
          errors.every((e) => e.lease === "released" && e.error === "TypeError: the approval rule broke"),
        );
        const poison = await pg.store.reads.getRun("poison-1");
        assert.match(
          poison?.error ?? "",
          /^stuck: 5 workers in a row .*The last of them stopped at: TypeError: the approval rule broke\./,
        );
      } finally {
        await sup?.close();
      }
    }),
});

Deno.test({
  name:
    "a single run that throws an unclassified error exits 8, its run intact and released, not blamed on the database",
  ignore: pgIgnore("poison run in a single worker"),
  fn: () =>
    withWorld(0, async ({ pg, agentPath, work }) => {
      const { code, out } = await runCliIsolated(["run", "--agent", agentPath], {
        DATABASE_URL: pg.url,
        WORK_URL: work.url,
        RUN_ID: "poison-cli",
        GOAL: "work",
      });
      assert.equal(code, 8, out);
      const line = out.split("\n").map(parseLine).find((l) => l?.event === "worker-error");
      assert.equal(line?.run, "poison-cli", out);
      assert.equal(line?.error, "TypeError: the approval rule broke");
      assert.equal(line?.lease, "released");
      assert.match(line?.note ?? "", /^the run is intact and released: fix the cause, then start it again/);
      assert.ok(!out.includes("infrastructure-error") && !out.includes("database is back"), out);
      const run = await pg.store.reads.getRun("poison-cli");
      assert.equal(run?.status, "running");
      assert.equal(run?.heartbeat_at, null, "takeable at once");
      assert.equal(run?.error, "TypeError: the approval rule broke");
      assert.equal(work.requests.length, 0);
    }),
});

Deno.test({
  name:
    "a worker process's heartbeat never renews a lease it lost: after a steal the thief's lease is untouched",
  ignore: pgIgnore("heartbeat after a steal"),
  fn: () =>
    withWorld(120_000, async ({ pg, agentPath, work }) => {
      const worker = new Proc("cli/main.ts", {
        DATABASE_URL: pg.url,
        AGENT: agentPath,
        WORK_URL: work.url,
        WORKER: "robbed",
        HEARTBEAT_S: "0.2",
        LEASE_S: "30",
        POLL_S: "0.2",
      }, { args: ["worker"] });
      try {
        assert.ok(
          await pg.store.leases.createRun({ runId: "steal-1", agent: "mixed", goal: "work" }, new Date()),
        );
        assert.ok(
          await pg.store.leases.createRun({ runId: "keep-1", agent: "mixed", goal: "work" }, new Date()),
        );
        // Both runs are held at epoch 1, their calls in flight.
        await until(() => Promise.resolve(work.requests.length === 2), "both calls to go out");
        const thiefLease = new Date(Date.now() + 3_600_000);
        assert.equal(await claim(pg.store, "steal-1", 1, "thief", thiefLease), 2);
        const stolenAt = new Date();
        // The worker's own row is renewed by the same statement as its leases: once it is newer than
        // the steal, a heartbeat made after the steal has run (twice, to be sure).
        const beatAfter = async (after: Date) => {
          const [row] = await pg.store.leases.frozenWorkers(["robbed"], new Date(Date.now() + 86_400_000));
          return row !== undefined && row.heartbeat_at.getTime() > after.getTime();
        };
        await until(() => beatAfter(stolenAt), "a heartbeat after the steal");
        const firstBeat = new Date();
        await until(() => beatAfter(firstBeat), "a second heartbeat after the steal");
        const stolen = await pg.store.reads.getRun("steal-1");
        assert.equal(stolen?.owner, "thief");
        assert.equal(stolen?.epoch, 2);
        assert.equal(
          stolen?.heartbeat_at?.getTime(),
          thiefLease.getTime(),
          "the stale worker renewed a lease it lost",
        );
        const kept = await pg.store.reads.getRun("keep-1");
        assert.ok(kept!.heartbeat_at!.getTime() > stolenAt.getTime(), "the run it still holds was renewed");
        assert.ok(
          worker.events("heartbeat-refused").some((e) => e.run === "steal-1" && e.epoch === "1"),
          worker.lines.join("\n"),
        );
      } finally {
        worker.kill("SIGTERM");
        await worker.status;
        await worker.close();
      }
    }),
});

Deno.test({
  name: "the workers of a supervisor killed by SIGKILL exit on their own when their stdin closes",
  ignore: pgIgnore("orphaned workers"),
  fn: () =>
    withWorld(0, async ({ pg, agentPath, work }) => {
      const sup = startSupervisor({
        DATABASE_URL: pg.url,
        AGENT: agentPath,
        WORK_URL: work.url,
        WORKERS: "2",
      });
      let pids: number[] = [];
      try {
        await until(() => Promise.resolve(sup.events("worker").length === 2), "both workers to start");
        pids = sup.events("worker-started").map((e) => Number(e.pid));
        assert.equal(pids.length, 2);
        assert.ok(pids.every(alive));
        sup.kill("SIGKILL");
        // A worker sees its stdin close a few milliseconds after the supervisor dies: a bound
        // far above that, so a slow machine passes, and a worker that never exits fails here
        // instead of leaving the test waiting on its output.
        const boundMs = 30_000;
        const killedAt = Date.now();
        await until(
          () => Promise.resolve(!pids.some(alive)),
          `the orphaned workers to exit within ${boundMs} ms`,
          boundMs,
        );
        const tookMs = Date.now() - killedAt;
        // Each worker's last line may still be in the pipe when its process is gone: read until both are in.
        await until(
          () => Promise.resolve(sup.events("supervisor-gone").length >= 2),
          `both workers' supervisor-gone lines (they exited in ${tookMs} ms)`,
          10_000,
        ).catch(() => {}); // the assertion below says what was read
        const gone = sup.events("supervisor-gone");
        assert.equal(gone.length, 2, `${tookMs} ms\n${sup.lines.join("\n")}`);
        assert.ok(gone.every((e) => e.reason === "stdin closed"));
      } finally {
        for (const pid of pids.filter(alive)) Deno.kill(pid, "SIGKILL");
        await sup.close();
      }
    }),
});
