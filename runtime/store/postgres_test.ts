/**
 * The PostgreSQL driver (`postgres.ts`), called directly: where a URL points
 * is described without its password; a connection that fails at start is a
 * StoreError whose code says what to do (`DB_URL_INVALID`, `DB_UNREACHABLE`,
 * `DB_AUTH_FAILED`, `DB_NOT_FOUND` with the createdb command quoted for a
 * shell), and no message or stack holds the password; statements take
 * parameters, report rows written, keep their SQLSTATE when refused, and run
 * in the URL's schema (else agent_runtime); subscribers of one channel share
 * its LISTEN and each stops on its own; a closed client refuses statements.
 */

import assert from "node:assert/strict";
import { pgIgnore, pgTest, TEST_DATABASE_URL } from "../../tests/_pg.ts";
import { StoreError } from "../base/errors.ts";
import { describeTarget, openPostgres } from "./postgres.ts";
import { guarded } from "../testdata/guarded.ts";

const PASSWORD = "pw-s3cret";

/** The StoreError an open of `url` fails with; the password in none of its words. */
async function refusal(url: string): Promise<StoreError> {
  const err = await openPostgres(url).then(
    (c) => c.close().then(() => assert.fail(`opened ${url}`)),
    (e) => e,
  );
  assert.ok(err instanceof StoreError, String(err));
  assert.ok(!`${err.message}\n${err.stack}`.includes(PASSWORD), err.message);
  return err;
}

Deno.test("describeTarget() names host, port and database, never the password", () => {
  for (
    const [url, said] of [
      [`postgres://u:${PASSWORD}@db.example:6543/app`, "db.example:6543/app"],
      [`postgres://u:${PASSWORD}@db.example/app`, "db.example:5432/app"],
      [`postgres://u:${PASSWORD}@h1,h2:6000/app?target_session_attrs=read-write`, "h1:5432,h2:6000/app"],
      [`postgres://u:${PASSWORD}@[::1]:5433/app`, "[::1]:5433/app"],
      [`postgres://u:${PASSWORD}@bad host/app`, "postgres://u:***@bad host/app"],
    ]
  ) assert.equal(describeTarget(url), said);
});

Deno.test("a URL the driver cannot decode is DB_URL_INVALID, saying how to write '%'", async () => {
  const err = await refusal(`postgres://u:${PASSWORD}%zz@127.0.0.1:5432/db`);
  assert.equal(err.code, "DB_URL_INVALID");
  assert.equal(
    err.message,
    "DATABASE_URL postgres://u:***@127.0.0.1:5432/db cannot be used: URI malformed. Write '%' as '%25'",
  );
});

Deno.test("a port nobody listens on is DB_UNREACHABLE, naming host and port", async () => {
  const err = await refusal(`postgres://u:${PASSWORD}@127.0.0.1:1/db`);
  assert.equal(err.code, "DB_UNREACHABLE");
  assert.match(
    err.message,
    /^Cannot connect to PostgreSQL at 127\.0\.0\.1:1\/db: ECONNREFUSED .*server is running$/,
  );
});

Deno.test({
  name: "a role the server refuses is DB_AUTH_FAILED; a missing database DB_NOT_FOUND, with its createdb",
  ignore: pgIgnore("connect refusals"),
  async fn() {
    const u = new URL(TEST_DATABASE_URL!);
    const server = `${u.hostname}:${u.port || 5432}`;
    const noRole = await refusal(`postgres://no_role_here:${PASSWORD}@${server}${u.pathname}`);
    assert.equal(noRole.code, "DB_AUTH_FAILED");
    assert.match(
      noRole.message,
      /refused the role DATABASE_URL gives: 28000 role "no_role_here" does not exist/,
    );
    const db = `no_such'db_${crypto.randomUUID().slice(0, 8)}`;
    const noDb = await refusal(`postgres://postgres:${PASSWORD}@${server}/${db}`);
    assert.equal(noDb.code, "DB_NOT_FOUND");
    const createdb = `createdb -h ${u.hostname} -p ${u.port || 5432} -U postgres '${
      db.replace("'", `'\\''`)
    }'`;
    assert.ok(noDb.message.includes(`The database "${db}" does not exist`), noDb.message);
    assert.ok(
      noDb.message.includes(`Create it (${createdb}, as a role that may create databases)`),
      noDb.message,
    );
  },
});

