/**
 * Agents that call agents (#24, "What it must show" 4), in the simulator: a
 * parent with two child-agent tools called at once in one step, killed at
 * every crash point of the parent's calls and of the children's steps. After
 * each kill the family is driven to its end: exactly one child run per call,
 * one remote resource per key, every model request recorded, and the parent's
 * answer made of both children's answers as its model received them, matched
 * to its calls. Then: a cancel of the parent cancels its children, and a
 * budget ceiling on the parent stops the children too.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { CRASH_POINTS } from "../runtime/base/crashpoints.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { agentTool } from "../runtime/agent/agent_tool.ts";
import { SimWorld } from "./sim.ts";
import {
  type Asked,
  driveFamily,
  FAMILY_ROOT,
  familyAgents,
  type FamilyKill,
  KeyedRemote,
} from "./family.ts";
import { openTestSim } from "../tests/_pg.ts";

const P = FAMILY_ROOT;
const ANSWER = `summary: call_0=researcher:found alpha | call_1=writer:found beta`;

/** Every (run, point, step) a kill can be aimed at, and whether it is reached. */
function cases(): (FamilyKill & { reached: boolean })[] {
  const out: (FamilyKill & { reached: boolean })[] = [];
  const decide = ["before_decide", "after_decide_before_journal", "after_decide"];
  for (const point of CRASH_POINTS) {
    const tool = !decide.includes(point);
    // The parent: its decision of two calls at seq 0 (calls at seqs 0 and 1), its answer at seq 2.
    for (const seq of [0, 1, 2]) {
      out.push({ runId: P, point, seq, reached: tool ? seq < 2 : seq !== 1 });
    }
    // Each child: one call at seq 0, its answer at seq 1.
    for (const child of [`${P}.0`, `${P}.1`]) {
      for (const seq of [0, 1]) out.push({ runId: child, point, seq, reached: tool ? seq === 0 : true });
    }
  }
  return out;
}

/** Requests a run's model was asked, as the journal counts them. */
async function paidRequests(world: SimWorld, runId: string): Promise<number> {
  const { journal } = await world.observer.reads.loadHistory(runId);
  return journal.reduce((n, j) => n + j.llm_attempts, 0);
}

Deno.test("a parent with two child agents, killed at every crash point of its calls and of the children's steps, ends with one child per call and both answers", async (t) => {
  const db = await openTestSim();
  try {
    // The clean run: what each run's model is asked, with no crash.
    await db.freshSchema();
    const cleanWorld = await SimWorld.open(db);
    const cleanAsked: Asked = new Map();
    const clean = await driveFamily(cleanWorld, familyAgents(new KeyedRemote(), cleanAsked));
    assert.deepEqual(clean.runs.map((r) => [r.run_id, r.status]), [
      [P, "done"],
      [`${P}.0`, "done"],
      [`${P}.1`, "done"],
    ]);
    const cleanCalls = new Map([...cleanAsked].map(([run, asked]) => [run, asked.length]));
    assert.deepEqual(Object.fromEntries(cleanCalls), { [P]: 2, [`${P}.0`]: 2, [`${P}.1`]: 2 });

    let reached = 0;
    for (const c of cases()) {
      await t.step(`${c.runId} ${c.point} seq=${c.seq}`, async () => {
        await db.freshSchema();
        const world = await SimWorld.open(db);
        const remote = new KeyedRemote();
        const asked: Asked = new Map();
        const drive = await driveFamily(world, familyAgents(remote, asked), { kill: c });
        const why = () => world.transcript.join("\n");
        assert.equal(drive.killed, c.reached, `the kill ${c.reached ? "fired" : "did not fire"}\n${why()}`);
        if (drive.killed) reached++;

        // Exactly one child run per call, each the child of its call, and nothing else.
        assert.deepEqual(
          drive.runs.map((r) => [r.run_id, r.agent, r.status, r.parent_run_id, r.parent_key, r.root_run_id]),
          [
            [P, "lead", "done", null, null, P],
            [`${P}.0`, "researcher", "done", P, `${P}:0`, P],
            [`${P}.1`, "writer", "done", P, `${P}:1`, P],
          ],
          why(),
        );
        // The parent's answer is made of both children's answers...
        const root = drive.runs.find((r) => r.run_id === P)!;
        assert.equal(root.output, ANSWER, why());
        // ...as its model received them: each child's answer the result of its own call.
        const last = asked.get(P)!.at(-1)!;
        const shown = last.flatMap((m) =>
          m.role === "tool" ? [[m.callId, m.name, m.failed ? m.error : m.result]] : []
        );
        assert.deepEqual(shown, [
          ["call_0", "researcher", "researcher:found alpha"],
          ["call_1", "writer", "writer:found beta"],
        ]);
        // One resource per key of the children's calls; the parent's calls start runs, not resources.
        assert.deepEqual([...remote.created.keys()].sort(), [`${P}.0:0`, `${P}.1:0`]);
        const { effects } = await world.observer.reads.loadHistory(P);
        assert.deepEqual(
          effects.map((e) => [e.idempotency_key, e.status, e.result]),
          [[`${P}:0`, "confirmed", "researcher:found alpha"], [`${P}:1`, "confirmed", "writer:found beta"]],
        );
        // Every model request was counted before it went out, and a crash costs at most the one lost answer.
        for (const r of drive.runs) {
          const sent = asked.get(r.run_id)?.length ?? 0;
          assert.equal(
            await paidRequests(world, r.run_id),
            sent,
            `${r.run_id}: requests paid = requests sent`,
          );
          const lost = drive.killed && c.runId === r.run_id && c.point === "after_decide_before_journal"
            ? 1
            : 0;
          assert.equal(sent, cleanCalls.get(r.run_id)! + lost, `${r.run_id}: model requests`);
        }
      });
    }
    assert.equal(reached, cases().filter((c) => c.reached).length);
  } finally {
    await db.close();
  }
});

