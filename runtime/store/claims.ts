/**
 * Claims and takes: the statements that make a worker a run's holder. A claim
 * is a compare-and-swap on one run's epoch; a take claims many at once for a
 * worker host (its fair share of each agent's work), or the runs of one family
 * for a host that exists for one run (`client.run`). Each counts the run's
 * progress, so the runs whose workers keep dying are stopped at a bound.
 * `leases.ts` sends them.
 *
 * @module
 */

import { CLAIMABLE_AT, statement } from "./sql.ts";

// A run's progress mark, read at every claim and compared with the mark the
// claim before left, to count claims that found no progress (a run whose
// workers keep dying is stopped at a bound). Progress is a decision
// confirmed, a tool call settled, an answer of a call's remote that said its
// job is not done yet (a poll), and a failed request a worker lived to
// record (an outage ridden out: `failures`), so a run woken again and again
// while a job runs or a remote is down is not taken for stuck, and one whose
// worker dies at every request is.
//
// The mark is two numbers that move only with progress, read through the
// keys of the run's newest rows, so a claim costs the same at step 10 and at
// step 10,000 (it once summed every row of the run: #39):
//
// - `mark`, one past the seq of the run's last confirmed decision (0 for
//   none): a decision is confirmed only after the one before it and its
//   calls, so it is one of the run's last two rows, read by the journal's
//   key backwards (a filter on status there made the planner, without
//   statistics, read all the run's rows and sort them);
// - `step`, the progress of the rows that may still change: failures of the
//   decision being asked for (the rows after the last confirmed one), and of
//   the last decision's calls (its seq and on) their failures and polls,
//   plus 1 for a call whose last poll was answered (waiting) and 2 for one
//   settled. Rows before the last decision are final (its calls were
//   settled before it was decided), and each of these counts only grows
//   while `mark` stays (a poll sent moves a call from waiting, polls p + 1,
//   to intent with p + 1 polls), so equal marks mean nothing moved.
//
// Each read is ordered by the key and limited (the last decision's calls are
// at most 64, agent.ts's bound on maxCallsPerStep), so it is a walk of the
// key whatever the statistics say: without the limits, a run that is most of
// its tables (one long run on a laptop's PGlite) had its rows read whole.
// `runId` is an expression naming the run; with `when` false, nothing is
// read. Each `offset 0` keeps a subquery one, counted once: pulled up into
// the update, each use of its columns was a count of its own.
const progressOf = (runId: string, when = "true") =>
  `select f.c + 1 as mark_now,
              least(2147483647,
                (select coalesce(sum(a.failures), 0) from (select j.failures from journal j
                   where j.run_id = ${runId} and j.seq > f.c order by j.seq limit 2) a)
              + (select coalesce(sum(e.failures + e.polls
                                     + case e.status when 'intent' then 0 when 'waiting' then 1 else 2 end), 0)
                   from (select b.failures, b.polls, b.status from side_effects b
                          where b.run_id = ${runId} and b.seq >= f.c order by b.seq limit 64) e))::int as step_now
         from (select coalesce((select l.seq from (select j.seq, j.status from journal j where j.run_id = ${runId}
                                                    order by j.seq desc limit 2) l
                                 where l.status = 'confirmed' order by l.seq desc limit 1), -1) as c
               offset 0) f
        where ${when}
       offset 0`;

// A claim's marks, from the progress `source` counted (progressOf's columns): one more claim
// without progress if both match the marks the claim before left, else the first.
// The error a worker left on the running run (releaseRun) is kept while claims
// find no progress, so the bound on them can name it, and cleared by progress.
const claimMarks = (source: string) => {
  const same = `(${source}.mark_now = runs.progress_mark and ${source}.step_now = runs.progress_step)`;
  return `stuck_claims = case when ${same} then runs.stuck_claims + 1 else 1 end,
       error = case when ${same} then runs.error end,
       progress_mark = ${source}.mark_now, progress_step = ${source}.step_now`;
};

// A claim's record of the version it drives the run at (`version`, a text
// expression; null keeps the run's): a run no worker has taken is started on
// it (`may_move` from its agent's policy, `mayMove`); a run at another version
// has moved to it (moved_from, moved_at at `now`, moved_epoch the claim's, a move asked for done, an
// earlier refusal forgotten). On the right of `set`, columns are the old row's.
const VERSION_AT_CLAIM = (version: string, mayMove: string, now: string) => {
  const moved = `(runs.agent_version is not null and ${version} is not null
                  and ${version} is distinct from runs.agent_version)`;
  return `agent_version = coalesce(${version}, runs.agent_version),
              may_move = case when runs.agent_version is null and ${version} is not null
                              then coalesce(${mayMove}, false) else runs.may_move end,
              moved_from = case when ${moved} then runs.agent_version else runs.moved_from end,
              moved_at = case when ${moved} then ${now} else runs.moved_at end,
              moved_epoch = case when ${moved} then runs.epoch + 1 else runs.moved_epoch end,
              move_refused = case when ${moved} then null else runs.move_refused end,
              move_to = case when runs.move_to = ${version} then null else runs.move_to end`;
};

