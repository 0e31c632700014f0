/**
 * Approvals with real processes on PostgreSQL: a supervisor whose one worker
 * holds one run at a time; runs that wait for a person release that slot;
 * `deno task approve` lets one finish with one effect per key, and
 * `deno task deny` makes the model see the refusal.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { z } from "zod";
import { seededRandom } from "../harness/sim.ts";
import { serveMocks } from "../mock/server.ts";
import { type Agent, defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { type AnsweredApproval, type ApprovalRow, type SqlClient, Store } from "../runtime/store/store.ts";
import { RunReads } from "../runtime/store/reads.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { pgTest } from "./_pg.ts";
import { runCli, startSupervisor, until } from "../harness/procs.ts";

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
          await pg.store.leases.createRun({ runId: id, agent: "guarded", goal: "provision" }, new Date());
        }
        // One worker with one slot: both runs reach their approval only if the first one let the slot go.
        await until(async () => {
          const { runs } = await pg.store.operators.listRuns({ status: "waiting", limit: 10 });
          return runs.length === 2;
        }, "both runs to wait for approval");
        assert.equal(mocks.cloud.created().length, 0, "nothing sent before a person said yes");

        const approve = await runCli(["approve", "gate-a:0", "--by", "alice"], env);
        assert.equal(approve.code, 0, approve.out);
        assert.match(approve.out, /^approved {2}key=gate-a:0 {2}tool=create_server .*by=alice/m);
        const deny = await runCli(["deny", "gate-b:0", "--reason", "not this week", "--by", "bob"], env);
        assert.equal(deny.code, 0, deny.out);
        await until(async () => {
          const { runs } = await pg.store.operators.listRuns({ status: "done", limit: 10 });
          return runs.length === 2;
        }, "both runs to finish");

        const keys = mocks.cloud.created().map((c) => c.key).sort();
        assert.deepEqual(
          keys,
          ["gate-a:0", "gate-a:1", "gate-a:2", "gate-b:1", "gate-b:2"],
          "one effect per key",
        );
        const { effects } = await pg.store.reads.loadHistory("gate-b");
        assert.equal(effects[0].status, "failed");
        assert.equal(effects[0].error, "denied by bob: not this week");
        assert.equal(effects[0].attempts, 0);
        const again = await runCli(["approve", "gate-a:0"], env);
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
        const asked = await runCli(["run"], { ...env, RUN_ID: runId });
        assert.equal(asked.code, 4, asked.out); // waiting: a person must act
        assert.equal((await runCli(["approve", `${runId}:0`, "--by", "alice"], env)).code, 0);
        const killed = await runCli(["run"], { ...env, RUN_ID: runId, CRASH_AT: point, CRASH_SEQ: "0" });
        assert.equal(killed.code, 137, killed.out);
        const resumed = await runCli(["run"], { ...env, RUN_ID: runId });
        assert.equal(resumed.code, 0, resumed.out);
        const keys = mocks.cloud.created().map((c) => c.key).filter((k) => k.startsWith(`${runId}:`)).sort();
        assert.deepEqual(keys, [`${runId}:0`, `${runId}:1`, `${runId}:2`], `${point}: one effect per key`);
        const { effects } = await pg.store.reads.loadHistory(runId);
        assert.equal(effects[0].remote, point === "after_call" ? "already_done" : "created");
      }
    }),
);

pgTest(
  "an approval given for other arguments is not used for these, with real processes",
  (pg) =>
    withGuarded(pg, async (env, mocks) => {
      // A person approved create_server for other arguments under this key (an earlier request, say).
      await pg.store.leases.createRun(
        { runId: "other-args", agent: "guarded", goal: "provision" },
        new Date(),
      );
      await pg.store.client.query(
        `insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at,
                              decided_by, decided_at, epoch)
       values ('other-args:0', 'other-args', 0, 'create_server', '{"name":"srv-9","spec":"large"}', 'not-these',
               'approved', now(), 'alice', now(), 0)`,
      );
      const run = await runCli(["run"], { ...env, RUN_ID: "other-args" });
      assert.equal(run.code, 4, run.out);
      assert.match(run.out, /event=waiting-for-approval run=other-args .*asked_before="for other arguments"/);
      const request = await pg.store.reads.getApproval("other-args:0");
      assert.equal(request?.status, "pending");
      assert.notEqual(request?.args_hash, "not-these");
      assert.equal(mocks.cloud.created().length, 0, "nothing was sent on the strength of the other approval");
    }),
);

pgTest(
  "with real processes, a cancelled run's call is refused with RUN_CLOSED and kept, and approve prints the run's real status",
  (pg) =>
    withGuarded(pg, async (env, mocks) => {
      const asked = await runCli(["run"], { ...env, RUN_ID: "closed-1" });
      assert.equal(asked.code, 4, asked.out);
      assert.equal((await runCli(["cancel", "closed-1"], env)).code, 0);
      for (const args of [["approve", "closed-1:0"], ["deny", "closed-1:0", "--reason", "no"]]) {
        const refused = await runCli(args, env);
        assert.equal(refused.code, 1, refused.out);
        assert.match(
          refused.out,
          /^RUN_CLOSED: Run closed-1 is cancelled, so tool call closed-1:0 was not (approved|denied): .*'deno task reopen closed-1'/,
        );
        assert.equal(refused.out.trim().split("\n").length, 1, `one line, no stack trace: ${refused.out}`);
      }
      assert.equal(
        (await pg.store.reads.getApproval("closed-1:0"))?.status,
        "pending",
        "the request is kept",
      );

      // Reopened, the run asks again instead of sending the call nobody approved while it was open.
      assert.equal((await runCli(["reopen", "closed-1"], env)).code, 0);
      const again = await runCli(["run"], { ...env, RUN_ID: "closed-1" });
      assert.equal(again.code, 4, again.out);
      assert.equal(mocks.cloud.created().length, 0, "nothing was sent");
      const approve = await runCli(["approve", "closed-1:0", "--by", "alice"], env);
      assert.equal(approve.code, 0, approve.out);
      assert.match(
        approve.out,
        /^approved {2}key=closed-1:0 {2}tool=create_server .* {2}run=closed-1 {2}run_status=pending$/m,
      );
      assert.equal((await runCli(["run"], { ...env, RUN_ID: "closed-1" })).code, 0);
      assert.deepEqual(mocks.cloud.created().map((c) => c.key).sort(), [
        "closed-1:0",
        "closed-1:1",
        "closed-1:2",
      ]);
    }),
);

/** An agent whose one call (`pay`) needs a person's approval, then done; `sent` records each send's key. */
function payAgent(sent: string[]): Agent {
  return defineAgent({
    name: "payer",
    tools: [defineTool({
      name: "pay",
      description: "Pays.",
      args: z.strictObject({ cents: z.number().int() }),
      approval: true,
      run: (_args, ctx) => {
        sent.push(ctx.idempotencyKey);
        return Promise.resolve({ result: "paid" });
      },
    })],
    model: {
      describe: "script",
      decide: (req) =>
        Promise.resolve(
          req.seq === 0
            ? { kind: "tool_calls", calls: [{ name: "pay", args: { cents: 5 } }] }
            : { kind: "done", text: "paid" },
        ),
    },
  });
}

