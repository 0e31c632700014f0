/**
 * A worker's heartbeat and its group statement lock the run rows they share
 * in one order, run id order, so they cannot deadlock. Before, the heartbeat
 * locked rows in the order its scan met them (on a small table, a sequential
 * scan: the order the rows were written) while the group statement locked
 * them in id order: each could hold a row the other waited for, and
 * PostgreSQL broke the cycle by failing one ("deadlock detected", logged for
 * heartbeats by `bench:scale` with grouping on).
 */

import assert from "node:assert/strict";
import postgres from "npm:postgres@3.4.9";
import { pgTest } from "./_pg.ts";

pgTest(
  "a heartbeat waits for a group statement's first lock without taking a row it needs next",
  async (pg) => {
    const at = new Date("2026-12-07T00:00:00Z");
    // Written out of id order, so the table's own order is r3, r1, r2.
    for (const runId of ["r3", "r1", "r2"]) {
      await pg.store.client.query(
        `insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
       values ($1, 'provision', 'g', 'running', 1, 'w', $2, $2, $2)`,
        [runId, at],
      );
    }
    const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
    const group = await sql.reserve();
    try {
      // The group statement, part way: r1 locked for share as group_write locks it, r3 still to come.
      await group.unsafe("begin");
      await group.unsafe("select 1 from runs where run_id = 'r1' for share");
      const [{ pid }] = await group.unsafe<{ pid: number }[]>("select pg_backend_pid() as pid");
      const beat = pg.store.leases.heartbeatMany(
        { name: "w", agents: ["provision"], capacity: 4, startedAt: at },
        ["r1", "r2", "r3"].map((runId) => ({ runId, epoch: 1 })),
        new Date(at.getTime() + 1000),
      );
      // Until the heartbeat waits for the group statement's lock (it is blocked by that backend).
      for (let i = 0; i < 500; i++) {
        const [{ n }] = await sql.unsafe<{ n: number }[]>(
          `select count(*)::int as n from pg_stat_activity where $1 = any(pg_blocking_pids(pid))`,
          [pid],
        );
        if (n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      // The group statement's next lock: the heartbeat has not taken r3 while it waits for r1.
      await group.unsafe("set local lock_timeout = '5s'");
      await group.unsafe("select 1 from runs where run_id = 'r3' for share");
      await group.unsafe("commit");
      assert.deepEqual([...await beat].sort(), ["r1", "r2", "r3"]);
    } finally {
      group.release();
      await sql.end({ timeout: 5 });
    }
  },
);
