/**
 * The embedded driver: PGlite (PostgreSQL compiled to WebAssembly) on a
 * directory, or in memory. Two processes on one PGlite directory silently
 * lose committed rows, so opening a directory takes an exclusive lock on a
 * file beside it and refuses, naming the holder's pid, when it is held. The
 * kernel drops the lock when the holder dies, even by `kill -9`.
 *
 * @module
 */

import { PGlite } from "npm:@electric-sql/pglite@0.5.16";
import { StoreError } from "../errors.ts";
import { DEFAULT_SCHEMA } from "./migrate.ts";
import type { SqlClient } from "./store.ts";

// PGlite has one session: setting search_path once puts every unqualified
// name in the runtime's own schema, as the PostgreSQL driver's connection
// parameter does (the schema itself is created by the first migration).
const SET_SCHEMA = `set search_path to ${DEFAULT_SCHEMA}`;

/** Runs statements on a PGlite instance. */
export class PgliteClient implements SqlClient {
  readonly describe: string;
  readonly #db: PGlite;
  readonly #owned: boolean;
  readonly #lock?: Deno.FsFile;
  #closed = false;

  /**
   * Wraps `db`. When `owned` is false, {@link PgliteClient.close} only cuts
   * this handle off (the harness gives each simulated process its own handle
   * on one shared instance, and a simulated kill closes just that handle).
   */
  constructor(db: PGlite, opts: { describe: string; owned: boolean; lock?: Deno.FsFile }) {
    this.#db = db;
    this.describe = opts.describe;
    this.#owned = opts.owned;
    this.#lock = opts.lock;
  }

  /** True once closed: every later statement throws. */
  get closed(): boolean {
    return this.#closed;
  }

  async query<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
    this.#assertOpen();
    const res = await this.#db.query<T>(text, params);
    return res.rows;
  }

  async exec(text: string): Promise<void> {
    this.#assertOpen();
    await this.#db.exec(text);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
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

/**
 * Opens (creating if needed) a PGlite database in `dir`, or in memory when
 * `dir` is undefined, with an exclusive lock on `<dir>.lock`.
 */
export async function openPglite(dir?: string): Promise<PgliteClient> {
  if (dir === undefined) {
    const db = await PGlite.create();
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
  let locked = false;
  try {
    locked = await lock.tryLock(true);
  } catch (err) {
    lock.close();
    throw new StoreError("DATA_DIR_LOCKED", `Cannot lock ${lockPath}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  if (!locked) {
    lock.close();
    const holder = (await Deno.readTextFile(lockPath).catch(() => "")).trim() || "unknown";
    throw new StoreError(
      "DATA_DIR_LOCKED",
      `The embedded database ${dir} is in use by pid ${holder}. PGlite allows one process per directory: ` +
        `wait for it to exit, or set DATABASE_URL to share a PostgreSQL server between processes`,
    );
  }
  await lock.truncate(0);
  await lock.write(new TextEncoder().encode(`${Deno.pid}\n`));
  try {
    const db = await PGlite.create(dir);
    await db.exec(SET_SCHEMA);
    return new PgliteClient(db, { describe: `pglite:${dir}`, owned: true, lock });
  } catch (err) {
    lock.close();
    throw new StoreError(
      "DB_UNREACHABLE",
      `Cannot open the embedded database ${dir}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
}
