import assert from "node:assert/strict";
import { RuntimeError } from "../base/errors.ts";
import { cronNext, cronPrev, parseCron } from "./cron.ts";
import { TimeZone } from "./zone.ts";

const at = (iso: string) => Date.parse(iso);
const iso = (ms: number | undefined) => ms === undefined ? undefined : new Date(ms).toISOString();

/** Every occurrence from `fromIso` (exclusive) to `toIso` (inclusive), as ISO texts. */
function between(expr: string, zone: string, fromIso: string, toIso: string): string[] {
  const c = parseCron(expr);
  const tz = new TimeZone(zone);
  const out: string[] = [];
  // Bounded by the window.
  for (let t = cronNext(c, tz, at(fromIso)); t <= at(toIso); t = cronNext(c, tz, t)) out.push(iso(t)!);
  return out;
}

Deno.test("parseCron() reads lists, ranges, steps, names and macros", () => {
  const c = parseCron("*/15 9-17 1,15 JAN-mar mon-FRI");
  assert.deepEqual(c.minutes.flatMap((on, i) => on ? [i] : []), [0, 15, 30, 45]);
  assert.deepEqual(c.hours.flatMap((on, i) => on ? [i] : []), [9, 10, 11, 12, 13, 14, 15, 16, 17]);
  assert.deepEqual(c.days.flatMap((on, i) => on ? [i] : []), [1, 15]);
  assert.deepEqual(c.months.flatMap((on, i) => on ? [i] : []), [1, 2, 3]);
  assert.deepEqual(c.weekdays.flatMap((on, i) => on ? [i] : []), [1, 2, 3, 4, 5]);
  assert.equal(c.eitherDay, true);
  assert.deepEqual(parseCron("5/20 * * * *").minutes.flatMap((on, i) => on ? [i] : []), [5, 25, 45]);
  assert.deepEqual(parseCron("0 0 * * 7").weekdays.flatMap((on, i) => on ? [i] : []), [0], "7 is Sunday");
  assert.deepEqual(parseCron("1-10/3 * * * *").minutes.flatMap((on, i) => on ? [i] : []), [1, 4, 7, 10]);
  assert.equal(parseCron("0 0 1 * *").eitherDay, false);
  assert.equal(parseCron("0 0 * * 1").eitherDay, false);
  const daily = parseCron("@daily");
  assert.deepEqual([daily.minutes[0], daily.hours[0], daily.minutes[1]], [true, true, false]);
});

