/**
 * Limits shared by the fleet, in the step, driven by a manual clock on one
 * embedded database: a model request past its limit lets the run go (waiting
 * for the key, no lease) and is taken again when the window has aged; a
 * provider's Retry-After holds its key for every run, then one probe goes; a
 * tool call past its calls in flight waits while the step's other call goes;
 * a worker killed holding a reservation holds it only until its lease ends;
 * an agent without limits sends no statement more.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { CrashPoints, SimulatedKill } from "../base/crashpoints.ts";
import { ModelError } from "../base/errors.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { Planner } from "../model/planner.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";
import { Store } from "../store/store.ts";
import { TapClient } from "../store/counting.ts";
import { defineTool, type Tool, ToolRegistry } from "../agent/tools.ts";
import type { Limit } from "../agent/limit_asks.ts";
import type { CrashPlan } from "../base/crashpoints.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const clock = new ManualClock();
const store = new Store(await openTestPglite());
await store.applySchema();
Deno.test.afterAll(() => store.client.close());
const lines: string[] = [];
const log = new Logger({ clock, sink: arraySink(lines) });

/** A model named `m` at provider `p`: one call of `tool` per step for `steps` steps, then done. */
function model(opts: { steps?: number; tool?: string; calls?: number; fail?: () => Error | undefined } = {}) {
  const asked: DecideRequest[] = [];
  const planner: Planner = {
    describe: "limited",
    model: "m",
    provider: "p",
    decide(req): Promise<PlannerDecision> {
      asked.push(req);
      const failure = opts.fail?.();
      if (failure) return Promise.reject(failure);
      const done =
        req.transcript.filter((t) => t.role === "tool").length >= (opts.steps ?? 1) * (opts.calls ?? 1);
      const usage = { prompt_tokens: 7, completion_tokens: 3 };
      if (done) return Promise.resolve({ kind: "done", text: "ok", usage });
      const call = { name: opts.tool ?? "note", args: { text: "x" } };
      return Promise.resolve({ kind: "tool_calls", calls: Array(opts.calls ?? 1).fill(call), usage });
    },
  };
  return { planner, asked };
}

const note: Tool = defineTool({
  name: "note",
  description: "Notes.",
  args: z.strictObject({ text: z.string() }),
  run: () => Promise.resolve({ result: "noted" }),
});

/** A worker's deps for an agent held to `limits`, with `planner`, crashing as `crash` says. */
function deps(limits: Limit[], planner: Planner, crash?: CrashPlan) {
  const kill = (point: string, seq: number) => Promise.reject(new SimulatedKill(point as never, seq));
  return runDepsFor(
    processDeps({
      store,
      clock,
      log,
      owner: "w1",
      random: () => 0.5,
      crash: crash ? new CrashPoints(crash, { log, clock, kill }) : undefined,
    }),
    agentDeps(
      {
        agent: { name: "limited", instructions: "Test.", tools: [], maxSteps: 10, limits },
        planner,
        tools: new ToolRegistry([note]),
      } as never,
      { retry: { holdSlotMaxMs: 0 } },
    ),
  );
}

const drive = (d: ReturnType<typeof deps>, runId: string) => claimAndDrive(d, { runId, goal: "g" });
const run = async (runId: string) => (await store.reads.getRun(runId))!;

Deno.test("a model request past its limit lets the run go waiting for the key, and goes when the window has aged", async () => {
  const { planner, asked } = model({ steps: 1 });
  const d = deps([{ model: "m", requestsPerMinute: 60, windowS: 1 }], planner);
  const t0 = clock.now().getTime();
  const first = await drive(d, "m-1");
  assert.equal(first.status, "waiting", "the second request of the run met the first in its window");
  assert.equal(asked.length, 1);
  const waiting = await run("m-1");
  assert.equal(waiting.status, "waiting");
  assert.equal(waiting.heartbeat_at, null, "it holds no lease");
  assert.equal(new Date(waiting.wake_at!).getTime(), t0 + 1_000);
  assert.match(
    waiting.error!,
    /^Waiting until .* for the limit on model:m \(1 request per 1 s\): the model's request for step 1 waits for a request of the window to age out$/,
  );
  await clock.advance(1_000);
  assert.equal((await drive(d, "m-1")).status, "done");
  assert.equal(asked.length, 2);
  const reservations = await store.client.query<
    { input_tokens: number; output_tokens: number; released: boolean }
  >(
    "select input_tokens, output_tokens, released_at is not null as released from limit_reservations where run_id = 'm-1' order by id",
  );
  assert.deepEqual(reservations.map((r) => [r.input_tokens, r.output_tokens, r.released]), [[7, 3, true], [
    7,
    3,
    true,
  ]], "settled to the answers' usage");
});

