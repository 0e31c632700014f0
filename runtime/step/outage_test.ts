import assert from "node:assert/strict";
import { z } from "zod";
import { ManualClock } from "../base/clock.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { ModelError, ToolError } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { RunOutcome } from "../host/outcome.ts";
import type { Planner } from "../model/planner.ts";
import type { RetryPolicy } from "../base/retry.ts";
import { Store } from "../store/store.ts";
import { defineTool, type Tool, ToolRegistry, type ToolSpec } from "../agent/tools.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

// Outages of minutes, driven by a manual clock: a remote (a tool's or the model's) that refuses every
// request for a while. Each failure is recorded on its row; short waits are slept by the worker, longer
// ones let the run go (waiting, no lease) until it is due, and the next worker turn sends the request
// again under the same key. Past the retry horizon, counted from the first failure, it is given up.

const MINUTE = 60_000;

/** A keyed remote that is down until `upAtMs` (manual time): it acts once per key when up. */
class Shop {
  acted = new Map<string, number>();
  requests = 0;
  constructor(readonly clock: ManualClock, public upAtMs: number) {}
  order(key: string): { order: string; remote: "created" | "already_done" } {
    this.requests++;
    if (this.clock.now().getTime() < this.upAtMs) throw new TypeError("fetch failed: connection refused");
    const seen = this.acted.get(key);
    this.acted.set(key, (seen ?? 0) + 1);
    return { order: `order for ${key}`, remote: seen === undefined ? "created" : "already_done" };
  }
}

/** A planner that asks for `lookup` once, then says done; down (MODEL_UNREACHABLE) until `upAtMs`. */
function planner(clock: ManualClock, upAtMs: number): Planner & { asked: number; seen: DecideRequest[] } {
  const p = {
    describe: "script",
    asked: 0,
    seen: [] as DecideRequest[],
    decide(req: DecideRequest): Promise<PlannerDecision> {
      p.asked++;
      p.seen.push(req);
      if (clock.now().getTime() < upAtMs) {
        return Promise.reject(
          new ModelError("MODEL_UNREACHABLE", "The model could not be reached: connection refused", {
            transient: true,
          }),
        );
      }
      const answered = req.transcript.some((m) => m.role === "tool");
      return Promise.resolve(
        answered
          ? { kind: "done", text: "Looked it up." }
          : { kind: "tool_calls", calls: [{ name: "lookup", args: { id: "A1" } }] },
      );
    },
  };
  return p;
}

async function world(opts: {
  toolDownMs?: number;
  modelDownMs?: number;
  retry?: Partial<RetryPolicy>;
  tool?: Partial<ToolSpec<{ id: string }>>;
}) {
  const clock = new ManualClock();
  const start = clock.now().getTime();
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const shop = new Shop(clock, start + (opts.toolDownMs ?? 0));
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const lookup: Tool = defineTool({
    name: "lookup",
    description: "Looks an order up.",
    args: z.strictObject({ id: z.string() }),
    run: (_args, ctx) => {
      const { order, remote } = shop.order(ctx.idempotencyKey);
      return Promise.resolve({ result: order, remote });
    },
    ...opts.tool,
  });
  const model = planner(clock, start + (opts.modelDownMs ?? 0));
  // A fresh process each time (new deps on the same database), as a worker restarted by a supervisor is.
  const deps = (owner = "w1") =>
    runDepsFor(
      processDeps({ store, clock, log, owner, random: () => 0.5, heartbeatMs: 3_000, leaseMs: 12_000 }),
      agentDeps(
        {
          agent: { name: "support", instructions: "Help.", tools: [], maxSteps: 10 },
          planner: model,
          tools: new ToolRegistry([lookup]),
        } as never,
        { retry: opts.retry },
      ),
    );
  return { clock, store, shop, model, deps, lines, start };
}

type World = Awaited<ReturnType<typeof world>>;

/**
 * One worker turn on run `id`, the clock moved on to each sleeper (a backoff slept by the worker, a
 * heartbeat) until the turn ends.
 */
