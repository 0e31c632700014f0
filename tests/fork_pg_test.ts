/**
 * A fork with real processes on PostgreSQL, the mock model and the mock
 * cloud over HTTP: a finished demo run forked at step 1 onto another model
 * (a second scripted model of the mock, named in the request). Step 0 is the
 * original's rows, with no model request and no tool request; steps from 1
 * are decided anew by that model; the cloud sees no request from the fork
 * (the demo's tools answer from their stubs); a `deno run` SIGKILLed after
 * the fork's first own decision resumes it like any run.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { MODEL_B_STEPS } from "./_fork.ts";
import { pgTest } from "./_pg.ts";
import { runCli } from "../harness/procs.ts";

pgTest(
  "a finished demo run forked at step 1 onto another model sends nothing and survives a SIGKILL",
  async (pg) => {
    const mocks = await serveMocks();
    try {
      mocks.model.setModelScript("mock-b", MODEL_B_STEPS);
      const env = {
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
      };
      const ran = await runCli(["run"], { ...env, RUN_ID: "orig" });
      assert.equal(ran.code, 0, ran.out);
      const cloudBefore = mocks.cloud.requests();
      assert.equal(cloudBefore.total, 3);
      assert.equal(mocks.model.calls("orig"), 4);

      const forked = await runCli(
        ["fork", "orig", "--at-seq", "1", "--model", "mock-b", "--run-id", "f1"],
        env,
      );
      assert.equal(forked.code, 0, forked.out);
      assert.match(
        forked.out,
        /forked {2}run=f1 {2}of=orig {2}at_seq=1 {2}dry_run {2}copied: steps=1 calls=1 messages=0/,
      );

      // Killed right after the fork's first own decision, before its call is answered.
      const killed = await runCli(["run"], {
        ...env,
        RUN_ID: "f1",
        CRASH_AT: "after_decide",
        CRASH_SEQ: "1",
      });
      assert.equal(killed.code, 137, killed.out);
      const resumed = await runCli(["run"], { ...env, RUN_ID: "f1" });
      assert.equal(resumed.code, 0, resumed.out);
      assert.match(resumed.out, /event=dry-answered run=f1 seq=1 key=f1:1 tool=create_database by=stub/);

      assert.deepEqual(mocks.cloud.requests(), cloudBefore, "the cloud saw no request from the fork");
      // Steps 1, 2 and 3 were asked of mock-b; step 0 was not asked at all.
      assert.equal(mocks.model.calls("f1"), 3);
      const { journal, effects } = await pg.store.reads.loadHistory("f1");
      const orig = await pg.store.reads.loadHistory("orig");
      assert.deepEqual(journal[0].decision, orig.journal[0].decision);
      assert.equal(journal[0].llm_attempts, 0);
      assert.deepEqual(journal.slice(1).map((j) => j.llm_attempts), [1, 1, 1]);
      assert.deepEqual(journal.slice(1).map((j) => j.params?.model), ["mock-b", "mock-b", "mock-b"]);
      assert.deepEqual(
        effects.map((e) => [e.idempotency_key, e.remote, e.result, e.attempts]),
        [
          ["f1:0", "original", orig.effects[0].result, 0],
          ["f1:1", "stub", "stub-db-db-b", 0],
          ["f1:2", "stub", "stub-dns-b.example.com", 0],
        ],
      );
      const run = await pg.store.reads.getRun("f1");
      assert.equal(run?.status, "done");
      assert.equal(run?.output, "Provisioned on mock-b.");
      assert.equal(run?.forked_from, "orig");
      assert.equal(run?.forked_at_seq, 1);

      const shown = await runCli(["inspect", "f1"], env);
      assert.match(shown.out, /fork: fork of orig at step 1 .*dry run/);
      assert.match(shown.out, /key=f1:0 .*remote=original {2}answered=original \(never sent\)/);
      const listed = await runCli(["runs"], env);
      assert.match(listed.out, /^f1 \(fork of orig@1, dry\) +provision +done /m);
    } finally {
      await mocks.close();
    }
  },
);