pgTest("statements take parameters, count rows written and keep their SQLSTATE when refused", async (pg) => {
  const u = new URL(pg.url);
  u.password = PASSWORD;
  const client = await openPostgres(u.toString(), { max: 1 });
  try {
    assert.equal(client.describe, `postgres:${u.hostname}:${u.port || 5432}${u.pathname}`);
    const at = new Date(Date.UTC(2026, 0, 1, 12));
    const params = ["it's", 7, '{"a": [1, "b"]}', null, at.toISOString()];
    const text =
      `select $1::text as t, $2::int as i, $3::text::jsonb as j, $4::text as n, $5::timestamptz as at,
                         3::bigint as big`;
    for (const planEachTime of [false, true]) {
      const [row] = await client.query(text, params, { planEachTime });
      assert.deepEqual(
        row,
        { t: "it's", i: 7, j: { a: [1, "b"] }, n: null, at, big: "3" },
        "a bigint is text",
      );
    }
    await client.exec(
      "create table kv (k text primary key, v int); insert into kv values ('a', 1), ('b', 2)",
    );
    assert.equal(await client.run("update kv set v = v + $1", [10]), 2);
    const refused = await client.run("insert into kv values ($1, 0)", ["a"]).catch((e) => e);
    assert.equal(refused.code, "23505", "the SQLSTATE, which the store's callers branch on");
    const rows = await client.query("select k, v from kv order by k");
    assert.deepEqual([...rows], [{ k: "a", v: 11 }, { k: "b", v: 12 }], "a refused statement wrote nothing");
    const [{ path }] = await client.query<{ path: string }>("select current_setting('search_path') as path");
    assert.equal(path, pg.schema, "the URL's schema");
  } finally {
    await client.close();
  }
  const plain = await openPostgres(TEST_DATABASE_URL!, { max: 1 });
  const [{ path }] = await plain.query<{ path: string }>("select current_setting('search_path') as path");
  await plain.close();
  assert.equal(path, "agent_runtime", "without one in the URL");
  const refused = await plain.query("select 1").catch((e) => e);
  assert.equal(refused.code, "CONNECTION_ENDED", "a closed client refuses statements");
});

pgTest("subscribers of one channel share its LISTEN, and each stops on its own, once", async (pg) => {
  const client = await openPostgres(pg.url, { max: 1 });
  const got: Record<string, string[]> = { a: [], b: [], c: [] };
  let arrived = Promise.withResolvers<void>();
  const on = (who: string) => (p: string) => {
    got[who].push(p);
    if (who !== "a") arrived.resolve();
  };
  const send = async (payload: string) => {
    arrived = Promise.withResolvers<void>();
    await client.query("select pg_notify('pg_test', $1)", [payload]);
    await guarded(arrived.promise, payload);
  };
  try {
    const stopA = await client.listen("pg_test", on("a"));
    const stopB = await client.listen("pg_test", on("b"));
    await send("one");
    await stopA();
    await stopA();
    await send("two");
    await stopB();
    const stopC = await client.listen("pg_test", on("c")); // the channel listened to again
    await stopA();
    await send("three");
    await stopC();
    assert.deepEqual(got, { a: ["one"], b: ["one", "two"], c: ["three"] });
  } finally {
    await client.close();
  }
});

pgTest(
  "the pool's idle list is emptied after drainAfter statements that left a connection idle; two at once start the count again",
  async (pg) => {
    const client = await openPostgres(pg.url, { max: 2, drainAfter: 4 });
    try {
      const pids = new Set<number>();
      const pid = async () => {
        const [row] = await client.query<{ pid: number }>("select pg_backend_pid() as pid, pg_sleep(0.02)");
        pids.add(row.pid);
        return row.pid;
      };
      // Three one at a time, then two at once (the second takes the pool's last idle connection, which
      // empties postgres.js's idle list), then three one at a time: never four in a row, no drain.
      for (let i = 0; i < 3; i++) await pid();
      const [a, b] = await Promise.all([pid(), pid()]);
      assert.notEqual(a, b, "two at once use both connections");
      for (let i = 0; i < 3; i++) await pid();
      assert.equal(client.drained, 0);
      // The fourth in a row: the statement after it goes out with a `select 1` beside it, which takes the
      // other connection, so both are taken at once...
      await pid();
      assert.equal(client.drained, 0);
      await pid();
      assert.equal(client.drained, 1);
      // ...and the count starts again from there: four more before the next.
      for (let i = 0; i < 4; i++) await pid();
      assert.equal(client.drained, 1);
      await pid();
      assert.equal(client.drained, 2);
      // All on the pool's own two connections: a drain opens none.
      assert.equal(pids.size, 2, `statements on ${[...pids]}`);
    } finally {
      await client.close();
    }
  },
);

Deno.test("openPostgres refuses a pool size that is not a whole number of connections from 1", async () => {
  for (const max of [0, -1, 1.5, Number.NaN]) {
    await assert.rejects(
      openPostgres("postgres://postgres@127.0.0.1:1/none", { max }),
      /'max' must be a whole number of connections, 1 or more/,
    );
  }
  for (const drainAfter of [0, 2.5]) {
    await assert.rejects(
      openPostgres("postgres://postgres@127.0.0.1:1/none", { drainAfter }),
      /'drainAfter' must be a whole number of statements, 1 or more/,
    );
  }
});
