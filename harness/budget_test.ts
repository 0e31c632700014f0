/**
 * Budgets that survive crashes: with a tight token ceiling, no crash point on
 * any step, and no run of lost answers, makes the model bill more than the
 * ceiling plus one request. The reservation is visible in the journal while a
 * request is out, and settled at its confirm.
 */

import assert from "node:assert/strict";
import demoAgent from "../examples/provision/agent.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { spendOf } from "../runtime/agent/budget.ts";
import { CRASH_POINTS } from "../runtime/base/crashpoints.ts";
import { type ProcessHooks, seededRandom, SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const db = await openTestSim();

function budgeted(tokens: number, maxSteps?: number) {
  return defineAgent({
    name: "provision",
    instructions: demoAgent.instructions,
    tools: demoAgent.tools,
    defaultInput: demoAgent.defaultInput as string,
    budget: { tokens, maxOutputTokens: 200 },
    maxSteps,
  });
}

/** Runs `runId` to its end, restarting after each crash (bounded). */
async function runToEnd(
  world: SimWorld,
  runId: string,
  plans: { crashAt?: string; crashSeq?: number }[],
  hooks?: ProcessHooks,
) {
  for (let i = 0; i < 12; i++) {
    const plan = plans[i] ?? {};
    const exit = await world.spawn({ runId, plan: plan as never, hooks }).exit;
    if (exit.kind === "exited") return exit.outcome;
    if (exit.kind === "error") throw new Error(exit.error);
  }
  throw new Error(`${runId} never ended`);
}

Deno.test("a clean run's reservations are all settled, and the spend is what the model billed", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(100_000) });
  const outcome = await runToEnd(world, "b-clean", []);
  assert.equal(outcome.status, "done");
  const snap = await world.snapshot("b-clean");
  assert.ok(snap.journal.every((j) => j.reserved_tokens === 0), "every reservation settled at its confirm");
  const spent = snap.journal.reduce(
    (n, j) => n + Number((j.usage as { total_tokens: number }).total_tokens),
    0,
  );
  assert.equal(spent, world.model.tokens("b-clean"), "the spend is what the model billed");
  assert.deepEqual(snap.run?.budget, { tokens: 100_000, maxOutputTokens: 200 });
});

Deno.test("with a tight token ceiling, no crash point on any step bills more than the ceiling plus one request", async (t) => {
  // A clean run's bill, to set the ceiling at about two thirds of it.
  await db.freshSchema();
  const probe = await SimWorld.open(db);
  await runToEnd(probe, "b-probe", []);
  const clean = probe.model.tokens("b-probe");
  const ceiling = Math.floor(clean * 0.66);
  for (const point of CRASH_POINTS) {
    for (const seq of [0, 1, 2]) {
      await t.step(`${point} seq=${seq}`, async () => {
        await db.freshSchema();
        const world = await SimWorld.open(db, { agent: budgeted(ceiling) });
        const runId = `b-${point}-${seq}`;
        const outcome = await runToEnd(world, runId, [{ crashAt: point, crashSeq: seq }]);
        const billed = world.model.tokens(runId);
        const calls = Math.max(1, world.model.calls(runId));
        const oneRequest = Math.ceil(billed / calls) * 2; // generous bound on a single request's bill
        assert.ok(
          billed <= ceiling + oneRequest,
          `${runId}: billed ${billed} > ceiling ${ceiling} + ${oneRequest}`,
        );
        const snap = await world.snapshot(runId);
        if (outcome.status === "failed") {
          assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED: budget: \d+ tokens spent or reserved/);
        } else {
          assert.equal(outcome.status, "done");
        }
        // What the database counts (reported usage plus standing reservations) never passes the ceiling.
        const counted = snap.journal.reduce(
          (n, j) =>
            n + Number((j.usage as { total_tokens?: number } | null)?.total_tokens ?? 0) + j.reserved_tokens,
          0,
        );
        assert.ok(counted <= ceiling + oneRequest, `${runId}: counted ${counted}`);
      });
    }
  }
});

Deno.test("answers lost again and again keep their reservations: the run stops at the ceiling, never past it", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(2_000) });
  const plans = Array.from({ length: 10 }, () => ({ crashAt: "after_decide_before_journal", crashSeq: 0 }));
  const outcome = await runToEnd(world, "b-lost", plans);
  assert.equal(outcome.status, "failed");
  const snap = await world.snapshot("b-lost");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/);
  assert.equal(snap.journal[0].status, "intent", "no answer was ever recorded");
  assert.ok(snap.journal[0].reserved_tokens > 0, "the lost answers' reservations stand");
  assert.ok(snap.journal[0].reserved_tokens <= 2_000, "the reservations never passed the ceiling");
  assert.ok(world.model.tokens("b-lost") <= 2_000, `billed ${world.model.tokens("b-lost")}`);
});

