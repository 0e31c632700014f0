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
  assert.equal(clock.pending, 0, "nothing is armed until the signal is read");
  assert.equal(d.signal.aborted, false);
  assert.equal(clock.pending, 1);
  d.cancel();
  await Promise.resolve();
  assert.equal(clock.pending, 0);
  await clock.advance(1_000);
  assert.equal(d.signal.aborted, false);
  stop.abort(new Error("later"));
  assert.equal(d.signal.aborted, false, "a cancelled deadline no longer follows the worker");
  // On the system clock, the sanitizer fails this test if the timer outlived cancel().
  const system = deadline(new SystemClock(), new AbortController().signal, 60_000, () => new Error("never"));
  assert.equal(system.signal.aborted, false);
  system.cancel();
});

Deno.test("deadline() never read arms nothing, yet says when its time ran out; read late, it counts from its start", async () => {
  const clock = new ManualClock();
  const stop = new AbortController();
  const unread = deadline(clock, stop.signal, 500, () => new Error("too slow"));
  const late = deadline(clock, stop.signal, 500, () => new Error("late"));
  await clock.advance(300);
  assert.equal(clock.pending, 0);
  assert.equal(unread.expired(), undefined);
  // Read 300 ms in: 200 ms are left.
  assert.equal(late.signal.aborted, false);
  await clock.advance(200);
  assert.equal((late.signal.reason as Error).message, "late");
  assert.equal(unread.expired()?.message, "too slow");
  // Read only after its time is up: aborted at once.
  const over = deadline(clock, stop.signal, 100, () => new Error("over"));
  await clock.advance(100);
  assert.equal((over.signal.reason as Error).message, "over");
  // A worker that stopped takes precedence over the clock, as when armed.
  const stopped = new AbortController();
  const both = deadline(clock, stopped.signal, 100, () => new Error("time"));
  await clock.advance(100);
  stopped.abort(new Error("fenced"));
  assert.equal(both.expired(), undefined);
  for (const d of [unread, late, over, both]) d.cancel();
});
