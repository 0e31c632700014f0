/**
 * `deno task migrate`: brings the database's tables up to this program's
 * schema version and says from which version to which. Every process also
 * does this at start; the command is for doing it ahead of a deploy, as a
 * role that may create tables, or to see where a database stands.
 *
 * Exit codes: 0 migrated (or already current), 2 bad arguments, no database,
 * or a database newer than this program.
 *
 * @module
 */

import { SystemClock } from "../runtime/base/clock.ts";
import { commandFlags } from "../runtime/settings/config.ts";
import { StoreError } from "../runtime/base/errors.ts";
import { SCHEMA_VERSION } from "../runtime/store/migrate.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { Store } from "../runtime/store/store.ts";
import { loggerFor } from "./process.ts";

/** The usage text of `migrate`. */
export const MIGRATE_USAGE =
  `agent-runtime migrate: brings the tables up to schema version ${SCHEMA_VERSION} (this program's).

usage: deno task migrate [--flag value ...]   (every flag is also an environment variable)

  --database-url URL         PostgreSQL (env DATABASE_URL); the tables live in schema agent_runtime
                             unless the URL names a search_path; unset: embedded PGlite under --data-dir
  --data-dir DIR             the embedded database's directory (env DATA_DIR, default .data)
  --log-format text|json     (env LOG_FORMAT, default text)

Every process migrates at start too; a database newer than the program is refused, never rolled back.

exit codes: 0 migrated or already current, 2 bad arguments, no database, or a newer database`;

/** Migrates; returns the exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  const flags = commandFlags("migrate", MIGRATE_USAGE, args, {
    "database-url": { type: "string" },
    "data-dir": { type: "string" },
    "log-format": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const databaseUrl = values["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = values["data-dir"] ?? (env.DATA_DIR || ".data");
  const logFormat = values["log-format"] ?? (env.LOG_FORMAT || "text");
  if (logFormat !== "text" && logFormat !== "json") {
    console.error(
      `migrate: --log-format must be "text" or "json": current value is ${JSON.stringify(logFormat)}`,
    );
    return 2;
  }
  const log = loggerFor({ databaseUrl, logFormat }, new SystemClock());
  let store: Store | undefined;
  try {
    store = new Store(databaseUrl ? await openPostgres(databaseUrl) : await openPglite(`${dataDir}/pglite`));
    const { schema, from, to } = await store.migrate();
    log.info("migrated", {
      store: store.describe,
      schema,
      from,
      to,
      note: from === to ? "already current" : undefined,
    });
    return 0;
  } catch (err) {
    if (err instanceof StoreError) {
      log.error("migrate-failed", { code: err.code, error: err.message });
      return 2;
    }
    throw err;
  } finally {
    await store?.client.close();
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
