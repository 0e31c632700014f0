/**
 * Group commit: the fenced writes of different runs that are ready at the
 * same moment go to the database in one statement, so in one commit. A
 * worker host carries many runs whose journal intents and confirms and tool
 * intents and confirms fall within the same millisecond; sent one by one,
 * each costs a statement and a commit of its own.
 *
 * The pattern is the leader/follower one. A write that finds no statement of
 * its group in flight goes out at once (after the current task's other
 * writes have joined it: one microtask), so one run alone never waits. A
 * write that finds one in flight waits for it and goes out, with every write
 * that arrived meanwhile, as soon as that statement returns, or after
 * `maxWaitMs` on a second connection, whichever comes first (at most
 * {@link GROUP_FLUSHES_MAX} statements in flight). A batch that reaches
 * {@link GROUP_SPLIT_AT} writes while a connection is free goes out at once,
 * without waiting for the rest of the task: when a statement returns with
 * many runs' writes, the runs go on in one task, and their next writes,
 * sent as one statement at its end, would leave the database idle while the
 * host works and the host idle while the database does. Split, the two
 * overlap.
 *
 * Each row of the statement is fenced on its own run's epoch inside the
 * statement (the `group_write` function of schema.sql: its `held` CTE locks
 * every run row the batch names, in run id order, `for share`, as the
 * single-row fence does), and each run learns from the statement's
 * `returning` whether its row was written. A write resolves only after the
 * statement that carried it returned, that is committed: a run acts on its
 * write exactly when it would have alone, so every crash point keeps its
 * meaning. A batch of one is sent as the single-row statement it would be
 * without grouping. The function's plan is made once per connection and
 * kept; its settings leave it only lookups by key (`plans_test.ts`).
 *
 * A batch the database refuses as a whole for what one row holds (a data or
 * integrity error, or a deadlock: nothing of it was written) is sent again
 * one write at a time, so only the write that caused it fails, as it would
 * alone. Any other error (the connection went away) is every write's answer:
 * its outcome is unknown, as a single write's would be.
 *
 * @module
 */

import { type Clock, startTimer, SystemClock } from "../base/clock.ts";
import { RuntimeError } from "../base/errors.ts";
import type { SqlClient } from "./driver.ts";
import { queryRows, type Statement, statement } from "./sql.ts";

/** The most writes one statement carries; more wait for the next. */
export const GROUP_BATCH_MAX = 512;
/** The most group statements in flight at once (each holds a connection of the pool while it runs). */
export const GROUP_FLUSHES_MAX = 2;
/**
 * The writes at which a batch goes out before its task ends, while a
 * connection is free. At 64 runs in flight (64 writes a round) it makes two
 * statements of 32 that overlap with the host's work; 16 and 24 gained less
 * (more statements a step), 48 about as much (bench/README.md, "Group
 * commit"). Fewer runs in flight never reach it.
 */
export const GROUP_SPLIT_AT = 32;
/** The longest bound on a write's wait that a setting may give, in milliseconds. */
export const GROUP_COMMIT_MS_MAX = 100;

/** What every grouped write names: the run it writes for, and the epoch its writer holds (its fence). */
export interface GroupedFence {
  /** The run. */
  readonly runId: string;
  /** The epoch the writer holds: the row is written only while the run is `running` under it. */
  readonly epoch: number;
}

/** A fresh journal intent: the plain insert of a step's row at `intent`. */
export interface GroupedJournalIntent extends GroupedFence {
  /** Which write this is. */
  readonly kind: "journal-intent";
  /** The step. */
  readonly seq: number;
  /** `intent_at`, as the timestamp text the statement casts. */
  readonly at: string;
  /** Tokens the request reserves. */
  readonly reserveTokens: number;
  /** The request's parameters as JSON text, or null. */
  readonly params: string | null;
}

/** A journal confirm: the step's decision committed on its `intent` row. */
export interface GroupedJournalConfirm extends GroupedFence {
  /** Which write this is. */
  readonly kind: "journal-confirm";
  /** The step. */
  readonly seq: number;
  /** The decision, as JSON text. */
  readonly decision: string;
  /** The step's token usage, as JSON text. */
  readonly usage: string;
  /** `confirmed_at`, as timestamp text. */
  readonly at: string;
  /** Reserved tokens the answer releases. */
  readonly released: number;
  /** Tokens the answer counts. */
  readonly spent: number;
}

