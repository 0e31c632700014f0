/**
 * The store: every SQL statement the runtime runs, by audience. The
 * statements live with the audience they serve, each declared once with its
 * name (`statements.ts` lists them all):
 *
 * - `run_writes.ts`: one run's fenced writes, as a worker decides and acts;
 * - `leases.ts`: creating, claiming, taking, keeping and letting go of runs;
 * - `operators.ts`: the operators' reads and commands, and retention;
 * - `families.ts`: runs that call runs: a child created, a family's spend, a
 *   family member closed, a cancel with its descendants;
 * - `conversations.ts`: a conversation's messages, answers and idle waits;
 * - `signals.ts`: named events sent to a run, and a call's take of one;
 * - `reads.ts`: reads of one run's rows, which every audience makes;
 * - `schedules.ts`: schedules written and listed, and the tickers' reads and ticks;
 * - `versions.ts`: which version of its agent drives each run, and the moves
 *   between versions;
 * - `limits.ts`: limits shared by the fleet: reservations taken under a
 *   key before a request, released after it, waited for;
 * - `schema_check.ts` and `migrate.ts`: the schema.
 *
 * Row types are in `rows.ts`, the fragments statements share (the fence) in
 * `sql.ts`, the driver interface in `driver.ts`. {@link Store} holds the
 * audiences as properties and forwards nothing: a caller calls the audience
 * whose statement it wants (`store.writes.journalConfirm`,
 * `store.reads.getRun`, `store.leases.claimRun`, `store.operators.listRuns`,
 * `store.families.cancel`). The store itself keeps only what is the whole
 * database's: the driver, the schema, and group commit (`grouped`).
 *
 * @module
 */

import SCHEMA_SQL from "../../schema.sql" with { type: "text" };
import type { SqlClient } from "./driver.ts";
import { Conversations } from "./conversations.ts";
export type { SentSignal, SignalRow, Signals, SignalTake } from "./signals.ts";
import { Families } from "./families.ts";
import { ChatChunks } from "./chat_chunks.ts";
import { Forks } from "./forks.ts";
import { GroupCommit, type GroupCommitOptions } from "./group_commit.ts";
import { Leases } from "./leases.ts";
import { Limits } from "./limits.ts";
import { migrate, type MigrationResult } from "./migrate.ts";
import { Operators } from "./operators.ts";
import { StreamChannel } from "./notify.ts";
import { RunReads } from "./reads.ts";
import { RunWrites } from "./run_writes.ts";
import { checkSchema } from "./schema_check.ts";
import { Schedules } from "./schedules.ts";
import { Versions } from "./versions.ts";
import { Signals } from "./signals.ts";

export { SCHEMA_SQL };
export type { QueryOptions, SqlClient } from "./driver.ts";
export * from "./rows.ts";
export { RESOLVE_BATCH_MAX } from "./operators.ts";
export type { Leases } from "./leases.ts";
export type { LimitAsk, LimitKeyView, LimitRefusal, LimitRelease, Limits, LimitTake } from "./limits.ts";
export type { Operators } from "./operators.ts";
export type { KnownVersion, RunToCheck, Versions } from "./versions.ts";
export type { ClaimVersion, TakeVersions, WorkerRow } from "./leases.ts";
export type { RunHistory, RunReads, WatchedRun } from "./reads.ts";
export type { JournalIntent, RunWrites } from "./run_writes.ts";
export type { GroupCommit, GroupCommitOptions, GroupCommitStats } from "./group_commit.ts";
export { GROUP_COMMIT_MS_MAX } from "./group_commit.ts";
export type { ChildRow, Families, FamilyMember, NewChildRun } from "./families.ts";
export type { ChatChunks } from "./chat_chunks.ts";
export type { DryAnswerRow, Forks, ForkWritten, NewDryRun, NewFork } from "./forks.ts";
export { CATCH_UP_RULES, OVERLAP_RULES } from "./schedules.ts";
export type {
  CatchUpRule,
  DueSchedule,
  NewSchedule,
  OverlapRule,
  ScheduledRun,
  ScheduleRow,
  Schedules,
  ScheduleTick,
  ScheduleView,
} from "./schedules.ts";
export { FAMILY_DEPTH_MAX } from "./families.ts";
export type {
  AnswerOutcome,
  Conversations,
  MessageRow,
  MessageWithAnswer,
  SentMessage,
} from "./conversations.ts";

/** Audiences a {@link Store} is given in place of the ones it would build on its driver. */
export interface StoreAudiences {
  /** Reads of one run's rows. */
  reads?: RunReads;
  /** One run's fenced writes; not with `groupCommit`. */
  writes?: RunWrites;
  /** Creating, claiming, taking, keeping and letting go of runs. */
  leases?: Leases;
  /** The operators' reads and commands. */
  operators?: Operators;
  /** Runs that call runs. */
  families?: Families;
  /** The notification channel answers stream on. */
  stream?: StreamChannel;
  /** Conversations: messages, answers, idle waits. */
  conversations?: Conversations;
  /** Schedules: written, listed, paused, and ticked. */
  schedules?: Schedules;
  /** Versions: which version drives each run, and the moves between them. */
  versions?: Versions;
  /** Signals: sent to a run, taken by its calls. */
  signals?: Signals;
  /** Limits shared by the fleet: reservations taken, released, waited for. */
  limits?: Limits;
  /** Forks and dry runs: written, and the original's calls looked up. */
  forks?: Forks;
  /** The chat chunk log: a chat turn's chunks by index. */
  chatChunks?: ChatChunks;
}

