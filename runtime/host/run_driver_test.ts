import assert from "node:assert/strict";
import { MockCloud } from "../../mock/cloud.ts";
import demoAgent from "../../examples/provision/agent.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { MockModel } from "../../mock/model.ts";
import { ManualClock } from "../base/clock.ts";
import { type CrashPoint, CrashPoints, SimulatedKill } from "../base/crashpoints.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, DEFAULT_RETRY, processDeps } from "../run/deps.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive, WorkerError } from "./run_driver.ts";
import { OpenAIPlanner } from "../model/planner.ts";
import { CountingClient } from "../store/counting.ts";
import { Store } from "../store/store.ts";
import { RunWrites } from "../store/run_writes.ts";
import { defineTool, ToolRegistry } from "../agent/tools.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

async function setup() {
  const clock = new ManualClock();
  const counting = new CountingClient(await openTestPglite());
  const store = new Store(counting);
  await store.applySchema();
  counting.reset(); // count the protocol's statements, not the migration's
  const model = await MockModel.open({ now: () => clock.now() });
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const deps = runDepsFor(
    processDeps({ store, clock, log, owner: "w1", random: () => 0.5 }),
    agentDeps({
      agent: demoAgent,
      planner: new OpenAIPlanner({ url: "http://model/v1", model: "m", fetch: model.handler }),
      tools: new ToolRegistry(demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler })),
    }),
  );
  return { deps, counting, store, model, cloud, lines };
}

