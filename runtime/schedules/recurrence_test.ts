import assert from "node:assert/strict";
import { RuntimeError } from "../base/errors.ts";
import { cronRecurrence, formatEvery, intervalRecurrence, parseEvery } from "./recurrence.ts";

Deno.test("parseEvery() reads a number and a unit, whole seconds from 1 s to 366 days", () => {
  assert.equal(parseEvery("30s"), 30_000);
  assert.equal(parseEvery("5m"), 300_000);
  assert.equal(parseEvery("5 min"), 300_000);
  assert.equal(parseEvery("2h"), 7_200_000);
  assert.equal(parseEvery("1d"), 86_400_000);
  assert.equal(parseEvery("2000ms"), 2_000);
  assert.equal(parseEvery(1_000), 1_000);
  for (const bad of ["1500ms", "0s", "500ms", "367d", "5", "every 5m", "5 weeks", 999, 1.5e3 + 0.5, "-5s"]) {
    assert.throws(() => parseEvery(bad as string), (e: unknown) => {
      assert.ok(e instanceof RuntimeError && e.code === "SCHEDULE_INVALID", String(bad));
      return true;
    });
  }
});

Deno.test("an interval's occurrences are the multiples of its length since the epoch", () => {
  const every5m = intervalRecurrence(300_000);
  const t = Date.parse("2026-12-06T09:02:10Z");
  assert.equal(new Date(every5m.next(t)).toISOString(), "2026-12-06T09:05:00.000Z");
  assert.equal(new Date(every5m.prev(t)!).toISOString(), "2026-12-06T09:00:00.000Z");
  const on = Date.parse("2026-12-06T09:05:00Z");
  assert.equal(every5m.prev(on), on, "at an occurrence: itself");
  assert.equal(every5m.next(on), on + 300_000, "after it: the next");
});

Deno.test("formatEvery() writes an interval in its largest whole unit", () => {
  assert.deepEqual([1_000, 90_000, 300_000, 7_200_000, 86_400_000].map(formatEvery), [
    "1s",
    "90s",
    "5m",
    "2h",
    "1d",
  ]);
});

Deno.test("cronRecurrence() refuses a bad expression or zone before anything is stored", () => {
  assert.throws(() => cronRecurrence("0 9 * *", "UTC"), /has 4 fields/);
  assert.throws(() => cronRecurrence("0 9 * * *", "Nowhere/Town"), /no zone this runtime knows/);
  const r = cronRecurrence("0 9 * * *", "Europe/Berlin");
  assert.equal(
    new Date(r.next(Date.parse("2026-12-06T00:00:00Z"))).toISOString(),
    "2026-12-06T08:00:00.000Z",
  );
});
