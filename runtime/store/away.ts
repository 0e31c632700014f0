/**
 * Which failures of a driver mean the database is away for now, not set up
 * wrong: read from the error's `code`, which postgres.js sets to the
 * SQLSTATE of a server's refusal (`25006`), to a name of its own for a
 * connection it lost (`CONNECTION_CLOSED`), and to the system's name for a
 * socket that failed (`ECONNREFUSED`). PGlite's errors carry SQLSTATEs too;
 * an embedded database is never away, so none of them matches.
 *
 * @module
 */

import { type CodeOf, StoreError } from "../base/errors.ts";

/**
 * SQLSTATEs of a server that is there but cannot serve now: the whole
 * connection exception class (`08`) is matched by its prefix, beside these.
 */
const AWAY_SQLSTATES: ReadonlyMap<string, string> = new Map([
  ["57P01", "the server is shutting down"],
  ["57P02", "the server crashed and is restarting"],
  ["57P03", "the server is starting up or shutting down"],
  ["53300", "the server has no free connection"],
]);

/** postgres.js's own codes for a connection it lost or could not make, and the socket errors under them. */
const AWAY_CONNECTION_CODES: ReadonlySet<string> = new Set([
  "CONNECTION_CLOSED",
  "CONNECTION_DESTROYED",
  "CONNECTION_ENDED",
  "CONNECT_TIMEOUT",
  "EAI_AGAIN",
  "ECONNABORTED",
  "ECONNREFUSED",
  "ECONNRESET",
  "EHOSTUNREACH",
  "ENETDOWN",
  "ENETUNREACH",
  "ENOTFOUND",
  "EPIPE",
  "ETIMEDOUT",
]);

/** SQLSTATE 25006, read_only_sql_transaction: the server answering refuses writes. */
export const READ_ONLY_SQLSTATE = "25006";

/** The `code` a driver error carries, or undefined. */
export function driverCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * Which {@link StoreError} a driver's failure at `describe` is when it means
 * the database is away for now (`DB_READ_ONLY` for a server that refuses
 * writes, `DB_UNREACHABLE` for one that cannot be reached or cannot serve
 * now), or undefined when it does not (a statement refused for what it is:
 * a missing right, a missing table).
 */
export function databaseAwayError(err: unknown, describe: string): StoreError | undefined {
  const code = driverCode(err);
  if (code === undefined) return undefined;
  const message = (err as Error).message ?? String(err);
  let which: CodeOf<"StoreError">;
  let why: string;
  if (code === READ_ONLY_SQLSTATE) {
    which = "DB_READ_ONLY";
    why = "the server answering refuses writes (a standby, or a node being promoted)";
  } else if (code.startsWith("08") && code.length === 5) {
    which = "DB_UNREACHABLE";
    why = "the connection failed";
  } else if (AWAY_SQLSTATES.has(code)) {
    which = "DB_UNREACHABLE";
    why = AWAY_SQLSTATES.get(code)!;
  } else if (AWAY_CONNECTION_CODES.has(code)) {
    which = "DB_UNREACHABLE";
    why = "the connection failed";
  } else {
    return undefined;
  }
  return new StoreError(
    which,
    `The database at ${describe} is away: ${why} (${code} ${message}). Nothing is lost; ` +
      `the same settings work once it is back`,
    { cause: err },
  );
}

/** A client closed on purpose by its own process (`end()`): it will not come back, so it is never waited for. */
const CLOSED_BY_US: ReadonlySet<string> = new Set(["CONNECTION_ENDED", "CONNECTION_DESTROYED"]);

/**
 * True when a read failed because the server cannot be reached for now
 * (refused, reset, shut down, restarting, a connection exception of SQLSTATE
 * class 08, no free connection): the same read may succeed once it is back,
 * so a watcher reads again (`watch.ts`). Not for a client this process closed
 * itself, nor for a server that refuses writes (a read works there). A
 * {@link StoreError} `DB_UNREACHABLE` counts too.
 */
export function isUnreachable(err: unknown): boolean {
  if (err instanceof StoreError) return err.code === "DB_UNREACHABLE";
  const code = driverCode(err);
  if (code === undefined || CLOSED_BY_US.has(code)) return false;
  return databaseAwayError(err, "")?.code === "DB_UNREACHABLE";
}
