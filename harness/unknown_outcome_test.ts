/**
 * Tool calls whose outcome is unknown, in-process on the simulator: the
 * tool's `maxAttempts` holds across restarts (a worker killed after each
 * request does not reset it), and a tool's `reconcile` settles what a person
 * would otherwise have to.
 */

import assert from "node:assert/strict";
import { SimDb, SimWorld } from "./sim.ts";

const db = await SimDb.open();

Deno.test("maxAttempts holds across restarts: seven kills after the call send it four times, then the run fails", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  const kinds: string[] = [];
  for (let i = 0; i < 7; i++) {
    const exit = await world.spawn({ runId: "ma1", plan: { crashAt: "after_call", crashSeq: 0 } }).exit;
    kinds.push(exit.kind === "exited" ? exit.outcome.status : exit.kind);
    await world.advance(1_000);
  }
  assert.deepEqual(kinds, ["killed", "killed", "killed", "killed", "failed", "failed", "failed"]);
  const snap = await world.snapshot("ma1");
  assert.equal(snap.requestsByKey["ma1:0"], 4, "four requests under the key, the tool's limit");
  assert.equal(snap.effects[0].attempts, 4);
  assert.equal(snap.effects[0].status, "intent", "the last outcome is unknown, and the row says so");
  assert.equal(snap.run?.status, "failed");
  assert.match(
    snap.run?.error ?? "",
    /^TOOL_GAVE_UP: Tool call ma1:0 \(create_server\) was sent 4 times \(maxAttempts is 4\) and no outcome was recorded/,
  );
  assert.ok(world.transcript.some((l) => /event=gave-up run=ma1 seq=0 key=ma1:0 .*attempts=4/.test(l)));
  assert.equal(snap.created.length, 1, "the remote kept one resource for the key");
});

Deno.test("a reopen allows exactly one request past maxAttempts: a kill during it gives up again", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  const spawn = async (crash: boolean) => {
    const exit = await world.spawn({
      runId: "ma2",
      plan: crash ? { crashAt: "after_call", crashSeq: 0 } : {},
    }).exit;
    await world.advance(1_000);
    return exit.kind === "exited" ? exit.outcome.status : exit.kind;
  };
  for (let i = 0; i < 4; i++) assert.equal(await spawn(true), "killed");
  assert.equal(await spawn(true), "failed");
  assert.ok(await world.observer.reopenRun("ma2", world.clock.now()));
  assert.equal(await spawn(true), "killed", "the reopen's one request went out, and its worker died");
  assert.equal(await spawn(false), "failed", "no second request past the limit without another reopen");
  let snap = await world.snapshot("ma2");
  assert.equal(snap.requestsByKey["ma2:0"], 5);
  assert.match(snap.run?.error ?? "", /was sent 5 times \(maxAttempts is 4\)/);

  assert.ok(await world.observer.reopenRun("ma2", world.clock.now()));
  assert.equal(await spawn(false), "done");
  snap = await world.snapshot("ma2");
  assert.equal(snap.requestsByKey["ma2:0"], 6);
  assert.equal(snap.effects[0].status, "confirmed");
  assert.equal(snap.effects[0].remote, "already_done", "the remote had acted on the first request");
  assert.equal(snap.created.filter((c) => c.key === "ma2:0").length, 1);
});

Deno.test.afterAll(async () => {
  await db.close();
});
