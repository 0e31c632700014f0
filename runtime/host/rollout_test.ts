/**
 * A rollout in one process (docs/versions.md): hosts of version 1 drive runs
 * of two agents, one whose runs stay on their version and one whose runs may
 * move; a host of version 2 (a tool renamed, saying what it replaces, and an
 * argument added with a default) starts beside them. The runs that may move
 * are let go at their next decision and go on on version 2; the others are
 * finished by version 1; a moved run whose decided step version 2 cannot
 * carry goes back to version 1, nothing sent. Each call is sent once under
 * its key. On PGlite, with a ManualClock.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { type Agent, defineAgent } from "../agent/agent.ts";
import { ManualClock, settle } from "../base/clock.ts";
import { WorkerHost } from "./host.ts";
import { arraySink, Logger } from "../base/log.ts";
import type { Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import { defineTool, type Json, type Tool, ToolRegistry } from "../agent/tools.ts";
import { writeDecision } from "../../harness/direct_writes.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const store = new Store(await openTestPglite());
await store.applySchema();

/** Calls sent, by key, with the tool that sent them and its arguments. */
type Sent = Map<string, { tool: string; args: unknown }[]>;

/**
 * An agent of a note-taking shape at `version`: its model (thinking 4 s of
 * clock time) writes a note, publishes it, then is done. Version 2 calls the
 * first tool `save_note` (replacing `write_note`) and gives `publish` a
 * `channel` argument with a default. Version 1 also has `shred`, which
 * version 2 dropped.
 */
function agent(
  name: string,
  version: 1 | 2,
  onNewVersion: "stay" | "move",
  clock: ManualClock,
  sent: Sent,
): Agent {
  const write = version === 1 ? "write_note" : "save_note";
  const model: Planner = {
    describe: `script v${version}`,
    decide: async (req) => {
      await clock.sleep(4_000, req.signal);
      if (req.seq === 0) return { kind: "tool_calls", calls: [{ name: write, args: { title: req.runId } }] };
      if (req.seq === 1) return { kind: "tool_calls", calls: [{ name: "publish", args: { id: req.runId } }] };
      return { kind: "done", text: `v${version} done` };
    },
  };
  const tool = (n: string, args: z.ZodType, replaces?: string[]) =>
    defineTool({
      name: n,
      description: n,
      args,
      replaces,
      run: (a, ctx) => {
        sent.set(ctx.idempotencyKey, [...(sent.get(ctx.idempotencyKey) ?? []), {
          tool: `${n}@${version}`,
          args: a,
        }]);
        return Promise.resolve({ result: `${n} ok` });
      },
    });
  const tools: Tool[] = version === 1
    ? [
      tool("write_note", z.strictObject({ title: z.string() })),
      tool("publish", z.strictObject({ id: z.string() })),
      tool("shred", z.strictObject({})),
    ]
    : [
      tool("save_note", z.strictObject({ title: z.string() }), ["write_note"]),
      tool("publish", z.strictObject({ id: z.string(), channel: z.string().default("web") })),
    ];
  return defineAgent({ name, version: String(version), onNewVersion, tools, model });
}

function host(owner: string, agents: Agent[], clock: ManualClock, lines: string[]): WorkerHost {
  return new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: arraySink(lines) }),
    owner,
    agents: agents.map((a) => ({
      agent: a,
      planner: a.model as Planner,
      tools: new ToolRegistry(a.tools as Tool[]),
    })),
    runsPerWorker: 20,
    pollMs: 1_000,
    heartbeatMs: 1_000,
    leaseMs: 6_000,
  });
}

async function until(check: () => Promise<boolean>, clock: ManualClock, what: string): Promise<void> {
  // Bounded: at most 600 clock steps of half a second.
  for (let i = 0; i < 600; i++) {
    if (await check()) return;
    await clock.advance(500);
    await settle();
  }
  throw new Error(`never: ${what}`);
}

Deno.test("a rollout: runs that may move go on on version 2 at their next decision, the others finish on version 1", async () => {
  const clock = new ManualClock();
  const sent: Sent = new Map();
  const lines: string[] = [];
  const v1 = [agent("mover", 1, "move", clock, sent), agent("stayer", 1, "stay", clock, sent)];
  const v2 = [agent("mover", 2, "move", clock, sent), agent("stayer", 2, "stay", clock, sent)];
  const ids = ["mover", "stayer"].flatMap((a) => [0, 1, 2].map((i) => `${a}-${i}`));
  for (const id of ids) {
    await store.leases.createRun({ runId: id, agent: id.split("-")[0], goal: "g" }, clock.now());
  }

  const old = host("old", v1, clock, lines).start();
  // Every run is in flight on version 1: its first call sent, its second decision being asked.
  await until(() => Promise.resolve(sent.size === ids.length), clock, "every first call sent");
  const fresh = host("new", v2, clock, lines).start();
  await until(
    async () => (await store.operators.listRuns({ status: "done", limit: 100 })).total === ids.length,
    clock,
    "every run done",
  );
  await fresh.stop();
  await old.stop();

  for (const id of ids) {
    const run = (await store.reads.getRun(id))!;
    const { journal, effects } = await store.reads.loadHistory(id);
    const decided = journal.flatMap((j) => j.decision && "tool" in j.decision ? [j.decision.tool] : []);
    if (id.startsWith("stayer")) {
      assert.deepEqual([run.agent_version, run.moved_from, run.output], ["1", null, "v1 done"], id);
      assert.deepEqual(decided, ["write_note", "publish"], `${id}: every decision version 1's`);
      assert.deepEqual(effects.map((e) => sent.get(e.idempotency_key)!.map((s) => s.tool)), [
        ["write_note@1"],
        ["publish@1"],
      ]);
    } else {
      assert.deepEqual([run.agent_version, run.moved_from, run.output], ["2", "1", "v2 done"], id);
      assert.deepEqual(decided, ["write_note", "publish"], `${id}: the first decision version 1's, then 2's`);
      // Its second decision was being asked when version 2 came: it is carried out by version 1, and
      // the decision after it is version 2's.
      assert.deepEqual(sent.get(`${id}:0`), [{ tool: "write_note@1", args: { title: id } }]);
      assert.deepEqual(sent.get(`${id}:1`), [{ tool: "publish@1", args: { id } }]);
      assert.ok(new Date(journal[1].confirmed_at!) < new Date(run.moved_at!), "decided before the move");
      assert.ok(new Date(journal[2].confirmed_at!) > new Date(run.moved_at!), "the next decision after it");
    }
  }
  assert.ok(
    lines.some((l) => /event=moves-marked agent=mover to=2 runs=3/.test(l)),
    "marked by the new host",
  );
  assert.equal(lines.filter((l) => /event=moving run=mover-/.test(l)).length, 3, "let go by the old host");
  assert.equal(lines.filter((l) => /event=moved run=mover-.* from=1 to=2/.test(l)).length, 3);
});

