import assert from "node:assert/strict";
import { clockTimeout, isoTimestamp, ManualClock } from "./clock.ts";

Deno.test("ManualClock wakes sleepers in order of wake time only when advanced past it", async () => {
  const clock = new ManualClock(0);
  const woke: string[] = [];
  const a = clock.sleep(300).then(() => woke.push(`a@${clock.now().getTime()}`));
  const b = clock.sleep(100).then(() => woke.push(`b@${clock.now().getTime()}`));
  await clock.advance(50);
  assert.deepEqual(woke, []);
  await clock.advance(1000);
  await Promise.all([a, b]);
  assert.deepEqual(woke, ["b@100", "a@300"]);
  assert.equal(clock.now().getTime(), 1050);
});

Deno.test("ManualClock.sleep() rejects with the signal's reason when aborted", async () => {
  const clock = new ManualClock(0);
  const ctl = new AbortController();
  const slept = clock.sleep(1000, ctl.signal);
  ctl.abort(new Error("stop"));
  await assert.rejects(slept, /stop/);
  assert.equal(clock.pending, 0);
});

Deno.test("clockTimeout() aborts on the clock's time and not before", async () => {
  const clock = new ManualClock(0);
  const t = clockTimeout(clock, 500, () => new Error("too slow"));
  await clock.advance(499);
  assert.equal(t.signal.aborted, false);
  await clock.advance(1);
  assert.equal(t.signal.aborted, true);
  assert.match(String(t.signal.reason), /too slow/);
  const u = clockTimeout(clock, 500, () => new Error("never"));
  u.cancel();
  await clock.advance(1000);
  assert.equal(u.signal.aborted, false);
});

Deno.test("isoTimestamp() writes what toISOString() writes, for every year, and refuses an invalid date alike", () => {
  const edges = [
    0,
    -1,
    Date.UTC(999, 11, 31, 23, 59, 59, 999),
    Date.UTC(1000, 0, 1),
    Date.UTC(2026, 10, 30, 1, 2, 3, 4),
    Date.UTC(9999, 11, 31, 23, 59, 59, 999),
    Date.UTC(10000, 0, 1),
    -62198755200000, // year -1
    8.64e15,
    -8.64e15,
  ];
  // Deterministic spread over years 0 to 9999 (a linear congruential sequence).
  let x = 12345;
  const spread = Array.from({ length: 20_000 }, () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return (x / 2147483648) * 253402300800000 - 62167219200000;
  });
  for (const ms of [...edges, ...spread.map(Math.floor)]) {
    const d = new Date(ms);
    assert.equal(isoTimestamp(d), d.toISOString(), String(ms));
  }
  assert.throws(() => isoTimestamp(new Date(NaN)), RangeError);
});
