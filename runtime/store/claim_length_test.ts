/**
 * A claim and a take cost the same however long the run (#39): each reads
 * the run's progress mark through the keys of its newest rows, so the rows
 * its plan visits in `journal` and `side_effects` are the same for a run of
 * 10 steps and one of 3,000 (it once summed all of them: a 500-message
 * conversation's take cost 6.4 ms against 2.4 ms for a short one). Counted
 * from `explain analyze` in a transaction rolled back, with the plan made
 * for the parameters and generic, without statistics and with them, on
 * PGlite and PostgreSQL. And the mark
 * still moves with every kind of progress and with nothing else.
 */

import assert from "node:assert/strict";
import postgres from "npm:postgres@3.4.9";
import { pgTest } from "../../tests/_pg.ts";
import { bothStoresTest, openTestPglite } from "../../tests/_pglite.ts";
import { CLAIM, TAKE_RUNS_QUERY } from "./claims.ts";
import { STATEMENTS } from "./statements.ts";
import type { Statement } from "./sql.ts";
import { Store } from "./store.ts";

interface PlanNode {
  "Relation Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  Plans?: PlanNode[];
}

/** Rows a plan visited in the run's history tables (returned, and passed over by a filter). */
function historyRowsVisited(node: PlanNode): number {
  const own = node["Relation Name"] === "journal" || node["Relation Name"] === "side_effects"
    ? Math.round(
      ((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * (node["Actual Loops"] ?? 1),
    )
    : 0;
  return own + (node.Plans ?? []).reduce((n, child) => n + historyRowsVisited(child), 0);
}

/** One database session: a transaction and its settings live in one. */
interface Session {
  exec(sql: string): Promise<void>;
  query<T>(sql: string): Promise<T[]>;
}

const NOW = "2026-01-01T00:00:00.000Z";
const LATER = "2026-01-01T01:00:00.000Z";

/**
 * A run of `agent` with `steps` steps, each a confirmed decision and its
 * confirmed call, but the last, whose call was sent and never answered (its
 * worker died); the run is running under epoch 1, its lease long expired.
 */
async function longRun(session: Session, runId: string, agent: string, steps: number): Promise<void> {
  await session.exec(`
    insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
      values ('${runId}', '${agent}', 'g', 'running', 1, 'w-dead', '2020-01-01', '2020-01-01', '2020-01-01');
    insert into journal (run_id, seq, status, decision, llm_attempts, epoch, intent_at, confirmed_at)
      select '${runId}', s, 'confirmed', '{"tool": "t", "args": {}}', 1, 1, '2020-01-01', '2020-01-01'
        from generate_series(0, ${steps - 1}) s;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
      select '${runId}:' || s, '${runId}', s, 't', '{}', case when s < ${
    steps - 1
  } then 'confirmed' else 'intent' end,
             1, 1, '2020-01-01'
        from generate_series(0, ${steps - 1}) s;`);
}

/** `params` as SQL literals for `execute`. */
function literals(params: unknown[]): string {
  return params.map((p) =>
    p === null ? "null" : Array.isArray(p) ? `'{${p.map((v) => `"${v}"`).join(",")}}'` : `'${String(p)}'`
  ).join(", ");
}

/**
 * The history rows `text` visits with `params`, planned for them and generic, each in a transaction rolled
 * back, under `settings` (`name=value`: a function's, as pg_proc keeps them).
 */
async function visited(
  session: Session,
  name: string,
  text: string,
  params: unknown[],
  settings: readonly string[] = [],
): Promise<number[]> {
  await session.exec(`prepare ${name} as ${text}`);
  const out: number[] = [];
  for (const mode of ["force_custom_plan", "force_generic_plan"]) {
    await session.exec("begin");
    try {
      for (const setting of settings) {
        const [key, ...value] = setting.split("=");
        await session.exec(`set local ${key} = '${value.join("=").replaceAll("'", "''")}'`);
      }
      await session.exec(`set local plan_cache_mode = ${mode}`);
      const [row] = await session.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
        `explain (analyze, format json) execute ${name}(${literals(params)})`,
      );
      out.push(historyRowsVisited(row["QUERY PLAN"][0].Plan));
    } finally {
      await session.exec("rollback");
    }
  }
  await session.exec(`deallocate ${name}`);
  return out;
}

/**
 * The rows a claim and a take of a run of 10 steps and of one of 3,000 visit
 * in its history, without the planner's statistics and then with them.
 */
async function claimCosts(session: Session): Promise<Record<string, number[]>> {
  await longRun(session, "short", "flat-short", 10);
  await longRun(session, "long", "flat-long", 3_000);
  const out: Record<string, number[]> = {};
  const add = (key: string, rows: number[]) => out[key] = [...(out[key] ?? []), ...rows];
  // The take runs in take_runs (schema.sql), under the function's settings.
  const [{ config }] = await session.query<{ config: string[] }>(
    `select proconfig as config from pg_proc where oid = 'take_runs'::regproc`,
  );
  for (const statistics of [false, true]) {
    if (statistics) await session.exec("analyze runs, journal, side_effects");
    for (const [runId, agent] of [["short", "flat-short"], ["long", "flat-long"]]) {
      const claim = [runId, 1, "w", NOW, null, null];
      add(`claim ${runId}`, await visited(session, `claim_${runId}`, CLAIM.text, claim));
      const take = [`w`, [agent], LATER, LATER, 4, null, null, null];
      add(`take ${runId}`, await visited(session, `take_${runId}`, TAKE_RUNS_QUERY, take, config));
    }
  }
  return out;
}

/** A statement of the catalogue by its name. */
function named(name: string): Statement {
  const found = Object.values(STATEMENTS).flat().find((s) => s.name === name);
  if (!found) throw new Error(`no statement ${name}`);
  return found;
}

/**
 * The rows each write a step makes to one call by its key (and the signal a
 * call takes, a signal's send, a run let go to wait) visits in the run's history, on the last call of a run grown
 * from 10 steps to 3,000: each statement prepared, and its generic plan made
 * and kept, while the tables were small (as a worker's driver prepares it on
 * a fresh database), then explained on the grown run with that plan, and
 * again once statistics are taken (which makes the plan again).
 */
async function callWriteCosts(session: Session): Promise<Record<string, number[]>> {
  await longRun(session, "long", "flat-long", 10);
  const key = "long:9";
  const params: Record<string, unknown[]> = {
    "effect-confirm": ["long", 1, key, "{}", "created", NOW],
    "effect-settle": ["long", 1, key, "failed", "an error", NOW],
    "effect-waiting": ["long", 1, key, "{}", LATER, LATER],
    "effect-failure": ["long", 1, key, NOW, "an error", LATER],
    "take-signal": ["long", 1, key, "go", NOW],
    // Not by a key: the calls of the run that wait (none here), found through their own index.
    "send-signal": ["long", "go", "sig-1", "null", NOW],
    "wait-run": ["long", 1, LATER, NOW, null],
  };
  const prepared = (name: string) => name.replace("-", "_");
  const rolledBack = async <T>(text: string): Promise<T[]> => {
    await session.exec("begin");
    try {
      return await session.query<T>(text);
    } finally {
      await session.exec("rollback");
    }
  };
  await session.exec("set plan_cache_mode = force_generic_plan");
  for (const [name, values] of Object.entries(params)) {
    await session.exec(`prepare ${prepared(name)} as ${named(name).text}`);
    await rolledBack(`execute ${prepared(name)}(${literals(values)})`);
  }
  // The run grows to 3,000 steps under the plans made on 10; its last call is the one written.
  await session.exec(`
    update side_effects set status = 'confirmed' where run_id = 'long';
    insert into journal (run_id, seq, status, decision, llm_attempts, epoch, intent_at, confirmed_at)
      select 'long', s, 'confirmed', '{"tool": "t", "args": {}}', 1, 1, '2020-01-01', '2020-01-01'
        from generate_series(10, 2999) s;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
      select 'long:' || s, 'long', s, 't', '{}', case when s < 2999 then 'confirmed' else 'intent' end,
             1, 1, '2020-01-01'
        from generate_series(10, 2999) s;`);
  const out: Record<string, number[]> = {};
  for (const statistics of [false, true]) {
    if (statistics) await session.exec("analyze runs, journal, side_effects");
    for (const [name, values] of Object.entries(params)) {
      const last = values.map((v) => v === key ? "long:2999" : v);
      const [row] = await rolledBack<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
        `explain (analyze, format json) execute ${prepared(name)}(${literals(last)})`,
      );
      out[name] = [...(out[name] ?? []), historyRowsVisited(row["QUERY PLAN"][0].Plan)];
    }
  }
  for (const name of Object.keys(params)) await session.exec(`deallocate ${prepared(name)}`);
  await session.exec("set plan_cache_mode = auto");
  return out;
}