Deno.test("a moved run whose decided step version 2 cannot carry goes back to version 1, nothing sent", async () => {
  const clock = new ManualClock();
  const sent: Sent = new Map();
  const lines: string[] = [];
  // Decided on version 1, nothing sent yet: a call of a tool version 2 dropped, one of a tool it renamed,
  // and one of a tool it gave an argument with a default.
  const steps: Record<string, [string, Json]> = {
    refused: ["shred", {}],
    renamed: ["write_note", { title: "t" }],
    defaulted: ["publish", { id: "p" }],
  };
  for (const [id, [tool, args]] of Object.entries(steps)) {
    await store.leases.createRun({ runId: id, agent: "keeper", goal: "g" }, clock.now());
    const claimed = await store.leases.claimRun(id, 0, "gone", clock.now(), { version: "1", mayMove: true });
    const f = { runId: id, epoch: claimed!.epoch };
    await writeDecision(store, f, 0, { decision: { tool, args } }, clock.now());
    await store.writes.releaseRun(f, "", clock.now());
  }
  const fresh = host("new-2", [agent("keeper", 2, "move", clock, sent)], clock, lines).start();
  for (const id of ["renamed", "defaulted"]) {
    await until(async () => (await store.reads.getRun(id))?.status === "done", clock, `${id} done`);
  }
  const refused = (await store.reads.getRun("refused"))!;
  assert.deepEqual([refused.status, refused.agent_version, refused.move_refused], ["pending", "1", "2"]);
  assert.match(
    refused.error!,
    /keeper@2 cannot carry the decided step of this run, moved to it from 1: seq 0 \(shred\): Unknown tool "shred"/,
  );
  assert.equal(sent.has("refused:0"), false, "never sent");
  assert.deepEqual(sent.get("renamed:0"), [{ tool: "save_note@2", args: { title: "t" } }]);
  assert.deepEqual(sent.get("defaulted:0"), [{ tool: "publish@2", args: { id: "p", channel: "web" } }]);
  const { effects } = await store.reads.loadHistory("renamed");
  assert.deepEqual([effects[0].tool, effects[0].args], ["write_note", { title: "t" }], "recorded as decided");
  // Version 1 takes it back and finishes it; version 2 does not take it again meanwhile.
  const old = host("old-2", [agent("keeper", 1, "move", clock, sent)], clock, lines).start();
  await until(async () => (await store.reads.getRun("refused"))?.status === "done", clock, "refused done");
  await old.stop();
  await fresh.stop();
  assert.deepEqual(sent.get("refused:0"), [{ tool: "shred@1", args: {} }]);
  assert.equal(lines.filter((l) => /event=move-refused run=refused/.test(l)).length, 1);
  assert.equal((await store.reads.getRun("refused"))!.agent_version, "1");
});

Deno.test("one host running both versions moves the runs that may move from the old to the new itself", async () => {
  const clock = new ManualClock();
  const sent: Sent = new Map();
  const lines: string[] = [];
  for (const id of ["both-0", "both-1"]) {
    await store.leases.createRun({ runId: id, agent: "both", goal: "g" }, clock.now());
  }
  // Started on version 1, before version 2 is known.
  const old = host("both-old", [agent("both", 1, "move", clock, sent)], clock, lines).start();
  await until(() => Promise.resolve(sent.size === 2), clock, "the first calls sent");
  await old.stop();
  const side = host(
    "both-side",
    [agent("both", 1, "move", clock, sent), agent("both", 2, "move", clock, sent)],
    clock,
    lines,
  )
    .start();
  await until(
    async () => (await store.operators.listRuns({ agent: "both", status: "done", limit: 10 })).total === 2,
    clock,
    "both done",
  );
  await side.stop();
  for (const id of ["both-0", "both-1"]) {
    const run = (await store.reads.getRun(id))!;
    assert.deepEqual([run.agent_version, run.moved_from, run.owner], ["2", "1", "both-side"], id);
    assert.deepEqual(sent.get(`${id}:1`), [{ tool: "publish@2", args: { id, channel: "web" } }], id);
  }
});
