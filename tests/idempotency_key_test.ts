/**
 * The IETF Idempotency-Key draft, both sides: the demo tools send the key as
 * the draft's quoted string and read the cloud's problem+json answers; a 409
 * ("a request with this key is in progress") is retried after the cloud's
 * Retry-After and ends in one resource; 422 and 400 are permanent. Retry-After
 * is honoured for the model too. A worker in-process on PGlite, the mocks over
 * real HTTP.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { DEMO_GOAL as DEFAULT_GOAL } from "../examples/provision/agent.ts";
import { cloudCreate } from "../examples/provision/tools.ts";
import { ToolError } from "../runtime/base/errors.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { Store } from "../runtime/store/store.ts";
import { recordingProxy, testWorker } from "./_worker.ts";
import { openTestPglite } from "./_pglite.ts";

const SERVER = { name: "srv-1", spec: "small" };

Deno.test("the Idempotency-Key draft end to end through the demo tools", async (t) => {
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
    await t.step("the key goes out as the draft's quoted string", async () => {
      cloud.clearFaults();
      const proxy = recordingProxy(mocks.cloudUrl);
      try {
        const outcome = await claimAndDrive(worker({ cloudUrl: proxy.url }).deps, "t-quoted", DEFAULT_GOAL);
        assert.equal(outcome.status, "done");
        assert.deepEqual(proxy.exchanges.map((x) => x.headers.get("idempotency-key")), [
          '"t-quoted:0"',
          '"t-quoted:1"',
          '"t-quoted:2"',
        ]);
        assert.deepEqual(cloud.created("t-quoted:").map((r) => r.key), [
          "t-quoted:0",
          "t-quoted:1",
          "t-quoted:2",
        ]);
      } finally {
        await proxy.close();
      }
    });

    await t.step(
      "409 while another request with the key is in progress: retried after Retry-After, one resource",
      async () => {
        cloud.clearFaults();
        // Someone else's request under the run's first key is still being processed when the tool calls.
        cloud.setFaults({ path: "/v1/servers", delay_ms: 300 });
        const earlier = fetch(`${mocks.cloudUrl}/v1/servers`, {
          method: "POST",
          headers: { "Idempotency-Key": "t-409:0", "content-type": "application/json" },
          body: JSON.stringify(SERVER),
        });
        while ((cloud.requests().by_key["t-409:0"] ?? 0) < 1) await new Promise((r) => setTimeout(r, 2));
        const w = worker();
        const outcome = await claimAndDrive(w.deps, "t-409", DEFAULT_GOAL);
        assert.equal((await earlier).status, 201);
        assert.equal(outcome.status, "done");
        const row = await effect("t-409", 0);
        assert.equal(row.status, "confirmed");
        assert.equal(row.attempts, 2);
        assert.equal(row.remote, "already_done", "the re-send found what the first request stored");
        assert.equal(cloud.created("t-409:0").length, 1);
        const [retry] = w.events("retrying");
        assert.match(String(retry.error), /HTTP 409: A request is outstanding for this Idempotency-Key/);
        assert.equal(retry.retry_after_ms, 1000);
        assert.equal(retry.delay_ms, 1000, "the cloud's Retry-After, not the test policy's 2-10 ms backoff");
        await (await earlier).body?.cancel();
      },
    );

    await t.step("Retry-After on a 429 from the cloud is honoured, within the policy's cap", async () => {
      cloud.clearFaults();
      cloud.setFaults({ path: "/v1/servers", fail_next: 1, fail_status: 429, retry_after_s: 1 });
      cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 503, retry_after_s: 3600 });
      const w = worker({ retry: { retryAfterMaxMs: 200 } });
      assert.equal((await claimAndDrive(w.deps, "t-retry-after", DEFAULT_GOAL)).status, "done");
      assert.deepEqual(
        w.events("retrying").map((e) => [e.key, e.retry_after_ms, e.delay_ms]),
        [["t-retry-after:0", 1000, 200], ["t-retry-after:1", 3_600_000, 200]],
      );
      assert.equal(cloud.created("t-retry-after:").length, 3);
    });

    await t.step("Retry-After from the model is honoured instead of the backoff", async () => {
      cloud.clearFaults();
      model.setFaults({ fail_next: 1, fail_status: 503, retry_after_s: 1 });
      const w = worker();
      const started = performance.now();
      assert.equal((await claimAndDrive(w.deps, "t-model-ra", DEFAULT_GOAL)).status, "done");
      assert.ok(performance.now() - started >= 950, "the worker waited the second the model asked for");
      const [retry] = w.events("model-retry");
      assert.equal(retry.retry_after_ms, 1000);
      assert.equal(retry.delay_ms, 1000);
      assert.match(String(retry.error), /answered HTTP 503: mock model fault: fail_next/);
      model.clearFaults();
    });

    await t.step(
      "the same key with another body: 422 is permanent, named by the problem's title",
      async () => {
        cloud.clearFaults();
        const earlier = await fetch(`${mocks.cloudUrl}/v1/servers`, {
          method: "POST",
          headers: { "Idempotency-Key": '"t-reused:0"' },
          body: JSON.stringify({ name: "someone-else", spec: "large" }),
        });
        await earlier.body?.cancel();
        const w = worker();
        assert.equal((await claimAndDrive(w.deps, "t-reused", DEFAULT_GOAL)).status, "done");
        const row = await effect("t-reused", 0);
        assert.equal(row.status, "failed");
        assert.equal(row.attempts, 1);
        assert.match(
          row.error ?? "",
          /HTTP 422: Idempotency-Key is already used: key "t-reused:0" was first used/,
        );
        assert.equal(cloud.created("t-reused:0").length, 1, "nothing new was made under the reused key");
      },
    );
  } finally {
    cloud.clearFaults();
    model.clearFaults();
    await mocks.close();
    await store.client.close();
  }
});

Deno.test("cloudCreate classifies the cloud's problem answers: 400 and 422 permanent, 409 transient with Retry-After", async () => {
  const mocks = await serveMocks();
  const ctx = (key: string) => ({
    idempotencyKey: key,
    runId: "r",
    seq: 0,
    attempt: 1,
    signal: new AbortController().signal,
    traceHeaders: () => ({}),
  });
  const failure = (key: string, body: unknown = SERVER) =>
    cloudCreate({ cloudUrl: mocks.cloudUrl }, "/v1/servers", body, ctx(key)).then(
      () => assert.fail("the call succeeded"),
      (e) => {
        assert.ok(e instanceof ToolError, `expected a ToolError, got ${e}`);
        return e;
      },
    );
  try {
    const missing = await failure("");
    assert.equal(missing.transient, false);
    assert.match(missing.message, /HTTP 400: Idempotency-Key is missing/);

    assert.deepEqual(
      (await cloudCreate({ cloudUrl: mocks.cloudUrl }, "/v1/servers", SERVER, ctx("k"))).remote,
      "created",
    );
    const reused = await failure("k", { name: "other" });
    assert.equal(reused.transient, false);
    assert.match(reused.message, /HTTP 422/);

    mocks.cloud.setFaults({ delay_ms: 200 });
    const first = cloudCreate({ cloudUrl: mocks.cloudUrl }, "/v1/servers", SERVER, ctx("k2"));
    while ((mocks.cloud.requests().by_key.k2 ?? 0) < 1) await new Promise((r) => setTimeout(r, 2));
    const busy = await failure("k2");
    assert.equal(busy.transient, true, "409 is 'in progress, retry later'");
    assert.equal(busy.retryAfterMs, 1000);
    assert.equal((await first).remote, "created");
    assert.equal(mocks.cloud.created("k2").length, 1);
  } finally {
    mocks.cloud.clearFaults();
    await mocks.close();
  }
});
