/**
 * The schema's versions: schema.sql is a list of numbered steps
 * (`-- migration <N>: <name>`), and a database records the steps it has in
 * `schema_version`. {@link migrate} applies the missing ones in one
 * transaction under an advisory lock, so two processes starting at once
 * migrate once; a database newer than this program is refused, never
 * downgraded.
 *
 * The tables go in the first schema of the connection's `search_path`: the
 * drivers set it to {@link DEFAULT_SCHEMA} unless the database URL names one
 * (the test sandboxes do).
 *
 * @module
 */

import SCHEMA_SQL from "../../schema.sql" with { type: "text" };
import { StoreError } from "../base/errors.ts";
import { databaseAwayError } from "./away.ts";
import type { SqlClient } from "./driver.ts";
import { queryRows, statement } from "./sql.ts";

/** Where the tables live unless the database URL's `search_path` says otherwise. */
export const DEFAULT_SCHEMA = "agent_runtime";

/** One numbered step of schema.sql. */
export interface Migration {
  /** Its number, from 1, one more than the step before. */
  version: number;
  /** What it does, in a few words. */
  name: string;
  /** Its statements. */
  sql: string;
}

/** Splits schema.sql into its steps; throws when the numbers do not run 1, 2, 3, ... */
export function parseMigrations(text: string): Migration[] {
  const steps: Migration[] = [];
  for (const line of text.split("\n")) {
    const m = /^-- migration (\d+): (.+)$/.exec(line.trim());
    if (m) {
      const version = Number(m[1]);
      if (version !== steps.length + 1) {
        throw new Error(
          `schema.sql: migration ${version} follows ${steps.length}; steps are numbered 1, 2, 3, ...`,
        );
      }
      steps.push({ version, name: m[2].trim(), sql: "" });
    } else if (steps.length > 0) {
      steps[steps.length - 1].sql += line + "\n";
    }
  }
  return steps.map((step) => ({ ...step, sql: step.sql.trim() + "\n" }));
}

/** Every step, in order. */
export const MIGRATIONS: readonly Migration[] = parseMigrations(SCHEMA_SQL);

/** The version this program's statements are written for: the last step's number. */
export const SCHEMA_VERSION: number = MIGRATIONS[MIGRATIONS.length - 1].version;

/** What {@link migrate} did. */
export interface MigrationResult {
  /** The schema the tables live in. */
  schema: string;
  /** The database's version before (0: no tables, or tables from before versions). */
  from: number;
  /** The version after. */
  to: number;
}

const quoteIdent = (name: string): string => `"${name.replaceAll('"', '""')}"`;
const quoteLiteral = (text: string): string => `'${text.replaceAll("'", "''")}'`;