/** A fresh tool intent: the plain insert of a call's row at `intent`. */
export interface GroupedEffectIntent extends GroupedFence {
  /** Which write this is. */
  readonly kind: "effect-intent";
  /** The call's idempotency key. */
  readonly key: string;
  /** The call's seq. */
  readonly seq: number;
  /** The tool. */
  readonly tool: string;
  /** The arguments, as JSON text. */
  readonly args: string;
  /** `intent_at`, as timestamp text. */
  readonly at: string;
}

/** A tool confirm: a call's outcome committed on its `intent` row. */
export interface GroupedEffectConfirm extends GroupedFence {
  /** Which write this is. */
  readonly kind: "effect-confirm";
  /** The call's idempotency key. */
  readonly key: string;
  /** The result, as JSON text. */
  readonly result: string;
  /** `created`, `already_done` or `reconciled`. */
  readonly remote: string;
  /** `confirmed_at`, as timestamp text. */
  readonly at: string;
}

/** A run closed by its worker: the runs row's status, error, output and `updated_at`, fenced as `finish-run`. */
export interface GroupedRunFinish extends GroupedFence {
  /** Which write this is. */
  readonly kind: "run-finish";
  /** `done`, `failed`, `blocked` or `cancelled`. */
  readonly status: string;
  /** The error kept on the run, or null. */
  readonly error: string | null;
  /** `updated_at`, as timestamp text. */
  readonly at: string;
  /** The final answer, or null. */
  readonly output: string | null;
}

/** A write a group statement can carry. */
export type GroupedWrite =
  | GroupedJournalIntent
  | GroupedJournalConfirm
  | GroupedEffectIntent
  | GroupedEffectConfirm
  | GroupedRunFinish;

/** How {@link GroupCommit} batches. */
export interface GroupCommitOptions {
  /**
   * The longest a write waits for the statement ahead of it before it goes
   * out on a connection of its own (`GROUP_COMMIT_MS`). Greater than 0.
   */
  maxWaitMs: number;
  /** Whose time the wait is measured on. Default the system clock. */
  clock?: Clock;
  /** The writes at which a batch goes out before its task ends. Default {@link GROUP_SPLIT_AT}. */
  splitAt?: number;
}

/** What a {@link GroupCommit} has sent so far: what the tests and the benchmark read. */
export interface GroupCommitStats {
  /** Group statements sent: batches of two writes or more. */
  groupStatements: number;
  /** Writes those group statements carried. */
  grouped: number;
  /**
   * Writes a group statement answered as not written: the fence or the row's
   * state refused them inside the statement (a fresh intent whose row was
   * there already is counted too; its upsert follows).
   */
  refused: number;
  /** Writes sent as their single-row statement: a batch of one, or one of a batch refused whole. */
  alone: number;
}

interface Pending {
  readonly write: GroupedWrite;
  /** The write sent alone, as the single-row statement: true when its row was written. */
  readonly alone: () => Promise<boolean>;
  readonly resolve: (written: boolean) => void;
  readonly reject: (err: unknown) => void;
}

/**
 * One kind of write a group statement carries: its input columns, in the
 * order of the `group_write` function's arguments (schema.sql, migration
 * 18), each with its SQL type and how a write gives its value.
 */
interface Part<W extends GroupedWrite> {
  readonly kind: W["kind"];
  readonly columns: Readonly<Record<string, readonly [type: "text" | "int", value: (w: W) => unknown]>>;
}

const part = <W extends GroupedWrite>(p: Part<W>): Part<GroupedWrite> => p as unknown as Part<GroupedWrite>;

const RUN_AND_EPOCH = {
  run_id: ["text", (w: GroupedFence) => w.runId],
  epoch: ["int", (w: GroupedFence) => w.epoch],
} as const;