Deno.test("with a tight token ceiling, seeded multi-crash schedules never bill past the ceiling plus one request", async () => {
  await db.freshSchema();
  const probe = await SimWorld.open(db);
  await runToEnd(probe, "b-probe-multi", []);
  const ceiling = Math.floor(probe.model.tokens("b-probe-multi") * 0.7);
  let stopped = 0;
  for (let seed = 1; seed <= 30; seed++) {
    await db.freshSchema();
    const random = seededRandom(seed);
    const world = await SimWorld.open(db, { agent: budgeted(ceiling), seed });
    const runId = `b-multi-${seed}`;
    // Four crashes at distinct points, each on a step drawn from the seed, then restarts to the end.
    const points = [...CRASH_POINTS].sort(() => random() - 0.5).slice(0, 4);
    const plans = points.map((point) => ({ crashAt: point, crashSeq: Math.floor(random() * 4) }));
    const outcome = await runToEnd(world, runId, plans);
    const billed = world.model.tokens(runId);
    const oneRequest = Math.ceil(billed / Math.max(1, world.model.calls(runId))) * 2;
    assert.ok(billed <= ceiling + oneRequest, `seed=${seed}: billed ${billed} > ${ceiling} + ${oneRequest}`);
    const snap = await world.snapshot(runId);
    if (outcome.status === "failed") {
      stopped++;
      assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/, `seed=${seed}`);
    } else assert.equal(outcome.status, "done", `seed=${seed}`);
    const keys = snap.created.map((c) => c.key);
    assert.equal(new Set(keys).size, keys.length, `seed=${seed}: one effect per key`);
  }
  assert.ok(stopped > 0, "the ceiling stopped some runs (it is tight)");
});

/** The usage an answer of the mock model reported, and the request it answered. */
interface Answered {
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  sent: { max_tokens?: number };
  /** The answer's number among this world's model requests, from 1. */
  n: number;
}

/**
 * A server that reports usage its own way: each answer of the mock model is
 * passed on with the usage `report` gives (`undefined`: none at all), and
 * `billed` is what that answer really cost (the truth the ceiling is checked
 * against). Counts the requests and the cap each asked for.
 */
function usageServer(
  report: (a: Answered) => { reported: unknown; billed: number; args?: string },
): { hooks: ProcessHooks; bill: { tokens: number; requests: number; caps: (number | undefined)[] } } {
  const bill = { tokens: 0, requests: 0, caps: [] as (number | undefined)[] };
  const hooks: ProcessHooks = {
    wrapFetch: (remote, fetch) =>
      remote !== "model" ? fetch : async (req) => {
        const sent = await req.clone().json();
        const answer = await (await fetch(req)).json();
        bill.requests++;
        bill.caps.push(sent.max_tokens);
        const { reported, billed, args } = report({ usage: answer.usage, sent, n: bill.requests });
        bill.tokens += billed;
        if (reported === undefined) delete answer.usage;
        else answer.usage = reported;
        const call = answer.choices?.[0]?.message?.tool_calls?.[0];
        if (args !== undefined && call) call.function.arguments = args;
        return Response.json(answer);
      },
  };
  return { hooks, bill };
}

/** A script of `n` tool calls (new names each), for runs long enough to meet their ceiling. */
function manySteps(n: number) {
  return Array.from(
    { length: n },
    () => ({ tool: "create_server", args: { name: "srv-{n}", spec: "small" } }),
  );
}

/** Runs `runId` (a long script) under `report`, and checks the ceiling against what was billed and counted. */
async function longRunUnder(
  runId: string,
  ceiling: number,
  report: Parameters<typeof usageServer>[0],
) {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(ceiling, 200) });
  world.model.setScript({ run: runId, steps: manySteps(100) });
  const { hooks, bill } = usageServer(report);
  const outcome = await runToEnd(world, runId, [], hooks);
  const snap = await world.snapshot(runId);
  const counted = spendOf(snap.journal, snap.effects).tokens;
  return { outcome, snap, counted, bill };
}

