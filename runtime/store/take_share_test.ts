/**
 * The fair share of a take (`takeShare`, the `take-runs` statement with a
 * capacity): how much of the takeable work one worker's poll takes, given the
 * live workers that host its agents and what they hold. On both stores.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import type { Store } from "./store.ts";

const T0 = Date.parse("2026-03-01T00:00:00Z");
const at = (s: number) => new Date(T0 + s * 1000);
const LEASE_S = 12;

/** `n` pending runs of `agent` named `<prefix>-<i>`, created a second apart from `at(0)`. */
async function pending(store: Store, prefix: string, n: number, agent = "share"): Promise<void> {
  for (let i = 0; i < n; i++) {
    assert.ok(await store.leases.createRun({ runId: `${prefix}-${i}`, agent, goal: "g" }, at(i / 1000)));
  }
}

/** Writes (or renews) a worker's row in `workers`, as its heartbeat does, at `now`. */
async function beat(
  store: Store,
  name: string,
  capacity: number,
  now: Date,
  agents = ["share"],
): Promise<void> {
  await store.leases.heartbeatMany({ name, agents, capacity, startedAt: at(0) }, [], now);
}

/** One fair take by `owner` holding `held` of `capacity`, at `now`: how many it took. */
async function share(
  store: Store,
  owner: string,
  capacity: number,
  held: number,
  now: Date,
  agents = ["share"],
): Promise<number> {
  const taken = await store.leases.takeShare({
    owner,
    agents,
    staleBefore: new Date(now.getTime() - LEASE_S * 1000),
    now,
    free: capacity - held,
    capacity,
  });
  return taken.length;
}

bothStoresTest(
  "a worker alone takes every takeable run its free slots hold, as take-runs does",
  async (store) => {
    await pending(store, "alone", 30);
    await beat(store, "w-a", 100, at(1));
    assert.equal(await share(store, "w-a", 100, 0, at(1)), 30, "no peer: the whole backlog");
    await pending(store, "more", 10);
    assert.equal(await share(store, "w-a", 8, 0, at(2)), 8, "no more than its free slots");
  },
);

bothStoresTest(
  "two live workers of equal capacity take 20 new runs half each, whoever polls first",
  async (store) => {
    await pending(store, "pair", 20);
    await beat(store, "w-a", 100, at(1));
    await beat(store, "w-b", 100, at(1));
    assert.equal(await share(store, "w-a", 100, 0, at(2)), 10);
    assert.equal(
      await share(store, "w-a", 100, 10, at(2)),
      0,
      "taking again with nothing changed takes nothing: a host woken by each run it ends leaves its peer's part",
    );
    assert.equal(await share(store, "w-b", 100, 0, at(3)), 10, "the peer's part waited for it");
    assert.equal(
      (await store.operators.listRuns({ status: "pending", limit: 100 })).total,
      0,
      "nothing is left over",
    );
    const owners = (await store.operators.listRuns({ limit: 100 })).runs.map((r) => r.owner);
    assert.equal(owners.filter((o) => o === "w-a").length, 10);
    assert.equal(owners.filter((o) => o === "w-b").length, 10);
  },
);

bothStoresTest("the share follows capacity and what each worker holds already", async (store) => {
  await beat(store, "w-big", 30, at(1));
  await beat(store, "w-small", 10, at(1));
  await pending(store, "cap", 20);
  // ceil(20 * 30 / 40) = 15 for the big one, the other 5.
  assert.equal(await share(store, "w-big", 30, 0, at(2)), 15);
  assert.equal(await share(store, "w-small", 10, 0, at(2)), 5);
  // Now w-big holds 15 and w-small 5 (their leases fresh from the take): 8 new runs bring them to
  // ceil(28 * 30/40) = 21 and ceil(28 * 10/40) = 7: 6 and 2.
  await beat(store, "w-big", 30, at(3));
  await pending(store, "cap2", 8);
  assert.equal(await share(store, "w-small", 10, 5, at(4)), 2);
  assert.equal(await share(store, "w-big", 30, 15, at(4)), 6);
  assert.equal((await store.operators.listRuns({ status: "pending", limit: 100 })).total, 0);
});

bothStoresTest("a peer whose row is a lease old, or that hosts other agents, is no peer", async (store) => {
  await pending(store, "stale", 12);
  await beat(store, "w-gone", 100, at(0)); // last beat 20 s before the take: older than the 12 s lease
  await beat(store, "w-other", 100, at(20), ["not-share"]);
  await beat(store, "w-a", 100, at(20));
  assert.equal(await share(store, "w-a", 100, 0, at(20)), 12, "alone in effect: it takes them all");
});

bothStoresTest("a peer's abandoned runs count as takeable, not as held", async (store) => {
  await pending(store, "aband", 10);
  await beat(store, "w-b", 100, at(1));
  // w-b took all ten (the rule `all`), then stopped renewing their leases but kept its row fresh.
  assert.equal((await store.leases.takeRuns("w-b", ["share"], at(-LEASE_S), at(1), 100)).length, 10);
  await beat(store, "w-b", 100, at(20));
  await beat(store, "w-a", 100, at(20));
  // Held by all: 0 (w-b's leases are 19 s old); takeable: 10; w-a's share ceil(10 * 100/200) = 5.
  assert.equal(await share(store, "w-a", 100, 0, at(20)), 5);
});

