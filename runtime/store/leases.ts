/**
 * Leases: how runs come to be held. A run is created (or found), claimed
 * (a compare-and-swap on its epoch, which fences whoever held it before),
 * taken in batches by a worker host, kept by one heartbeat for all of a
 * host's runs, and let go; the `workers` rows say which processes are alive,
 * and which agents they host, for the supervisor and the commands.
 *
 * @module
 */

import { StoreError } from "../base/errors.ts";
import type { SqlClient } from "./driver.ts";
import { readRun } from "./reads.ts";
import type { Fence, NewRun, RunRow, TakenRun } from "./rows.ts";
import { jsonParam, queryRows, RUNNING_AT, runWrite, statement, textParam, ts } from "./sql.ts";
import { CLAIM, FIRST_CLAIM, TAKE_FAMILY, TAKE_RUNS } from "./claims.ts";

// A new pending run ($1 run_id, $2 agent, $3 goal, $4 input, $5 now, $6 budget, $7 model_params,
// $8 a conversation's idle limit, whose goal is its message 0, $9 its labels): the one insert that
// createRun and createOrGetRun share.
const INSERT_RUN_TEXT =
  `insert into runs (run_id, agent, goal, input, budget, model_params, status, epoch, created_at, updated_at,
                    conversation_idle_ms, message_count, labels)
  values ($1, $2, $3, $4::text::jsonb, $6::text::jsonb, $7::text::jsonb, 'pending', 0, $5::timestamptz,
          $5::timestamptz, $8::int, case when $8::int is null then 0 else 1 end, $9::text::jsonb)
  on conflict (run_id) do nothing`;
const INSERT_RUN = statement("insert-run", INSERT_RUN_TEXT);

/** {@link INSERT_RUN}, saying whether it wrote the row and, if not, the epoch its snapshot saw. */
const CREATE_OR_READ = statement(
  "create-or-read",
  `with created as (${INSERT_RUN_TEXT} returning 1)
       select exists (select 1 from created) as created,
              (select epoch from runs where run_id = $1 and not exists (select 1 from created)) as epoch`,
);

// Each renewed run comes back with the version it is to move to, if any
// (move_to: an operator's move, or a newer version's worker's), so its holder
// lets it go at its next decision for a worker of that version.
const HEARTBEAT_MANY = statement(
  "heartbeat-many",
  `with w as (
         insert into workers (name, agents, capacity, started_at, heartbeat_at, take_keys)
         values ($1, $2::text[], $3, $4::timestamptz, $5::timestamptz, $8::text[])
         -- A name is reused by a worker restarted under it (--worker NAME): the row then
         -- describes the process that heartbeats now, its agents included.
         on conflict (name) do update set agents = excluded.agents, capacity = excluded.capacity,
                                          started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                                          take_keys = excluded.take_keys
         returning 1),
       -- The rows locked in run id order first, as every statement that locks several run rows locks
       -- them (the group statement, group_write): locked in the order a scan met them, a heartbeat and
       -- a group statement of the same worker could each hold a row the other waits for (bench:scale
       -- logged "deadlock detected" for heartbeats with grouping on).
       held as (
         select runs.run_id from runs
          where runs.run_id = any($6::text[])
            and ${RUNNING_AT("($7::int[])[array_position($6::text[], runs.run_id)]")}
          order by runs.run_id
            for no key update)
       update runs set heartbeat_at = $5::timestamptz
         from held
        where runs.run_id = held.run_id
          and ${RUNNING_AT("($7::int[])[array_position($6::text[], runs.run_id)]")}
          and exists (select 1 from w)
        returning runs.run_id, runs.move_to`,
  // Once per heartbeat for up to a host's worth of runs: planned for the ids it holds each
  // time, since a generic plan made on a small table scans all of it (plans_test.ts, PostgreSQL).
  { planEachTime: true },
);
const REMOVE_WORKER = statement("remove-worker", `delete from workers where name = $1`);
const RELEASE_OWNER_RUNS = statement(
  "release-owner-runs",
  `update runs set heartbeat_at = null, updated_at = $2::timestamptz
        where owner = $1 and status = 'running'
        returning run_id`,
);
const FROZEN_WORKERS = statement(
  "frozen-workers",
  `select name, heartbeat_at, current_setting('transaction_read_only') = 'on' as read_only
     from workers where name = any($1::text[]) and heartbeat_at < $2::timestamptz
    order by name`,
);
const HOSTED_AGENTS = statement(
  "hosted-agents",
  `select distinct unnest(agents) as agent from workers where heartbeat_at >= $1::timestamptz`,
);

