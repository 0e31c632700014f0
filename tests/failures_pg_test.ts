/**
 * The same failure answers on a real PostgreSQL (each test in its own
 * schema), with the mocks over real HTTP.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { DEMO_GOAL as DEFAULT_GOAL } from "../examples/provision/agent.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { pgTest } from "./_pg.ts";
import { testWorker } from "./_worker.ts";

pgTest(
  "on PostgreSQL, act-then-drop on every first attempt leaves one resource per key, each already_done",
  async (db) => {
    const mocks = await serveMocks();
    try {
      for (const path of ["/v1/servers", "/v1/databases", "/v1/dns_records"]) {
        mocks.cloud.setFaults({ path, drop_after_act_next: 1 });
      }
      const w = testWorker(db.store, { modelUrl: mocks.modelUrl, cloudUrl: mocks.cloudUrl });
      const outcome = await claimAndDrive(w.deps, "pg-drop", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      assert.equal((await db.store.reads.getRun("pg-drop"))?.status, "done");
      const created = mocks.cloud.created();
      assert.deepEqual(created.map((r) => r.key), ["pg-drop:0", "pg-drop:1", "pg-drop:2"]);
      const { effects } = await db.store.reads.loadHistory("pg-drop");
      assert.deepEqual(
        effects.map((e) => [e.idempotency_key, e.status, e.remote, e.attempts, e.result]),
        created.map((r) => [r.key, "confirmed", "already_done", 2, r.id]),
      );
      assert.deepEqual(mocks.cloud.requests().by_key, { "pg-drop:0": 2, "pg-drop:1": 2, "pg-drop:2": 2 });
      assert.deepEqual(w.events("confirmed").map((e) => e.remote), [
        "already_done",
        "already_done",
        "already_done",
      ]);
      assert.equal(mocks.model.calls("pg-drop"), 4);
    } finally {
      await mocks.close();
    }
  },
);

pgTest(
  "on PostgreSQL, a permanent 4xx is recorded and a refused answer is re-asked, and the run finishes",
  async (db) => {
    const mocks = await serveMocks();
    try {
      mocks.cloud.setFaults({ path: "/v1/servers", fail_next: 1, fail_status: 400 });
      mocks.model.setFaults({ mode: "too_many_calls", mode_next: 1 });
      const w = testWorker(db.store, { modelUrl: mocks.modelUrl, cloudUrl: mocks.cloudUrl });
      const outcome = await claimAndDrive(w.deps, "pg-4xx", DEFAULT_GOAL);
      assert.equal(outcome.status, "done");
      const { journal, effects } = await db.store.reads.loadHistory("pg-4xx");
      assert.equal(journal[0].llm_attempts, 2);
      assert.deepEqual(journal[0].rejections.map((r) => r.code), ["MODEL_TOO_MANY_CALLS"]);
      assert.equal(effects[0].status, "failed");
      assert.equal(effects[0].attempts, 1);
      assert.match(effects[0].error ?? "", /HTTP 400/);
      assert.deepEqual(effects.slice(1).map((e) => e.status), ["confirmed", "confirmed"]);
      assert.deepEqual(mocks.cloud.created().map((r) => r.kind), ["database", "dns_record"]);
      assert.equal(mocks.model.calls("pg-4xx"), 5);
      assert.equal(w.events("rejected").length, 1);
      assert.equal(w.events("tool-failed")[0].code, "TOOL_HTTP");
    } finally {
      await mocks.close();
    }
  },
);
