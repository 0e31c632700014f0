/**
 * The driver interface the store speaks through: parameterised statements,
 * each sent with the name it is declared under, and scripts. PGlite
 * (`pglite.ts`) and postgres.js (`postgres.ts`) implement it; wrappers
 * (`counting.ts`, the harness's fault and defect layers) sit between the
 * store and a driver.
 *
 * @module
 */

import { StoreError } from "../errors.ts";

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

// What a driver throws when its server is away, as opposed to a statement the server refused: the
// socket's own failures (postgres.js passes on the runtime's error code), postgres.js's codes for a
// connection closed under a query or never made, and the SQLSTATEs of a server shutting down,
// starting, recovering or full. A closed client's own `CONNECTION_ENDED` is not one: it will not come back.
const AWAY_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "CONNECTION_CLOSED",
  "CONNECT_TIMEOUT",
  "57P01", // admin_shutdown
  "57P02", // crash_shutdown
  "57P03", // cannot_connect_now: starting up, or in recovery
  "53300", // too_many_connections
]);

/**
 * True when `err` says the database could not be reached (refused, reset,
 * shut down, restarting, a connection exception of SQLSTATE class 08),
 * rather than that a statement was refused: the same statement may succeed
 * once the server is back. A watcher reads again on it (`watch.ts`).
 */
export function isDatabaseAway(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && (AWAY_CODES.has(code) || /^08[0-9A-Z]{3}$/.test(code));
}
