/**
 * The runtime's per-run statements stay lookups by key as the tables grow, on
 * PGlite and on PostgreSQL.
 *
 * A statement a worker repeats is prepared once, and its generic plan is made
 * once, often on small tables without statistics (PGlite has no autovacuum; a
 * fresh PostgreSQL table has none until autovacuum comes by). Measured before
 * this test (#11), the fence's generic plan then walked an index on status
 * instead of the primary key, so every fenced write cost time in proportion to
 * the runs in flight (3,000 in flight: 3,001 index entries a write).
 *
 * This records every statement a worker sends for one run (and a worker
 * host's group statements, each planned as it is sent, and a watcher's
 * reads, its read of a run's rows as `read_history_from` runs it), makes each one's
 * plan while the tables are small, grows them, and explains each again, with
 * `analyze`, in a transaction rolled back: no scan may visit more than 20 rows
 * or read more than 20 pages.
 */

import assert from "node:assert/strict";
import { defineAgent } from "../agent/agent.ts";
import { MockCloud } from "../../mock/cloud.ts";
import { MockModel } from "../../mock/model.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { ManualClock } from "../base/clock.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { discardSink, Logger } from "../base/log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import { OpenAIPlanner } from "../model/planner.ts";
import { ToolRegistry } from "../agent/tools.ts";
import postgres from "npm:postgres@3.4.9";
import { pgTest } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import { openPostgres } from "./postgres.ts";
import { TapClient } from "./counting.ts";
import { type Fence, type SqlClient, Store } from "./store.ts";
import { claim } from "../../harness/direct_writes.ts";

/**
 * Passes statements through, keeping the first parameters seen for each text, which are planned each time,
 * and the parameters of every group statement (one text, a batch of each shape).
 */
function recording(inner: SqlClient) {
  const seen = new Map<string, unknown[]>();
  const plannedEachTime = new Set<string>();
  const groupCalls: unknown[][] = [];
  const client = new TapClient(inner, ({ text, params, opts }) => {
    if (!seen.has(text)) seen.set(text, params);
    if (opts?.planEachTime) plannedEachTime.add(text);
    if (opts?.name === "group-write") groupCalls.push(params);
  });
  return { client, seen, plannedEachTime, groupCalls };
}

/**
 * A function's SQL as the database runs it (the group statement's `group_write`, the take's `take_runs`,
 * a watcher's `read_history_from`: schema.sql): the statements of its one block, `perform` and `return
 * query` read as the queries they run, with the function's argument types and the settings it runs under
 * (`name=value`).
 */
async function functionBody(
  session: Session,
  fn: "group_write" | "take_runs" | "read_history_from",
  statements: number,
): Promise<{ texts: string[]; types: string; settings: string[] }> {
  const [row] = await session.query<{ src: string; args: string; config: string[] | null }>(
    `select prosrc as src, pg_get_function_identity_arguments(oid) as args, proconfig as config
       from pg_proc where oid = '${fn}'::regproc`,
  );
  const src = row.src.replace(/--.*$/gm, "").replace(/^\s*#variable_conflict \w+/, "");
  const body = /^\s*begin\s+([\s\S]*)\bend\s*$/.exec(src);
  assert.ok(body, `${fn}'s body is one block`);
  const texts = body[1].split(";").map((t) => t.trim()).filter((t) => t !== "").map((t) =>
    t.replace(/^perform\s/, "select ").replace(/^return query\s/, "")
  );
  assert.equal(texts.length, statements, `${fn}'s statements: ${texts.join(" ;; ")}`);
  return { texts, types: row.args, settings: row.config ?? [] };
}

interface PlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Actual Rows"?: number;
  "Actual Loops"?: number;
  "Rows Removed by Filter"?: number;
  "Shared Hit Blocks"?: number;
  "Shared Read Blocks"?: number;
  Plans?: PlanNode[];
}

/**
 * The scans of a plan that read a table or index, with the rows each visited
 * and the pages it read. Rows alone miss an index scan whose condition is on a
 * column other than the index's first: the index checks it entry by entry and
 * reports only the matches (a claim's generic plan once walked the whole
 * take-order index for one run id that way, as one row), so pages count too.
 */
