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

import { type Clock, startTimer, SystemClock } from "../clock.ts";
import { MAX_ROW_TOKENS } from "../budget_types.ts";
import { RuntimeError } from "../errors.ts";
import type { SqlClient } from "./driver.ts";
import { queryRows, statement } from "./sql.ts";

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

/** A write a group statement can carry. */
export type GroupedWrite =
  | GroupedJournalIntent
  | GroupedJournalConfirm
  | GroupedEffectIntent
  | GroupedEffectConfirm;

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

interface Pending {
  readonly write: GroupedWrite;
  /** The write sent alone, as the single-row statement: true when its row was written. */
  readonly alone: () => Promise<boolean>;
  readonly resolve: (written: boolean) => void;
  readonly reject: (err: unknown) => void;
}

const IN_RUNNING = (input: string) =>
  `join held on held.run_id = ${input}.run_id and (held.epoch = ${input}.epoch and held.status = 'running') is true`;

const GROUP_WRITE = statement(
  "group-write",
  `with ji_in as (
         select * from unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::int[], $6::text[])
                    as t(run_id, epoch, seq, at, reserve, params)),
       jc_in as (
         select * from unnest($7::text[], $8::int[], $9::int[], $10::text[], $11::text[], $12::text[],
                              $13::int[], $14::int[])
                    as t(run_id, epoch, seq, decision, usage, at, released, spent)),
       ei_in as (
         select * from unnest($15::text[], $16::int[], $17::text[], $18::int[], $19::text[], $20::text[],
                              $21::text[])
                    as t(run_id, epoch, key, seq, tool, args, at)),
       ec_in as (
         select * from unnest($22::text[], $23::int[], $24::text[], $25::text[], $26::text[], $27::text[])
                    as t(run_id, epoch, key, result, remote, at)),
       -- The fence of every row at once: each run row the batch names, locked
       -- for share as the single-row fence locks it (a claim and a write are
       -- serialised), in run id order so two statements never lock in
       -- opposite orders. A row locked after a wait is read as it is now.
       held as (
         select runs.run_id, runs.epoch, runs.status from runs
          where runs.run_id = any($28::text[])
          order by runs.run_id
            for share),
       ji as (
         insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, reserved_tokens, params)
         select ji_in.run_id, ji_in.seq, 'intent', 1, ji_in.epoch, ji_in.at::timestamptz, ji_in.reserve,
                ji_in.params::jsonb
           from ji_in ${IN_RUNNING("ji_in")}
         on conflict do nothing
         returning run_id, seq::text as k, epoch),
       jc as (
         update journal set status = 'confirmed', decision = jc_in.decision::jsonb, usage = jc_in.usage::jsonb,
                confirmed_at = jc_in.at::timestamptz,
                reserved_tokens = greatest(0, journal.reserved_tokens - jc_in.released),
                spent_tokens = least(${MAX_ROW_TOKENS}, journal.spent_tokens::bigint + jc_in.spent)::int
           from jc_in ${IN_RUNNING("jc_in")}
          where journal.run_id = jc_in.run_id and journal.seq = jc_in.seq and journal.status = 'intent'
         returning jc_in.run_id, jc_in.seq::text as k, jc_in.epoch),
       ei as (
         insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
         select ei_in.key, ei_in.run_id, ei_in.seq, ei_in.tool, ei_in.args::jsonb, 'intent', 1, ei_in.epoch,
                ei_in.at::timestamptz
           from ei_in ${IN_RUNNING("ei_in")}
         on conflict do nothing
         returning run_id, idempotency_key as k, epoch),
       ec as (
         update side_effects set status = 'confirmed', result = ec_in.result::jsonb, remote = ec_in.remote,
                confirmed_at = ec_in.at::timestamptz, error = null
           from ec_in ${IN_RUNNING("ec_in")}
          where side_effects.idempotency_key = ec_in.key and side_effects.run_id = ec_in.run_id
            and side_effects.status = 'intent'
         returning ec_in.run_id, ec_in.key as k, ec_in.epoch)
       select 'journal-intent' as kind, run_id, k, epoch from ji
       union all select 'journal-confirm', run_id, k, epoch from jc
       union all select 'effect-intent', run_id, k, epoch from ei
       union all select 'effect-confirm', run_id, k, epoch from ec`,
  // Planned for the batch it carries each time: a generic plan made on small
  // tables could scan runs for the ids (as heartbeat-many's did, plans_test.ts),
  // and planning is paid once for every write the statement carries.
  { planEachTime: true },
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const GROUP_COMMIT_STATEMENTS = [GROUP_WRITE] as const;

/** What identifies a write's row in a batch: its kind, its run, its step or key, and its epoch. */
function identity(w: GroupedWrite): string {
  const row = w.kind === "journal-intent" || w.kind === "journal-confirm" ? String(w.seq) : w.key;
  return `${w.kind}\u0000${w.runId}\u0000${row}\u0000${w.epoch}`;
}

/** The statement's parameters for a batch: four inputs, column by column, and every run it names. */
function batchParams(writes: readonly GroupedWrite[]): unknown[] {
  const ji = writes.filter((w): w is GroupedJournalIntent => w.kind === "journal-intent");
  const jc = writes.filter((w): w is GroupedJournalConfirm => w.kind === "journal-confirm");
  const ei = writes.filter((w): w is GroupedEffectIntent => w.kind === "effect-intent");
  const ec = writes.filter((w): w is GroupedEffectConfirm => w.kind === "effect-confirm");
  return [
    ji.map((w) => w.runId),
    ji.map((w) => w.epoch),
    ji.map((w) => w.seq),
    ji.map((w) => w.at),
    ji.map((w) => w.reserveTokens),
    ji.map((w) => w.params),
    jc.map((w) => w.runId),
    jc.map((w) => w.epoch),
    jc.map((w) => w.seq),
    jc.map((w) => w.decision),
    jc.map((w) => w.usage),
    jc.map((w) => w.at),
    jc.map((w) => w.released),
    jc.map((w) => w.spent),
    ei.map((w) => w.runId),
    ei.map((w) => w.epoch),
    ei.map((w) => w.key),
    ei.map((w) => w.seq),
    ei.map((w) => w.tool),
    ei.map((w) => w.args),
    ei.map((w) => w.at),
    ec.map((w) => w.runId),
    ec.map((w) => w.epoch),
    ec.map((w) => w.key),
    ec.map((w) => w.result),
    ec.map((w) => w.remote),
    ec.map((w) => w.at),
    [...new Set(writes.map((w) => w.runId))],
  ];
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
  /** Statements sent and the writes they carried: what the bench and the tests read. */
  readonly stats = { statements: 0, writes: 0, alone: 0 };

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
    this.stats.statements++;
    this.stats.writes += batch.length;
    if (batch.length === 1) {
      this.stats.alone++;
      await settleAlone(batch[0]);
      return;
    }
    let rows: { kind: string; run_id: string; k: string; epoch: number }[];
    try {
      rows = await queryRows(this.#client, GROUP_WRITE, batchParams(batch.map((p) => p.write)));
    } catch (err) {
      if (!refusedWhole(err)) {
        for (const p of batch) p.reject(err);
        return;
      }
      // Nothing of the batch was written: each write alone meets its own answer.
      await Promise.all(batch.map(settleAlone));
      return;
    }
    const written = new Set(
      rows.map((r) => identityOf(r.kind as GroupedWrite["kind"], r.run_id, r.k, Number(r.epoch))),
    );
    for (const p of batch) p.resolve(written.has(identity(p.write)));
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
