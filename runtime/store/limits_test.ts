/**
 * Limits at the store: a take under a key's requests, tokens and calls in
 * flight, refused with when to come back; a release that settles tokens,
 * holds a key on a provider's Retry-After and opens it after one probe; a
 * reservation whose run's lease lapsed, or whose run was taken over, holding
 * nothing; the fair queue (round-robin across a label's values); a run let go
 * while it waits. The same cases on PGlite and PostgreSQL, and on PostgreSQL
 * takes that really race, from several connections at once.
 */

import assert from "node:assert/strict";
import { pgTest } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import { claim } from "../../harness/direct_writes.ts";
import { openPostgres } from "./postgres.ts";
import { Store as StoreClass } from "./store.ts";
import type { Fence, LimitAsk, LimitTake, Store } from "./store.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (ms: number) => new Date(T0.getTime() + ms);
const LEASE_MS = 12_000;

/** A running run claimed by `owner` at `now` (its heartbeat then). */
async function running(store: Store, runId: string, now = T0, owner = "w1"): Promise<Fence> {
  await store.leases.createRun({ runId, agent: "a", goal: "g" }, now);
  return { runId, epoch: (await claim(store, runId, 0, owner, now))! };
}

/** A take of `asks` at `nowMs` for `f`'s step 0, leases stale after {@link LEASE_MS}. */
function take(store: Store, f: Fence, asks: LimitAsk[], nowMs: number, seq = 0): Promise<LimitTake> {
  return store.limits.take(f, seq, asks, {
    now: at(nowMs),
    staleBefore: at(nowMs - LEASE_MS),
    retryMs: 2_000,
  });
}

/** An ask of `key` with the limits in `limit` and a request of `est` input and output tokens. */
function ask(key: string, limit: Partial<LimitAsk>, est = { input: 10, output: 10 }): LimitAsk {
  return {
    key,
    described: `${key} limit`,
    windowMs: 1_000,
    estimatedInput: est.input,
    estimatedOutput: est.output,
    ...limit,
  };
}

/** The cases, each on a store of its own: one PGlite with a schema per case, a PostgreSQL schema per case. */
const CASES: [string, (store: Store) => Promise<void>][] = [];

const granted = (t: LimitTake): string[] => {
  assert.equal(t.kind, "granted", `expected a grant: ${JSON.stringify(t)}`);
  return (t as { ids: string[] }).ids;
};
const refused = (t: LimitTake) => {
  assert.equal(t.kind, "refused", `expected a refusal: ${JSON.stringify(t)}`);
  return t as Extract<LimitTake, { kind: "refused" }>;
};

CASES.push([
  "a key's requests in a window: the fourth of 3 a second is refused until the first leaves it",
  async (store) => {
    const runs = await Promise.all(["r1", "r2", "r3", "r4"].map((id) => running(store, id)));
    const limit = ask("model:m", { requests: 3 });
    // Each request answered 50 ms after its take: it counts until a window after its release.
    for (const [i, ms] of [[0, 0], [1, 100], [2, 200]]) {
      await store.limits.release(granted(await take(store, runs[i], [limit], ms)), at(ms + 50));
    }
    const no = refused(await take(store, runs[3], [limit], 300));
    assert.equal(no.key, "model:m");
    assert.equal(no.why, "requests");
    assert.deepEqual(no.wakeAt, at(1_050), "a window after the first request's release");
    refused(await take(store, runs[3], [limit], 1_049));
    granted(await take(store, runs[3], [limit], 1_051));
    // Released or not, a request counts in its window: it may have reached the provider.
    const fresh = await running(store, "r5", at(1_100));
    refused(await take(store, fresh, [limit], 1_100));
    // One in flight counts for as long as it is: a window from now at least.
    const [r6, r7] = await Promise.all(["r6", "r7"].map((id) => running(store, id, at(1_100))));
    granted(await take(store, fresh, [limit], 1_260));
    granted(await take(store, r6, [limit], 1_260));
    const waited = refused(await take(store, r7, [limit], 1_300));
    assert.equal(waited.why, "requests");
    assert.deepEqual(waited.wakeAt, at(2_300), "three in flight: each counted until a window from now");
  },
]);