async function turn(w: World, id: string, owner = "w1"): Promise<RunOutcome> {
  let ended = false;
  const p = claimAndDrive(w.deps(owner), id, "Where is order A1?").finally(() => ended = true);
  // Bounded: each pass wakes a sleeper or lets the turn's own work run.
  for (let i = 0; i < 10_000 && !ended; i++) {
    await new Promise((r) => setTimeout(r, 0));
    const next = w.clock.nextWakeAtMs;
    if (!ended && next !== undefined) await w.clock.advance(Math.max(0, next - w.clock.now().getTime()));
  }
  return await p;
}

/** Turns until the run ends, the clock moved to each wake time; the waits it was let go for, in ms. */
async function ride(w: World, id: string): Promise<{ outcome: RunOutcome; waits: number[] }> {
  const waits: number[] = [];
  // Bounded: a run the runtime never ends fails the test at 200 turns.
  for (let i = 0; i < 200; i++) {
    const outcome = await turn(w, id);
    if (outcome.status !== "waiting") return { outcome, waits };
    const run = await w.store.reads.getRun(id);
    assert.equal(run?.status, "waiting");
    assert.equal(run?.heartbeat_at, null, "a run waiting out an outage holds no lease, so no worker slot");
    assert.ok(run?.wake_at, "it says until when");
    assert.match(run?.error ?? "", /failed \d+ times? since .*(asked|sent) again .* given up at /);
    waits.push(new Date(run!.wake_at!).getTime() - w.clock.now().getTime());
    await w.clock.advance(new Date(run!.wake_at!).getTime() - w.clock.now().getTime());
  }
  throw new Error(`run ${id} did not end in 200 turns`);
}

