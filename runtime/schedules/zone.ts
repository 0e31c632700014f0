/**
 * An IANA time zone, read through `Intl.DateTimeFormat` (the zone database
 * the JavaScript engine carries): the wall-clock time an instant shows there,
 * and the instants at which the wall clock shows a given time. The second is
 * what a cron expression needs, and where daylight saving time shows: a wall
 * time in the gap of a spring-forward shows at no instant, one in the repeated
 * hour of a fall-back at two.
 *
 * A wall time is held as the milliseconds of the UTC date with the same
 * fields (`Date.UTC(year, month, day, hour, minute)`), so the `getUTC*`
 * methods of `new Date(wall)` read its fields and adding 60 000 moves it by a
 * minute of the wall clock.
 *
 * @module
 */

import { RuntimeError } from "../base/errors.ts";

const DAY_MS = 86_400_000;

/** A time zone by its IANA name (`Europe/Berlin`, `America/New_York`, `UTC`). */
export class TimeZone {
  /** The zone's name as given. */
  readonly name: string;
  readonly #parts: Intl.DateTimeFormat;

  /** Refuses a name the engine's zone database does not know (`SCHEDULE_INVALID`). */
  constructor(name: string) {
    if (typeof name !== "string" || name.trim() === "") {
      throw new RuntimeError(
        "SCHEDULE_INVALID",
        `A schedule's zone must be an IANA time zone name such as 'Europe/Berlin' or 'UTC': current value is ${
          JSON.stringify(name)
        }`,
      );
    }
    try {
      this.#parts = new Intl.DateTimeFormat("en-US", {
        timeZone: name,
        hourCycle: "h23",
        year: "numeric",
        month: "numeric",
        day: "numeric",
        hour: "numeric",
        minute: "numeric",
        second: "numeric",
      });
    } catch {
      throw new RuntimeError(
        "SCHEDULE_INVALID",
        `A schedule's zone must be an IANA time zone name such as 'Europe/Berlin' or 'UTC': ${
          JSON.stringify(name)
        } is no zone this runtime knows`,
      );
    }
    this.name = name;
  }

  /** The wall-clock time `instantMs` shows in this zone, as the ms of the UTC date with the same fields. */
  wallMs(instantMs: number): number {
    const f: Record<string, number> = {};
    for (const p of this.#parts.formatToParts(new Date(instantMs))) {
      if (p.type !== "literal") f[p.type] = Number(p.value);
    }
    const ms = ((instantMs % 1000) + 1000) % 1000;
    return Date.UTC(f.year, f.month - 1, f.day, f.hour, f.minute, f.second) + ms;
  }

  /** The zone's offset from UTC at `instantMs`, in ms (Berlin in winter: 3 600 000). */
  offsetMs(instantMs: number): number {
    return this.wallMs(instantMs) - instantMs;
  }

  /**
   * The instants at which this zone's wall clock shows `wallMs`, earliest
   * first: none for a time in a spring-forward gap, two for a time in the
   * hour a fall-back repeats, one otherwise. The offsets tried are the
   * zone's a day either side, so two changes of offset within two days of
   * each other (no zone has them) could hide one.
   */
  instantsOf(wallMs: number): number[] {
    const offsets = new Set([this.offsetMs(wallMs - DAY_MS), this.offsetMs(wallMs + DAY_MS)]);
    const out: number[] = [];
    for (const offset of offsets) {
      const t = wallMs - offset;
      if (this.wallMs(t) === wallMs && !out.includes(t)) out.push(t);
    }
    return out.sort((a, b) => a - b);
  }
}
