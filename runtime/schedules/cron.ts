/**
 * Cron expressions: five fields (minute, hour, day of month, month, day of
 * week) read in a time zone's wall clock, and the occurrences they name.
 *
 * What is accepted, field by field:
 *
 * | field        | values           | names     |
 * | ------------ | ---------------- | --------- |
 * | minute       | 0-59             |           |
 * | hour         | 0-23             |           |
 * | day of month | 1-31             |           |
 * | month        | 1-12             | JAN-DEC   |
 * | day of week  | 0-7 (0, 7: Sun)  | SUN-SAT   |
 *
 * Each field is a comma-separated list of `*`, a value, or a range `a-b`,
 * each optionally with a step (`*\/15`, `1-30/5`, `5/15`, which is `5-59/15`).
 * Names are case-insensitive and may end a range (`MON-FRI`). The macros
 * `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and
 * `@hourly` stand for their five fields. When both the day of month and the
 * day of week are restricted (neither starts with `*`), a day matches when
 * either does, as in every cron since Vixie's; otherwise both must.
 *
 * Refused, each with its own sentence: a sixth field (seconds: use an
 * interval), `?`, `L`, `W`, `#`, `@reboot`, a range that runs backwards
 * (`FRI-MON`), a step of 0, a value out of its field's range, and an
 * expression no date ever matches (`0 0 30 2 *`).
 *
 * Daylight saving time: a wall time a spring-forward skips does not occur
 * (its occurrence is skipped, not moved), and a wall time a fall-back repeats
 * occurs once, at its first instant.
 *
 * @module
 */

import { RuntimeError } from "../base/errors.ts";
import type { TimeZone } from "./zone.ts";

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
// The longest search for an occurrence: every accepted expression matches within 8 years (a 29 February
// comes at least once in 8 years), and a search moves by a month, a day, an hour or a minute per pass.
const SEARCH_PASSES_MAX = 200_000;
// The most matching wall minutes one search passes over because they do not occur after the instant it
// starts from: the minutes of a spring-forward gap, or of a repeated hour's second pass (60 at most each).
const SKIPPED_MINUTES_MAX = 10_000;

const MONTH_NAMES = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
// The most days each month has (February in a leap year).
const MONTH_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

const MACROS: Record<string, string> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

interface FieldSpec {
  name: string;
  min: number;
  max: number;
  names?: string[];
  /** The first value the names stand for (1 for months, 0 for days). */
  namesFrom?: number;
}

const FIELDS: FieldSpec[] = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day-of-month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12, names: MONTH_NAMES, namesFrom: 1 },
  { name: "day-of-week", min: 0, max: 7, names: DAY_NAMES, namesFrom: 0 },
];

/** A parsed cron expression: which minutes, hours, days and months it matches. */
export interface CronFields {
  /** The expression as given. */
  readonly source: string;
  readonly minutes: readonly boolean[];
  readonly hours: readonly boolean[];
  /** Indexed 1-31. */
  readonly days: readonly boolean[];
  /** Indexed 1-12. */
  readonly months: readonly boolean[];
  /** Indexed 0-6, Sunday 0. */
  readonly weekdays: readonly boolean[];
  /** Both day fields restricted: a day matches when either does. */
  readonly eitherDay: boolean;
}

function refuse(source: string, why: string): RuntimeError {
  return new RuntimeError(
    "SCHEDULE_INVALID",
    `Cannot read the cron expression ${JSON.stringify(source)}: ${why}. A cron expression has five fields ` +
      "(minute hour day-of-month month day-of-week), such as '0 9 * * MON-FRI'",
  );
}

