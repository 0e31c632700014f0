import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { Client } from "../client/client.ts";
import { settle } from "../base/clock.ts";
import { discardSink, Logger } from "../base/log.ts";
import type { Planner } from "../model/planner.ts";
import { defineTool } from "../agent/tools.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import { SimWorld } from "../../harness/sim.ts";
import { TapClient } from "./counting.ts";
import type { SqlClient } from "./driver.ts";
import { ALL_STATEMENTS, isStatementName, type StatementName, statementName } from "./statements.ts";
import { Store } from "./store.ts";
import { openTestSim } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

Deno.test("every statement of the store is declared once: one name, one text", () => {
  const names = ALL_STATEMENTS.map((s) => s.name);
  assert.equal(new Set(names).size, names.length, "a name is declared twice");
  const texts = ALL_STATEMENTS.map((s) => s.text);
  assert.equal(new Set(texts).size, texts.length, "a text is declared twice");
  for (const s of ALL_STATEMENTS) {
    assert.match(s.name, /^[a-z]+(-[a-z]+)*$/, `the name ${s.name} is not kebab-case`);
    // The name travels with every execution.
    assert.equal(s.options.name, s.name);
    assert.ok(Object.isFrozen(s) && Object.isFrozen(s.options), `${s.name} can be changed`);
  }
  assert.equal(isStatementName("journal-intent"), true);
  assert.equal(isStatementName("insert into journal"), false);
  assert.equal(statementName({ name: "take-runs" }), "take-runs");
  assert.equal(statementName({ planEachTime: true }), undefined);
});

/** A layer that remembers, for every statement sent through it, the name it came with (or its text). */
function recording(): { wrap: (client: SqlClient) => SqlClient; seen: Map<string, string | undefined> } {
  const seen = new Map<string, string | undefined>();
  const wrap = (client: SqlClient) =>
    new TapClient(client, ({ text, opts }) => {
      const name = opts?.name;
      seen.set(isStatementName(name) ? name : `unnamed: ${text.trim().slice(0, 60)}`, name);
    });
  return { wrap, seen };
}

/** The statements in `seen` that came without one of the store's names. */
const unnamed = (seen: Map<string, string | undefined>) =>
  [...seen.keys()].filter((k) => !isStatementName(k));

