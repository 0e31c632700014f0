/**
 * Retention on both stores: prune deletes a finished run with its rows in
 * every table that references runs (approvals included), counts them in a
 * dry run too, and a batch the database refuses is one line from the CLI.
 * Each case runs on PGlite and on PostgreSQL; the CLI cases in real processes.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { RUN_ROW_TABLES, Store } from "../runtime/store/store.ts";
import { pgTest, testTemplate } from "./_pg.ts";
import { bothStoresTest } from "./_pglite.ts";
import { runCli } from "../harness/procs.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";

const DAY_MS = 86_400_000;

/** A run that asked for approval of a call and was then cancelled while it waited, at `at`. */
async function cancelledWhileWaiting(store: Store, runId: string, at: Date): Promise<void> {
  await store.leases.createRun({ runId, agent: "guarded", goal: "pay" }, at);
  const f = { runId, epoch: (await claim(store, runId, 0, "w1", at))! };
  await writeDecision(store, f, 0, { decision: { tool: "pay", args: { cents: 5 } } }, at);
  await store.writes.requestApproval(
    f,
    { key: `${runId}:0`, seq: 0, tool: "pay", args: { cents: 5 }, hash: "h" },
    at,
  );
  assert.ok(await store.families.cancel(runId, "cancelled by alice", at));
}

/** A run that finished plainly at `at`: one confirmed decision, no tool call. */
async function plainDone(store: Store, runId: string, at: Date): Promise<void> {
  await store.leases.createRun({ runId, agent: "plain", goal: "g" }, at);
  const f = { runId, epoch: (await claim(store, runId, 0, "w1", at))! };
  await writeDecision(store, f, 0, { decision: { done: true, message: "ok" } }, at);
  await store.writes.finishRun(f, "done", null, at, "ok");
}

bothStoresTest(
  "prune deletes a finished run that asked for approval with its approval rows, and a dry run counts them",
  async (store) => {
    const client = new Client(store);
    const old = new Date(Date.now() - 40 * DAY_MS);
    // The oldest finished run asked for approval: the first batch meets it.
    await cancelledWhileWaiting(store, "pa-1", old);
    await plainDone(store, "plain-1", new Date(old.getTime() + 1000));
    const cutoff = new Date(Date.now() - 30 * DAY_MS);

    const dry = await client.operators.prune(cutoff, { dryRun: true });
    assert.deepEqual(dry.runs, ["pa-1", "plain-1"]);
    assert.deepEqual([dry.journal, dry.effects, dry.approvals], [2, 0, 1]);
    assert.equal((await store.reads.listApprovals("pa-1")).length, 1, "a dry run deletes nothing");

    const out = await client.operators.prune(cutoff, { batchSize: 1 });
    assert.deepEqual(out.runs, ["pa-1", "plain-1"]);
    assert.deepEqual([out.journal, out.effects, out.approvals, out.batches], [2, 0, 1, 2]);
    assert.equal(await store.reads.getRun("pa-1"), undefined);
    assert.equal(await store.reads.getRun("plain-1"), undefined);
    assert.equal((await store.reads.listApprovals("pa-1")).length, 0, "its approval rows went with it");
    assert.deepEqual((await client.operators.prune(cutoff)).runs, [], "nothing is left to prune");
  },
);

bothStoresTest("every table with a foreign key to runs is a table prune deletes from", async (store) => {
  const rows = await store.client.query<{ t: string }>(
    `select distinct cl.relname as t
       from pg_constraint c join pg_class cl on cl.oid = c.conrelid
      where c.contype = 'f' and c.confrelid = to_regclass('runs')
      order by 1`,
  );
  assert.ok(rows.length > 0, "the catalog query sees the schema's foreign keys");
  assert.deepEqual(rows.map((r) => r.t), Object.keys(RUN_ROW_TABLES).sort());
});

/** The CLI's settings for `fn`'s store: an embedded directory, then a PostgreSQL schema. */
function bothStoresCli(
  name: string,
  fn: (store: Store, env: Record<string, string>) => Promise<void>,
): void {
  Deno.test(`${name} (PGlite)`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "prune_cli_" });
    // The command opens the directory itself: `fn` closes this handle before it starts one.
    const store = new Store(await openPglite(`${dir}/pglite`, { template: await testTemplate() }));
    try {
      await store.applySchema();
      await fn(store, { DATA_DIR: dir });
    } finally {
      await store.client.close();
      await Deno.remove(dir, { recursive: true });
    }
  });
  pgTest(`${name} (PostgreSQL)`, (pg) => fn(pg.store, { DATABASE_URL: pg.url }));
}

bothStoresCli(
  "prune through the CLI deletes a run that asked for approval and prints the approval rows",
  async (store, env) => {
    const old = new Date(Date.now() - 40 * DAY_MS);
    await cancelledWhileWaiting(store, "pa-cli", old);
    await plainDone(store, "plain-cli", new Date(old.getTime() + 1000));
    if (env.DATA_DIR) await store.client.close();

    const dry = await runCli(["prune", "--finished-before", "30d", "--dry-run"], env);
    assert.equal(dry.code, 0, dry.lines.join("\n"));
    assert.match(
      dry.lines.join("\n"),
      /would delete: runs=2 {2}journal_rows=2 {2}tool_rows=0 {2}approval_rows=1/,
    );
    const done = await runCli(["prune", "--finished-before", "30d"], env);
    assert.equal(done.code, 0, done.lines.join("\n"));
    assert.match(
      done.lines.join("\n"),
      /deleted: runs=2 {2}journal_rows=2 {2}tool_rows=0 {2}approval_rows=1/,
    );
    const left = await runCli(["runs"], env);
    assert.match(left.lines.join("\n"), /\(no runs\)/, left.lines.join("\n"));
  },
);

bothStoresCli(
  "a prune the database refuses is one line naming the cause, exit 1, no stack trace, earlier batches kept",
  async (store, env) => {
    const old = new Date(Date.now() - 40 * DAY_MS);
    await plainDone(store, "kept-0", old);
    await plainDone(store, "held-1", new Date(old.getTime() + 1000));
    // A table of the user's own that references runs, holding a row for the second run: the
    // database refuses to delete that run, as it refused runs that asked for approval.
    await store.client.exec(`create table notes (run_id text not null references runs (run_id), body text)`);
    await store.client.query(`insert into notes (run_id, body) values ($1, 'keep me')`, ["held-1"]);
    if (env.DATA_DIR) await store.client.close();

    const out = await runCli(["prune", "--finished-before", "30d", "--batch", "1"], env);
    assert.equal(out.code, 1, out.lines.join("\n"));
    assert.equal(out.lines.length, 1, `one line:\n${out.lines.join("\n")}`);
    assert.match(out.lines[0], /^PRUNE_FAILED: Prune stopped at batch 2, which was rolled back/);
    assert.match(out.lines[0], /notes/, "the line names what refused it");
    assert.match(out.lines[0], /Deleted before it: 1 runs in 1 batches/);
    const left = await runCli(["runs"], env);
    assert.doesNotMatch(left.lines.join("\n"), /kept-0/, "the batch before it stays deleted");
    assert.match(left.lines.join("\n"), /held-1/, "the refused run is intact");
  },
);
