import assert from "node:assert/strict";
import { ManualClock } from "../base/clock.ts";
import { waitFor } from "./bounded_wait.ts";

/** Advances the clock by `stepMs` until `p` settles (at most `maxSteps` times). */
async function drive<T>(clock: ManualClock, p: Promise<T>, stepMs: number, maxSteps = 1000): Promise<T> {
  let settled = false;
  p.then(() => settled = true, () => settled = true);
  for (let i = 0; i < maxSteps && !settled; i++) {
    await new Promise((r) => setTimeout(r, 0));
    if (!settled) await clock.advance(stepMs);
  }
  return await p;
}

Deno.test("waitFor() answers with the first reading that is done", async () => {
  const clock = new ManualClock();
  let reads = 0;
  const value = await drive(
    clock,
    waitFor({
      clock,
      waitMs: 5_000,
      pollMs: 100,
      progressMs: 1_000,
      caller: { client: "" },
      read: () => Promise.resolve({ done: ++reads === 3, value: reads, status: "running" }),
    }),
    100,
  );
  assert.equal(value, 3);
});

Deno.test("waitFor() answers with the last reading at its bound, and reads once when the bound is 0", async () => {
  const clock = new ManualClock();
  let reads = 0;
  const start = clock.now().getTime();
  const value = await drive(
    clock,
    waitFor({
      clock,
      waitMs: 1_000,
      pollMs: 100,
      progressMs: 1_000,
      caller: { client: "" },
      read: () => Promise.resolve({ done: false, value: ++reads, status: "running" }),
    }),
    100,
  );
  assert.equal(clock.now().getTime() - start, 1_000);
  assert.equal(value, 11, "a reading at 0, 100, ..., 1 000 ms");
  reads = 0;
  const once = await waitFor({
    clock,
    waitMs: 0,
    pollMs: 100,
    progressMs: 1_000,
    caller: { client: "" },
    read: () => Promise.resolve({ done: false, value: ++reads, status: "running" }),
  });
  assert.equal(once, 1);
});

Deno.test("waitFor() sends progress that grows every progressMs to a caller that asked, and none otherwise", async () => {
  const clock = new ManualClock();
  const sent: [number, number, string][] = [];
  await drive(
    clock,
    waitFor({
      clock,
      waitMs: 3_500,
      pollMs: 100,
      progressMs: 1_000,
      caller: {
        client: "",
        progress: (p, total, message) => Promise.resolve(void sent.push([p, total, message])),
      },
      read: () => Promise.resolve({ done: false, value: 0, status: "waiting" }),
    }),
    100,
  );
  assert.deepEqual(sent.map(([p]) => p), [1_000, 2_000, 3_000]);
  assert.ok(sent.every(([, total, message]) => total === 3_500 && message === "run is waiting"));
});

Deno.test("waitFor() ends at once with the last reading when the caller's request is cancelled", async () => {
  const clock = new ManualClock();
  const cancel = new AbortController();
  const waiting = waitFor({
    clock,
    waitMs: 60_000,
    pollMs: 100,
    progressMs: 1_000,
    caller: { client: "", signal: cancel.signal },
    read: () => Promise.resolve({ done: false, value: "last", status: "running" }),
  });
  await new Promise((r) => setTimeout(r, 0));
  cancel.abort();
  assert.equal(await waiting, "last");
});
