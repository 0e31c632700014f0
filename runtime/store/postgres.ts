/**
 * The production driver: postgres.js on a PostgreSQL server (15 or later).
 *
 * @module
 */

import postgres from "npm:postgres@3.4.9";
import { parseHostsUrl, redactUrl } from "../base/urls.ts";
import { StoreError } from "../base/errors.ts";
import { driverCode } from "./away.ts";
import { DEFAULT_SCHEMA } from "./migrate.ts";
import type { QueryOptions, SqlClient } from "./driver.ts";

/** Options of {@link openPostgres}. */
export interface PostgresOptions {
  /** Connections of the pool. Default 2 (a worker's steps plus its heartbeat). */
  max?: number;
  /** Seconds to wait for a connection before failing. Default 5. */
  connectTimeoutS?: number;
  /**
   * Statements sent while the pool kept an idle connection after which the
   * pool's idle list is emptied ({@link PostgresClient} says why). Default
   * {@link POOL_DRAIN_AFTER}.
   */
  drainAfter?: number;
}

/**
 * The default of {@link PostgresOptions.drainAfter}: a pool's idle list
 * grows to at most this many empty slots (searching them costs well under a
 * microsecond), and emptying it costs one `select 1` beside a statement, on
 * the pool's own connections.
 */
export const POOL_DRAIN_AFTER = 1_000;

/**
 * Runs statements through one postgres.js pool of `max` connections. Once it
 * has sent {@link POOL_DRAIN_AFTER} statements while the pool kept a
 * connection idle, the next statement sent when none is in flight goes out
 * together with `max - 1` `select 1`, so that every connection is taken at
 * once, which empties the pool's idle list. `LISTEN` goes through a
 * postgres.js instance of its own.
 *
 * Why: in postgres.js 3.4.9 (and 3.4.10) a pool keeps its idle connections in
 * a list whose `shift` leaves an empty slot behind unless the list empties,
 * and moving a connection searches the whole list. A pool of two sent
 * statements one at a time (a quiet worker: a heartbeat, a step, then the
 * next) never empties it, so it grew slower and larger with every statement:
 * 85.9 to 117.3 µs a statement over 320,000 (`deno task bench:pool`,
 * bench/README.md, "Flat at any length"). A statement that takes the pool's
 * last idle connection empties the list, so only the others are counted, from
 * that moment on.
 *
 * Two earlier forms were measured and dropped. One postgres.js instance per
 * connection, each sent its own statements: during a failover such an
 * instance could stall while connecting, and the statements already given to
 * it waited with it, where a pool hands its waiting statements to whichever
 * connection opens (tests/failover_pg_test.ts: runs held for minutes, a
 * heartbeat unanswered). A new pool swapped in every 10,000 such statements:
 * each swap started cold server backends (catalog caches, statements
 * prepared again), and a run's take after one read up to four times its cost
 * at the start (bench/long_bench.ts).
 */