CASES.push([
  "calls in flight: a release frees one at once, and a lapsed lease or a new epoch frees it unreleased",
  async (store) => {
    const [a, b, c] = await Promise.all(["a", "b", "c"].map((id) => running(store, id)));
    const limit = ask("tool:slow", { inFlight: 2 });
    const held = granted(await take(store, a, [limit], 0));
    granted(await take(store, b, [limit], 0));
    const no = refused(await take(store, c, [limit], 10));
    assert.equal(no.why, "in_flight");
    assert.deepEqual(no.wakeAt, at(10 + 2_000), "retryMs on, unless a release wakes it sooner");
    await store.limits.release(held, at(20));
    const cHeld = granted(await take(store, c, [limit], 30));
    // b's worker dies: its heartbeat (at T0) is older than the lease at LEASE_MS + 1: it holds nothing.
    const d = await running(store, "d", at(LEASE_MS + 1));
    refused(await take(store, d, [limit], LEASE_MS)); // c's and b's both held at the lease's edge
    // c's heartbeat was never renewed either: both lapse together.
    granted(await take(store, d, [limit], LEASE_MS + 1));
    // A run taken over by another worker (its epoch moved) holds nothing under the old one, whatever its lease.
    await store.limits.release(cHeld, at(LEASE_MS + 2));
    const e = await running(store, "e", at(LEASE_MS + 2));
    granted(await take(store, e, [limit], LEASE_MS + 2));
    const f = await running(store, "f", at(LEASE_MS + 3));
    refused(await take(store, f, [limit], LEASE_MS + 3));
    assert.ok(await claim(store, "e", e.epoch, "w2", at(LEASE_MS + 4)));
    granted(await take(store, f, [limit], LEASE_MS + 4));
  },
]);

CASES.push([
  "tokens a minute: reserved from the estimate, settled to the answer's usage at release",
  async (store) => {
    const [a, b] = await Promise.all(["a", "b"].map((id) => running(store, id)));
    const limit = ask("model:m", { inputTokens: 1_000, outputTokens: 500, windowMs: 60_000 }, {
      input: 600,
      output: 100,
    });
    const first = granted(await take(store, a, [limit], 0));
    const no = refused(await take(store, b, [limit], 10));
    assert.equal(no.why, "input_tokens");
    assert.deepEqual(no.wakeAt, at(60_010), "the request in flight counted until a window from now at least");
    await store.limits.release(first, at(20), { inputTokens: 100, outputTokens: 50 });
    granted(await take(store, b, [limit], 30));
    // A request alone larger than the limit goes when the window is empty, rather than never.
    const c = await running(store, "c", at(70_000));
    granted(
      await take(store, c, [ask("model:m", { inputTokens: 1_000, windowMs: 60_000 }, {
        input: 5_000,
        output: 1,
      })], 200_000),
    );
  },
]);

CASES.push([
  "a Retry-After holds the key for every run, then one probe goes alone: a hold costs at most one more 429",
  async (store) => {
    const runs = await Promise.all(["a", "b", "c", "d"].map((id) => running(store, id)));
    const limit = ask("model:m", { requests: 100 });
    const provider = ask("provider:p", { requests: 100 });
    const first = granted(await take(store, runs[0], [limit, provider], 0));
    const second = granted(await take(store, runs[1], [limit], 0));
    await store.limits.release(first, at(10), {
      hold: { until: at(5_000), keys: ["model:m", "provider:p"] },
    });
    // The other request in flight met the same 429: the hold is extended, not started again.
    await store.limits.release(second, at(20), { hold: { until: at(5_010), keys: ["model:m"] } });
    const no = refused(await take(store, runs[2], [limit], 100));
    assert.equal(no.why, "held");
    assert.deepEqual(no.wakeAt, at(5_010));
    const probe = granted(await take(store, runs[2], [limit], 5_010));
    const alone = refused(await take(store, runs[3], [limit], 5_020));
    assert.equal(alone.why, "probe");
    await store.limits.release(probe, at(5_100));
    granted(await take(store, runs[3], [limit], 5_110));
    const keys = await store.limits.list(at(5_200), at(5_200 - LEASE_MS));
    assert.deepEqual(
      keys.map((k) => [k.key, k.holds, k.probing]),
      [["model:m", 1, false], ["provider:p", 1, true]],
    );
  },
]);

CASES.push([
  "the queue is fair: waiters are served round-robin across a label's values, each group in order",
  async (store) => {
    // One request a second, each answered at once; tenant a queued three runs before tenant b queued one.
    const served = async (store: Store, f: Fence, asks: LimitAsk[], ms: number) =>
      await store.limits.release(granted(await take(store, f, asks, ms)), at(ms));
    const limit = (grp: string) => ask("model:m", { requests: 1, group: grp });
    const holder = await running(store, "holder");
    await served(store, holder, [limit("a")], 0);
    const [a1, a2, a3, b1] = await Promise.all(["a1", "a2", "a3", "b1"].map((id) => running(store, id)));
    for (const [f, g, ms] of [[a1, "a", 10], [a2, "a", 20], [a3, "a", 30], [b1, "b", 40]] as const) {
      refused(await take(store, f, [limit(g)], ms));
    }
    // Every waiter is running at 1_000: b's first (a was served last, by the holder), then a's in order.
    refused(await take(store, a2, [limit("a")], 1_000));
    refused(await take(store, a1, [limit("a")], 1_000));
    await served(store, b1, [limit("b")], 1_000);
    const queued = refused(await take(store, a2, [limit("a")], 2_000));
    assert.equal(queued.why, "queue");
    await served(store, a1, [limit("a")], 2_000);
    await served(store, a2, [limit("a")], 3_000);
    await served(store, a3, [limit("a")], 4_000);
    // A waiter asleep until its place comes round holds it; one due longer ago than the lease, which nobody
    // takes (no worker hosts its agent), holds nobody up.
    const [c1, c2] = await Promise.all(["c1", "c2"].map((id) => running(store, id, at(4_000))));
    const asleep = refused(await take(store, c1, [limit("c")], 4_100));
    assert.deepEqual(asleep.wakeAt, at(5_000));
    // Asleep longer than that (say its wake was reckoned from a place further back): what frees is kept for
    // it, and the take it holds up wakes it now.
    assert.ok(await store.limits.waitRun(c1, at(9_000), "waiting for model:m", at(4_100)));
    assert.equal(refused(await take(store, c2, [limit("c")], 5_000)).why, "queue");
    assert.deepEqual((await store.reads.getRun("c1"))?.wake_at, at(5_000), "the waiter ahead woken");
    await served(store, c2, [limit("c")], 5_000 + LEASE_MS + 1);
  },
]);

