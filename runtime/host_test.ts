import assert from "node:assert/strict";
import { z } from "zod";
import { type Agent, defineAgent } from "./agent.ts";
import { ManualClock, settle } from "./clock.ts";
import { WorkerHost } from "./host.ts";
import { arraySink, Logger } from "./log.ts";
import type { Planner } from "./planner.ts";
import { openPglite } from "./store/pglite.ts";
import { type QueryOptions, type SqlClient, Store } from "./store/store.ts";
import { defineTool, type Tool, ToolRegistry } from "./tools.ts";

/** Records every statement's text, so a test can count one kind. */
class RecordingClient implements SqlClient {
  readonly texts: string[] = [];
  constructor(readonly inner: SqlClient) {}
  get describe(): string {
    return this.inner.describe;
  }
  query<T>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    this.texts.push(text);
    return this.inner.query<T>(text, params, opts);
  }
  run(text: string, params?: unknown[]): Promise<number> {
    this.texts.push(text);
    return this.inner.run(text, params);
  }
  exec(text: string): Promise<void> {
    return this.inner.exec(text);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const db = new RecordingClient(await openPglite());
const store = new Store(db);
await store.applySchema();

/** An agent whose model thinks for `thinkMs` of clock time, then calls `note` once, then is done. */
function slowAgent(name: string, clock: ManualClock, thinkMs: number, effects: string[]): Agent {
  const model: Planner = {
    describe: "slow script",
    decide: async (req) => {
      await clock.sleep(thinkMs, req.signal);
      return req.seq === 0
        ? { kind: "tool", tool: "note", args: { text: req.runId } }
        : { kind: "done", message: `noted ${req.runId}` };
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
    await store.createRun({ runId: `many-${i}`, agent: "noter", goal: "note it" }, clock.now());
  }
  await store.createRun({ runId: "not-mine", agent: "someone-else", goal: "x" }, clock.now());
  const h = host(agent, clock, lines, 8).start();
  await settle();
  assert.equal(h.active, 8, "it takes as many runs as it has slots");
  db.texts.length = 0;
  await clock.advance(3_000); // one heartbeat while all eight wait on the model
  await settle();
  const heartbeats = db.texts.filter((t) => t.includes("insert into workers"));
  assert.equal(heartbeats.length, 1, "one statement renews eight leases");
  const renewed = (await store.listRuns({ agent: "noter", limit: 100 })).runs.filter((r) =>
    r.heartbeat_at && new Date(r.heartbeat_at).getTime() === clock.now().getTime()
  );
  assert.equal(renewed.length, 8);

  await until(
    async () => (await store.listRuns({ agent: "noter", status: "done", limit: 100 })).total === 12,
    clock,
  );
  assert.deepEqual(effects.sort(), Array.from({ length: 12 }, (_, i) => `many-${i}:0`).sort());
  assert.equal(
    (await store.getRun("not-mine"))?.status,
    "pending",
    "a run of an agent it does not host waits",
  );
  assert.equal((await store.getRun("many-3"))?.output, "noted many-3", "the final answer is stored");
  assert.deepEqual(await store.hostedAgents(new Date(clock.now().getTime() - 12_000)), ["noter"]);
  await h.stop();
  assert.deepEqual(await store.hostedAgents(new Date(0)), [], "a stopped host leaves the workers table");
});

Deno.test("a refused renewal stops only that run; a stopped host frees its runs for the next taker", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  const effects: string[] = [];
  const agent = slowAgent("canceller", clock, 10_000, effects);
  for (const id of ["keep-1", "keep-2", "cancel-me"]) {
    await store.createRun({ runId: id, agent: "canceller", goal: "note it" }, clock.now());
  }
  const h = host(agent, clock, lines, 10, "host-2").start();
  await settle();
  assert.equal(h.active, 3);
  await store.cancelRun("cancel-me", "cancelled by test", clock.now());
  await clock.advance(3_000);
  await settle();
  assert.ok(lines.some((l) => /event=heartbeat-refused run=cancel-me/.test(l)), lines.join("\n"));
  assert.equal(h.active, 2, "the cancelled run's model request was cut off");
  assert.equal(effects.length, 0);
  await h.stop();
  for (const id of ["keep-1", "keep-2"]) {
    const run = await store.getRun(id);
    assert.equal(run?.status, "running");
    assert.equal(run?.heartbeat_at, null, `${id} is takeable at once`);
  }
  const taken = await store.takeRuns("host-3", ["canceller"], clock.now(), clock.now(), 10);
  assert.deepEqual(taken.map((r) => [r.run_id, r.epoch]).sort(), [["keep-1", 2], ["keep-2", 2]]);
});

Deno.test.afterAll(async () => {
  await store.client.close();
});
