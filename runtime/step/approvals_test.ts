/**
 * Approvals (approvals.ts), asked directly on PGlite: askApprovals() asks
 * about a step's calls in one statement and, while any request is pending,
 * returns the calls that wait with the run left waiting and released; once a
 * person has answered, the next worker goes on with the answers (to send, or
 * denied) and the run stays its own. An answer is bound to the arguments'
 * hash (argsHash), so one given for other arguments is never used. denied()
 * records the person's refusal as the call's failed result. pendingReason()
 * names the calls that wait and the commands that answer them.
 */

import assert from "node:assert/strict";
import { argsHash, askApprovals, denied, pendingReason } from "./approvals.ts";
import type { RunState } from "../run/context.ts";
import type { Json } from "../agent/tools.ts";
import { stepWorld, textTool } from "../testdata/step_world.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());
const deps = w.deps();
const pay = textTool({ name: "pay", approval: true });

/** What a worker asks about the call at `seq` with `args`. */
const ask = async (state: RunState, seq: number, args: Json) => {
  const call = w.callOf(state, seq, pay, args);
  return { call, hash: await argsHash(args) };
};

/** The run, pending again after a person's answer, claimed by the next worker (state as it read it). */
async function claimedAgain(state: RunState): Promise<RunState> {
  const claimed = await w.store.leases.claimRun(state.fence.runId, state.fence.epoch, "w1", w.clock.now());
  assert.ok(claimed, "the answer let the run be claimed");
  return { ...state, fence: { runId: state.fence.runId, epoch: claimed.epoch } };
}

Deno.test("argsHash() is the sha-256 of the canonical JSON: key order at any depth never changes it, a value does", async () => {
  const a = await argsHash({ to: "ada", cents: 5, meta: { b: [1, { y: 2, x: 1 }], a: null } });
  const b = await argsHash({ meta: { a: null, b: [1, { x: 1, y: 2 }] }, cents: 5, to: "ada" });
  assert.equal(a, b);
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.notEqual(await argsHash({ to: "ada", cents: 6, meta: { b: [1, { y: 2, x: 1 }], a: null } }), a);
  assert.notEqual(await argsHash([1, 2]), await argsHash([2, 1]), "an array's order is its value");
  // The canonical text of a string is JSON's: no way to make two different values collide by quoting.
  assert.notEqual(await argsHash({ a: "b,c" }), await argsHash({ a: "b", c: null } as never));
});

Deno.test("pendingReason() names the calls waiting for a person, with the commands that answer the first", () => {
  assert.equal(
    pendingReason([{ key: "r:0", tool: "pay" }]),
    "Tool call r:0 (pay) waits for a person: 'deno task approve r:0' or 'deno task deny r:0 --reason TEXT'",
  );
  assert.match(
    pendingReason([{ key: "r:0", tool: "pay" }, { key: "r:1", tool: "ship" }]),
    /^Tool calls r:0 \(pay\), r:1 \(ship\) wait for a person: 'deno task approve r:0'/,
  );
});

Deno.test("askApprovals() leaves the run waiting on pending requests, then goes on with the answers a person gave", async () => {
  let state = await w.running("appr-1");
  const asks = [await ask(state, 0, { text: "10 EUR" }), await ask(state, 1, { text: "900 EUR" })];
  assert.deepEqual(await askApprovals(deps, state, asks), {
    pending: [{ key: "appr-1:0", tool: "pay" }, { key: "appr-1:1", tool: "pay" }],
  });
  const run = await w.store.reads.getRun("appr-1");
  assert.deepEqual([run?.status, run?.heartbeat_at], ["waiting", null], "waiting, holding no worker");
  assert.equal(w.events("waiting-for-approval").filter((l) => l.includes(" run=appr-1 ")).length, 2);

  // One answered, one not: the run waits again, on that one alone.
  await w.store.operators.decideApproval("appr-1:1", "denied", "bob", "too much", w.clock.now());
  state = await claimedAgain(state);
  assert.deepEqual(await askApprovals(deps, state, asks), { pending: [{ key: "appr-1:0", tool: "pay" }] });
  await w.store.operators.decideApproval("appr-1:0", "approved", "alice", null, w.clock.now());
  state = await claimedAgain(state);
  const answered = await askApprovals(deps, state, asks);
  assert.ok(Array.isArray(answered));
  assert.deepEqual(answered.map((a) => [a.kind, a.call.key]), [["send", "appr-1:0"], ["denied", "appr-1:1"]]);
  const no = answered[1].kind === "denied" ? answered[1].approval : undefined;
  assert.deepEqual([no?.decided_by, no?.reason], ["bob", "too much"]);
  assert.equal((await w.store.reads.getRun("appr-1"))?.status, "running", "the run is still this worker's");
  assert.equal(w.events("approved").filter((l) => / key=appr-1:0 .*by=alice$/.test(l)).length, 1);
});

Deno.test("askApprovals() never uses an answer given for other arguments: the call waits again", async () => {
  let state = await w.running("appr-2");
  const first = await ask(state, 0, { text: "10 EUR" });
  assert.ok("pending" in await askApprovals(deps, state, [first]));
  await w.store.operators.decideApproval("appr-2:0", "approved", "alice", null, w.clock.now());
  state = await claimedAgain(state);
  const before = await w.store.reads.getApproval("appr-2:0");
  const other = { ...await ask(state, 0, { text: "10000 EUR" }), before };
  assert.deepEqual(await askApprovals(deps, state, [other]), { pending: [{ key: "appr-2:0", tool: "pay" }] });
  const now = await w.store.reads.getApproval("appr-2:0");
  assert.deepEqual([now?.status, now?.args_hash, now?.decided_by], ["pending", other.hash, null]);
  assert.match(
    w.events("waiting-for-approval").at(-1) ?? "",
    / key=appr-2:0 .*asked_before="for other arguments"$/,
  );
});

Deno.test("denied() records the person's refusal as the call's failed result, never sent", async (t) => {
  const state = await w.running("appr-3");
  const cases: [string, string | null, string][] = [
    ["with a reason", "over the limit", "denied by bob: over the limit"],
    ["without one", null, "denied by bob"],
  ];
  for (const [i, [name, reason, error]] of cases.entries()) {
    await t.step(name, async () => {
      const { call } = await ask(state, i, { text: "900 EUR" });
      const approval = { status: "denied", decided_by: "bob", reason } as Parameters<typeof denied>[3];
      const ended = await denied(deps, state, call, approval);
      assert.ok(ended.ok);
      assert.deepEqual([ended.value.status, ended.value.error, ended.value.attempts], ["failed", error, 0]);
      assert.equal(ended.rows.effect, ended.value);
      await w.held(state, ended.value);
    });
  }
});
