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
 * {@link GROUP_FLUSHES_MAX} statements in flight).
 *
 * Each row of the statement is fenced on its own run's epoch inside the
 * statement (the `held` CTE locks every run row the batch names, in run id
 * order, `for share`, as the single-row fence does), and each run learns from
 * the statement's `returning` whether its row was written. A write resolves
 * only after the statement that carried it returned, that is committed: a
 * run acts on its write exactly when it would have alone, so every crash
 * point keeps its meaning. A batch of one is sent as the single-row
 * statement it would be without grouping.
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
import { MAX_ROW_TOKENS } from "../base/values.ts";
import { RuntimeError } from "../base/errors.ts";
import type { SqlClient } from "./driver.ts";
import { queryRows, type Statement, statement } from "./sql.ts";

/** The most writes one statement carries; more wait for the next. */
export const GROUP_BATCH_MAX = 512;
/** The most group statements in flight at once (each holds a connection of the pool while it runs). */
export const GROUP_FLUSHES_MAX = 2;
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

const IN_RUNNING = (input: string) =>
  `join held on held.run_id = ${input}.run_id and (held.epoch = ${input}.epoch and held.status = 'running') is true`;

/**
 * One kind of write a group statement carries: its input columns, each an
 * `unnest` of one array parameter (the input named `<name>_in`), with its SQL
 * type and how a write gives its value; and the CTE `<name>` that writes its
 * rows fenced on `held`, returning `(run_id, k, epoch)`.
 */
interface Part<W extends GroupedWrite> {
  readonly kind: W["kind"];
  readonly name: string;
  readonly columns: Readonly<Record<string, readonly [type: "text" | "int", value: (w: W) => unknown]>>;
  readonly write: string;
}

const part = <W extends GroupedWrite>(p: Part<W>): Part<GroupedWrite> => p as unknown as Part<GroupedWrite>;

const RUN_AND_EPOCH = {
  run_id: ["text", (w: GroupedFence) => w.runId],
  epoch: ["int", (w: GroupedFence) => w.epoch],
} as const;

const PARTS: readonly Part<GroupedWrite>[] = [
  part<GroupedJournalIntent>({
    kind: "journal-intent",
    name: "ji",
    columns: {
      ...RUN_AND_EPOCH,
      seq: ["int", (w) => w.seq],
      at: ["text", (w) => w.at],
      reserve: ["int", (w) => w.reserveTokens],
      params: ["text", (w) => w.params],
    },
    write: `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, reserved_tokens, params)
         select ji_in.run_id, ji_in.seq, 'intent', 1, ji_in.epoch, ji_in.at::timestamptz, ji_in.reserve,
                ji_in.params::jsonb
           from ji_in ${IN_RUNNING("ji_in")}
         on conflict do nothing
         returning run_id, seq::text as k, epoch`,
  }),
  part<GroupedJournalConfirm>({
    kind: "journal-confirm",
    name: "jc",
    columns: {
      ...RUN_AND_EPOCH,
      seq: ["int", (w) => w.seq],
      decision: ["text", (w) => w.decision],
      usage: ["text", (w) => w.usage],
      at: ["text", (w) => w.at],
      released: ["int", (w) => w.released],
      spent: ["int", (w) => w.spent],
    },
    write:
      `update journal set status = 'confirmed', decision = jc_in.decision::jsonb, usage = jc_in.usage::jsonb,
                confirmed_at = jc_in.at::timestamptz,
                reserved_tokens = greatest(0, journal.reserved_tokens - jc_in.released),
                spent_tokens = least(${MAX_ROW_TOKENS}, journal.spent_tokens::bigint + jc_in.spent)::int
           from jc_in ${IN_RUNNING("jc_in")}
          where journal.run_id = jc_in.run_id and journal.seq = jc_in.seq and journal.status = 'intent'
         returning jc_in.run_id, jc_in.seq::text as k, jc_in.epoch`,
  }),
  part<GroupedEffectIntent>({
    kind: "effect-intent",
    name: "ei",
    columns: {
      ...RUN_AND_EPOCH,
      key: ["text", (w) => w.key],
      seq: ["int", (w) => w.seq],
      tool: ["text", (w) => w.tool],
      args: ["text", (w) => w.args],
      at: ["text", (w) => w.at],
    },
    write:
      `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
         select ei_in.key, ei_in.run_id, ei_in.seq, ei_in.tool, ei_in.args::jsonb, 'intent', 1, ei_in.epoch,
                ei_in.at::timestamptz
           from ei_in ${IN_RUNNING("ei_in")}
         on conflict do nothing
         returning run_id, idempotency_key as k, epoch`,
  }),
  part<GroupedEffectConfirm>({
    kind: "effect-confirm",
    name: "ec",
    columns: {
      ...RUN_AND_EPOCH,
      key: ["text", (w) => w.key],
      result: ["text", (w) => w.result],
      remote: ["text", (w) => w.remote],
      at: ["text", (w) => w.at],
    },
    write: `update side_effects set status = 'confirmed', result = ec_in.result::jsonb, remote = ec_in.remote,
                confirmed_at = ec_in.at::timestamptz, error = null
           from ec_in ${IN_RUNNING("ec_in")}
          where side_effects.idempotency_key = ec_in.key and side_effects.run_id = ec_in.run_id
            and side_effects.status = 'intent'
         returning ec_in.run_id, ec_in.key as k, ec_in.epoch`,
  }),
  // A run's close updates the row `held` locked for share: the lock is this
  // transaction's, so it is raised, not waited for. Every other write of the
  // statement was fenced on the row as it was before (one snapshot): a run
  // closes only once its own writes have returned, so none of them rides the
  // statement that closes it.
  part<GroupedRunFinish>({
    kind: "run-finish",
    name: "rf",
    columns: {
      ...RUN_AND_EPOCH,
      status: ["text", (w) => w.status],
      error: ["text", (w) => w.error],
      at: ["text", (w) => w.at],
      output: ["text", (w) => w.output],
    },
    write: `update runs set status = rf_in.status, error = rf_in.error, updated_at = rf_in.at::timestamptz,
                output = rf_in.output
           from rf_in ${IN_RUNNING("rf_in")}
          where runs.run_id = rf_in.run_id
         returning rf_in.run_id, '' as k, rf_in.epoch`,
  }),
];

