/**
 * Schedules, reached as `client.schedules`: start an agent's runs from a
 * cron expression in a time zone or an interval, list them with their next
 * occurrence and last runs, pause, resume and remove them. The `schedule`
 * commands and the page are thin wrappers over it. The runs themselves are
 * started by the tickers of the processes hosting the agent (the supervisor,
 * a worker host started by `client.startWorker`), one run per occurrence
 * (`runtime/schedules/`).
 *
 * @module
 */

import { type Agent, checkInput } from "../agent/agent.ts";
import { type Budget, checkBudget, mergeBudget } from "../agent/budget.ts";
import type { Clock } from "../base/clock.ts";
import { ClientError } from "../base/errors.ts";
import { checkModelParams } from "../model/params.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { Json } from "../agent/tools.ts";
import type { CatchUpRule, OverlapRule, RunStatus, ScheduleView, Store } from "../store/store.ts";
import { formatEvery } from "../schedules/recurrence.ts";
import { checkSchedule, checkScheduleName, recurrenceOf, type ScheduleTiming } from "../schedules/spec.ts";

/** A schedule as `client.schedules.set` takes it: its name, its timing, and what each run starts with. */
export interface ScheduleOptions extends ScheduleTiming {
  /** 1-47 letters, digits, `.`, `_` or `-`; its runs are named `<name>@<occurrence>`. */
  name: string;
  /** Each run's input, checked against the agent as `client.start` checks it. Default: the agent's default input. */
  input?: unknown;
  /** Each run's ceilings, over the agent's budget. */
  budget?: Budget;
  /** Each run's model request parameters, over the agent's. */
  modelParams?: ModelParams;
}

/** One of a schedule's latest runs. */
export interface ScheduledRunInfo {
  /** `<schedule>@<occurrence>`. */
  runId: string;
  /** Where it stands. */
  status: RunStatus;
  /** The occurrence it was started for. */
  scheduledAt: Date;
}

/** A schedule as the client reports it. */
export interface ScheduleInfo {
  /** Its name. */
  name: string;
  /** The agent whose runs it starts. */
  agent: string;
  /** Its cron expression, or null for an interval. */
  cron: string | null;
  /** Its interval as text (`5m`), or null for a cron expression. */
  every: string | null;
  /** The zone its cron expression is read in. */
  zone: string;
  /** What an occurrence does while the last run is open. */
  overlap: OverlapRule;
  /** Which occurrences an outage made late are started. */
  catchUp: CatchUpRule;
  /** The most late occurrences `catchUp: "all"` starts. */
  catchUpMax: number;
  /** How late an occurrence may start and still be on time, in ms. */
  graceMs: number;
  /** Each run's input. */
  input: Json | null;
  /** False while paused. */
  enabled: boolean;
  /** Its next occurrence; null while paused. */
  nextAt: Date | null;
  /** The latest occurrence handled (started, queued or skipped). */
  lastAt: Date | null;
  /** An occurrence waiting for the last run to close (overlap `queue`). */
  queuedAt: Date | null;
  /** Occurrences not started (missed and not caught up, or an overlap). */
  skipped: number;
  /** Its latest runs, newest first. */
  lastRuns: ScheduledRunInfo[];
  /** When it was created. */
  createdAt: Date;
  /** When it was last changed (by a person or a tick). */
  updatedAt: Date;
}

/** A schedule row as the client shows it. */
function scheduleInfo(row: ScheduleView): ScheduleInfo {
  return {
    name: row.name,
    agent: row.agent,
    cron: row.cron,
    every: row.every_ms === null ? null : formatEvery(row.every_ms),
    zone: row.zone,
    overlap: row.overlap,
    catchUp: row.catch_up,
    catchUpMax: row.catch_up_max,
    graceMs: row.grace_ms,
    input: row.input,
    enabled: row.enabled,
    nextAt: row.enabled ? new Date(row.next_at) : null,
    lastAt: row.last_at && new Date(row.last_at),
    queuedAt: row.queued_at && new Date(row.queued_at),
    skipped: row.skipped,
    lastRuns: row.last_runs.map((r) => ({ runId: r.run_id, status: r.status, scheduledAt: r.scheduled_at })),
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
  };
}