const SEARCH_PATH = statement("search-path", `select current_setting('search_path') as path`);
const VERSION_TABLE = statement(
  "schema-version-table",
  `select to_regclass(format('%I.schema_version', $1::text)) is not null as present`,
);
// Sent with `{schema}` replaced by the quoted schema: an identifier cannot be a parameter, and
// the name travels with the statement, not in its text.
const SCHEMA_VERSION_READ = statement(
  "schema-version",
  `select coalesce(max(version), 0)::int as version from {schema}.schema_version`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const MIGRATE_STATEMENTS = [SEARCH_PATH, VERSION_TABLE, SCHEMA_VERSION_READ] as const;

/**
 * A name of `search_path` as the server reads it: a quoted one as written, an
 * unquoted one with its ASCII letters in lower case (`search_path=MyApp` in a
 * URL is the schema `myapp`, where the migration must put the tables).
 */
const identifier = (e: string): string =>
  /^".*"$/.test(e) ? e.slice(1, -1).replaceAll('""', '"') : e.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** The schema unqualified names resolve to: the first entry of `search_path` other than `$user`. */
export async function targetSchema(client: SqlClient): Promise<string> {
  const [row] = await queryRows<{ path: string }>(client, SEARCH_PATH, []);
  const entries = (row?.path ?? "").split(",").map((e) => identifier(e.trim()))
    .filter((e) => e !== "" && e !== "$user");
  if (entries.length === 0) {
    throw new StoreError(
      "SCHEMA_UNSET",
      `The connection to ${client.describe} has no schema in its search_path (${
        JSON.stringify(row?.path)
      }): ` +
        `leave search_path out of DATABASE_URL to use ${DEFAULT_SCHEMA}, or name one`,
    );
  }
  return entries[0];
}

/** The database's schema version in `schema` (0 when it has no `schema_version` table). */
export async function readVersion(client: SqlClient, schema: string): Promise<number> {
  const [reg] = await queryRows<{ present: boolean }>(client, VERSION_TABLE, [schema]);
  if (!reg?.present) return 0;
  const [row] = await client.query<{ version: number }>(
    SCHEMA_VERSION_READ.text.replace("{schema}", quoteIdent(schema)),
    [],
    SCHEMA_VERSION_READ.options,
  );
  return row?.version ?? 0;
}

/** Refuses a database whose version is newer than this program. */
export function assertNotNewer(version: number, describe: string): void {
  if (version > SCHEMA_VERSION) {
    throw new StoreError(
      "SCHEMA_NEWER",
      `The database at ${describe} is at schema version ${version}, newer than this program's ` +
        `${SCHEMA_VERSION}: a newer agent-runtime migrated it. Run that version (or newer) instead; ` +
        `versions are never rolled back`,
    );
  }
}

/**
 * The script that brings `schema` from `from` to {@link SCHEMA_VERSION}: one
 * implicit transaction (a multi-statement simple query), the advisory lock
 * first, then each step guarded by its own row in `schema_version`, so a
 * process that waited for the lock while another migrated does nothing.
 */
export function migrationScript(schema: string, from: number): string {
  const parts = [
    `select pg_advisory_xact_lock(hashtext(${quoteLiteral(`agent-runtime migrate ${schema}`)}));`,
    `create schema if not exists ${quoteIdent(schema)};`,
    `create table if not exists ${quoteIdent(schema)}.schema_version (
  version    integer primary key,
  name       text not null,
  applied_at timestamptz not null default now()
);`,
  ];
  for (const step of MIGRATIONS.filter((m) => m.version > from)) {
    parts.push(`do $migration$
begin
  if not exists (select 1 from ${quoteIdent(schema)}.schema_version where version = ${step.version}) then
    execute $step$${step.sql}$step$;
    insert into ${quoteIdent(schema)}.schema_version (version, name) values (${step.version}, ${
      quoteLiteral(step.name)
    });
  end if;
end
$migration$;`);
  }
  return parts.join("\n");
}

/**
 * Applies the steps the database lacks, or none when it is current; refuses
 * (`SCHEMA_NEWER`) a database newer than this program. A failure (a role
 * without the right to create tables, say) is `MIGRATION_FAILED`, naming the
 * version it stopped at: nothing of the failed script is kept. A server lost
 * meanwhile, or one refusing writes (`25006`), is `DB_UNREACHABLE` or
 * `DB_READ_ONLY` instead: the database is away, not the role wrong.
 */
export async function migrate(client: SqlClient): Promise<MigrationResult> {
  const schema = await targetSchema(client);
  const from = await readVersion(client, schema);
  assertNotNewer(from, client.describe);
  if (from === SCHEMA_VERSION) return { schema, from, to: from };
  try {
    await client.exec(migrationScript(schema, from));
  } catch (err) {
    // A server that went away, or one that refuses writes for now (a node being promoted), is
    // an outage to wait out, not a role that may not migrate.
    throw databaseAwayError(err, client.describe) ?? new StoreError(
      "MIGRATION_FAILED",
      `Cannot migrate the agent-runtime tables in schema ${schema} at ${client.describe} from version ${from} ` +
        `to ${SCHEMA_VERSION}: ${
          (err as Error).message
        }. The database is unchanged; run 'deno task migrate' ` +
        `as a role that may create tables in it`,
      { cause: err },
    );
  }
  const to = await readVersion(client, schema);
  assertNotNewer(to, client.describe);
  return { schema, from, to };
}