function assertCallWritesFlat(costs: Record<string, number[]>): void {
  for (const [what, rows] of Object.entries(costs)) {
    for (const n of rows) assert.ok(n <= 3, `${what} visits ${n} history rows: ${JSON.stringify(costs)}`);
  }
}

function assertFlat(costs: Record<string, number[]>): void {
  assert.deepEqual(costs["claim long"], costs["claim short"], JSON.stringify(costs));
  assert.deepEqual(costs["take long"], costs["take short"], JSON.stringify(costs));
  for (const [what, rows] of Object.entries(costs)) {
    for (const n of rows) {
      assert.ok(n > 0 && n <= 6, `${what} visits ${n} history rows: ${JSON.stringify(costs)}`);
    }
  }
}

/** `measure` in a session of a fresh PGlite database with the schema. */
async function onPglite<T>(measure: (session: Session) => Promise<T>): Promise<T> {
  const pglite = await openTestPglite();
  try {
    await new Store(pglite).applySchema();
    return await measure({
      exec: (sql) => pglite.exec(sql),
      query: <R>(sql: string) => pglite.query<R>(sql),
    });
  } finally {
    await pglite.close();
  }
}

/** `measure` in one reserved session of the test's PostgreSQL schema. */
async function onPostgres<T>(url: string, measure: (session: Session) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const conn = await sql.reserve();
  try {
    return await measure({
      exec: async (text) => {
        await conn.unsafe(text).simple();
      },
      query: async <R>(text: string) => (await conn.unsafe(text)) as unknown as R[],
    });
  } finally {
    conn.release();
    await sql.end({ timeout: 5 });
  }
}

