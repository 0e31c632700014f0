/**
 * The ticker: what starts a schedule's runs. A process that hosts agents
 * (the supervisor, a worker host started by `client.startWorker`) runs one
 * for the agents it hosts. Each pass reads the schedules of those agents that
 * are due, decides each one's tick (`plan.ts`) and writes it: one statement
 * that moves the schedule on and inserts the occurrences' runs
 * (`store/schedules.ts`). Any number of tickers may run at once, in any
 * number of processes: the write is a compare-and-swap on the schedule's
 * revision, and a run's id is derived from its occurrence, so an occurrence
 * is one run whoever ticks it, and however often.
 *
 * Between passes the ticker sleeps until the earliest next occurrence, never
 * longer than `checkMs`, and no longer than `queueCheckMs` while an
 * occurrence is queued behind an open run. A schedule written or resumed by
 * any process wakes it at once (the store's notification channel); were a
 * notification lost, `checkMs` bounds how late it is seen. A
 * database that cannot be reached is logged and tried again after a growing
 * pause (500 ms doubled, at most 5 s); the occurrences it made late are
 * caught up by each schedule's rule.
 *
 * @module
 */

import { type Clock, startTimer } from "../base/clock.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { describeError } from "../base/errors.ts";
import type { Logger } from "../base/log.ts";
import type { DueSchedule, Store } from "../store/store.ts";
import { planTick } from "./plan.ts";
import { occurrenceRunId, recurrenceOf } from "./spec.ts";

/** Schedules read by one pass; a full batch is followed by another pass at once. */
const DUE_BATCH = 100;
/** The first pause after a pass that failed, in ms; doubled after each failure in a row, up to RETRY_MAX_MS. */
const RETRY_FIRST_MS = 500;
/** The longest pause after a failed pass, in ms: a database back from an outage is ticked within this. */
const RETRY_MAX_MS = 5_000;

/** Options of a {@link ScheduleTicker}. */
export interface TickerOptions {
  /** Where the schedules and runs live. */
  store: Store;
  /** The ticker's time: it sleeps and reads "now" through it. */
  clock: Clock;
  /** Where `schedule-started`, `schedule-skipped`, `schedule-queued` and `schedule-tick-failed` go. */
  log: Logger;
  /** The agents hosted here: only their schedules are ticked. */
  agents: readonly string[];
  /** Who ticks, for the log. */
  name?: string;
  /** The longest sleep between passes, in ms. Default {@link DEFAULTS}' `scheduleCheckMs` (10 s). */
  checkMs?: number;
  /** The longest sleep while an occurrence is queued behind an open run, in ms. Default {@link DEFAULTS}' `pollMs`. */
  queueCheckMs?: number;
  /** Called after a pass that started runs (a client wakes its worker hosts). */
  onStarted?: (runIds: string[]) => void;
}

/** What one pass did. */
export interface TickReport {
  /** The runs it started, by id. */
  started: string[];
  /** Occurrences it skipped. */
  skipped: number;
  /** Schedules it moved on. */
  ticked: number;
}

/** Starts the runs of the schedules of some agents at their occurrences. */
export class ScheduleTicker {
  readonly #o: Required<Omit<TickerOptions, "onStarted">> & Pick<TickerOptions, "onStarted">;
  readonly #stop = new AbortController();
  #loop?: Promise<void>;
  #rung = false;
  #ring?: () => void;

