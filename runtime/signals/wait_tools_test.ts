/**
 * The waits a call makes holding no worker's slot, driven through the step
 * (`claimAndDrive`) on PGlite with a manual clock: the `waitForSignal` tool
 * takes a signal sent before it at once, sleeps until one is sent (woken by
 * the send), answers or fails at its deadline, and a signal sent twice under
 * one id is one; `sleepTool` sleeps until its time; and the same waits in a
 * tool of one's own (`ctx.waitForSignal`, `ctx.sleepFor`), refused clearly
 * when asked for wrongly; and a one-slot worker host drives other runs while
 * one waits for a signal (it holds no slot).
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { defineAgent } from "../agent/agent.ts";
import { settle } from "../base/clock.ts";
import { defineTool, type Tool, ToolRegistry } from "../agent/tools.ts";
import { WorkerHost } from "../host/host.ts";
import { Client } from "../client/client.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { Planner } from "../model/planner.ts";
import type { PlannerDecision } from "../model/transcript.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { runDepsFor } from "../run/context.ts";
import { Store } from "../store/store.ts";
import { sleepTool, waitForSignal } from "./wait_tools.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const MINUTE = 60_000;

/** A planner answering `answers` in turn (the last one again when they run out), and the tool results it saw. */
function scripted(answers: PlannerDecision[]) {
  let n = 0;
  const seen: string[] = [];
  const planner: Planner = {
    describe: "script",
    decide: (req) => {
      const last = req.transcript.at(-1);
      if (last?.role === "tool" && !last.failed) seen.push(JSON.stringify(last.result));
      return Promise.resolve(answers[Math.min(n++, answers.length - 1)]);
    },
  };
  return { planner, seen, asked: () => n };
}

/** One database, clock and client; `deps(tools, answers)` a worker of agent `waits` with them. */
async function world() {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const client = new Client(store, clock);
  const deps = (tools: Tool[], planner: Planner) =>
    runDepsFor(
      processDeps({ store, clock, log, owner: "w1", random: () => 0.5 }),
      agentDeps(
        {
          agent: { name: "waits", instructions: "Wait.", tools: [], maxSteps: 10 },
          planner,
          tools: new ToolRegistry(tools),
        } as never,
      ),
    );
  const events = (event: string) => lines.filter((l) => l.includes(` event=${event} `));
  return { clock, store, client, deps, lines, events, close: () => store.client.close() };
}

const call = (name: string, args: Record<string, unknown> = {}): PlannerDecision => ({
  kind: "tool_calls",
  calls: [{ name, args }],
});
const done: PlannerDecision = { kind: "done", text: "Done." };