Deno.test("PGlite: a claim and a take visit the same few history rows of a run of 10 steps and of 3,000", async () => {
  assertFlat(await onPglite(claimCosts));
});

pgTest(
  "PostgreSQL: a claim and a take visit the same few history rows of a run of 10 steps and of 3,000",
  async (pg) => assertFlat(await onPostgres(pg.url, claimCosts)),
);

Deno.test("PGlite: a step's writes to a call by its key visit its row, not the run's, planned on 10 steps and run on 3,000", async () => {
  assertCallWritesFlat(await onPglite(callWriteCosts));
});

pgTest(
  "PostgreSQL: a step's writes to a call by its key visit its row, not the run's, planned on 10 steps and run on 3,000",
  async (pg) => assertCallWritesFlat(await onPostgres(pg.url, callWriteCosts)),
);

/** Claims `runId` again from its epoch now: the claims in a row that found no progress. */
async function claimAgain(store: Store, runId: string): Promise<number | undefined> {
  const run = await store.reads.getRun(runId);
  return (await store.leases.claimRun(runId, run!.epoch, "w", new Date(LATER)))?.stuck_claims;
}

bothStoresTest("a long run's mark moves with each kind of progress and with nothing else", async (store) => {
  await longRun({ exec: (s) => store.client.exec(s), query: (s) => store.client.query(s) }, "m", "flat", 50);
  const update = (set: string, table = "side_effects", where = "seq = 49") =>
    store.client.run(`update ${table} set ${set} where run_id = 'm' and ${where}`);
  assert.equal(await claimAgain(store, "m"), 1, "the first claim here finds the marks of no claim before");
  assert.equal(await claimAgain(store, "m"), 2, "nothing moved");
  await update("attempts = attempts + 1");
  assert.equal(await claimAgain(store, "m"), 3, "a request sent again and never answered is no progress");
  const progress: [string, () => Promise<unknown>][] = [
    ["a failure the worker recorded", () => update("failures = failures + 1")],
    ["an answer that the job is not done", async () => {
      await update("status = 'waiting'");
      await claimAgain(store, "m");
      // The poll sent moves the waiting call back to intent with one more poll: no progress yet.
      await update("status = 'intent', polls = polls + 1");
    }],
    ["the poll sent again, answered that the job is still not done", () => update("status = 'waiting'")],
    ["the call settled", () => update("status = 'confirmed'")],
    ["the next decision's failed request", async () => {
      await store.client.run(
        `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, failures)
           values ('m', 50, 'intent', 1, 1, '2020-01-01', 1)`,
      );
    }],
    ["that decision confirmed", () => update("status = 'confirmed'", "journal", "seq = 50")],
  ];
  for (const [what, write] of progress) {
    await write();
    assert.equal(await claimAgain(store, "m"), what.startsWith("an answer") ? 2 : 1, what);
    assert.equal(await claimAgain(store, "m"), what.startsWith("an answer") ? 3 : 2, `${what}, then nothing`);
  }
});