Deno.test("parseCron() refuses what it does not accept, each with a sentence saying why", async (t) => {
  const cases: [string, RegExp][] = [
    ["0 9 * *", /has 4 fields, not 5/],
    ["0 0 9 * * *", /has 6 fields, not 5 \(a field for seconds is not accepted/],
    ["60 * * * *", /minute field holds 60, outside 0-59/],
    ["0 24 * * *", /hour field holds 24, outside 0-23/],
    ["0 0 0 * *", /day-of-month field holds 0, outside 1-31/],
    ["0 0 * 13 *", /month field holds 13, outside 1-12/],
    ["0 0 * * 8", /day-of-week field holds 8, outside 0-7/],
    ["0 0 * FOO *", /month field holds "FOO", which is no month \(use 1-12 or JAN-DEC\)/],
    ["0 0 L * *", /'\?', 'L', 'W' and '#' are not accepted/],
    ["0 0 ? * MON", /'\?', 'L', 'W' and '#' are not accepted/],
    ["0 0 * * MON#2", /not accepted/],
    ["0 0 * * FRI-MON", /runs backwards/],
    ["*/0 * * * *", /step of 0/],
    ["0 0 30 2 *", /no date ever matches it/],
    ["@reboot", /is no macro/],
    ["1-2-3 * * * *", /not a range/],
    ["", /has 0 fields/],
  ];
  for (const [expr, why] of cases) {
    await t.step(JSON.stringify(expr), () => {
      assert.throws(() => parseCron(expr), (e: unknown) => {
        assert.ok(e instanceof RuntimeError);
        assert.equal(e.code, "SCHEDULE_INVALID");
        assert.match(e.message, why);
        assert.match(e.message, /minute hour day-of-month month day-of-week/);
        return true;
      });
    });
  }
});

Deno.test("a day matches either day field when both are restricted, both when one is '*'", () => {
  // 2026-02-13 is a Friday; 2026-03-13 a Friday too.
  assert.deepEqual(
    between("0 12 13 * FRI", "UTC", "2026-02-01T00:00:00Z", "2026-02-28T00:00:00Z"),
    [
      "2026-02-06T12:00:00.000Z",
      "2026-02-13T12:00:00.000Z",
      "2026-02-20T12:00:00.000Z",
      "2026-02-27T12:00:00.000Z",
    ],
  );
  assert.deepEqual(between("0 12 13 * *", "UTC", "2026-01-20T00:00:00Z", "2026-03-31T00:00:00Z"), [
    "2026-02-13T12:00:00.000Z",
    "2026-03-13T12:00:00.000Z",
  ]);
  assert.deepEqual(between("0 12 29 2 *", "UTC", "2026-01-01T00:00:00Z", "2029-01-01T00:00:00Z"), [
    "2028-02-29T12:00:00.000Z",
  ]);
});

Deno.test("weekdays at 9 in Berlin fall at 08:00Z in winter and 07:00Z in summer", () => {
  assert.deepEqual(
    between("0 9 * * MON-FRI", "Europe/Berlin", "2026-03-26T00:00:00Z", "2026-04-01T00:00:00Z"),
    [
      "2026-03-26T08:00:00.000Z", // Thursday, CET
      "2026-03-27T08:00:00.000Z", // Friday
      "2026-03-30T07:00:00.000Z", // Monday, CEST since Sunday
      "2026-03-31T07:00:00.000Z",
    ],
  );
});

Deno.test("New York, spring forward: 02:30 does not occur on 8 March 2026, so that day's occurrence is skipped", () => {
  assert.deepEqual(
    between("30 2 * * *", "America/New_York", "2026-03-06T12:00:00Z", "2026-03-09T12:00:00Z"),
    [
      "2026-03-07T07:30:00.000Z", // 02:30 EST
      "2026-03-09T06:30:00.000Z", // 02:30 EDT; none on the 8th
    ],
  );
  // Every half hour across the gap: 01:30 EST, then 03:00 EDT.
  assert.deepEqual(
    between("*/30 * * * *", "America/New_York", "2026-03-08T06:00:00Z", "2026-03-08T08:00:00Z"),
    [
      "2026-03-08T06:30:00.000Z",
      "2026-03-08T07:00:00.000Z",
      "2026-03-08T07:30:00.000Z",
      "2026-03-08T08:00:00.000Z",
    ],
  );
  // The day is 23 hours long: 23 hourly occurrences.
  assert.equal(
    between("0 * * * *", "America/New_York", "2026-03-08T04:59:00Z", "2026-03-09T03:59:00Z").length,
    23,
  );
});

Deno.test("New York, fall back: 01:30 happens twice on 1 November 2026 and fires once, at the first", () => {
  assert.deepEqual(
    between("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
    [
      "2026-11-01T05:30:00.000Z", // 01:30 EDT; not again at 06:30Z (01:30 EST)
      "2026-11-02T06:30:00.000Z",
    ],
  );
  assert.deepEqual(
    between("*/30 * * * *", "America/New_York", "2026-11-01T04:45:00Z", "2026-11-01T07:30:00Z"),
    [
      "2026-11-01T05:00:00.000Z", // 01:00 EDT
      "2026-11-01T05:30:00.000Z", // 01:30 EDT; the repeated 01:00 and 01:30 EST are skipped
      "2026-11-01T07:00:00.000Z", // 02:00 EST
      "2026-11-01T07:30:00.000Z",
    ],
  );
  // The day is 25 hours long, and each of its 24 wall hours fires once.
  assert.equal(
    between("0 * * * *", "America/New_York", "2026-11-01T03:59:00Z", "2026-11-02T04:59:00Z").length,
    24,
  );
  // From inside the repeated hour, the last occurrence is the first pass's.
  const c = parseCron("30 1 * * *");
  const ny = new TimeZone("America/New_York");
  assert.equal(iso(cronPrev(c, ny, at("2026-11-01T06:45:00Z"))), "2026-11-01T05:30:00.000Z");
  assert.equal(iso(cronNext(c, ny, at("2026-11-01T06:45:00Z"))), "2026-11-02T06:30:00.000Z");
});

Deno.test("Berlin, both ways: 02:30 skipped on 29 March 2026, fired once on 25 October 2026", () => {
  assert.deepEqual(between("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z"), [
    "2026-03-28T01:30:00.000Z", // CET
    "2026-03-30T00:30:00.000Z", // CEST; none on the 29th
  ]);
  assert.deepEqual(between("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"), [
    "2026-10-25T00:30:00.000Z", // 02:30 CEST; not again at 01:30Z (02:30 CET)
    "2026-10-26T01:30:00.000Z",
  ]);
});

Deno.test("Sydney's seasons run the other way, and Lord Howe moves by half an hour", () => {
  // Sydney falls back on 5 April 2026 (03:00 AEDT to 02:00 AEST): 02:30 happens twice, fires once.
  assert.deepEqual(
    between("30 2 * * *", "Australia/Sydney", "2026-04-03T18:00:00Z", "2026-04-05T18:00:00Z"),
    [
      "2026-04-04T15:30:00.000Z", // 5 April 02:30 AEDT (+11)
      "2026-04-05T16:30:00.000Z", // 6 April 02:30 AEST (+10)
    ],
  );
  // Lord Howe springs forward on 4 October 2026 from 02:00 to 02:30 (+10:30 to +11): 02:15 does not occur.
  assert.deepEqual(
    between("15 2 * * *", "Australia/Lord_Howe", "2026-10-02T12:00:00Z", "2026-10-04T18:00:00Z"),
    [
      "2026-10-02T15:45:00.000Z", // 3 October 02:15 +10:30
      "2026-10-04T15:15:00.000Z", // 5 October 02:15 +11; none on the 4th
    ],
  );
});

Deno.test("cronPrev() is the last occurrence at or before an instant, and cronNext() the first strictly after", () => {
  const c = parseCron("0 9 * * MON-FRI");
  const utc = new TimeZone("UTC");
  assert.equal(
    iso(cronPrev(c, utc, at("2026-12-06T12:00:00Z"))),
    "2026-12-04T09:00:00.000Z",
    "Sunday: Friday's",
  );
  assert.equal(
    iso(cronPrev(c, utc, at("2026-12-07T09:00:00Z"))),
    "2026-12-07T09:00:00.000Z",
    "at it: itself",
  );
  assert.equal(
    iso(cronNext(c, utc, at("2026-12-07T09:00:00Z"))),
    "2026-12-08T09:00:00.000Z",
    "after: not itself",
  );
  assert.equal(iso(cronNext(c, utc, at("2026-12-07T08:59:59.999Z"))), "2026-12-07T09:00:00.000Z");
});
