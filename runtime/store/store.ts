/**
 * The store: every SQL statement the runtime runs, behind one facade. The
 * statements live with the audience they serve, each declared once with its
 * name (`statements.ts` lists them all):
 *
 * - `run_writes.ts`: one run's fenced writes, as a worker decides and acts;
 * - `leases.ts`: creating, claiming, taking, keeping and letting go of runs;
 * - `operators.ts`: the operators' reads and commands, and retention;
 * - `families.ts`: runs that call runs: a child created, a family's spend, a
 *   family member closed, a cancel with its descendants;
 * - `reads.ts`: reads of one run's rows, which every audience makes;
 * - `schema_check.ts` and `migrate.ts`: the schema.
 *
 * Row types are in `rows.ts`, the fragments statements share (the fence) in
 * `sql.ts`, the driver interface in `driver.ts`. {@link Store} keeps the
 * methods callers have always used, each handing over to its audience with
 * the audience's own signature (documented there), and holds the audiences
 * as properties.
 *
 * @module
 */

import SCHEMA_SQL from "../../schema.sql" with { type: "text" };
import type { SqlClient } from "./driver.ts";
import { Conversations } from "./conversations.ts";
import { Families } from "./families.ts";
import { GroupCommit, type GroupCommitOptions } from "./group_commit.ts";
import { Leases } from "./leases.ts";
import { migrate, type MigrationResult } from "./migrate.ts";
import { Operators } from "./operators.ts";
import { StreamChannel } from "./notify.ts";
import { RunReads } from "./reads.ts";
import { RunWrites } from "./run_writes.ts";
import { checkSchema } from "./schema_check.ts";
import type { RunRow } from "./rows.ts";

