/**
 * Schedules (the `schedules` table): a schedule written (created or
 * replaced by name), listed with its last runs, paused, resumed and removed;
 * and the tickers' statements: which schedules are due, when the next one
 * is, and one tick written.
 *
 * A tick is one statement: it moves the schedule on (its next occurrence,
 * what it queued or skipped) only if the schedule's `revision` is still the
 * one the ticker read, and inserts the occurrences' runs in the same
 * statement, each `on conflict (run_id) do nothing`. No transaction spans the
 * read and the write (the drivers send one statement at a time), so the
 * compare-and-swap on `revision` is what makes one of two racing tickers
 * write and the other write nothing, as a claim's on the epoch does; a run's
 * primary key, its id derived from the occurrence, keeps an occurrence one run
 * even against a tick written from a stale read.
 *
 * @module
 */

import type { Budget, Json } from "../base/values.ts";
import type { ModelParams } from "../model/transcript.ts";
import { listenThrough, type SqlClient } from "./driver.ts";
import type { RunStatus } from "./statuses.ts";
import { jsonParam, OPEN_STATUSES, queryRows, runWrite, statement, textParam, ts } from "./sql.ts";

/** An overlap rule: `skip` it, `queue` it (one at most, started when the last run closes), `allow` it. */
export type OverlapRule = "skip" | "queue" | "allow";
/** What happens to an occurrence that comes while the schedule's last run is open. */
export const OVERLAP_RULES: readonly OverlapRule[] = ["skip", "queue", "allow"];

/** A catch-up rule: `none` of them, the `last` of them, or `all` of them (the latest `catchUpMax`). */
export type CatchUpRule = "none" | "last" | "all";
/** Which occurrences an outage made late are started. */
export const CATCH_UP_RULES: readonly CatchUpRule[] = ["none", "last", "all"];

/** A schedule as written: its timing, checked, and what its runs start with. */
export interface NewSchedule {
  /** Its name (schedules/spec.ts's rule). */
  name: string;
  /** The agent whose runs it starts. */
  agent: string;
  /** A cron expression, or null for an interval. */
  cron: string | null;
  /** An interval in ms, or null for a cron expression. */
  everyMs: number | null;
  /** The IANA zone the cron expression is read in. */
  zone: string;
  /** What an occurrence does while the last run is open. */
  overlap: OverlapRule;
  /** Which occurrences an outage made late are started. */
  catchUp: CatchUpRule;
  /** The most late occurrences `catchUp: "all"` starts. */
  catchUpMax: number;
  /** How late an occurrence may start and still be on time, in ms. */
  graceMs: number;
  /** Each run's goal. */
  goal: string;
  /** Each run's input. */
  input: Json;
  /** Each run's ceilings. */
  budget?: Budget;
  /** Each run's model request parameters. */
  modelParams?: ModelParams;
  /** For a conversation: each run's idle limit. */
  conversationIdleMs?: number;
  /** The first occurrence after now, by the timing written: next_at of a new schedule, or of one whose timing changed. */
  nextAt: Date;
}

/** A row of `schedules`, as the reads give it (schema.sql says what each column holds). */
export interface ScheduleRow {
  /** Its name. */
  name: string;
  /** The agent whose runs it starts. */
  agent: string;
  /** A cron expression, or null for an interval. */
  cron: string | null;
  /** An interval in ms, or null for a cron expression. */
  every_ms: number | null;
  /** The IANA zone the cron expression is read in. */
  zone: string;
  /** What an occurrence does while the last run is open. */
  overlap: OverlapRule;
  /** Which occurrences an outage made late are started. */
  catch_up: CatchUpRule;
  /** The most late occurrences `all` starts. */
  catch_up_max: number;
  /** How late an occurrence may start and still be on time, in ms. */
  grace_ms: number;
  /** Each run's goal. */
  goal: string;
  /** Each run's input. */
  input: Json | null;
  /** Each run's ceilings. */
  budget: Budget | null;
  /** Each run's model request parameters. */
  model_params: ModelParams | null;
  /** For a conversation: each run's idle limit. */
  conversation_idle_ms: number | null;
  /** False while paused. */
  enabled: boolean;
  /** The next occurrence not yet handled. */
  next_at: Date;
  /** The latest occurrence handled. */
  last_at: Date | null;
  /** The run it started last. */
  last_run_id: string | null;
  /** An occurrence queued behind that run. */
  queued_at: Date | null;
  /** Occurrences not started. */
  skipped: number;
  /** Bumped by every write. */
  revision: number;
  /** When it was created. */
  created_at: Date;
  /** When it was last written. */
  updated_at: Date;
}