/** What a {@link Store} is built with besides its driver. */
export interface StoreOptions extends StoreAudiences {
  /** Group the happy path's writes of the runs sharing the store (group_commit.ts). */
  groupCommit?: GroupCommitOptions;
}

/** Every statement the runtime runs, through one driver. */
export class Store {
  /** The driver underneath. */
  readonly client: SqlClient;
  /** Reads of one run's rows. */
  readonly reads: RunReads;
  /** One run's fenced writes. */
  readonly writes: RunWrites;
  /** Creating, claiming, taking, keeping and letting go of runs. */
  readonly leases: Leases;
  /** The operators' reads and commands. */
  readonly operators: Operators;
  /** Runs that call runs. */
  readonly families: Families;
  /** The notification channel answers stream on (`notify.ts`). */
  readonly stream: StreamChannel;
  /** Conversations: messages, answers, idle waits. */
  readonly conversations: Conversations;
  /** Schedules: written, listed, paused, and ticked. */
  readonly schedules: Schedules;
  /** Versions: which version drives each run, and the moves between them. */
  readonly versions: Versions;
  /** Signals: sent to a run, taken by its calls. */
  readonly signals: Signals;
  /** Limits shared by the fleet: reservations taken, released, waited for (`limits.ts`). */
  readonly limits: Limits;
  /** Forks and dry runs: written, and the original's calls looked up (`forks.ts`). */
  readonly forks: Forks;
  /** The chat chunk log: a chat turn's chunks by index (`chat_chunks.ts`). */
  readonly chatChunks: ChatChunks;

  /**
   * Wraps a driver. With `groupCommit`, the writes of a step's happy path go
   * through one {@link GroupCommit} (group_commit.ts): the writes of the runs
   * that share this store and are ready at the same moment ride one statement.
   * An audience given in `opts` is used in place of the one built on `client`
   * (a test's reads that pause, writes whose heartbeat fails); `writes` and
   * `groupCommit` do not go together, as the group is the writes'.
   */
  constructor(client: SqlClient, opts: StoreOptions = {}) {
    if (opts.writes && opts.groupCommit) {
      throw new TypeError("Store: give writes or groupCommit, not both (the group is built into the writes)");
    }
    this.client = client;
    this.reads = opts.reads ?? new RunReads(client);
    this.writes = opts.writes ?? new RunWrites(client, {
      group: opts.groupCommit ? new GroupCommit(client, opts.groupCommit) : undefined,
    });
    this.leases = opts.leases ?? new Leases(client);
    this.operators = opts.operators ?? new Operators(client);
    this.families = opts.families ?? new Families(client);
    this.stream = opts.stream ?? new StreamChannel(client);
    this.conversations = opts.conversations ?? new Conversations(client);
    this.schedules = opts.schedules ?? new Schedules(client);
    this.versions = opts.versions ?? new Versions(client);
    this.signals = opts.signals ?? new Signals(client);
    this.limits = opts.limits ?? new Limits(client);
    this.forks = opts.forks ?? new Forks(client);
    this.chatChunks = opts.chatChunks ?? new ChatChunks(client);
  }

  /**
   * This store with group commit on (`maxWaitMs` bounds a write's wait), on
   * the same driver; itself when it groups already. What a worker host's
   * runs share when `GROUP_COMMIT_MS` is set. It keeps every audience of
   * this store but the writes, built anew around the group: writes given to
   * this store in place of its own are not carried.
   */
  grouped(opts: GroupCommitOptions): Store {
    if (this.writes.group) return this;
    return this.withAudiences({
      writes: new RunWrites(this.client, { group: new GroupCommit(this.client, opts) }),
    });
  }

  /**
   * This store, on the same driver, with the audiences given in place of its
   * own (a layer around one audience's calls, in a test); the others, its
   * writes' group commit among them, shared with it.
   */
  withAudiences(audiences: StoreAudiences): Store {
    const {
      reads,
      writes,
      leases,
      operators,
      families,
      stream,
      conversations,
      schedules,
      versions,
      signals,
      limits,
      forks,
      chatChunks,
    } = this;
    return new Store(this.client, {
      reads,
      writes,
      leases,
      operators,
      families,
      stream,
      conversations,
      schedules,
      versions,
      signals,
      limits,
      forks,
      chatChunks,
      ...audiences,
    });
  }

  /** Where the data lives, for logs. */
  get describe(): string {
    return this.client.describe;
  }

  /**
   * Brings the tables up to this program's schema version (creating them in
   * an empty database), or refuses with `SCHEMA_NEWER`; see `migrate.ts`.
   * Every process does this at start.
   */
  async migrate(): Promise<MigrationResult> {
    return await migrate(this.client);
  }

  /** The same as {@link Store.migrate}, for callers that only want the tables there. */
  async applySchema(): Promise<void> {
    await this.migrate();
  }

  /**
   * Fails with `SCHEMA_MISSING` when the tables are not there,
   * `SCHEMA_OUTDATED` when they are older than this program (naming the
   * version, or the missing columns), and `SCHEMA_NEWER` when a newer program
   * migrated them: before anything acts on a run.
   */
  async checkSchema(): Promise<void> {
    await checkSchema(this.client);
  }
}
