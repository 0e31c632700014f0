/**
 * The embedded driver: PGlite (PostgreSQL compiled to WebAssembly) on a
 * directory, or in memory. Two processes on one PGlite directory silently
 * lose committed rows, so opening a directory takes an exclusive lock on a
 * file beside it and refuses, naming the holder's pid, when it is held. The
 * kernel drops the lock when the holder dies, even by `kill -9`.
 *
 * @module
 */

import { PGlite, type Results } from "npm:@electric-sql/pglite@0.5.16";
import { type Clock, SystemClock } from "../base/clock.ts";
import { StoreError } from "../base/errors.ts";
import { DEFAULT_SCHEMA } from "./migrate.ts";
import type { QueryOptions, SqlClient } from "./driver.ts";

// PGlite has one session: setting search_path once puts every unqualified
// name in the runtime's own schema, as the PostgreSQL driver's connection
// parameter does (the schema itself is created by the first migration).
const SET_SCHEMA = `set search_path to ${DEFAULT_SCHEMA}`;

/**
 * What one PGlite session keeps for every handle on it: its named prepared
 * statements, and when to vacuum the runs table and refresh the planner's
 * statistics.
 *
 * Prepared statements: PGlite has no per-call statement names, so they are
 * made with SQL `prepare` and run with `execute`, sent as a simple query. A
 * fenced write spends more time being parsed and planned than executed there:
 * measured, a journal intent costs 468 µs as a parameterised query and 277 µs
 * as an `execute` through the extended protocol (less again as a simple query).
 *
 * Statistics: PGlite has no autovacuum, so nothing analyses its tables, and
 * a plan made without statistics can read far more than it returns: a take
 * with 50,000 runs waiting sorted all of them (27 ms a take; 0.8 ms once
 * analysed). Analysing small tables is worse, though: statistics that say a
 * table is a few pages make sequential scans the cheaper plan, and a cached
 * plan keeps scanning as the table grows (measured: a journal confirm went
 * from 178 to 490 µs within 200 runs of an analysis at 30 runs). Without
 * statistics the planner assumes at least ten pages a table, which keeps
 * lookups by key on their indexes. So every {@link CHECK_EVERY} statements
 * the session looks at the size of the runtime's tables, and analyses them
 * once they reach {@link ANALYZE_FROM_BYTES}, then whenever they have
 * doubled since (an analysis samples at most 30,000 rows a table). The
 * statistics are kept in the data directory: a reopened database has them.
 *
 * Dead rows: nothing vacuums PGlite either. A runs row is rewritten by its
 * claim, by every heartbeat and by its close, and each rewrite leaves the old
 * version in the table and in its indexes, so they grew without bound:
 * measured, 200 runs in flight heartbeated 80,000 times (a host's 20 minutes
 * at 3 s) left a runs table of 2,224 KiB and a take-order index of 2,488 KiB.
 * So every look also vacuums the runs table (2.5-4.4 ms with 20,000 to
 * 100,000 runs, once per {@link CHECK_EVERY} statements); with it the same
 * load leaves 160 and 328 KiB, as after 20,000 heartbeats. Journal and
 * tool-call rows are written twice each, so their dead versions stay bounded
 * by the live ones.
 */
export class PgliteSession {
  /** Statement text to its name, or null when it cannot be prepared (left to the plain path). */
  readonly #names = new Map<string, string | null>();
  // Names of another cache on the same session (a second handle made without
  // sharing this one) cannot collide with these.
  readonly #prefix = `agent_runtime_${crypto.randomUUID().slice(0, 8)}_`;
  #next = 0;
  #statements = 0;
  #analyzedBytes = 0;
  readonly #checkEvery: number;
  readonly #fromBytes: number;

  /**
   * The schedule's knobs are for tests and the benchmark; the defaults are {@link CHECK_EVERY} and
   * {@link ANALYZE_FROM_BYTES}. `checkEvery: Infinity` turns the schedule off.
   */
  constructor(opts: { checkEvery?: number; analyzeFromBytes?: number } = {}) {
    this.#checkEvery = opts.checkEvery ?? CHECK_EVERY;
    this.#fromBytes = opts.analyzeFromBytes ?? ANALYZE_FROM_BYTES;
  }

  /** Counts one statement; true when it is time to look at the tables' size ({@link maintain}). */
  countStatement(): boolean {
    return ++this.#statements % this.#checkEvery === 0;
  }

