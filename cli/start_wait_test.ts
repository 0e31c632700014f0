import assert from "node:assert/strict";
import { ManualClock, settle } from "../runtime/base/clock.ts";
import { StoreError } from "../runtime/base/errors.ts";
import { type AwayTry, DATABASE_BACKOFF, TOOLS_BACKOFF, waitAtStart } from "./start_wait.ts";

const away = () =>
  new StoreError("DB_UNREACHABLE", "Cannot connect to PostgreSQL at 127.0.0.1:1/db: ECONNREFUSED");

/** A try that fails with `away()` until `upAtMs` of `clock` time, then opens `value`. */
function downUntil<T>(clock: ManualClock, upAtMs: number, value: T) {
  const triedAtMs: number[] = [];
  const attempt = () => {
    triedAtMs.push(clock.now().getTime());
    return clock.now().getTime() >= upAtMs ? Promise.resolve(value) : Promise.reject(away());
  };
  return { attempt, triedAtMs };
}

/** Advances `clock` to each sleeper's wake time in turn until `done` settles or `maxMs` of clock time passed. */
async function driveUntil(clock: ManualClock, done: Promise<unknown>, maxMs: number): Promise<void> {
  let finished = false;
  void done.then(() => (finished = true), () => (finished = true));
  const endMs = clock.now().getTime() + maxMs;
  // Bounded by maxMs of clock time: each pass moves the clock to the next wake.
  while (!finished && clock.now().getTime() < endMs) {
    await settle();
    const next = clock.nextWakeAtMs;
    if (next === undefined) continue;
    await clock.advance(next - clock.now().getTime());
  }
  await settle();
}

Deno.test("waitAtStart tries again after 1, 2, 4 and 8 s, then every 10 s, while the database is away", async () => {
  const clock = new ManualClock();
  const t0 = clock.now().getTime();
  const { attempt, triedAtMs } = downUntil(clock, t0 + 40_000, "store");
  const told: AwayTry[] = [];
  const waiting = waitAtStart({
    attempt,
    isAway: (err) => err instanceof StoreError,
    onAway: (a) => told.push(a),
    clock,
    backoff: DATABASE_BACKOFF,
  });
  await driveUntil(clock, waiting, 60_000);
  const { value, attempts, waitedMs } = await waiting;
  assert.equal(value, "store");
  assert.deepEqual(told.map((a) => a.retryMs), [1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000]);
  assert.deepEqual(told.map((a) => a.attempt), [1, 2, 3, 4, 5, 6, 7]);
  assert.ok(told.every((a) => a.error instanceof StoreError && a.error.code === "DB_UNREACHABLE"));
  // The database is back at 40 s: the try at 45 s finds it.
  assert.deepEqual(triedAtMs.map((t) => t - t0), [0, 1_000, 3_000, 7_000, 15_000, 25_000, 35_000, 45_000]);
  assert.equal(attempts, 8);
  assert.equal(waitedMs, 45_000);
});

Deno.test("waitAtStart returns at the first try, saying nothing, when what it waits for is there", async () => {
  const clock = new ManualClock();
  const told: AwayTry[] = [];
  const got = await waitAtStart({
    attempt: () => Promise.resolve(42),
    isAway: () => true,
    onAway: (a) => told.push(a),
    clock,
    backoff: TOOLS_BACKOFF,
  });
  assert.deepEqual(got, { value: 42, attempts: 1, waitedMs: 0 });
  assert.deepEqual(told, []);
});

Deno.test("waitAtStart throws a failure that is no outage at once, after outages waited out", async () => {
  const clock = new ManualClock();
  let tries = 0;
  const refused = new StoreError("DB_AUTH_FAILED", "password authentication failed");
  const told: AwayTry[] = [];
  const waiting = waitAtStart({
    attempt: () => Promise.reject(++tries < 3 ? away() : refused),
    isAway: (err) => err instanceof StoreError && err.code === "DB_UNREACHABLE",
    onAway: (a) => told.push(a),
    clock,
    backoff: DATABASE_BACKOFF,
  });
  await driveUntil(clock, waiting, 60_000);
  await assert.rejects(waiting, (err) => err === refused);
  assert.equal(tries, 3);
  assert.deepEqual(told.map((a) => a.retryMs), [1_000, 2_000]);
});

Deno.test("an abort ends waitAtStart at once, while it sleeps and while a try is in flight", async (t) => {
  await t.step("while it sleeps between tries", async () => {
    const clock = new ManualClock();
    const stop = new AbortController();
    const { attempt, triedAtMs } = downUntil(clock, Infinity, "never");
    const waiting = waitAtStart({
      attempt,
      isAway: () => true,
      onAway: () => {},
      clock,
      backoff: DATABASE_BACKOFF,
      signal: stop.signal,
    });
    await settle();
    assert.equal(clock.pending, 1, "asleep before the second try");
    const reason = new Error("SIGTERM");
    stop.abort(reason);
    await assert.rejects(waiting, (err) => err === reason);
    assert.equal(clock.pending, 0, "no sleeper left behind");
    assert.equal(triedAtMs.length, 1);
  });
  await t.step("while a try is in flight: what it opens late is discarded", async () => {
    const clock = new ManualClock();
    const stop = new AbortController();
    let open!: (v: string) => void;
    const discarded: string[] = [];
    const waiting = waitAtStart({
      attempt: () => new Promise<string>((r) => (open = r)),
      isAway: () => true,
      onAway: () => {},
      clock,
      backoff: DATABASE_BACKOFF,
      signal: stop.signal,
      discard: (late) => {
        discarded.push(late);
        return Promise.resolve();
      },
    });
    await settle();
    const reason = new Error("SIGTERM");
    stop.abort(reason);
    await assert.rejects(waiting, (err) => err === reason);
    open("store opened too late");
    await settle();
    assert.deepEqual(discarded, ["store opened too late"]);
  });
  await t.step("already aborted: no try is made", async () => {
    const stop = new AbortController();
    stop.abort(new Error("SIGTERM"));
    let tries = 0;
    await assert.rejects(
      waitAtStart({
        attempt: () => Promise.resolve(++tries),
        isAway: () => true,
        onAway: () => {},
        clock: new ManualClock(),
        backoff: DATABASE_BACKOFF,
        signal: stop.signal,
      }),
      /SIGTERM/,
    );
    assert.equal(tries, 0);
  });
});

Deno.test("waitAtStart refuses a backoff whose first wait is above its cap", async () => {
  await assert.rejects(
    waitAtStart({
      attempt: () => Promise.resolve(1),
      isAway: () => true,
      onAway: () => {},
      clock: new ManualClock(),
      backoff: { firstMs: 5_000, maxMs: 1_000 },
    }),
    /Cannot wait as 'backoff' must have 0 <= firstMs <= maxMs: current value is \{"firstMs":5000,"maxMs":1000\}/,
  );
});
