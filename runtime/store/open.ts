/**
 * Chooses the store for a set of settings: PostgreSQL when `DATABASE_URL` is
 * set (the tables must exist), otherwise PGlite under `DATA_DIR` with the
 * schema applied automatically.
 *
 * @module
 */

import type { Settings } from "../config.ts";
import { openPglite } from "./pglite.ts";
import { openPostgres } from "./postgres.ts";
import { Store } from "./store.ts";

/** Opens and checks the store for `settings`. */
export async function openStore(
  settings: Pick<Settings, "databaseUrl" | "dataDir">,
  opts: { max?: number } = {},
): Promise<Store> {
  if (settings.databaseUrl) {
    const store = new Store(await openPostgres(settings.databaseUrl, { max: opts.max }));
    try {
      await store.checkSchema();
    } catch (err) {
      await store.client.close();
      throw err;
    }
    return store;
  }
  const store = new Store(await openPglite(`${settings.dataDir}/pglite`));
  await store.applySchema();
  return store;
}