/** How many runs each owner holds, `owner=n` sorted, with the pending ones as `-`. */
async function holders(store: Store): Promise<string> {
  const by = new Map<string, number>();
  for (const r of (await store.operators.listRuns({ limit: 1000 })).runs) {
    const who = r.status === "pending" ? "-" : `${r.owner}:${r.agent}`;
    by.set(who, (by.get(who) ?? 0) + 1);
  }
  return [...by].sort().map(([w, n]) => `${w}=${n}`).join(" ");
}

bothStoresTest(
  "a worker takes every run of an agent no live peer hosts, whatever else its peers host (#34 F3)",
  async (store) => {
    // Host A runs agents X and Y, host B only Y. B counts for Y's runs, never for X's: before,
    // A's share of 40 X runs was half (B's capacity counted), and 20 stayed pending with 80 slots free.
    await beat(store, "host-a", 100, at(1), ["x", "y"]);
    await beat(store, "host-b", 100, at(1), ["y"]);
    await pending(store, "x", 40, "x");
    assert.equal(await share(store, "host-b", 100, 0, at(2), ["y"]), 0, "B hosts no X");
    assert.equal(await share(store, "host-a", 100, 0, at(2), ["x", "y"]), 40, "every X run A has slots for");
    assert.equal(await holders(store), "host-a:x=40");
  },
);

bothStoresTest(
  "each agent's runs are divided among the workers hosting it: older shared work crowds out no run only one worker can take",
  async (store) => {
    await beat(store, "host-a", 100, at(1), ["x", "y"]);
    await beat(store, "host-b", 100, at(1), ["y"]);
    // 20 Y runs, then 40 X runs: the Y runs waited longer.
    await pending(store, "y", 20, "y");
    for (let i = 0; i < 40; i++) {
      assert.ok(await store.leases.createRun({ runId: `x-${i}`, agent: "x", goal: "g" }, at(1 + i / 1000)));
    }
    // A: every X run (no peer hosts X) and its half of Y, ceil(20 * 100 / 200) = 10.
    assert.equal(await share(store, "host-a", 100, 0, at(2), ["x", "y"]), 50);
    assert.equal(await holders(store), "-=10 host-a:x=40 host-a:y=10");
    // B: Y's hosts hold 50 (A's runs of both agents: its slots are taken whatever they run), 10 are
    // takeable, so its part is ceil(60 * 100 / 200) = 30, of which the 10 left.
    assert.equal(await share(store, "host-b", 100, 0, at(3), ["y"]), 10);
    assert.equal(await holders(store), "host-a:x=40 host-a:y=10 host-b:y=10", "nothing pending");
  },
);

bothStoresTest(
  "a worker's part of an agent's runs is by the capacity of the workers hosting that agent, whatever else they run",
  async (store) => {
    // X is hosted by A (100) and C (300); Y by A and B (100). A's part of X is a quarter, of Y a half.
    await beat(store, "host-a", 100, at(1), ["x", "y"]);
    await beat(store, "host-b", 100, at(1), ["y"]);
    await beat(store, "host-c", 300, at(1), ["x"]);
    await pending(store, "x", 40, "x");
    await pending(store, "y", 20, "y");
    // ceil(40 * 100 / 400) = 10 of X, ceil(20 * 100 / 200) = 10 of Y.
    assert.equal(await share(store, "host-a", 100, 0, at(2), ["x", "y"]), 20);
    assert.equal(await holders(store), "-=40 host-a:x=10 host-a:y=10");
    // C: X's hosts hold A's 20; ceil((20 + 30) * 300 / 400) = 38 is more than the 30 X runs left.
    assert.equal(await share(store, "host-c", 300, 0, at(3), ["x"]), 30);
    // B: Y's hosts hold A's 20; ceil((20 + 10) * 100 / 200) = 15, the 10 Y runs left.
    assert.equal(await share(store, "host-b", 100, 0, at(3), ["y"]), 10);
    assert.equal(await holders(store), "host-a:x=10 host-a:y=10 host-b:y=10 host-c:x=30");
  },
);

bothStoresTest(
  "agents hosted by the same workers are shared as one: two agents on two equal workers split half and half",
  async (store) => {
    await beat(store, "w-a", 100, at(1), ["x", "y"]);
    await beat(store, "w-b", 100, at(1), ["x", "y"]);
    await pending(store, "x", 15, "x");
    await pending(store, "y", 5, "y");
    // One part of the 20 runs, ceil(20 * 100 / 200) = 10, not a part of each agent's less what it holds.
    assert.equal(await share(store, "w-a", 100, 0, at(2), ["x", "y"]), 10);
    assert.equal(await share(store, "w-b", 100, 0, at(2), ["x", "y"]), 10);
    assert.equal((await store.operators.listRuns({ status: "pending", limit: 100 })).total, 0);
  },
);

bothStoresTest("with every worker full, the backlog waits; a freed slot takes one", async (store) => {
  await beat(store, "w-a", 2, at(1));
  await beat(store, "w-b", 2, at(1));
  await pending(store, "full", 6);
  assert.equal(await share(store, "w-a", 2, 0, at(2)), 2, "more work than all free slots: it fills up");
  assert.equal(await share(store, "w-b", 2, 0, at(2)), 2);
  assert.equal(await share(store, "w-a", 2, 1, at(3)), 1, "one run ended: its slot is filled again");
});

bothStoresTest("a take with free slots out of range is refused before any statement", async (store) => {
  await assert.rejects(
    () =>
      store.leases.takeShare({
        owner: "w",
        agents: ["share"],
        staleBefore: at(0),
        now: at(1),
        free: 5,
        capacity: 4,
      }),
    /Cannot take a share as 'free' must be an integer from 0 to 'capacity' \(4\): current value is 5/,
  );
});
