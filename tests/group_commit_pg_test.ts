/**
 * A worker host with group commit on, on both stores: 40 runs in flight share
 * group statements; one run taken over by another worker mid-step is fenced
 * at its confirm, alone, and every other run finishes with one resource per
 * key.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent.ts";
import { SystemClock } from "../runtime/clock.ts";
import { WorkerHost } from "../runtime/host.ts";
import type { RunOutcome } from "../runtime/loop.ts";
import { discardSink, Logger } from "../runtime/log.ts";
import type { DecideRequest, ModelAnswer, Planner } from "../runtime/planner.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import { Store } from "../runtime/store/store.ts";
import { defineTool, ToolRegistry } from "../runtime/tools.ts";
import { bothStoresTest } from "./_pg.ts";

const RUNS = 40;
const STOLEN = "gc-7";

bothStoresTest(
  "a grouped host fences a run taken over mid-step alone, and the others finish",
  async (base) => {
    const clock = new SystemClock();
    const created = new Map<string, number>();
    let outcomes: RunOutcome[] = [];
    const planner: Planner = {
      describe: "two steps, then done",
      decide: (req: DecideRequest): Promise<ModelAnswer> =>
        Promise.resolve(
          req.seq < 2
            ? { kind: "tool", tool: "make", args: { n: req.seq } }
            : { kind: "done", message: "made" },
        ),
    };
    const tools = [
      defineTool({
        name: "make",
        description: "Makes a thing under its key.",
        args: z.strictObject({ n: z.number() }),
        run: async (_args, call) => {
          created.set(call.idempotencyKey, (created.get(call.idempotencyKey) ?? 0) + 1);
          // Another worker takes one run while its first call is out: its confirm must be refused.
          if (call.idempotencyKey === `${STOLEN}:0`) {
            const run = await base.getRun(STOLEN);
            await base.claimRun(STOLEN, run!.epoch, "thief", clock.now());
          }
          return { result: { made: call.idempotencyKey }, remote: "created" as const };
        },
      }),
    ];
    const agent = defineAgent({ name: "grouped", tools, model: planner });
    for (let i = 0; i < RUNS; i++) {
      await base.createRun({ runId: `gc-${i}`, agent: "grouped", goal: "make two things" }, clock.now());
    }
    const counting = new CountingClient(base.client);
    let allEnded!: () => void;
    const ended = new Promise<void>((r) => allEnded = r);
    const host = new WorkerHost({
      store: new Store(counting),
      clock,
      log: new Logger({ clock, sink: discardSink }),
      owner: "grouped-host",
      agents: [{ agent, planner, tools: new ToolRegistry(tools) }],
      runsPerWorker: RUNS,
      pollMs: 50,
      groupCommitMs: 2,
      onOutcome: (o) => {
        outcomes = [...outcomes, o];
        if (outcomes.length === RUNS) allEnded();
      },
    }).start();
    await ended;
    await host.stop();

    const byRun = new Map(outcomes.map((o) => [o.runId, o]));
    assert.equal(byRun.get(STOLEN)?.status, "fenced");
    const stolen = await base.loadHistory(STOLEN);
    assert.deepEqual(stolen.effects.map((e) => e.status), ["intent"], "the fenced confirm wrote nothing");
    for (let i = 0; i < RUNS; i++) {
      const runId = `gc-${i}`;
      if (runId === STOLEN) continue;
      assert.equal(byRun.get(runId)?.status, "done", `${runId}: ${JSON.stringify(byRun.get(runId))}`);
      const { journal, effects } = await base.loadHistory(runId);
      assert.deepEqual(journal.map((j) => j.status), ["confirmed", "confirmed", "confirmed"]);
      assert.deepEqual(effects.map((e) => [e.status, e.remote]), [["confirmed", "created"], [
        "confirmed",
        "created",
      ]]);
    }
    assert.ok([...created.values()].every((n) => n === 1), "one request per key");
    // The runs' writes shared statements: fewer group statements than the writes they carried.
    const grouped = counting.counts.get("group-write") ?? 0;
    assert.ok(grouped > 0, JSON.stringify([...counting.counts]));
  },
);
