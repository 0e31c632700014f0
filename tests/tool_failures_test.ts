/**
 * Remote tool failures, end to end: a worker in-process on one PGlite, the
 * mock cloud and model over real HTTP, faults injected through the cloud's
 * knobs. Each step asserts the run's end state, its rows, the mocks' counters
 * and the log lines.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { DEMO_GOAL as DEFAULT_GOAL } from "../examples/provision/agent.ts";
import { CrashPoints, SimulatedKill } from "../runtime/base/crashpoints.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { Store } from "../runtime/store/store.ts";
import { closedPort, recordingProxy, testWorker } from "./_worker.ts";
import { openTestPglite } from "./_pglite.ts";

Deno.test("tool failures through the mock cloud over HTTP, on PGlite", async (t) => {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const mocks = await serveMocks();
  const { cloud, model } = mocks;
  const worker = (opts: Partial<Parameters<typeof testWorker>[1]> = {}) =>
    testWorker(store, { modelUrl: mocks.modelUrl, cloudUrl: mocks.cloudUrl, ...opts });
  const effect = async (runId: string, seq: number) => {
    const { effects } = await store.reads.loadHistory(runId);
    const row = effects.find((e) => e.seq === seq);
    assert.ok(row, `run ${runId} has a tool row for seq ${seq}`);
    return row;
  };
  try {
    await t.step("503 twice: re-sent under the same key, each attempt counted, one resource", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/servers", fail_next: 2, fail_status: 503 });
      const w = worker();
      const outcome = await claimAndDrive(w.deps, "t-503", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      assert.equal((await store.reads.getRun("t-503"))?.status, "done");
      const row = await effect("t-503", 0);
      assert.equal(row.status, "confirmed");
      assert.equal(row.attempts, 3);
      assert.equal(row.remote, "created");
      assert.equal(cloud.requests().by_key["t-503:0"], 3);
      assert.equal(cloud.created("t-503:").length, 3);
      assert.equal(cloud.created("t-503:0").length, 1);
      const retries = w.events("retrying");
      assert.deepEqual(retries.map((e) => [e.key, e.attempt]), [["t-503:0", 1], ["t-503:0", 2]]);
      assert.match(String(retries[0].error), /TOOL_HTTP|HTTP 503/);
      assert.deepEqual(w.events("intent").filter((e) => e.seq === 0).map((e) => e.attempt), [1, 2, 3]);
      assert.equal(model.calls("t-503"), 4, "a tool retry costs no model call");
    });

    await t.step("429 and 408 are transient too", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/servers", fail_next: 1, fail_status: 429 });
      cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 408 });
      const w = worker();
      const outcome = await claimAndDrive(w.deps, "t-429", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      assert.equal((await effect("t-429", 0)).attempts, 2);
      assert.equal((await effect("t-429", 1)).attempts, 2);
      assert.equal(cloud.created("t-429:").length, 3);
      assert.deepEqual(w.events("retrying").map((e) => e.key), ["t-429:0", "t-429:1"]);
      assert.match(String(w.events("retrying")[0].error), /HTTP 429/);
      assert.match(String(w.events("retrying")[1].error), /HTTP 408/);
    });

    await t.step("a hung request times out through the signal and is re-sent", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/databases", hang_next: 1 });
      const w = worker({ toolTimeoutMs: 150 });
      const outcome = await claimAndDrive(w.deps, "t-hang", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      const row = await effect("t-hang", 1);
      assert.equal(row.status, "confirmed");
      assert.equal(row.attempts, 2);
      assert.equal(row.remote, "created", "the hung request did nothing, so the re-send creates");
      assert.equal(cloud.requests().by_key["t-hang:1"], 2);
      assert.equal(cloud.created("t-hang:1").length, 1);
      const [retry] = w.events("retrying");
      assert.equal(retry.key, "t-hang:1");
      assert.equal(retry.code, "TOOL_TIMEOUT");
      assert.match(String(retry.error), /did not answer within 150ms/);
    });

    await t.step("a garbage answer is re-sent under the same key", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/dns_records", garbage_next: 1 });
      const w = worker();
      const outcome = await claimAndDrive(w.deps, "t-garbage", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      const row = await effect("t-garbage", 2);
      assert.equal(row.attempts, 2);
      assert.equal(row.status, "confirmed");
      assert.equal(cloud.created("t-garbage:2").length, 1);
      assert.equal(w.events("retrying")[0].code, "TOOL_GARBAGE");
      assert.match(String(w.events("retrying")[0].error), /not JSON/);
    });

    await t.step(
      "the remote acts then drops the connection on every first attempt: one resource per key, already_done",
      async () => {
        cloud.clearFaults();
        for (const path of ["/v1/servers", "/v1/databases", "/v1/dns_records"]) {
          cloud.setFaults({ path, drop_after_act_next: 1 });
        }
        const w = worker();
        const outcome = await claimAndDrive(w.deps, "t-drop", DEFAULT_GOAL);
        assert.equal(outcome.status, "done");
        const created = cloud.created("t-drop:");
        assert.deepEqual(created.map((r) => r.key), ["t-drop:0", "t-drop:1", "t-drop:2"]);
        const { effects } = await store.reads.loadHistory("t-drop");
        assert.equal(effects.length, 3);
        for (const row of effects) {
          assert.equal(row.status, "confirmed");
          assert.equal(row.attempts, 2);
          assert.equal(row.remote, "already_done");
          assert.equal(row.result, created[row.seq].id, "the stored result is the first request's resource");
          assert.equal(cloud.requests().by_key[row.idempotency_key], 2);
        }
        const confirmed = w.events("confirmed");
        assert.deepEqual(confirmed.map((e) => e.remote), ["already_done", "already_done", "already_done"]);
        assert.deepEqual(w.events("retrying").map((e) => e.attempt), [1, 1, 1]);
        assert.equal(w.events("retrying")[0].code, "TOOL_NETWORK");
      },
    );

    await t.step(
      "503 past the retry horizon: the run fails with the reason, every attempt counted",
      async () => {
        cloud.clearFaults();
        cloud.setFaults({ path: "/v1/servers", fail_next: 10_000, fail_status: 503 });
        const w = worker({ retry: { horizonMs: 100 } });
        const outcome = await claimAndDrive(w.deps, "t-gaveup", DEFAULT_GOAL);
        assert.equal(outcome.status, "failed");
        const run = await store.reads.getRun("t-gaveup");
        assert.equal(run?.status, "failed");
        assert.match(
          run?.error ?? "",
          /^TOOL_GAVE_UP: Tool call t-gaveup:0 \(create_server\) failed \d+ times over \d+ ms \(the retry horizon is 100 ms, counted from its first failure, across restarts\); last error: .*HTTP 503/,
        );
        const row = await effect("t-gaveup", 0);
        assert.ok(row.attempts >= 2, `re-sent within the horizon: ${row.attempts} attempts`);
        assert.equal(row.failures, row.attempts, "every request failed, and each failure was recorded");
        assert.equal(row.status, "intent", "the last outcome is unknown, and the row says so");
        assert.equal(cloud.requests().by_key["t-gaveup:0"], row.attempts);
        assert.deepEqual(cloud.created("t-gaveup:"), []);
        assert.equal(w.events("gave-up").length, 1);
        const [failed] = w.events("failed");
        assert.equal(failed.level, "ERROR");
        assert.match(String(failed.error), /TOOL_GAVE_UP/);
        cloud.clearFaults();
      },
    );

    await t.step(
      "a run that gave up after the remote acted is reopened and finishes without a second resource",
      async () => {
        cloud.clearFaults();
        // The remote acts and the answer is lost; with no horizon the call is given up at that failure.
        cloud.setFaults({ path: "/v1/servers", drop_after_act_next: 1 });
        const w = worker({ retry: { horizonMs: 0 } });
        assert.equal((await claimAndDrive(w.deps, "t-reopen", DEFAULT_GOAL)).status, "failed");
        assert.equal((await effect("t-reopen", 0)).status, "intent");
        assert.equal(cloud.created("t-reopen:0").length, 1, "the remote did act on the last attempt");
        cloud.clearFaults();

        // deno task reopen t-reopen: the run resumes where it stopped, its history kept.
        const reopened = await store.operators.reopenRun("t-reopen", new Date());
        assert.equal(reopened?.status, "pending");
        assert.equal(
          await store.operators.reopenRun("t-reopen", new Date()),
          undefined,
          "only a failed run reopens",
        );
        const again = worker({ retry: { horizonMs: 0 } });
        assert.equal((await claimAndDrive(again.deps, "t-reopen", DEFAULT_GOAL)).status, "done");
        const row = await effect("t-reopen", 0);
        assert.equal(row.status, "confirmed");
        assert.equal(row.remote, "already_done");
        assert.equal(row.attempts, 2);
        assert.equal(cloud.created("t-reopen:0").length, 1, "one resource for the key, across the reopen");
        assert.equal(cloud.created("t-reopen:").length, 3);
        assert.equal(model.calls("t-reopen"), 4, "the decided step was replayed, not bought again");
      },
    );

    await t.step(
      "a cloud nobody listens on: network errors retried until the horizon, then the run fails",
      async () => {
        const w = worker({ cloudUrl: `http://127.0.0.1:${closedPort()}`, retry: { horizonMs: 50 } });
        const outcome = await claimAndDrive(w.deps, "t-refused", DEFAULT_GOAL);
        assert.equal(outcome.status, "failed");
        const row = await effect("t-refused", 0);
        assert.ok(row.attempts >= 2);
        assert.equal(row.failures, row.attempts);
        assert.match((await store.reads.getRun("t-refused"))?.error ?? "", /TOOL_GAVE_UP.*got no answer/);
        assert.equal(w.events("retrying").length, row.attempts - 1);
      },
    );

    await t.step("a permanent 4xx is recorded and handed to the model, and the run goes on", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 422 });
      const proxy = recordingProxy(mocks.modelUrl);
      try {
        const w = worker({ modelUrl: proxy.url });
        const outcome = await claimAndDrive(w.deps, "t-422", DEFAULT_GOAL);
        assert.equal(outcome.status, "done");
        const row = await effect("t-422", 1);
        assert.equal(row.status, "failed");
        assert.equal(row.attempts, 1, "a permanent failure is not re-sent");
        assert.match(row.error ?? "", /HTTP 422/);
        assert.equal(cloud.requests().by_key["t-422:1"], 1);
        assert.deepEqual(cloud.created("t-422:").map((r) => r.kind), ["server", "dns_record"]);
        // The next question to the model carries the error as that call's result.
        const next = proxy.exchanges[2].request.messages;
        const toolResults = next.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content ?? ""));
        assert.equal(toolResults.length, 2);
        assert.match(toolResults[1].error, /HTTP 422/);
        const [failed] = w.events("tool-failed");
        assert.equal(failed.level, "WARN");
        assert.equal(failed.key, "t-422:1");
        assert.equal(w.events("done").length, 1);
      } finally {
        await proxy.close();
      }
    });

    await t.step("a tool that takes no key is flagged after an unknown outcome, never re-sent", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/servers", drop_after_act_next: 1 });
      const w = worker({ nonIdempotent: ["create_server"] });
      const outcome = await claimAndDrive(w.deps, "t-flag", DEFAULT_GOAL);
      assert.equal(outcome.status, "blocked");
      const run = await store.reads.getRun("t-flag");
      assert.equal(run?.status, "blocked");
      assert.match(run?.error ?? "", /needs a human/);
      const row = await effect("t-flag", 0);
      assert.equal(row.status, "flagged");
      assert.equal(row.attempts, 1);
      assert.match(row.error ?? "", /takes no idempotency key/);
      assert.equal(cloud.requests().by_key["t-flag:0"], 1);
      assert.equal(cloud.created("t-flag:").length, 1, "the remote did act; only a human can tell");
      assert.equal(w.events("flagged").length, 1);
      assert.equal(w.events("blocked").length, 1);
      assert.equal(w.events("retrying").length, 0);

      // A second worker does not touch it either.
      const again = worker({ nonIdempotent: ["create_server"] });
      assert.equal((await claimAndDrive(again.deps, "t-flag", DEFAULT_GOAL)).status, "blocked");
      assert.equal(cloud.requests().by_key["t-flag:0"], 1);
      // A human checks the remote and approves one re-send (deno task resolve t-flag:0 --retry).
      assert.ok(await store.operators.resolveEffect("t-flag:0", { action: "retry" }, "ops", new Date()));
      const crashing = worker({ nonIdempotent: ["create_server"] });
      crashing.deps.crash = new CrashPoints({ crashAt: "after_intent", crashSeq: 0, stallMs: 0 }, {
        log: crashing.deps.log,
        clock: crashing.deps.clock,
        kill: (point, seq) => Promise.reject(new SimulatedKill(point, seq)),
      });
      await assert.rejects(claimAndDrive(crashing.deps, "t-flag", DEFAULT_GOAL), SimulatedKill);
      assert.equal((await effect("t-flag", 0)).attempts, 2, "the approved re-send's intent was written");
      assert.equal(cloud.requests().by_key["t-flag:0"], 1, "and it died before sending");

      // The approval was used up by that intent: after the crash the call is flagged again, not re-sent.
      const after = worker({ nonIdempotent: ["create_server"] });
      assert.equal((await claimAndDrive(after.deps, "t-flag", DEFAULT_GOAL)).status, "blocked");
      assert.equal((await effect("t-flag", 0)).status, "flagged");
      assert.equal(cloud.requests().by_key["t-flag:0"], 1);

      // Approved again, this time nothing crashes: one re-send, the remote recognises the key.
      assert.ok(await store.operators.resolveEffect("t-flag:0", { action: "retry" }, "ops", new Date()));
      const last = worker({ nonIdempotent: ["create_server"] });
      assert.equal((await claimAndDrive(last.deps, "t-flag", DEFAULT_GOAL)).status, "done");
      const row2 = await effect("t-flag", 0);
      assert.equal(row2.status, "confirmed");
      assert.equal(row2.remote, "already_done");
      assert.equal(row2.resolved_by, "ops");
      assert.equal(cloud.requests().by_key["t-flag:0"], 2);
      assert.equal(cloud.created("t-flag:0").length, 1, "one resource, whatever the humans and crashes did");
    });
  } finally {
    await mocks.close();
    await store.client.close();
  }
});