/** The kinds of write, in the order of the function's arguments. */
export const PARTS: readonly Part<GroupedWrite>[] = [
  part<GroupedJournalIntent>({
    kind: "journal-intent",
    columns: {
      ...RUN_AND_EPOCH,
      seq: ["int", (w) => w.seq],
      at: ["text", (w) => w.at],
      reserve: ["int", (w) => w.reserveTokens],
      params: ["text", (w) => w.params],
    },
  }),
  part<GroupedJournalConfirm>({
    kind: "journal-confirm",
    columns: {
      ...RUN_AND_EPOCH,
      seq: ["int", (w) => w.seq],
      decision: ["text", (w) => w.decision],
      usage: ["text", (w) => w.usage],
      at: ["text", (w) => w.at],
      released: ["int", (w) => w.released],
      spent: ["int", (w) => w.spent],
    },
  }),
  part<GroupedEffectIntent>({
    kind: "effect-intent",
    columns: {
      ...RUN_AND_EPOCH,
      key: ["text", (w) => w.key],
      seq: ["int", (w) => w.seq],
      tool: ["text", (w) => w.tool],
      args: ["text", (w) => w.args],
      at: ["text", (w) => w.at],
    },
  }),
  part<GroupedEffectConfirm>({
    kind: "effect-confirm",
    columns: {
      ...RUN_AND_EPOCH,
      key: ["text", (w) => w.key],
      result: ["text", (w) => w.result],
      remote: ["text", (w) => w.remote],
      at: ["text", (w) => w.at],
    },
  }),
  part<GroupedRunFinish>({
    kind: "run-finish",
    columns: {
      ...RUN_AND_EPOCH,
      status: ["text", (w) => w.status],
      error: ["text", (w) => w.error],
      at: ["text", (w) => w.at],
      output: ["text", (w) => w.output],
    },
  }),
];

/**
 * The group statement: a call of `group_write` (schema.sql, migration 18),
 * whose SQL writes each kind's rows fenced on every run the batch names, and
 * whose settings keep its plan to lookups by key, made once per session. It
 * is prepared like any other statement: its own plan is the function call.
 */
function groupWrite(): Statement<"group-write"> {
  let n = 0;
  const args = PARTS.flatMap((p) => Object.values(p.columns).map(([type]) => `$${++n}::${type}[]`));
  args.push(`$${++n}::text[]`);
  return statement(
    "group-write",
    `select w_kind as kind, w_run as run_id, w_k as k, w_epoch as epoch from group_write(${args.join(", ")})`,
  );
}

/** The group statement. */
const GROUP_WRITE = groupWrite();

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const GROUP_COMMIT_STATEMENTS = [GROUP_WRITE] as const;

/** What identifies a write's row in a batch: its kind, its run, its step or key, and its epoch. */
function identity(w: GroupedWrite): string {
  const row = w.kind === "journal-intent" || w.kind === "journal-confirm"
    ? String(w.seq)
    : w.kind === "run-finish"
    ? ""
    : w.key;
  return `${w.kind}\u0000${w.runId}\u0000${row}\u0000${w.epoch}`;
}

/** The group statement's parameters for a batch: each kind's inputs, column by column (empty for a kind absent), and every run it names. */
function batchParams(writes: readonly GroupedWrite[]): unknown[] {
  const params: unknown[] = [];
  for (const p of PARTS) {
    const mine = writes.filter((w) => w.kind === p.kind);
    for (const [, value] of Object.values(p.columns)) params.push(mine.map(value));
  }
  params.push([...new Set(writes.map((w) => w.runId))]);
  return params;
}

/**
 * True for an error that says the database refused the whole statement and
 * wrote nothing of it, for a reason one row may hold: SQLSTATE classes 22
 * (data), 23 (integrity), 40 (rollback: a deadlock or serialization failure)
 * and 54 (a limit exceeded). Sent again one write at a time, each write
 * meets the answer it would have met alone.
 */
function refusedWhole(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === "string" && /^(22|23|40|54)[0-9A-Z]{3}$/.test(code);
}

/** Validates a group-commit bound: a number of milliseconds in (0, {@link GROUP_COMMIT_MS_MAX}]. */
export function checkGroupCommitMs(ms: number): number {
  if (!Number.isFinite(ms) || ms <= 0 || ms > GROUP_COMMIT_MS_MAX) {
    throw new RuntimeError(
      "HOST_INVALID",
      `Cannot group commits as 'groupCommitMs' must be above 0 and at most ${GROUP_COMMIT_MS_MAX}: ` +
        `current value is ${ms}`,
    );
  }
  return ms;
}

/** Batches the fenced writes given to it into group statements (see the module's documentation). */
export class GroupCommit {
  readonly #client: SqlClient;
  readonly #maxWaitMs: number;
  readonly #clock: Clock;
  readonly #splitAt: number;
  // Bounded: every write here is awaited by a run, and a host holds at most its capacity of runs, each
  // with at most its tool concurrency of writes pending at once.
  #pending: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;
  #cancelWait?: () => void;
  /** Statements sent and the writes they carried. */
  readonly stats: GroupCommitStats = { groupStatements: 0, grouped: 0, refused: 0, alone: 0 };

