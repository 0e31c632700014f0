/**
 * One call's path (send.ts), sent directly on PGlite against a scripted
 * remote, each end read back from the database and from the run's state: a
 * call its remote answers is confirmed `created`; a failure an outage
 * explains is recorded with when to go again, slept through when the wait is
 * short and left asleep when it is long, and given up past the retry
 * horizon; a permanent failure fails the call; a keyless call whose outcome
 * is unknown is flagged; a result that cannot be stored fails the call for
 * good; a call settled from outside while asleep goes on with that row, and
 * one asleep past its deadline fails without a request.
 */

import assert from "node:assert/strict";
import { type CallEnd, send } from "./send.ts";
import { ToolError } from "../base/errors.ts";
import type { SideEffectRow } from "../store/rows.ts";
import type { ToolOutcome, ToolSpec } from "../agent/tools.ts";
import type { Ended } from "../run/ended.ts";
import { stepWorld, textTool } from "../testdata/step_world.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());
const deps = w.deps();

/** Tool `shop`, whose n-th request (from 1) ends as `answer(n)` says; `keys` holds each request's key. */
function shop(answer: (n: number) => ToolOutcome | Error, spec: Partial<ToolSpec<{ text: string }>> = {}) {
  const keys: string[] = [];
  const tool = textTool({
    name: "shop",
    ...spec,
    run: (_args, ctx) => {
      keys.push(ctx.idempotencyKey);
      const a = answer(keys.length);
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
  });
  return { tool, keys };
}

const down = (retryAfterMs: number) =>
  new ToolError("SHOP_DOWN", "503 Service Unavailable", { transient: true, retryAfterMs });

/** The row a send ended with, checked to be as stored and as the run's state holds it. */
async function leftAt(ended: Ended<CallEnd>, state: Parameters<typeof w.held>[0]): Promise<SideEffectRow> {
  if (!ended.ok) throw ended.error;
  const row = ended.value;
  if ("kind" in row) throw new Error(`a limit refused the call: ${row.reason}`);
  await w.held(state, row);
  return row;
}

Deno.test("send() confirms a call its remote answers as created, after one request under its key", async () => {
  const state = await w.running("send-1");
  const { tool, keys } = shop(() => ({ result: { order: 7 } }));
  const row = await leftAt(await send(deps, state, w.callOf(state, 0, tool)), state);
  assert.deepEqual([row.status, row.result, row.remote, row.attempts], [
    "confirmed",
    { order: 7 },
    "created",
    1,
  ]);
  assert.deepEqual(keys, ["send-1:0"]);
});

Deno.test("send() records a failure an outage explains and leaves the call asleep until then, when the wait is long", async () => {
  const state = await w.running("send-2");
  const { tool, keys } = shop(() => down(30_000));
  const row = await leftAt(await send(deps, state, w.callOf(state, 0, tool)), state);
  assert.deepEqual(
    [row.status, row.failures, row.error, row.check_at?.getTime()],
    ["intent", 1, "SHOP_DOWN: 503 Service Unavailable", w.clock.now().getTime() + 30_000],
  );
  assert.equal(keys.length, 1, "not sent again before its time");
  assert.equal(w.clock.pending, 0, "nothing sleeps: the run is let go");
});

Deno.test("send() sleeps through a short wait holding the slot, then sends again under the same key", async () => {
  const state = await w.running("send-3");
  const { tool, keys } = shop((n) => n === 1 ? down(1_000) : { result: "ok", remote: "already_done" });
  const sending = send(deps, state, w.callOf(state, 0, tool));
  // Bounded: the worker reaches its sleep within a few turns.
  for (let i = 0; i < 100 && w.clock.pending === 0; i++) await new Promise((r) => setTimeout(r, 0));
  assert.equal(keys.length, 1, "one request before the wait");
  await w.clock.advance(1_000);
  const row = await leftAt(await sending, state);
  assert.deepEqual([row.status, row.attempts, row.failures, row.remote], ["confirmed", 2, 1, "already_done"]);
  assert.deepEqual(keys, ["send-3:0", "send-3:0"]);
});

Deno.test("send() ends a call for good on a permanent failure, an unstorable result, or an unknown outcome with no key", async (t) => {
  const state = await w.running("send-4");
  const cases: [string, ToolOutcome | Error, Partial<ToolSpec<{ text: string }>>, string, RegExp][] = [
    [
      "a permanent failure: failed, as the tool said",
      new ToolError("OUT_OF_STOCK", "no such item", { transient: false }),
      {},
      "failed",
      /^no such item$/,
    ],
    [
      "a result that cannot be stored: failed",
      { result: { n: 1n } as never },
      {},
      "failed",
      /^shop answered, but its result cannot be stored: .*send-4:1/,
    ],
    [
      "a keyless call whose outcome is unknown: flagged",
      new Error("socket hang up"),
      { idempotent: false },
      "flagged",
      /^it failed with an unknown outcome \(.*socket hang up\) and shop takes no idempotency key$/,
    ],
  ];
  for (const [i, [name, answer, spec, status, error]] of cases.entries()) {
    await t.step(name, async () => {
      const { tool, keys } = shop(() => answer, spec);
      const row = await leftAt(await send(deps, state, w.callOf(state, i, tool)), state);
      assert.equal(row.status, status);
      assert.match(row.error ?? "", error);
      assert.equal(keys.length, 1, "one request, never repeated");
    });
  }
});

Deno.test("send() past the retry horizon fails the run TOOL_GAVE_UP, ending with the call's row at intent", async () => {
  const state = await w.running("send-5");
  const { tool } = shop(() => down(1_000));
  const ended = await send(w.deps({ retry: { horizonMs: 0 } }), state, w.callOf(state, 0, tool));
  assert.ok(!ended.ok, "the send ended with an error");
  assert.equal((ended.error as ToolError).code, "TOOL_GAVE_UP");
  assert.deepEqual([ended.rows.effect?.status, ended.rows.effect?.failures], ["intent", 1]);
  await w.held(state, ended.rows.effect!);
});

Deno.test("send() goes on with a call settled from outside while it was asleep, and asks its remote nothing", async () => {
  const state = await w.running("send-6");
  const { tool, keys } = shop(() => ({ result: { job: "j1" }, accepted: { checkAfterMs: 30_000 } }));
  const call = w.callOf(state, 0, tool);
  assert.equal((await leftAt(await send(deps, state, call), state)).status, "waiting");
  await w.clock.advance(30_000);
  const out = await w.store.operators.settleCall(
    call.key,
    { result: { url: "by-hand" } },
    "alice",
    w.clock.now(),
  );
  assert.equal(out.settled, true);
  const row = await leftAt(await send(deps, state, call), state);
  assert.deepEqual([row.status, row.result, row.remote], ["confirmed", { url: "by-hand" }, "resolved"]);
  assert.equal(keys.length, 1, "the remote was not asked again");
  assert.equal(w.events("settled-meanwhile").filter((l) => / key=send-6:0 .*by=alice$/.test(l)).length, 1);
});

Deno.test("send() fails a call asleep past its deadline TOOL_WAIT_EXPIRED, without a request", async () => {
  const state = await w.running("send-7");
  const accepted = { result: { job: "j2" }, accepted: { checkAfterMs: 5_000 } };
  const { tool, keys } = shop(() => accepted, { waitDeadlineMs: 10_000 });
  const call = w.callOf(state, 0, tool);
  assert.equal((await leftAt(await send(deps, state, call), state)).status, "waiting");
  await w.clock.advance(10_000);
  const row = await leftAt(await send(deps, state, call), state);
  assert.equal(row.status, "failed");
  assert.match(
    row.error ?? "",
    /^shop: the remote accepted call send-7:0 but had not finished it by its deadline/,
  );
  assert.equal(keys.length, 1);
});