/** Reads whose reads of an approval request call `afterRead` (once armed) before the worker sees the row. */
class SlowReads extends RunReads {
  afterRead?: () => Promise<void>;
  override async getApproval(key: string): Promise<ApprovalRow | undefined> {
    const row = await super.getApproval(key);
    const hook = this.afterRead;
    this.afterRead = undefined;
    await hook?.();
    return row;
  }
}

/** A store on `client` whose reads are {@link SlowReads}, and those reads. */
function slowReader(client: SqlClient): { store: Store; reads: SlowReads } {
  const reads = new SlowReads(client);
  return { store: new Store(client, { reads }), reads };
}

/** The database URL with a connection name, so a test can find its own sessions in pg_stat_activity. */
function named(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set("application_name", name);
  return u.toString();
}

/** A run of `agent` left waiting for approval, then cancelled and reopened: pending, with a pending request. */
async function reopenedWhileWaiting(client: Client, agent: Agent, runId: string): Promise<void> {
  await client.start(agent, { runId, input: "pay" });
  assert.equal((await client.wait(runId, { timeoutMs: 30_000, pollMs: 20 })).status, "waiting");
  await client.operators.cancel(runId, { by: "bob" });
  await client.operators.reopen(runId);
}

const quiet = new Logger({ clock: new SystemClock(), sink: discardSink });