  /** Batches writes sent through `client`. */
  constructor(client: SqlClient, opts: GroupCommitOptions) {
    this.#client = client;
    this.#maxWaitMs = checkGroupCommitMs(opts.maxWaitMs);
    this.#clock = opts.clock ?? new SystemClock();
    this.#splitAt = opts.splitAt ?? GROUP_SPLIT_AT;
    if (!Number.isInteger(this.#splitAt) || this.#splitAt < 2 || this.#splitAt > GROUP_BATCH_MAX) {
      throw new RuntimeError(
        "HOST_INVALID",
        `Cannot group commits as 'splitAt' must be an integer from 2 to ${GROUP_BATCH_MAX}: ` +
          `current value is ${opts.splitAt}`,
      );
    }
  }

  /** The bound on a write's wait, in milliseconds. */
  get maxWaitMs(): number {
    return this.#maxWaitMs;
  }

  /**
   * Sends `write` with the writes of other runs ready with it, and resolves,
   * once the statement that carried it has returned, with whether its row
   * was written (false: the fence or the row's state refused it; the caller
   * explains, as it would a single write). `alone` sends it as the
   * single-row statement, with the same answer.
   */
  write(write: GroupedWrite, alone: () => Promise<boolean>): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.#pending.push({ write, alone, resolve, reject });
      // A batch large enough goes now, while the rest of this task's writes are still being made.
      if (this.#pending.length >= this.#splitAt && this.#inFlight < GROUP_FLUSHES_MAX) this.#flush();
      else this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#inFlight === 0) {
      // Nothing in flight: go now, with whatever else this task makes ready.
      if (!this.#scheduled) {
        this.#scheduled = true;
        queueMicrotask(() => {
          this.#scheduled = false;
          // Split batches may have taken every connection meanwhile: these ride the next return.
          if (this.#inFlight < GROUP_FLUSHES_MAX) this.#flush();
        });
      }
      return;
    }
    // One in flight: this write rides the next statement, sent when that one returns, or after the bound
    // on a connection of its own while fewer than the most are in flight.
    if (this.#cancelWait === undefined && this.#inFlight < GROUP_FLUSHES_MAX) {
      this.#cancelWait = startTimer(this.#clock, this.#maxWaitMs, () => {
        this.#cancelWait = undefined;
        if (this.#inFlight < GROUP_FLUSHES_MAX) this.#flush();
      });
    }
  }

  /** Sends the pending writes (at most a batch's worth, one per row) as one statement. */
  #flush(): void {
    if (this.#pending.length === 0) return;
    this.#cancelWait?.();
    this.#cancelWait = undefined;
    const batch: Pending[] = [];
    const seen = new Set<string>();
    const later: Pending[] = [];
    for (const p of this.#pending) {
      const id = identity(p.write);
      // The same row twice in one statement could not tell its writers apart: the second waits.
      if (batch.length >= GROUP_BATCH_MAX || seen.has(id)) later.push(p);
      else {
        seen.add(id);
        batch.push(p);
      }
    }
    this.#pending = later;
    this.#inFlight++;
    void this.#send(batch).finally(() => {
      this.#inFlight--;
      if (this.#pending.length > 0) this.#flush();
    });
  }

  async #send(batch: Pending[]): Promise<void> {
    if (batch.length === 1) {
      this.stats.alone++;
      await settleAlone(batch[0]);
      return;
    }
    this.stats.groupStatements++;
    this.stats.grouped += batch.length;
    let rows: { kind: string; run_id: string; k: string; epoch: number }[];
    try {
      rows = await queryRows(this.#client, GROUP_WRITE, batchParams(batch.map((p) => p.write)));
    } catch (err) {
      if (!refusedWhole(err)) {
        for (const p of batch) p.reject(err);
        return;
      }
      // Nothing of the batch was written: each write alone meets its own answer.
      this.stats.alone += batch.length;
      await Promise.all(batch.map(settleAlone));
      return;
    }
    const written = new Set(
      rows.map((r) => identityOf(r.kind as GroupedWrite["kind"], r.run_id, r.k, Number(r.epoch))),
    );
    for (const p of batch) {
      const ok = written.has(identity(p.write));
      if (!ok) this.stats.refused++;
      p.resolve(ok);
    }
  }
}

function identityOf(kind: GroupedWrite["kind"], runId: string, row: string, epoch: number): string {
  return `${kind}\u0000${runId}\u0000${row}\u0000${epoch}`;
}

async function settleAlone(p: Pending): Promise<void> {
  try {
    p.resolve(await p.alone());
  } catch (err) {
    p.reject(err);
  }
}