function scans(node: PlanNode, out: { what: string; visited: number; pages: number }[] = []) {
  if (node["Relation Name"] || node["Index Name"]) {
    const loops = node["Actual Loops"] ?? 1;
    out.push({
      what: `${node["Node Type"]} on ${node["Relation Name"] ?? "?"} (${node["Index Name"] ?? "no index"})`,
      visited: Math.round(((node["Actual Rows"] ?? 0) + (node["Rows Removed by Filter"] ?? 0)) * loops),
      pages: (node["Shared Hit Blocks"] ?? 0) + (node["Shared Read Blocks"] ?? 0),
    });
  }
  for (const child of node.Plans ?? []) scans(child, out);
  return out;
}

/** `params` as SQL literals for `execute` (strings, numbers, dates, arrays of text or numbers, with nulls). */
function literals(params: unknown[]): string {
  return params.map((p) => {
    if (p === null || p === undefined) return "null";
    const text = Array.isArray(p)
      ? `{${
        p.map((v) => v === null ? "NULL" : `"${String(v).replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`)
          .join(",")
      }}`
      : p instanceof Date
      ? p.toISOString()
      : String(p);
    return `'${text.replaceAll("'", "''")}'`;
  }).join(", ");
}

/** Sets each of `settings` (`name=value`, as pg_proc keeps a function's) for the session's transaction. */
async function setLocal(session: Session, settings: readonly string[]): Promise<void> {
  for (const setting of settings) {
    const [name, ...value] = setting.split("=");
    await session.exec(`set local ${name} = '${value.join("=").replaceAll("'", "''")}'`);
  }
}

/** One database session to explain on: prepared statements and settings live in a session. */
interface Session {
  exec(sql: string): Promise<void>;
  query<T>(sql: string): Promise<T[]>;
  /** Gathers the planner's statistics, as the store's own schedule (PGlite) or autovacuum (a server) does. */
  analyze(): Promise<void>;
}

/**
 * Records every statement one run (and a resumed run, a worker host's
 * heartbeats and takes, by both rules) sends through `client`, then makes
 * each one's plan on `session` while the tables are small, grows them to
 * 3,000 runs in flight, 3,000 pending (and 1,000 of another agent) and 3,000
 * waiting (on a person, or on a remote), and returns the scans that visit
 * more than 20 rows or read more than 20 pages (past what a statement is
 * known to pass: `passes`): without statistics for the lookups by key, with
 * them for every statement.
 */
