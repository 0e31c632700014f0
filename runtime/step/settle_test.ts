/**
 * The writes that end one request of a tool call (settle.ts), each called
 * directly on PGlite: confirm, failCall, flag and accepted each return the
 * row exactly as the database now holds it, and that row is the one the
 * run's state holds. accepted() puts a call to sleep no sooner than its
 * tool's floor and never past the call's deadline, and fails it instead
 * when the deadline has passed, when its answer is not a valid wait, or when
 * what it returned cannot be stored. Whose retry policy a call follows is
 * toolPolicy's rule.
 */

import assert from "node:assert/strict";
import { accepted, confirm, failCall, flag, toolPolicy } from "./settle.ts";
import { ToolError } from "../base/errors.ts";
import { DEFAULT_RETRY } from "../base/retry.ts";
import { comparable, stepWorld, textTool } from "../testdata/step_world.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());

const render = textTool({ name: "render", waitDeadlineMs: 60_000 });
const deps = w.deps({ tools: [render] });

const ms = (d: Date | null) => d === null ? null : d.getTime();

Deno.test("toolPolicy() takes the tool's own retry fields over its agent's, and only those it sets", () => {
  const tool = textTool({ name: "pay", retry: { horizonMs: 60_000 } });
  const agentPolicy = { ...DEFAULT_RETRY, horizonMs: 3_600_000, backoffBaseMs: 250 };
  const policy = toolPolicy({ retry: agentPolicy }, tool);
  assert.equal(policy.horizonMs, 60_000);
  assert.equal(policy.backoffBaseMs, 250, "what the tool leaves unset is its agent's");
});

Deno.test("confirm(), failCall() and flag() each return the row as stored, applied to the run's state", async () => {
  const state = await w.running("settle-1");
  const [a, b, c] = [0, 1, 2].map((seq) => w.callOf(state, seq, render));
  const confirmed = await confirm(deps, state, await w.intent(state, a), { url: "r/1" }, "already_done");
  assert.deepEqual(
    [confirmed.status, confirmed.result, confirmed.remote, confirmed.error],
    ["confirmed", { url: "r/1" }, "already_done", null],
  );
  await w.held(state, confirmed);

  const declined = new ToolError("RENDER_REFUSED", "the title is too long", { transient: false });
  const failed = await failCall(deps, state, await w.intent(state, b), declined);
  assert.deepEqual([failed.status, failed.error], ["failed", "the title is too long"]);
  await w.held(state, failed);
  assert.equal(
    w.events("tool-failed").filter((l) => / key=settle-1:1 .*code=RENDER_REFUSED /.test(l)).length,
    1,
  );

  const flagged = await flag(deps, state, await w.intent(state, c), "nobody can tell whether it rendered");
  assert.deepEqual([flagged.status, flagged.error], ["flagged", "nobody can tell whether it rendered"]);
  await w.held(state, flagged);
});

Deno.test("accepted() puts the call to sleep until when its remote asked, its deadline fixed by the first answer", async () => {
  const state = await w.running("settle-2");
  const call = w.callOf(state, 0, render);
  const t0 = w.clock.now().getTime();
  const row = await accepted(deps, state, call, await w.intent(state, call), {
    result: { job: "j1" },
    accepted: { checkAfterMs: 5_000 },
  });
  assert.deepEqual(comparable(row), {
    status: "waiting",
    result: { job: "j1" },
    remote: null,
    error: null,
    attempts: 1,
    polls: 0,
    failures: 0,
    check_at: t0 + 5_000,
    wait_deadline_at: t0 + 60_000,
  });
  await w.held(state, row);
});

Deno.test("accepted() asks again no sooner than the tool's floor, however soon the remote asks", async () => {
  const state = await w.running("settle-3");
  const call = w.callOf(state, 0, render);
  const row = await accepted(deps, state, call, await w.intent(state, call), {
    result: { job: "j2" },
    accepted: { checkAfterMs: 1 },
  });
  assert.equal(ms(row.check_at), w.clock.now().getTime() + render.minCheckAfterMs);
  assert.equal(
    w.events("check-after-raised").filter((l) => / key=settle-3:0 .*asked_ms=1 /.test(l)).length,
    1,
  );
  await w.held(state, row);
});

Deno.test("accepted() never sleeps past the call's deadline, and past it fails TOOL_WAIT_EXPIRED", async () => {
  const state = await w.running("settle-4");
  const call = w.callOf(state, 0, render);
  const t0 = w.clock.now().getTime();
  const job = { result: { job: "j3" }, accepted: { checkAfterMs: 50_000 } };
  assert.equal(
    ms((await accepted(deps, state, call, await w.intent(state, call), job)).check_at),
    t0 + 50_000,
  );
  await w.clock.advance(50_000);
  // Asked again (a poll), the remote says 50 s more: the call sleeps only until its deadline, at 60 s.
  const capped = await accepted(deps, state, call, await w.intent(state, call), job);
  assert.deepEqual([capped.status, capped.polls, ms(capped.check_at)], ["waiting", 1, t0 + 60_000]);
  await w.held(state, capped);
  await w.clock.advance(10_000);
  const expired = await accepted(deps, state, call, await w.intent(state, call), job);
  assert.equal(expired.status, "failed");
  assert.match(
    expired.error ?? "",
    /^render: the remote accepted call settle-4:0 but had not finished it by its deadline/,
  );
  assert.equal(
    w.events("tool-failed").filter((l) => / key=settle-4:0 .*code=TOOL_WAIT_EXPIRED /.test(l)).length,
    1,
  );
  await w.held(state, expired);
});

Deno.test("accepted() fails the call for good when the answer is no valid wait or cannot be stored", async (t) => {
  const state = await w.running("settle-5");
  const cases = [
    { name: "a wait of 0 ms", seq: 0, result: { job: "j" }, checkAfterMs: 0, code: "TOOL_ACCEPTED_INVALID" },
    {
      name: "a BigInt in the result",
      seq: 1,
      result: { job: 1n },
      checkAfterMs: 5_000,
      code: "TOOL_RESULT_UNSTORABLE",
    },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const call = w.callOf(state, c.seq, render);
      const row = await accepted(deps, state, call, await w.intent(state, call), {
        result: c.result as never,
        accepted: { checkAfterMs: c.checkAfterMs },
      });
      assert.equal(row.status, "failed");
      assert.equal(row.check_at, null, "a failed call sleeps on nothing");
      const line = w.events("tool-failed").find((l) => l.includes(` key=${call.key} `));
      assert.match(line ?? "", new RegExp(` code=${c.code} `));
      await w.held(state, row);
    });
  }
});
