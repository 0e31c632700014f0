/**
 * The driver interface the store speaks through: parameterised statements,
 * each sent with the name it is declared under, and scripts. PGlite
 * (`pglite.ts`) and postgres.js (`postgres.ts`) implement it; wrappers
 * (`counting.ts`, the harness's fault and defect layers) sit between the
 * store and a driver.
 *
 * @module
 */

import { StoreError } from "../base/errors.ts";

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
  run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number>;
  /** Runs a script of several statements without parameters. */
  exec(text: string): Promise<void>;
  /** Releases the connection (and any lock). */
  close(): Promise<void>;
  /**
   * Subscribes to a notification channel (`LISTEN`): `onPayload` is called
   * with each payload sent on it (`pg_notify`) from any session, in the
   * order they were committed, until the returned function unsubscribes.
   * Optional: a driver (or wrapper) without it cannot be watched live
   * (`client.stream` says so).
   */
  listen?(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>>;
}

/** Options of {@link SqlClient.query} and {@link SqlClient.run}. */
export interface QueryOptions {
  /**
   * The statement's name, declared once beside its text (a `StatementName`
   * of `statements.ts` for the store's own): what a wrapper counts, times or
   * aims a fault at, so reformatting a statement cannot relabel it. A driver
   * ignores it.
   */
  name?: string;
  /**
   * Plan the statement for its parameters on every execution rather than
   * once: for a statement whose best plan depends on them (how many ids an
   * array holds) and that runs rarely enough for planning not to matter.
   */
  planEachTime?: boolean;
}

/**
 * `client.listen`, or a `STREAM_UNSUPPORTED` {@link StoreError} for a driver
 * (or wrapper) that has none: what a wrapper's own `listen` passes on to.
 */
export function listenThrough(
  client: SqlClient,
  channel: string,
  onPayload: (payload: string) => void,
): Promise<() => Promise<void>> {
  if (!client.listen) {
    return Promise.reject(
      new StoreError(
        "STREAM_UNSUPPORTED",
        `The store ${client.describe} cannot listen for notifications, so its runs cannot be watched live: ` +
          "use the PostgreSQL or PGlite driver (or a wrapper that passes listen on)",
      ),
    );
  }
  return client.listen(channel, onPayload);
}
