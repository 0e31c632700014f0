/**
 * Group commit in a worker host, and its fence against a claim, on a real
 * database:
 *
 * - a grouped host on both stores: 40 runs in flight share group statements
 *   (fewer statements than the writes they carry); one run taken over by
 *   another worker while its first call is out is fenced at its confirm,
 *   which rides a group statement with the other runs' confirms and is
 *   refused inside it; every other run finishes with one resource per key;
 * - on PostgreSQL, a claim held open in another transaction while a group
 *   statement waits on its lock: once the claim commits, the stale write is
 *   refused (`FENCED`, no row) and the valid one in the same statement is
 *   written.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { z } from "zod";
import { until } from "../harness/procs.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { FencedError } from "../runtime/base/errors.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import type { RunOutcome } from "../runtime/host/outcome.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { DecideRequest, Planner, PlannerDecision } from "../runtime/model/planner.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { type Fence, Store } from "../runtime/store/store.ts";
import { defineTool, ToolRegistry } from "../runtime/agent/tools.ts";
import { pgTest } from "./_pg.ts";
import { bothStoresTest } from "./_pglite.ts";

const RUNS = 40;
const STOLEN = "gc-7";

bothStoresTest(
  "a grouped host fences a run taken over mid-step inside a group statement, and the others finish",
  async (base) => {
    const clock = new SystemClock();
    const created = new Map<string, number>();
    let outcomes: RunOutcome[] = [];
    const planner: Planner = {
      describe: "two steps, then done",
      decide: (req: DecideRequest): Promise<PlannerDecision> =>
        Promise.resolve(
          req.seq < 2
            ? { kind: "tool_calls", calls: [{ name: "make", args: { n: req.seq } }] }
            : { kind: "done", text: "made" },
        ),
    };
    // Every run's first call waits here until all have arrived and STOLEN has been taken: then all
    // answer at once, so their confirms, STOLEN's with them, are ready together and ride group statements.
    let arrived = 0;
    let allArrived!: () => void;
    const released = new Promise<void>((r) => allArrived = r);
    const tools = [
      defineTool({
        name: "make",
        description: "Makes a thing under its key.",
        args: z.strictObject({ n: z.number() }),
        run: async (args, call) => {
          created.set(call.idempotencyKey, (created.get(call.idempotencyKey) ?? 0) + 1);
          if (args.n === 0 && ++arrived === RUNS) {
            // Another worker takes one run while its first call is out: its confirm must be refused.
            const run = await base.reads.getRun(STOLEN);
            await base.leases.claimRun(STOLEN, run!.epoch, "thief", clock.now());
            allArrived();
          }
          if (args.n === 0) await released;
          return { result: { made: call.idempotencyKey }, remote: "created" as const };
        },
      }),
    ];
    const agent = defineAgent({ name: "grouped", tools, model: planner });
    for (let i = 0; i < RUNS; i++) {
      await base.leases.createRun(
        { runId: `gc-${i}`, agent: "grouped", goal: "make two things" },
        clock.now(),
      );
    }
    const counting = new CountingClient(base.client);
    // Grouped already, so the host uses this store as it is, and its group commit's counts can be read.
    const store = new Store(counting, { groupCommit: { maxWaitMs: 2, clock } });
    let allEnded!: () => void;
    const ended = new Promise<void>((r) => allEnded = r);
    const host = new WorkerHost({
      store,
      clock,
      log: new Logger({ clock, sink: discardSink }),
      owner: "grouped-host",
      agents: [{ agent, planner, tools: new ToolRegistry(tools) }],
      runsPerWorker: RUNS,
      pollMs: 50,
      groupCommitMs: 2,
      onOutcome: (o) => {
        outcomes = [...outcomes, o];
        if (outcomes.length === RUNS) allEnded();
      },
    }).start();
    await ended;
    await host.stop();

    const byRun = new Map(outcomes.map((o) => [o.runId, o]));
    assert.equal(byRun.get(STOLEN)?.status, "fenced");
    const stolen = await base.reads.loadHistory(STOLEN);
    assert.deepEqual(stolen.effects.map((e) => e.status), ["intent"], "the fenced confirm wrote nothing");
    for (let i = 0; i < RUNS; i++) {
      const runId = `gc-${i}`;
      if (runId === STOLEN) continue;
      assert.equal(byRun.get(runId)?.status, "done", `${runId}: ${JSON.stringify(byRun.get(runId))}`);
      const { journal, effects } = await base.reads.loadHistory(runId);
      assert.deepEqual(journal.map((j) => j.status), ["confirmed", "confirmed", "confirmed"]);
      assert.deepEqual(effects.map((e) => [e.status, e.remote]), [["confirmed", "created"], [
        "confirmed",
        "created",
      ]]);
    }
    assert.ok([...created.values()].every((n) => n === 1), "one request per key");
    const stats = store.writes.group!.stats;
    const seen = JSON.stringify({ stats, counts: Object.fromEntries(counting.counts) });
    // STOLEN's confirm was refused inside a group statement: the one write refused there, since every
    // other run wrote every row (the checks above).
    assert.equal(stats.refused, 1, seen);
    // The runs' writes shared statements: fewer group statements than the writes they carried.
    assert.equal(counting.counts.get("group-write"), stats.groupStatements, seen);
    assert.ok(stats.groupStatements > 0 && stats.groupStatements < stats.grouped, seen);
  },
);

/** `url` with `application_name` set, so the test can find its own sessions in `pg_stat_activity`. */
function named(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set("application_name", name);
  return u.toString();
}