async function widePlans(
  client: SqlClient,
  session: Session,
): Promise<{ withoutStatistics: string[]; withStatistics: string[] }> {
  const rec = recording(client);
  const store = new Store(rec.client);
  await store.applySchema();
  rec.seen.clear();
  const clock = new ManualClock();
  // The take's query (take_runs, under its settings), its generic plan made while every table is
  // empty, as a host's first take on a new database makes it, and kept to be explained on the
  // tables as they grow.
  const takeFn = await functionBody(session, "take_runs", 1);
  const takeBody = { text: takeFn.texts[0], types: takeFn.types, settings: takeFn.settings };
  const emptyTake = [
    "w-plans",
    ["provision"],
    new Date(clock.now().getTime() - 12_000),
    clock.now(),
    4,
    null,
    null,
    null,
  ];
  await session.exec(`prepare plan_check_take_empty (${takeBody.types}) as ${takeBody.text}`);
  await session.exec("begin");
  await setLocal(session, takeBody.settings);
  await session.query(`explain execute plan_check_take_empty(${literals(emptyTake)})`);
  await session.exec("rollback");
  const model = await MockModel.open({ now: () => clock.now() });
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const tools = demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler });
  const planner = new OpenAIPlanner({ url: "http://model/v1", model: "m", fetch: model.handler });
  const deps = runDepsFor(
    processDeps({
      store,
      clock,
      log: new Logger({ clock, sink: discardSink }),
      owner: "w-plans",
      random: () => 0.5,
    }),
    agentDeps({
      agent: defineAgent({ name: "provision", tools, model: planner }),
      tools: new ToolRegistry(tools),
      planner,
    }),
  );
  // Every statement of one run, and what a resumed run, a run waiting on its remote and a worker host add
  // (the history read, both heartbeats), on a database as fresh as a
  // laptop's first `deno task run`.
  assert.equal((await claimAndDrive(deps, "planned", "goal")).status, "done");
  // A watcher's look at the run and its read of the rows from a step on (a call of read_history_from).
  await store.reads.watchRun("planned");
  assert.ok((await store.reads.historyFrom("planned", 1)).journal.length > 0);
  await store.leases.createRun({ runId: "resumed", agent: "provision", goal: "g" }, clock.now());
  const epoch = (await claim(store, "resumed", 0, "w-plans", clock.now()))!;
  await store.reads.loadHistory("resumed");
  await store.writes.heartbeat({ runId: "resumed", epoch }, clock.now());
  await store.leases.heartbeatMany(
    { name: "w-plans", agents: ["provision"], capacity: 4, startedAt: clock.now() },
    [{ runId: "resumed", epoch }],
    clock.now(),
  );
  // A takeover: a claim from an epoch past 0 (it counts the run's progress).
  assert.equal(await claim(store, "resumed", epoch, "w-plans-2", clock.now()), epoch + 1);
  // A worker host's take, of a run submitted before.
  await store.leases.createRun({ runId: "queued", agent: "provision", goal: "g" }, clock.now());
  const staleBefore = new Date(clock.now().getTime() - 12_000);
  assert.equal(
    (await store.leases.takeRuns("w-plans", ["provision"], staleBefore, clock.now(), 4)).length,
    1,
  );
  // Fair takes (`takeShare`, the same text): beside a live peer hosting "provision", whose runs are
  // then shared by capacity (so counted), and of a host whose agents fall in two pools, "provision"
  // shared with that peer and "helper" hosted by no peer. Their parameters are kept apart, as the
  // recording keeps the first seen for a text.
  await store.leases.heartbeatMany(
    { name: "w-peer", agents: ["provision"], capacity: 8, startedAt: clock.now() },
    [],
    clock.now(),
  );
  const fairTake = { owner: "w-plans", staleBefore, now: clock.now(), free: 4, capacity: 4 };
  const fairTakes = [
    { name: "plan_check_fair_take", agents: ["provision"] },
    { name: "plan_check_fair_take_two_pools", agents: ["provision", "helper"] },
  ];
  for (const { agents } of fairTakes) {
    assert.equal((await store.leases.takeShare({ ...fairTake, agents })).length, 0);
  }
  // A run whose call waits on its remote: accepted, let go until its wake time, taken again
  // then (a claim of one run, as a worker started by hand makes it), asked again, and settled
  // from outside.
  const call = { key: "waits:0", seq: 0, tool: "create_server", args: {} };
  await store.leases.createRun({ runId: "waits", agent: "provision", goal: "g" }, clock.now());
  const w = { runId: "waits", epoch: (await claim(store, "waits", 0, "w-plans", clock.now()))! };
  const later = (s: number) => new Date(clock.now().getTime() + s * 1000);
  const sent = await store.writes.effectIntentRow(w, call, clock.now(), true);
  await store.writes.effectWaiting(w, sent, {
    result: { job: "j" },
    checkAt: later(30),
    deadlineAt: later(3600),
  });
  assert.equal(await store.writes.waitRun(w, later(30), clock.now()), true);
  const woken = (await store.leases.claimRun("waits", w.epoch, "w-plans", later(30)))!;
  const w2 = { runId: "waits", epoch: woken.epoch };
  const poll = await store.writes.effectIntentRow(w2, call, later(30));
  await store.writes.effectWaiting(w2, poll, {
    result: { job: "j" },
    checkAt: later(60),
    deadlineAt: later(3600),
  });
  assert.equal(
    (await store.operators.settleCall("waits:0", { result: "i-1" }, "hook", later(40))).settled,
    true,
  );
  assert.equal(await store.writes.waitRun(w2, later(60), later(40)), false);
  // A worker host's group statements (group_commit.ts): each kind of write alone in a batch of two runs,
  // then two kinds in one batch, as a host whose runs are at different points of their steps sends them.
  const grouped = store.grouped({ maxWaitMs: 2, clock });
  const pair: Fence[] = [];
  for (const runId of ["g-a", "g-b", "g-c", "g-d"]) {
    await store.leases.createRun({ runId, agent: "provision", goal: "g" }, clock.now());
    pair.push({ runId, epoch: (await claim(store, runId, 0, "w-plans", clock.now()))! });
  }
  const [ga, gb, gc, gd] = pair;
  const intents = await Promise.all(
    [ga, gb].map((f) => grouped.writes.journalIntentRow(f, 0, clock.now(), { fresh: true })),
  );
  await Promise.all(
    [ga, gb].map((f, i) =>
      grouped.writes.journalConfirm(
        f,
        intents[i],
        { decision: { tool: "t", args: {} }, usage: undefined },
        clock.now(),
      )
    ),
  );
  const calls = await Promise.all(
    [ga, gb].map((f) =>
      grouped.writes.effectIntentRow(
        f,
        { key: `${f.runId}:0`, seq: 0, tool: "t", args: {} },
        clock.now(),
        true,
      )
    ),
  );
  await Promise.all(
    [ga, gb].map((f, i) =>
      grouped.writes.effectConfirm(f, calls[i], { result: { id: 1 }, remote: "created" }, clock.now())
    ),
  );
  await Promise.all([
    grouped.writes.finishRun(ga, "done", null, clock.now(), "ok"),
    grouped.writes.journalIntentRow(gc, 0, clock.now(), { fresh: true }),
    grouped.writes.effectIntentRow(gd, { key: "g-d:0", seq: 0, tool: "t", args: {} }, clock.now(), true),
  ]);
  await Promise.all([gb, gc].map((f) => grouped.writes.finishRun(f, "done", null, clock.now(), "ok")));
  assert.equal(rec.groupCalls.length, 6, `recorded ${rec.groupCalls.length} group statements`);
  const take = [...rec.seen.keys()].find((text) => text.includes("from take_runs("))!;
  assert.ok(take, "the take was recorded");
  assert.ok(rec.seen.size >= 10, `recorded ${rec.seen.size} statements`);

  // Each one's generic plan, made now (as a long-lived process makes it at
  // its first use, on small tables) and kept.
  const statements: {
    name: string;
    text: string;
    params: unknown[];
    passes?: number;
    /** Argument types to prepare with, and settings to plan under: the group statement's function's. */
    types?: string;
    settings?: string[];
  }[] = [...rec.seen].map(([text, params], i) => ({ name: `plan_check_${i}`, text, params }));
  // The group statement is a call of group_write, whose SQL the call's own plan does not show: each
  // recorded batch (each kind of write alone, then kinds together) is checked as the function's query,
  // prepared once, under the function's settings, as the function's plan is made once per session.
  const { texts, types, settings } = await functionBody(session, "group_write", 2);
  rec.groupCalls.forEach((params, i) =>
    texts.forEach((text, j) =>
      statements.push({ name: `plan_check_group_${i}_${j}`, text, types, settings, params })
    )
  );
  // So is the take, a call of take_runs: the host's take (no share), whose plan was made above on
  // empty tables, and the fair takes, each prepared now, under the function's settings.
  statements.push({ ...takeBody, name: "plan_check_take_empty", params: emptyTake });
  for (const { name, agents } of fairTakes) {
    const { owner, staleBefore, now, free, capacity } = fairTake;
    statements.push({
      ...takeBody,
      name,
      params: [owner, agents, staleBefore, now, free, capacity, null, null],
      // A pool's walk of the take-order index passes the runs of the host's other pools that
      // waited longer (one index serves every agent): the 1,000 of "provision" queued before the
      // first of "helper", below. leases.ts says so beside the take.
      passes: agents.length > 1 ? 1_000 : 0,
    });
  }
  // A watcher's read, as read_history_from runs it under its settings: from a step near the end of a
  // run of 3,000 steps (inserted below), and from the start of a short one.
  const historyFn = await functionBody(session, "read_history_from", 1);
  const historyBody = { text: historyFn.texts[0], types: historyFn.types, settings: historyFn.settings };
  statements.push(
    { ...historyBody, name: "plan_check_history_long", params: ["long-one", 2_995] },
    { ...historyBody, name: "plan_check_history_short", params: ["planned", 0] },
  );
  await session.exec("set plan_cache_mode = force_generic_plan");
  const explain = async (s: (typeof statements)[number]) => {
    await session.exec("begin");
    try {
      // A statement the store asks to plan each time is planned so. The others stay generic,
      // a function's under its own settings.
      if (rec.plannedEachTime.has(s.text)) {
        await session.exec("set local plan_cache_mode = force_custom_plan");
      }
      await setLocal(session, s.settings ?? []);
      const [row] = await session.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
        `explain (analyze, buffers, format json) execute ${s.name}(${literals(s.params)})`,
      );
      return scans(row["QUERY PLAN"][0].Plan);
    } finally {
      await session.exec("rollback");
    }
  };
  for (const s of statements) {
    if (s.name === "plan_check_take_empty") continue;
    await session.exec(`prepare ${s.name}${s.types ? ` (${s.types})` : ""} as ${s.text}`);
    await explain(s);
  }

  // Then the tables grow: other runs in flight, each with a few journal and
  // tool rows, and a backlog of runs waiting to be taken (not analysed yet).
  await session.exec(`
    insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
      select 'other-' || i, 'provision', 'g', 'running', 1, 'w-' || (i % 30), now(), now(), now()
        from generate_series(1, 3000) i;
    insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
      select 'waiting-' || i, 'provision', 'g', 'pending', 0, now() - i * interval '1 ms', now()
        from generate_series(1, 3000) i;
    -- And a backlog of another agent, "helper", queued after the first 1,000 of those.
    insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at)
      select 'helping-' || i, 'helper', 'g', 'pending', 0, now() - interval '2001 ms' + i * interval '1 ms', now()
        from generate_series(1, 1000) i;
    insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
      select 'other-' || i, s, 'confirmed', 1, 1, now() from generate_series(1, 3000) i, generate_series(0, 2) s;
    -- And one run of 3,000 steps, a journal row and a tool call each.
    insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
      values ('long-one', 'provision', 'g', 'running', 1, 'w-0', now(), now(), now());
    insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
      select 'long-one', s, 'confirmed', 1, 1, now() from generate_series(0, 2999) s;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
      select 'long-one:' || s, 'long-one', s, 't', '{}', 'confirmed', 1, 1, now() from generate_series(0, 2999) s;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
      select 'other-' || i || ':' || s, 'other-' || i, s, 't', '{}', 'confirmed', 1, 1, now()
        from generate_series(1, 3000) i, generate_series(0, 2) s;
    -- Runs waiting: on a person (no wake time), or on their calls' remotes until an hour on.
    insert into runs (run_id, agent, goal, status, epoch, owner, wake_at, created_at, updated_at)
      select 'asleep-' || i, 'provision', 'g', 'waiting', 1, 'w-' || (i % 30),
             case when i % 2 = 0 then '${
    new Date(clock.now().getTime() + 3_600_000).toISOString()
  }'::timestamptz end,
             '2020-01-01', '2020-01-01'
        from generate_series(1, 3000) i;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at, check_at)
      select 'asleep-' || i || ':0', 'asleep-' || i, 0, 't', '{}', 'waiting', 1, 1, now(), now()
        from generate_series(1, 3000) i where i % 2 = 0;`);

  const wide = async (which: typeof statements) => {
    const found: string[] = [];
    for (const s of which) {
      for (const scan of await explain(s)) {
        // A write's own pages (its new row in every index) grow with the rows it writes; its reads are the scans below it.
        const pages = scan.what.startsWith("ModifyTable") ? 0 : scan.pages;
        if (scan.visited > 20 + (s.passes ?? 0) || pages > 20 + (s.passes ?? 0) / 25) {
          found.push(
            `${scan.what}: ${scan.visited} rows, ${scan.pages} pages for ${
              s.text.replace(/\s+/g, " ").slice(0, 100)
            }`,
          );
        }
      }
    }
    return found;
  };
  // Every plan stays a walk of keys without statistics, the take's among them (made on empty tables).
  const withoutStatistics = await wide(statements);
  await session.analyze();
  const withStatistics = await wide(statements);
  return { withoutStatistics, withStatistics };
}

