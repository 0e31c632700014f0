/**
 * Approvals bound to exact arguments, on the simulator: a call that needs a
 * person's yes waits (its run released), runs once after `approve`, is shown
 * to the model as refused after `deny`, survives crashes between the approval
 * and the call and between the call and its confirm, and an approval given for
 * other arguments is not used.
 */

import assert from "node:assert/strict";
import { demoTools } from "../examples/provision/tools.ts";
import { buildTranscript } from "../runtime/step/history.ts";
import { chatMessages } from "../runtime/model/openai.ts";
import type { Tool } from "../runtime/agent/tools.ts";
import { argsHash } from "../runtime/step/approvals.ts";
import { Client } from "../runtime/client/client.ts";
import { ClientError } from "../runtime/base/errors.ts";
import type { QueryOptions, SqlClient } from "../runtime/store/store.ts";
import { DEMO_APPROVAL_TOOL, demoAgent, drawApprovalRace, fuzz } from "./fuzz.ts";
import { SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const db = await openTestSim();

/** The demo's tools, with create_server needing a person's approval. */
const guarded = (fetch: (req: Request) => Promise<Response>): Tool[] =>
  demoTools({ cloudUrl: "http://mock-cloud.sim", fetch }).map((t): Tool =>
    t.name === "create_server" ? { ...t, needsApproval: () => true } : t
  );

async function world(): Promise<SimWorld> {
  await db.freshSchema();
  return await SimWorld.open(db, { tools: guarded });
}

async function exitStatus(world: SimWorld, runId: string, plan = {}): Promise<string> {
  const exit = await world.spawn({ runId, plan }).exit;
  return exit.kind === "exited"
    ? exit.outcome.status
    : exit.kind === "killed"
    ? `killed@${exit.point}`
    : exit.error;
}

Deno.test("a call that needs approval waits, holding no worker; approve lets it run once", async () => {
  const w = await world();
  assert.equal(await exitStatus(w, "ap-1"), "waiting");
  const waiting = await w.snapshot("ap-1");
  assert.equal(waiting.run?.status, "waiting");
  assert.equal(waiting.run?.heartbeat_at, null, "released: no lease held");
  assert.equal(waiting.created.length, 0, "nothing was sent");
  const request = await w.observer.reads.getApproval("ap-1:0");
  assert.equal(request?.status, "pending");
  assert.equal(request?.args_hash, await argsHash({ name: "srv-1", spec: "small" }));
  assert.ok(
    w.transcript.some((l) =>
      /event=waiting-for-approval run=ap-1 seq=0 key=ap-1:0 tool=create_server/.test(l)
    ),
  );

  const approved = await w.observer.operators.decideApproval(
    "ap-1:0",
    "approved",
    "alice",
    null,
    w.clock.now(),
  );
  assert.equal(approved.decided, true);
  assert.equal(approved.approval?.decided_by, "alice");
  assert.equal(approved.runStatus, "pending");
  assert.equal((await w.observer.reads.getRun("ap-1"))?.status, "pending", "taken up again at once");
  assert.equal(await exitStatus(w, "ap-1"), "done");
  const done = await w.snapshot("ap-1");
  assert.deepEqual(done.created.map((c) => c.key), ["ap-1:0", "ap-1:1", "ap-1:2"], "one effect per key");
  assert.equal(w.model.calls("ap-1"), 4, "the decision was not bought again");
  const late = await w.observer.operators.decideApproval("ap-1:0", "denied", "bob", "late", w.clock.now());
  assert.equal(late.decided, false);
  assert.equal(late.approval?.status, "approved", "the first answer stands");
});

Deno.test("deny: the call is never sent, and the model is shown the refusal as the tool's result", async () => {
  const w = await world();
  assert.equal(await exitStatus(w, "ap-2"), "waiting");
  await w.observer.operators.decideApproval("ap-2:0", "denied", "alice", "too expensive", w.clock.now());
  assert.equal(await exitStatus(w, "ap-2"), "done");
  const snap = await w.snapshot("ap-2");
  const denied = snap.effects.find((e) => e.seq === 0)!;
  assert.equal(denied.status, "failed");
  assert.equal(denied.attempts, 0, "never sent");
  assert.equal(denied.error, "denied by alice: too expensive");
  assert.ok(!snap.created.some((c) => c.key === "ap-2:0"), "no server was created");
  // What the model was sent for the next step: the refusal as create_server's result.
  const state = {
    fence: { runId: "ap-2", epoch: 1 },
    goal: "g",
    journal: new Map(snap.journal.map((j) => [j.seq, j])),
    effects: new Map(snap.effects.map((e) => [e.seq, e])),
    llmCalls: 0,
    signal: new AbortController().signal,
  };
  const transcript = buildTranscript(state, 1, "i");
  assert.deepEqual(transcript.find((m) => m.role === "tool"), {
    role: "tool",
    callId: "call_0",
    name: "create_server",
    failed: true,
    error: "denied by alice: too expensive",
  });
  assert.deepEqual(chatMessages(transcript).find((m) => m.role === "tool"), {
    role: "tool",
    tool_call_id: "call_0",
    content: JSON.stringify({ error: "denied by alice: too expensive" }),
  });
});

Deno.test("a crash between the approval and the call, or between the call and its confirm, still ends with one effect", async (t) => {
  for (const point of ["before_intent", "after_intent", "after_call"]) {
    await t.step(point, async () => {
      const w = await world();
      const runId = `ap-${point}`;
      assert.equal(await exitStatus(w, runId), "waiting");
      await w.observer.operators.decideApproval(`${runId}:0`, "approved", "alice", null, w.clock.now());
      assert.equal(await exitStatus(w, runId, { crashAt: point, crashSeq: 0 }), `killed@${point}`);
      assert.equal(await exitStatus(w, runId), "done");
      const snap = await w.snapshot(runId);
      const keys = snap.created.map((c) => c.key);
      assert.deepEqual(keys, [`${runId}:0`, `${runId}:1`, `${runId}:2`], "one effect per key");
      assert.equal(
        snap.effects[0].remote,
        point === "after_call" ? "already_done" : "created",
      );
    });
  }
});

Deno.test("an approval given for other arguments is not used: the call is asked about again", async () => {
  const w = await world();
  // Seed an approval for the same key but other arguments (say, an earlier version of the request).
  await w.observer.leases.createRun({ runId: "ap-3", agent: "provision", goal: "g" }, w.clock.now());
  await w.observer.client.query(
    `insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at, decided_by,
                            decided_at, epoch)
     values ('ap-3:0', 'ap-3', 0, 'create_server', '{"name":"srv-999","spec":"large"}', $1, 'approved', $2, 'alice',
             $2, 0)`,
    [await argsHash({ name: "srv-999", spec: "large" }), w.clock.now().toISOString()],
  );
  assert.equal(await exitStatus(w, "ap-3"), "waiting");
  const request = await w.observer.reads.getApproval("ap-3:0");
  assert.equal(request?.status, "pending", "asked again");
  assert.equal(request?.args_hash, await argsHash({ name: "srv-1", spec: "small" }));
  assert.equal(request?.decided_by, null);
  assert.ok(
    w.transcript.some((l) =>
      /event=waiting-for-approval run=ap-3 .*asked_before="for other arguments"/.test(l)
    ),
  );
  assert.equal((await w.snapshot("ap-3")).created.length, 0);
});

/**
 * A store client that calls `before(n)` ahead of its n-th statement (from 1):
 * a person acting between two statements of a worker, planted from outside.
 */
function landBefore(client: SqlClient, before: (n: number) => Promise<void>): SqlClient {
  let n = 0;
  return {
    describe: client.describe,
    exec: (text) => client.exec(text),
    close: () => client.close(),
    query: async <T>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> => {
      await before(++n);
      return await client.query<T>(text, params, opts);
    },
    run: async (text: string, params?: unknown[]): Promise<number> => {
      await before(++n);
      return await client.run(text, params);
    },
  };
}

/**
 * Drives `runId` to its end as a patient person would: a waiting run's
 * pending request is approved, a cancelled run reopened, a pending one given
 * a worker. Fails as soon as the run waits with no pending request: nothing
 * would ever wake it.
 */
async function untilDone(w: SimWorld, client: Client, runId: string): Promise<void> {
  // Bounded: a person's answer or a worker's turn each round.
  for (let round = 0; round < 12; round++) {
    const run = await w.observer.reads.getRun(runId);
    if (run?.status === "done") return;
    if (run?.status === "waiting") {
      const requests = await w.observer.reads.listApprovals(runId);
      const pending = requests.find((r) => r.status === "pending");
      assert.ok(
        pending,
        `run ${runId} waits, yet its requests are all answered (${
          requests.map((r) => `${r.idempotency_key} ${r.status}`).join(", ")
        }): nothing will ever wake it`,
      );
      await client.operators.approve(pending.idempotency_key, { by: "person" });
    } else if (run?.status === "cancelled") await client.operators.reopen(runId);
    else if (run?.status === "pending") await w.spawn({ runId }).exit;
    else assert.fail(`run ${runId} is ${run?.status}`);
  }
  assert.fail(`run ${runId} did not finish in 12 rounds`);
}

/** A run waiting for approval, cancelled and reopened: its request is pending while a worker replays it. */
async function reopenedWhileWaiting(w: SimWorld, client: Client, runId: string): Promise<void> {
  assert.equal(await exitStatus(w, runId), "waiting");
  await client.operators.cancel(runId, { by: "bob" });
  await client.operators.reopen(runId);
}

Deno.test("an answer given between any two statements of a worker's turn is never lost", async (t) => {
  // How many statements the reopened run's worker sends on its own (until it waits again).
  const probe = await world();
  const probeClient = new Client(probe.observer, probe.clock);
  await reopenedWhileWaiting(probe, probeClient, "ap-probe");
  let statements = 0;
  const counted = await probe.spawn({
    runId: "ap-probe",
    hooks: { wrapStore: (client) => landBefore(client, (n) => Promise.resolve(void (statements = n))) },
  }).exit;
  assert.equal(counted.kind === "exited" && counted.outcome.status, "waiting");
  assert.ok(statements >= 3, `${statements} statements`);

  for (const action of ["approve", "deny", "cancel"] as const) {
    // One past the last statement too: the answer lands after the worker let the run go.
    for (let k = 1; k <= statements + 1; k++) {
      await t.step(`${action} before statement ${k} of ${statements}`, async () => {
        const w = await world();
        const client = new Client(w.observer, w.clock);
        const runId = `ap-${action}-${k}`;
        await reopenedWhileWaiting(w, client, runId);
        const act = async (n: number) => {
          if (n !== k) return;
          if (action === "approve") await client.operators.approve(`${runId}:0`, { by: "alice" });
          else if (action === "deny") {
            await client.operators.deny(`${runId}:0`, { by: "alice", reason: "no" });
          } else await client.operators.cancel(runId, { by: "carol" });
        };
        await w.spawn({ runId, hooks: { wrapStore: (client) => landBefore(client, act) } }).exit;
        // The answer may also land after the worker's last statement.
        if (k > statements) await act(k);
        await untilDone(w, client, runId);
        const done = await w.snapshot(runId);
        const request = await w.observer.reads.getApproval(`${runId}:0`);
        const sent = done.created.map((c) => c.key);
        if (action === "deny") {
          assert.deepEqual(sent, [`${runId}:1`, `${runId}:2`], "the denied call was never sent");
          assert.equal(done.effects[0].status, "failed");
          assert.equal(done.effects[0].attempts, 0);
        } else {
          assert.deepEqual(sent, [`${runId}:0`, `${runId}:1`, `${runId}:2`], "one effect per key");
          // Sent only on an approval for its exact arguments.
          assert.equal(request?.status, "approved");
          assert.equal(request?.args_hash, await argsHash(done.effects[0].args));
        }
      });
    }
  }
});

Deno.test("a closed run's call cannot be answered: RUN_CLOSED, the request stays pending, and a reopen asks again", async () => {
  const w = await world();
  const client = new Client(w.observer, w.clock);
  assert.equal(await exitStatus(w, "ap-4"), "waiting");
  await client.operators.cancel("ap-4", { by: "bob" });
  for (
    const answer of [
      () => client.operators.approve("ap-4:0", { by: "a" }),
      () => client.operators.deny("ap-4:0", { by: "a" }),
    ]
  ) {
    await assert.rejects(answer(), (e) => {
      assert.ok(e instanceof ClientError);
      assert.equal(e.code, "RUN_CLOSED");
      assert.match(e.message, /^Run ap-4 is cancelled, so tool call ap-4:0 was not (approved|denied)/);
      assert.match(e.message, /deno task reopen ap-4/);
      return true;
    });
  }
  assert.equal(
    (await w.observer.reads.getApproval("ap-4:0"))?.status,
    "pending",
    "the request is kept, unanswered",
  );
  assert.equal((await w.observer.reads.getRun("ap-4"))?.status, "cancelled");

  // Reopened, the run asks again and sends nothing until a person answers for the open run.
  await client.operators.reopen("ap-4");
  assert.equal(await exitStatus(w, "ap-4"), "waiting");
  assert.equal((await w.snapshot("ap-4")).created.length, 0, "nothing was sent on the refused approval");
  const answered = await client.operators.approve("ap-4:0", { by: "alice" });
  assert.equal(answered.status, "approved");
  assert.equal(answered.run_status, "pending", "the run's real status after the answer");
  assert.equal(await exitStatus(w, "ap-4"), "done");
  assert.deepEqual((await w.snapshot("ap-4")).created.map((c) => c.key), ["ap-4:0", "ap-4:1", "ap-4:2"]);
});

Deno.test("the approval race, 200 schedules of random interleavings: no run waits on an answered request", async () => {
  // A new master seed each time (APPROVAL_RACE_SEED replays one); a failure prints it with its replay.
  const seed = Number(Deno.env.get("APPROVAL_RACE_SEED") ?? Math.floor(Math.random() * 2 ** 31));
  await db.freshSchema();
  const report = await fuzz(demoAgent, {
    db,
    seed,
    schedules: 200,
    remote: "mock-cloud",
    approvalTool: DEMO_APPROVAL_TOOL,
    draw: drawApprovalRace,
  });
  assert.deepEqual(report.failures.map((f) => f.text), [], `seed=${seed}`);
  assert.equal(report.schedules, 200);
  // The acts landed: answers, cancels and reopens between the worker's statements, and cancels at a wait.
  for (const kind of ["approve@stmt", "deny@stmt", "cancel@stmt", "reopen@stmt", "cancel@wait"]) {
    assert.ok(
      (report.kinds[kind] ?? 0) > 0,
      `seed=${seed}: no ${kind} fired (${JSON.stringify(report.kinds)})`,
    );
  }
});

Deno.test.afterAll(async () => {
  await db.close();
});