Deno.test("cancelling a parent cancels the children it waits on, in the same operation", async () => {
  const db = await openTestSim();
  try {
    const world = await SimWorld.open(db);
    const asked: Asked = new Map();
    // The children's call needs a person's yes: they wait for one, and the parent waits on them.
    const drive = await driveFamily(world, familyAgents(new KeyedRemote(), asked, { approval: true }));
    assert.deepEqual(drive.runs.map((r) => [r.run_id, r.status]), [
      [P, "waiting"],
      [`${P}.0`, "waiting"],
      [`${P}.1`, "waiting"],
    ]);
    const client = new Client(world.observer, world.clock);
    const cancelled = await client.operators.cancel(P, { by: "ops", reason: "not needed" });
    assert.deepEqual([cancelled.status, cancelled.descendants], ["cancelled", [`${P}.0`, `${P}.1`]]);
    for (const id of [`${P}.0`, `${P}.1`]) {
      const run = await client.get(id);
      assert.deepEqual([run?.status, run?.error], [
        "cancelled",
        `cancelled with ${P}: cancelled by ops: not needed`,
      ]);
    }
    // Nothing is left to take, and an approval for a cancelled child is refused.
    const after = await driveFamily(world, familyAgents(new KeyedRemote(), asked), { create: false });
    assert.deepEqual(after.exits, []);
    await assert.rejects(
      client.operators.approve(`${P}.0:0`),
      (e: Error & { code?: string }) => e.code === "RUN_CLOSED",
    );
  } finally {
    await db.close();
  }
});

Deno.test("a model-request ceiling on the parent stops its children, then the parent", async () => {
  const db = await openTestSim();
  try {
    const world = await SimWorld.open(db);
    const asked: Asked = new Map();
    // The parent asks once, the first child twice (3 in all), the second child once more (4): then no more.
    const drive = await driveFamily(
      world,
      familyAgents(new KeyedRemote(), asked, { parentBudget: { modelCalls: 4 } }),
    );
    const byId = new Map(drive.runs.map((r) => [r.run_id, r]));
    assert.equal(byId.get(`${P}.0`)?.status, "done");
    const second = byId.get(`${P}.1`)!;
    assert.equal(second.status, "failed");
    assert.match(
      second.error ?? "",
      new RegExp(
        `BUDGET_EXCEEDED: budget: 4 model requests made by run ${P} and its descendants, and the ceiling of its ancestor run ${P} is 4`,
      ),
    );
    const root = byId.get(P)!;
    assert.equal(root.status, "failed");
    assert.match(
      root.error ?? "",
      /BUDGET_EXCEEDED: budget: 4 model requests made by run fam and its descendants, and this run's ceiling \(which counts its child runs\) is 4/,
    );
    let total = 0;
    for (const r of drive.runs) total += await paidRequests(world, r.run_id);
    assert.equal(total, 4, "the family made exactly as many model requests as its root allows");
    // The second child's call failed for good, with the child's error, before the parent was stopped.
    const { effects } = await world.observer.reads.loadHistory(P);
    assert.match(
      effects[1].error ?? "",
      /AGENT_CHILD_FAILED|Agent writer \(run fam\.1\) failed: BUDGET_EXCEEDED/,
    );
  } finally {
    await db.close();
  }
});

Deno.test("a run that holds a child's id but is not that call's child is refused, never reused", async () => {
  const db = await openTestSim();
  try {
    const world = await SimWorld.open(db);
    const asked: Asked = new Map();
    const agents = familyAgents(new KeyedRemote(), asked);
    const client = new Client(world.observer, world.clock);
    await client.start(agents.byName.get("researcher")!.agent, { runId: `${P}.0`, input: "someone else's" });
    // Cancelled so no worker takes it: it is someone else's run all the same.
    await client.operators.cancel(`${P}.0`);
    const drive = await driveFamily(world, agents);
    const root = drive.runs.find((r) => r.run_id === P)!;
    assert.equal(root.status, "done");
    const { effects } = await world.observer.reads.loadHistory(P);
    assert.equal(effects[0].status, "failed");
    assert.match(
      effects[0].error ?? "",
      /run fam\.0 exists already and is not its child \(agent researcher, started by a person\)/,
    );
    assert.equal((await client.get(`${P}.0`))?.input, "someone else's");
    assert.match(root.output ?? "", /call_0=failed\(.*not its child.*\) \| call_1=writer:found beta/);
  } finally {
    await db.close();
  }
});

Deno.test("agentTool() takes the child's input schema or a task, and refuses a name a tool cannot have", () => {
  const child = defineAgent({ name: "helper.v2", tools: [] });
  assert.throws(
    () => agentTool(child),
    /a tool name is 1-64 letters, digits, '_' or '-'; give the tool a name/,
  );
  const tool = agentTool(child, { name: "helper" });
  assert.deepEqual(tool.parameters.required, ["task"]);
  assert.equal(tool.childAgent, child);
  assert.throws(() => agentTool(child, { name: "h", checkAfterMs: 0 }), /'checkAfterMs' must be an integer/);
});