export { SCHEMA_SQL };
export type { QueryOptions, SqlClient } from "./driver.ts";
export * from "./rows.ts";
export { RESOLVE_BATCH_MAX } from "./operators.ts";
export type { Leases } from "./leases.ts";
export type { Operators } from "./operators.ts";
export type { RunHistory, RunReads, WatchedRun } from "./reads.ts";
export type { JournalIntent, RunWrites } from "./run_writes.ts";
export type { GroupCommit, GroupCommitOptions, GroupCommitStats } from "./group_commit.ts";
export { GROUP_COMMIT_MS_MAX } from "./group_commit.ts";
export type { ChildRow, Families, FamilyMember, NewChildRun } from "./families.ts";
export { FAMILY_DEPTH_MAX } from "./families.ts";
export type {
  AnswerOutcome,
  Conversations,
  MessageRow,
  MessageWithAnswer,
  SentMessage,
} from "./conversations.ts";

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

  /**
   * Wraps a driver. With `groupCommit`, the writes of a step's happy path go
   * through one {@link GroupCommit} (group_commit.ts): the writes of the runs
   * that share this store and are ready at the same moment ride one statement.
   */
  constructor(client: SqlClient, opts: { groupCommit?: GroupCommitOptions } = {}) {
    this.client = client;
    this.reads = new RunReads(client);
    this.writes = new RunWrites(client, {
      group: opts.groupCommit ? new GroupCommit(client, opts.groupCommit) : undefined,
    });
    this.leases = new Leases(client);
    this.operators = new Operators(client);
    this.families = new Families(client);
    this.stream = new StreamChannel(client);
    this.conversations = new Conversations(client);
  }

  /**
   * This store with group commit on (`maxWaitMs` bounds a write's wait), on
   * the same driver; itself when it groups already. What a worker host's
   * runs share when `GROUP_COMMIT_MS` is set.
   */
  grouped(opts: GroupCommitOptions): Store {
    return this.writes.group ? this : new Store(this.client, { groupCommit: opts });
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

  // --- Reads of one run's rows (reads.ts) ---

  /** One run, if it exists. See {@link RunReads.getRun}. */
  getRun(...args: Parameters<RunReads["getRun"]>): ReturnType<RunReads["getRun"]> {
    return this.reads.getRun(...args);
  }

  /**
   * Everything needed to resume: the journal and the tool calls of a run, by `seq`, in one statement. See
   * {@link RunReads.loadHistory}.
   */
  loadHistory(...args: Parameters<RunReads["loadHistory"]>): ReturnType<RunReads["loadHistory"]> {
    return this.reads.loadHistory(...args);
  }

  /** One tool call by its idempotency key, if it exists. See {@link RunReads.getEffect}. */
  getEffect(...args: Parameters<RunReads["getEffect"]>): ReturnType<RunReads["getEffect"]> {
    return this.reads.getEffect(...args);
  }

  /** The approval request of a tool call, if one was made. See {@link RunReads.getApproval}. */
  getApproval(...args: Parameters<RunReads["getApproval"]>): ReturnType<RunReads["getApproval"]> {
    return this.reads.getApproval(...args);
  }

  /** Every approval request of a run, by step. See {@link RunReads.listApprovals}. */
  listApprovals(...args: Parameters<RunReads["listApprovals"]>): ReturnType<RunReads["listApprovals"]> {
    return this.reads.listApprovals(...args);
  }

  // --- One run's fenced writes (run_writes.ts) ---

  /** Refreshes the lease. False: the fence refused it. See {@link RunWrites.heartbeat}. */
  heartbeat(...args: Parameters<RunWrites["heartbeat"]>): ReturnType<RunWrites["heartbeat"]> {
    return this.writes.heartbeat(...args);
  }

  /**
   * Records a model request for step `seq` before it is sent, and returns the row as written. See
   * {@link RunWrites.journalIntentRow}.
   */
  journalIntentRow(
    ...args: Parameters<RunWrites["journalIntentRow"]>
  ): ReturnType<RunWrites["journalIntentRow"]> {
    return this.writes.journalIntentRow(...args);
  }

  /**
   * Records an answer the runtime refused for step `seq`, so a re-ask can say why. See
   * {@link RunWrites.journalReject}.
   */
  journalReject(...args: Parameters<RunWrites["journalReject"]>): ReturnType<RunWrites["journalReject"]> {
    return this.writes.journalReject(...args);
  }

  /** Commits the decision of step `seq`. See {@link RunWrites.journalConfirm}. */
  journalConfirm(...args: Parameters<RunWrites["journalConfirm"]>): ReturnType<RunWrites["journalConfirm"]> {
    return this.writes.journalConfirm(...args);
  }

  /**
   * Records a tool request under its key before it is sent, and returns the row as written. See
   * {@link RunWrites.effectIntentRow}.
   */
  effectIntentRow(
    ...args: Parameters<RunWrites["effectIntentRow"]>
  ): ReturnType<RunWrites["effectIntentRow"]> {
    return this.writes.effectIntentRow(...args);
  }

  /** Commits a tool call's outcome. See {@link RunWrites.effectConfirm}. */
  effectConfirm(...args: Parameters<RunWrites["effectConfirm"]>): ReturnType<RunWrites["effectConfirm"]> {
    return this.writes.effectConfirm(...args);
  }

  /**
   * Marks a call `failed` (a permanent error) or `flagged` (unknown, needs a human). See
   * {@link RunWrites.effectSettle}.
   */
  effectSettle(...args: Parameters<RunWrites["effectSettle"]>): ReturnType<RunWrites["effectSettle"]> {
    return this.writes.effectSettle(...args);
  }

  /**
   * Records a denied call as that tool's result, a `failed` row never sent. See
   * {@link RunWrites.effectDenied}.
   */
  effectDenied(...args: Parameters<RunWrites["effectDenied"]>): ReturnType<RunWrites["effectDenied"]> {
    return this.writes.effectDenied(...args);
  }

  /**
   * Asks a person to approve a call, or finds their answer, in one fenced statement. See
   * {@link RunWrites.requestApproval}.
   */
  requestApproval(
    ...args: Parameters<RunWrites["requestApproval"]>
  ): ReturnType<RunWrites["requestApproval"]> {
    return this.writes.requestApproval(...args);
  }

  /** {@link RunWrites.requestApprovals}. */
  requestApprovals(
    ...args: Parameters<RunWrites["requestApprovals"]>
  ): ReturnType<RunWrites["requestApprovals"]> {
    return this.writes.requestApprovals(...args);
  }

  /**
   * Closes (or blocks) the run this worker holds, with the final answer when it is done. See
   * {@link RunWrites.finishRun}.
   */
  finishRun(...args: Parameters<RunWrites["finishRun"]>): ReturnType<RunWrites["finishRun"]> {
    return this.writes.finishRun(...args);
  }

  /**
   * Lets go of a run this worker holds after an error the loop could not classify. See
   * {@link RunWrites.releaseRun}.
   */
  releaseRun(...args: Parameters<RunWrites["releaseRun"]>): ReturnType<RunWrites["releaseRun"]> {
    return this.writes.releaseRun(...args);
  }

  /**
   * Records that a call's remote accepted the work and will finish it later: the call goes to `waiting`.
   * See {@link RunWrites.effectWaiting}.
   */
  effectWaiting(...args: Parameters<RunWrites["effectWaiting"]>): ReturnType<RunWrites["effectWaiting"]> {
    return this.writes.effectWaiting(...args);
  }

  /**
   * Lets go of the run until its calls are due again (`waiting` with a wake time). See
   * {@link RunWrites.waitRun}.
   */
  waitRun(...args: Parameters<RunWrites["waitRun"]>): ReturnType<RunWrites["waitRun"]> {
    return this.writes.waitRun(...args);
  }

  /** Records a model request that failed as in an outage. See {@link RunWrites.journalFailure}. */
  journalFailure(...args: Parameters<RunWrites["journalFailure"]>): ReturnType<RunWrites["journalFailure"]> {
    return this.writes.journalFailure(...args);
  }

  /** Records a tool request that failed as in an outage. See {@link RunWrites.effectFailure}. */
  effectFailure(...args: Parameters<RunWrites["effectFailure"]>): ReturnType<RunWrites["effectFailure"]> {
    return this.writes.effectFailure(...args);
  }

  /** Lets go of the run until its model may be asked again. See {@link RunWrites.retryRun}. */
  retryRun(...args: Parameters<RunWrites["retryRun"]>): ReturnType<RunWrites["retryRun"]> {
    return this.writes.retryRun(...args);
  }

  /**
   * Explains a refused write: the epoch moved (fenced), the run was closed, or the row was not as expected.
   * See {@link RunWrites.refusal}.
   */
  refusal(...args: Parameters<RunWrites["refusal"]>): ReturnType<RunWrites["refusal"]> {
    return this.writes.refusal(...args);
  }

  // --- Leases (leases.ts) ---

  /** Creates a pending run; false when a run with that id exists already. See {@link Leases.createRun}. */
  createRun(...args: Parameters<Leases["createRun"]>): ReturnType<Leases["createRun"]> {
    return this.leases.createRun(...args);
  }

  /**
   * Creates the run as `pending` unless it exists, and returns it as it is now. See
   * {@link Leases.createOrGetRun}.
   */
  createOrGetRun(...args: Parameters<Leases["createOrGetRun"]>): ReturnType<Leases["createOrGetRun"]> {
    return this.leases.createOrGetRun(...args);
  }

  /** Claims a run: a compare-and-swap on the epoch read before. See {@link Leases.claimRun}. */
  claimRun(...args: Parameters<Leases["claimRun"]>): ReturnType<Leases["claimRun"]> {
    return this.leases.claimRun(...args);
  }

  /** {@link Leases.takeFamily}. */
  takeFamily(...args: Parameters<Leases["takeFamily"]>): ReturnType<Leases["takeFamily"]> {
    return this.leases.takeFamily(...args);
  }

  /**
   * Worker host: takes and claims, in one statement, up to `limit` runs of the given agents. See
   * {@link Leases.takeRuns}.
   */
  takeRuns(...args: Parameters<Leases["takeRuns"]>): ReturnType<Leases["takeRuns"]> {
    return this.leases.takeRuns(...args);
  }

  /**
   * Worker host: renews, in one statement, the lease of every run it holds and its own row. See
   * {@link Leases.heartbeatMany}.
   */
  heartbeatMany(...args: Parameters<Leases["heartbeatMany"]>): ReturnType<Leases["heartbeatMany"]> {
    return this.leases.heartbeatMany(...args);
  }

  /** Worker host: takes and claims its fair share of the takeable runs. See {@link Leases.takeShare}. */
  takeShare(...args: Parameters<Leases["takeShare"]>): ReturnType<Leases["takeShare"]> {
    return this.leases.takeShare(...args);
  }

  /** Worker host: removes its row from `workers` as it stops. See {@link Leases.removeWorker}. */
  removeWorker(...args: Parameters<Leases["removeWorker"]>): ReturnType<Leases["removeWorker"]> {
    return this.leases.removeWorker(...args);
  }

  /**
   * Supervisor: makes the open runs of a worker it saw die takeable at once. See {@link Leases.releaseRuns}.
   */
  releaseRuns(...args: Parameters<Leases["releaseRuns"]>): ReturnType<Leases["releaseRuns"]> {
    return this.leases.releaseRuns(...args);
  }

  /**
   * Supervisor: the workers among `names` whose own heartbeat is older than `staleBefore`. See
   * {@link Leases.frozenWorkers}.
   */
  frozenWorkers(...args: Parameters<Leases["frozenWorkers"]>): ReturnType<Leases["frozenWorkers"]> {
    return this.leases.frozenWorkers(...args);
  }

  /**
   * The agents hosted by a worker whose heartbeat is newer than `staleBefore`. See
   * {@link Leases.hostedAgents}.
   */
  hostedAgents(...args: Parameters<Leases["hostedAgents"]>): ReturnType<Leases["hostedAgents"]> {
    return this.leases.hostedAgents(...args);
  }

  // --- Operators (operators.ts) ---

  /**
   * Runs, newest first, one page at a time, with their counts and the number matching. See
   * {@link Operators.listRuns}.
   */
  listRuns(...args: Parameters<Operators["listRuns"]>): ReturnType<Operators["listRuns"]> {
    return this.operators.listRuns(...args);
  }

  /**
   * Retention: deletes up to `limit` finished runs changed before `before`, with their rows. See
   * {@link Operators.pruneRuns}.
   */
  pruneRuns(...args: Parameters<Operators["pruneRuns"]>): ReturnType<Operators["pruneRuns"]> {
    return this.operators.pruneRuns(...args);
  }

  /** A person answers a pending approval request. See {@link Operators.decideApproval}. */
  decideApproval(...args: Parameters<Operators["decideApproval"]>): ReturnType<Operators["decideApproval"]> {
    return this.operators.decideApproval(...args);
  }

  /** A human settles a `flagged` call of a `blocked` run. See {@link Operators.resolveEffect}. */
  resolveEffect(...args: Parameters<Operators["resolveEffect"]>): ReturnType<Operators["resolveEffect"]> {
    return this.operators.resolveEffect(...args);
  }

  /**
   * The flagged calls of blocked runs matching `filter`, at most `limit`, with how many match. See
   * {@link Operators.flaggedCalls}.
   */
  flaggedCalls(...args: Parameters<Operators["flaggedCalls"]>): ReturnType<Operators["flaggedCalls"]> {
    return this.operators.flaggedCalls(...args);
  }

  /**
   * Settles every flagged call matching `filter` in one statement, when exactly `expect` match. See
   * {@link Operators.resolveEffects}.
   */
  resolveEffects(...args: Parameters<Operators["resolveEffects"]>): ReturnType<Operators["resolveEffects"]> {
    return this.operators.resolveEffects(...args);
  }

  /**
   * Cancels a run that is not closed yet, with its open descendants, and returns it as it is now (undefined
   * when it was closed or missing). See {@link Families.cancel}, which also says which descendants it cancelled.
   */
  async cancelRun(runId: string, reason: string, now: Date): Promise<RunRow | undefined> {
    return (await this.families.cancel(runId, reason, now))?.run;
  }

  /**
   * Reopens a `failed` or `cancelled` run as `pending`, its history kept. See {@link Operators.reopenRun}.
   */
  reopenRun(...args: Parameters<Operators["reopenRun"]>): ReturnType<Operators["reopenRun"]> {
    return this.operators.reopenRun(...args);
  }

  /**
   * Settles from outside a call waiting on its remote, and wakes its run. See {@link Operators.settleCall}.
   */
  settleCall(...args: Parameters<Operators["settleCall"]>): ReturnType<Operators["settleCall"]> {
    return this.operators.settleCall(...args);
  }
}