pgTest(
  "a group statement waiting on a claim held open refuses the stale write once the claim commits, and writes the other",
  async (pg, t) => {
    const tag = `gc-lock-${crypto.randomUUID().slice(0, 8)}`;
    const counting = new CountingClient(await openPostgres(named(pg.url, tag), { max: 2 }));
    const grouped = new Store(counting, { groupCommit: { maxWaitMs: 5 } });
    const holder = postgres(pg.url, { max: 1, onnotice: () => {} });
    const at = new Date(Date.UTC(2026, 0, 1));
    // This test's statements queued on a lock.
    const waiting = async () =>
      (await pg.store.client.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where application_name = $1 and wait_event_type = 'Lock'`,
        [tag],
      ))[0].n;
    const claimed = async (runId: string): Promise<Fence> => {
      await pg.store.leases.createRun({ runId, agent: "provision", goal: "goal" }, at);
      const c = await pg.store.leases.claimRun(runId, 0, "host", at);
      return { runId, epoch: c!.epoch };
    };
    // The stale write is x's, the valid one y's: one kind of write (the held runs may be inlined in the
    // plan), or two kinds (materialised).
    const cases = [
      {
        name: "two journal intents",
        stale: (x: Fence) => grouped.writes.journalIntentRow(x, 0, at, { fresh: true }),
        valid: (y: Fence) => grouped.writes.journalIntentRow(y, 0, at, { fresh: true }),
      },
      {
        name: "a tool intent and a journal intent",
        stale: (x: Fence) =>
          grouped.writes.effectIntentRow(x, { key: `${x.runId}:0`, seq: 0, tool: "t", args: {} }, at, true),
        valid: (y: Fence) => grouped.writes.journalIntentRow(y, 0, at, { fresh: true }),
      },
    ];
    try {
      for (const [i, c] of cases.entries()) {
        await t.step(c.name, async () => {
          const [x, y] = [await claimed(`lock-${i}-x`), await claimed(`lock-${i}-y`)];
          // Another worker's claim of x, held open: its epoch moves once it commits.
          let release!: () => void;
          const released = new Promise<void>((r) => release = r);
          let holding!: Promise<unknown>;
          await new Promise<void>((locked) => {
            holding = holder.begin(async (tx) => {
              await tx`update runs set epoch = epoch + 1, owner = 'thief' where run_id = ${x.runId}`;
              locked();
              await released;
            });
          });
          counting.reset();
          const before = { ...grouped.writes.group!.stats };
          let settled = 0;
          const writes = [c.stale(x), c.valid(y)].map((p) => p.finally(() => settled++));
          const outcomes = Promise.allSettled(writes);
          try {
            await until(
              async () => (await waiting()) === 1,
              "the group statement to queue on x's row",
              10_000,
            );
            assert.equal(settled, 0, "a write resolved while its statement waited on the claim");
          } finally {
            // The claim commits, pass or fail (a transaction left open would hold the test up).
            release();
            await holding;
          }
          const [stale, valid] = await outcomes;
          assert.equal(stale.status, "rejected");
          const refused = (stale as PromiseRejectedResult).reason;
          assert.ok(refused instanceof FencedError, String(refused));
          assert.equal(refused.code, "FENCED");
          assert.equal(valid.status, "fulfilled", String((valid as PromiseRejectedResult).reason));
          assert.equal(counting.counts.get("group-write"), 1, JSON.stringify([...counting.counts]));
          const stats = grouped.writes.group!.stats;
          assert.deepEqual(
            { grouped: stats.grouped - before.grouped, refused: stats.refused - before.refused },
            { grouped: 2, refused: 1 },
          );
          const [hx, hy] = [
            await pg.store.reads.loadHistory(x.runId),
            await pg.store.reads.loadHistory(y.runId),
          ];
          assert.deepEqual([hx.journal.length, hx.effects.length], [0, 0], "the stale write left no row");
          assert.deepEqual(hy.journal.map((j) => [j.status, j.epoch]), [["intent", y.epoch]]);
        });
      }
    } finally {
      await counting.close();
      await holder.end();
    }
  },
);