pgTest(
  "an approval given between the worker's read of its request and its wait is used, on PostgreSQL",
  async (pg) => {
    const sent: string[] = [];
    const agent = payAgent(sent);
    const { store: workerStore, reads: slowReads } = slowReader(await openPostgres(pg.url));
    const person = new Client(pg.store);
    // Group commit off: the worker's writes go alone (a grouped store would keep these reads).
    const worker = await new Client(workerStore).startWorker([agent], {
      pollMs: 20,
      log: quiet,
      groupCommitMs: 0,
    });
    try {
      await reopenedWhileWaiting(person, agent, "slow-1");
      // The worker has read the request (pending); the person approves on another connection before it acts.
      let answered: AnsweredApproval | undefined;
      slowReads.afterRead = async () => {
        answered = await person.operators.approve("slow-1:0", { by: "alice" });
      };
      const end = await person.wait("slow-1", { timeoutMs: 30_000, pollMs: 20 });
      assert.equal(answered?.status, "approved");
      assert.equal(answered?.run_status, "running", "the run's real status: its worker holds it at the gate");
      assert.equal(end.status, "done", "the worker went on with the answer instead of waiting on it");
      assert.deepEqual(sent, ["slow-1:0"]);
    } finally {
      await worker.stop();
      await workerStore.client.close();
    }
  },
);