  /**
   * Vacuums the runs table, then analyses the runtime's tables if they have
   * reached the threshold size and doubled since the last analysis; returns
   * whether it analysed.
   */
  async maintain(db: PGlite): Promise<boolean> {
    const [{ bytes, runs }] = (await db.query<{ bytes: number; runs: boolean }>(
      `select coalesce(sum(pg_relation_size(t)), 0)::float8 as bytes, to_regclass('runs') is not null as runs
         from unnest(array[to_regclass('runs'), to_regclass('journal'), to_regclass('side_effects')]) as t
        where t is not null`,
    )).rows;
    // Not in a `do` block as the analysis is: vacuum refuses to run inside a transaction or a
    // function, so it waits for a look outside any transaction a handle holds open.
    if (runs && !db.isInTransaction()) await db.exec("vacuum runs");
    if (bytes < this.#fromBytes || bytes < 2 * this.#analyzedBytes) return false;
    await analyzeTables(db);
    this.#analyzedBytes = bytes;
    return true;
  }

  /** The name for `text`, preparing it on `db` the first time; null when it cannot be prepared. */
  async nameFor(db: PGlite, text: string): Promise<string | null> {
    const known = this.#names.get(text);
    if (known !== undefined) return known;
    // Bounded: the runtime's statements are a fixed set; anything past it runs unprepared.
    if (this.#names.size >= 500) return null;
    const name = `${this.#prefix}${++this.#next}`;
    try {
      await db.exec(`prepare ${name} as ${text}`);
      this.#names.set(text, name);
      return name;
    } catch {
      // A parameter whose type the text leaves open: run it as a plain query.
      this.#names.set(text, null);
      return null;
    }
  }
}

/** Statements between two looks at the size of the tables (one cheap query each). */
export const CHECK_EVERY = 5_000;
/**
 * The size of runs, journal and side_effects together from which they are
 * analysed: a few hundred demo runs (measured: 1.5 to 2 KiB a run, dead row
 * versions included), past the size where a sequential scan could win any
 * lookup by key.
 */
export const ANALYZE_FROM_BYTES = 1 << 20;

/** Analyses the runtime's tables that exist in the session's schema (what autovacuum does on a server). */
export async function analyzeTables(db: PGlite): Promise<void> {
  await db.exec(`do $analyze$
    declare t text;
    begin
      foreach t in array array['runs', 'journal', 'side_effects', 'approvals', 'workers'] loop
        if to_regclass(t) is not null then execute format('analyze %I', t); end if;
      end loop;
    end
    $analyze$`);
}

/**
 * A parameter as an SQL literal for `execute`: a quoted string of unknown
 * type, which PostgreSQL casts to the prepared parameter's type (standard
 * conforming strings: only the quote needs doubling). Arrays become array
 * literals.
 */
export function sqlLiteral(value: unknown): string {
  if (value === null || value === undefined) return "NULL";
  if (Array.isArray(value)) {
    const items = value.map((v) =>
      v === null || v === undefined
        ? "NULL"
        : `"${String(v).replaceAll("\\", "\\\\").replaceAll('"', '\\"')}"`
    );
    return sqlLiteral(`{${items.join(",")}}`);
  }
  const text = value instanceof Date ? value.toISOString() : String(value);
  return `'${text.replaceAll("'", "''")}'`;
}

/** Runs statements on a PGlite instance. */
export class PgliteClient implements SqlClient {
  readonly describe: string;
  readonly #db: PGlite;
  readonly #owned: boolean;
  readonly #lock?: Deno.FsFile;
  readonly #session: PgliteSession;
  /** What this handle listens to, each taken off once. */
  readonly #listening = new Set<() => Promise<void>>();
  #closed = false;

  /**
   * Wraps `db`. When `owned` is false, {@link PgliteClient.close} only cuts
   * this handle off (the harness gives each simulated process its own handle
   * on one shared instance, and a simulated kill closes just that handle).
   */
  constructor(
    db: PGlite,
    opts: { describe: string; owned: boolean; lock?: Deno.FsFile; session?: PgliteSession },
  ) {
    this.#db = db;
    this.describe = opts.describe;
    this.#owned = opts.owned;
    this.#lock = opts.lock;
    // Prepared statements and statistics live in the session: handles on one instance share them.
    this.#session = opts.session ?? new PgliteSession();
  }

  /** True once closed: every later statement throws. */
  get closed(): boolean {
    return this.#closed;
  }

  async query<T = Record<string, unknown>>(
    text: string,
    params: unknown[] = [],
    opts: QueryOptions = {},
  ): Promise<T[]> {
    return (await this.#send<T>(text, params, opts.planEachTime)).rows;
  }

  async run(text: string, params: unknown[] = []): Promise<number> {
    return (await this.#send(text, params)).affectedRows ?? 0;
  }

  /**
   * Runs one statement (prepared once per session when it has parameters), then any analysis due.
   * A prepared statement's `execute` goes through the simple query protocol: one message each
   * way (#11: measured, a journal insert 57 µs against 80 µs through the extended protocol, which
   * parses, binds and describes the `execute` as a statement of its own; create-or-read 120 µs
   * against 213 µs). Its parameters are literals either way, and its rows come back parsed alike.
   */
  async #send<T>(text: string, params: unknown[], planEachTime = false): Promise<Results<T>> {
    this.#assertOpen();
    const name = params.length > 0 && !planEachTime ? await this.#session.nameFor(this.#db, text) : null;
    this.#assertOpen();
    const result = name === null
      ? await this.#db.query<T>(text, params)
      : (await this.#db.exec(`execute ${name}(${params.map(sqlLiteral).join(", ")})`))[0] as Results<T>;
    if (this.#session.countStatement()) {
      // Statistics only steer plans: a failed look or analysis (a closed handle, say) loses nothing.
      await this.#session.maintain(this.#db).catch(() => false);
    }
    return result;
  }

  /** Analyses the runtime's tables now (the session also does so on its own schedule). */
  async analyze(): Promise<void> {
    this.#assertOpen();
    await analyzeTables(this.#db);
  }

  async exec(text: string): Promise<void> {
    this.#assertOpen();
    await this.#db.exec(text);
  }

  /**
   * `LISTEN` on the one session: it hears what this process notifies (a
   * worker and a watcher in one process), never another process (PGlite
   * holds its directory for one process).
   */
  async listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    this.#assertOpen();
    // PGlite sends the name as it is, unquoted, in LISTEN and UNLISTEN: the store's channel is a plain name.
    if (!/^[a-z_][a-z0-9_]*$/.test(channel)) {
      throw new TypeError(
        `Cannot listen as the channel must be a plain lower-case name: current value is ${
          JSON.stringify(channel)
        }`,
      );
    }
    const unlisten = await this.#db.listen(channel, onPayload);
    const off = async () => {
      if (this.#listening.delete(off)) await unlisten();
    };
    this.#listening.add(off);
    return async () => {
      // The database may be closed by then (the watcher outlived its store): nothing is left to unlisten.
      if (!this.#closed) await off();
    };
  }

  /** Closes the handle; one on a shared instance also takes its listeners off, as the instance goes on. */
  async close(): Promise<void> {
    if (this.#closed) return;
    if (!this.#owned) {
      for (const off of [...this.#listening]) await off().catch(() => {});
    }
    this.#closed = true;
    if (this.#owned) await this.#db.close();
    this.#lock?.close();
  }

  #assertOpen(): void {
    if (this.#closed) {
      throw new StoreError("STORE_CLOSED", `The store handle ${this.describe} is closed`);
    }
  }
}

/** How {@link openPglite} waits for a directory another process holds. */
export interface LockWait {
  /** How long to wait for the lock before refusing with `DATA_DIR_LOCKED`; 0 (the default) refuses at once. */
  waitMs?: number;
  /** How often to try again meanwhile. Default {@link LOCK_RETRY_MS}. */
  retryMs?: number;
  /** The time to wait by. Default: the system clock. */
  clock?: Clock;
  /** Told once, when the lock is found held and the wait begins: the holder's pid and the bound. */
  onWait?: (wait: { holder: string; lockPath: string; waitMs: number }) => void;
}

/** How often a waiting {@link openPglite} tries the lock again. */
export const LOCK_RETRY_MS = 250;

/** Options of {@link openPglite}: how it waits for a held directory, and what a new database starts from. */
export interface PgliteOptions extends LockWait {
  /**
   * A data directory to start a new database from instead of running
   * `initdb`: a tarball from {@link pgliteTemplate}, made by the same PGlite
   * version. Used only when the database is new (in memory, or a directory
   * holding none yet); its tables still come from the migrations. Measured
   * here: about 1.1 s for a new in-memory database against 2.3 to 3.5 s
   * with `initdb`, and 1.4 s against 4.3 s for a new directory.
   */
  template?: Blob;
}

/**
 * A new cluster's data directory, as a gzipped tarball (about 4.5 MB), for
 * {@link PgliteOptions.template}: `initdb` once (a few seconds), then every
 * database opened from it skips it. Holds no table of the runtime's.
 * `{ gzip: false }` gives the plain tarball (about 40 MB): a database opens
 * from it about 0.3 s sooner, the unzipping skipped (measured here: 0.8 to
 * 0.95 s against 1.16 to 1.18 s in memory).
 */
export async function pgliteTemplate(opts: { gzip?: boolean } = {}): Promise<Blob> {
  const db = await PGlite.create();
  try {
    return await db.dumpDataDir(opts.gzip === false ? "none" : "gzip");
  } finally {
    await db.close();
  }
}

/** Starts PGlite on `dir` (in memory when undefined), from `template` when the database is new. */
async function startPglite(dir: string | undefined, template: Blob | undefined): Promise<PGlite> {
  const fresh = template !== undefined &&
    (dir === undefined || !(await Deno.stat(`${dir}/PG_VERSION`).then(() => true, () => false)));
  return await PGlite.create(dir, fresh ? { loadDataDir: template } : {});
}

/**
 * Opens (creating if needed, from `opts.template` when given) a PGlite
 * database in `dir`, or in memory when `dir` is undefined, with an exclusive
 * lock on `<dir>.lock`. While another process holds the lock it waits up to
 * `opts.waitMs` for it (trying again every `opts.retryMs`), then refuses with
 * `DATA_DIR_LOCKED` naming the holder's pid.
 */
export async function openPglite(dir?: string, opts: PgliteOptions = {}): Promise<PgliteClient> {
  if (dir === undefined) {
    const db = await startPglite(undefined, opts.template);
    await db.exec(SET_SCHEMA);
    return new PgliteClient(db, { describe: "pglite:memory", owned: true });
  }
  const parent = dir.replace(/\/+$/, "").split("/").slice(0, -1).join("/");
  const lockPath = `${dir.replace(/\/+$/, "")}.lock`;
  let lock: Deno.FsFile;
  try {
    if (parent) await Deno.mkdir(parent, { recursive: true });
    lock = await Deno.open(lockPath, { read: true, write: true, create: true });
  } catch (err) {
    throw new StoreError(
      "DATA_DIR_INVALID",
      `Cannot keep the embedded database in ${dir}: ${(err as Error).message}. ` +
        `Set DATA_DIR to a directory this process can create and write`,
      { cause: err },
    );
  }
  const waitMs = opts.waitMs ?? 0;
  const clock = opts.clock ?? new SystemClock();
  const deadline = clock.now().getTime() + waitMs;
  let holder: string | undefined;
  // Bounded by the deadline: each pass tries the lock once, then sleeps or ends.
  for (;;) {
    let locked = false;
    try {
      locked = await lock.tryLock(true);
    } catch (err) {
      lock.close();
      throw new StoreError("DATA_DIR_LOCKED", `Cannot lock ${lockPath}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    if (locked) break;
    const seen = (await Deno.readTextFile(lockPath).catch(() => "")).trim() || "unknown";
    if (clock.now().getTime() >= deadline) {
      lock.close();
      throw new StoreError(
        "DATA_DIR_LOCKED",
        `The embedded database ${dir} is in use by pid ${seen}${
          waitMs > 0 ? ` (waited ${waitMs / 1000} s for it)` : ""
        }. PGlite allows one process per directory: ` +
          `wait for it to exit, or set DATABASE_URL to share a PostgreSQL server between processes`,
      );
    }
    if (holder === undefined) opts.onWait?.({ holder: seen, lockPath, waitMs });
    holder = seen;
    await clock.sleep(Math.min(opts.retryMs ?? LOCK_RETRY_MS, Math.max(1, deadline - clock.now().getTime())));
  }
  await lock.truncate(0);
  await lock.write(new TextEncoder().encode(`${Deno.pid}\n`));
  try {
    const db = await startPglite(dir, opts.template);
    await db.exec(SET_SCHEMA);
    return new PgliteClient(db, { describe: `pglite:${dir}`, owned: true, lock });
  } catch (err) {
    lock.close();
    // Not DB_UNREACHABLE: an embedded database is never away, and the same directory fails again.
    throw new StoreError(
      "DATA_DIR_INVALID",
      `Cannot open the embedded database ${dir}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
}
