import assert from "node:assert/strict";
import { z } from "zod";
import { type Agent, defineAgent } from "../agent/agent.ts";
import { ManualClock, settle } from "../base/clock.ts";
import { WorkerHost } from "./host.ts";
import { arraySink, Logger } from "../base/log.ts";
import type { Planner } from "../model/planner.ts";
import { type Fence, type QueryOptions, type SqlClient, Store } from "../store/store.ts";
import { defineTool, type Tool, ToolRegistry } from "../agent/tools.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

/** Records the name of every statement, so a test can count one kind. */
class RecordingClient implements SqlClient {
  readonly names: (string | undefined)[] = [];
  constructor(readonly inner: SqlClient) {}
  get describe(): string {
    return this.inner.describe;
  }
  query<T>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    this.names.push(opts?.name);
    return this.inner.query<T>(text, params, opts);
  }
  run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number> {
    this.names.push(opts?.name);
    return this.inner.run(text, params, opts);
  }
  exec(text: string): Promise<void> {
    return this.inner.exec(text);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const db = new RecordingClient(await openTestPglite());
const store = new Store(db);
await store.applySchema();

/** An agent whose model thinks for `thinkMs` of clock time (0: answers at once), then calls `note` once, then is done. */
function slowAgent(name: string, clock: ManualClock, thinkMs: number, effects: string[]): Agent {
  const model: Planner = {
    describe: "slow script",
    decide: async (req) => {
      if (thinkMs > 0) await clock.sleep(thinkMs, req.signal);
      return req.seq === 0
        ? { kind: "tool_calls", calls: [{ name: "note", args: { text: req.runId } }] }
        : { kind: "done", text: `noted ${req.runId}` };
    },
  };
  return defineAgent({
    name,
    tools: [defineTool({
      name: "note",
      description: "Writes a note.",
      args: z.strictObject({ text: z.string() }),
      run: (args, ctx) => {
        effects.push(ctx.idempotencyKey);
        return Promise.resolve({ result: args.text });
      },
    })],
    model,
  });
}

function host(agent: Agent, clock: ManualClock, lines: string[], runsPerWorker: number, owner = "host-1") {
  return new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    owner,
    agents: [{ agent, planner: agent.model as Planner, tools: new ToolRegistry(agent.tools as Tool[]) }],
    runsPerWorker,
    pollMs: 1_000,
    heartbeatMs: 3_000,
    leaseMs: 12_000,
  });
}

async function until(check: () => Promise<boolean>, clock: ManualClock, stepMs = 500): Promise<void> {
  // Bounded: at most 400 clock steps.
  for (let i = 0; i < 400; i++) {
    if (await check()) return;
    await clock.advance(stepMs);
    await settle();
  }
  throw new Error("condition never held");
}

Deno.test("a worker host drives many runs at once and renews all their leases with one statement", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const agent = slowAgent("noter", clock, 5_000, effects);
  for (let i = 0; i < 12; i++) {
    await store.leases.createRun({ runId: `many-${i}`, agent: "noter", goal: "note it" }, clock.now());
  }
  await store.leases.createRun({ runId: "not-mine", agent: "someone-else", goal: "x" }, clock.now());
  const h = host(agent, clock, lines, 8).start();
  await settle();
  assert.equal(h.active, 8, "it takes as many runs as it has slots");
  db.names.length = 0;
  await clock.advance(3_000); // one heartbeat while all eight wait on the model
  await settle();
  const heartbeats = db.names.filter((n) => n === "heartbeat-many");
  assert.equal(heartbeats.length, 1, "one statement renews eight leases");
  const renewed = (await store.operators.listRuns({ agent: "noter", limit: 100 })).runs.filter((r) =>
    r.heartbeat_at && new Date(r.heartbeat_at).getTime() === clock.now().getTime()
  );
  assert.equal(renewed.length, 8);

  await until(
    async () => (await store.operators.listRuns({ agent: "noter", status: "done", limit: 100 })).total === 12,
    clock,
  );
  assert.deepEqual(effects.sort(), Array.from({ length: 12 }, (_, i) => `many-${i}:0`).sort());
  assert.equal(
    (await store.reads.getRun("not-mine"))?.status,
    "pending",
    "a run of an agent it does not host waits",
  );
  assert.equal((await store.reads.getRun("many-3"))?.output, "noted many-3", "the final answer is stored");
  assert.deepEqual(await store.leases.hostedAgents(new Date(clock.now().getTime() - 12_000)), ["noter"]);
  await h.stop();
  assert.deepEqual(
    await store.leases.hostedAgents(new Date(0)),
    [],
    "a stopped host leaves the workers table",
  );
});