/** A worker's row in `workers`, as its heartbeat writes it. */
export interface WorkerRow {
  /** Its name (`runs.owner` of the runs it holds). */
  name: string;
  /** The agents it hosts, by name. */
  agents: readonly string[];
  /** The runs it may hold at once. */
  capacity: number;
  /** When the process started. */
  startedAt: Date;
  /**
   * The runs it takes, as take keys (`agent@version`, `agent@`: agent/version.ts).
   * Default `agents`: the names, which take a run at whatever version it is.
   */
  takeKeys?: readonly string[];
}

/**
 * The versions a take drives the runs it takes at: `bind` names, for each
 * agent, the version (`agent@version`) a run no worker has taken is started
 * on; `movable` the `agent@version` keys whose agent lets its runs move. Unset:
 * runs keep the version they have, and one never taken stays without one.
 */
export interface TakeVersions {
  /** The version each agent's new runs are started on, as `agent@version`. */
  bind?: readonly string[];
  /** The `agent@version` keys whose runs may move to a newer version. */
  movable?: readonly string[];
}

/** The version a single claim drives a run at (`Leases.claimRun`). */
export interface ClaimVersion {
  /** The version: a run not started yet is started on it; a run at another version moves to it. */
  version: string;
  /** Whether that version lets the runs it starts move to a newer one. */
  mayMove: boolean;
}

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const LEASE_STATEMENTS = [
  INSERT_RUN,
  CREATE_OR_READ,
  FIRST_CLAIM,
  CLAIM,
  TAKE_RUNS,
  TAKE_FAMILY,
  HEARTBEAT_MANY,
  REMOVE_WORKER,
  RELEASE_OWNER_RUNS,
  FROZEN_WORKERS,
  HOSTED_AGENTS,
] as const;

/** The parameters of {@link INSERT_RUN}. */
function newRunParams(run: NewRun, now: Date): unknown[] {
  return [
    run.runId,
    run.agent,
    textParam(run.goal),
    jsonParam(run.input ?? run.goal, "run input"),
    ts(now),
    jsonParam(run.budget ?? null, "run budget"),
    jsonParam(run.modelParams ?? null, "run model parameters"),
    run.conversationIdleMs ?? null,
    run.labels === undefined ? null : jsonParam(run.labels, "run labels"),
  ];
}

/**
 * The row {@link INSERT_RUN} writes, from the values it was given: the JSON
 * columns and the goal as stored (NUL escapes written out), the rest the schema's defaults.
 */
function newRunRow(run: NewRun, now: Date): RunRow {
  return {
    run_id: run.runId,
    agent: run.agent,
    goal: textParam(run.goal)!,
    input: JSON.parse(jsonParam(run.input ?? run.goal, "run input")),
    output: null,
    status: "pending",
    epoch: 0,
    owner: null,
    heartbeat_at: null,
    error: null,
    created_at: now,
    updated_at: now,
    stuck_claims: 0,
    progress_mark: 0,
    progress_step: 0,
    budget: JSON.parse(jsonParam(run.budget ?? null, "run budget")),
    model_params: JSON.parse(jsonParam(run.modelParams ?? null, "run model parameters")),
    wake_at: null,
    conversation_idle_ms: run.conversationIdleMs ?? null,
    message_count: run.conversationIdleMs === undefined ? 0 : 1,
    idle_since: null,
    conversation_ended_at: null,
    signals_sent: 0,
    signal_waits: null,
    signal_waits_epoch: null,
    parent_run_id: null,
    parent_key: null,
    root_run_id: null,
    schedule: null,
    scheduled_at: null,
    agent_version: null,
    may_move: false,
    move_to: null,
    moved_from: null,
    moved_at: null,
    moved_epoch: null,
    move_refused: null,
    labels: run.labels === undefined ? null : { ...run.labels },
    forked_from: null,
    forked_at_seq: null,
    dry_run: false,
    eval_id: null,
  };
}

/** How runs are created, claimed, taken, kept and let go, and which workers are alive. */
export class Leases {
  readonly #client: SqlClient;

