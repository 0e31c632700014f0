import assert from "node:assert/strict";
import { deadline, ManualClock, SystemClock } from "./clock.ts";

Deno.test("deadline() aborts with the timeout's error on the clock's time, and says it expired", async () => {
  const clock = new ManualClock();
  const stop = new AbortController();
  const d = deadline(clock, stop.signal, 500, () => new Error("too slow"));
  await clock.advance(499);
  assert.equal(d.signal.aborted, false);
  await clock.advance(1);
  assert.equal(d.signal.aborted, true);
  assert.equal((d.signal.reason as Error).message, "too slow");
  assert.equal(d.expired()?.message, "too slow");
  d.cancel();
});

Deno.test("deadline() aborts with the worker's reason when the worker stops, and has not expired", () => {
  const stop = new AbortController();
  const d = deadline(new SystemClock(), stop.signal, 60_000, () => new Error("never"));
  stop.abort(new Error("fenced"));
  assert.equal((d.signal.reason as Error).message, "fenced");
  assert.equal(d.expired(), undefined);
  d.cancel();
});

Deno.test("deadline() cancelled leaves no sleeper and no timer behind", async () => {
  const clock = new ManualClock();
  const stop = new AbortController();
  const d = deadline(clock, stop.signal, 500, () => new Error("never"));
  assert.equal(clock.pending, 1);
  d.cancel();
  await Promise.resolve();
  assert.equal(clock.pending, 0);
  await clock.advance(1_000);
  assert.equal(d.signal.aborted, false);
  stop.abort(new Error("later"));
  assert.equal(d.signal.aborted, false, "a cancelled deadline no longer follows the worker");
  // On the system clock, the sanitizer fails this test if the timer outlived cancel().
  deadline(new SystemClock(), stop.signal, 60_000, () => new Error("never")).cancel();
});
