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
import { CLAIMABLE_AT, jsonParam, queryRows, RUNNING_AT, runWrite, statement, textParam, ts } from "./sql.ts";

// A run's progress: confirmed decisions plus settled tool calls, the answers
// of a call's remote that said its job is not done yet (a waiting call counts
// the accepted answers it got: its polls, plus one once the last poll was
// answered), and the failed requests a worker lived to record (an outage
// ridden out: `failures`), so a run woken again and again while a job runs or
// a remote is down is not taken for stuck, and one whose worker dies at every
// request is. Every claim compares it with the mark the claim before left, to
// count claims that found no progress (a run whose workers keep dying is
// stopped at a bound).
const progressOf = (runId: string) =>
  `((select coalesce(sum(j.failures + case j.status when 'confirmed' then 1 else 0 end), 0)
       from journal j where j.run_id = ${runId})
  + (select coalesce(sum(e.failures + case e.status when 'intent' then e.polls when 'waiting' then e.polls + 1
                                                      else 1 end), 0)
       from side_effects e where e.run_id = ${runId}))::int`;

// A claim's marks, from the progress `source.progress` counted: one more claim
// without progress if it matches the mark the claim before left, else the first.
// The error a worker left on the running run (releaseRun) is kept while claims
// find no progress, so the bound on them can name it, and cleared by progress.
const claimMarks = (source: string) =>
  `stuck_claims = case when ${source}.progress = runs.progress_mark then runs.stuck_claims + 1 else 1 end,
       error = case when ${source}.progress = runs.progress_mark then runs.error end,
       progress_mark = ${source}.progress`;

// A new pending run ($1 run_id, $2 agent, $3 goal, $4 input, $5 now, $6 budget, $7 model_params,
// $8 a conversation's idle limit, whose goal is its message 0): the one insert that createRun and
// createOrGetRun share.
const INSERT_RUN_TEXT =
  `insert into runs (run_id, agent, goal, input, budget, model_params, status, epoch, created_at, updated_at,
                    conversation_idle_ms, message_count)
  values ($1, $2, $3, $4::text::jsonb, $6::text::jsonb, $7::text::jsonb, 'pending', 0, $5::timestamptz,
          $5::timestamptz, $8::int, case when $8::int is null then 0 else 1 end)
  on conflict (run_id) do nothing`;
const INSERT_RUN = statement("insert-run", INSERT_RUN_TEXT);

/** {@link INSERT_RUN}, saying whether it wrote the row and, if not, the epoch its snapshot saw. */
const CREATE_OR_READ = statement(
  "create-or-read",
  `with created as (${INSERT_RUN_TEXT} returning 1)
       select exists (select 1 from created) as created,
              (select epoch from runs where run_id = $1 and not exists (select 1 from created)) as epoch`,
);

// A claim from epoch 0: the run was never claimed, so its progress and marks are 0 (see claimRun).
const FIRST_CLAIM = statement(
  "first-claim",
  `update runs set epoch = 1, owner = $2, status = 'running',
                heartbeat_at = $3::timestamptz, updated_at = $3::timestamptz,
                stuck_claims = 1, progress_mark = 0
          where run_id = $1 and ${CLAIMABLE_AT("0")}`,
);
// The run's progress is counted once, in `p` (#11: set as two columns, it was
// counted twice); same snapshot, same values. A run waiting on its calls'
// remotes may be claimed once its wake time has come ($4, the claim's now).
const CLAIM = statement(
  "claim",
  `update runs set epoch = epoch + 1, owner = $3, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz, wake_at = null, idle_since = null,
              ${claimMarks("p")}
         from (select ${progressOf("$1")} as progress) p
        where run_id = $1 and ${CLAIMABLE_AT("$2", "$4::timestamptz")}
        returning epoch, stuck_claims`,
);
// A run whose claims keep finding no progress waits longer each time ($4 the take's now).
const NOT_BACKING_OFF = `(stuck_claims < 2
                 or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')`;
// What makes a run takeable, in the two kinds the take picks (and the fair
// share counts): open (pending, or running with its lease expired before $3)
// and woken (waiting on its calls' remotes, its wake time come by $4), both of
// one of the agents `agents` (a text[] expression) and not backing off.
const OPEN_TAKEABLE = (agents: string) =>
  `status in ('pending', 'running') and agent = any(${agents})
                and (heartbeat_at is null or heartbeat_at < $3::timestamptz)
                and ${NOT_BACKING_OFF}`;
const WOKEN_TAKEABLE = (agents: string) =>
  `status = 'waiting' and wake_at <= $4::timestamptz and agent = any(${agents})
                and ${NOT_BACKING_OFF}`;
