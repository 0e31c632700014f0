/**
 * Schema sandboxes (`sandbox.ts`) on a real PostgreSQL: each is a schema of
 * its own, named `<prefix>_<16 hex digits>`, migrated to this program's
 * version, with a URL whose search_path points at it (other URL parameters
 * kept), so another process opening that URL lands in it; two sandboxes hold
 * a run of the same id apart; and `drop()` closes its store and removes its
 * own schema, everything in it, and nothing of another's. Skipped without
 * TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import postgres from "npm:postgres@3.4.9";
import { pgIgnore, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { SCHEMA_VERSION } from "./migrate.ts";
import { openPostgres } from "./postgres.ts";
import { createSandbox, type SchemaSandbox } from "./sandbox.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));

/** The schemas on the server among `names`. */
async function present(names: string[]): Promise<string[]> {
  const sql = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
  try {
    const rows =
      await sql`select nspname::text as s from pg_namespace where nspname = any(${names}) order by 1`;
    return rows.map((r) => r.s);
  } finally {
    await sql.end();
  }
}

/** Runs `fn` on sandboxes made by `make`, dropping each afterwards (a second drop does nothing). */
async function withSandboxes(
  make: (() => Promise<SchemaSandbox>)[],
  fn: (sandboxes: SchemaSandbox[]) => Promise<void>,
): Promise<void> {
  const made: SchemaSandbox[] = [];
  try {
    for (const m of make) made.push(await m());
    await fn(made);
  } finally {
    for (const s of made) await s.drop();
  }
}

Deno.test({
  name: "a sandbox is a migrated schema of its own, named by its prefix, that its URL points at",
  ignore: pgIgnore("sandbox: a schema of its own"),
  async fn() {
    const server = new URL(TEST_DATABASE_URL!);
    server.searchParams.set("application_name", "sandbox_test");
    server.searchParams.set("search_path", "public");
    const make = [
      () => createSandbox(server.toString(), { prefix: "t_sbx" }),
      () => createSandbox(server.toString()),
    ];
    await withSandboxes(make, async ([sb, plain]) => {
      assert.match(sb.schema, /^t_sbx_[0-9a-f]{16}$/);
      assert.match(plain.schema, /^t_[0-9a-f]{16}$/, "the default prefix is t");
      const u = new URL(sb.url);
      assert.equal(u.searchParams.get("search_path"), sb.schema, "the server URL's search_path is replaced");
      assert.equal(u.searchParams.get("application_name"), "sandbox_test", "other parameters are kept");
      assert.deepEqual([u.host, u.pathname, u.username], [server.host, server.pathname, server.username]);
      assert.deepEqual(await sb.store.migrate(), {
        schema: sb.schema,
        from: SCHEMA_VERSION,
        to: SCHEMA_VERSION,
      });
      await sb.store.checkSchema();
      // Another process given the URL works in the same schema.
      const other = await openPostgres(sb.url, { max: 1 });
      try {
        const [{ schema }] = await other.query<{ schema: string }>("select current_schema()::text as schema");
        assert.equal(schema, sb.schema);
        await other.run(
          "insert into runs (run_id, agent, goal, created_at, updated_at) values ($1, 'a', 'g', $2, $2)",
          [
            "from-other",
            T0.toISOString(),
          ],
        );
      } finally {
        await other.close();
      }
      assert.equal((await sb.store.reads.getRun("from-other"))?.goal, "g");
    });
  },
});

Deno.test({
  name: "two sandboxes hold runs of one id apart, and drop() removes only its own schema",
  ignore: pgIgnore("sandbox: apart"),
  async fn() {
    const make = [1, 2].map(() => () => createSandbox(TEST_DATABASE_URL!, { prefix: "t_sbx" }));
    const schemas: string[] = [];
    await withSandboxes(make, async ([a, b]) => {
      schemas.push(a.schema, b.schema);
      assert.notEqual(a.schema, b.schema);
      assert.equal(await a.store.leases.createRun({ runId: "same", agent: "x", goal: "in a" }, T0), true);
      assert.equal(await b.store.leases.createRun({ runId: "same", agent: "x", goal: "in b" }, T0), true);
      assert.equal(await a.store.leases.createRun({ runId: "only-a", agent: "x", goal: "g" }, T0), true);
      assert.equal((await a.store.reads.getRun("same"))?.goal, "in a");
      assert.equal((await b.store.reads.getRun("same"))?.goal, "in b");
      assert.equal(await b.store.reads.getRun("only-a"), undefined);
      await a.drop();
      assert.deepEqual(await present([a.schema, b.schema]), [b.schema], "a's schema went, b's stayed");
      await assert.rejects(
        a.store.reads.getRun("same"),
        (e: { code?: string }) => e.code === "CONNECTION_ENDED",
      );
      assert.equal((await b.store.reads.getRun("same"))?.goal, "in b", "b's rows are untouched");
      await a.drop(); // dropped again in withSandboxes' finally: nothing happens
    });
    assert.deepEqual(await present(schemas), [], "both gone");
  },
});
