/**
 * Tool calls whose outcome is unknown, in-process on the simulator: the
 * tool's `maxAttempts` holds across restarts (a worker killed after each
 * request does not reset it), and a tool's `reconcile` settles what a person
 * would otherwise have to.
 */

import assert from "node:assert/strict";
import { chargeCard } from "../examples/payments/agent.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { settle } from "../runtime/base/clock.ts";
import type { FetchLike } from "../runtime/model/planner.ts";
import type { Tool } from "../runtime/agent/tools.ts";
import { fuzz } from "./fuzz.ts";
import { SIM_CLOUD_URL, type SimExit, type SimProcess, SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const db = await openTestSim();

const ended = (exit: SimExit) => exit.kind === "exited" ? exit.outcome.status : exit.kind;

/** Advances the world's clock a second at a time until `proc` ends (bounded), and says how it ended. */
async function finish(world: SimWorld, proc: SimProcess): Promise<string> {
  // Bounded: 600 simulated seconds.
  for (let i = 0; i < 600 && !proc.dead; i++) {
    await world.advance(1_000);
    await settle();
  }
  assert.ok(proc.dead, `${proc.name} never ended`);
  return ended(await proc.exit);
}

/** Starts `times` incarnations on `runId` one after the other, each to die at `point`; says how each ended. */
async function crashEach(
  world: SimWorld,
  runId: string,
  point: "after_intent" | "after_call",
  times: number,
): Promise<string[]> {
  const kinds: string[] = [];
  for (let i = 0; i < times; i++) {
    kinds.push(ended(await world.spawn({ runId, plan: { crashAt: point, crashSeq: 0 } }).exit));
    await world.advance(1_000);
  }
  return kinds;
}

Deno.test("maxAttempts holds across restarts: seven kills after the call send it four times, then the run fails", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db);
  assert.deepEqual(await crashEach(world, "ma1", "after_call", 7), [
    "killed",
    "killed",
    "killed",
    "killed",
    "failed",
    "failed",
    "failed",
  ]);
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
  const clean = () => finish(world, world.spawn({ runId: "ma2" }));
  assert.deepEqual(await crashEach(world, "ma2", "after_call", 5), [
    "killed",
    "killed",
    "killed",
    "killed",
    "failed",
  ]);
  assert.ok(await world.observer.operators.reopenRun("ma2", world.clock.now()));
  assert.deepEqual(
    await crashEach(world, "ma2", "after_call", 1),
    ["killed"],
    "the reopen's one request went out, and its worker died",
  );
  assert.equal(await clean(), "failed", "no second request past the limit without another reopen");
  let snap = await world.snapshot("ma2");
  assert.equal(snap.requestsByKey["ma2:0"], 5);
  assert.match(snap.run?.error ?? "", /was sent 5 times \(maxAttempts is 4\)/);

  assert.ok(await world.observer.operators.reopenRun("ma2", world.clock.now()));
  assert.equal(await clean(), "done");
  snap = await world.snapshot("ma2");
  assert.equal(snap.requestsByKey["ma2:0"], 6);
  assert.equal(snap.effects[0].status, "confirmed");
  assert.equal(snap.effects[0].remote, "already_done", "the remote had acted on the first request");
  assert.equal(snap.created.filter((c) => c.key === "ma2:0").length, 1);
});

Deno.test("a reconcile that never answers is given up on at its own timeout, and the call is flagged", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, {
    tools: (fetch): Tool[] => [{
      ...chargeCard({ cloudUrl: SIM_CLOUD_URL, fetch }),
      // Ignores its signal too: the runtime stops waiting anyway.
      reconcile: () => new Promise(() => {}),
      reconcileTimeoutMs: 5_000,
    }],
  });
  assert.deepEqual(await crashEach(world, "rc-slow", "after_call", 1), ["killed"]);
  assert.equal(await finish(world, world.spawn({ runId: "rc-slow" })), "blocked");
  const snap = await world.snapshot("rc-slow");
  assert.equal(snap.effects[0].status, "flagged");
  assert.match(
    snap.effects[0].error ?? "",
    /its reconcile could not tell \(its reconcile did not answer within 5000ms\)/,
  );
  assert.equal(world.cloud.charges("rc-slow:0").length, 1, "charged once: the restart sent nothing");
  assert.ok(world.transcript.some((l) => /event=reconcile-answered run=rc-slow .*answer=unknown/.test(l)));
});