/** Reads one value of a field: a number in range, or one of the field's names. */
function value(source: string, field: FieldSpec, text: string): number {
  const upper = text.toUpperCase();
  const named = field.names?.indexOf(upper) ?? -1;
  if (named >= 0) return named + field.namesFrom!;
  if (!/^\d{1,2}$/.test(text)) {
    const hint = /^[?LW#]|[LW#]/i.test(text)
      ? ` ('?', 'L', 'W' and '#' are not accepted)`
      : field.names
      ? ` (use ${field.min}-${field.max} or ${field.names[0]}-${field.names.at(-1)})`
      : ` (use ${field.min}-${field.max})`;
    throw refuse(
      source,
      `its ${field.name} field holds ${JSON.stringify(text)}, which is no ${field.name}${hint}`,
    );
  }
  const n = Number(text);
  if (n < field.min || n > field.max) {
    throw refuse(source, `its ${field.name} field holds ${n}, outside ${field.min}-${field.max}`);
  }
  return n;
}

/** Reads one field into the set of values it matches, and whether it starts with `*`. */
function field(source: string, spec: FieldSpec, text: string): { set: boolean[]; star: boolean } {
  const set = new Array<boolean>(spec.max + 1).fill(false);
  for (const item of text.split(",")) {
    const m = /^([^/]+)(?:\/(\d+))?$/.exec(item);
    if (!m) {
      throw refuse(source, `its ${spec.name} field holds ${JSON.stringify(item)}, which is not a list item`);
    }
    const step = m[2] === undefined ? 1 : Number(m[2]);
    if (step < 1) throw refuse(source, `its ${spec.name} field has a step of 0 in ${JSON.stringify(item)}`);
    let from: number;
    let to: number;
    if (m[1] === "*") [from, to] = [spec.min, spec.max];
    else if (m[1].includes("-")) {
      const [a, b, extra] = m[1].split("-");
      if (extra !== undefined || a === "" || b === "") {
        throw refuse(source, `its ${spec.name} field holds ${JSON.stringify(item)}, which is not a range`);
      }
      [from, to] = [value(source, spec, a), value(source, spec, b)];
      if (from > to) {
        throw refuse(
          source,
          `its ${spec.name} field holds the range ${
            JSON.stringify(m[1])
          }, which runs backwards (write it as two ` +
            "ranges, e.g. 'FRI-SAT,SUN-MON')",
        );
      }
    } else {
      from = value(source, spec, m[1]);
      to = m[2] === undefined ? from : spec.max;
    }
    for (let v = from; v <= to; v += step) set[v] = true;
  }
  return { set, star: text.startsWith("*") };
}

/** Parses a cron expression (see the module's comment for what it accepts); throws `SCHEDULE_INVALID`. */
export function parseCron(source: string): CronFields {
  if (typeof source !== "string") throw refuse(String(source), "it is not a text");
  const trimmed = source.trim();
  const expanded = MACROS[trimmed.toLowerCase()];
  if (trimmed.startsWith("@") && expanded === undefined) {
    throw refuse(
      source,
      `${JSON.stringify(trimmed)} is no macro (accepted: ${Object.keys(MACROS).join(", ")})`,
    );
  }
  const parts = (expanded ?? trimmed).split(/\s+/).filter((p) => p !== "");
  if (parts.length !== 5) {
    throw refuse(
      source,
      `it has ${parts.length} field${parts.length === 1 ? "" : "s"}, not 5${
        parts.length === 6
          ? " (a field for seconds is not accepted: use an interval such as every '30s')"
          : ""
      }`,
    );
  }
  const [minutes, hours, days, months, weekdays] = parts.map((p, i) => field(source, FIELDS[i], p));
  const dow = weekdays.set.slice(0, 7);
  if (weekdays.set[7]) dow[0] = true;
  const cron: CronFields = {
    source,
    minutes: minutes.set,
    hours: hours.set,
    days: days.set,
    months: months.set,
    weekdays: dow,
    eitherDay: !days.star && !weekdays.star,
  };
  // Only the day of month can make an expression match no date: some allowed day of some allowed month
  // must exist (a restricted day of week alone, or with it, always matches some day).
  const someDay = cron.months.some((on, m) =>
    on && cron.days.some((d, day) => d && day <= MONTH_DAYS[m - 1])
  );
  if (!cron.eitherDay && !someDay) throw refuse(source, "no date ever matches it");
  return cron;
}

function dayMatches(c: CronFields, d: Date): boolean {
  const dom = c.days[d.getUTCDate()];
  const dow = c.weekdays[d.getUTCDay()];
  return c.eitherDay ? dom || dow : dom && dow;
}

/** The start of the wall-clock month, day or hour of `wall`. */
function startOf(wall: number, unit: "month" | "day" | "hour"): number {
  const d = new Date(wall);
  if (unit === "month") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  if (unit === "day") return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  return wall - (wall % HOUR_MS);
}

/**
 * Moves `wall` (a whole minute) to the nearest wall minute the expression
 * matches in direction `dir`, itself included, jumping a month, a day or an
 * hour at a time past what cannot match.
 */
function matchFrom(c: CronFields, wall: number, dir: 1 | -1): number | undefined {
  // Bounded: each pass moves at least a minute, and SEARCH_PASSES_MAX covers 8 years of jumps.
  for (let pass = 0; pass < SEARCH_PASSES_MAX; pass++) {
    const d = new Date(wall);
    if (!c.months[d.getUTCMonth() + 1]) {
      wall = dir > 0
        ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1)
        : startOf(wall, "month") - MINUTE_MS;
    } else if (!dayMatches(c, d)) {
      wall = dir > 0 ? startOf(wall, "day") + DAY_MS : startOf(wall, "day") - MINUTE_MS;
    } else if (!c.hours[d.getUTCHours()]) {
      wall = dir > 0 ? startOf(wall, "hour") + HOUR_MS : startOf(wall, "hour") - MINUTE_MS;
    } else if (!c.minutes[d.getUTCMinutes()]) {
      wall += dir * MINUTE_MS;
    } else return wall;
  }
  return undefined;
}

