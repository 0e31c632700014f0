import assert from "node:assert/strict";
import postgres from "postgres";
import { pgIgnore, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { isDatabaseAway, StoreError } from "../base/errors.ts";
import { databaseAwayError } from "./away.ts";
import { openStore } from "./open.ts";
import { openPostgres } from "./postgres.ts";

/** An error shaped as postgres.js throws it: a message and a `code`. */
const driverError = (code: string, message = "x") => Object.assign(new Error(message), { code });

Deno.test("a driver error is the database away only for a lost server or one refusing writes", async (t) => {
  const cases: [string, "DB_READ_ONLY" | "DB_UNREACHABLE" | undefined][] = [
    ["25006", "DB_READ_ONLY"], // cannot execute CREATE SCHEMA in a read-only transaction
    ["ECONNREFUSED", "DB_UNREACHABLE"],
    ["ECONNRESET", "DB_UNREACHABLE"],
    ["ENOTFOUND", "DB_UNREACHABLE"],
    ["CONNECTION_CLOSED", "DB_UNREACHABLE"],
    ["CONNECT_TIMEOUT", "DB_UNREACHABLE"],
    ["08006", "DB_UNREACHABLE"], // connection_failure
    ["57P01", "DB_UNREACHABLE"], // terminating connection due to administrator command
    ["57P03", "DB_UNREACHABLE"], // the database system is starting up
    ["53300", "DB_UNREACHABLE"], // too many connections
    ["42501", undefined], // permission denied for schema: a role to fix
    ["42P01", undefined], // undefined table
    ["3D000", undefined], // a database that does not exist is a setting (openPostgres: DB_NOT_FOUND)
    ["08", undefined], // not a SQLSTATE
  ];
  for (const [code, want] of cases) {
    await t.step(`${code}: ${want ?? "not away"}`, () => {
      const err = databaseAwayError(driverError(code, `message of ${code}`), "postgres:h:5432/db");
      assert.equal(err?.code, want);
      if (err) {
        assert.ok(isDatabaseAway(err));
        assert.match(
          err.message,
          new RegExp(`^The database at postgres:h:5432/db is away: .*\\(${code} message`),
        );
      }
    });
  }
  await t.step("no code at all (a thrown string, a plain Error): not away", () => {
    assert.equal(databaseAwayError("boom", "d"), undefined);
    assert.equal(databaseAwayError(new Error("boom"), "d"), undefined);
  });
});

Deno.test("isDatabaseAway tells an outage from every store error that is a setting", () => {
  assert.ok(isDatabaseAway(new StoreError("DB_UNREACHABLE", "x")));
  assert.ok(isDatabaseAway(new StoreError("DB_READ_ONLY", "x")));
  for (
    const code of [
      "DB_NOT_FOUND",
      "DB_AUTH_FAILED",
      "DB_URL_INVALID",
      "MIGRATION_FAILED",
      "SCHEMA_NEWER",
    ] as const
  ) {
    assert.ok(!isDatabaseAway(new StoreError(code, "x")), code);
  }
  assert.ok(!isDatabaseAway(driverError("ECONNREFUSED")), "a driver's own error is classified first");
});

Deno.test({
  name: "a database that does not exist is DB_NOT_FOUND, saying to create it, not a server to wait for",
  ignore: pgIgnore("database not found"),
  async fn() {
    const u = new URL(TEST_DATABASE_URL!);
    u.pathname = `/no_such_db_${crypto.randomUUID().slice(0, 8)}`;
    const err = await openPostgres(u.toString()).then(() => assert.fail("opened"), (e) => e);
    assert.ok(err instanceof StoreError);
    assert.equal(err.code, "DB_NOT_FOUND");
    assert.match(
      err.message,
      /^The database "no_such_db_\w+" does not exist on the PostgreSQL server .*3D000.*Create it \(createdb /,
    );
    assert.ok(!isDatabaseAway(err));
  },
});

Deno.test({
  name: "a server that refuses writes at start is DB_READ_ONLY, an outage, not a failed migration",
  ignore: pgIgnore("read-only at start"),
  async fn() {
    // A schema with no tables yet, on a session that refuses writes, as a node being promoted does.
    const schema = `t_ro_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const u = new URL(TEST_DATABASE_URL!);
    u.searchParams.set("search_path", schema);
    u.searchParams.set("default_transaction_read_only", "on");
    const err = await openStore({ databaseUrl: u.toString(), dataDir: "" }).then(
      (store) => store.client.close().then(() => assert.fail("opened a read-only database")),
      (e) => e,
    );
    assert.ok(err instanceof StoreError, String(err));
    assert.equal(err.code, "DB_READ_ONLY", err.message);
    assert.match(err.message, /refuses writes .*25006/);
    assert.ok(isDatabaseAway(err));
    // Nothing was made: the schema is not there.
    const sql = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql`select 1 from pg_namespace where nspname = ${schema}`;
      assert.equal(rows.length, 0);
    } finally {
      await sql.end();
    }
  },
});