Deno.test("a tool that takes a key asks its reconcile before giving up at maxAttempts: found, the run goes on", async () => {
  await db.freshSchema();
  // The tools are built when a worker starts, after `world` exists: they look up in its cloud.
  const lookup = (key: string) => world.cloud.created(key).filter((r) => r.key === key);
  const world: SimWorld = await SimWorld.open(db, {
    tools: (fetch) =>
      demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).map((tool) => ({
        ...tool,
        reconcile: (_args, ctx) => {
          const found = lookup(ctx.idempotencyKey);
          return Promise.resolve(
            found.length === 1 ? { status: "happened", result: found[0].id } : { status: "not_happened" },
          );
        },
      })),
  });
  assert.deepEqual(await crashEach(world, "rc-limit", "after_call", 4), Array(4).fill("killed"));
  assert.equal(await finish(world, world.spawn({ runId: "rc-limit" })), "done");
  const snap = await world.snapshot("rc-limit");
  assert.equal(snap.requestsByKey["rc-limit:0"], 4, "no fifth request");
  assert.equal(snap.effects[0].remote, "reconciled");
  assert.equal(snap.effects[0].result, lookup("rc-limit:0")[0].id);
  assert.equal(snap.effects.length, 3);
});

Deno.test("a keyless call its reconcile never finds stops at maxAttempts as failed, not flagged; a reopen sends it once", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, {
    tools: (fetch) => [chargeCard({ cloudUrl: SIM_CLOUD_URL, fetch })],
  });
  // Each worker dies after writing the intent, before the request leaves: the remote never sees one.
  assert.deepEqual(await crashEach(world, "rc-never", "after_intent", 4), Array(4).fill("killed"));
  assert.equal(await finish(world, world.spawn({ runId: "rc-never" })), "failed");
  let snap = await world.snapshot("rc-never");
  assert.equal(snap.effects[0].attempts, 4);
  assert.match(
    snap.run?.error ?? "",
    /^TOOL_GAVE_UP: Tool call rc-never:0 \(charge_card\) was sent 4 times .*; its reconcile says it did not happen/,
  );
  assert.equal(world.cloud.charges("rc-never:0").length, 0);

  assert.ok(await world.observer.operators.reopenRun("rc-never", world.clock.now()));
  assert.equal(await finish(world, world.spawn({ runId: "rc-never" })), "done");
  snap = await world.snapshot("rc-never");
  assert.deepEqual([snap.effects[0].remote, snap.effects[0].attempts], ["created", 5]);
  assert.equal(world.cloud.charges("rc-never:0").length, 1);
});

Deno.test("the fuzzer passes a keyless tool that reconciles, and finds the same tool without it blocking", async () => {
  const payments = (strip: boolean) => (fetch: FetchLike) =>
    defineAgent({
      name: "payments",
      instructions: "Charge the card.",
      defaultInput: "Charge 12.99.",
      tools: [
        strip ? { ...chargeCard({ cloudUrl: SIM_CLOUD_URL, fetch }), reconcile: undefined } : chargeCard({
          cloudUrl: SIM_CLOUD_URL,
          fetch,
        }),
      ],
    });
  const checked = await fuzz(payments(false), { db, seed: 3, schedules: 150, remote: "mock-cloud" });
  assert.equal(checked.failures.length, 0, checked.failures[0]?.text);
  const unchecked = await fuzz(payments(true), { db, seed: 3, schedules: 150, remote: "mock-cloud" });
  assert.equal(unchecked.failures.length, 1);
  assert.ok(unchecked.failures[0].shrunk.problems.some((p) => /is blocked, expected done/.test(p)));
});

Deno.test.afterAll(async () => {
  await db.close();
});

Deno.test("a reconcile that finds a result the database cannot store could not tell: the call is flagged, nothing confirmed", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, {
    tools: (fetch): Tool[] => [{
      ...chargeCard({ cloudUrl: SIM_CLOUD_URL, fetch }),
      reconcile: () => Promise.resolve({ status: "happened", result: { amount: Number.NaN } }),
    }],
  });
  assert.deepEqual(await crashEach(world, "rc-nan", "after_call", 1), ["killed"]);
  assert.equal(await finish(world, world.spawn({ runId: "rc-nan" })), "blocked");
  const snap = await world.snapshot("rc-nan");
  assert.equal(snap.effects[0].status, "flagged");
  assert.equal(snap.effects[0].result, null, "nothing was confirmed from the lookup");
  assert.match(
    snap.effects[0].error ?? "",
    /its reconcile could not tell \(the result it found cannot be stored: it holds the number NaN/,
  );
});
