/**
 * A schema of its own on a PostgreSQL server, with the tables loaded: how the
 * tests, the harness's `--postgres` mode and the benchmark share one server
 * without seeing each other's runs. The returned URL carries the schema as
 * `search_path`, so worker processes started with it use it too.
 *
 * @module
 */

import postgres from "npm:postgres@3.4.9";
import { openPostgres } from "./postgres.ts";
import { Store } from "./store.ts";

/** An isolated schema and a store on it. */
export interface SchemaSandbox {
  /** A DATABASE_URL whose search_path is the schema. */
  url: string;
  /** The schema's name. */
  schema: string;
  /** A store on the schema. */
  store: Store;
  /** Closes the store and drops the schema with everything in it. */
  drop(): Promise<void>;
}

async function admin(serverUrl: string, sql: string): Promise<void> {
  const conn = postgres(serverUrl, { max: 1, onnotice: () => {} });
  try {
    await conn.unsafe(sql).simple();
  } finally {
    await conn.end();
  }
}

/** Creates schema `<prefix>_<random>` on `serverUrl` and migrates it to the current version. */
export async function createSandbox(
  serverUrl: string,
  opts: { prefix?: string; max?: number } = {},
): Promise<SchemaSandbox> {
  const schema = `${opts.prefix ?? "t"}_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const u = new URL(serverUrl);
  u.searchParams.set("search_path", schema);
  const url = u.toString();
  const store = new Store(await openPostgres(url, { max: opts.max ?? 2 }));
  try {
    await store.migrate();
  } catch (err) {
    await store.client.close();
    throw err;
  }
  return {
    url,
    schema,
    store,
    drop: async () => {
      await store.client.close();
      await admin(serverUrl, `drop schema if exists ${schema} cascade`);
    },
  };
}