CASES.push([
  "a take by a worker fenced off its run writes nothing; a run let go for a key holds no lease and is not stuck",
  async (store) => {
    const f = await running(store, "r");
    assert.equal(
      (await take(store, { ...f, epoch: f.epoch + 1 }, [ask("model:m", { requests: 1 })], 0)).kind,
      "fenced",
    );
    assert.equal((await store.limits.list(at(0), at(-LEASE_MS))).length, 0);
    // Four claims in a row without progress, then a wait for a key: the next claim counts from one.
    let epoch = f.epoch;
    for (let i = 0; i < 3; i++) epoch = (await store.leases.claimRun("r", epoch, "w", at(i)))!.epoch;
    assert.equal((await store.reads.getRun("r"))?.stuck_claims, 4);
    assert.ok(await store.limits.waitRun({ runId: "r", epoch }, at(5_000), "waiting for model:m", at(10)));
    assert.equal(await store.limits.waitRun({ runId: "r", epoch }, at(5_000), "again", at(10)), false);
    const run = await store.reads.getRun("r");
    assert.equal(run?.status, "waiting");
    assert.deepEqual(run?.wake_at, at(5_000));
    assert.equal(run?.heartbeat_at, null);
    assert.equal(run?.error, "waiting for model:m");
    assert.equal((await store.leases.claimRun("r", epoch, "w", at(5_000)))?.stuck_claims, 1);
  },
]);

CASES.push([
  "a release wakes the first runs waiting for a call in flight",
  async (store) => {
    const [a, b, c] = await Promise.all(["a", "b", "c"].map((id) => running(store, id)));
    const limit = ask("tool:t", { inFlight: 1 });
    const held = granted(await take(store, a, [limit], 0));
    for (const f of [b, c]) {
      const no = refused(await take(store, f, [limit], 10));
      assert.ok(await store.limits.waitRun(f, no.wakeAt, "waiting", at(10)));
    }
    assert.deepEqual([...(await store.limits.waitingFor(["b", "c", "a"])).keys()], ["b", "c"]);
    await store.limits.release(held, at(50), { wake: { keys: ["tool:t"], count: 1 } });
    assert.deepEqual((await store.reads.getRun("b"))?.wake_at, at(50), "the first waiter woken now");
    assert.deepEqual((await store.reads.getRun("c"))?.wake_at, at(2_010), "the next left to its time");
  },
]);

Deno.test("limits at the store (PGlite, a schema per case)", async (t) => {
  const store = new StoreClass(await openTestPglite());
  try {
    for (const [i, [name, fn]] of CASES.entries()) {
      await store.client.exec(`create schema case_${i}; set search_path to case_${i}`);
      await store.applySchema();
      await t.step(name, () => fn(store));
    }
  } finally {
    await store.client.close();
  }
});

for (const [name, fn] of CASES) pgTest(`${name} (PostgreSQL)`, (pg) => fn(pg.store));

pgTest("takes that race from eight connections never pass a key's calls in flight", async (pg) => {
  // Each connection has its own session, so the takes really run at once and queue on the key's lock.
  const clients = await Promise.all(
    Array.from({ length: 8 }, async () => new StoreClass(await openPostgres(pg.url, { max: 1 }))),
  );
  try {
    const now = new Date();
    const fences = await Promise.all(
      Array.from({ length: 40 }, (_, i) => running(pg.store, `r${i}`, now)),
    );
    const limit: LimitAsk = { ...ask("tool:t", { inFlight: 5, requests: 12 }), windowMs: 60_000 };
    const takes = await Promise.all(
      fences.map((f, i) =>
        clients[i % clients.length].limits.take(f, 0, [limit], {
          now,
          staleBefore: new Date(now.getTime() - LEASE_MS),
          retryMs: 1_000,
        })
      ),
    );
    assert.equal(takes.filter((t) => t.kind === "granted").length, 5, "exactly the calls in flight allowed");
    const rows = await pg.store.client.query<{ n: number }>(
      "select count(*)::int as n from limit_reservations",
    );
    assert.equal(rows[0].n, 5);
  } finally {
    await Promise.all(clients.map((c) => c.client.close()));
  }
});