// A single claim writes down the version it claims at (store/versions.ts), if new, in the same
// statement: the order versions were first seen in is known without a process hosting them.
const SEEN_AT_CLAIM = (version: string, now: string) =>
  `with seen as (insert into agent_versions (agent, version, first_seen_at)
                 select agent, ${version}, ${now} from runs where run_id = $1 and ${version} is not null
                 on conflict (agent, version) do nothing)`;

// A claim from epoch 0: the run was never claimed, so its progress and marks are 0 (see claimRun).
// $4 the version it is claimed at (null: as it is), $5 whether that version lets it move.
export const FIRST_CLAIM = statement(
  "first-claim",
  `${SEEN_AT_CLAIM("$4::text", "$3::timestamptz")}
       update runs set epoch = 1, owner = $2, status = 'running',
                heartbeat_at = $3::timestamptz, updated_at = $3::timestamptz,
                stuck_claims = 1, progress_mark = 0, progress_step = 0,
                ${VERSION_AT_CLAIM("$4::text", "$5::boolean", "$3::timestamptz")}
          where run_id = $1 and ${CLAIMABLE_AT("0")}`,
);
// The run's progress is counted once, in `p` (#11: set as two columns, it was
// counted twice; #39: pulled up, once per use); same snapshot, same values. A run waiting on its calls'
// remotes may be claimed once its wake time has come ($4, the claim's now).
// $5 the version it is claimed at (null: as it is), $6 whether that version lets it move.
export const CLAIM = statement(
  "claim",
  `${SEEN_AT_CLAIM("$5::text", "$4::timestamptz")}
       update runs set epoch = epoch + 1, owner = $3, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz, wake_at = null, idle_since = null,
              ${claimMarks("p")},
              ${VERSION_AT_CLAIM("$5::text", "$6::boolean", "$4::timestamptz")}
         from (${progressOf("$1")}) p
        where run_id = $1 and ${CLAIMABLE_AT("$2", "$4::timestamptz")}
        returning epoch, stuck_claims`,
);
// A run whose claims keep finding no progress waits longer each time ($4 the take's now).
const NOT_BACKING_OFF = `(stuck_claims < 2
                 or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')`;
// Which workers may take a run: its take key, `agent@version` (agent/version.ts).
// The version is the one it is to move to (move_to) once none of its calls is
// in flight (a call sent and not settled is settled by the version that sent
// it, while a live worker ($3) hosts that version: with none left, the new
// version settles it if it can send the same request, host/moves.ts), else
// its own; none (`agent@`) for a run no worker has taken yet.
const TAKE_KEY = `(runs.agent || '@' || coalesce(
                    case when runs.move_to is not null and (
                           not exists (select 1 from side_effects f
                                        where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                           or not exists (select 1 from workers v
                                           where v.heartbeat_at >= $3::timestamptz
                                             and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                         then runs.move_to end,
                    runs.agent_version, ''))`;
// A run one of `keys` (a text[] expression) names: by its take key, or by its
// agent's bare name, which takes a run at whatever version it is (a caller
// that knows no versions: the store's own tests).
const HOSTED_BY = (keys: string) => `(runs.agent = any(${keys}) or ${TAKE_KEY} = any(${keys}))`;
// What makes a run takeable, in the two kinds the take picks (and the fair
// share counts): open (pending, or running with its lease expired before $3)
// and woken (waiting on its calls' remotes, its wake time come by $4), both
// hosted by one of `keys` and not backing off.
const OPEN_TAKEABLE = (keys: string) =>
  `status in ('pending', 'running') and ${HOSTED_BY(keys)}
                and (heartbeat_at is null or heartbeat_at < $3::timestamptz)
                and ${NOT_BACKING_OFF}`;
const WOKEN_TAKEABLE = (keys: string) =>
  `status = 'waiting' and wake_at <= $4::timestamptz and ${HOSTED_BY(keys)}
                and ${NOT_BACKING_OFF}`;
// The runs a take may claim, up to $5 of each kind: the open ones that match
// `open` and the woken ones that match `woken`, each kind read through its
// index in the take's order and locked, skipping those a racing take holds.
const candidates = (open: string, woken: string) =>
  `select * from (
             select run_id, epoch as picked_epoch, owner as previous_owner,
                    heartbeat_at as previous_heartbeat_at, coalesce(heartbeat_at, created_at) as waited_since,
                    agent as picked_agent, agent_version as previous_version, ${TAKE_KEY} as take_key
               from runs
              where ${open}
              order by coalesce(heartbeat_at, created_at), run_id
              limit $5
                for update skip locked) open_runs
           union all
           select * from (
             select run_id, epoch, owner, heartbeat_at, wake_at, agent, agent_version, ${TAKE_KEY}
               from runs
              where ${woken}
              order by wake_at, run_id
              limit $5
                for update skip locked) woken_runs`;