export class PostgresClient implements SqlClient {
  readonly describe: string;
  readonly #make: () => postgres.Sql;
  readonly #max: number;
  readonly #drainAfter: number;
  readonly #pool: postgres.Sql;
  /** This client's statements in flight, the `select 1` of a drain included. */
  #inFlight = 0;
  /** Statements sent while the pool kept an idle connection, since its idle list last emptied. */
  #leaky = 0;
  #drained = 0;
  #listener?: postgres.Sql;
  /** The channels listened on, each with its subscribers (see {@link PostgresClient.listen}). */
  readonly #channels = new Map<string, {
    subscribers: Set<{ onPayload: (payload: string) => void }>;
    listening: Promise<{ unlisten: () => Promise<void> }>;
  }>();

  /**
   * `make` opens a postgres.js pool of `max` connections (the pool and the
   * listening instance come from it); `first` is the pool, when already open.
   */
  constructor(
    make: () => postgres.Sql,
    opts: { max: number; drainAfter: number; describe: string; first?: postgres.Sql },
  ) {
    this.#make = make;
    this.#max = opts.max;
    this.#drainAfter = opts.drainAfter;
    this.#pool = opts.first ?? make();
    this.describe = opts.describe;
  }

  /** How many times the pool's idle list was emptied on purpose. */
  get drained(): number {
    return this.#drained;
  }

  /** Runs `send` on the pool, with the `select 1` of a drain beside it when one is due. */
  #on<R>(send: (sql: postgres.Sql) => Promise<R>): Promise<R> {
    if (this.#inFlight === 0 && this.#leaky >= this.#drainAfter) {
      this.#drained++;
      for (let i = 1; i < this.#max; i++) this.#track(() => this.#pool.unsafe("select 1")).catch(() => {});
    }
    return this.#track(send);
  }

  /** Sends one statement, counted in flight until it answers. */
  async #track<R>(send: (sql: postgres.Sql) => Promise<R>): Promise<R> {
    // This statement takes the pool's last idle connection (the list empties) or leaves one idle.
    this.#leaky = this.#inFlight >= this.#max - 1 ? 0 : this.#leaky + 1;
    this.#inFlight++;
    try {
      return await send(this.#pool);
    } finally {
      this.#inFlight--;
    }
  }

  async query<T = Record<string, unknown>>(
    text: string,
    params: unknown[] = [],
    opts: QueryOptions = {},
  ): Promise<T[]> {
    // Named prepared statements: without them postgres.js asks the server for
    // the parameter types on every execution (an extra round trip); with them
    // it asks once per statement text and connection. Measured: 0.93 -> 0.66 ms
    // a statement on local PostgreSQL 15 (bench/step_bench.ts).
    // deno-lint-ignore no-explicit-any
    const rows = await this.#on((sql) => sql.unsafe(text, params as any[], { prepare: !opts.planEachTime }));
    return rows as unknown as T[];
  }

  async run(text: string, params: unknown[] = []): Promise<number> {
    // deno-lint-ignore no-explicit-any
    return (await this.#on((sql) => sql.unsafe(text, params as any[], { prepare: true }))).count ?? 0;
  }

  async exec(text: string): Promise<void> {
    await this.#on((sql) => sql.unsafe(text).simple());
  }

  async close(): Promise<void> {
    await Promise.all([this.#pool.end({ timeout: 5 }), this.#listener?.end({ timeout: 5 })]);
  }

  /**
   * `LISTEN` on a connection of its own (postgres.js opens one per instance
   * for every channel, outside `max`, here on an instance that sends no
   * statements and is never swapped, and closes it with the client); postgres.js
   * listens again when it drops, once the server is back. One postgres.js
   * subscription per channel carries every subscriber of this client:
   * postgres.js re-registers its listeners under new identities when it
   * listens again, so an unlisten after a restart would not find its own
   * and the callback would go on being called; here a subscriber's unlisten
   * removes it from the set, whatever the connection went through.
   */
  async listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    let sub = this.#channels.get(channel);
    if (sub === undefined) {
      const subscribers = new Set<{ onPayload: (payload: string) => void }>();
      this.#listener ??= this.#make();
      const listening = this.#listener.listen(channel, (payload) => {
        for (const s of subscribers) s.onPayload(payload);
      });
      const made = { subscribers, listening };
      sub = made;
      this.#channels.set(channel, made);
      // A failed LISTEN is not kept: the next subscriber asks again.
      listening.catch(() => {
        if (this.#channels.get(channel) === made) this.#channels.delete(channel);
      });
    }
    const { subscribers, listening } = sub;
    const { unlisten } = await listening;
    const me = { onPayload };
    subscribers.add(me);
    return async () => {
      if (!subscribers.delete(me) || subscribers.size > 0 || this.#channels.get(channel) !== sub) return;
      this.#channels.delete(channel);
      await unlisten();
    };
  }
}

/**
 * Where a database URL points, without its password: `host:port/db`, or
 * `h1:5432,h2:5433/db` for a URL that names a primary and its standbys.
 */
export function describeTarget(url: string): string {
  try {
    const { url: u, hosts } = parseHostsUrl(url);
    const withPort = (h: string) => /:\d+$/.test(h) ? h : `${h}:5432`;
    return `${hosts.map(withPort).join(",")}${u.pathname}`;
  } catch {
    return redactUrl(url);
  }
}

/**
 * The session a URL with `target_session_attrs=read-write` asks for, as
 * postgres.js 3.4.9 must be told it. That driver judges `read-write` by
 * `default_transaction_read_only` alone, which a hot standby of PostgreSQL 14
 * and later reports as `off`: it would settle on a standby and every write
 * there would fail for as long as the connection lived (seen in
 * tests/failover_pg_test.ts). `primary` reads `in_hot_standby`, which a standby
 * reports as `on`. libpq checks both; a primary that refuses writes for a
 * moment (pg_auto_failover's node between promotion and `wait_primary`)
 * answers `25006 read-only transaction`, which the runtime treats like the
 * outage it is part of.
 */
function sessionTarget(url: string): Pick<postgres.Options<never>, "target_session_attrs"> {
  let asked: string | null = null;
  try {
    asked = parseHostsUrl(url).url.searchParams.get("target_session_attrs");
  } catch {
    // a URL that does not parse is the driver's to refuse, with its own message
  }
  return asked === "read-write" ? { target_session_attrs: "primary" } : {};
}

/**
 * Connects to PostgreSQL and checks the connection with one round trip, so an
 * unreachable server is reported at start-up, naming host and port (never
 * the password), within `connectTimeoutS` seconds: `DB_UNREACHABLE` for a
 * server away (waited out by a worker), `DB_NOT_FOUND` and `DB_AUTH_FAILED`
 * for settings to fix.
 */
export async function openPostgres(url: string, opts: PostgresOptions = {}): Promise<PostgresClient> {
  const target = describeTarget(url);
  const max = opts.max ?? 2;
  if (!Number.isInteger(max) || max < 1) {
    throw new RangeError(
      `openPostgres: 'max' must be a whole number of connections, 1 or more: current value is ${max}`,
    );
  }
  const drainAfter = opts.drainAfter ?? POOL_DRAIN_AFTER;
  if (!Number.isInteger(drainAfter) || drainAfter < 1) {
    throw new RangeError(
      `openPostgres: 'drainAfter' must be a whole number of statements, 1 or more: current value is ${drainAfter}`,
    );
  }
  const make = () => pool(url, max, opts);
  let first: postgres.Sql;
  try {
    first = make();
  } catch (err) {
    // The driver decodes the URL itself: a malformed percent-escape throws a URIError.
    throw new StoreError(
      "DB_URL_INVALID",
      `DATABASE_URL ${redactUrl(url)} cannot be used: ${(err as Error).message}. Write '%' as '%25'`,
      { cause: err },
    );
  }
  try {
    await first.unsafe("select 1");
  } catch (err) {
    await first.end({ timeout: 1 }).catch(() => {});
    throw connectError(err, target, url);
  }
  return new PostgresClient(make, { max, drainAfter, describe: `postgres:${target}`, first });
}

/** A postgres.js pool of `max` connections on `url`, with the runtime's settings. */
function pool(url: string, max: number, opts: PostgresOptions): postgres.Sql {
  return postgres(url, {
    ...sessionTarget(url),
    max,
    connect_timeout: opts.connectTimeoutS ?? 5,
    // The wait, in seconds, before a connection is made again after failed tries (the pool's and
    // the listening one's): postgres.js's own rule, capped at 2 s instead of 20 s, so that after an
    // outage of a minute neither comes back up to 20 s after the server did.
    backoff: (retries: number) => (0.5 + Math.random() / 2) * Math.min(3 ** retries / 100, 2),
    onnotice: () => {},
    // The tables live in their own schema; a search_path in the URL (the
    // test sandboxes) wins, since postgres.js lets URL parameters override.
    connection: { search_path: DEFAULT_SCHEMA },
    // Integers stay numbers: every bigint the runtime reads is cast to int.
  });
}

/**
 * SQLSTATEs with which a server refuses a connection for a setting that will
 * not change by itself: the role's password or rights (`28P01`
 * invalid_password, `28000` no pg_hba.conf entry or no such role, `42501` no
 * right to connect to the database) or a database that does not exist
 * (`3D000`: an outage or a failover never removes one, so it is created by
 * someone, not waited for).
 */
const AUTH_SQLSTATES: ReadonlySet<string> = new Set(["28P01", "28000", "42501"]);
const NO_DATABASE_SQLSTATE = "3D000";

/**
 * The {@link StoreError} for a failed first round trip to `target`: a setting
 * (`DB_AUTH_FAILED`, `DB_NOT_FOUND`), or else `DB_UNREACHABLE`, the database
 * away. Any failure not known to be a setting counts as away: a process that
 * waits for a server that will never answer says so at every try, while one
 * that took an outage for a setting would stop for good.
 */
function connectError(err: unknown, target: string, url: string): StoreError {
  const code = driverCode(err);
  const seen = `${code ? code + " " : ""}${(err as Error | undefined)?.message ?? String(err)}`;
  if (code === NO_DATABASE_SQLSTATE) {
    return missingDatabase(url, target, (err as Error | undefined)?.message, err);
  }
  if (code !== undefined && AUTH_SQLSTATES.has(code)) {
    return new StoreError(
      "DB_AUTH_FAILED",
      `PostgreSQL at ${target} refused the role DATABASE_URL gives: ${seen}. Check the user and password ` +
        `in DATABASE_URL, and that pg_hba.conf and the role's rights let it connect`,
      { cause: err },
    );
  }
  return new StoreError(
    "DB_UNREACHABLE",
    `Cannot connect to PostgreSQL at ${target}: ${seen}. Check DATABASE_URL and that the server is running`,
    { cause: err },
  );
}

/**
 * `DB_NOT_FOUND`: the server is there and the database is not. Names the
 * database and the command that creates it (on the URL's first host, as its
 * user: the primary's, when the URL names several).
 */
function missingDatabase(
  url: string,
  target: string,
  serverMessage: string | undefined,
  cause: unknown,
): StoreError {
  let host = "localhost";
  let port = "5432";
  let user = "";
  let name = "";
  try {
    const { url: u, hosts } = parseHostsUrl(url);
    [host, port = "5432"] = (hosts[0] ?? "localhost").split(/:(?=\d+$)/);
    host = host.replace(/^\[(.*)\]$/, "$1"); // an IPv6 address, as createdb takes it
    user = decodeURIComponent(u.username);
    name = decodeURIComponent(u.pathname.replace(/^\//, ""));
  } catch {
    // the server's own words name the database below
  }
  // The server says which name it looked for (postgres.js takes the user's name when the URL has none).
  name = /database "(.*)" does not exist/.exec(serverMessage ?? "")?.[1] ?? (name || user);
  const command = ["createdb", "-h", host, "-p", port, ...(user ? ["-U", user] : []), name].map(shellWord)
    .join(" ");
  return new StoreError(
    "DB_NOT_FOUND",
    `The database ${JSON.stringify(name)} does not exist on the PostgreSQL server at ${target} (3D000 ` +
      `invalid_catalog_name). Create it (${command}, as a role that may create databases), or correct the ` +
      `database name in DATABASE_URL`,
    { cause },
  );
}

/** A word as a POSIX shell reads it back: bare when it is plain, single-quoted otherwise. */
function shellWord(word: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