/** One of a schedule's latest runs. */
export interface ScheduledRun {
  /** `<schedule>@<occurrence>`. */
  run_id: string;
  /** Where it stands. */
  status: RunStatus;
  /** The occurrence it was started for. */
  scheduled_at: Date;
}

/** A schedule with its latest runs, newest first. */
export interface ScheduleView extends ScheduleRow {
  /** Its latest runs, newest first. */
  last_runs: ScheduledRun[];
}

/** A schedule a ticker found due: its timing and where it stands. */
export type DueSchedule =
  & Pick<
    ScheduleRow,
    "name" | "agent" | "cron" | "every_ms" | "zone" | "overlap" | "catch_up" | "catch_up_max" | "grace_ms"
  >
  & Pick<ScheduleRow, "next_at" | "queued_at" | "revision" | "last_run_id">
  & {
    /** True while the run it started last is open. */
    last_run_open: boolean;
  };

/** One tick of one schedule, as the ticker decided it (schedules/plan.ts). */
export interface ScheduleTick {
  /** The schedule. */
  name: string;
  /** The revision the ticker read: the tick is written only if it is still the schedule's. */
  revision: number;
  /** The next occurrence not yet handled, after the tick. */
  nextAt: Date;
  /** The occurrence queued after the tick (null: none). */
  queuedAt: Date | null;
  /** The latest occurrence handled, if any. */
  lastAt: Date | null;
  /** Occurrences the tick skipped. */
  skipped: number;
  /** The occurrences that start a run, with their run ids, earliest first. */
  runs: { runId: string; at: Date }[];
}

// every_ms is a bigint, which postgres.js reads as text: read as a double, exact for any interval accepted.
const COLUMNS =
  `name, agent, cron, every_ms::float8 as every_ms, zone, overlap, catch_up, catch_up_max, grace_ms`;
const ROW_COLUMNS =
  `${COLUMNS}, goal, input, budget, model_params, conversation_idle_ms, enabled, next_at, last_at,
  last_run_id, queued_at, skipped, revision, created_at, updated_at`;

// The schedules' notification channel, one per schema as the stream's (notify.ts): a schedule written or
// resumed is said on it, so the tickers of every process listening look at once, not at their next look.
const CHANNEL_EXPR =
  `left('ar_schedules_' || regexp_replace(lower(current_schema()), '[^a-z0-9_]', '_', 'g'), 63)`;
const CHANNEL = statement("schedules-channel", `select ${CHANNEL_EXPR} as channel`);

const PUT = statement(
  "schedule-put",
  `with written as (
   insert into schedules (name, agent, cron, every_ms, zone, overlap, catch_up, catch_up_max, grace_ms, goal,
                          input, budget, model_params, conversation_idle_ms, next_at, created_at, updated_at)
   values ($1, $2, $3, $4::bigint, $5, $6, $7, $8, $9, $10, $11::text::jsonb, $12::text::jsonb, $13::text::jsonb,
           $14::int, $15::timestamptz, $16::timestamptz, $16::timestamptz)
   on conflict (name) do update set
     agent = excluded.agent, cron = excluded.cron, every_ms = excluded.every_ms, zone = excluded.zone,
     overlap = excluded.overlap, catch_up = excluded.catch_up, catch_up_max = excluded.catch_up_max,
     grace_ms = excluded.grace_ms, goal = excluded.goal, input = excluded.input, budget = excluded.budget,
     model_params = excluded.model_params, conversation_idle_ms = excluded.conversation_idle_ms,
     -- New timing starts from the next occurrence after now; the same timing keeps its place, so
     -- changing a schedule's input neither skips an occurrence nor fires one twice.
     next_at = case when (schedules.cron, schedules.every_ms, schedules.zone)
                         is distinct from (excluded.cron, excluded.every_ms, excluded.zone)
                    then excluded.next_at else schedules.next_at end,
     revision = schedules.revision + 1, updated_at = excluded.updated_at
   -- xmax is 0 on a row this statement inserted, and set on one it updated (the row's old version's locker).
   returning (xmax = 0) as created)
   select created, pg_notify(${CHANNEL_EXPR}, $1)::text as said from written`,
);

