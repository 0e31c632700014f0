/**
 * How a dry run answers a call (dry_run.ts), on PGlite with a ManualClock:
 * only a tool that acts on the world stays dry, and only in a dry run; its
 * call is answered from the original's confirmed call with the same tool and
 * arguments (their keys in any order), else from the tool's stub, else
 * flagged with the reason; the answer is one write of the row settled under
 * the fork's key, no request counted, and a row a person sent back to intent
 * is answered in place, not sent.
 */

import assert from "node:assert/strict";
import { answerDry, dryAnswerOf, staysDry } from "./dry_run.ts";
import { stepWorld, textTool } from "../testdata/step_world.ts";
import type { PreparedCall } from "./settle.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());

let sent = 0;
const send = textTool({ name: "send", run: () => Promise.resolve({ result: `sent ${++sent}` }) });
const stubbed = textTool({ name: "send_stub", stub: (args) => `stub:${args.text}` });
const throwing = textTool({
  name: "send_bad_stub",
  stub: () => Promise.reject(new Error("no canned answer")),
});
const reader = textTool({ name: "look", effect: "read" });
const deps = w.deps({ tools: [send, stubbed, throwing, reader] });

/** The original run `orig` with one confirmed call of `send` and of `send_stub`, with two-key arguments. */
const orig = await w.running("orig");
for (const [seq, tool] of [[0, send], [1, stubbed]] as const) {
  const call = w.callOf(orig, seq, tool, { text: "hi", to: "ada" });
  const intent = await w.intent(orig, call);
  await w.store.writes.effectConfirm(
    orig.fence,
    intent,
    { result: `orig-${seq}`, remote: "created" },
    w.clock.now(),
  );
}

/** A dry run forked from `orig` (or from nothing). */
async function dry(runId: string, forkedFrom: string | null) {
  const state = await w.running(runId);
  state.dryRun = { forkedFrom };
  return state;
}

Deno.test("staysDry() holds only for a tool that acts on the world, in a dry run", async () => {
  const state = await w.running("live-1");
  assert.equal(staysDry(state, { tool: send }), false, "a run that is not dry sends");
  state.dryRun = { forkedFrom: "orig" };
  assert.equal(staysDry(state, { tool: send }), true);
  assert.equal(staysDry(state, { tool: reader }), false, "a tool that only reads runs live");
  assert.equal(send.effect, "world", "the default is the safe one");
});

Deno.test("a call the original made with the same arguments, keys in another order, is answered from its record", async () => {
  const state = await dry("dry-1", "orig");
  const call: PreparedCall = w.callOf(state, 0, send, { to: "ada", text: "hi" });
  const row = await answerDry(deps, state, call);
  assert.deepEqual([row.status, row.remote, row.result, row.idempotency_key, row.attempts], [
    "confirmed",
    "original",
    "orig-0",
    "dry-1:0",
    0,
  ]);
  await w.held(state, row);
  assert.equal(sent, 0, "nothing was sent");
  assert.equal(
    w.events("dry-answered").filter((l) => / key=dry-1:0 .*by=original from=orig:0/.test(l)).length,
    1,
  );
});

Deno.test("a call the original did not make is answered by the stub, else flagged with why", async () => {
  const state = await dry("dry-2", "orig");
  const stubbedRow = await answerDry(deps, state, w.callOf(state, 0, stubbed, { text: "new" }));
  assert.deepEqual([stubbedRow.status, stubbedRow.remote, stubbedRow.result], [
    "confirmed",
    "stub",
    "stub:new",
  ]);
  const none = await answerDry(deps, state, w.callOf(state, 1, send, { text: "new" }));
  assert.equal(none.status, "flagged");
  assert.match(none.error ?? "", /the original run orig made no such call, and the tool offers no stub/);
  const bad = await answerDry(deps, state, w.callOf(state, 2, throwing, { text: "new" }));
  assert.equal(bad.status, "flagged");
  assert.match(bad.error ?? "", /its stub threw: .*no canned answer/);
  const alone = await dryAnswerOf(
    deps,
    { dryRun: { forkedFrom: null }, fence: state.fence },
    w.callOf(state, 3, send),
  );
  assert.equal(alone.by, "flag");
  assert.match(alone.by === "flag" ? alone.reason : "", /there is no original run/);
  assert.equal(sent, 0);
});

Deno.test("a row at intent (a flagged call a person sent back) is answered in place, nothing sent", async () => {
  const state = await dry("dry-3", "orig");
  const call = w.callOf(state, 0, stubbed, { text: "again" });
  const left = await w.intent(state, call);
  assert.equal(left.attempts, 1);
  const row = await answerDry(deps, state, call);
  assert.deepEqual([row.status, row.remote, row.result, row.attempts], [
    "confirmed",
    "stub",
    "stub:again",
    1,
  ]);
  await w.held(state, row);
});
