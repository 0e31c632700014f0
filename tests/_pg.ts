/**
 * Test helpers for a real PostgreSQL. Tests that need one read
 * `TEST_DATABASE_URL`; without it they are skipped, and say so.
 *
 * Each test gets its own schema (`t_<random>`), with the tables loaded from
 * schema.sql, and a database URL whose `search_path` points at it, so tests
 * (and the worker processes they spawn) never see each other's runs.
 *
 * @module
 */

import postgres from "postgres";
import { openPostgres } from "../runtime/store/postgres.ts";
import { SCHEMA_SQL, Store } from "../runtime/store/store.ts";

/** The test server's URL, or undefined (tests that need it are then skipped). */
export const TEST_DATABASE_URL: string | undefined = Deno.env.get("TEST_DATABASE_URL") || undefined;

/** `ignore` for Deno.test when no PostgreSQL is configured; prints why once per file. */
export function pgIgnore(name: string): boolean {
  if (!TEST_DATABASE_URL) console.log(`skipped (TEST_DATABASE_URL is unset): ${name}`);
  return !TEST_DATABASE_URL;
}

/** A schema of its own for one test: its URL, a store on it, and a way to drop it. */
export interface PgSchema {
  /** A DATABASE_URL whose search_path is the schema. */
  url: string;
  /** The schema's name. */
  schema: string;
  /** A store on the schema. */
  store: Store;
  /** Closes the store and drops the schema. */
  drop(): Promise<void>;
}

/** Creates a fresh schema with the tables loaded. */
export async function freshSchema(): Promise<PgSchema> {
  if (!TEST_DATABASE_URL) throw new Error("TEST_DATABASE_URL is unset");
  const schema = `t_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const admin = postgres(TEST_DATABASE_URL, { max: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create schema ${schema}`);
    await admin.unsafe(`set search_path to ${schema}; ${SCHEMA_SQL}`).simple();
  } finally {
    await admin.end();
  }
  const u = new URL(TEST_DATABASE_URL);
  u.searchParams.set("search_path", schema);
  const url = u.toString();
  const store = new Store(await openPostgres(url, { max: 4 }));
  return {
    url,
    schema,
    store,
    drop: async () => {
      await store.client.close();
      const a = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
      try {
        await a.unsafe(`drop schema if exists ${schema} cascade`);
      } finally {
        await a.end();
      }
    },
  };
}