const LIST = statement(
  "schedule-list",
  `select ${ROW_COLUMNS},
          coalesce((select json_agg(json_build_object('run_id', r.run_id, 'status', r.status,
                                                      'scheduled_at', r.scheduled_at)
                                    order by r.scheduled_at desc)
                      from (select run_id, status, scheduled_at from runs
                             where schedule = s.name order by scheduled_at desc limit $2) r), '[]') as last_runs
     from schedules s
    where $1::text is null or s.name = $1
    order by s.name`,
);

const PAUSE = statement(
  "schedule-pause",
  // A queued occurrence is dropped (counted as skipped): a paused schedule starts nothing.
  `update schedules set enabled = false, queued_at = null,
          skipped = skipped + case when queued_at is null then 0 else 1 end,
          revision = revision + 1, updated_at = $2::timestamptz
    where name = $1`,
);

const RESUME = statement(
  "schedule-resume",
  // The occurrences of the pause are not caught up: it goes on from the first after now.
  `with resumed as (
     update schedules set enabled = true, next_at = $2::timestamptz, revision = revision + 1,
            updated_at = $3::timestamptz
      where name = $1 and not enabled
      returning 1)
   select r.n as resumed, case when r.n > 0 then pg_notify(${CHANNEL_EXPR}, $1)::text end as said
     from (select count(*)::int as n from resumed) r`,
);

const REMOVE = statement("schedule-remove", `delete from schedules where name = $1`);

const DUE = statement(
  "schedules-due",
  `select ${COLUMNS}, next_at, queued_at, revision, last_run_id,
          coalesce((select r.status in ${OPEN_STATUSES} from runs r where r.run_id = s.last_run_id), false)
            as last_run_open
     from schedules s
    where enabled and agent = any($1::text[]) and (next_at <= $2::timestamptz or queued_at is not null)
    order by next_at
    limit $3`,
);

const NEXT_DUE = statement(
  "schedules-next",
  `select min(next_at) as next_at, coalesce(bool_or(queued_at is not null), false) as queued
     from schedules where enabled and agent = any($1::text[])`,
);

