/**
 * Model failures, end to end: a worker in-process on one PGlite, the mock
 * model behind a recording proxy and the mock cloud, both over real HTTP,
 * faults injected through the model's knobs. Each step asserts the run's end
 * state, its journal rows, the mocks' counters and the log lines.
 */

import assert from "node:assert/strict";
import type { ModelFaultMode } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { DEMO_GOAL as DEFAULT_GOAL } from "../examples/provision/agent.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { Store } from "../runtime/store/store.ts";
import { addUsage } from "../runtime/model/usage.ts";
import { recordingProxy, testWorker } from "./_worker.ts";
import { openTestPglite } from "./_pglite.ts";

Deno.test("model failures through the mock model over HTTP, on PGlite", async (t) => {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const mocks = await serveMocks();
  const proxy = recordingProxy(mocks.modelUrl);
  const { model, cloud } = mocks;
  const worker = (opts: Partial<Parameters<typeof testWorker>[1]> = {}) =>
    testWorker(store, { modelUrl: proxy.url, cloudUrl: mocks.cloudUrl, ...opts });
  const journalRow = async (runId: string, seq: number) => {
    const { journal } = await store.reads.loadHistory(runId);
    const row = journal.find((j) => j.seq === seq);
    assert.ok(row, `run ${runId} has a journal row for seq ${seq}`);
    return row;
  };
  /** The exchanges of one run, as the proxy saw them. */
  const exchangesOf = (runId: string) =>
    proxy.exchanges.filter((x) => x.headers.get("x-agent-run") === runId);
  try {
    const modes: Array<[ModelFaultMode, string]> = [
      ["garbage", "MODEL_NOT_JSON"],
      ["no_choices", "MODEL_NO_CHOICES"],
      ["unknown_tool", "UNKNOWN_TOOL"],
      ["bad_args", "BAD_ARGS"],
      ["bad_json_args", "MODEL_ARGS_NOT_JSON"],
      ["too_many_calls", "MODEL_TOO_MANY_CALLS"],
    ];
    for (const [mode, code] of modes) {
      await t.step(`an answer broken as ${mode} is refused, told to the model, and asked again`, async () => {
        const runId = `m-${mode.replaceAll("_", "-")}`;
        model.clearFaults();
        model.setFaults({ mode, mode_next: 1 });
        const w = worker();
        const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
        assert.equal(outcome.status, "done");
        assert.equal(outcome.llmCalls, 5, "one re-ask on top of a clean run's four requests");
        assert.equal(model.calls(runId), 5);
        const row = await journalRow(runId, 0);
        assert.equal(row.status, "confirmed");
        assert.equal(row.llm_attempts, 2);
        assert.equal(row.rejections.length, 1);
        assert.equal(row.rejections[0].code, code);
        // The re-ask carries the refusal; the second answer is the one acted on.
        const [first, second] = exchangesOf(runId);
        assert.ok(!first.request.messages.some((m) => String(m.content).includes("refused")));
        const told = second.request.messages.at(-1);
        assert.equal(told?.role, "user");
        assert.match(String(told?.content), new RegExp(`refused \\(${code}\\)`));
        assert.deepEqual(row.decision, { tool: "create_server", args: { name: "srv-2", spec: "small" } });
        assert.equal(cloud.created(`${runId}:`).length, 3, "a refused answer never reaches the cloud");
        const rejected = w.events("rejected");
        assert.equal(rejected.length, 1);
        assert.equal(rejected[0].code, code);
        assert.equal(rejected[0].seq, 0);
      });
    }

    await t.step("usage is stored per step: the sum of every answer the step paid for", async () => {
      const runId = "m-usage";
      model.clearFaults();
      model.setFaults({ mode: "bad_args", mode_next: 1 });
      const outcome = await claimAndDrive(worker().deps, runId, DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      const answers = exchangesOf(runId).map((x) => JSON.parse(x.body));
      assert.equal(answers.length, 5);
      const { journal } = await store.reads.loadHistory(runId);
      // Step 0 paid for two answers (the refused one and the decision), steps 1-3 for one each.
      assert.deepEqual(journal[0].usage, addUsage(answers[0].usage, answers[1].usage));
      for (let seq = 1; seq <= 3; seq++) assert.deepEqual(journal[seq].usage, answers[seq + 1].usage);
      const stored = journal.reduce(
        (n, j) => n + Number((j.usage as { total_tokens: number }).total_tokens),
        0,
      );
      const billed = answers.reduce((n, a) => n + a.usage.total_tokens, 0);
      assert.equal(stored, billed);
    });

    await t.step(
      "bad answers past the bound: the run fails with the reason, each request counted",
      async () => {
        const runId = "m-gaveup";
        model.clearFaults();
        model.setFaults({ mode: "unknown_tool", mode_next: 10 });
        const w = worker({ retry: { maxModelAttempts: 3 } });
        const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
        assert.equal(outcome.status, "failed");
        const run = await store.reads.getRun(runId);
        assert.equal(run?.status, "failed");
        assert.match(
          run?.error ?? "",
          /MODEL_GAVE_UP: .*step 0 in 3 requests; last: UNKNOWN_TOOL: Unknown tool "launch_rocket"/,
        );
        const row = await journalRow(runId, 0);
        assert.equal(row.status, "intent");
        assert.equal(row.llm_attempts, 3);
        assert.deepEqual(row.rejections.map((r) => r.code), ["UNKNOWN_TOOL", "UNKNOWN_TOOL", "UNKNOWN_TOOL"]);
        assert.equal(model.calls(runId), 3);
        assert.deepEqual(cloud.created(`${runId}:`), []);
        assert.equal(w.events("rejected").length, 3);
        assert.equal(w.events("failed").at(-1)?.level, "ERROR");
        model.clearFaults();
      },
    );

    await t.step("503 and 429 from the model are retried with backoff, each counted first", async () => {
      const runId = "m-503";
      model.clearFaults();
      model.setFaults({ fail_next: 2, fail_status: 503 });
      const w = worker();
      const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      const row = await journalRow(runId, 0);
      assert.equal(row.llm_attempts, 3);
      assert.deepEqual(row.rejections, [], "a transient error is not the model's fault");
      assert.equal(model.calls(runId), 6);
      const retries = w.events("model-retry");
      assert.deepEqual(retries.map((e) => [e.seq, e.attempt, e.code]), [[0, 1, "MODEL_HTTP"], [
        0,
        2,
        "MODEL_HTTP",
      ]]);
      assert.match(String(retries[0].error), /HTTP 503/);
      assert.deepEqual(w.events("deciding").filter((e) => e.seq === 0).map((e) => e.attempt), [1, 2, 3]);

      model.setFaults({ fail_next: 1, fail_status: 429 });
      const w2 = worker();
      assert.equal((await claimAndDrive(w2.deps, "m-429", DEFAULT_GOAL)).status, "done");
      assert.equal((await journalRow("m-429", 0)).llm_attempts, 2);
      assert.match(String(w2.events("model-retry")[0].error), /HTTP 429/);
    });

    await t.step(
      "a model that keeps failing past the retry horizon: the run fails, naming how long and the last error",
      async () => {
        const runId = "m-down";
        model.clearFaults();
        model.setFaults({ fail_next: 10_000, fail_status: 502 });
        const w = worker({ retry: { horizonMs: 100 } });
        const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
        assert.equal(outcome.status, "failed");
        assert.match(
          (await store.reads.getRun(runId))?.error ?? "",
          /^MODEL_GAVE_UP: The model failed \d+ requests for step 0 over \d+ ms \(the retry horizon is 100 ms, counted from the first failure, across restarts\); last error: MODEL_HTTP: The model at http:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions answered HTTP 502/,
        );
        const row = await journalRow(runId, 0);
        assert.ok(row.llm_attempts >= 2, `asked again within the horizon: ${row.llm_attempts} requests`);
        assert.equal(row.failures, row.llm_attempts, "every request failed, each failure recorded");
        assert.equal(model.calls(runId), row.llm_attempts, "every request counted before it went out");
        assert.equal(w.events("model-retry").length, row.llm_attempts - 1);
        model.clearFaults();
      },
    );

    await t.step("a permanent model error (401) fails the run at once", async () => {
      const runId = "m-401";
      model.clearFaults();
      model.setFaults({ fail_next: 1, fail_status: 401 });
      const w = worker();
      const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
      assert.equal(outcome.status, "failed");
      assert.match(
        (await store.reads.getRun(runId))?.error ?? "",
        /MODEL_HTTP: The model at \S+ answered HTTP 401/,
      );
      assert.equal((await journalRow(runId, 0)).llm_attempts, 1);
      assert.equal(model.calls(runId), 1);
      assert.equal(w.events("model-retry").length, 0);
    });

    await t.step("a hung model request times out and is asked again", async () => {
      const runId = "m-hang";
      model.clearFaults();
      model.setFaults({ hang_next: 1 });
      const w = worker({ modelUrl: mocks.modelUrl, retry: { modelTimeoutMs: 150 } });
      const outcome = await claimAndDrive(w.deps, runId, DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      assert.equal((await journalRow(runId, 0)).llm_attempts, 2);
      assert.equal(model.calls(runId), 5);
      const [retry] = w.events("model-retry");
      assert.equal(retry.code, "MODEL_TIMEOUT");
      assert.match(String(retry.error), /did not answer within 150ms/);
    });
  } finally {
    await proxy.close();
    await mocks.close();
    await store.client.close();
  }
});