Deno.test("claimAndDrive() drives the demo to done with four statements a step and none re-read", async (t) => {
  const { deps, counting, store, model, cloud, lines } = await setup();
  try {
    await t.step("a clean run: 3 tool calls, 4 model calls, 3 resources", async () => {
      const outcome = await claimAndDrive(deps, "clean", "goal");
      assert.equal(outcome.status, "done");
      assert.equal(outcome.toolCalls, 3);
      assert.equal(outcome.llmCalls, 4);
      assert.equal(model.calls("clean"), 4);
      assert.deepEqual(cloud.created("clean:").map((c) => c.key), ["clean:0", "clean:1", "clean:2"]);
    });

    await t.step(
      "the statement count is the protocol's: 3 per fresh run + 4 per tool step + 2 for the done step",
      () => {
        // The pin (#11: it was 5 per run). Why each statement is there:
        const perRun = [
          "create-or-read (`with`): the run must exist, and its status, agent and epoch be known, before a " +
          "claim; a new run's row is the one its insert wrote, so only a flag comes back",
          "claim (`update`): the compare-and-swap on the epoch that every later write is fenced on (from " +
          "epoch 0 without counting progress: a never-claimed run has none)",
          // (no history read: a run claimed at epoch 1 has never been claimed, so it has no rows; a
          // resumed run pays one `select` here, both tables in one statement)
          "close (`update`): done, with the output, fenced; without it the run would be taken again",
        ];
        const perToolStep = [
          "decision intent (`insert`): the model request is counted before it is sent (a plain insert: " +
          "the worker holds no row for the step, so no `on conflict`, and no row comes back)",
          "decision confirm (`update`): the decision is durable before anything acts on it",
          "tool intent (`insert`): the call is on record before it goes out under its key (plain, as above)",
          "tool confirm (`update`): the result, and whether the remote created or recognised it",
        ];
        const doneStep = perToolStep.slice(0, 2); // the done step decides, then the close ends the run
        assert.equal(counting.total, perRun.length + perToolStep.length * 3 + doneStep.length);
        assert.equal(counting.total, 17);
        // By name, as each statement is declared (statements.ts).
        assert.deepEqual(Object.fromEntries(counting.counts), {
          "create-or-read": 1,
          "first-claim": 1,
          "journal-intent": 4,
          "journal-confirm": 4,
          "effect-intent": 3,
          "effect-confirm": 3,
          "finish-run": 1,
        });
      },
    );

    await t.step("a resumed run pays one history read, both tables in one statement", async () => {
      const first = await claimAndDrive({ ...deps, maxSteps: 1 }, "resumed", "goal");
      assert.equal(first.status, "failed"); // guard, after one tool step
      await store.operators.reopenRun("resumed", deps.clock.now());
      counting.reset();
      const outcome = await claimAndDrive(deps, "resumed", "goal");
      assert.equal(outcome.status, "done");
      // create-or-read (the insert finds the run), the run's row (`select`: a new run's row is the one
      // the insert wrote, an existing one's is read), claim, the history read, steps 1 and 2 (step 0
      // is replayed: no statement), done, close
      assert.deepEqual(Object.fromEntries(counting.counts), {
        "create-or-read": 1,
        "read-run": 1,
        claim: 1,
        "read-history": 1,
        "journal-intent": 3,
        "journal-confirm": 3,
        "effect-intent": 2,
        "effect-confirm": 2,
        "finish-run": 1,
      });
      assert.equal(counting.total, 3 + 2 + 4 * 2 + 2);
    });

    await t.step("the DNS record targets the server decided at step 0", async () => {
      const dns = cloud.created("clean:").find((c) => c.kind === "dns_record");
      assert.equal(dns?.payload.target, "srv-1");
      const { journal } = await store.reads.loadHistory("clean");
      assert.deepEqual(journal.map((j) => j.status), ["confirmed", "confirmed", "confirmed", "confirmed"]);
      assert.ok(journal.every((j) => j.usage !== null), "token usage is stored per step");
    });

    await t.step("a second worker on a done run does nothing and says so", async () => {
      counting.reset();
      const again = await claimAndDrive(deps, "clean", "goal");
      assert.equal(again.status, "done");
      assert.equal(again.alreadyClosed, true);
      assert.equal(again.llmCalls, 4);
      assert.equal(model.calls("clean"), 4);
      assert.match(lines.at(-1)!, /event=already-done run=clean tool_calls=3 llm_calls=4/);
      // Reads only: the run, found by the insert that wrote nothing, and its history (the reply counts
      // its steps and model calls).
      assert.deepEqual(
        Object.fromEntries(counting.counts),
        { "create-or-read": 1, "read-run": 1, "read-history": 1 },
        "a closed run is not written",
      );
    });

    await t.step(
      "MAX_STEPS stops a run that does not finish (guard) and fails it with the reason",
      async () => {
        const outcome = await claimAndDrive({ ...deps, maxSteps: 2 }, "guarded", "goal");
        assert.equal(outcome.status, "failed");
        assert.match(outcome.error ?? "", /MAX_STEPS=2/);
        assert.equal((await store.reads.getRun("guarded"))?.status, "failed");
        assert.ok(lines.some((l) => /level=warn event=guard run=guarded max_steps=2/.test(l)));
        assert.equal(cloud.created("guarded:").length, 2);
      },
    );

    await t.step(
      "a tool that throws an unclassified error after the remote acted is re-sent, not failed",
      async () => {
        // create_server behaves as usual, but its first attempt throws a plain Error once the cloud has acted.
        const [server, ...rest] = demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler });
        const flaky = defineTool({
          name: server.name,
          description: server.description,
          args: server.args,
          run: async (args, ctx) => {
            const outcome = await server.run(args, ctx);
            if (ctx.attempt === 1) throw new TypeError("bug in the tool's answer parsing");
            return outcome;
          },
        });
        const running = claimAndDrive(
          { ...deps, tools: new ToolRegistry([flaky, ...rest]) },
          "flaky",
          "goal",
        );
        // The re-send waits out a backoff on the manual clock: move time on until the run ends.
        let ended = false;
        running.finally(() => ended = true).catch(() => {});
        for (let i = 0; i < 2_000 && !ended; i++) {
          await (deps.clock as ManualClock).advance(100);
          await new Promise((r) => setTimeout(r, 2)); // let the database answer in real time
        }
        const outcome = await running;
        assert.equal(outcome.status, "done");
        const { effects } = await store.reads.loadHistory("flaky");
        assert.equal(effects[0].status, "confirmed");
        assert.equal(effects[0].attempts, 2);
        assert.equal(effects[0].remote, "already_done");
        assert.equal(cloud.created("flaky:0").length, 1);
      },
    );

    await t.step(
      "an unclassified error lets the run go (lease released, error kept); the bound stops it, naming the error",
      async () => {
        // The approval rule of create_server throws: an error the runtime does not classify.
        const [server, ...rest] = demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler });
        const broken = defineTool({
          name: server.name,
          description: server.description,
          args: server.args,
          approval: () => {
            throw new TypeError("the approval rule broke");
          },
          run: (args, ctx) => server.run(args, ctx),
        });
        const poisoned = { ...deps, tools: new ToolRegistry([broken, ...rest]) };
        const err = await claimAndDrive(poisoned, "rule", "goal").then(
          () => assert.fail("the run went on past a throwing rule"),
          (e) => e as WorkerError,
        );
        assert.ok(err instanceof WorkerError, String(err));
        assert.equal(err.lease, "released");
        assert.match(
          err.message,
          /^The worker on run rule stopped at .*: TypeError: the approval rule broke$/,
        );
        const run = await store.reads.getRun("rule");
        assert.equal(run?.status, "running");
        assert.equal(run?.heartbeat_at, null, "takeable at once");
        assert.equal(run?.error, "TypeError: the approval rule broke");
        // Each start again is one more claim: the first decided (progress), five more find none.
        for (let i = 0; i < 5; i++) {
          await assert.rejects(claimAndDrive(poisoned, "rule", "goal"), WorkerError);
        }
        const stuck = await claimAndDrive(poisoned, "rule", "goal");
        assert.equal(stuck.status, "failed");
        assert.match(
          stuck.error ?? "",
          /^stuck: 5 workers .*The last of them stopped at: TypeError: the approval rule/,
        );
        assert.equal(cloud.created("rule:").length, 0, "the call never went out");
        assert.equal(model.calls("rule"), 1, "the decision was made once and replayed");
      },
    );

    await t.step(
      "a model that keeps throwing an unclassified error is bounded by its attempts, the limit naming the error",
      async () => {
        const throwing = {
          ...deps,
          planner: {
            describe: "a planner with a bug",
            decide: () => Promise.reject(new TypeError("the planner broke")),
          },
        };
        // Each claim pays one request (counted before it is sent), which throws: the run is let go.
        for (let i = 0; i < DEFAULT_RETRY.maxModelAttempts; i++) {
          await assert.rejects(claimAndDrive(throwing, "planner", "goal"), WorkerError);
        }
        const outcome = await claimAndDrive(throwing, "planner", "goal");
        assert.equal(outcome.status, "failed");
        assert.match(
          outcome.error ?? "",
          /^MODEL_GAVE_UP: The model was asked 4 times .*; its last worker stopped at: TypeError: the planner broke$/,
        );
      },
    );
  } finally {
    await store.client.close();
  }
});

