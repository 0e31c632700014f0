/**
 * In-memory PGlite for tests: one instance per test file that imports this
 * module, which the file's tests take turns on. Opening an instance costs 1.5
 * to 2 s of a core (the suite's template loaded, PostgreSQL started in
 * WebAssembly); emptying one costs tens of ms. `deno test` runs each file in a
 * worker of its own, one test at a time, so the instance is the file's alone.
 *
 * The instance is made as the module loads, not inside a test: PGlite arms a
 * timer when it starts that ends only when it closes, and `--sanitize-ops`
 * fails the test that started it while it is open. Only files that use
 * {@link openTestPglite}, {@link bothStoresTest} or {@link testClient}
 * import this module.
 *
 * @module
 */

import { PGlite } from "@electric-sql/pglite";
import { DEFAULT_SCHEMA } from "../runtime/store/migrate.ts";
import { openPglite, PgliteClient } from "../runtime/store/pglite.ts";
import { Store } from "../runtime/store/store.ts";
import { Client } from "../runtime/client/client.ts";
import type { Clock } from "../runtime/base/clock.ts";
import { pgTest, testTemplate } from "./_pg.ts";

const TEMPLATE = await testTemplate();
/** This file's instance, and the handle on it now in use (a test file's own state: see the module's comment). */
const SHARED: { db: PGlite; handle?: PgliteClient } = {
  db: await PGlite.create(undefined, TEMPLATE ? { loadDataDir: TEMPLATE } : {}),
};

/** Empties the instance as a new one is: no transaction, prepared statement, temporary table, lock or setting left, no schema of ours and an empty `public`. */
async function emptied(db: PGlite): Promise<void> {
  if (db.isInTransaction()) await db.exec("rollback");
  await db.exec(
    "deallocate all; discard temp; discard sequences; discard plans; select pg_advisory_unlock_all(); reset all; " +
      `drop schema if exists ${DEFAULT_SCHEMA} cascade; drop schema public cascade; create schema public; ` +
      `set search_path to ${DEFAULT_SCHEMA}`,
  );
}

/**
 * An in-memory PGlite for a test, as a new one is (no tables: the test applies the schema): a handle on this
 * file's instance, emptied first. Closing it closes only the handle, and takes its listeners off. While the
 * previous handle is still open (a test that wants two databases at once) it is an instance of its own, from
 * the run's template when there is one.
 */
export async function openTestPglite(): Promise<PgliteClient> {
  if (SHARED.handle && !SHARED.handle.closed) return openPglite(undefined, { template: TEMPLATE });
  await emptied(SHARED.db);
  SHARED.handle = new PgliteClient(SHARED.db, { describe: "pglite:memory", owned: false });
  return SHARED.handle;
}

/**
 * What `connect({ memory: true })` gives a test, a client on an in-memory database with the tables loaded,
 * on this file's instance ({@link openTestPglite}): a PGlite start of its own and `initdb` cost 2.5 to 3.5 s of
 * a core; this costs the schema's statements. Closing the client closes only its handle.
 */
export async function testClient(opts: { clock?: Clock } = {}): Promise<Client> {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  return new Client(store, opts.clock);
}

/**
 * The same test on both stores: `<name> (PGlite)` on an in-memory PGlite
 * ({@link openTestPglite}), and `<name> (PostgreSQL)` on a fresh schema
 * (skipped without `TEST_DATABASE_URL`).
 */
export function bothStoresTest(name: string, fn: (store: Store, t: Deno.TestContext) => Promise<void>): void {
  Deno.test(`${name} (PGlite)`, async (t) => {
    const store = new Store(await openTestPglite());
    try {
      await store.applySchema();
      await fn(store, t);
    } finally {
      await store.client.close();
    }
  });
  pgTest(`${name} (PostgreSQL)`, (pg, t) => fn(pg.store, t));
}