/**
 * The first occurrence after `afterMs` (strictly), as an instant: the first
 * matching wall minute after the wall time of `afterMs` that occurs in `zone`
 * (a minute in a spring-forward gap is skipped) at an instant after
 * `afterMs`, its first instant when a fall-back repeats it.
 */
export function cronNext(c: CronFields, zone: TimeZone, afterMs: number): number {
  const startWall = zone.wallMs(afterMs);
  let wall = startWall - (((startWall % MINUTE_MS) + MINUTE_MS) % MINUTE_MS) + MINUTE_MS;
  // Bounded: each pass moves to a later wall minute; parseCron refused what never matches.
  for (let pass = 0; pass < SKIPPED_MINUTES_MAX; pass++) {
    const hit = matchFrom(c, wall, 1);
    if (hit === undefined) break;
    const first = zone.instantsOf(hit)[0];
    if (first !== undefined && first > afterMs) return first;
    wall = hit + MINUTE_MS;
  }
  throw refuse(c.source, `no occurrence was found within 8 years after ${new Date(afterMs).toISOString()}`);
}

/**
 * The last occurrence at or before `atMs`, as {@link cronNext} names them, or
 * undefined when none is found within 8 years before it.
 */
export function cronPrev(c: CronFields, zone: TimeZone, atMs: number): number | undefined {
  const startWall = zone.wallMs(atMs);
  let wall = startWall - (((startWall % MINUTE_MS) + MINUTE_MS) % MINUTE_MS);
  // Bounded: each pass moves to an earlier wall minute.
  for (let pass = 0; pass < SKIPPED_MINUTES_MAX; pass++) {
    const hit = matchFrom(c, wall, -1);
    if (hit === undefined) return undefined;
    const first = zone.instantsOf(hit)[0];
    if (first !== undefined && first <= atMs) return first;
    wall = hit - MINUTE_MS;
  }
  return undefined;
}
