/**
 * Where a store is (`open.ts`): without a database URL (unset or empty) it
 * is PGlite in `<DATA_DIR>/pglite`, migrated, keeping its rows from one open
 * to the next, and a directory another handle holds is refused at once; with
 * a URL it is PostgreSQL and the directory is never touched: an unreachable
 * server is `DB_UNREACHABLE`, naming no password; a reachable one is opened
 * on its schema (made and migrated when new), described without the
 * password; a schema changed by hand is refused at open, before anything
 * acts, and the connection that found it is closed.
 */

import assert from "node:assert/strict";
import postgres from "npm:postgres@3.4.9";
import { pgIgnore, pgTest, seedDataDir, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { StoreError } from "../base/errors.ts";
import { SCHEMA_VERSION } from "./migrate.ts";
import { openStore } from "./open.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const PASSWORD = "pw-s3cret";
const V = SCHEMA_VERSION;

/** What `openStore` fails with. */
const refusal = (p: Promise<{ client: { close(): Promise<void> } }>) =>
  p.then((s) => s.client.close().then(() => assert.fail("opened")), (e) => e);

Deno.test("without a database URL the store is PGlite under DATA_DIR/pglite, keeping its rows", async () => {
  const dir = await Deno.makeTempDir({ prefix: "open_test_" });
  await seedDataDir(dir);
  try {
    const first = await openStore({ dataDir: dir });
    try {
      assert.equal(first.describe, `pglite:${dir}/pglite`);
      await first.checkSchema();
      await first.leases.createRun({ runId: "kept", agent: "a", goal: "still here" }, T0);
      const held = await refusal(openStore({ dataDir: dir }));
      assert.equal(held.code, "DATA_DIR_LOCKED", "one process per directory, refused at once");
    } finally {
      await first.client.close();
    }
    const again = await openStore({ databaseUrl: "", dataDir: dir });
    try {
      assert.deepEqual(await again.migrate(), { schema: "agent_runtime", from: V, to: V });
      assert.equal((await again.reads.getRun("kept"))?.goal, "still here");
    } finally {
      await again.client.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with a database URL the directory is not touched; a server away is DB_UNREACHABLE", async () => {
  const dir = await Deno.makeTempDir({ prefix: "open_test_" });
  try {
    const err = await refusal(
      openStore({ databaseUrl: `postgres://u:${PASSWORD}@127.0.0.1:1/db`, dataDir: dir }),
    );
    assert.ok(err instanceof StoreError);
    assert.equal(err.code, "DB_UNREACHABLE");
    assert.match(err.message, /^Cannot connect to PostgreSQL at 127\.0\.0\.1:1\/db: /);
    assert.ok(!err.message.includes(PASSWORD));
    assert.deepEqual([...Deno.readDirSync(dir)], [], "nothing made in DATA_DIR");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "a PostgreSQL URL opens the schema it names, made and migrated when new, described without the password",
  ignore: pgIgnore("openStore on PostgreSQL"),
  async fn() {
    // Written in capitals, unquoted: PostgreSQL folds the name to lower case, and so must the store.
    const schema = `t_open_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const u = new URL(TEST_DATABASE_URL!);
    u.password = PASSWORD;
    u.searchParams.set("search_path", schema.toUpperCase());
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const store = await openStore({ databaseUrl: u.toString(), dataDir: "/nonexistent" });
      try {
        assert.equal(store.describe, `postgres:${u.hostname}:${u.port || 5432}${u.pathname}`);
        assert.deepEqual(await store.migrate(), { schema, from: V, to: V });
        assert.equal(await store.leases.createRun({ runId: "r", agent: "a", goal: "g" }, T0), true);
      } finally {
        await store.client.close();
      }
      const [{ n }] = await admin.unsafe(`select count(*)::int as n from ${schema}.runs`);
      assert.equal(n, 1, "the run is in the URL's schema");
    } finally {
      await admin.unsafe(`drop schema if exists ${schema} cascade`);
      await admin.end();
    }
  },
});

pgTest(
  "a schema changed by hand is refused at open, and the connection that found it is closed",
  async (pg) => {
    const app = `open_${crypto.randomUUID().slice(0, 8)}`;
    const u = new URL(pg.url);
    u.searchParams.set("application_name", app);
    await pg.store.client.exec("alter table journal drop column params");
    const err = await refusal(openStore({ databaseUrl: u.toString(), dataDir: "" }));
    assert.ok(err instanceof StoreError);
    assert.equal(err.code, "SCHEMA_OUTDATED");
    assert.match(
      err.message,
      new RegExp(`in schema ${pg.schema} .* are at version ${V} but lack journal\\.params`),
    );
    // A closed connection leaves pg_stat_activity once its server process has exited: asked until it has.
    const sessions = `select count(*)::int as n from pg_stat_activity where application_name = $1`;
    for (let tries = 0; (await pg.store.client.query<{ n: number }>(sessions, [app]))[0].n > 0; tries++) {
      assert.ok(tries < 10_000, "openStore left its connection open");
    }
  },
);
