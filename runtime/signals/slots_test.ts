/**
 * A run waiting for a signal holds no worker's slot: a worker host with one
 * slot takes a run that waits for a signal, lets it go, drives three other
 * runs to their end meanwhile, and finishes the first once its signal is
 * sent, the signal taken once. On PGlite and PostgreSQL, time a ManualClock.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { bothStoresTest } from "../../tests/_pg.ts";
import { defineAgent } from "../agent/agent.ts";
import { ManualClock, settle } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { defineTool, type Tool, ToolRegistry } from "../agent/tools.ts";
import { Client } from "../client/client.ts";
import { WorkerHost } from "../host/host.ts";
import type { Planner } from "../model/planner.ts";
import { waitForSignal } from "./wait_tools.ts";

bothStoresTest(
  "a run waiting for a signal holds no slot: a one-slot host drives other runs meanwhile",
  async (store) => {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const lines: string[] = [];
    const noted: string[] = [];
    // Runs named w-* wait for the signal `go`; the others write a note. Each is done after its one call.
    const model: Planner = {
      describe: "by run",
      decide: (req) =>
        Promise.resolve(
          req.seq > 0 ? { kind: "done", text: `done ${req.runId}` } : {
            kind: "tool_calls",
            calls: [{ name: req.runId.startsWith("w-") ? "wait_for_go" : "note", args: {} }],
          },
        ),
    };
    const agent = defineAgent({
      name: "slots",
      model,
      tools: [
        waitForSignal("go", { deadlineMs: 3_600_000 }),
        defineTool({
          name: "note",
          description: "Notes.",
          args: z.strictObject({}),
          run: (_args, ctx) => {
            noted.push(ctx.idempotencyKey);
            return Promise.resolve({ result: "noted" });
          },
        }),
      ],
    });
    const host = new WorkerHost({
      store,
      clock,
      log: new Logger({ clock, sink: arraySink(lines) }),
      owner: "one-slot",
      agents: [{ agent, planner: model, tools: new ToolRegistry(agent.tools as Tool[]) }],
      runsPerWorker: 1,
      pollMs: 1_000,
      heartbeatMs: 3_000,
      leaseMs: 12_000,
    });
    const client = new Client(store, clock);
    const status = async (runId: string) => (await store.reads.getRun(runId))?.status;
    const until = async (what: string, check: () => Promise<boolean>) => {
      // Bounded: at most 200 polls of the clock.
      for (let i = 0; i < 200; i++) {
        if (await check()) return;
        await clock.advance(500);
        await settle();
      }
      throw new Error(`${what} never held:\n${lines.join("\n")}`);
    };
    let most = 0;
    const watchSlots = () => most = Math.max(most, host.active);
    try {
      await store.leases.createRun({ runId: "w-1", agent: "slots", goal: "wait" }, clock.now());
      host.start();
      await until("w-1 waits for its signal", async () => (watchSlots(), await status("w-1")) === "waiting");
      const waiting = await store.reads.getRun("w-1");
      assert.deepEqual(
        [waiting?.heartbeat_at, waiting?.owner === "one-slot"],
        [null, true],
        "its lease let go",
      );
      for (const id of ["o-1", "o-2", "o-3"]) {
        await store.leases.createRun({ runId: id, agent: "slots", goal: "note" }, clock.now());
      }
      await until("the three other runs finish in the one slot", async () => {
        watchSlots();
        return (await Promise.all(["o-1", "o-2", "o-3"].map(status))).every((s) => s === "done");
      });
      assert.equal(await status("w-1"), "waiting", "still waiting, in no slot");
      assert.deepEqual(noted.sort(), ["o-1:0", "o-2:0", "o-3:0"]);

      const sent = await client.signal("w-1", "go", { by: "test" }, { signalId: "go-1" });
      assert.equal(sent.woken, true);
      await client.signal("w-1", "go", { by: "test, again" }, { signalId: "go-1" });
      await until("w-1 finishes", async () => (watchSlots(), await status("w-1")) === "done");
      assert.ok(most <= 1, `never more than the one slot: ${most}`);
      const { effects } = await store.reads.loadHistory("w-1");
      assert.deepEqual(effects.map((e) => [e.status, (e.result as { payload?: unknown }).payload]), [[
        "confirmed",
        { by: "test" },
      ]]);
      const signals = await client.reads.signals("w-1");
      assert.deepEqual(
        signals.map((s) => [s.signalId, s.takenBy]),
        [["go-1", "w-1:0"]],
        "one signal, taken once",
      );
    } finally {
      await host.stop();
    }
  },
);