Deno.test("a refused renewal stops only that run; a stopped host frees its runs for the next taker", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const agent = slowAgent("canceller", clock, 10_000, effects);
  for (const id of ["keep-1", "keep-2", "cancel-me"]) {
    await store.leases.createRun({ runId: id, agent: "canceller", goal: "note it" }, clock.now());
  }
  const h = host(agent, clock, lines, 10, "host-2").start();
  await settle();
  assert.equal(h.active, 3);
  await store.families.cancel("cancel-me", "cancelled by test", clock.now());
  await clock.advance(3_000);
  await settle();
  assert.ok(lines.some((l) => /event=heartbeat-refused run=cancel-me/.test(l)), lines.join("\n"));
  assert.equal(h.active, 2, "the cancelled run's model request was cut off");
  assert.equal(effects.length, 0);
  await h.stop();
  for (const id of ["keep-1", "keep-2"]) {
    const run = await store.reads.getRun(id);
    assert.equal(run?.status, "running");
    assert.equal(run?.heartbeat_at, null, `${id} is takeable at once`);
  }
  const taken = await store.leases.takeRuns("host-3", ["canceller"], clock.now(), clock.now(), 10);
  assert.deepEqual(taken.map((r) => [r.run_id, r.epoch]).sort(), [["keep-1", 2], ["keep-2", 2]]);
});

/** Holds each take's answer until `release()`, once the statement itself has run. */
class GatedTakes extends RecordingClient {
  #gate: Promise<void> | undefined;
  #open = () => {};
  /** Takes from now on wait, after running, until {@link release}. */
  hold(): void {
    this.#gate = new Promise((r) => this.#open = r);
  }
  release(): void {
    this.#open();
    this.#gate = undefined;
  }
  override async query<T>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    const rows = await super.query<T>(text, params, opts);
    if (opts?.name === "take-runs") await this.#gate;
    return rows;
  }
}

Deno.test("a host takes the next run as soon as it is woken, even by a wake that came while it was polling", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const gated = new GatedTakes(db);
  const agent = slowAgent("doorbell", clock, 0, effects);
  gated.hold();
  const h = new WorkerHost({
    store: new Store(gated),
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    owner: "host-doorbell",
    agents: [{ agent, planner: agent.model as Planner, tools: new ToolRegistry(agent.tools as Tool[]) }],
    runsPerWorker: 2,
    pollMs: 60_000, // the clock never gets there: every take below comes from a wake
    heartbeatMs: 3_000,
    leaseMs: 12_000,
  }).start();
  const done = async (n: number) =>
    (await store.operators.listRuns({ agent: "doorbell", status: "done", limit: 100 })).total === n;
  const eventually = async (check: () => Promise<boolean>) => {
    // Bounded: real turns of the event loop, the clock standing still.
    for (let i = 0; i < 200 && !(await check()); i++) await settle(1);
    return await check();
  };
  // The first poll's take has run (nothing to take) and waits at the gate: the host is polling.
  assert.ok(
    await eventually(() => Promise.resolve(gated.names.includes("take-runs"))),
  );
  await store.leases.createRun({ runId: "bell-1", agent: "doorbell", goal: "note it" }, clock.now());
  h.wake(); // while polling: the nap after this poll must end at once
  gated.release();
  assert.ok(await eventually(() => done(1)), lines.join("\n"));
  // Napping now: a wake ends the nap.
  await store.leases.createRun({ runId: "bell-2", agent: "doorbell", goal: "note it" }, clock.now());
  h.wake();
  assert.ok(await eventually(() => done(2)), lines.join("\n"));
  assert.equal(clock.now().getTime(), new ManualClock().now().getTime(), "the clock never moved");
  // Stopping ends the nap too.
  await h.stop();
  assert.deepEqual(effects.sort(), ["bell-1:0", "bell-2:0"]);
});

/**
 * An agent whose model decides (after `thinkMs` of clock time) to call `work`
 * once, then is done. A call for a run whose id starts with `poison` has an
 * approval rule that throws: an error the runtime does not classify.
 */