Deno.test("a tool whose remote is down for ten minutes is sent again under its key until it is back, the run holding no slot in between", async () => {
  const w = await world({ toolDownMs: 10 * MINUTE });
  try {
    const { outcome, waits } = await ride(w, "o1");
    assert.equal(outcome.status, "done", w.lines.join("\n"));
    assert.ok(w.clock.now().getTime() - w.start >= 10 * MINUTE, "it finished only once the remote was back");
    // The backoff with the jitter at its middle (0.75 of the ceiling): 375, 750 and 1,500 ms are slept by
    // the worker (no more than holdSlotMaxMs, 2 s); from 3 s on the run is let go, up to the 60 s cap.
    assert.deepEqual(waits.slice(0, 6), [3_000, 6_000, 12_000, 24_000, 45_000, 45_000]);
    assert.ok(waits.every((ms) => ms <= 60_000), `no wait past the cap: ${waits}`);
    const { effects } = await w.store.reads.loadHistory("o1");
    const call = effects[0];
    assert.equal(call.status, "confirmed");
    assert.equal(call.remote, "created", "the remote acted once, on the request that reached it");
    assert.deepEqual([...w.shop.acted], [["o1:0", 1]], "one effect, under the call's key");
    assert.equal(call.attempts, call.failures + 1, "every request but the last failed, each one recorded");
    assert.equal(w.shop.requests, call.attempts);
    assert.ok(call.failures >= 10, `a ten-minute outage is many failures: ${call.failures}`);
    assert.equal(w.model.asked, 2, "the model was asked once per step: the outage cost no model request");
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a tool still failing at its retry horizon fails the run TOOL_GAVE_UP, saying how long and how to go on", async () => {
  const w = await world({ toolDownMs: 60 * MINUTE, retry: { horizonMs: 5 * MINUTE } });
  try {
    const { outcome } = await ride(w, "o2");
    assert.equal(outcome.status, "failed");
    assert.match(
      outcome.error ?? "",
      /^TOOL_GAVE_UP: Tool call o2:0 \(lookup\) failed \d+ times over 5 min \(the retry horizon is 5 min, counted from its first failure, across restarts\); last error: TypeError: fetch failed.*'deno task reopen o2' sends it again under its key$/,
    );
    // The last request went out at the horizon, not a backoff past it.
    assert.equal(w.clock.now().getTime() - w.start, 5 * MINUTE);
    const { effects } = await w.store.reads.loadHistory("o2");
    assert.equal(effects[0].status, "intent", "its outcome is unknown: left at intent");
    assert.equal(w.shop.acted.size, 0);
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a tool may let a failure past its horizon become its answer: the model sees it and the run goes on", async () => {
  const w = await world({
    toolDownMs: 60 * MINUTE,
    retry: { horizonMs: 30 * MINUTE },
    tool: { retry: { horizonMs: 2 * MINUTE }, onGiveUp: "answer" },
  });
  try {
    const { outcome } = await ride(w, "o3");
    assert.equal(outcome.status, "done", w.lines.join("\n"));
    assert.equal(
      w.clock.now().getTime() - w.start,
      2 * MINUTE,
      "the tool's own horizon wins over the agent's",
    );
    const { effects } = await w.store.reads.loadHistory("o3");
    assert.equal(effects[0].status, "failed");
    assert.match(effects[0].error ?? "", /^lookup is unavailable: its request failed \d+ times over 2 min/);
    const told = w.model.seen.at(-1)!.transcript.find((m) => m.role === "tool");
    assert.match(JSON.stringify(told), /lookup is unavailable/);
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a model whose server is down for ten minutes is asked again until it is back: the run waits without a slot, no step decided twice", async () => {
  const w = await world({ modelDownMs: 10 * MINUTE });
  try {
    const { outcome, waits } = await ride(w, "m1");
    assert.equal(outcome.status, "done", w.lines.join("\n"));
    assert.deepEqual(waits.slice(0, 4), [3_000, 6_000, 12_000, 24_000]);
    const { journal } = await w.store.reads.loadHistory("m1");
    assert.equal(journal.length, 2);
    assert.equal(
      journal[0].llm_attempts,
      journal[0].failures + 1,
      "each failed request recorded, then one answer",
    );
    assert.ok(journal[0].failures >= 10);
    assert.equal(journal[1].llm_attempts, 1);
    assert.equal(w.model.asked, journal[0].llm_attempts + 1, "every request counted before it went out");
    assert.deepEqual([...w.shop.acted], [["m1:0", 1]]);
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a model down past its retry horizon fails MODEL_GAVE_UP; the horizon is counted from the first failure across restarts", async () => {
  const w = await world({ modelDownMs: 60 * MINUTE, retry: { horizonMs: 10 * MINUTE } });
  try {
    // A first worker meets the outage and lets the run go; the next turns are new processes (w2, w3, ...).
    let outcome = await turn(w, "m2", "w1");
    assert.equal(outcome.status, "waiting");
    for (let i = 2; i < 200 && outcome.status === "waiting"; i++) {
      const run = await w.store.reads.getRun("m2");
      await w.clock.advance(new Date(run!.wake_at!).getTime() - w.clock.now().getTime());
      outcome = await turn(w, "m2", `w${i}`);
    }
    assert.equal(outcome.status, "failed");
    assert.match(
      outcome.error ?? "",
      /^MODEL_GAVE_UP: The model failed \d+ requests for step 0 over 10 min \(the retry horizon is 10 min, counted from the first failure, across restarts\); last error: MODEL_UNREACHABLE/,
    );
    assert.equal(w.clock.now().getTime() - w.start, 10 * MINUTE);
  } finally {
    await w.store.client.close();
  }
});

Deno.test("failures the worker recorded count as progress: a run waiting out a long outage is never taken for stuck", async () => {
  // maxClaimsWithoutProgress is 5: a run let go and taken again 20 times must not be failed as stuck.
  const w = await world({ toolDownMs: 30 * MINUTE });
  try {
    const { outcome, waits } = await ride(w, "o4");
    assert.equal(outcome.status, "done", outcome.error);
    assert.ok(waits.length > 20, `taken again ${waits.length} times`);
  } finally {
    await w.store.client.close();
  }
});

Deno.test("a tool error with Retry-After is waited as the remote asked, within the cap", async () => {
  const w = await world({
    tool: {
      run: (_a, _ctx) =>
        Promise.reject(new ToolError("SHOP_HTTP", "HTTP 429", { transient: true, retryAfterMs: 120_000 })),
      retry: { horizonMs: 10 * MINUTE },
    },
    retry: { retryAfterMaxMs: 90_000 },
  });
  try {
    const first = await turn(w, "o5");
    assert.equal(first.status, "waiting");
    const run = await w.store.reads.getRun("o5");
    assert.equal(new Date(run!.wake_at!).getTime() - w.clock.now().getTime(), 90_000);
  } finally {
    await w.store.client.close();
  }
});
