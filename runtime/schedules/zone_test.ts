import assert from "node:assert/strict";
import { RuntimeError } from "../base/errors.ts";
import { TimeZone } from "./zone.ts";

const HOUR = 3_600_000;
const wall = (y: number, mo: number, d: number, h: number, mi = 0) => Date.UTC(y, mo - 1, d, h, mi);
const iso = (ms: number) => new Date(ms).toISOString();

Deno.test("TimeZone reads a zone's offset from Intl, summer and winter", () => {
  const berlin = new TimeZone("Europe/Berlin");
  assert.equal(berlin.offsetMs(Date.parse("2026-01-15T12:00:00Z")), HOUR);
  assert.equal(berlin.offsetMs(Date.parse("2026-07-15T12:00:00Z")), 2 * HOUR);
  assert.equal(new TimeZone("America/New_York").offsetMs(Date.parse("2026-01-15T12:00:00.250Z")), -5 * HOUR);
  assert.equal(new TimeZone("Asia/Kolkata").offsetMs(Date.parse("2026-07-15T12:00:00Z")), 5.5 * HOUR);
  assert.equal(
    new TimeZone("UTC").wallMs(Date.parse("2026-07-15T12:34:56.789Z")),
    wall(2026, 7, 15, 12, 34) + 56_789,
  );
});

Deno.test("instantsOf() gives no instant in a spring-forward gap, two in a fall-back's repeated hour", () => {
  const ny = new TimeZone("America/New_York");
  assert.deepEqual(ny.instantsOf(wall(2026, 3, 8, 2, 30)), [], "02:30 on 8 March 2026 does not exist");
  assert.deepEqual(ny.instantsOf(wall(2026, 3, 8, 3, 0)).map(iso), ["2026-03-08T07:00:00.000Z"]);
  assert.deepEqual(ny.instantsOf(wall(2026, 11, 1, 1, 30)).map(iso), [
    "2026-11-01T05:30:00.000Z",
    "2026-11-01T06:30:00.000Z",
  ]);
  const berlin = new TimeZone("Europe/Berlin");
  assert.deepEqual(berlin.instantsOf(wall(2026, 3, 29, 2, 0)), []);
  assert.deepEqual(berlin.instantsOf(wall(2026, 10, 25, 2, 0)).map(iso), [
    "2026-10-25T00:00:00.000Z",
    "2026-10-25T01:00:00.000Z",
  ]);
  assert.deepEqual(new TimeZone("UTC").instantsOf(wall(2026, 3, 29, 2, 0)).map(iso), [
    "2026-03-29T02:00:00.000Z",
  ]);
});

Deno.test("TimeZone refuses a name no zone has, saying what a name looks like", () => {
  for (const name of ["Mars/Olympus", "", "  "]) {
    assert.throws(() => new TimeZone(name), (e: unknown) => {
      assert.ok(e instanceof RuntimeError);
      assert.equal(e.code, "SCHEDULE_INVALID");
      assert.match(e.message, /IANA time zone name such as 'Europe\/Berlin'/);
      return true;
    });
  }
});
