import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { FencedError } from "../base/errors.ts";
import { CountingClient, TapClient } from "./counting.ts";
import { checkGroupCommitMs, GroupCommit } from "./group_commit.ts";
import type { SqlClient } from "./driver.ts";
import { type Fence, Store } from "./store.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);

/** Creates and claims `n` runs, returning their fences. */
async function claimed(store: Store, prefix: string, n: number): Promise<Fence[]> {
  const fences: Fence[] = [];
  for (let i = 0; i < n; i++) {
    const runId = `${prefix}-${i}`;
    await store.leases.createRun({ runId, agent: "provision", goal: "goal" }, T0);
    const c = await store.leases.claimRun(runId, 0, "host", at(1));
    fences.push({ runId, epoch: c!.epoch });
  }
  return fences;
}

/** A grouped store on `store`'s driver, counting the statements it sends by name. */
function groupedCounting(store: Store): { grouped: Store; counting: CountingClient } {
  const counting = new CountingClient(store.client);
  return { grouped: new Store(counting, { groupCommit: { maxWaitMs: 5 } }), counting };
}

bothStoresTest(
  "a group statement writes every run's row but the one whose epoch moved, and each learns its own outcome",
  async (store, t) => {
    const fences = await claimed(store, "g", 4);
    const { grouped, counting } = groupedCounting(store);
    // Another worker claims g-2: its epoch moves past the one this host holds.
    await store.leases.claimRun("g-2", fences[2].epoch, "thief", at(2));

    await t.step("journal intents: three written in one statement, g-2's refused as FENCED", async () => {
      counting.reset();
      const outcomes = await Promise.allSettled(
        fences.map((f) => grouped.writes.journalIntentRow(f, 0, at(3), { fresh: true })),
      );
      assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "fulfilled", "rejected", "fulfilled"]);
      const refused = (outcomes[2] as PromiseRejectedResult).reason;
      assert.ok(refused instanceof FencedError);
      assert.equal(refused.code, "FENCED");
      // One group statement carried all four and refused g-2's inside it; its upsert was then refused too.
      assert.equal(counting.counts.get("group-write"), 1);
      assert.equal(counting.counts.get("journal-intent") ?? 0, 0);
      assert.deepEqual(grouped.writes.group?.stats, { groupStatements: 1, grouped: 4, refused: 1, alone: 0 });
      const { journal } = await store.reads.loadHistory("g-2");
      assert.equal(journal.length, 0, "the fenced run has no journal row");
      for (const i of [0, 1, 3]) {
        const row = (await store.reads.loadHistory(`g-${i}`)).journal[0];
        assert.deepEqual([row.status, row.epoch, row.llm_attempts], ["intent", fences[i].epoch, 1]);
        const ok = (outcomes[i] as PromiseFulfilledResult<typeof row>).value;
        assert.deepEqual({ ...ok, intent_at: ok.intent_at.getTime() }, {
          ...row,
          intent_at: row.intent_at.getTime(),
        });
      }
    });

    const live = [0, 1, 3].map((i) => fences[i]);
    await t.step(
      "journal confirms, tool intents, tool confirms: one statement each, all written",
      async () => {
        counting.reset();
        const held = await Promise.all(
          live.map(async (f) => (await store.reads.loadHistory(f.runId)).journal[0]),
        );
        await Promise.all(live.map((f, i) =>
          grouped.writes.journalConfirm(f, held[i], {
            decision: { tool: "create_server", args: { n: i } },
            usage: { inputTokens: 1 },
          }, at(4))
        ));
        const effects = await Promise.all(live.map((f) =>
          grouped.writes.effectIntentRow(
            f,
            { key: `${f.runId}:0`, seq: 0, tool: "create_server", args: {} },
            at(5),
            true,
          )
        ));
        await Promise.all(
          live.map((f, i) =>
            grouped.writes.effectConfirm(f, effects[i], { result: { id: i }, remote: "created" }, at(6))
          ),
        );
        assert.equal(counting.counts.get("group-write"), 3);
        for (const [i, f] of live.entries()) {
          const { journal, effects } = await store.reads.loadHistory(f.runId);
          assert.deepEqual(journal[0].decision, { tool: "create_server", args: { n: i } });
          assert.equal(journal[0].status, "confirmed");
          assert.deepEqual([effects[0].status, effects[0].result, effects[0].remote], [
            "confirmed",
            { id: i },
            "created",
          ]);
        }
      },
    );

    await t.step(
      "a confirm of a run cancelled under it is refused as RUN_CLOSED, the others written",
      async () => {
        const more = await claimed(store, "h", 3);
        const rows = await Promise.all(
          more.map((f) => grouped.writes.journalIntentRow(f, 0, at(7), { fresh: true })),
        );
        await store.families.cancel("h-1", "by a person", at(8));
        counting.reset();
        const outcomes = await Promise.allSettled(more.map((f, i) =>
          grouped.writes.journalConfirm(
            f,
            rows[i],
            { decision: { done: true, message: "m" }, usage: undefined },
            at(9),
          )
        ));
        assert.deepEqual(
          outcomes.map((o) => o.status),
          ["fulfilled", "rejected", "fulfilled"],
        );
        assert.equal(((outcomes[1] as PromiseRejectedResult).reason as FencedError).code, "RUN_CLOSED");
        assert.equal(counting.counts.get("group-write"), 1);
        assert.equal((await store.reads.loadHistory("h-1")).journal[0].status, "intent");
      },
    );

    await t.step("a fresh intent whose row exists already is written by its upsert, not lost", async () => {
      const f = live[0];
      counting.reset();
      const [a, b] = await Promise.all([
        grouped.writes.journalIntentRow(f, 0, at(10), { fresh: true }).catch((e) => e),
        grouped.writes.journalIntentRow(live[1], 1, at(10), { fresh: true }),
      ]);
      // g-0's seq 0 is confirmed: the upsert finds it not at intent, so the write is refused as STALLED.
      assert.ok(a instanceof FencedError);
      assert.equal(a.code, "STALLED");
      assert.equal(b.seq, 1);
      assert.equal(counting.counts.get("group-write"), 1);
      assert.equal(counting.counts.get("journal-intent-upsert"), 1);
    });

    await t.step(
      "closes ride the statement with another run's confirm; the closed run that moved on is refused",
      async () => {
        const runs = await claimed(store, "f", 4);
        const open = await grouped.writes.journalIntentRow(runs[3], 0, at(12), { fresh: true });
        // f-1 is taken by another worker: its close under the old epoch must not end the new holder's run.
        await store.leases.claimRun("f-1", runs[1].epoch, "thief", at(12));
        counting.reset();
        const outcomes = await Promise.allSettled([
          grouped.writes.finishRun(runs[0], "done", null, at(13), "all provisioned"),
          grouped.writes.finishRun(runs[1], "done", null, at(13), "stale"),
          grouped.writes.finishRun(runs[2], "failed", "BUDGET_EXCEEDED: tokens", at(13)),
          grouped.writes.journalConfirm(
            runs[3],
            open,
            { decision: { tool: "t", args: {} }, usage: undefined },
            at(13),
          ),
        ]);
        assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "rejected", "fulfilled", "fulfilled"]);
        assert.equal(((outcomes[1] as PromiseRejectedResult).reason as FencedError).code, "FENCED");
        assert.equal(counting.counts.get("group-write"), 1);
        assert.equal(counting.counts.get("finish-run") ?? 0, 0);
        const [f0, f1, f2, f3] = await Promise.all(runs.map((f) => store.reads.getRun(f.runId)));
        assert.deepEqual([f0!.status, f0!.output, f0!.error], ["done", "all provisioned", null]);
        assert.equal(f0!.updated_at.getTime(), at(13).getTime());
        assert.deepEqual([f1!.status, f1!.epoch, f1!.output], ["running", runs[1].epoch + 1, null]);
        assert.deepEqual([f2!.status, f2!.error], ["failed", "BUDGET_EXCEEDED: tokens"]);
        assert.equal(f3!.status, "running");
        assert.equal((await store.reads.loadHistory("f-3")).journal[0].status, "confirmed");
      },
    );

    await t.step("one write alone goes out at once as its single-row statement", async () => {
      counting.reset();
      const [f] = await claimed(store, "solo", 1);
      await grouped.writes.journalIntentRow(f, 0, at(11), { fresh: true });
      assert.equal(counting.counts.get("group-write") ?? 0, 0);
      assert.equal(counting.counts.get("journal-intent"), 1);
    });
  },
);

