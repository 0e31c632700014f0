/**
 * When a schedule's occurrences fall: a cron expression in a time zone
 * (`cron.ts`, `zone.ts`) or an interval. Both answer the same two questions,
 * the first occurrence after an instant and the last one at or before it, so
 * the tick (`plan.ts`) need not know which it has.
 *
 * An interval counts elapsed time, not the wall clock: its occurrences are
 * the multiples of its length since 1970-01-01T00:00:00Z (every 5 minutes:
 * :00, :05, ... UTC), the same for every process that computes them, and a
 * time zone does not move them.
 *
 * @module
 */

import { RuntimeError } from "../base/errors.ts";
import { cronNext, cronPrev, parseCron } from "./cron.ts";
import { TimeZone } from "./zone.ts";

/** The shortest interval, in ms: a schedule starts runs, and a run is worth at least a second. */
export const EVERY_MS_MIN = 1_000;
/** The longest interval, in ms (366 days); a cron expression says "once a year" better. */
export const EVERY_MS_MAX = 366 * 86_400_000;

/** A schedule's occurrences. */
export interface Recurrence {
  /** The first occurrence strictly after `afterMs`. */
  next(afterMs: number): number;
  /** The last occurrence at or before `atMs`, or undefined when there is none (within 8 years, for cron). */
  prev(atMs: number): number | undefined;
}

/** A cron expression's occurrences in `zone` (an IANA name). Throws `SCHEDULE_INVALID`. */
export function cronRecurrence(expression: string, zone: string): Recurrence {
  const cron = parseCron(expression);
  const tz = new TimeZone(zone);
  return {
    next: (afterMs) => cronNext(cron, tz, afterMs),
    prev: (atMs) => cronPrev(cron, tz, atMs),
  };
}

/** An interval's occurrences: the multiples of `everyMs` since the epoch. */
export function intervalRecurrence(everyMs: number): Recurrence {
  checkEveryMs(everyMs, String(everyMs));
  return {
    next: (afterMs) => (Math.floor(afterMs / everyMs) + 1) * everyMs,
    prev: (atMs) => Math.floor(atMs / everyMs) * everyMs,
  };
}

const UNITS_MS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  sec: 1_000,
  m: 60_000,
  min: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

function checkEveryMs(ms: number, given: string): void {
  if (!Number.isSafeInteger(ms) || ms < EVERY_MS_MIN || ms > EVERY_MS_MAX || ms % 1_000 !== 0) {
    throw new RuntimeError(
      "SCHEDULE_INVALID",
      `A schedule's interval must be whole seconds from 1 s to 366 days: current value is ${given}`,
    );
  }
}

/**
 * An interval in ms, from a number of ms or a text such as `30s`, `5m`,
 * `5 min`, `2h`, `1d`, `90000ms`: whole seconds, from 1 s to 366 days.
 * Throws `SCHEDULE_INVALID`.
 */
export function parseEvery(every: string | number): number {
  if (typeof every === "number") {
    checkEveryMs(every, `${every} ms`);
    return every;
  }
  const m = typeof every === "string" ? /^\s*(\d{1,12})\s*(ms|s|sec|m|min|h|d)\s*$/i.exec(every) : null;
  if (!m) {
    throw new RuntimeError(
      "SCHEDULE_INVALID",
      `A schedule's interval is a number and a unit (ms, s, m or min, h, d), such as '30s' or '5m': current ` +
        `value is ${JSON.stringify(every)}`,
    );
  }
  const ms = Number(m[1]) * UNITS_MS[m[2].toLowerCase()];
  checkEveryMs(ms, JSON.stringify(every));
  return ms;
}

/** The interval `ms` as its shortest text (`90s`, `5m`, `2h`, `1d`). */
export function formatEvery(ms: number): string {
  for (const [unit, size] of [["d", 86_400_000], ["h", 3_600_000], ["m", 60_000], ["s", 1_000]] as const) {
    if (ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