Deno.test("a Retry-After holds the provider's keys for every run; after it one probe goes alone", async () => {
  let failNext = true;
  const failing = () => {
    if (!failNext) return undefined;
    failNext = false;
    return new ModelError("MODEL_HTTP", "The model answered HTTP 429", {
      transient: true,
      retryAfterMs: 5_000,
    });
  };
  const { planner, asked } = model({ steps: 0, fail: failing });
  const d = deps([{ model: "m", requestsPerMinute: 1_000 }, { provider: "p", inFlight: 10 }], planner);
  const t0 = clock.now().getTime();
  assert.equal((await drive(d, "h-1")).status, "waiting", "its own retry waits out the Retry-After");
  const other = await drive(d, "h-2");
  assert.equal(other.status, "waiting");
  assert.equal(asked.length, 1, "the other run sent nothing while the key was held");
  const held = await run("h-2");
  assert.equal(new Date(held.wake_at!).getTime(), t0 + 5_000);
  assert.match(held.error!, /limit on model:m .*waits out the provider's Retry-After, held for every worker/);
  assert.equal(lines.filter((l) => l.includes("event=limit-held")).length, 1);
  await clock.advance(5_000);
  assert.equal((await drive(d, "h-1")).status, "done", "the probe answered: the key is open again");
  assert.equal((await drive(d, "h-2")).status, "done");
  const keys = await store.limits.list(clock.now(), new Date(clock.now().getTime() - 12_000));
  assert.deepEqual(
    keys.filter((k) => k.key === "model:m" || k.key === "provider:p").map((k) => [k.key, k.holds, k.probing]),
    [["model:m", 1, false], ["provider:p", 1, false]],
  );
});

Deno.test("a tool call past its calls in flight waits while the step's other call is sent", async () => {
  const { planner } = model({ steps: 1, calls: 2 });
  const d = deps([{ tool: "note", inFlight: 1 }], planner);
  const first = await drive(d, "t-1");
  assert.equal(first.status, "waiting");
  const { effects } = await store.reads.loadHistory("t-1");
  assert.deepEqual(effects.map((e) => [e.seq, e.status]), [[0, "confirmed"]], "one sent, the other not yet");
  assert.match(
    (await run("t-1")).error!,
    /limit on tool:note \(1 in flight\): call t-1:1 \(note\) waits for a call in flight to end/,
  );
  await clock.advance(2_000);
  assert.equal((await drive(d, "t-1")).status, "done");
  const after = await store.reads.loadHistory("t-1");
  assert.deepEqual(after.effects.map((e) => [e.seq, e.status, e.attempts]), [[0, "confirmed", 1], [
    1,
    "confirmed",
    1,
  ]]);
});

Deno.test("a worker killed while it holds a reservation holds it until its lease ends, not after", async () => {
  const limits: Limit[] = [{ tool: "note", inFlight: 1 }];
  const killed = deps(limits, model({ steps: 1 }).planner, {
    crashAt: "after_intent",
    crashSeq: 0,
    stallMs: 0,
  });
  await assert.rejects(drive(killed, "k-1"), SimulatedKill);
  const d = deps(limits, model({ steps: 1 }).planner);
  assert.equal((await drive(d, "k-2")).status, "waiting", "the dead worker's call still holds the slot");
  assert.match((await run("k-2")).error!, /waits for a call in flight to end/);
  await clock.advance(11_000);
  assert.equal((await drive(d, "k-2")).status, "waiting", "within the lease it is held");
  await clock.advance(2_000); // k-2 wakes at 13 s; k-1's lease (12 s) has ended: its worker is gone, and so is what it held
  assert.equal((await drive(d, "k-2")).status, "done");
  assert.equal(
    (await drive(d, "k-1")).status,
    "done",
    "the killed run recovers: its call re-sent under its key",
  );
});

Deno.test("an agent without limits sends no statement about them", async () => {
  const calls: string[] = [];
  const spy = new Proxy(store.limits, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls.push(String(prop));
        return value.apply(target, args);
      };
    },
  });
  const d = runDepsFor(
    processDeps({ store: store.withAudiences({ limits: spy }), clock, log, owner: "w1", random: () => 0.5 }),
    agentDeps(
      {
        agent: { name: "free", instructions: "Test.", tools: [], maxSteps: 10 },
        planner: model().planner,
        tools: new ToolRegistry([note]),
      } as never,
    ),
  );
  const before = lines.length;
  assert.equal((await claimAndDrive(d, { runId: "free-1", goal: "g" })).status, "done");
  assert.deepEqual(calls, []);
  assert.equal(lines.slice(before).filter((l) => l.includes("event=limited")).length, 0);
});

Deno.test("what a run costs under limits: a take and a release for each limited request, and no other statement", async () => {
  const sent = async (runId: string, limits: Limit[]) => {
    const names: string[] = [];
    const tapped = new Store(new TapClient(store.client, ({ opts }) => void names.push(opts?.name ?? "?")));
    const d = runDepsFor(
      processDeps({ store: tapped, clock, log, owner: "w1", random: () => 0.5 }),
      agentDeps(
        {
          agent: { name: "limited", instructions: "Test.", tools: [], maxSteps: 10, limits },
          planner: model({ steps: 1 }).planner,
          tools: new ToolRegistry([note]),
        } as never,
      ),
    );
    await clock.advance(60_000); // every earlier test's window has aged
    assert.equal((await claimAndDrive(d, { runId, goal: "g" })).status, "done");
    return names;
  };
  const free = await sent("cost-0", []);
  const modelOnly = await sent("cost-1", [{ model: "m", requestsPerMinute: 1_000 }]);
  const both = await sent("cost-2", [{ model: "m", requestsPerMinute: 1_000 }, {
    tool: "note",
    inFlight: 5,
  }]);
  const more = (names: string[]) => {
    const extra = [...names];
    for (const n of free) extra.splice(extra.indexOf(n), 1);
    return extra.sort();
  };
  // Two model requests (one decides the call, one the answer) and one tool call.
  assert.deepEqual(more(modelOnly), ["limit-release", "limit-release", "limit-take", "limit-take"]);
  assert.deepEqual(more(both), [
    "limit-release",
    "limit-release",
    "limit-release",
    "limit-take",
    "limit-take",
    "limit-take",
  ]);
  assert.equal(free.length, 9, "3 a run, 4 for the tool step, 2 for the answer");
});