bothStoresTest(
  "a batch the database refuses for one row's value is sent again one write at a time",
  async (store) => {
    const fences = await claimed(store, "v", 3);
    // The statements in the order they were sent.
    const sent: string[] = [];
    const tap = new TapClient(store.client, (s) => void sent.push(s.opts?.name ?? "?"));
    const grouped = new Store(tap, { groupCommit: { maxWaitMs: 5 } });
    // An epoch the int column cannot hold makes the whole statement fail (22003), as it would alone.
    const bad: Fence = { runId: "v-1", epoch: 2 ** 31 };
    const outcomes = await Promise.allSettled([
      grouped.writes.journalIntentRow(fences[0], 0, at(3), { fresh: true }),
      grouped.writes.journalIntentRow(bad, 0, at(3), { fresh: true }),
      grouped.writes.journalIntentRow(fences[2], 0, at(3), { fresh: true }),
    ]);
    assert.deepEqual(outcomes.map((o) => o.status), ["fulfilled", "rejected", "fulfilled"]);
    // One group statement carried the three, then each went again alone.
    assert.deepEqual(sent, ["group-write", "journal-intent", "journal-intent", "journal-intent"]);
    assert.deepEqual(grouped.writes.group?.stats, { groupStatements: 1, grouped: 3, refused: 0, alone: 3 });
    assert.equal((await store.reads.loadHistory("v-0")).journal.length, 1);
    assert.equal((await store.reads.loadHistory("v-1")).journal.length, 0);
    assert.equal((await store.reads.loadHistory("v-2")).journal.length, 1);
  },
);