// The take. Up to $5 runs (the free slots) of the agents $2, and with $6
// (this host's capacity) no more than its fair share of each agent's work,
// counted among the workers that can run it:
//
// - An agent's hosts are this host and the live workers whose `workers` row
//   (beat since $3) names the agent. `pools` groups this host's agents by
//   those peers: agents hosted by the same workers are one pool, divided
//   together (with one pool, as when every worker hosts the same agents, this
//   is one share over all of them). A worker that cannot run an agent counts
//   for no part of its runs (#34 F3: counted, it halved the part of a host
//   that alone could run them, and the other half stayed pending beside that
//   host's free slots).
// - A pool's share is enough to bring the runs this host holds to its part,
//   by capacity, of what the pool's hosts hold (runs of any agent: a slot is
//   taken whatever runs in it) plus the pool's takeable runs, at most $5:
//     share = ceil((held by the pool's hosts + takeable) * capacity / their capacity) - held by this host
//   The takeable runs are counted only up to the pool's free slots (past that
//   every host fills up), each kind through its index in the pick's order
//   (unordered, the planner read the whole backlog to count a few: 3,000
//   pending runs for 12, plans_test.ts); a peer's held runs through the
//   owner index, once per peer. Taking again with nothing changed takes
//   nothing, so a host woken by every run it ends cannot nibble away its
//   peers' part. The hosts of a pool count the same runs (its agents are
//   those hosted by exactly these workers), so their parts add up to every
//   takeable run: once each has polled, none is left while one of them has a
//   free slot.
// - A pool with no peer, and every pool when $6 is null (`takeRuns`), takes
//   up to $5 and skips the counts: a scalar subquery in a `case` branch runs
//   only when that branch is chosen, so a host alone pays one read of the
//   small `workers` table.
//
// Each pool with a share picks its own runs (a lateral subquery: the runs of
// a pool shared with peers cannot fill the window of a run this host alone
// can take), and the longest waiting of all pools are taken, up to $5. In a
// pool the share limits only the merge: each branch keeps `limit $5`, a
// number its plan is made for (as `limit (select ...)` the planner must
// guess, and with 3,000 runs pending it sorted them all instead of reading
// the take-order index: plans_test.ts). So a fair take may hold locks on up
// to $5 runs of each kind in each pool that it does not take, until the
// statement ends; a racing take skips them for that moment and finds them at
// its next poll. One pool (every worker hosting the same agents) walks the
// indexes once, as a take over all its agents did. With several pools each
// walks them: one index serves every agent, so a pool's walk passes the runs
// of the host's other pools that waited longer, as any take passes those of
// agents its host does not run (plans_test.ts allows for them).
// The pick is a materialized CTE: as an `in (subquery)` the planner may run
// the limited subquery more than once and take more than `limit` runs.
// Each taken run's progress is counted once (#11: it was counted twice, once per column
// set), and not at all for a run at epoch 0: never claimed, it has none (see claimRun).
// Runs are taken in the order they have waited: a pending run since it was
// created, an abandoned one since its last heartbeat (both through the
// take-order index), a woken one since its wake time (through the wake-order
// index). Each kind is picked and locked in its own branch, up to the limit,
// and the longest waiting of both are taken: a lock cannot be taken across a
// `union`, so each branch locks its own, and the few it picked and the
// merge left (at most the limit) stay locked until the statement ends,
// skipped by a racing take meanwhile.
const TAKE_RUNS = statement(
  "take-runs",
  `with peers as materialized (
         select name, capacity, agents,
                (select count(*) from runs
                  where status = 'running' and owner = workers.name and heartbeat_at >= $3::timestamptz)::int as held
           from workers
          where $6::int is not null and name <> $1 and heartbeat_at >= $3::timestamptz and agents && $2::text[]),
       pools as materialized (
         select grouped.agents, grouped.peer_names,
                $6::int + (select coalesce(sum(peers.capacity), 0) from peers
                            where peers.name = any(grouped.peer_names))::int as capacity_all,
                ($6::int - $5::int) + (select coalesce(sum(peers.held), 0) from peers
                                        where peers.name = any(grouped.peer_names))::int as held_all
           from (select array_agg(agent order by agent) as agents, peer_names
                   from (select mine.agent,
                                array(select name from peers where mine.agent = any(peers.agents) order by name)
                                  as peer_names
                           from unnest($2::text[]) as mine(agent)) hosted
                  group by peer_names) grouped),
       shares as materialized (
         select pools.agents,
                case when cardinality(pools.peer_names) = 0 then $5::int
                     else (select least($5::int, greatest(0,
                                  ceil((pools.held_all + takeable.n)::numeric * $6::int / pools.capacity_all)::int
                                  - ($6::int - $5::int)))
                             from (select count(*)::int as n from (
                                     (select 1 from runs where ${OPEN_TAKEABLE("pools.agents")}
                                       order by coalesce(heartbeat_at, created_at), run_id
                                       limit greatest(0, pools.capacity_all - pools.held_all))
                                     union all
                                     (select 1 from runs where ${WOKEN_TAKEABLE("pools.agents")}
                                       order by wake_at, run_id
                                       limit greatest(0, pools.capacity_all - pools.held_all))
                                     limit greatest(0, pools.capacity_all - pools.held_all)) t) takeable)
                end as n
           from pools),
       picked as materialized (
         select pool_runs.* from shares cross join lateral (
           select * from (
             select * from (
               select run_id, epoch as picked_epoch, owner as previous_owner,
                      heartbeat_at as previous_heartbeat_at, coalesce(heartbeat_at, created_at) as waited_since
                 from runs
                where ${OPEN_TAKEABLE("shares.agents")}
                order by coalesce(heartbeat_at, created_at), run_id
                limit $5
                  for update skip locked) open_runs
             union all
             select * from (
               select run_id, epoch, owner, heartbeat_at, wake_at
                 from runs
                where ${WOKEN_TAKEABLE("shares.agents")}
                order by wake_at, run_id
                limit $5
                  for update skip locked) woken_runs) candidates
            order by waited_since, run_id
            limit shares.n) pool_runs
          where shares.n > 0
          order by pool_runs.waited_since, pool_runs.run_id
          limit $5),
       counted as (
         select picked.*, case when picked_epoch = 0 then 0 else ${
    progressOf("picked.run_id")
  } end as progress
           from picked)
       update runs set epoch = runs.epoch + 1, owner = $1, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz, wake_at = null, idle_since = null,
              ${claimMarks("counted")}
         from counted
        where runs.run_id = counted.run_id
        returning runs.*, counted.previous_owner, counted.previous_heartbeat_at`,
);
const HEARTBEAT_MANY = statement(
  "heartbeat-many",
  `with w as (
         insert into workers (name, agents, capacity, started_at, heartbeat_at)
         values ($1, $2::text[], $3, $4::timestamptz, $5::timestamptz)
         -- A name is reused by a worker restarted under it (--worker NAME): the row then
         -- describes the process that heartbeats now, its agents included.
         on conflict (name) do update set agents = excluded.agents, capacity = excluded.capacity,
                                          started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at
         returning 1)
       update runs set heartbeat_at = $5::timestamptz
        where run_id = any($6::text[])
          and ${RUNNING_AT("($7::int[])[array_position($6::text[], runs.run_id)]")}
          and exists (select 1 from w)
        returning runs.run_id`,
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

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const LEASE_STATEMENTS = [
  INSERT_RUN,
  CREATE_OR_READ,
  FIRST_CLAIM,
  CLAIM,
  TAKE_RUNS,
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
    budget: JSON.parse(jsonParam(run.budget ?? null, "run budget")),
    model_params: JSON.parse(jsonParam(run.modelParams ?? null, "run model parameters")),
    wake_at: null,
    conversation_idle_ms: run.conversationIdleMs ?? null,
    message_count: run.conversationIdleMs === undefined ? 0 : 1,
    idle_since: null,
    conversation_ended_at: null,
    parent_run_id: null,
    parent_key: null,
    root_run_id: null,
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
  ): Promise<{ epoch: number; stuck_claims: number } | undefined> {
    if (seenEpoch === 0) {
      // A run at epoch 0 was never claimed: every journal, tool-call and
      // approval row is written under a claimed epoch, and only a claim moves
      // the marks, so its progress and marks are 0 and this claim is its first
      // without progress, as the general statement would count (#11: without
      // its two counts). What it writes is known, so nothing is sent back
      // (#11: on PGlite, decoding a returned row is JavaScript work).
      const written = await runWrite(this.#client, FIRST_CLAIM, [runId, owner, ts(now)]);
      return written === 1 ? { epoch: 1, stuck_claims: 1 } : undefined;
    }
    const rows = await queryRows<{ epoch: number; stuck_claims: number }>(this.#client, CLAIM, [
      runId,
      seenEpoch,
      owner,
      ts(now),
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
  ): Promise<TakenRun[]> {
    return await queryRows<TakenRun>(this.#client, TAKE_RUNS, [
      owner,
      agents,
      ts(staleBefore),
      ts(now),
      limit,
      null,
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
    ]);
  }

  /**
   * Worker host: renews, in one statement, the lease of every run it holds
   * (each fenced on its own epoch) and its own row in `workers`. Returns the
   * runs whose lease was renewed; any other was taken over, closed or cancelled.
   */
  async heartbeatMany(
    worker: { name: string; agents: readonly string[]; capacity: number; startedAt: Date },
    fences: readonly Fence[],
    now: Date,
  ): Promise<string[]> {
    const rows = await queryRows<{ run_id: string }>(this.#client, HEARTBEAT_MANY, [
      worker.name,
      worker.agents,
      worker.capacity,
      ts(worker.startedAt),
      ts(now),
      fences.map((f) => f.runId),
      fences.map((f) => f.epoch),
    ]);
    return rows.map((r) => r.run_id);
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
