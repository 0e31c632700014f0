/**
 * A family of runs as people are shown it: `runs` puts each child under its
 * parent, `inspect` names a run's parent and children, `cancel` says which
 * descendants went with the run, and the page's API links a run's parent and
 * children; every value through the display rule.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { asTree, cancel, type CommandContext, inspect, runs } from "../cli/commands.ts";
import { createUiApp } from "../ui/server.ts";
import { SimWorld } from "../harness/sim.ts";
import { type Asked, driveFamily, FAMILY_ROOT, familyAgents, KeyedRemote } from "../harness/family.ts";
import { openTestSim } from "./_pg.ts";

const P = FAMILY_ROOT;
const local = { headers: { host: "127.0.0.1:8787" } };

Deno.test("runs shows children under their parent, inspect names parent and children, the page links both", async () => {
  const db = await openTestSim();
  try {
    const world = await SimWorld.open(db);
    const asked: Asked = new Map();
    await driveFamily(world, familyAgents(new KeyedRemote(), asked));
    const client = new Client(world.observer, world.clock);
    const out: string[] = [];
    const ctx: CommandContext = { client, print: (l) => out.push(l), actor: "alice" };

    await runs(ctx);
    const ids = out.slice(1, 4).map((l) => l.split(/\s{2,}/)[0]);
    assert.deepEqual(ids, [P, `└ ${P}.0`, `└ ${P}.1`]);

    out.length = 0;
    await inspect(ctx, P);
    assert.ok(out.includes(`  child: ${P}.0  agent=researcher  status=done  call=${P}:0`), out.join("\n"));
    assert.ok(out.includes(`  child: ${P}.1  agent=writer  status=done  call=${P}:1`));
    // What the family spent together: the parent's 2 model requests and its children's 2 each; 2 + 1 + 1 tool requests.
    assert.ok(
      out.some((l) => /^ {2}with its children: tokens \d+ {2}model calls 6 {2}tool calls 4$/.test(l)),
      out.join("\n"),
    );
    out.length = 0;
    await inspect(ctx, `${P}.1`);
    assert.ok(out.includes(`  parent: ${P}  call=${P}:1`), out.join("\n"));

    const app = await createUiApp({ client });
    const page = await (await app.request(`/api/runs/${P}`, local)).json();
    assert.deepEqual(page.children, [
      { runId: `${P}.0`, agent: "researcher", status: "done", key: `${P}:0` },
      { runId: `${P}.1`, agent: "writer", status: "done", key: `${P}:1` },
    ]);
    assert.deepEqual([page.run.parentRunId, page.run.parentKey], [null, null]);
    const child = await (await app.request(`/api/runs/${P}.0`, local)).json();
    assert.deepEqual([child.run.parentRunId, child.run.parentKey, child.children], [P, `${P}:0`, []]);
    const list = await (await app.request(`/api/runs`, local)).json();
    assert.deepEqual(
      list.runs.map((r: { runId: string; parentRunId: string | null }) => [r.runId, r.parentRunId]).sort(),
      [[P, null], [`${P}.0`, P], [`${P}.1`, P]],
    );
  } finally {
    await db.close();
  }
});

Deno.test("cancel prints the descendants it cancelled, escaped", async () => {
  const db = await openTestSim();
  try {
    const world = await SimWorld.open(db);
    // The children's calls wait for a person; the parent waits on them.
    await driveFamily(world, familyAgents(new KeyedRemote(), new Map(), { approval: true }));
    const client = new Client(world.observer, world.clock);
    const out: string[] = [];
    await cancel({ client, print: (l) => out.push(l), actor: "ops\u202e" }, P);
    assert.match(out[0], new RegExp(`^cancelled {2}run=${P} .* with=${P}\\.0,${P}\\.1$`));
    assert.match((await client.get(`${P}.0`))?.error ?? "", /cancelled with fam: cancelled by ops/);
  } finally {
    await db.close();
  }
});

Deno.test("asTree() puts each child after its parent on the page, and shows every row once", () => {
  const row = (run_id: string, parent_run_id: string | null = null) => ({ run_id, parent_run_id });
  const tree = asTree([
    row("b"),
    row("a.1", "a"),
    row("a"),
    row("a.0", "a"),
    row("a.0.0", "a.0"),
    row("z.0", "z"),
  ]);
  assert.deepEqual(tree.map((t) => [t.run.run_id, t.depth]), [
    ["b", 0],
    ["a", 0],
    ["a.0", 1],
    ["a.0.0", 2],
    ["a.1", 1],
    ["z.0", 1],
  ]);
  // Rows that name each other as parents (only by hand) are shown all the same.
  assert.equal(asTree([row("x", "y"), row("y", "x")]).length, 2);
});