function poisonedAgent(name: string, clock: ManualClock, effects: string[], ruleCalls: string[]): Agent {
  const model: Planner = {
    describe: "poison script",
    decide: async (req) => {
      await clock.sleep(5_000, req.signal);
      return req.seq === 0
        ? { kind: "tool_calls", calls: [{ name: "work", args: { poison: req.runId.startsWith("poison") } }] }
        : { kind: "done", text: `worked ${req.runId}` };
    },
  };
  return defineAgent({
    name,
    tools: [defineTool({
      name: "work",
      description: "Works.",
      args: z.strictObject({ poison: z.boolean() }),
      approval: (args) => {
        if (!args.poison) return false;
        ruleCalls.push("called");
        throw new TypeError("the approval rule broke");
      },
      run: (_args, ctx) => {
        effects.push(ctx.idempotencyKey);
        return Promise.resolve({ result: "worked" });
      },
    })],
    model,
  });
}

/** The logfmt fields of each line with event `event` about run `run`. */
function eventsOf(lines: string[], event: string, run: string): string[] {
  return lines.filter((l) => l.includes(` event=${event} `) && l.includes(` run=${run} `));
}

Deno.test("a run that throws an unclassified error is let go and retried up to the bound, naming the error, while its host's other runs go on", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const ruleCalls: string[] = [];
  const agent = poisonedAgent("poisoned", clock, effects, ruleCalls);
  const fine = ["fine-1", "fine-2", "fine-3", "fine-4"];
  for (const id of ["poison-1", ...fine]) {
    await store.leases.createRun({ runId: id, agent: "poisoned", goal: "work" }, clock.now());
  }
  const startMs = clock.now().getTime();
  const h = host(agent, clock, lines, 10, "host-poison").start();
  await until(async () => (await store.reads.getRun("poison-1"))?.status === "failed", clock);
  const failedAfterMs = clock.now().getTime() - startMs;
  await until(
    async () => (await store.operators.listRuns({ agent: "poisoned", status: "done" })).total === 4,
    clock,
  );
  await h.stop();

  // The healthy runs: each claimed once by the one host, its call sent once.
  assert.deepEqual(effects.sort(), fine.map((id) => `${id}:0`));
  for (const id of fine) assert.equal(eventsOf(lines, "claimed", id).length, 1, id);
  // The poison run: one claim that decided, then five without progress, each
  // stopping at the rule; the seventh finds the bound and fails the run.
  assert.equal(ruleCalls.length, 6, lines.join("\n"));
  const claims = eventsOf(lines, "claimed", "poison-1");
  assert.equal(claims.length, 7);
  assert.ok(claims.every((l) => l.includes("owner=host-poison")));
  // Every retry came from a released lease, not a lapsed one: no lease age, and long before 6 leases passed.
  assert.deepEqual(claims.slice(1).filter((l) => l.includes("lease_age_ms=")), []);
  assert.ok(failedAfterMs < 2 * 12_000, `the poison run failed after ${failedAfterMs} ms of clock time`);
  const errors = eventsOf(lines, "worker-error", "poison-1");
  assert.equal(errors.length, 6);
  assert.ok(
    errors.every((l) => /error="TypeError: the approval rule broke" lease=released$/.test(l)),
    errors[0],
  );
  const run = await store.reads.getRun("poison-1");
  assert.match(
    run?.error ?? "",
    /^stuck: 5 workers in a row took this run and made no progress .*the limit is 5\. The last of them stopped at: TypeError: the approval rule broke\./,
  );
});

Deno.test("a host's heartbeat never renews a lease it no longer holds: after a steal the thief's lease is untouched", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const agent = slowAgent("stolen", clock, 60_000, effects);
  await store.leases.createRun({ runId: "steal-me", agent: "stolen", goal: "note it" }, clock.now());
  await store.leases.createRun({ runId: "keep-me", agent: "stolen", goal: "note it" }, clock.now());
  const h = host(agent, clock, lines, 10, "host-robbed").start();
  await settle();
  assert.equal(h.active, 2);
  // Another worker takes the run over (a new epoch) with a lease of its own, far from any time this host writes.
  const thiefLease = new Date(clock.now().getTime() + 3_600_000);
  assert.equal(await claim(store, "steal-me", 1, "thief", thiefLease), 2);
  await clock.advance(3_000); // the host's next heartbeat: one statement for both runs it held
  await settle();
  const stolen = await store.reads.getRun("steal-me");
  assert.equal(stolen?.owner, "thief");
  assert.equal(stolen?.epoch, 2);
  assert.equal(
    stolen?.heartbeat_at?.getTime(),
    thiefLease.getTime(),
    "the stale host renewed a lease it lost",
  );
  assert.equal(
    (await store.reads.getRun("keep-me"))?.heartbeat_at?.getTime(),
    clock.now().getTime(),
    "renewed",
  );
  assert.ok(
    lines.some((l) =>
      /event=heartbeat-refused run=steal-me epoch=1 reason="Write refused \(heartbeat\)/.test(l)
    ),
    lines.join("\n"),
  );
  assert.equal(h.active, 1, "the stolen run's model request was cut off");
  await h.stop();
  assert.equal(
    (await store.reads.getRun("steal-me"))?.heartbeat_at?.getTime(),
    thiefLease.getTime(),
    "nor at stop",
  );
  assert.deepEqual(effects, []);
});