function scheduleNotFound(name: string): ClientError {
  return new ClientError(
    "SCHEDULE_NOT_FOUND",
    `No schedule ${JSON.stringify(name)}; 'deno task schedule list' lists them`,
  );
}

/** The schedules' calls over one database (`client.schedules`). */
export class ScheduleClient {
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #wakeTickers: () => void;

  /** Built by the client: its store and clock, and how to wake the tickers it started. */
  constructor(opts: { store: Store; clock: Clock; wakeTickers?: () => void }) {
    this.#store = opts.store;
    this.#clock = opts.clock;
    this.#wakeTickers = opts.wakeTickers ?? (() => {});
  }

  /**
   * Creates the schedule, or replaces the one of that name. Its timing is
   * checked (`SCHEDULE_INVALID` names what is wrong: a cron field, a zone, an
   * interval, a rule) and its input against the agent, as `client.start`
   * checks a run's, before anything is written. A new schedule, or one whose
   * cron expression, interval or zone changed, fires first at its next
   * occurrence after now; one whose timing is unchanged keeps its place.
   */
  async set(agent: Agent, opts: ScheduleOptions): Promise<ScheduleInfo> {
    const { name, input: given, budget: runBudget, modelParams: params, ...timing } = opts;
    const def = checkSchedule(name, timing);
    const { input, goal } = checkInput(agent, given);
    const budget = mergeBudget(agent.budget, checkBudget(runBudget, `Schedule ${name}`));
    const modelParams = checkModelParams(params, `Cannot schedule ${name}`);
    const now = this.#clock.now();
    await this.#store.schedules.put({
      ...def,
      agent: agent.name,
      goal,
      input,
      budget,
      modelParams,
      conversationIdleMs: agent.conversation?.idleMs,
      nextAt: new Date(recurrenceOf(def).next(now.getTime())),
    }, now);
    this.#wakeTickers();
    return (await this.get(name))!;
  }

  /** Every schedule, by name, each with its `lastRuns` latest runs (default 5, at most 100). */
  async list(opts: { lastRuns?: number } = {}): Promise<ScheduleInfo[]> {
    const lastRuns = opts.lastRuns ?? 5;
    if (!Number.isInteger(lastRuns) || lastRuns < 0 || lastRuns > 100) {
      throw new ClientError(
        "LIMIT_INVALID",
        `'lastRuns' must be an integer from 0 to 100: current value is ${JSON.stringify(opts.lastRuns)}`,
      );
    }
    return (await this.#store.schedules.list({ lastRuns })).map(scheduleInfo);
  }

  /** One schedule with its last five runs, or undefined. */
  async get(name: string): Promise<ScheduleInfo | undefined> {
    checkScheduleName(name);
    const [row] = await this.#store.schedules.list({ name });
    return row && scheduleInfo(row);
  }

  /** Pauses a schedule: no occurrence starts a run until it is resumed (a queued one is dropped). */
  async pause(name: string): Promise<ScheduleInfo> {
    checkScheduleName(name);
    if (!(await this.#store.schedules.pause(name, this.#clock.now()))) throw scheduleNotFound(name);
    return (await this.get(name))!;
  }

  /** Resumes a paused schedule from its next occurrence after now: the occurrences of the pause are not caught up. */
  async resume(name: string): Promise<ScheduleInfo> {
    const current = await this.get(name);
    if (!current) throw scheduleNotFound(name);
    if (current.enabled) return current;
    const now = this.#clock.now();
    const row = (await this.#store.schedules.list({ name }))[0];
    const nextAt = new Date(
      recurrenceOf({ cron: row.cron, everyMs: row.every_ms, zone: row.zone }).next(now.getTime()),
    );
    await this.#store.schedules.resume(name, nextAt, now);
    this.#wakeTickers();
    return (await this.get(name))!;
  }

  /** Removes a schedule; the runs it started stay. */
  async remove(name: string): Promise<void> {
    checkScheduleName(name);
    if (!(await this.#store.schedules.remove(name))) throw scheduleNotFound(name);
  }
}
