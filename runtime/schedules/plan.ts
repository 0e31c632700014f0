/**
 * One tick of one schedule, decided without the database: given where the
 * schedule stands (its next occurrence not yet handled, an occurrence queued
 * behind an open run, whether its last run is open) and the time, which
 * occurrences start a run now, which are skipped, and where the schedule
 * stands after. The ticker (`ticker.ts`) reads the state, asks this, and
 * writes the answer in one statement that also inserts the runs.
 *
 * The rules, in order:
 *
 * 1. **Queued.** An occurrence queued behind the last run (overlap `queue`)
 *    starts once that run is closed.
 * 2. **Due.** The occurrences from the next one not yet handled up to now are
 *    due. One at most `graceMs` late is on time; an older one was missed (an
 *    outage: no ticker could reach the database). Of the missed ones,
 *    `catchUp` keeps `none`, the `last`, or `all` (the latest `catchUpMax`);
 *    the others are skipped. On-time ones are kept (the latest
 *    {@link CATCH_UP_MAX_LIMIT} when there are more).
 * 3. **Overlap.** `allow` starts every kept occurrence. `skip` and `queue`
 *    run one at a time, so only the latest kept one can start, and only
 *    when the last run is closed; while it is open, `skip` skips it and
 *    `queue` queues it when nothing is queued yet (the queued one keeps its
 *    place, later ones are skipped).
 * 4. The next occurrence is the first after now.
 *
 * @module
 */

import { CATCH_UP_MAX_LIMIT, type ScheduleDefinition } from "./spec.ts";
import type { Recurrence } from "./recurrence.ts";

/** Where a schedule stands when a tick reads it. */
export interface ScheduleState {
  /** The next occurrence not yet handled. */
  nextAtMs: number;
  /** An occurrence queued behind the last run (overlap `queue`), if any. */
  queuedAtMs: number | null;
  /** True while the run the schedule started last is open (not done, failed or cancelled). */
  lastRunOpen: boolean;
}

/** What one tick does. */
export interface TickPlan {
  /** Occurrences that start a run now, earliest first. */
  starts: number[];
  /** The occurrence queued after the tick (null: none). */
  queuedAtMs: number | null;
  /** The next occurrence not yet handled after the tick. */
  nextAtMs: number;
  /** The latest occurrence the tick handled (started, queued or skipped), if any. */
  lastAtMs: number | null;
  /** Occurrences the tick skipped (missed and not caught up, or an overlap). */
  skipped: number;
  /** True when the tick changes nothing: no write is needed. */
  idle: boolean;
}

/** The most late occurrences counted one by one for `skipped` (a cron schedule down for years is not walked). */
export const LATE_COUNT_MAX = 10_000;

type Timing = Pick<ScheduleDefinition, "overlap" | "catchUp" | "catchUpMax" | "graceMs">;

/** Occurrences in `[fromMs, toMs]`, earliest first, the latest `max` of them (and how many there were, to a bound). */
function occurrences(
  r: Recurrence,
  fromMs: number,
  toMs: number,
  max: number,
): { kept: number[]; count: number } {
  const kept: number[] = [];
  // Bounded by `max`: walking back from the end.
  for (let t = r.prev(toMs); t !== undefined && t >= fromMs && kept.length < max; t = r.prev(t - 1)) {
    kept.unshift(t);
  }
  let count = kept.length;
  if (kept.length === max) {
    // Bounded by LATE_COUNT_MAX: counting the rest from the start.
    count = 0;
    for (let t = r.next(fromMs - 1); t <= toMs && count < LATE_COUNT_MAX; t = r.next(t)) count++;
  }
  return { kept, count };
}

/** The occurrences due at `nowMs` that the catch-up rule keeps, and how many it drops. */
function dueOccurrences(r: Recurrence, t: Timing, state: ScheduleState, nowMs: number) {
  const lateBefore = nowMs - t.graceMs; // an occurrence before this instant was missed
  const onTime = occurrences(r, Math.max(state.nextAtMs, lateBefore), nowMs, CATCH_UP_MAX_LIMIT);
  const keepLate = t.catchUp === "none" ? 0 : t.catchUp === "last" ? 1 : t.catchUpMax;
  const late = state.nextAtMs < lateBefore
    ? occurrences(r, state.nextAtMs, lateBefore - 1, Math.max(keepLate, 1))
    : { kept: [], count: 0 };
  const lateKept = keepLate === 0 ? [] : late.kept.slice(-keepLate);
  return {
    kept: [...lateKept, ...onTime.kept],
    dropped: late.count - lateKept.length + onTime.count - onTime.kept.length,
  };
}

/** Decides one tick of a schedule at `nowMs` (see the module's comment for the rules). */
export function planTick(r: Recurrence, t: Timing, state: ScheduleState, nowMs: number): TickPlan {
  const starts: number[] = [];
  let queuedAtMs = state.queuedAtMs;
  let lastOpen = state.lastRunOpen;
  if (queuedAtMs !== null && !lastOpen) {
    starts.push(queuedAtMs);
    queuedAtMs = null;
    lastOpen = true;
  }
  if (state.nextAtMs > nowMs) {
    const idle = starts.length === 0;
    return { starts, queuedAtMs, nextAtMs: state.nextAtMs, lastAtMs: null, skipped: 0, idle };
  }
  const due = dueOccurrences(r, t, state, nowMs);
  let skipped = due.dropped;
  const latest = due.kept.at(-1);
  if (t.overlap === "allow") starts.push(...due.kept);
  else if (latest !== undefined) {
    skipped += due.kept.length - 1;
    if (!lastOpen) starts.push(latest);
    else if (t.overlap === "queue" && queuedAtMs === null) queuedAtMs = latest;
    else skipped++;
  }
  const lastAtMs = latest ?? r.prev(nowMs) ?? null;
  return { starts, queuedAtMs, nextAtMs: r.next(nowMs), lastAtMs, skipped, idle: false };
}