// One database for the file (a PGlite costs seconds to open); each case has runs of its own.
Deno.test("waits that hold no slot: signals and sleeps through the step", async (t) => {
  const w = await world();
  try {
    await t.step(
      "waitForSignal: a run waits holding no lease until the signal is sent, takes it once, and goes on",
      async () => {
        const script = scripted([call("wait_for_paid"), done]);
        const deps = w.deps([waitForSignal("paid", { deadlineMs: 10 * MINUTE })], script.planner);
        const first = await claimAndDrive(deps, "sig-1", "Wait for the payment.");
        assert.equal(first.status, "waiting", w.lines.join("\n"));
        const asleep = await w.store.reads.getRun("sig-1");
        assert.deepEqual([asleep?.status, asleep?.heartbeat_at, asleep?.wake_at], [
          "waiting",
          null,
          new Date(w.clock.now().getTime() + 10 * MINUTE),
        ]);
        assert.match(asleep?.error ?? "", /sig-1:0 \(wait_for_paid\) waits for signal paid/);
        assert.equal(
          (await claimAndDrive(deps, "sig-1", "x")).alreadyClosed,
          true,
          "not taken before a send",
        );

        await w.clock.advance(MINUTE);
        const sent = await w.client.signal("sig-1", "paid", { cents: 500 }, { signalId: "pay-1" });
        assert.deepEqual([sent.seq, sent.duplicate, sent.woken], [1, false, true]);
        const again = await w.client.signal("sig-1", "paid", { cents: 1 }, { signalId: "pay-1" });
        assert.deepEqual(
          [again.seq, again.duplicate, again.woken],
          [1, true, false],
          "the same id is one signal",
        );

        const end = await claimAndDrive(deps, "sig-1", "x");
        assert.equal(end.status, "done", w.lines.join("\n"));
        const { effects } = await w.store.reads.loadHistory("sig-1");
        assert.deepEqual(effects.map((e) => [e.status, e.remote, e.attempts, e.polls]), [[
          "confirmed",
          "created",
          1,
          1,
        ]]);
        assert.deepEqual(effects[0].result, {
          signal: "paid",
          signal_id: "pay-1",
          payload: { cents: 500 },
          sent_at: sent.sentAt.toISOString(),
        });
        assert.deepEqual(
          script.seen.map((s) => JSON.parse(s)).at(-1),
          effects[0].result,
          "the model read it",
        );
        const signals = await w.client.reads.signals("sig-1");
        assert.deepEqual(signals.map((s) => [s.signalId, s.takenBy]), [["pay-1", "sig-1:0"]]);
        assert.equal(w.events("signal-taken").length, 1);
      },
    );

    await t.step(
      "waitForSignal: a signal sent before the wait is kept, and taken when the wait starts",
      async () => {
        await w.store.leases.createRun({ runId: "sig-2", agent: "waits", goal: "g" }, w.clock.now());
        await w.client.signal("sig-2", "other", null, { signalId: "o-1" });
        await w.client.signal("sig-2", "paid", "first", { signalId: "p-1" });
        await w.client.signal("sig-2", "paid", "second", { signalId: "p-2" });
        const script = scripted([call("wait_for_paid"), call("wait_for_paid"), call("wait_for_paid"), done]);
        const deps = w.deps([waitForSignal("paid", { deadlineMs: MINUTE })], script.planner);
        // Two calls take the two signals in the order they came, never waiting; the third waits for a third.
        const first = await claimAndDrive(deps, "sig-2", "g");
        assert.equal(first.status, "waiting");
        const { effects } = await w.store.reads.loadHistory("sig-2");
        assert.deepEqual(effects.map((e) => [e.seq, e.status, (e.result as { payload?: string })?.payload]), [
          [0, "confirmed", "first"],
          [1, "confirmed", "second"],
          [2, "waiting", undefined],
        ]);
        assert.equal((await w.store.signals.get("sig-2", "o-1"))?.consumed_by, null, "another name is left");
      },
    );

    await t.step(
      "waitForSignal: with none by the deadline, the model is answered that it timed out, or the call fails",
      async () => {
        for (const onTimeout of ["answer", "fail"] as const) {
          const runId = `sig-timeout-${onTimeout}`;
          const script = scripted([call("wait_for_paid"), done]);
          const deps = w.deps(
            [waitForSignal("paid", { deadlineMs: 30_000, onTimeout })],
            script.planner,
          );
          assert.equal((await claimAndDrive(deps, runId, "g")).status, "waiting");
          const deadline = new Date(w.clock.now().getTime() + 30_000);
          assert.deepEqual(
            (await w.store.reads.getRun(runId))?.wake_at,
            deadline,
            "its deadline",
          );
          await w.clock.advance(30_000);
          assert.equal((await claimAndDrive(deps, runId, "g")).status, "done", w.lines.join("\n"));
          const [effect] = (await w.store.reads.loadHistory(runId)).effects;
          if (onTimeout === "answer") {
            assert.deepEqual([effect.status, effect.result], ["confirmed", {
              signal: "paid",
              timed_out: true,
              deadline: deadline.toISOString(),
            }]);
          } else {
            assert.deepEqual([effect.status, effect.error], [
              "failed",
              `No signal paid came by ${deadline.toISOString()}`,
            ]);
          }
        }
      },
    );

    await t.step("sleepTool: the run sleeps holding no lease until the time, then goes on once", async () => {
      const script = scripted([call("sleep", { seconds: 90 }), done]);
      const deps = w.deps([sleepTool()], script.planner);
      const t0 = w.clock.now().getTime();
      assert.equal((await claimAndDrive(deps, "nap", "g")).status, "waiting");
      const run = await w.store.reads.getRun("nap");
      assert.deepEqual([run?.status, run?.heartbeat_at, run?.wake_at], [
        "waiting",
        null,
        new Date(t0 + 90_000),
      ]);
      await w.clock.advance(89_000);
      assert.equal((await claimAndDrive(deps, "nap", "g")).alreadyClosed, true, "not taken early");
      await w.clock.advance(1_000);
      assert.equal((await claimAndDrive(deps, "nap", "g")).status, "done");
      const [effect] = (await w.store.reads.loadHistory("nap")).effects;
      assert.deepEqual([effect.status, effect.result], ["confirmed", {
        slept_until: new Date(t0 + 90_000).toISOString(),
      }]);
      // Until a time the model gives (takes: "until"): slept until then; too far, or no time, refused.
      const until = sleepTool({ takes: "until", maxMs: 3_600_000 });
      const at = new Date(w.clock.now().getTime() + 600_000).toISOString();
      const script2 = scripted([
        call("sleep", { until: new Date(w.clock.now().getTime() + 2 * 3_600_000).toISOString() }),
        call("sleep", { until: "tomorrow" }),
        call("sleep", { until: at }),
        done,
      ]);
      const deps2 = w.deps([until], script2.planner);
      assert.equal((await claimAndDrive(deps2, "nap-2", "g")).status, "waiting");
      assert.deepEqual((await w.store.reads.getRun("nap-2"))?.wake_at, new Date(at));
      await w.clock.advance(600_000);
      assert.equal((await claimAndDrive(deps2, "nap-2", "g")).status, "done");
      const effects = (await w.store.reads.loadHistory("nap-2")).effects;
      assert.deepEqual(effects.map((e) => e.status), ["failed", "failed", "confirmed"]);
      assert.match(effects[0].error ?? "", /cannot sleep until .*: that is more than 3600000 ms from now/);
      assert.match(effects[1].error ?? "", /cannot sleep until "tomorrow": give a Date or an ISO 8601 time/);
      assert.deepEqual(effects[2].result, { slept_until: at });
    });

    await t.step(
      "in a tool of one's own: ctx.waitForSignal then ctx.sleepFor, and waits asked for wrongly are refused",
      async () => {
        const order = defineTool({
          name: "settle_order",
          description: "Waits for the payment, then a minute more, then settles.",
          args: z.strictObject({ name: z.string() }),
          waitDeadlineMs: 60 * MINUTE,
          minCheckAfterMs: 1,
          run: async (args, ctx) => {
            const paid = await ctx.waitForSignal!(args.name, { deadlineMs: 30 * MINUTE });
            if (paid.kind !== "received") {
              return paid.kind === "waiting" ? paid.outcome : { result: "unpaid" };
            }
            const slept = await ctx.sleepFor!(MINUTE);
            if (slept.kind === "waiting") return slept.outcome;
            return { result: { settled: paid.signal.payload, again: paid.again } };
          },
        });
        const script = scripted([
          call("settle_order", { name: "paid" }),
          call("settle_order", { name: "not ok" }),
          done,
        ]);
        const deps = w.deps([order], script.planner);
        await w.store.leases.createRun({ runId: "own", agent: "waits", goal: "g" }, w.clock.now());
        await w.client.signal("own", "paid", 42);
        assert.equal((await claimAndDrive(deps, "own", "g")).status, "waiting", "asleep for the minute");
        await w.clock.advance(MINUTE);
        assert.equal((await claimAndDrive(deps, "own", "g")).status, "done", w.lines.join("\n"));
        const effects = (await w.store.reads.loadHistory("own")).effects;
        assert.deepEqual(
          effects[0].result,
          { settled: 42, again: true },
          "the re-send found the signal it took",
        );
        assert.equal(effects[1].status, "failed");
        assert.match(
          effects[1].error ?? "",
          /cannot wait for a signal named "not ok": a name is 1-128 characters/,
        );

        const tooLong = defineTool({
          name: "too_long",
          description: "Waits longer than the tool may.",
          args: z.strictObject({}),
          run: async (_args, ctx) => {
            const got = await ctx.waitForSignal!("paid", { deadlineMs: 2 * 3_600_000 });
            return got.kind === "waiting" ? got.outcome : { result: null };
          },
        });
        const refused = scripted([call("too_long"), done]);
        assert.equal((await claimAndDrive(w.deps([tooLong], refused.planner), "own-2", "g")).status, "done");
        const [effect] = (await w.store.reads.loadHistory("own-2")).effects;
        assert.match(effect.error ?? "", /its waitDeadlineMs \(3600000\) would fail the call first/);
      },
    );

    await t.step(
      "client.signal refuses a bad name, id or payload, a missing run and a closed one",
      async () => {
        await w.store.leases.createRun({ runId: "c1", agent: "waits", goal: "g" }, w.clock.now());
        const refused = async (p: Promise<unknown>, code: string, says: RegExp) =>
          await assert.rejects(p, (e: Error & { code?: string }) => e.code === code && says.test(e.message));
        await refused(
          w.client.signal("c1", "pay ment"),
          "SIGNAL_INVALID",
          /A signal's name is 1-128 characters/,
        );
        await refused(w.client.signal("c1", "paid", null, { signalId: "" }), "SIGNAL_INVALID", /it is empty/);
        await refused(
          w.client.signal("c1", "paid", { n: NaN }),
          "SIGNAL_INVALID",
          /payload cannot be stored/,
        );
        await refused(
          w.client.signal("c1", "paid", "x".repeat(1_000_001)),
          "SIGNAL_INVALID",
          /more than 1000000/,
        );
        await refused(w.client.signal("nope", "paid"), "RUN_NOT_FOUND", /No run "nope"/);
        await refused(w.client.signal("bad id!", "paid"), "BAD_RUN_ID", /A run id is/);
        await w.store.families.cancel("c1", "stop", w.clock.now());
        await refused(w.client.signal("c1", "paid"), "RUN_CLOSED", /it is cancelled .*takes no signal/);
        assert.deepEqual(await w.client.reads.signals("c1"), [], "nothing was stored");
      },
    );

    await t.step(
      "a run waiting for a signal holds no slot: a one-slot host drives other runs meanwhile",
      async () => {
        const { clock, store } = w;
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
        const client = w.client;
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
          await until(
            "w-1 waits for its signal",
            async () => (watchSlots(), await status("w-1")) === "waiting",
          );
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
  } finally {
    await w.close();
  }
});