// The version a take drives a picked run at: its take key's, or for a run no
// worker has taken, the one $7 (`agent@version` each) names for its agent
// (the newest this host hosts); null keeps the run as it is (a caller that
// knows no versions).
const VERSION_NOW = `coalesce(nullif(split_part(picked.take_key, '@', 2), ''),
                  (select split_part(b, '@', 2) from unnest($7::text[]) b
                    where split_part(b, '@', 1) = picked.picked_agent limit 1))`;
// A take's claim of the runs it `picked` (a CTE before it), each counted for
// progress once: a new epoch, the owner $1, `running`, a fresh heartbeat at $4,
// and the version it is driven at (a run started, or moved: VERSION_AT_CLAIM;
// $8 the `agent@version` keys whose agent lets its runs move).
const claimPicked = (returning: string) =>
  `counted as (
         select picked.*, coalesce(p.mark_now, 0) as mark_now, coalesce(p.step_now, 0) as step_now,
                ${VERSION_NOW} as version_now
           from picked left join lateral (${
    progressOf("picked.run_id", "picked.picked_epoch <> 0")
  }) p on true)
       update runs set epoch = runs.epoch + 1, owner = $1, status = 'running',
              heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz, wake_at = null, idle_since = null,
              ${claimMarks("counted")},
              ${
    VERSION_AT_CLAIM(
      "counted.version_now",
      "(runs.agent || '@' || counted.version_now) = any($8::text[])",
      "$4::timestamptz",
    )
  }
         from counted
        where runs.run_id = counted.run_id
        returning ${returning}, counted.previous_owner, counted.previous_heartbeat_at, counted.previous_version`;
// The take. Up to $5 runs (the free slots) of the agents $2, and with $6
// (this host's capacity) no more than its fair share of each agent's work,
// counted among the workers that can run it. An "agent" here is a take key
// (TAKE_KEY: `agent@version`, `agent@` for runs not started yet), as this host
// and its peers' `workers.take_keys` list them, so the workers of one version
// share its runs and a worker of another version counts for no part of them:
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
// pool the share limits only the merge: each branch keeps `limit $5` (as
// `limit (select ...)`, planned for each execution, with 3,000 runs pending
// the planner sorted them all instead of reading the take-order index:
// plans_test.ts; take_runs' settings now leave it no sort). So a fair take may hold locks on up
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
export const TAKE_RUNS_QUERY = `with peers as materialized (
         select name, capacity, take_keys,
                (select count(*) from runs
                  where status = 'running' and owner = workers.name and heartbeat_at >= $3::timestamptz)::int as held
           from workers
          where $6::int is not null and name <> $1 and heartbeat_at >= $3::timestamptz
            and take_keys && $2::text[]),
       pools as materialized (
         select grouped.agents, grouped.peer_names,
                $6::int + (select coalesce(sum(peers.capacity), 0) from peers
                            where peers.name = any(grouped.peer_names))::int as capacity_all,
                ($6::int - $5::int) + (select coalesce(sum(peers.held), 0) from peers
                                        where peers.name = any(grouped.peer_names))::int as held_all
           from (select array_agg(agent order by agent) as agents, peer_names
                   from (select mine.agent,
                                array(select name from peers where mine.agent = any(peers.take_keys) order by name)
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
           select * from (${
  candidates(OPEN_TAKEABLE("shares.agents"), WOKEN_TAKEABLE("shares.agents"))
}) candidates
            order by waited_since, run_id
            limit shares.n) pool_runs
          where shares.n > 0
          order by pool_runs.waited_since, pool_runs.run_id
          limit $5),
       ${claimPicked("runs")}`;
// The take as a host sends it: a call of `take_runs` (schema.sql, migration 21), whose body is
// TAKE_RUNS_QUERY (claims_test.ts holds them equal). As a statement of its own it was planned at
// every send, 2.5-5 ms of a take of 5-6 on a 2-core VM (its generic plan, with `limit $5` a tenth of
// the table, was never chosen); the function keeps one generic plan per session, under settings
// that leave it no scan or sort whose cost grows with the tables (plans_test.ts proves it on empty,
// small and large tables, with and without statistics).
export const TAKE_RUNS = statement(
  "take-runs",
  `select (t.taken).*, t.taken_previous_owner as previous_owner,
          t.taken_previous_heartbeat_at as previous_heartbeat_at, t.taken_previous_version as previous_version
     from take_runs($1, $2::text[], $3::timestamptz, $4::timestamptz, $5::int, $6::int, $7::text[], $8::text[]) t`,
);
// The take of one family: up to $5 runs of the agents $2 that are the run $6
// or a run under it (`root_run_id`), by the same rules of what is takeable
// and in the same order as `take-runs`, with no share to count. What a host
// that exists for one run (`client.run`) takes, so it drives no other run.
export const TAKE_FAMILY = statement(
  "take-family",
  `with picked as materialized (
         select * from (${
    candidates(
      `(run_id = $6 or root_run_id = $6) and ${OPEN_TAKEABLE("$2::text[]")}`,
      `(run_id = $6 or root_run_id = $6) and ${WOKEN_TAKEABLE("$2::text[]")}`,
    )
  }) candidates
          order by waited_since, run_id
          limit $5),
       ${claimPicked("runs.*")}`,
);
