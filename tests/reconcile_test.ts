/**
 * A tool that takes no idempotency key but can look a call up by it
 * (`reconcile`): the payments example's `charge_card` against the mock
 * cloud's keyless `/v1/charges` over real HTTP, a worker in-process on one
 * PGlite. Each case ends with the run's rows, the charges the cloud holds and
 * the log lines.
 */

import assert from "node:assert/strict";
import { chargeCard } from "../examples/payments/agent.ts";
import { serveMocks } from "../mock/server.ts";
import { CrashPoints, SimulatedKill } from "../runtime/base/crashpoints.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { Store } from "../runtime/store/store.ts";
import type { Tool } from "../runtime/agent/tools.ts";
import { testWorker } from "./_worker.ts";
import { openTestPglite } from "./_pglite.ts";

const GOAL = "Charge 12.99 for the order.";

Deno.test("a keyless tool's reconcile settles unknown outcomes over HTTP, on PGlite", async (t) => {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const mocks = await serveMocks();
  const { cloud } = mocks;
  const worker = (
    change: (tool: Tool) => Tool = (tool) => tool,
    opts: { toolTimeoutMs?: number; retry?: { horizonMs: number } } = {},
  ) =>
    testWorker(store, {
      modelUrl: mocks.modelUrl,
      cloudUrl: mocks.cloudUrl,
      tools: (o) => [change(chargeCard(o))],
      ...opts,
    });
  const killAt = (w: ReturnType<typeof worker>, point: "after_intent" | "after_call") => {
    w.deps.crash = new CrashPoints({ crashAt: point, crashSeq: 0, stallMs: 0 }, {
      log: w.deps.log,
      clock: w.deps.clock,
      kill: (p, seq) => Promise.reject(new SimulatedKill(p, seq)),
    });
    return w;
  };
  const row = async (runId: string) => (await store.reads.loadHistory(runId)).effects[0];
  try {
    await t.step(
      "an answer lost after the charge: reconcile finds it, no second charge, nobody asked",
      async () => {
        cloud.clearFaults();
        cloud.setFaults({ path: "/v1/charges", drop_after_act_next: 1 });
        const w = worker();
        assert.equal((await claimAndDrive(w.deps, "rc-drop", GOAL)).status, "done");
        const charges = cloud.charges("rc-drop:0");
        assert.equal(charges.length, 1);
        const e = await row("rc-drop");
        assert.equal(e.status, "confirmed");
        assert.equal(e.remote, "reconciled");
        assert.equal(e.result, charges[0].id);
        assert.equal(e.attempts, 1, "never sent again");
        assert.deepEqual(w.events("reconcile-answered").map((x) => [x.key, x.answer, x.result]), [
          ["rc-drop:0", "happened", charges[0].id],
        ]);
        assert.equal(w.events("flagged").length, 0);
        // The lost answer is a failure like any: after its backoff, the remote is asked before a re-send.
        assert.equal(w.events("retrying").length, 1);
      },
    );

    await t.step(
      "a request that timed out before the remote acted: reconcile says so, and it is sent again",
      async () => {
        cloud.clearFaults();
        cloud.setFaults({ path: "/v1/charges", hang_next: 1 });
        const w = worker(undefined, { toolTimeoutMs: 200 });
        assert.equal((await claimAndDrive(w.deps, "rc-hang", GOAL)).status, "done");
        const e = await row("rc-hang");
        assert.equal(e.remote, "created");
        assert.equal(e.attempts, 2);
        assert.equal(cloud.charges("rc-hang:0").length, 1);
        assert.deepEqual(w.events("reconcile-answered").map((x) => x.answer), ["not_happened"]);
        assert.deepEqual(w.events("retrying").map((x) => x.code), ["TOOL_TIMEOUT"]);
      },
    );

    await t.step("killed after the charge: the restart's reconcile confirms it without sending", async () => {
      cloud.clearFaults();
      await assert.rejects(
        claimAndDrive(killAt(worker(), "after_call").deps, "rc-kill", GOAL),
        SimulatedKill,
      );
      assert.equal((await row("rc-kill")).status, "intent");
      const before = cloud.requests().by_path["/v1/charges"];
      const w = worker();
      assert.equal((await claimAndDrive(w.deps, "rc-kill", GOAL)).status, "done");
      assert.equal(cloud.requests().by_path["/v1/charges"], before, "no request sent by the restart");
      assert.equal((await row("rc-kill")).remote, "reconciled");
      assert.equal(cloud.charges("rc-kill:0").length, 1);
      assert.deepEqual(w.events("resent").map((x) => x.outcome), ["reconciled"]);
    });

    await t.step(
      "killed before the request left: reconcile finds nothing, the restart sends it once",
      async () => {
        cloud.clearFaults();
        await assert.rejects(
          claimAndDrive(killAt(worker(), "after_intent").deps, "rc-early", GOAL),
          SimulatedKill,
        );
        assert.equal(cloud.charges("rc-early:0").length, 0);
        const w = worker();
        assert.equal((await claimAndDrive(w.deps, "rc-early", GOAL)).status, "done");
        const e = await row("rc-early");
        assert.deepEqual([e.remote, e.attempts], ["created", 2]);
        assert.equal(cloud.charges("rc-early:0").length, 1);
      },
    );

    await t.step(
      "a reconcile that throws cannot ask: tried again within the horizon, then the call is flagged with why, nothing sent",
      async () => {
        cloud.clearFaults();
        cloud.setFaults({ path: "/v1/charges", drop_after_act_next: 1 });
        const before = cloud.requests().by_path["/v1/charges"];
        // A lookup that cannot be made is what an outage looks like: asked again until the retry horizon.
        const w = worker((tool) => ({
          ...tool,
          reconcile: () => Promise.reject(new Error("lookup is down")),
        }), { retry: { horizonMs: 100 } });
        assert.equal((await claimAndDrive(w.deps, "rc-throw", GOAL)).status, "blocked");
        const e = await row("rc-throw");
        assert.equal(e.status, "flagged");
        assert.match(
          e.error ?? "",
          /^its outcome is unknown, charge_card takes no idempotency key, and its reconcile could not ask the remote \(its reconcile failed: Error: lookup is down\) for \d+ ms \(the retry horizon\)$/,
        );
        assert.equal(
          cloud.charges("rc-throw:0").length,
          1,
          "the remote had acted: only a person may decide now",
        );
        assert.equal(cloud.requests().by_path["/v1/charges"], before + 1, "one request, not re-sent");
        assert.ok(w.events("retrying").length >= 2, "the lookup was tried again");
        assert.ok(w.events("reconcile-asked").length >= 2);
      },
    );

    await t.step("an answer of another shape cannot tell either", async () => {
      cloud.clearFaults();
      await assert.rejects(claimAndDrive(killAt(worker(), "after_call").deps, "rc-odd", GOAL), SimulatedKill);
      const w = worker((tool) => ({
        ...tool,
        reconcile: () => Promise.resolve({ status: "maybe" } as never),
      }));
      assert.equal((await claimAndDrive(w.deps, "rc-odd", GOAL)).status, "blocked");
      assert.match((await row("rc-odd")).error ?? "", /its reconcile answered \{"status":"maybe"\}, not/);
      assert.equal(cloud.charges("rc-odd:0").length, 1);
    });

    await t.step("without reconcile the same kill blocks the run, as before", async () => {
      cloud.clearFaults();
      await assert.rejects(
        claimAndDrive(killAt(worker(), "after_call").deps, "rc-none", GOAL),
        SimulatedKill,
      );
      const w = worker((tool) => ({ ...tool, reconcile: undefined }));
      assert.equal((await claimAndDrive(w.deps, "rc-none", GOAL)).status, "blocked");
      assert.match(
        (await row("rc-none")).error ?? "",
        /its outcome is unknown and charge_card takes no idempotency key$/,
      );
      assert.equal(w.events("reconcile-asked").length, 0);
    });
  } finally {
    await mocks.close();
    await store.client.close();
  }
});
