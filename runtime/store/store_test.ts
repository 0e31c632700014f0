import assert from "node:assert/strict";
import { pgTest, testTemplate } from "../../tests/_pg.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import { FencedError } from "../base/errors.ts";
import { openPglite } from "./pglite.ts";
import { type Fence, Store } from "./store.ts";
import { claim, effectIntent, journalIntent } from "../../harness/direct_writes.ts";

const T0 = new Date(Date.UTC(2026, 0, 1));
const at = (s: number) => new Date(T0.getTime() + s * 1000);

/** The same cases on both drivers: the SQL text is shared, so must be the behaviour. */
async function storeCases(t: Deno.TestContext, store: Store): Promise<void> {
  await t.step("createRun() creates once and reports an existing run", async () => {
    assert.equal(
      await store.leases.createRun({ runId: "r-create", agent: "provision", goal: "goal" }, T0),
      true,
    );
    assert.equal(
      await store.leases.createRun({ runId: "r-create", agent: "provision", goal: "other goal" }, T0),
      false,
    );
    const run = await store.reads.getRun("r-create");
    assert.equal(run?.status, "pending");
    assert.equal(run?.epoch, 0);
    assert.equal(run?.goal, "goal");
  });

  await t.step("createOrGetRun() creates a missing run and returns an existing one untouched", async () => {
    const created = await store.leases.createOrGetRun(
      { runId: "r-cog", agent: "provision", goal: "first goal" },
      T0,
    );
    assert.deepEqual([created.status, created.epoch, created.goal], ["pending", 0, "first goal"]);
    // The new run's row is the one written: equal to a read, JSON columns included (a NUL written out).
    const input = { text: "a\u0000b", n: 1.5, list: [1, "two"] };
    const budget = { tokens: 100 };
    const made = await store.leases.createOrGetRun(
      { runId: "r-cog-row", agent: "provision", goal: "g", input, budget },
      T0,
    );
    assert.deepStrictEqual(made, await store.reads.getRun("r-cog-row"));
    assert.deepEqual((made.input as { text: string }).text, "a\\u0000b");
    // A first claim (from epoch 0) leaves what any claim that found no progress leaves.
    assert.deepEqual(await store.leases.claimRun("r-cog-row", 0, "w", at(1)), { epoch: 1, stuck_claims: 1 });
    const claimed = await store.reads.getRun("r-cog-row");
    assert.deepEqual(
      [claimed?.status, claimed?.owner, claimed?.stuck_claims, claimed?.progress_mark, claimed?.heartbeat_at],
      ["running", "w", 1, 0, at(1)],
    );
    await claim(store, "r-cog", 0, "w", at(1));
    const existing = await store.leases.createOrGetRun(
      { runId: "r-cog", agent: "provision", goal: "another goal" },
      at(2),
    );
    assert.deepEqual([existing.status, existing.epoch, existing.goal], ["running", 1, "first goal"]);
  });

  await t.step("claim() is a compare-and-swap: exactly one of two claimers on one epoch wins", async () => {
    await store.leases.createRun({ runId: "r-claim", agent: "provision", goal: "goal" }, T0);
    const [a, b] = await Promise.all([
      claim(store, "r-claim", 0, "a", T0),
      claim(store, "r-claim", 0, "b", T0),
    ]);
    assert.deepEqual([a, b].filter((e) => e !== undefined), [1]);
    assert.equal(await claim(store, "r-claim", 1, "c", T0), 2);
  });

  await t.step("one step is four commits and reads back exactly as written", async () => {
    await store.leases.createRun({ runId: "r-step", agent: "provision", goal: "goal" }, T0);
    const epoch = (await claim(store, "r-step", 0, "w", T0))!;
    const f: Fence = { runId: "r-step", epoch };
    const intent = await store.writes.journalIntentRow(f, 0, at(1));
    assert.equal(intent.llm_attempts, 1);
    await store.writes.journalConfirm(f, intent, {
      decision: { tool: "t", args: { a: 1 } },
      usage: { total_tokens: 9 },
    }, at(2));
    const call = await store.writes.effectIntentRow(
      f,
      { key: "r-step:0", seq: 0, tool: "t", args: { a: 1 } },
      at(3),
    );
    assert.equal(call.attempts, 1);
    await store.writes.effectConfirm(f, call, { result: "id-1", remote: "created" }, at(4));
    const { journal, effects } = await store.reads.loadHistory("r-step");
    assert.equal(journal.length, 1);
    assert.equal(journal[0].status, "confirmed");
    assert.deepEqual(journal[0].decision, { tool: "t", args: { a: 1 } });
    assert.deepEqual(journal[0].usage, { total_tokens: 9 });
    assert.equal(journal[0].llm_attempts, 1);
    assert.equal(effects[0].status, "confirmed");
    assert.equal(effects[0].result, "id-1");
    assert.equal(effects[0].remote, "created");
    assert.equal(effects[0].attempts, 1);
    assert.equal(new Date(effects[0].confirmed_at!).getTime(), at(4).getTime());
  });

  await t.step(
    "an intent written again counts one more attempt; a confirmed row is never reopened",
    async () => {
      await store.leases.createRun({ runId: "r-again", agent: "provision", goal: "goal" }, T0);
      const f: Fence = { runId: "r-again", epoch: (await claim(store, "r-again", 0, "w", T0))! };
      assert.equal(await journalIntent(store, f, 0, T0), 1);
      const again = await store.writes.journalIntentRow(f, 0, T0);
      assert.equal(again.llm_attempts, 2);
      await store.writes.journalConfirm(f, again, {
        decision: { done: true, message: "ok" },
        usage: undefined,
      }, T0);
      await assert.rejects(journalIntent(store, f, 0, T0), (e: FencedError) => e.code === "STALLED");
      const e = { key: "r-again:1", seq: 1, tool: "t", args: {} };
      assert.equal(await effectIntent(store, f, e, T0), 1);
      const call = await store.writes.effectIntentRow(f, e, T0);
      assert.equal(call.attempts, 2);
      await store.writes.effectConfirm(f, call, { result: "x", remote: "already_done" }, T0);
      await assert.rejects(effectIntent(store, f, e, T0), (err: FencedError) => err.code === "STALLED");
      await assert.rejects(
        store.writes.effectConfirm(f, call, { result: "y", remote: "created" }, T0),
        (err: FencedError) => err.code === "STALLED",
      );
      const { effects } = await store.reads.loadHistory("r-again");
      assert.equal(effects[0].result, "x", "the confirmed result is not overwritten");
    },
  );

  await t.step("every guarded write from a stale epoch is refused as FENCED and writes nothing", async () => {
    await store.leases.createRun({ runId: "r-fence", agent: "provision", goal: "goal" }, T0);
    const old: Fence = { runId: "r-fence", epoch: (await claim(store, "r-fence", 0, "old", T0))! };
    const step = await store.writes.journalIntentRow(old, 0, T0);
    const call = await store.writes.effectIntentRow(
      old,
      { key: "r-fence:0", seq: 0, tool: "t", args: {} },
      T0,
    );
    const fresh = (await claim(store, "r-fence", old.epoch, "new", T0))!;
    assert.equal(fresh, old.epoch + 1);
    const fenced = (e: unknown) => e instanceof FencedError && e.code === "FENCED";
    await assert.rejects(journalIntent(store, old, 1, T0), fenced);
    await assert.rejects(journalIntent(store, old, 0, T0), fenced);
    await assert.rejects(
      store.writes.journalReject(old, step, { rejection: { code: "X", message: "m" } }),
      fenced,
    );
    await assert.rejects(
      store.writes.journalConfirm(old, step, { decision: { done: true, message: "" }, usage: undefined }, T0),
      fenced,
    );
    await assert.rejects(
      effectIntent(store, old, { key: "r-fence:1", seq: 1, tool: "t", args: {} }, T0),
      fenced,
    );
    await assert.rejects(store.writes.effectConfirm(old, call, { result: 1, remote: "created" }, T0), fenced);
    await assert.rejects(store.writes.effectSettle(old, call, { status: "failed", error: "e" }, T0), fenced);
    await assert.rejects(store.writes.finishRun(old, "done", null, T0), fenced);
    assert.equal(await store.writes.heartbeat(old, at(5)), false);
    const { journal, effects } = await store.reads.loadHistory("r-fence");
    assert.deepEqual(journal.map((j) => [j.seq, j.status, j.llm_attempts]), [[0, "intent", 1]]);
    assert.deepEqual(effects.map((e) => [e.seq, e.status, e.attempts]), [[0, "intent", 1]]);
    assert.equal((await store.reads.getRun("r-fence"))?.status, "running");
  });

  await t.step(
    "a fresh intent is a plain insert, and counts an attempt when its row exists after all",
    async () => {
      await store.leases.createRun({ runId: "r-fresh", agent: "provision", goal: "goal" }, T0);
      const f: Fence = { runId: "r-fresh", epoch: (await claim(store, "r-fresh", 0, "w", T0))! };
      const call = { key: "r-fresh:0", seq: 0, tool: "t", args: { a: 1 } };
      // What the worker keeps is the row as written: equal to what a restart reads back.
      const journalRow = await store.writes.journalIntentRow(f, 0, T0, { reserveTokens: 7, fresh: true });
      const effectRow = await store.writes.effectIntentRow(f, call, T0, true);
      const written = await store.reads.loadHistory("r-fresh");
      assert.deepStrictEqual(journalRow, written.journal[0]);
      assert.deepStrictEqual(effectRow, written.effects[0]);
      assert.equal(journalRow.llm_attempts, 1);
      assert.equal(effectRow.attempts, 1);
      // The worker thought there was no row: the insert meets the key, and the upsert counts one more.
      assert.equal(
        (await store.writes.journalIntentRow(f, 0, at(1), { reserveTokens: 0, fresh: true })).llm_attempts,
        2,
      );
      assert.equal((await store.writes.effectIntentRow(f, call, at(1), true)).attempts, 2);
      // Fenced either way: a stale epoch writes nothing, fresh or not.
      const next = (await claim(store, "r-fresh", f.epoch, "w2", T0))!;
      const fenced = (e: unknown) => e instanceof FencedError && e.code === "FENCED";
      await assert.rejects(
        store.writes.journalIntentRow(f, 1, at(2), { reserveTokens: 0, fresh: true }),
        fenced,
      );
      await assert.rejects(
        store.writes.effectIntentRow(f, { ...call, key: "r-fresh:1", seq: 1 }, at(2), true),
        fenced,
      );
      const { journal, effects } = await store.reads.loadHistory("r-fresh");
      assert.deepEqual(journal.map((j) => [j.seq, j.llm_attempts]), [[0, 2]]);
      assert.deepEqual(effects.map((e) => [e.seq, e.attempts]), [[0, 2]]);
      assert.equal(next, f.epoch + 1);
    },
  );

  await t.step(
    "every fenced write returns the row it wrote: the row as loadHistory reads it back",
    async () => {
      await store.leases.createRun({ runId: "r-rows", agent: "provision", goal: "goal" }, T0);
      const f: Fence = { runId: "r-rows", epoch: (await claim(store, "r-rows", 0, "w", T0))! };
      // Each returned row against a read of the same row, after each write: what a restart would know.
      const journalAt = async (seq: number) =>
        (await store.reads.loadHistory(f.runId)).journal.find((j) => j.seq === seq);
      const effectAt = async (seq: number) =>
        (await store.reads.loadHistory(f.runId)).effects.find((e) => e.seq === seq);
      // A refused answer's text, and an error, with the characters a write writes out (NUL, a lone surrogate).
      const odd = "a\u0000b\ud800c";

      // Step 0: two refused answers (the second beyond the row's token ceiling), then a confirm.
      let step = await store.writes.journalIntentRow(f, 0, at(1), { reserveTokens: 500, fresh: true });
      assert.deepStrictEqual(step, await journalAt(0));
      step = await store.writes.journalReject(f, step, {
        rejection: { code: "A", message: odd },
        usage: { prompt_tokens: 3, nested: { n: 1 } },
        tokens: { released: 200, spent: 7 },
      });
      assert.deepStrictEqual(step, await journalAt(0));
      step = await store.writes.journalIntentRow(f, 0, at(2), { reserveTokens: 300 });
      assert.deepStrictEqual(step, await journalAt(0));
      step = await store.writes.journalReject(f, step, {
        rejection: { code: "B", message: "no usage" },
        tokens: { released: 10_000, spent: 2 ** 40 },
      });
      assert.deepStrictEqual(step, await journalAt(0));
      assert.deepEqual([step.reserved_tokens, step.spent_tokens, step.usage], [0, 2_147_483_647, {
        prompt_tokens: 3,
        nested: { n: 1 },
      }]);
      step = await store.writes.journalIntentRow(f, 0, at(3), { reserveTokens: 40 });
      step = await store.writes.journalConfirm(f, step, {
        decision: { tool: "t", args: { a: [1, "two", null], b: { c: true } } },
        usage: { prompt_tokens: 9, completion_tokens: 1 },
        tokens: { released: 40, spent: 5 },
      }, at(4));
      assert.deepStrictEqual(step, await journalAt(0));
      assert.equal(step.confirmed_at?.getTime(), at(4).getTime());

      // Its call: sent twice, then confirmed.
      const call = { key: "r-rows:0", seq: 0, tool: "t", args: { a: [1, "two", null], b: { c: true } } };
      let effect = await store.writes.effectIntentRow(f, call, at(5), true);
      assert.deepStrictEqual(effect, await effectAt(0));
      effect = await store.writes.effectIntentRow(f, call, at(6));
      assert.deepStrictEqual(effect, await effectAt(0));
      effect = await store.writes.effectConfirm(f, effect, {
        result: { id: "i-1", ip: ["10.0.0.1"] },
        remote: "created",
      }, at(7));
      assert.deepStrictEqual(effect, await effectAt(0));

      // Steps 1 and 2: a call failed for good, and one flagged; a decision without usage.
      for (const [seq, status] of [[1, "failed"], [2, "flagged"]] as const) {
        const decided = await store.writes.journalConfirm(
          f,
          await store.writes.journalIntentRow(f, seq, at(8), { reserveTokens: 0, fresh: true }),
          { decision: { tool: "t", args: {} }, usage: undefined },
          at(9),
        );
        assert.deepStrictEqual(decided, await journalAt(seq));
        const sent = await store.writes.effectIntentRow(
          f,
          { key: `r-rows:${seq}`, seq, tool: "t", args: {} },
          at(10),
          true,
        );
        const settled = await store.writes.effectSettle(f, sent, { status, error: odd }, at(11));
        assert.deepStrictEqual(settled, await effectAt(seq));
      }

      // Step 3: a call a person denied, recorded as its result; step 4: one waiting for a person.
      const denied = await store.writes.effectDenied(
        f,
        { key: "r-rows:3", seq: 3, tool: "t", args: {} },
        "denied by bob",
        at(12),
      );
      assert.deepStrictEqual(denied, await effectAt(3));
      const asked = await store.writes.requestApproval(
        f,
        { key: "r-rows:4", seq: 4, tool: "t", args: { x: 1 }, hash: "h" },
        at(13),
      );
      assert.equal(asked.waiting, true);
      assert.deepStrictEqual(asked.approval, await store.reads.getApproval("r-rows:4"));

      // The run's end, on a run of its own (the one above now waits): the columns it wrote, as read back.
      await store.leases.createRun({ runId: "r-rows-end", agent: "provision", goal: "goal" }, T0);
      const g: Fence = { runId: "r-rows-end", epoch: (await claim(store, "r-rows-end", 0, "w", T0))! };
      const end = await store.writes.finishRun(g, "done", null, at(14), odd);
      const run = (await store.reads.getRun(g.runId))!;
      assert.deepStrictEqual(end, {
        run_id: run.run_id,
        epoch: run.epoch,
        status: run.status,
        error: run.error,
        updated_at: run.updated_at,
        output: run.output,
      });
    },
  );

  await t.step("a write refuses a row of another run", async () => {
    await store.leases.createRun({ runId: "r-other", agent: "provision", goal: "goal" }, T0);
    const f: Fence = { runId: "r-other", epoch: (await claim(store, "r-other", 0, "w", T0))! };
    const row = await store.writes.journalIntentRow(f, 0, T0);
    await assert.rejects(
      store.writes.journalConfirm({ ...f, runId: "r-else" }, row, {
        decision: { done: true, message: "" },
        usage: undefined,
      }, T0),
      /given a row of run r-other/,
    );
  });

  await t.step("a closed run refuses writes as RUN_CLOSED", async () => {
    await store.leases.createRun({ runId: "r-closed", agent: "provision", goal: "goal" }, T0);
    const f: Fence = { runId: "r-closed", epoch: (await claim(store, "r-closed", 0, "w", T0))! };
    await store.writes.finishRun(f, "done", null, T0);
    await assert.rejects(journalIntent(store, f, 0, T0), (e: FencedError) => e.code === "RUN_CLOSED");
    assert.equal(await claim(store, "r-closed", f.epoch, "x", T0), undefined);
  });

  await t.step("rejections accumulate on an intent row", async () => {
    await store.leases.createRun({ runId: "r-reject", agent: "provision", goal: "goal" }, T0);
    const f: Fence = { runId: "r-reject", epoch: (await claim(store, "r-reject", 0, "w", T0))! };
    const intent = await store.writes.journalIntentRow(f, 0, T0);
    const first = await store.writes.journalReject(f, intent, { rejection: { code: "A", message: "first" } });
    await store.writes.journalReject(f, first, { rejection: { code: "B", message: "second" } });
    const { journal } = await store.reads.loadHistory("r-reject");
    assert.deepEqual(journal[0].rejections, [{ code: "A", message: "first" }, {
      code: "B",
      message: "second",
    }]);
  });

  await t.step("heartbeat() refreshes the lease under the current epoch", async () => {
    await store.leases.createRun({ runId: "r-hb", agent: "provision", goal: "goal" }, T0);
    const f: Fence = { runId: "r-hb", epoch: (await claim(store, "r-hb", 0, "w", T0))! };
    assert.equal(await store.writes.heartbeat(f, at(7)), true);
    const run = await store.reads.getRun("r-hb");
    assert.equal(new Date(run!.heartbeat_at!).getTime(), at(7).getTime());
  });
}