Deno.test("every statement the runtime sends has a name: a demo run, a resumed one, the schema check, a worker host, the operators' commands", async (t) => {
  const db = await openTestSim();
  try {
    await t.step("opening a database: migrate and the schema check", async () => {
      const { wrap, seen } = recording();
      const store = new Store(wrap(await openTestPglite()));
      try {
        await store.migrate();
        await store.migrate(); // current now: the version read finds it
        await store.checkSchema();
      } finally {
        await store.client.close();
      }
      assert.deepEqual(unnamed(seen), []);
      for (const name of ["search-path", "schema-version-table", "schema-version", "schema-columns"]) {
        assert.ok(seen.has(name), `${name} was not sent: ${[...seen.keys()]}`);
      }
    });

    const world = await SimWorld.open(db);
    await t.step(
      "the demo: clean, killed after a tool call and resumed, slow past a heartbeat",
      async () => {
        const { wrap, seen } = recording();
        const hooks = { wrapStore: wrap };
        assert.equal((await world.spawn({ runId: "names-clean", hooks }).exit).kind, "exited");
        const crashed = world.spawn({
          runId: "names-resumed",
          plan: { crashAt: "after_call", crashSeq: 1 },
          hooks,
        });
        assert.equal((await crashed.exit).kind, "killed");
        assert.equal((await world.spawn({ runId: "names-resumed", hooks }).exit).kind, "exited");
        // A worker whose tool call takes longer than a heartbeat period renews its lease meanwhile.
        const slow = world.spawn({ runId: "names-slow", hooks });
        const held = slow.holdWhen("cloud");
        await held.reached;
        await world.advance(4_000);
        held.release();
        assert.equal((await slow.exit).kind, "exited");
        assert.deepEqual(unnamed(seen), []);
        const expected: StatementName[] = [
          "create-or-read",
          "first-claim",
          "claim",
          "read-run",
          "read-history",
          "journal-intent",
          "journal-confirm",
          "effect-intent",
          "effect-intent-upsert",
          "effect-confirm",
          "heartbeat",
          "finish-run",
        ];
        for (const name of expected) assert.ok(seen.has(name), `${name} was not sent: ${[...seen.keys()]}`);
      },
    );

    const { wrap, seen } = recording();
    const store = db.handle("pglite:sim:names", { wrap });
    const client = new Client(store, world.clock);
    const now = () => world.clock.now();

    await t.step("a worker host: its takes, its heartbeat for all its runs, its row", async () => {
      const model: Planner = {
        describe: "slow script",
        decide: async (req) => {
          await world.clock.sleep(5_000, req.signal);
          return req.seq === 0
            ? { kind: "tool_calls", calls: [{ name: "note", args: { text: req.runId } }] }
            : { kind: "done", text: "noted" };
        },
      };
      const agent = defineAgent({
        name: "namer",
        model,
        tools: [defineTool({
          name: "note",
          description: "Writes a note.",
          args: z.strictObject({ text: z.string() }),
          run: (args) => Promise.resolve({ result: args.text }),
        })],
      });
      for (const runId of ["host-1", "host-2"]) await client.start(agent, { runId, input: "note it" });
      const host = await client.startWorker([agent], {
        log: new Logger({ clock: world.clock, sink: discardSink }),
        owner: "names-host",
        heartbeatMs: 3_000,
        leaseMs: 12_000,
        pollMs: 1_000,
      });
      // Bounded: a few clock steps take both runs, renew their leases and finish them.
      for (
        let i = 0;
        i < 40 && (await client.reads.list({ agent: "namer", status: "done" })).total < 2;
        i++
      ) {
        await world.advance(1_000);
        await settle();
      }
      assert.deepEqual(await client.reads.hostedAgents(), ["namer"]);
      await host.stop();
      assert.equal((await client.reads.list({ agent: "namer", status: "done" })).total, 2);
      for (const name of ["insert-run", "take-runs", "heartbeat-many", "remove-worker", "hosted-agents"]) {
        assert.ok(seen.has(name), `${name} was not sent: ${[...seen.keys()]}`);
      }
    });

    await t.step(
      "the operators' commands: list, inspect, the page, approvals, resolve, cancel, reopen, prune",
      async () => {
        // A blocked run with two flagged calls, and a run waiting for approval, written as a worker would.
        const blocked = async (runId: string, calls: number) => {
          await store.leases.createRun({ runId, agent: "ops", goal: "g" }, now());
          const f = { runId, epoch: (await claim(store, runId, 0, "w", now()))! };
          for (let seq = 0; seq < calls; seq++) {
            await writeDecision(store, f, seq, { decision: { tool: "t", args: {} } }, now());
            const call = await store.writes.effectIntentRow(
              f,
              { key: `${runId}:${seq}`, seq, tool: "t", args: {} },
              now(),
            );
            await store.writes.effectSettle(f, call, { status: "flagged", error: "unknown outcome" }, now());
          }
          await store.writes.finishRun(f, "blocked", "flagged", now());
          return f;
        };
        await blocked("ops-one", 1);
        await blocked("ops-many", 2);
        await store.leases.createRun({ runId: "ops-wait", agent: "ops", goal: "g" }, now());
        const w = { runId: "ops-wait", epoch: (await claim(store, "ops-wait", 0, "w", now()))! };
        await writeDecision(store, w, 0, { decision: { tool: "t", args: { a: 1 } } }, now());
        await store.writes.requestApproval(
          w,
          { key: "ops-wait:0", seq: 0, tool: "t", args: { a: 1 }, hash: "h" },
          now(),
        );

        await client.reads.list({ status: "blocked" });
        await client.get("ops-one");
        await client.reads.inspect("ops-one");
        await client.reads.overview({ runIds: ["ops-one"] });
        await client.reads.timeline("ops-one", { steps: { last: 10 }, maxChars: 100 });
        await client.reads.wholeValue("ops-one", "call.args", 0);
        await client.operators.approvals("ops-wait");
        await client.operators.deny("ops-wait:0", { by: "ops", reason: "no" });
        await client.operators.resolve("ops-one:0", { action: "retry" }, { by: "ops" });
        const flagged = await client.operators.flagged({ runId: "ops-many" });
        await client.operators.resolveMany({ runId: "ops-many" }, { action: "fail", reason: "gone" }, {
          by: "ops",
          expect: flagged.total,
        });
        await client.operators.cancel("ops-wait", { by: "ops" });
        await client.operators.reopen("ops-wait");
        await client.operators.cancel("ops-wait", { by: "ops" });
        const later = new Date(now().getTime() + 1_000);
        await client.operators.prune(later, { dryRun: true });
        await client.operators.prune(later);
        assert.deepEqual(unnamed(seen), []);
        for (
          const name of [
            "list-runs",
            "count-runs",
            "run-view",
            "steps-journal",
            "count-by-status",
            "whole-value-call-args",
            "approval-request",
            "approval-decide",
            "resolve-one",
            "flagged-calls",
            "resolve-many",
            "cancel-run",
            "reopen-run",
            "prune-dry-run",
            "prune",
          ]
        ) {
          assert.ok(seen.has(name), `${name} was not sent: ${[...seen.keys()]}`);
        }
      },
    );
  } finally {
    await db.close();
  }
});