Deno.test("the bound on claims without progress holds on a host's take: a run fails at exactly the bound, and progress resets the count", async (t) => {
  const limit = 3;
  const clock = new ManualClock();
  /** `n` takes by workers that die before any progress (the supervisor releases what they held). */
  const ghostTakes = async (
    runId: string,
    agent: string,
    n: number,
    progress?: (f: Fence) => Promise<void>,
  ) => {
    for (let i = 0; i < n; i++) {
      await clock.advance(61_000); // past the take's growing wait for a run without progress (at most 60 s)
      const taken = await store.leases.takeRuns(
        "ghost",
        [agent],
        new Date(clock.now().getTime() - 12_000),
        clock.now(),
        10,
      );
      assert.deepEqual(taken.map((r) => r.run_id), [runId]);
      if (progress && i === n - 1) await progress({ runId, epoch: taken[0].epoch });
      await store.leases.releaseRuns("ghost", clock.now());
    }
  };
  /** Starts a host on `agent`, runs it until `runId` is closed, and returns the run. */
  const hostTakes = async (agent: Agent, runId: string) => {
    const lines: string[] = [];
    const h = new WorkerHost({
      store,
      clock,
      log: new Logger({ clock, sink: arraySink(lines) }),
      owner: `host-${agent.name}`,
      agents: [{ agent, planner: agent.model as Planner, tools: new ToolRegistry(agent.tools as Tool[]) }],
      pollMs: 1_000,
      heartbeatMs: 3_000,
      leaseMs: 12_000,
      maxClaimsWithoutProgress: limit,
    }).start();
    await until(
      async () => !["pending", "running"].includes((await store.reads.getRun(runId))!.status),
      clock,
    );
    await h.stop();
    return { run: (await store.reads.getRun(runId))!, lines };
  };

  await t.step(
    `${limit} takes without progress, then the host's: it fails the run, sending nothing`,
    async () => {
      const effects: string[] = [];
      await store.leases.createRun({ runId: "bound-at", agent: "bound-at", goal: "note it" }, clock.now());
      await ghostTakes("bound-at", "bound-at", limit);
      const { run, lines } = await hostTakes(slowAgent("bound-at", clock, 0, effects), "bound-at");
      assert.equal(run.status, "failed");
      assert.equal(run.stuck_claims, limit + 1);
      assert.match(
        run.error ?? "",
        new RegExp(`^stuck: ${limit} workers in a row .* the limit is ${limit}\\. See`),
      );
      assert.ok(
        lines.some((l) => /level=error event=stuck run=bound-at claims=4 limit=3/.test(l)),
        lines.join("\n"),
      );
      assert.deepEqual(effects, []);
    },
  );

  await t.step(`${limit - 1} takes without progress, then the host's: at the bound, it goes on`, async () => {
    const effects: string[] = [];
    await store.leases.createRun(
      { runId: "bound-below", agent: "bound-below", goal: "note it" },
      clock.now(),
    );
    await ghostTakes("bound-below", "bound-below", limit - 1);
    const { run } = await hostTakes(slowAgent("bound-below", clock, 0, effects), "bound-below");
    assert.equal(run.status, "done", run.error ?? "");
    assert.deepEqual(effects, ["bound-below:0"]);
  });

  await t.step("progress in between starts the count again", async () => {
    const effects: string[] = [];
    await store.leases.createRun(
      { runId: "bound-reset", agent: "bound-reset", goal: "note it" },
      clock.now(),
    );
    // The last of these takes commits a decision before its worker dies: progress.
    await ghostTakes("bound-reset", "bound-reset", limit, async (f) => {
      await writeDecision(
        store,
        f,
        0,
        { decision: { tool: "note", args: { text: "bound-reset" } } },
        clock.now(),
      );
    });
    await ghostTakes("bound-reset", "bound-reset", limit - 1);
    // 2 * limit takes so far, none since the progress would pass the bound; counted from it, this is the 3rd.
    const { run } = await hostTakes(slowAgent("bound-reset", clock, 0, effects), "bound-reset");
    assert.equal(run.status, "done", run.error ?? "");
    assert.deepEqual(effects, ["bound-reset:0"]);
  });
});

Deno.test.afterAll(async () => {
  await store.client.close();
});