Deno.test("a step of three calls is one decision and three tool calls: the outcome, the done line and a second start say tool_calls=3", async () => {
  const { deps, store, model, cloud, lines } = await setup();
  try {
    model.setScript({
      run: "par",
      steps: [{
        calls: [
          { tool: "create_server", args: { name: "srv-1", spec: "small" } },
          { tool: "create_database", args: { name: "db-1", engine: "postgres", size_gb: 10 } },
          {
            tool: "create_dns_record",
            args: { hostname: "app.example.test", record_type: "CNAME", target: "srv-1" },
          },
        ],
      }, { answer: "All three at once." }],
    });
    const outcome = await claimAndDrive(deps, "par", "goal");
    assert.equal(outcome.status, "done", outcome.error);
    assert.deepEqual([outcome.toolCalls, outcome.llmCalls], [3, 2]);
    const { journal } = await store.reads.loadHistory("par");
    assert.deepEqual(journal.map((j) => j.seq), [0, 3], "two decisions: the three calls', then the answer's");
    assert.match(
      lines.find((l) => l.includes(" event=done ")) ?? "",
      /event=done run=par tool_calls=3 llm_calls=2 /,
    );
    const again = await claimAndDrive(deps, "par", "goal");
    assert.deepEqual([again.alreadyClosed, again.toolCalls, again.llmCalls], [true, 3, 2]);
    assert.match(lines.at(-1)!, /event=already-done run=par tool_calls=3 llm_calls=2/);
    assert.deepEqual(cloud.created("par:").map((c) => c.key).sort(), ["par:0", "par:1", "par:2"]);
  } finally {
    await store.client.close();
  }
});

