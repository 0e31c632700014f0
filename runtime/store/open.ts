/**
 * Chooses the store for a set of settings: PostgreSQL when `DATABASE_URL` is
 * set, otherwise PGlite under `DATA_DIR`. Either way the tables are brought
 * up to this program's schema version first (see `migrate.ts`).
 *
 * @module
 */

import { StoreError } from "../base/errors.ts";
import { databaseAwayError } from "./away.ts";
import { type LockWait, openPglite } from "./pglite.ts";
import { openPostgres } from "./postgres.ts";
import { Store } from "./store.ts";

/** Where a store is: a PostgreSQL URL, or else an embedded directory. */
export interface StoreLocation {
  /** A PostgreSQL URL; unset or empty for the embedded PGlite. */
  databaseUrl?: string;
  /** The embedded store's directory (its `pglite/` is the database). */
  dataDir: string;
}

/**
 * Opens the store for `settings` and migrates it (or refuses a database newer
 * than the program). `lockWait` says how long to wait for an embedded
 * directory another process holds (by default it refuses at once). Every
 * failure is a {@link StoreError}: a PostgreSQL lost between the connection
 * and the schema check is `DB_UNREACHABLE` (or `DB_READ_ONLY`) like one never
 * reached, so a caller tells the database away from a setting by
 * `isDatabaseAway` alone.
 */
export async function openStore(
  settings: StoreLocation,
  opts: { max?: number; lockWait?: LockWait } = {},
): Promise<Store> {
  if (settings.databaseUrl) {
    const store = new Store(await openPostgres(settings.databaseUrl, { max: opts.max }));
    try {
      await store.migrate();
      // The version says the steps ran; the columns say nobody has dropped one
      // since. Checked before anything acts, not discovered at a confirm.
      await store.checkSchema();
    } catch (err) {
      await store.client.close().catch(() => {}); // the connection may be what failed
      throw err instanceof StoreError ? err : databaseAwayError(err, store.describe) ?? err;
    }
    return store;
  }
  const store = new Store(await openPglite(`${settings.dataDir}/pglite`, opts.lockWait));
  try {
    await store.migrate();
  } catch (err) {
    await store.client.close();
    throw err;
  }
  return store;
}