/** A host of `agent` holding up to `runsPerWorker`, polling every second, by take rule `takeShare`. */
function sharingHost(
  agent: Agent,
  clock: ManualClock,
  lines: string[],
  opts: { owner: string; runsPerWorker: number; takeShare?: "fair" | "all" },
) {
  return new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    agents: [{ agent, planner: agent.model as Planner, tools: new ToolRegistry(agent.tools as Tool[]) }],
    pollMs: 1_000,
    heartbeatMs: 3_000,
    leaseMs: 12_000,
    ...opts,
  });
}

/** Runs of `agent` held now, by owner. */
async function heldBy(agent: string): Promise<Record<string, number>> {
  const held: Record<string, number> = {};
  for (const r of (await store.operators.listRuns({ agent, status: "running", limit: 1000 })).runs) {
    held[r.owner!] = (held[r.owner!] ?? 0) + 1;
  }
  return held;
}

Deno.test("two live hosts take 20 new runs half each, whichever looks first (TAKE_SHARE=fair)", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const agent = slowAgent("spreader", clock, 5_000, effects);
  const a = sharingHost(agent, clock, lines, { owner: "spread-a", runsPerWorker: 100 }).start();
  const b = sharingHost(agent, clock, lines, { owner: "spread-b", runsPerWorker: 100 }).start();
  await settle(); // both registered, found nothing, and nap
  for (let i = 0; i < 20; i++) {
    await store.leases.createRun({ runId: `spread-${i}`, agent: "spreader", goal: "note it" }, clock.now());
  }
  a.wake(); // the first to look would have taken all twenty under the rule `all`
  await settle();
  assert.deepEqual(await heldBy("spreader"), { "spread-a": 10 }, "its share, and the rest left");
  await clock.advance(1_000); // both polls come round: a's takes nothing more, b's takes the rest
  await settle();
  assert.deepEqual(await heldBy("spreader"), { "spread-a": 10, "spread-b": 10 });
  assert.equal(a.active + b.active, 20);
  await until(
    async () =>
      (await store.operators.listRuns({ agent: "spreader", status: "done", limit: 100 })).total === 20,
    clock,
  );
  assert.deepEqual(effects.sort(), Array.from({ length: 20 }, (_, i) => `spread-${i}:0`).sort(), "each once");
  await Promise.all([a.stop(), b.stop()]);
});

Deno.test("under TAKE_SHARE=all the first host to look takes every new run and its peer sits idle", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const agent = slowAgent("grabber", clock, 5_000, []);
  const a = sharingHost(agent, clock, lines, { owner: "grab-a", runsPerWorker: 100, takeShare: "all" })
    .start();
  const b = sharingHost(agent, clock, lines, { owner: "grab-b", runsPerWorker: 100, takeShare: "all" })
    .start();
  await settle();
  for (let i = 0; i < 20; i++) {
    await store.leases.createRun({ runId: `grab-${i}`, agent: "grabber", goal: "note it" }, clock.now());
  }
  a.wake();
  await settle();
  await clock.advance(1_000);
  await settle();
  assert.deepEqual(await heldBy("grabber"), { "grab-a": 20 }, "the behaviour the fair share replaces");
  assert.equal(b.active, 0);
  await Promise.all([a.stop(), b.stop()]);
});

Deno.test("a host alone fills its 100 slots from a backlog with one take statement", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const agent = slowAgent("filler", clock, 60_000, []);
  for (let i = 0; i < 130; i++) {
    await store.leases.createRun({ runId: `fill-${i}`, agent: "filler", goal: "note it" }, clock.now());
  }
  db.names.length = 0;
  const h = sharingHost(agent, clock, lines, { owner: "filler-1", runsPerWorker: 100 }).start();
  await settle();
  assert.equal(h.active, 100);
  // The one that filled the host; the loop then naps, every slot taken (no second take before a slot frees).
  assert.equal(db.names.filter((n) => n === "take-runs").length, 1, db.names.join(","));
  assert.ok(lines.some((l) => /event=worker .*take_share=fair/.test(l)), lines.join("\n"));
  await h.stop();
});

Deno.test("a host refuses a take rule it does not know, naming it", () => {
  const clock = new ManualClock();
  const agent = slowAgent("unknown-rule", clock, 0, []);
  assert.throws(
    () =>
      sharingHost(agent, clock, [], {
        owner: "x",
        runsPerWorker: 1,
        takeShare: "half" as "fair",
      }),
    /Cannot host workers as 'takeShare' must be one of fair, all: current value is "half"/,
  );
});
