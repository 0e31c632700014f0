/**
 * The runtime's per-run statements stay lookups by key as the tables grow.
 *
 * PGlite never analyses its tables (it has no autovacuum), and a fresh
 * PostgreSQL table has no statistics until autovacuum gets to it: a prepared
 * statement's generic plan is then chosen on guesses. Measured before this
 * test (#11), the fence's generic plan walked the partial index of running
 * runs instead of the primary key, so every fenced write cost time in
 * proportion to the runs in flight (4,500 running runs: 1 ms a write).
 *
 * This records every statement a worker runs for one run, then explains each
 * one as a generic plan, with `analyze`, in a transaction rolled back, over
 * tables holding thousands of other running runs; no node may visit more than
 * a handful of rows.
 */

import assert from "node:assert/strict";
import { DEFAULT_INSTRUCTIONS } from "../agent.ts";
import { MockCloud } from "../../mock/cloud.ts";
import { MockModel } from "../../mock/model.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { ManualClock } from "../clock.ts";
import { DEFAULT_RETRY } from "../context.ts";
import { CrashPoints } from "../crashpoints.ts";
import { discardSink, Logger } from "../log.ts";
import { runWorker } from "../loop.ts";
import { OpenAIPlanner } from "../planner.ts";
import { ToolRegistry } from "../tools.ts";
import { openPglite } from "./pglite.ts";
import { type SqlClient, Store } from "./store.ts";

/** Passes statements through, keeping the first parameters seen for each text. */
class Recording implements SqlClient {
  readonly seen = new Map<string, unknown[]>();
  constructor(readonly inner: SqlClient) {}
  get describe(): string {
    return this.inner.describe;
  }
  query<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
    if (!this.seen.has(text)) this.seen.set(text, params);
    return this.inner.query<T>(text, params);
  }
  run(text: string, params: unknown[] = []): Promise<number> {
    if (!this.seen.has(text)) this.seen.set(text, params);
    return this.inner.run(text, params);
  }
  exec(text: string): Promise<void> {
    return this.inner.exec(text);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  Plans?: PlanNode[];
}