/**
 * A watcher's read of one run of 3,000 steps, alone in its tables (analysed), from its last 5 steps, as
 * read_history_from runs it: its generic plan, made now, under the function's settings. Alone, the run
 * is every row, and a generic plan reckons the rows from an unknown step a third of them: without the
 * function's settings both tables were read whole (a sequential scan, checked by hand on both drivers).
 * The scans that visit more than 20 rows or read more than 20 pages.
 */
async function historyOfOneLongRun(session: Session): Promise<string[]> {
  await session.exec(`
    insert into runs (run_id, agent, goal, status, epoch, owner, heartbeat_at, created_at, updated_at)
      values ('long-one', 'provision', 'g', 'running', 1, 'w-0', now(), now(), now());
    insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at)
      select 'long-one', s, 'confirmed', 1, 1, now() from generate_series(0, 2999) s;
    insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
      select 'long-one:' || s, 'long-one', s, 't', '{}', 'confirmed', 1, 1, now() from generate_series(0, 2999) s;`);
  await session.analyze();
  const { texts, types, settings } = await functionBody(session, "read_history_from", 1);
  await session.exec(`prepare plan_check_history_alone (${types}) as ${texts[0]}`);
  await session.exec("begin");
  try {
    await setLocal(session, settings);
    const [row] = await session.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>(
      `explain (analyze, buffers, format json) execute plan_check_history_alone('long-one', 2995)`,
    );
    return scans(row["QUERY PLAN"][0].Plan).filter((scan) => scan.visited > 20 || scan.pages > 20).map((
      scan,
    ) => `${scan.what}: ${scan.visited} rows, ${scan.pages} pages`);
  } finally {
    await session.exec("rollback");
  }
}