Deno.test("a broken invariant stops the run's turn as a bug: the worker lets the run go with the error on it, no call sent after it", async () => {
  const { deps, store, cloud } = await setup();
  try {
    // A store whose writes hand back another run's row for a tool call's intent: what no write may do.
    class WrongWrites extends RunWrites {
      override async effectIntentRow(...args: Parameters<RunWrites["effectIntentRow"]>) {
        return { ...(await super.effectIntentRow(...args)), run_id: "someone-else" };
      }
    }
    const wrong = store.withAudiences({ writes: new WrongWrites(store.client) });
    await assert.rejects(
      claimAndDrive({ ...deps, store: wrong }, "broken", "goal"),
      (e: WorkerError) =>
        e instanceof WorkerError &&
        /Invariant broken in run broken: a row of run someone-else/.test(e.message),
    );
    const run = await store.reads.getRun("broken");
    assert.equal(run?.heartbeat_at, null, "the lease let go, for the next take");
    assert.match(run?.error ?? "", /INVARIANT_BROKEN|Invariant broken in run broken/);
    assert.deepEqual(cloud.created("broken:"), [], "the call whose intent came back wrong was never sent");
  } finally {
    await store.client.close();
  }
});

Deno.test("a worker that takes a run again goes on after the steps settled before it, replaying none of them one by one", async () => {
  const { deps, model, cloud, lines } = await setup();
  try {
    const kill = (point: CrashPoint, seq: number) => Promise.reject(new SimulatedKill(point, seq));
    const plan = { crashAt: "after_call" as const, crashSeq: 2, stallMs: 0 };
    const dying = { ...deps, crash: new CrashPoints(plan, { log: deps.log, clock: deps.clock, kill }) };
    await assert.rejects(claimAndDrive(dying, "ahead", "goal"), SimulatedKill);
    lines.length = 0;
    const outcome = await claimAndDrive({ ...deps, owner: "w2" }, "ahead", "goal");
    assert.equal(outcome.status, "done");
    const events = (name: string) => lines.filter((l) => l.includes(` event=${name} `));
    assert.equal(events("replayed-settled").length, 1, lines.join("\n"));
    assert.match(events("replayed-settled")[0], /run=ahead steps=2 next_seq=2$/);
    // Step 2's call was at intent when its worker died: its decision is replayed, its call re-sent.
    assert.deepEqual(events("replayed").map((l) => / seq=(\d+) /.exec(l)?.[1]), ["2"]);
    assert.deepEqual(
      events("skipped").map((l) => / seq=(\d+) /.exec(l)?.[1]),
      ["2"],
      "of the settled calls, only the one recovery settled is gone over",
    );
    assert.equal(model.calls("ahead"), 4, "no decision bought twice");
    assert.deepEqual(cloud.created("ahead:").map((c) => c.key), ["ahead:0", "ahead:1", "ahead:2"]);
  } finally {
    await deps.store.client.close();
  }
});
