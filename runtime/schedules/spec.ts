/**
 * A schedule as a person writes it, checked: its name, when it fires (a cron
 * expression in a zone, or an interval), and its rules for an occurrence
 * that comes while the last run is open (`overlap`) and for occurrences an
 * outage made late (`catchUp`). Each occurrence's run id is derived from the
 * schedule's name and the occurrence's instant, here.
 *
 * @module
 */

import { DEFAULTS } from "../base/defaults.ts";
import { RuntimeError } from "../base/errors.ts";
import { cronRecurrence, intervalRecurrence, parseEvery, type Recurrence } from "./recurrence.ts";
import { CATCH_UP_RULES, type CatchUpRule, OVERLAP_RULES, type OverlapRule } from "../store/schedules.ts";

/**
 * A schedule's name: a letter or digit, then up to 46 letters, digits, `.`,
 * `_` or `-`, so that `<name>@<occurrence>` (17 characters more) is a run id.
 */
export const SCHEDULE_NAME_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._-]{0,46}$/;

export { CATCH_UP_RULES, OVERLAP_RULES };
export type { CatchUpRule, OverlapRule };

/** The largest `catchUpMax`, and the most runs one tick starts for one schedule. */
export const CATCH_UP_MAX_LIMIT = 100;
/** The largest `graceMs`: a day. */
export const GRACE_MS_MAX = 86_400_000;

/** When a schedule fires and what it does about overlaps and outages, as a person gives it. */
export interface ScheduleTiming {
  /** A cron expression (five fields, read in `zone`); give this or `every`. */
  cron?: string;
  /** An interval (`"30s"`, `"5m"`, `"2h"`, or ms), whole seconds from 1 s; give this or `cron`. */
  every?: string | number;
  /** The IANA time zone `cron` is read in. Default `UTC`. */
  zone?: string;
  /** An occurrence while the last run is open: `skip` (default), `queue` (one waits), or `allow`. */
  overlap?: OverlapRule;
  /** Occurrences an outage made late: `none`, the `last` (default), or `all` (the latest `catchUpMax`). */
  catchUp?: CatchUpRule;
  /** The most late occurrences `catchUp: "all"` starts, 1 to 100. Default 10. */
  catchUpMax?: number;
  /** How late an occurrence may start and still be on time, in ms. Default 60 000 (an interval's: at most its length). */
  graceMs?: number;
}

/** A schedule's timing, checked, with every default applied: what the `schedules` table holds. */
export interface ScheduleDefinition {
  name: string;
  cron: string | null;
  everyMs: number | null;
  zone: string;
  overlap: OverlapRule;
  catchUp: CatchUpRule;
  catchUpMax: number;
  graceMs: number;
}

function invalid(message: string): RuntimeError {
  return new RuntimeError("SCHEDULE_INVALID", message);
}

/** Refuses a name that breaks {@link SCHEDULE_NAME_PATTERN} (`SCHEDULE_INVALID`). */
export function checkScheduleName(name: unknown): string {
  if (typeof name !== "string" || !SCHEDULE_NAME_PATTERN.test(name)) {
    throw invalid(
      "A schedule's name is 1-47 characters of letters, digits, '.', '_' or '-', starting with a letter or " +
        `digit (its runs are named <name>@<time>): current value is ${JSON.stringify(name)}`,
    );
  }
  return name;
}

function oneOf<T extends string>(what: string, allowed: readonly T[], value: unknown, fallback: T): T {
  if (value === undefined) return fallback;
  if (!(allowed as readonly unknown[]).includes(value)) {
    throw invalid(
      `A schedule's '${what}' must be one of ${allowed.join(", ")}: current value is ${
        JSON.stringify(value)
      }`,
    );
  }
  return value as T;
}

function integerIn(what: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw invalid(
      `A schedule's '${what}' must be an integer from ${min} to ${max}: current value is ${
        JSON.stringify(value)
      }`,
    );
  }
  return value;
}

/**
 * Checks a schedule's name and timing and applies the defaults; throws
 * `SCHEDULE_INVALID` naming the first thing wrong (a bad cron expression or
 * zone included: the recurrence is built once here, so nothing stored can
 * fail to compute later).
 */
export function checkSchedule(name: string, timing: ScheduleTiming): ScheduleDefinition {
  checkScheduleName(name);
  if ((timing.cron === undefined) === (timing.every === undefined)) {
    throw invalid(
      `Schedule ${name} needs exactly one of 'cron' (such as '0 9 * * MON-FRI') and 'every' (such as '5m')`,
    );
  }
  if (timing.every !== undefined && timing.zone !== undefined) {
    throw invalid(
      `Schedule ${name}: 'zone' goes with 'cron' only; an interval counts elapsed time, which no zone moves`,
    );
  }
  const everyMs = timing.every === undefined ? null : parseEvery(timing.every);
  const def: ScheduleDefinition = {
    name,
    cron: timing.cron === undefined ? null : String(timing.cron).trim(),
    everyMs,
    zone: timing.zone ?? DEFAULTS.scheduleZone,
    overlap: oneOf("overlap", OVERLAP_RULES, timing.overlap, DEFAULTS.scheduleOverlap),
    catchUp: oneOf("catchUp", CATCH_UP_RULES, timing.catchUp, DEFAULTS.scheduleCatchUp),
    catchUpMax: integerIn(
      "catchUpMax",
      timing.catchUpMax,
      1,
      CATCH_UP_MAX_LIMIT,
      DEFAULTS.scheduleCatchUpMax,
    ),
    graceMs: integerIn(
      "graceMs",
      timing.graceMs,
      0,
      GRACE_MS_MAX,
      Math.min(DEFAULTS.scheduleGraceMs, everyMs ?? Infinity),
    ),
  };
  recurrenceOf(def);
  return def;
}

/** When the schedule's occurrences fall. */
export function recurrenceOf(def: Pick<ScheduleDefinition, "cron" | "everyMs" | "zone">): Recurrence {
  return def.cron !== null ? cronRecurrence(def.cron, def.zone) : intervalRecurrence(def.everyMs!);
}

/** `20261206T090000Z`: an instant, to the second, as a run id may hold it. */
function compactInstant(atMs: number): string {
  return new Date(atMs).toISOString().replace(/\.\d{3}Z$/, "Z").replaceAll("-", "").replaceAll(":", "");
}

/** The run id of the schedule's occurrence at `atMs`: `<name>@20261206T090000Z`. */
export function occurrenceRunId(name: string, atMs: number): string {
  return `${name}@${compactInstant(atMs)}`;
}
