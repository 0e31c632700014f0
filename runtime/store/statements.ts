/**
 * The catalogue of the store's statements: every one the runtime sends,
 * each declared once beside its text (in the file of the audience it serves)
 * under a name that travels with it to the driver ({@link QueryOptions.name}).
 * Counting, the fuzzer's fault positions and the bench's figures go by these
 * names, so reformatting a statement cannot relabel it.
 *
 * @module
 */

import type { QueryOptions } from "./driver.ts";
import { LEASE_STATEMENTS } from "./leases.ts";
import { MIGRATE_STATEMENTS } from "./migrate.ts";
import { OPERATOR_STATEMENTS } from "./operators.ts";
import { OVERVIEW_STATEMENTS } from "./overview.ts";
import { READ_STATEMENTS } from "./reads.ts";
import { RUN_WRITE_STATEMENTS } from "./run_writes.ts";
import { SCHEMA_CHECK_STATEMENTS } from "./schema_check.ts";
import type { Statement } from "./sql.ts";

/** Every statement of the store, by audience. */
export const STATEMENTS = {
  /** One run's fenced writes (`run_writes.ts`). */
  runWrites: RUN_WRITE_STATEMENTS,
  /** Reads of one run's rows (`reads.ts`). */
  reads: READ_STATEMENTS,
  /** Creating, claiming, taking, keeping and letting go of runs; the workers' rows (`leases.ts`). */
  leases: LEASE_STATEMENTS,
  /** The operators' reads and commands (`operators.ts`). */
  operators: OPERATOR_STATEMENTS,
  /** The web page's reads (`overview.ts`). */
  overview: OVERVIEW_STATEMENTS,
  /** The schema's version and columns (`migrate.ts`, `schema_check.ts`). */
  schema: [...MIGRATE_STATEMENTS, ...SCHEMA_CHECK_STATEMENTS],
} as const;

/** The name of one of the store's statements. */
export type StatementName = (typeof STATEMENTS)[keyof typeof STATEMENTS][number]["name"];

/** Every statement of the store, in one list. */
export const ALL_STATEMENTS: readonly Statement<StatementName>[] = Object.values(STATEMENTS).flat();

const NAMES: ReadonlySet<string> = new Set(ALL_STATEMENTS.map((s) => s.name));

/** True when `name` names one of the store's statements. */
export function isStatementName(name: unknown): name is StatementName {
  return typeof name === "string" && NAMES.has(name);
}

/**
 * The name a statement was sent under ({@link QueryOptions.name}), when it is
 * one of the store's; undefined for a statement the store did not declare
 * (a test's own, a script).
 */
export function statementName(opts: QueryOptions | undefined): StatementName | undefined {
  const name = opts?.name;
  return isStatementName(name) ? name : undefined;
}