/**
 * The group statement for the kinds of write in `mask` (bit i: `PARTS[i]`):
 * only those kinds' inputs and writes, so a batch of one kind is planned as
 * a statement of one write, not five (planned each time, the absent ones cost
 * 1.1 ms of a 2.4 ms statement of 16 intents, measured in bench/README.md).
 */
function groupWrite(mask: number): Statement<"group-write"> {
  const parts = PARTS.filter((_, i) => (mask & (1 << i)) !== 0);
  let n = 0;
  const inputs = parts.map((p) =>
    `${p.name}_in as (
         select * from unnest(${Object.values(p.columns).map(([type]) => `$${++n}::${type}[]`).join(", ")})
                    as t(${Object.keys(p.columns).join(", ")}))`
  );
  return statement(
    "group-write",
    `with ${inputs.join(",\n       ")},
       -- The fence of every row at once: each run row the batch names, locked
       -- for share as the single-row fence locks it (a claim and a write are
       -- serialised), in run id order so two statements never lock in
       -- opposite orders. A row locked after a wait is read as it is now.
       held as (
         select runs.run_id, runs.epoch, runs.status from runs
          where runs.run_id = any($${++n}::text[])
          order by runs.run_id
            for share),
       ${parts.map((p) => `${p.name} as (\n         ${p.write})`).join(",\n       ")}
       ${
      parts.map((p) => `select '${p.kind}' as kind, run_id, k, epoch from ${p.name}`).join(
        "\n       union all ",
      )
    }`,
    // Planned for the batch it carries each time. A generic plan would save
    // about 1 ms a statement (measured: 64 runs in flight, 3,820 steps/s
    // against 3,394), but made on small tables it seq-scans runs for the ids,
    // and keeps doing so as they grow: 9,008 rows a statement with 9,000 runs
    // (plans_test.ts shows it). Planning is paid once for every write carried.
    { planEachTime: true },
  );
}

/** The group statement for every combination of kinds, by mask (index 0, no kind, is unused). */
const GROUP_WRITES: readonly Statement<"group-write">[] = Object.freeze(
  Array.from({ length: 1 << PARTS.length }, (_, mask) => groupWrite(mask || 1)),
);

/** The statement carrying every kind, as the catalogue in `statements.ts` lists it. */
const GROUP_WRITE = GROUP_WRITES[GROUP_WRITES.length - 1];

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

/** The statement for a batch and its parameters: each kind's inputs, column by column, and every run it names. */
function batchStatement(writes: readonly GroupedWrite[]): { text: Statement; params: unknown[] } {
  let mask = 0;
  const params: unknown[] = [];
  for (const [i, p] of PARTS.entries()) {
    const mine = writes.filter((w) => w.kind === p.kind);
    if (mine.length === 0) continue;
    mask |= 1 << i;
    for (const [, value] of Object.values(p.columns)) params.push(mine.map(value));
  }
  params.push([...new Set(writes.map((w) => w.runId))]);
  return { text: GROUP_WRITES[mask], params };
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
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#inFlight === 0) {
      // Nothing in flight: go now, with whatever else this task makes ready.
      if (!this.#scheduled) {
        this.#scheduled = true;
        queueMicrotask(() => {
          this.#scheduled = false;
          this.#flush();
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
      const { text, params } = batchStatement(batch.map((p) => p.write));
      rows = await queryRows(this.#client, text, params);
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