const TICK = statement(
  "schedule-tick",
  `with s as (
     update schedules set next_at = $3::timestamptz, queued_at = $4::timestamptz,
            last_at = coalesce($5::timestamptz, last_at), last_run_id = coalesce($6, last_run_id),
            skipped = skipped + $7, revision = revision + 1, updated_at = $8::timestamptz
      where name = $1 and revision = $2 and enabled
      returning agent, goal, input, budget, model_params, conversation_idle_ms
   ), created as (
     insert into runs (run_id, agent, goal, input, budget, model_params, status, epoch, created_at, updated_at,
                       conversation_idle_ms, message_count, schedule, scheduled_at)
     select o.run_id, s.agent, s.goal, s.input, s.budget, s.model_params, 'pending', 0, $8::timestamptz,
            $8::timestamptz, s.conversation_idle_ms, case when s.conversation_idle_ms is null then 0 else 1 end,
            $1, o.at::timestamptz
       from s, unnest($9::text[], $10::text[]) as o(run_id, at)
     on conflict (run_id) do nothing
     returning run_id
   )
   select exists (select 1 from s) as advanced, array(select run_id from created) as created`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const SCHEDULE_STATEMENTS = [PUT, LIST, PAUSE, RESUME, REMOVE, DUE, NEXT_DUE, TICK, CHANNEL] as const;

/** Reads a `last_runs` element's time, which JSON carries as text. */
function viewOf(row: ScheduleView): ScheduleView {
  const runs = (row.last_runs ?? []) as unknown as {
    run_id: string;
    status: RunStatus;
    scheduled_at: string;
  }[];
  return { ...row, last_runs: runs.map((r) => ({ ...r, scheduled_at: new Date(r.scheduled_at) })) };
}

/** Schedules: written, listed, paused, resumed, removed, and ticked. */
export class Schedules {
  readonly #client: SqlClient;

  /** Sends its statements through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /** Creates the schedule, or replaces the one of that name (see {@link PUT}); true when it was created. */
  async put(s: NewSchedule, now: Date): Promise<boolean> {
    const [row] = await queryRows<{ created: boolean }>(this.#client, PUT, [
      s.name,
      s.agent,
      s.cron,
      s.everyMs,
      s.zone,
      s.overlap,
      s.catchUp,
      s.catchUpMax,
      s.graceMs,
      textParam(s.goal),
      jsonParam(s.input, "schedule input"),
      jsonParam(s.budget ?? null, "schedule budget"),
      jsonParam(s.modelParams ?? null, "schedule model parameters"),
      s.conversationIdleMs ?? null,
      ts(s.nextAt),
      ts(now),
    ]);
    return row?.created === true;
  }

  /** Every schedule, by name, each with its `lastRuns` latest runs (or the one named). */
  async list(opts: { name?: string; lastRuns?: number } = {}): Promise<ScheduleView[]> {
    const rows = await queryRows<ScheduleView>(this.#client, LIST, [opts.name ?? null, opts.lastRuns ?? 5]);
    return rows.map(viewOf);
  }

  /** Pauses the schedule; false when there is none of that name. */
  async pause(name: string, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, PAUSE, [name, ts(now)])) === 1;
  }

  /** Resumes a paused schedule from `nextAt`; false when there is none of that name paused. */
  async resume(name: string, nextAt: Date, now: Date): Promise<boolean> {
    const [row] = await queryRows<{ resumed: number }>(this.#client, RESUME, [name, ts(nextAt), ts(now)]);
    return row?.resumed === 1;
  }

  /**
   * Calls `onWrite` with a schedule's name whenever one is written or
   * resumed, by any process on this schema, until the returned function is
   * called; `STREAM_UNSUPPORTED` for a driver that cannot listen.
   */
  async listen(onWrite: (name: string) => void): Promise<() => Promise<void>> {
    const [row] = await queryRows<{ channel: string }>(this.#client, CHANNEL, []);
    return await listenThrough(this.#client, row.channel, onWrite);
  }

  /** Removes the schedule (its runs stay); false when there is none of that name. */
  async remove(name: string): Promise<boolean> {
    return (await runWrite(this.#client, REMOVE, [name])) === 1;
  }

  /** The enabled schedules of `agents` due at `now` or holding a queued occurrence, earliest first, at most `limit`. */
  async due(agents: readonly string[], now: Date, limit: number): Promise<DueSchedule[]> {
    return await queryRows<DueSchedule>(this.#client, DUE, [agents, ts(now), limit]);
  }

  /** When the next of the enabled schedules of `agents` is due, and whether any holds a queued occurrence. */
  async nextDue(agents: readonly string[]): Promise<{ nextAt: Date | null; queued: boolean }> {
    const [row] = await queryRows<{ next_at: Date | null; queued: boolean }>(this.#client, NEXT_DUE, [
      agents,
    ]);
    return { nextAt: row?.next_at ?? null, queued: row?.queued === true };
  }

  /**
   * Writes one tick (see the module's comment): whether the schedule was
   * still at the revision read (`advanced`), and the runs it created (an
   * occurrence whose run exists already is not created again).
   */
  async tick(t: ScheduleTick, now: Date): Promise<{ advanced: boolean; created: string[] }> {
    const [row] = await queryRows<{ advanced: boolean; created: string[] }>(this.#client, TICK, [
      t.name,
      t.revision,
      ts(t.nextAt),
      t.queuedAt && ts(t.queuedAt),
      t.lastAt && ts(t.lastAt),
      t.runs.at(-1)?.runId ?? null,
      t.skipped,
      ts(now),
      t.runs.map((r) => r.runId),
      t.runs.map((r) => ts(r.at)),
    ]);
    return { advanced: row?.advanced === true, created: row?.created ?? [] };
  }
}