Deno.test("Store on PGlite keeps every promise of the fenced protocol", async (t) => {
  const store = new Store(await openTestPglite());
  try {
    await store.applySchema();
    await store.checkSchema();
    await storeCases(t, store);
  } finally {
    await store.client.close();
  }
});

pgTest("Store on PostgreSQL keeps every promise of the fenced protocol", async (pg, t) => {
  await pg.store.checkSchema();
  await storeCases(t, pg.store);
});

Deno.test("checkSchema() says how to create the tables when they are missing", async () => {
  const store = new Store(await openTestPglite());
  try {
    await assert.rejects(store.checkSchema(), (e: Error & { code?: string }) => {
      assert.equal(e.code, "SCHEMA_MISSING");
      assert.match(e.message, /deno task migrate/);
      return true;
    });
  } finally {
    await store.client.close();
  }
});

Deno.test("openPglite() refuses a directory another handle holds, naming the holder's pid", async () => {
  const dir = await Deno.makeTempDir();
  const first = await openPglite(`${dir}/db`, { template: await testTemplate() });
  try {
    await assert.rejects(openPglite(`${dir}/db`), (e: Error & { code?: string }) => {
      assert.equal(e.code, "DATA_DIR_LOCKED");
      assert.match(e.message, new RegExp(`in use by pid ${Deno.pid}`));
      return true;
    });
  } finally {
    await first.close();
    await Deno.remove(dir, { recursive: true });
  }
});