Deno.test("checkGroupCommitMs() refuses a bound that is not a positive number of milliseconds up to 100", () => {
  assert.equal(checkGroupCommitMs(0.5), 0.5);
  for (const bad of [0, -1, Number.NaN, 101]) {
    assert.throws(() => checkGroupCommitMs(bad), /'groupCommitMs' must be above 0 and at most 100/);
  }
});

bothStoresTest(
  "a batch that reaches splitAt goes out before its task ends; the rest follow on the second connection",
  async (store) => {
    const fences = await claimed(store, "s", 5);
    // Each statement as it is handed to the driver, with how many writes were made by then.
    let made = 0;
    const sent: string[] = [];
    const tap = new TapClient(store.client, (s) => void sent.push(`${s.opts?.name ?? "?"}@${made}`));
    const grouped = new Store(tap, { groupCommit: { maxWaitMs: 5, splitAt: 3 } });
    const writes: Promise<unknown>[] = [];
    for (const f of fences) {
      writes.push(grouped.writes.journalIntentRow(f, 0, at(3), { fresh: true }));
      made++;
    }
    // The first three went out while the loop still ran (after the third write, before the fourth).
    assert.deepEqual(sent, ["group-write@2"]);
    await Promise.all(writes);
    // The last two went together at the end of the task, on the second connection, not after the first returned.
    assert.deepEqual(sent, ["group-write@2", "group-write@5"]);
    assert.deepEqual(grouped.writes.group?.stats, { groupStatements: 2, grouped: 5, refused: 0, alone: 0 });
    for (const f of fences) {
      assert.equal((await store.reads.loadHistory(f.runId)).journal[0].status, "intent");
    }

    // Without the split, the same five writes made in one task are one statement.
    const more = await claimed(store, "u", 5);
    sent.length = 0;
    const whole = new Store(tap, { groupCommit: { maxWaitMs: 5 } });
    await Promise.all(more.map((f) => whole.writes.journalIntentRow(f, 0, at(3), { fresh: true })));
    assert.deepEqual(sent.map((s) => s.split("@")[0]), ["group-write"]);
  },
);

Deno.test("a group commit refuses a split that is not an integer from 2 to the batch's most", () => {
  for (const bad of [0, 1, 2.5, 513, Number.NaN]) {
    assert.throws(
      () => new GroupCommit({} as SqlClient, { maxWaitMs: 2, splitAt: bad }),
      /'splitAt' must be an integer from 2 to 512/,
    );
  }
});