Deno.test("with no usage in the model's answers the ceiling holds: each answer counts what its request reserved", async () => {
  const { outcome, snap, counted, bill } = await longRunUnder(
    "b-nousage",
    20_000,
    (a) => ({ reported: undefined, billed: a.usage.total_tokens }),
  );
  assert.equal(outcome.status, "failed", "100 steps cost more than the ceiling");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/);
  assert.ok(bill.tokens <= 20_000, `billed ${bill.tokens} of a 20000 ceiling in ${bill.requests} requests`);
  assert.ok(counted <= 20_000, `counted ${counted}`);
  assert.ok(
    counted >= bill.tokens,
    `no answer counted less than it cost: counted ${counted}, billed ${bill.tokens}`,
  );
  assert.ok(snap.journal.every((j) => j.reserved_tokens === 0), "each reservation settled, as spent");
});

Deno.test("a negative or inconsistent total_tokens never lowers the count: prompt plus completion is counted", async () => {
  const { outcome, snap, counted, bill } = await longRunUnder("b-negusage", 20_000, (a) => ({
    reported: {
      prompt_tokens: a.usage.prompt_tokens,
      completion_tokens: a.usage.completion_tokens,
      total_tokens: -1,
    },
    billed: a.usage.prompt_tokens + a.usage.completion_tokens,
  }));
  assert.equal(outcome.status, "failed");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/);
  assert.ok(bill.tokens <= 20_000, `billed ${bill.tokens} of a 20000 ceiling in ${bill.requests} requests`);
  assert.equal(counted, bill.tokens, "every answer counted prompt plus completion");
});

Deno.test("a budgeted request asks for no more than its reservation: a server that would answer 100,000 tokens stops at the cap", async () => {
  const { outcome, snap, counted, bill } = await longRunUnder("b-capped", 20_000, (a) => {
    // This server writes until it is told to stop.
    const completion = Math.min(100_000, a.sent.max_tokens ?? 100_000);
    const usage = { prompt_tokens: a.usage.prompt_tokens, completion_tokens: completion };
    return { reported: usage, billed: usage.prompt_tokens + completion };
  });
  assert.ok(bill.caps.every((cap) => cap === 200), `each request asked for at most 200 tokens: ${bill.caps}`);
  assert.equal(outcome.status, "failed");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED/);
  assert.ok(bill.tokens <= 20_000, `billed ${bill.tokens} of a 20000 ceiling`);
  assert.ok(counted <= 20_000, `counted ${counted}`);
});

Deno.test("an answer that reports more than its request reserved counts in full, and no request follows it", async () => {
  const { outcome, snap, counted, bill } = await longRunUnder("b-ignored-cap", 20_000, (a) => {
    // A server that ignores the cap on its first answer.
    const usage = a.n === 1 ? { prompt_tokens: 10, completion_tokens: 100_000 } : a.usage;
    return { reported: usage, billed: usage.prompt_tokens + usage.completion_tokens };
  });
  assert.equal(bill.requests, 1, "the count passed the ceiling: nothing more was asked");
  assert.equal(counted, 100_010, "the answer counts what it reported, past its reservation");
  assert.equal(outcome.status, "failed");
  assert.match(snap.run?.error ?? "", /BUDGET_EXCEEDED: budget: 100010 tokens spent or reserved/);
});

Deno.test("an answer refused as unstorable releases its reservation: its tokens are counted once", async () => {
  await db.freshSchema();
  const world = await SimWorld.open(db, { agent: budgeted(100_000) });
  const { hooks, bill } = usageServer((a) => ({
    reported: a.usage,
    billed: a.usage.total_tokens,
    // The first answer names a server with a lone surrogate: refused, and asked again.
    args: a.n === 1 ? JSON.stringify({ name: "srv-\ud800", spec: "small" }) : undefined,
  }));
  const outcome = await runToEnd(world, "b-unstorable", [], hooks);
  assert.equal(outcome.status, "done");
  const snap = await world.snapshot("b-unstorable");
  assert.equal(snap.journal[0].rejections[0]?.code, "MODEL_UNSTORABLE");
  assert.equal(snap.journal[0].llm_attempts, 2);
  assert.equal(snap.journal[0].reserved_tokens, 0, "the refused answer's reservation was released");
  assert.equal(
    spendOf(snap.journal, snap.effects).tokens,
    bill.tokens,
    "each answer counted once, as billed",
  );
});

Deno.test.afterAll(async () => {
  await db.close();
});