  /** Takes the options; {@link ScheduleTicker.start} starts it. */
  constructor(opts: TickerOptions) {
    this.#o = {
      name: "ticker",
      checkMs: DEFAULTS.scheduleCheckMs,
      queueCheckMs: DEFAULTS.pollMs,
      ...opts,
    };
  }

  /** Starts ticking. */
  start(): this {
    this.#loop ??= Promise.all([this.#run(), this.#listen()]).then(() => {});
    return this;
  }

  /** Reads the schedules now rather than at the next due time (one was just written). */
  wake(): void {
    this.#rung = true;
    this.#ring?.();
  }

  /** Stops ticking; resolves once the pass under way, if any, has ended. */
  async stop(): Promise<void> {
    this.#stop.abort();
    this.wake();
    await this.#loop;
  }

  /** One pass: every due schedule of the agents ticked once. */
  async tick(): Promise<TickReport> {
    const report: TickReport = { started: [], skipped: 0, ticked: 0 };
    // Bounded: each batch moves every schedule it holds on (or finds it raced), and a pass reads at most 10.
    for (let batch = 0; batch < 10; batch++) {
      const now = this.#o.clock.now();
      const due = await this.#o.store.schedules.due(this.#o.agents, now, DUE_BATCH);
      const before = report.ticked;
      for (const s of due) await this.#tickOne(s, now, report);
      if (due.length < DUE_BATCH || report.ticked === before) break;
    }
    if (report.started.length > 0) this.#o.onStarted?.(report.started);
    return report;
  }

  /** Ticks one schedule, adding what it did to `report` (nothing when another ticker wrote first). */
  async #tickOne(s: DueSchedule, now: Date, report: TickReport): Promise<void> {
    const { log, store } = this.#o;
    let plan;
    try {
      const recurrence = recurrenceOf({ cron: s.cron, everyMs: s.every_ms, zone: s.zone });
      plan = planTick(recurrence, {
        overlap: s.overlap,
        catchUp: s.catch_up,
        catchUpMax: s.catch_up_max,
        graceMs: s.grace_ms,
      }, {
        nextAtMs: s.next_at.getTime(),
        queuedAtMs: s.queued_at?.getTime() ?? null,
        lastRunOpen: s.last_run_open,
      }, now.getTime());
    } catch (err) {
      // Written by another version of the program (a zone this engine does not know): left alone, said each pass.
      log.error("schedule-unreadable", { schedule: s.name, error: describeError(err) });
      return;
    }
    if (plan.idle) return;
    const runs = plan.starts.map((at) => ({ runId: occurrenceRunId(s.name, at), at: new Date(at) }));
    const out = await store.schedules.tick({
      name: s.name,
      revision: s.revision,
      nextAt: new Date(plan.nextAtMs),
      queuedAt: plan.queuedAtMs === null ? null : new Date(plan.queuedAtMs),
      lastAt: plan.lastAtMs === null ? null : new Date(plan.lastAtMs),
      skipped: plan.skipped,
      runs,
    }, now);
    if (!out.advanced) return;
    for (const r of runs.filter((r) => out.created.includes(r.runId))) {
      log.info("schedule-started", {
        schedule: s.name,
        run: r.runId,
        occurrence: r.at.toISOString(),
        late_ms: now.getTime() - r.at.getTime(),
        by: this.#o.name,
      });
    }
    if (plan.skipped > 0) {
      log.info("schedule-skipped", {
        schedule: s.name,
        occurrences: plan.skipped,
        overlap: s.overlap,
        catch_up: s.catch_up,
      });
    }
    if (plan.queuedAtMs !== null && plan.queuedAtMs !== s.queued_at?.getTime()) {
      log.info("schedule-queued", {
        schedule: s.name,
        occurrence: new Date(plan.queuedAtMs).toISOString(),
        behind: s.last_run_id,
      });
    }
    report.started.push(...out.created);
    report.skipped += plan.skipped;
    report.ticked++;
  }

  /**
   * How long to sleep after a pass: until the next due time, bounded. A
   * schedule still due after a pass that moved nothing on (one this program
   * cannot read) is looked at again after `queueCheckMs`, not at once.
   */
  async #untilNext(pass: TickReport): Promise<number> {
    const { nextAt, queued } = await this.#o.store.schedules.nextDue(this.#o.agents);
    const bound = queued ? Math.min(this.#o.checkMs, this.#o.queueCheckMs) : this.#o.checkMs;
    if (nextAt === null) return bound;
    const untilDue = nextAt.getTime() - this.#o.clock.now().getTime();
    if (untilDue <= 0 && pass.ticked === 0) return Math.min(bound, this.#o.queueCheckMs);
    return Math.max(0, Math.min(bound, untilDue));
  }

  async #run(): Promise<void> {
    const { log } = this.#o;
    log.info("ticker", { name: this.#o.name, agents: this.#o.agents.join(","), check_ms: this.#o.checkMs });
    let failures = 0;
    // Bounded by stop(): each pass sleeps until the next due time, or after a failure.
    while (!this.#stop.signal.aborted) {
      let waitMs: number;
      try {
        waitMs = await this.#untilNext(await this.tick());
        if (failures > 0) log.info("schedule-tick-recovered", { name: this.#o.name, failures });
        failures = 0;
      } catch (err) {
        failures++;
        waitMs = Math.min(this.#o.checkMs, RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** Math.min(failures - 1, 20));
        log.warn("schedule-tick-failed", { name: this.#o.name, error: describeError(err), retry_ms: waitMs });
      }
      await this.#nap(waitMs);
    }
  }

  /**
   * Wakes the ticker whenever a schedule is written or resumed, by any
   * process (the store's notification channel), until it stops. A driver
   * that cannot listen leaves the ticker to its bounded sleep.
   */
  async #listen(): Promise<void> {
    let unlisten: (() => Promise<void>) | undefined;
    try {
      unlisten = await this.#o.store.schedules.listen(() => this.wake());
    } catch (err) {
      // A driver that cannot listen, or a database away at start: `checkMs` bounds the sleep anyway.
      this.#o.log.info("schedule-listen-unavailable", { name: this.#o.name, error: describeError(err) });
      return;
    }
    if (!this.#stop.signal.aborted) {
      await new Promise((resolve) => this.#stop.signal.addEventListener("abort", resolve, { once: true }));
    }
    await unlisten().catch(() => {});
  }

  /** Sleeps `ms`, or until {@link ScheduleTicker.wake} (at once if a wake came since the last nap). */
  #nap(ms: number): Promise<void> {
    if (this.#rung || this.#stop.signal.aborted || ms <= 0) {
      this.#rung = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const end = () => {
        this.#ring = undefined;
        this.#rung = false;
        resolve();
      };
      const cancel = startTimer(this.#o.clock, ms, end);
      this.#ring = () => {
        cancel();
        end();
      };
    });
  }
}