pgTest(
  "a request and an answer queued on the run's lock, in either order, never leave the run waiting on the answer",
  async (pg, t) => {
    const sent: string[] = [];
    const agent = payAgent(sent);
    const tag = `apr-${crypto.randomUUID().slice(0, 8)}`;
    const { store: workerStore, reads: slowReads } = slowReader(await openPostgres(named(pg.url, tag)));
    const person = new Client(new Store(await openPostgres(named(pg.url, tag))));
    const holder = postgres(pg.url, { max: 1, onnotice: () => {} });
    // No heartbeat while the lock is held: only the two statements under test queue on it. Group commit off:
    // the worker's writes go alone (a grouped store would keep these reads).
    const worker = await new Client(workerStore).startWorker([agent], {
      pollMs: 20,
      groupCommitMs: 0,
      log: quiet,
      heartbeatMs: 600_000,
      leaseMs: 1_200_000,
    });
    // Sessions of this test waiting for a lock.
    const waiters = async () =>
      (await pg.store.client.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`,
        [tag],
      ))[0].n;
    try {
      for (const first of ["request", "answer"] as const) {
        await t.step(`the ${first} first`, async () => {
          const runId = `lock-${first}`;
          await reopenedWhileWaiting(person, agent, runId);
          // Once the worker has read its request, a third session takes the run's row, so both statements
          // start (and take their snapshots) before either can lock it: the second one's snapshot predates
          // the first one's commit.
          let release!: () => void;
          let holding: Promise<unknown> | undefined;
          let answer: Promise<AnsweredApproval> | undefined;
          slowReads.afterRead = async () => {
            await new Promise<void>((locked) => {
              holding = holder.begin(async (tx) => {
                await tx`select 1 from runs where run_id = ${runId} for update`;
                locked();
                await new Promise<void>((r) => release = r);
              });
            });
            if (first === "answer") {
              answer = person.operators.approve(`${runId}:0`, { by: "alice" });
              await until(
                async () => (await waiters()) === 1,
                "the answer to queue on the run's lock",
                20_000,
              );
            }
          };
          // Then the worker sends its request, which queues on the lock too.
          if (first === "request") {
            await until(
              async () => (await waiters()) === 1,
              "the request to queue on the run's lock",
              20_000,
            );
            answer = person.operators.approve(`${runId}:0`, { by: "alice" });
          }
          await until(
            async () => (await waiters()) === 2,
            "both statements to queue on the run's lock",
            20_000,
          );
          release();
          await holding;
          const answered = await answer!;
          assert.equal(answered.status, "approved");
          const end = await person.wait(runId, { timeoutMs: 30_000, pollMs: 20 });
          assert.equal(end.status, "done", `the run ended ${end.status}`);
          assert.ok(sent.includes(`${runId}:0`));
        });
      }
      assert.deepEqual(sent.sort(), ["lock-answer:0", "lock-request:0"], "each approved call sent once");
    } finally {
      await worker.stop();
      await workerStore.client.close();
      await person.close();
      await holder.end();
    }
  },
);

pgTest(
  "the approval race with real concurrency: 200 runs cancelled, reopened and answered at random moments, none left waiting on an answer",
  async (pg) => {
    const seed = Number(Deno.env.get("APPROVAL_RACE_SEED") ?? Math.floor(Math.random() * 2 ** 31));
    const random = seededRandom(seed);
    const sent: string[] = [];
    const agent = payAgent(sent);
    const workerClient = new Client(new Store(await openPostgres(pg.url, { max: 4 })));
    const people = [new Client(new Store(await openPostgres(pg.url, { max: 4 }))), new Client(pg.store)];
    const worker = await workerClient.startWorker([agent], { pollMs: 10, log: quiet });
    const ids = Array.from({ length: 200 }, (_, i) => `race-${i}`);
    try {
      for (const id of ids) await people[0].start(agent, { runId: id, input: "pay" });
      for (const id of ids) {
        assert.equal((await people[0].wait(id, { timeoutMs: 60_000, pollMs: 20 })).status, "waiting");
      }
      // Each run: cancel and reopen on one connection, the answer on another after a random pause, so it
      // lands anywhere in the worker's replay of the run; a fifth of the answers are denials.
      const plans = ids.map((id) => ({ id, pauseMs: Math.floor(random() * 30), deny: random() < 0.2 }));
      const outcomes = await Promise.all(plans.map(async ({ id, pauseMs, deny }) => {
        await people[0].operators.cancel(id, { by: "bob" });
        await people[0].operators.reopen(id);
        await new Promise((r) => setTimeout(r, pauseMs));
        const key = `${id}:0`;
        return deny
          ? await people[1].operators.deny(key, { by: "alice", reason: "no" }).then(() => "denied")
          : await people[1].operators.approve(key, { by: "alice" }).then(() => "approved");
      }));
      const ended: string[] = [];
      for (const id of ids) {
        const end = await people[0].wait(id, { timeoutMs: 60_000, pollMs: 20 });
        if (end.status !== "done") {
          ended.push(`${id} ${end.status} (${(await pg.store.reads.getApproval(`${id}:0`))?.status})`);
        }
      }
      assert.deepEqual(
        ended,
        [],
        `seed=${seed}: ${ended.length} of ${ids.length} runs did not finish (replay: APPROVAL_RACE_SEED=${seed})`,
      );
      const approved = plans.filter((_, i) => outcomes[i] === "approved").map((p) => `${p.id}:0`).sort();
      assert.deepEqual(sent.sort(), approved, `seed=${seed}: each approved call sent once, no other`);
    } finally {
      await worker.stop();
      await workerClient.close();
      await people[0].close();
    }
  },
);