  /** Sends its statements through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /** Creates a pending run; false when a run with that id exists already. */
  async createRun(run: NewRun, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, INSERT_RUN, newRunParams(run, now))) === 1;
  }

  /**
   * Creates the run as `pending` unless it exists, and returns it as it is
   * now, with the epoch the claim must start from. A new run costs one
   * statement, and its row is the one the insert wrote ({@link newRunRow}):
   * the statement sends back two values, not the row (#11: on PGlite each
   * returned column is decoded in JavaScript). An existing run costs one read
   * more; its epoch is the one the insert's own statement saw, so two
   * starters of one new run both claim from epoch 0 and exactly one wins (a
   * read after the insert could already see the winner's claim, and take the
   * run over). When another process inserts the same run at the same moment,
   * the statement's snapshot sees neither row, and the read gives the epoch.
   */
  async createOrGetRun(run: NewRun, now: Date): Promise<RunRow> {
    const [seen] = await queryRows<{ created: boolean; epoch: number | null }>(
      this.#client,
      CREATE_OR_READ,
      newRunParams(run, now),
    );
    if (seen?.created) return newRunRow(run, now);
    const row = await readRun(this.#client, run.runId);
    if (!row) throw new StoreError("RUN_MISSING", `Run ${run.runId} could be neither created nor read`);
    return seen?.epoch === null || seen?.epoch === undefined ? row : { ...row, epoch: seen.epoch };
  }

  /**
   * Claims a run (pending, running, or waiting with its wake time come by
   * `now`): a compare-and-swap on the epoch read before. Returns the new
   * epoch and how many claims in a row (this one included) found no progress
   * since the claim before, or undefined when someone else claimed it first
   * or it is closed.
   */
  async claimRun(
    runId: string,
    seenEpoch: number,
    owner: string,
    now: Date,
    version?: ClaimVersion,
  ): Promise<{ epoch: number; stuck_claims: number } | undefined> {
    const v = [version?.version ?? null, version?.mayMove ?? null];
    if (seenEpoch === 0) {
      // A run at epoch 0 was never claimed: every journal, tool-call and
      // approval row is written under a claimed epoch, and only a claim moves
      // the marks, so its progress and marks are 0 and this claim is its first
      // without progress, as the general statement would count (#11: without
      // its two counts). What it writes is known, so nothing is sent back
      // (#11: on PGlite, decoding a returned row is JavaScript work).
      const written = await runWrite(this.#client, FIRST_CLAIM, [runId, owner, ts(now), ...v]);
      return written === 1 ? { epoch: 1, stuck_claims: 1 } : undefined;
    }
    const rows = await queryRows<{ epoch: number; stuck_claims: number }>(this.#client, CLAIM, [
      runId,
      seenEpoch,
      owner,
      ts(now),
      ...v,
    ]);
    return rows[0];
  }

  /**
   * Worker host: takes and claims, in one statement, up to `limit` runs of
   * the given agents that are `pending`, whose lease expired (no heartbeat
   * since `staleBefore`), or that wait on their calls' remotes and whose wake
   * time has come (`wake_at` at or before `now`), those that waited longest
   * first: each gets a new epoch, `owner`, status `running`, a fresh
   * heartbeat and no wake time. A run waiting for a person is never taken. `skip locked` lets racing hosts pass each other
   * instead of queueing, and the epoch bump fences whoever held a run before.
   */
  async takeRuns(
    owner: string,
    agents: readonly string[],
    staleBefore: Date,
    now: Date,
    limit: number,
    versions: TakeVersions = {},
  ): Promise<TakenRun[]> {
    return await queryRows<TakenRun>(this.#client, TAKE_RUNS, [
      owner,
      agents,
      ts(staleBefore),
      ts(now),
      limit,
      null,
      versions.bind ?? null,
      versions.movable ?? null,
    ]);
  }

  /**
   * A host for one run ({@link Leases.takeRuns} limited to a family): up to
   * `limit` takeable runs of `agents` that are `root` or a run under it.
   */
  async takeFamily(
    owner: string,
    agents: readonly string[],
    root: string,
    staleBefore: Date,
    now: Date,
    limit: number,
    versions: TakeVersions = {},
  ): Promise<TakenRun[]> {
    return await queryRows<TakenRun>(this.#client, TAKE_FAMILY, [
      owner,
      agents,
      ts(staleBefore),
      ts(now),
      limit,
      root,
      versions.bind ?? null,
      versions.movable ?? null,
    ]);
  }

  /**
   * Worker host: {@link Leases.takeRuns}, but no more than this host's fair
   * share of each agent's work (the same `take-runs` statement), counted
   * among the workers that can run it: this host and the live workers (a
   * `workers` row that beat since `staleBefore`) hosting that agent. Agents
   * hosted by the same workers are shared as one: for them it takes enough to
   * bring the runs it holds (`capacity - free`) to its part, by capacity, of
   * the runs those workers hold plus the agents' takeable ones. Runs of an
   * agent no live peer hosts it takes up to `free`, as `takeRuns` does; never
   * more than `free` in all.
   */
  async takeShare(take: {
    owner: string;
    agents: readonly string[];
    staleBefore: Date;
    now: Date;
    free: number;
    capacity: number;
    /** The versions it starts and moves runs at (see {@link TakeVersions}). */
    versions?: TakeVersions;
  }): Promise<TakenRun[]> {
    const { owner, agents, staleBefore, now, free, capacity } = take;
    if (!Number.isInteger(free) || !Number.isInteger(capacity) || free < 0 || free > capacity) {
      // An invariant of the caller (the host counts its own slots), not an input.
      throw new RangeError(
        `Cannot take a share as 'free' must be an integer from 0 to 'capacity' (${capacity}): current value is ${free}`,
      );
    }
    return await queryRows<TakenRun>(this.#client, TAKE_RUNS, [
      owner,
      agents,
      ts(staleBefore),
      ts(now),
      free,
      capacity,
      take.versions?.bind ?? null,
      take.versions?.movable ?? null,
    ]);
  }

  /**
   * Worker host: renews, in one statement, the lease of every run it holds
   * (each fenced on its own epoch) and its own row in `workers`. Returns the
   * runs whose lease was renewed; any other was taken over, closed or cancelled.
   */
  async heartbeatMany(worker: WorkerRow, fences: readonly Fence[], now: Date): Promise<string[]> {
    return (await this.beat(worker, fences, now)).map((r) => r.run_id);
  }

  /**
   * {@link Leases.heartbeatMany}, each renewed run with the version it is to
   * move to at its next decision (`move_to`), or null.
   */
  async beat(
    worker: WorkerRow,
    fences: readonly Fence[],
    now: Date,
  ): Promise<{ run_id: string; move_to: string | null }[]> {
    return await queryRows<{ run_id: string; move_to: string | null }>(this.#client, HEARTBEAT_MANY, [
      worker.name,
      worker.agents,
      worker.capacity,
      ts(worker.startedAt),
      ts(now),
      fences.map((f) => f.runId),
      fences.map((f) => f.epoch),
      worker.takeKeys ?? worker.agents,
    ]);
  }

  /** Worker host: removes its row from `workers` as it stops. */
  async removeWorker(name: string): Promise<void> {
    await queryRows(this.#client, REMOVE_WORKER, [name]);
  }

  /**
   * Supervisor: makes the open runs held by a worker it saw die takeable at
   * once (their lease cleared), without waiting out the lease: a reaped
   * process cannot write again. The epoch is left alone; the next taker bumps
   * it. Returns the runs released.
   */
  async releaseRuns(owner: string, now: Date): Promise<string[]> {
    const rows = await queryRows<{ run_id: string }>(this.#client, RELEASE_OWNER_RUNS, [owner, ts(now)]);
    return rows.map((r) => r.run_id).sort();
  }

  /**
   * Supervisor: the workers among `names` whose own heartbeat (their row in
   * `workers`, renewed by every {@link Leases.heartbeatMany}) is older than
   * `staleBefore`, with when it was last renewed: frozen processes. A run's
   * stale lease says nothing about its worker (a run that failed is let go
   * while its worker goes on), and a worker that has not written its row yet
   * holds no run.
   *
   * Throws `DB_READ_ONLY` when the server that answered refuses writes (a
   * standby, or a node being promoted): the workers' heartbeats could not be
   * written there, so their age proves nothing.
   */
  async frozenWorkers(
    names: readonly string[],
    staleBefore: Date,
  ): Promise<{ name: string; heartbeat_at: Date }[]> {
    const rows = await queryRows<{ name: string; heartbeat_at: Date; read_only: boolean }>(
      this.#client,
      FROZEN_WORKERS,
      [names, ts(staleBefore)],
    );
    if (rows.some((r) => r.read_only)) {
      throw new StoreError(
        "DB_READ_ONLY",
        "The database server answering refuses writes (a standby, or a node being promoted): " +
          "workers' heartbeats cannot be judged until the primary takes writes",
      );
    }
    return rows.map(({ name, heartbeat_at }) => ({ name, heartbeat_at }));
  }

  /** The agents hosted by a worker whose heartbeat is newer than `staleBefore`. */
  async hostedAgents(staleBefore: Date): Promise<string[]> {
    const rows = await queryRows<{ agent: string }>(this.#client, HOSTED_AGENTS, [ts(staleBefore)]);
    return rows.map((r) => r.agent).sort();
  }
}
