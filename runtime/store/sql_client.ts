/**
 * The driver interface every store speaks through: parameterised queries, a
 * write that counts rows, a script runner. A leaf, so the schema check
 * (`migrate.ts`), the drivers and the store all import it without importing
 * each other.
 *
 * @module
 */

/** The minimal driver interface: parameterised queries and a script runner. */
export interface SqlClient {
  /** A short description for logs, e.g. `pglite:.data/pglite` (never a password). */
  readonly describe: string;
  /**
   * Runs one statement with `$1`-style parameters and returns its rows. A
   * driver may prepare it once and reuse its plan; `planEachTime` asks for a
   * plan made for these parameters on every execution instead.
   */
  query<T = Record<string, unknown>>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]>;
  /**
   * Runs one insert, update or delete with `$1`-style parameters and returns
   * how many rows it wrote, with no rows sent back: a fenced write that only
   * needs to know whether it happened costs less this way than with
   * `returning` (#11: on PGlite each returned column is decoded in JavaScript).
   */
  run(text: string, params?: unknown[]): Promise<number>;
  /** Runs a script of several statements without parameters. */
  exec(text: string): Promise<void>;
  /** Releases the connection (and any lock). */
  close(): Promise<void>;
}

/** Options of {@link SqlClient.query}. */
export interface QueryOptions {
  /**
   * Plan the statement for its parameters on every execution rather than
   * once: for a statement whose best plan depends on them (how many ids an
   * array holds) and that runs rarely enough for planning not to matter.
   */
  planEachTime?: boolean;
}