/** A PGlite in memory, as both the store's client and the session that explains. */
async function onPglite(check: (client: SqlClient, session: Session) => Promise<void>): Promise<void> {
  const pglite = await openTestPglite();
  try {
    const session: Session = {
      exec: (sql) => pglite.exec(sql),
      query: <T>(sql: string) => pglite.query<T>(sql),
      analyze: () => pglite.analyze(),
    };
    await check(pglite, session);
  } finally {
    await pglite.close();
  }
}

/** The store's own pool on `url`, and one reserved connection of another that explains (a session of its own). */
async function onPostgres(
  url: string,
  check: (client: SqlClient, session: Session) => Promise<void>,
): Promise<void> {
  const client = await openPostgres(url, { max: 2 });
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const conn = await sql.reserve();
  try {
    const session: Session = {
      exec: async (text) => {
        await conn.unsafe(text).simple();
      },
      query: async <T>(text: string) => (await conn.unsafe(text)) as unknown as T[],
      analyze: async () => {
        await conn.unsafe("analyze runs, journal, side_effects").simple();
      },
    };
    await check(client, session);
  } finally {
    conn.release();
    await sql.end({ timeout: 5 });
    await client.close();
  }
}

Deno.test("PGlite: every per-run statement stays a lookup by key as 3,000 runs come into flight, 4,000 queue and 3,000 wait", () =>
  onPglite(async (client, session) => {
    assert.deepEqual(await widePlans(client, session), { withoutStatistics: [], withStatistics: [] });
  }));

Deno.test("PGlite: a watcher's read of a run of 3,000 steps, alone in its tables, reads only the steps it asks for", () =>
  onPglite(async (client, session) => {
    await new Store(client).applySchema();
    assert.deepEqual(await historyOfOneLongRun(session), []);
  }));

pgTest(
  "PostgreSQL: a watcher's read of a run of 3,000 steps, alone in its tables, reads only the steps it asks for",
  (pg) =>
    onPostgres(pg.url, async (client, session) => {
      await new Store(client).applySchema();
      assert.deepEqual(await historyOfOneLongRun(session), []);
    }),
);

pgTest(
  "PostgreSQL: every per-run statement stays a lookup by key as 3,000 runs come into flight, 4,000 queue and 3,000 wait",
  (pg) =>
    onPostgres(pg.url, async (client, session) => {
      assert.deepEqual(await widePlans(client, session), { withoutStatistics: [], withStatistics: [] });
    }),
);