/** The scans of a plan that read a table or index, with the rows each visited. */
function scans(node: PlanNode, out: { what: string; visited: number }[] = []) {
  if (node["Relation Name"] || node["Index Name"]) {
    const loops = node["Actual Loops"] ?? 1;
    out.push({
      what: `${node["Node Type"]} on ${node["Relation Name"] ?? "?"} (${node["Index Name"] ?? "no index"})`,
      visited: Math.round(((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * loops),
    });
  }
  for (const child of node.Plans ?? []) scans(child, out);
  return out;
}

/** `params` as SQL literals for `execute` (strings, numbers, dates, arrays of text). */
function literals(params: unknown[]): string {
  return params.map((p) => {
    if (p === null || p === undefined) return "null";
    const text = Array.isArray(p)
      ? `{${p.map((v) => `"${v}"`).join(",")}}`
      : p instanceof Date
      ? p.toISOString()
      : String(p);
    return `'${text.replaceAll("'", "''")}'`;
  }).join(", ");
}

Deno.test("every per-run statement's generic plan stays a lookup by key as 3,000 runs come into flight", async () => {
  const pglite = await openPglite();
  const rec = new Recording(pglite);
  const store = new Store(rec);
  await store.applySchema();
  rec.seen.clear();

  const clock = new ManualClock();
  const model = await MockModel.open({ now: () => clock.now() });
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const log = new Logger({ clock, sink: discardSink });
  const deps = {
    agent: "provision",
    instructions: DEFAULT_INSTRUCTIONS,
    store,
    planner: new OpenAIPlanner({ url: "http://model/v1", model: "m", fetch: model.handler }),
    tools: new ToolRegistry(demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler })),
    clock,
    log,
    crash: CrashPoints.none({ log, clock }),
    owner: "w-plans",
    maxSteps: 12,
    heartbeatMs: 3000,
    leaseMs: 12000,
    retry: DEFAULT_RETRY,
    random: () => 0.5,
  };
  try {
    // Every statement of one run, and what a resumed run and a worker host add
    // (the history read, both heartbeats), on a database as fresh as a
    // laptop's first `deno task run`.
    assert.equal((await runWorker(deps, "planned", "goal")).status, "done");
    await store.createRun({ runId: "resumed", agent: "provision", goal: "g" }, clock.now());
    const epoch = (await store.claim("resumed", 0, "w-plans", clock.now()))!;
    await store.loadHistory("resumed");
    await store.heartbeat({ runId: "resumed", epoch }, clock.now());
    await store.heartbeatMany(
      { name: "w-plans", agents: ["provision"], capacity: 4, startedAt: clock.now() },
      [{ runId: "resumed", epoch }],
      clock.now(),
    );
    // A worker host's take, of a run submitted before.
    await store.createRun({ runId: "queued", agent: "provision", goal: "g" }, clock.now());
    const staleBefore = new Date(clock.now().getTime() - 12_000);
    assert.equal((await store.takeRuns("w-plans", ["provision"], staleBefore, clock.now(), 4)).length, 1);
    const take = [...rec.seen.keys()].find((text) => text.includes("for update skip locked"))!;
    assert.ok(take, "the take was recorded");
    assert.ok(rec.seen.size >= 10, `recorded ${rec.seen.size} statements`);

    // Each one's generic plan, made now (as a long-lived process makes it at
    // its first use, on small tables) and kept.
    const statements = [...rec.seen].map(([text, params], i) => ({ name: `plan_check_${i}`, text, params }));
    await pglite.exec("set plan_cache_mode = force_generic_plan");
    const explain = async (s: (typeof statements)[number]) => {
      await pglite.exec("begin");
      // The take's limit (the free slots) is known only per execution, and a generic plan
      // must assume a tenth of the table: PostgreSQL's own choice (plan_cache_mode auto)
      // keeps planning it per execution, since those plans cost less. The others stay generic.
      if (s.text === take) await pglite.exec("set local plan_cache_mode = force_custom_plan");
      try {
        const [row] = await pglite.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
          `explain (analyze, format json) execute ${s.name}(${literals(s.params)})`,
        );
        return scans(row["QUERY PLAN"][0].Plan);
      } finally {
        await pglite.exec("rollback");
      }
    };
    for (const s of statements) {
      await pglite.exec(`prepare ${s.name} as ${s.text}`);
      await explain(s);
    }

    // Then the tables grow: other runs in flight, each with a few journal and
    // tool rows, and a backlog of runs waiting to be taken (not analysed yet).
    await pglite.exec(`
      insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
        select 'other-' || i, 'provision', 'g', 'running', 1, 'w-' || (i % 30), now(), now(), now()
          from generate_series(1, 3000) i;
      insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
        select 'waiting-' || i, 'provision', 'g', 'pending', 0, now() - i * interval '1 ms', now()
          from generate_series(1, 3000) i;
      insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
        select 'other-' || i, s, 'confirmed', 1, 1, now() from generate_series(1, 3000) i, generate_series(0, 2) s;
      insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
        select 'other-' || i || ':' || s, 'other-' || i, s, 't', '{}', 'confirmed', 1, 1, now()
          from generate_series(1, 3000) i, generate_series(0, 2) s;`);

    const wide = async (which: typeof statements) => {
      const found: string[] = [];
      for (const s of which) {
        for (const scan of await explain(s)) {
          if (scan.visited > 20) {
            found.push(`${scan.what}: ${scan.visited} rows for ${s.text.replace(/\s+/g, " ").slice(0, 100)}`);
          }
        }
      }
      return found;
    };
    // Every lookup by key stays one without statistics.
    assert.deepEqual(await wide(statements.filter((s) => s.text !== take)), []);
    // The take needs them (which order is cheap depends on how many wait), and the
    // embedded store gathers them on its own schedule, as autovacuum does on a server.
    await pglite.analyze();
    assert.deepEqual(await wide(statements), []);
  } finally {
    await rec.close();
  }
});
