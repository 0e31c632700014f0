/**
 * Regression tests for what an adversarial pass broke (issue #9) that need a
 * real PostgreSQL or real processes; each is named after the bug it pins.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import demoAgent from "../examples/provision/agent.ts";
import { serveMocks } from "../mock/server.ts";
import { runDepsFor } from "../runtime/run/context.ts";
import { agentDeps, processDeps } from "../runtime/run/deps.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { Store } from "../runtime/store/store.ts";
import { ToolRegistry } from "../runtime/agent/tools.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { pgIgnore, pgTest, TEST_DATABASE_URL } from "./_pg.ts";
import { parseLine, runCliIsolated, runWorkerToEnd, startSupervisor, until } from "../harness/procs.ts";

const runCli = runCliIsolated;

pgTest(
  "two workers starting a new run at once: the loser sees the run and reports lost_claim",
  async (pg) => {
    const mocks = await serveMocks();
    const stores = [new Store(await openPostgres(pg.url)), new Store(await openPostgres(pg.url))];
    try {
      for (let i = 0; i < 15; i++) {
        const runId = `both-${i}`;
        const outcomes = await Promise.all(stores.map((store, w) => {
          const proc = processDeps({
            store,
            owner: `w${w}`,
            log: new Logger({
              clock: { now: () => new Date(), sleep: () => Promise.resolve() },
              sink: arraySink([]),
            }),
          });
          const agent = agentDeps({
            agent: demoAgent,
            planner: new OpenAIPlanner({ url: mocks.modelUrl, model: "m" }),
            tools: new ToolRegistry(demoTools({ cloudUrl: mocks.cloudUrl })),
          });
          return claimAndDrive(runDepsFor(proc, agent), { runId, goal: "race" });
        }));
        const statuses = outcomes.map((o) => o.status).sort();
        // Usually one wins the claim and the other loses it. One that reads the run after the
        // other's claim takes it over (a hand-started worker ignores the lease) and fences it;
        // one that starts after the other finished finds it done. Never RUN_MISSING.
        assert.ok(
          ["done,lost_claim", "done,fenced", "done,done"].includes(statuses.join(",")),
          `try ${i}: ${JSON.stringify(outcomes)}`,
        );
      }
      const keys = mocks.cloud.created().map((c) => c.key);
      assert.equal(new Set(keys).size, keys.length, "one resource per key");
      assert.equal(keys.length, 45);
    } finally {
      await Promise.all(stores.map((s) => s.client.close()));
      await mocks.close();
    }
  },
);

pgTest("a database whose tables lack a column is refused before any tool acts", async (pg) => {
  const mocks = await serveMocks();
  try {
    await pg.store.client.exec(`alter table side_effects drop column remote`);
    const { code, lines } = await runWorkerToEnd({
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      RUN_ID: "shape",
    });
    assert.equal(code, 2, lines.join("\n"));
    assert.match(
      lines.join("\n"),
      /event=store-unavailable code=SCHEMA_OUTDATED .*lack side_effects\.remote/,
    );
    assert.equal(mocks.cloud.created().length, 0, "nothing was created");
    assert.equal(mocks.model.calls(), 0, "nothing was asked");
  } finally {
    await mocks.close();
  }
});

pgTest(
  "under a supervisor, a model that always answers an unstorable value ends the run failed, with bounded spend",
  async (pg) => {
    const mocks = await serveMocks();
    mocks.model.setScript({
      agent: "provision",
      steps: [{ tool: "create_dns_record", args: { hostname: "a\u0000b", record_type: "A", target: "x" } }],
    });
    const sup = startSupervisor({
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
    });
    try {
      await pg.store.leases.createRun({ runId: "poison", agent: "provision", goal: "g" }, new Date());
      await until(
        async () => (await pg.store.reads.getRun("poison"))?.status === "failed",
        "the run to fail",
        30_000,
      );
      const run = await pg.store.reads.getRun("poison");
      assert.match(run?.error ?? "", /MODEL_GAVE_UP: .*MODEL_UNSTORABLE/);
      assert.equal(mocks.model.calls("poison"), 4, "four paid requests, no more");
      assert.equal(mocks.cloud.created().length, 0);
      assert.equal(sup.events("worker-exited").length, 0, "no worker died: nothing to restart");
    } finally {
      await sup.close();
      await mocks.close();
    }
  },
);

Deno.test("settings a worker would refuse are refused by the supervisor, once, with exit 2", async () => {
  const { code, out } = await runCli(["supervise"], {
    DATABASE_URL: "postgres://postgres@127.0.0.1:1/none",
    HEARTBEAT_S: "0.0004",
    MODEL_URL: "http://127.0.0.1:1/v1",
    CLOUD_URL: "http://127.0.0.1:1",
  });
  assert.equal(code, 2, out);
  assert.match(
    out,
    /HEARTBEAT_S must be a number of seconds from 0\.01 to 86400: current value is "0\.0004"/,
  );
  assert.ok(!/\n\s+at /.test(out), "no stack trace");
});

Deno.test("DATA_DIR that is a file or under /proc, and a malformed DATABASE_URL, each give one line and exit 2", async (t) => {
  const file = await Deno.makeTempFile();
  try {
    for (
      const [name, env, pattern] of [
        ["a file", { DATA_DIR: file }, /DATA_DIR_INVALID|could not be set up/],
        ["under /proc", { DATA_DIR: "/proc/agent-runtime" }, /DATA_DIR_INVALID|could not be set up/],
        [
          "a bad percent-escape",
          { DATABASE_URL: "postgres://u:p%zz@127.0.0.1:1/db" },
          /malformed percent-escape/,
        ],
      ] as const
    ) {
      await t.step(name, async () => {
        const { code, out } = await runCli(["run"], { RUN_ID: "x", ...env });
        assert.equal(code, 2, out);
        assert.match(out, pattern);
        assert.ok(!/\n\s+at /.test(out), `a stack trace:\n${out}`);
      });
    }
    await t.step("the commands too", async () => {
      const { code, out } = await runCli(["runs"], { DATABASE_URL: "postgres://u:p%zz@127.0.0.1:1/db" });
      assert.equal(code, 2, out);
      assert.match(out, /DB_URL_INVALID/);
      assert.ok(!/\n\s+at /.test(out), `a stack trace:\n${out}`);
    });
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("secrets in every form: a key with a newline, a password in the query string", async () => {
  const newline = await runCli(["run"], {
    RUN_ID: "k",
    MODEL_URL: "http://127.0.0.1:1/v1",
    MODEL_API_KEY: "sk-abc\ndef",
  });
  assert.equal(newline.code, 2, newline.out);
  assert.match(newline.out, /MODEL_API_KEY contains a newline .*its value is not shown/);
  assert.ok(!newline.out.includes("sk-abc"), newline.out);
  const query = await runCli(["run"], {
    RUN_ID: "k",
    DATABASE_URL: "postgres://u@/db?password=hunter2&host=x",
  });
  assert.equal(query.code, 2, query.out);
  assert.ok(!query.out.includes("hunter2"), query.out);
});

Deno.test("an empty RUN_ID is refused, not taken as the default", async () => {
  const { code, out } = await runCli(["run"], { RUN_ID: "" });
  assert.equal(code, 2, out);
  assert.match(out, /RUN_ID must be 1-64 characters .*current value is ""/);
});

Deno.test({
  name: "the database failing mid-run exits 7 and says the run is intact",
  ignore: pgIgnore("exit 7"),
  async fn() {
    const schema = `t_gone_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    const mocks = await serveMocks();
    try {
      const { SCHEMA_SQL } = await import("../runtime/store/store.ts");
      await admin.unsafe(`create schema ${schema}; set search_path to ${schema}; ${SCHEMA_SQL}`).simple();
      const u = new URL(TEST_DATABASE_URL!);
      u.searchParams.set("search_path", schema);
      mocks.cloud.setFaults({ delay_ms: 1500 }); // the tables go while a tool call is in flight
      const worker = runWorkerToEnd({
        DATABASE_URL: u.toString(),
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        RUN_ID: "gone",
      });
      await until(() => Promise.resolve(mocks.cloud.requests().total > 0), "the first tool call");
      await admin.unsafe(`drop schema ${schema} cascade`);
      const { code, lines } = await worker;
      assert.equal(code, 7, lines.join("\n"));
      const line = lines.find((l) => parseLine(l)?.event === "infrastructure-error") ?? "";
      assert.match(line, /run=gone .*note="the run is intact; start it again with --run-id gone/);
    } finally {
      await admin.unsafe(`drop schema if exists ${schema} cascade`);
      await admin.end();
      await mocks.close();
    }
  },
});
