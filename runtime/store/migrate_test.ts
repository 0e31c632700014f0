import assert from "node:assert/strict";
import postgres from "postgres";
import { pgIgnore, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import { MIGRATIONS, migrationScript, parseMigrations, SCHEMA_VERSION } from "./migrate.ts";
import { openPostgres } from "./postgres.ts";
import { Store } from "./store.ts";
import { answerTokens } from "../agent/budget.ts";

// schema.sql as it stood before versions (tables in public, no schema_version),
// with its own in-place upgrade lines: what a database created before this
// change holds.
const BEFORE_VERSIONS = await Deno.readTextFile(
  new URL("./testdata/schema_before_versions.sql", import.meta.url),
);

const OLD_RUN = `insert into runs (run_id, agent, goal, input, status, epoch, owner, created_at, updated_at)
  values ('old-run', 'provision', 'keep me', '"keep me"', 'done', 3, 'w1', '2026-01-01', '2026-01-01');
insert into journal (run_id, seq, status, decision, llm_attempts, epoch, intent_at, confirmed_at)
  values ('old-run', 0, 'confirmed', '{"done": true, "message": "ok"}', 1, 3, '2026-01-01', '2026-01-01');`;

async function columns(store: Store, schema: string, table: string): Promise<string[]> {
  const rows = await store.client.query<{ c: string }>(
    `select column_name::text as c from information_schema.columns where table_schema = $1 and table_name = $2`,
    [schema, table],
  );
  return rows.map((r) => r.c).sort();
}

async function assertMigrated(store: Store, schema: string): Promise<void> {
  await store.checkSchema();
  const versions = await store.client.query<{ version: number; name: string }>(
    `select version, name from schema_version order by version`,
  );
  assert.deepEqual(versions.map((v) => v.version), MIGRATIONS.map((m) => m.version));
  for (const c of ["agent", "input", "output"]) {
    assert.ok((await columns(store, schema, "runs")).includes(c), c);
  }
  assert.deepEqual(await columns(store, schema, "workers"), [
    "agents",
    "capacity",
    "heartbeat_at",
    "name",
    "started_at",
    "take_keys",
  ]);
  const run = await store.reads.getRun("old-run");
  assert.equal(run?.goal, "keep me");
  assert.equal(run?.status, "done");
  assert.equal(run?.epoch, 3);
  assert.deepEqual((await store.reads.loadHistory("old-run")).journal.map((j) => j.decision), [{
    done: true,
    message: "ok",
  }]);
}

Deno.test("parseMigrations() reads numbered steps and refuses a gap", () => {
  assert.deepEqual(
    parseMigrations("-- head\n-- migration 1: one\nselect 1;\n-- migration 2: two\nselect 2;\n"),
    [
      { version: 1, name: "one", sql: "select 1;\n" },
      { version: 2, name: "two", sql: "select 2;\n" },
    ],
  );
  assert.throws(() => parseMigrations("-- migration 2: two\n"), /migration 2 follows 0/);
  assert.equal(SCHEMA_VERSION, MIGRATIONS.length);
});

Deno.test("migrationScript() takes the advisory lock before anything else and guards each step", () => {
  const script = migrationScript("agent_runtime", 0);
  assert.match(
    script.split("\n")[0],
    /^select pg_advisory_xact_lock\(hashtext\('agent-runtime migrate agent_runtime'\)\);$/,
  );
  for (const m of MIGRATIONS) assert.ok(script.includes(`where version = ${m.version}) then`));
});

Deno.test("an embedded database from before versions moves from public to agent_runtime, rows intact", async () => {
  const store = new Store(await openTestPglite());
  try {
    await store.client.exec(`set search_path to public;\n${BEFORE_VERSIONS}\n${OLD_RUN}`);
    await store.client.exec(`set search_path to agent_runtime`);
    await assert.rejects(store.checkSchema(), (e: Error & { code?: string }) => e.code === "SCHEMA_MISSING");
    assert.deepEqual(await store.migrate(), { schema: "agent_runtime", from: 0, to: SCHEMA_VERSION });
    await assertMigrated(store, "agent_runtime");
    const left = await store.client.query(`select 1 from pg_tables where schemaname = 'public'`);
    assert.equal(left.length, 0, "no table is left behind in public");
    assert.deepEqual(await store.migrate(), {
      schema: "agent_runtime",
      from: SCHEMA_VERSION,
      to: SCHEMA_VERSION,
    });
  } finally {
    await store.client.close();
  }
});

Deno.test("a database newer than the program is refused, naming both versions", async () => {
  const store = new Store(await openTestPglite());
  try {
    await store.migrate();
    await store.client.exec(
      `insert into schema_version (version, name) values (${SCHEMA_VERSION + 1}, 'future')`,
    );
    for (const attempt of [store.migrate(), store.checkSchema()]) {
      await assert.rejects(attempt, (e: Error & { code?: string }) => {
        assert.equal(e.code, "SCHEMA_NEWER");
        assert.match(
          e.message,
          new RegExp(`version ${SCHEMA_VERSION + 1}, newer than this program's ${SCHEMA_VERSION}`),
        );
        return true;
      });
    }
  } finally {
    await store.client.close();
  }
});

async function withSchema(
  fn: (serverUrl: string, schema: string, url: string) => Promise<void>,
): Promise<void> {
  const serverUrl = TEST_DATABASE_URL!;
  const schema = `mig_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  const u = new URL(serverUrl);
  u.searchParams.set("search_path", schema);
  try {
    await admin.unsafe(`create schema ${schema}`);
    await fn(serverUrl, schema, u.toString());
  } finally {
    await admin.unsafe(`drop schema if exists ${schema} cascade`);
    await admin.end();
  }
}

Deno.test({
  name:
    "a PostgreSQL database created by the schema from before versions is upgraded at open, its run intact",
  ignore: pgIgnore("schema upgrade on PostgreSQL"),
  fn: () =>
    withSchema(async (_server, schema, url) => {
      const store = new Store(await openPostgres(url));
      try {
        await store.client.exec(`${BEFORE_VERSIONS}\n${OLD_RUN}`);
        await assert.rejects(store.checkSchema(), (e: Error & { code?: string }) => {
          assert.equal(e.code, "SCHEMA_OUTDATED");
          assert.match(e.message, /at version 0, older than this program's .*deno task migrate/);
          return true;
        });
        assert.deepEqual(await store.migrate(), { schema, from: 0, to: SCHEMA_VERSION });
        await assertMigrated(store, schema);
      } finally {
        await store.client.close();
      }
    }),
});

Deno.test({
  name: "two processes migrating one empty schema at once apply each step once",
  ignore: pgIgnore("concurrent migrations"),
  fn: () =>
    withSchema(async (_server, schema, url) => {
      const stores = await Promise.all(
        Array.from({ length: 4 }, async () => new Store(await openPostgres(url))),
      );
      try {
        const results = await Promise.all(stores.map((s) => s.migrate()));
        for (const r of results) assert.equal(r.to, SCHEMA_VERSION);
        const rows = await stores[0].client.query<{ n: number }>(
          `select count(*)::int as n from ${schema}.schema_version`,
        );
        assert.equal(rows[0].n, SCHEMA_VERSION);
        await stores[0].checkSchema();
      } finally {
        await Promise.all(stores.map((s) => s.client.close()));
      }
    }),
});

Deno.test("migration 5 counts a step of an older database by the budget's rule, from the usage it holds", async () => {
  const store = new Store(await openTestPglite());
  try {
    const upTo4 = MIGRATIONS.filter((m) => m.version <= 4);
    await store.client.exec(
      `create schema if not exists agent_runtime; set search_path to agent_runtime;
       ${upTo4.map((m) => m.sql).join("\n")}
       create table schema_version (version integer primary key, name text not null,
                                    applied_at timestamptz not null default now());
       insert into schema_version (version, name) values ${
        upTo4.map((m) => `(${m.version}, 'v')`).join(", ")
      };
       ${OLD_RUN}`,
    );
    const usages = [
      { prompt_tokens: 1000, completion_tokens: 100, total_tokens: -1 },
      { prompt_tokens: 10, completion_tokens: 5 },
      { total_tokens: 7.5, prompt_tokens: -3 },
      { total_tokens: "many" },
      null,
    ];
    for (const [i, usage] of usages.entries()) {
      await store.client.run(
        `insert into journal (run_id, seq, status, llm_attempts, usage, epoch, intent_at)
         values ('old-run', $1, 'intent', 1, $2::text::jsonb, 3, '2026-01-01')`,
        [i + 1, JSON.stringify(usage)],
      );
    }
    assert.deepEqual(await store.migrate(), { schema: "agent_runtime", from: 4, to: SCHEMA_VERSION });
    const { journal } = await store.reads.loadHistory("old-run");
    assert.deepEqual(
      journal.slice(1).map((j) => j.spent_tokens),
      usages.map((u) => answerTokens(u, 0)),
    );
    assert.deepEqual(journal.slice(1).map((j) => j.spent_tokens), [1100, 15, 8, 0, 0]);
  } finally {
    await store.client.close();
  }
});

Deno.test("migration 6 lets a call wait and a run wake, and leaves an older database's rows as they were", async () => {
  const store = new Store(await openTestPglite());
  try {
    const upTo5 = MIGRATIONS.filter((m) => m.version <= 5);
    await store.client.exec(
      `create schema if not exists agent_runtime; set search_path to agent_runtime;
       ${upTo5.map((m) => m.sql).join("\n")}
       create table schema_version (version integer primary key, name text not null,
                                    applied_at timestamptz not null default now());
       insert into schema_version (version, name) values ${
        upTo5.map((m) => `(${m.version}, 'v')`).join(", ")
      };
       ${OLD_RUN}
       insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
         values ('old-run:0', 'old-run', 0, 't', '{}', 'intent', 2, 3, '2026-01-01');`,
    );
    await assert.rejects(
      store.client.run(`update side_effects set status = 'waiting' where idempotency_key = 'old-run:0'`),
      /side_effects_status_check/,
      "before the step, a call cannot wait",
    );
    assert.deepEqual(await store.migrate(), { schema: "agent_runtime", from: 5, to: SCHEMA_VERSION });
    await store.checkSchema();
    const [call] = (await store.reads.loadHistory("old-run")).effects;
    assert.deepEqual(
      [call.status, call.attempts, call.polls, call.check_at, call.wait_deadline_at],
      ["intent", 2, 0, null, null],
    );
    assert.equal((await store.reads.getRun("old-run"))?.wake_at, null);
    await store.client.run(
      `update side_effects set status = 'waiting', check_at = '2026-01-02' where idempotency_key = 'old-run:0'`,
    );
    assert.equal((await store.reads.getEffect("old-run:0"))?.status, "waiting");
    const index = await store.client.query<{ def: string }>(
      `select indexdef as def from pg_indexes where indexname = 'runs_wake_order'`,
    );
    assert.match(index[0]?.def ?? "", /\(wake_at, run_id\) WHERE \(status = 'waiting'::text\)/);
  } finally {
    await store.client.close();
  }
});

Deno.test("migration 7 lets a run have a parent, and leaves an older database's runs in no family", async () => {
  const store = new Store(await openTestPglite());
  try {
    const upTo6 = MIGRATIONS.filter((m) => m.version <= 6);
    await store.client.exec(
      `create schema if not exists agent_runtime; set search_path to agent_runtime;
       ${upTo6.map((m) => m.sql).join("\n")}
       create table schema_version (version integer primary key, name text not null,
                                    applied_at timestamptz not null default now());
       insert into schema_version (version, name) values ${
        upTo6.map((m) => `(${m.version}, 'v')`).join(", ")
      };
       ${OLD_RUN}`,
    );
    await assert.rejects(
      store.checkSchema(),
      /lack runs\.parent_run_id, runs\.parent_key, runs\.root_run_id/,
    );
    assert.deepEqual(await store.migrate(), { schema: "agent_runtime", from: 6, to: SCHEMA_VERSION });
    await store.checkSchema();
    const run = await store.reads.getRun("old-run");
    assert.deepEqual([run?.parent_run_id, run?.parent_key, run?.root_run_id], [null, null, null]);
    const indexes = await store.client.query<{ name: string; def: string }>(
      `select indexname as name, indexdef as def from pg_indexes where indexname in ('runs_parent', 'runs_root')
        order by indexname`,
    );
    assert.deepEqual(indexes.map((i) => i.name), ["runs_parent", "runs_root"]);
    assert.match(indexes[0].def, /\(parent_run_id\) WHERE \(parent_run_id IS NOT NULL\)/);
  } finally {
    await store.client.close();
  }
});
