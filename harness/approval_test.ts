/**
 * Approvals bound to exact arguments, on the simulator: a call that needs a
 * person's yes waits (its run released), runs once after `approve`, is shown
 * to the model as refused after `deny`, survives crashes between the approval
 * and the call and between the call and its confirm, and an approval given for
 * other arguments is not used.
 */

import assert from "node:assert/strict";
import { demoTools } from "../examples/provision/tools.ts";
import { buildMessages } from "../runtime/history.ts";
import type { Tool } from "../runtime/tools.ts";
import { argsHash } from "../runtime/executor.ts";
import { SimDb, SimWorld } from "./sim.ts";

const db = await SimDb.open();

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
  const request = await w.observer.getApproval("ap-1:0");
  assert.equal(request?.status, "pending");
  assert.equal(request?.args_hash, await argsHash({ name: "srv-1", spec: "small" }));
  assert.ok(
    w.transcript.some((l) =>
      /event=waiting-for-approval run=ap-1 seq=0 key=ap-1:0 tool=create_server/.test(l)
    ),
  );

  const approved = await w.observer.decideApproval("ap-1:0", "approved", "alice", null, w.clock.now());
  assert.equal(approved?.decided_by, "alice");
  assert.equal((await w.observer.getRun("ap-1"))?.status, "pending", "taken up again at once");
  assert.equal(await exitStatus(w, "ap-1"), "done");
  const done = await w.snapshot("ap-1");
  assert.deepEqual(done.created.map((c) => c.key), ["ap-1:0", "ap-1:1", "ap-1:2"], "one effect per key");
  assert.equal(w.model.calls("ap-1"), 4, "the decision was not bought again");
  assert.equal(await w.observer.decideApproval("ap-1:0", "denied", "bob", "late", w.clock.now()), undefined);
});

Deno.test("deny: the call is never sent, and the model is shown the refusal as the tool's result", async () => {
  const w = await world();
  assert.equal(await exitStatus(w, "ap-2"), "waiting");
  await w.observer.decideApproval("ap-2:0", "denied", "alice", "too expensive", w.clock.now());
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
  const toolMessage = buildMessages(state, 1, "i").find((m) => m.role === "tool");
  assert.deepEqual(toolMessage, {
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
      await w.observer.decideApproval(`${runId}:0`, "approved", "alice", null, w.clock.now());
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
  await w.observer.createRun({ runId: "ap-3", agent: "provision", goal: "g" }, w.clock.now());
  await w.observer.client.query(
    `insert into approvals (idempotency_key, run_id, seq, tool, args, args_hash, status, requested_at, decided_by,
                            decided_at, epoch)
     values ('ap-3:0', 'ap-3', 0, 'create_server', '{"name":"srv-999","spec":"large"}', $1, 'approved', $2, 'alice',
             $2, 0)`,
    [await argsHash({ name: "srv-999", spec: "large" }), w.clock.now().toISOString()],
  );
  assert.equal(await exitStatus(w, "ap-3"), "waiting");
  const request = await w.observer.getApproval("ap-3:0");
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

Deno.test("cancelling a run that waits for approval works", async () => {
  const w = await world();
  assert.equal(await exitStatus(w, "ap-4"), "waiting");
  assert.equal((await w.observer.cancelRun("ap-4", "cancelled by test", w.clock.now()))?.status, "cancelled");
  assert.equal(
    await w.observer.decideApproval("ap-4:0", "approved", "a", null, w.clock.now()) !== undefined,
    true,
  );
  assert.equal(
    (await w.observer.getRun("ap-4"))?.status,
    "cancelled",
    "an approval does not revive a cancelled run",
  );
});

Deno.test.afterAll(async () => {
  await db.close();
});
