/**
 * Conversations (`conversations.ts`), called directly on PGlite and
 * PostgreSQL: a send numbers its message after the goal, and a repeated id
 * (even two sends racing) is one message; an answer marks its message
 * answered under the fence and leaves the run waiting until its idle limit,
 * going on (a message came meanwhile) or done (closed while it worked); an
 * idle end happens only when no message came since, and only at the fence; a
 * close ends an idle conversation at once; a memo's value is written once and
 * then replayed. Time is a ManualClock.
 */

import assert from "node:assert/strict";
import { pgTest } from "../../tests/_pg.ts";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { claim, writeDecision } from "../../harness/direct_writes.ts";
import postgres from "npm:postgres@3.4.9";
import { ManualClock } from "../base/clock.ts";
import { openPostgres } from "./postgres.ts";
import type { Fence } from "./rows.ts";
import { Store } from "./store.ts";

const IDLE_MS = 60_000;

bothStoresTest("conversations: sends, answers, idle ends, closes and memos", async (store, t) => {
  const clock = new ManualClock(Date.UTC(2026, 0, 1));
  const chat = store.conversations;
  const later = (ms: number) => new Date(clock.now().getTime() + ms);
  /** A new conversation (goal "hello"), claimed once: its fence. */
  const started = async (runId: string): Promise<Fence> => {
    await store.leases.createRun(
      { runId, agent: "chat", goal: "hello", conversationIdleMs: IDLE_MS },
      clock.now(),
    );
    return { runId, epoch: (await claim(store, runId, 0, "w", clock.now()))! };
  };
  const send = (runId: string, messageId: string, text: string) =>
    chat.send({ runId, messageId, text }, clock.now());
  /** Answers `message` with a final answer decided at step `seq`, as a worker does. */
  const answer = async (f: Fence, message: number, seq: number, text: string) => {
    await writeDecision(store, f, seq, { decision: { done: true, message: text } }, clock.now());
    const a = { message, answerSeq: seq, answer: text, answeredAt: clock.now(), idleUntil: later(IDLE_MS) };
    return await chat.answer(f, a);
  };
  const runOf = async (runId: string) => {
    const r = await store.reads.getRun(runId);
    return [r?.status, r?.message_count, r?.idle_since, r?.wake_at];
  };

  await t.step("send() numbers messages after the goal, and a repeated id is the one message", async () => {
    await started("c-send");
    const first = await send("c-send", "m1", "one");
    assert.deepEqual([first?.message.seq, first?.message.text, first?.duplicate], [1, "one", false]);
    assert.deepEqual(await send("c-send", "m1", "one, retried"), {
      message: first!.message,
      duplicate: true,
    });
    assert.equal((await send("c-send", "m2", "two"))?.message.seq, 2);
    const stored = await chat.messagesAfter("c-send", -1);
    assert.deepEqual(stored.map((m) => [m.seq, m.message_id, m.text]), [[1, "m1", "one"], [2, "m2", "two"]]);
    assert.deepEqual((await chat.messagesAfter("c-send", 1)).map((m) => m.seq), [2]);
    assert.equal((await store.reads.getRun("c-send"))?.message_count, 3, "the goal and two messages");
    await store.leases.createRun({ runId: "c-task", agent: "chat", goal: "g" }, clock.now());
    assert.equal(await send("c-task", "m1", "x"), undefined, "a run that is no conversation takes none");
  });

  await t.step(
    "answer() marks the goal answered and leaves the run waiting until its idle limit",
    async () => {
      const f = await started("c-answer");
      await clock.advance(1_000);
      const answeredAt = clock.now();
      assert.deepEqual(await answer(f, 0, 0, "hi there"), { status: "waiting", messageCount: 1 });
      const [goal] = await chat.answers("c-answer", 0, 10);
      assert.deepEqual(
        [goal.seq, goal.text, goal.message_id, goal.answer_seq, goal.answered_at, goal.answer],
        [0, "hello", null, 0, answeredAt, "hi there"],
      );
      assert.deepEqual(await runOf("c-answer"), ["waiting", 1, answeredAt, later(IDLE_MS)]);
      assert.equal((await store.reads.getRun("c-answer"))?.output, "hi there");
      const stale = { runId: "c-answer", epoch: f.epoch - 1 };
      const a = { message: 0, answerSeq: 0, answer: "x", answeredAt, idleUntil: answeredAt };
      assert.equal(await chat.answer(stale, a), undefined, "an old epoch is refused");
    },
  );

  await t.step("a send wakes an idle run, and one that comes while it answers keeps it going", async () => {
    const f = await started("c-more");
    const t0 = clock.now();
    await answer(f, 0, 0, "hi");
    await clock.advance(5_000);
    await send("c-more", "m1", "one");
    assert.deepEqual(await runOf("c-more"), ["waiting", 2, null, clock.now()], "woken: its wake time is now");
    const g = { runId: "c-more", epoch: (await claim(store, "c-more", f.epoch, "w", clock.now()))! };
    await send("c-more", "m2", "two");
    assert.deepEqual(await answer(g, 1, 1, "to one"), { status: "running", messageCount: 3 });
    assert.deepEqual(await answer(g, 2, 2, "to two"), { status: "waiting", messageCount: 3 });
    const all = await chat.answers("c-more", 0, 10);
    const t1 = clock.now();
    const expected = [[0, 0, "hi", t0], [1, 1, "to one", t1], [2, 2, "to two", t1]];
    assert.deepEqual(all.map((m) => [m.seq, m.answer_seq, m.answer, m.answered_at]), expected);
    assert.deepEqual((await chat.answers("c-more", 1, 1)).map((m) => m.seq), [1], "from and limit");
  });

  await t.step(
    "endIdle() ends only a conversation no message reached since, and only at its fence",
    async () => {
      const f = await started("c-idle");
      await answer(f, 0, 0, "hi");
      await clock.advance(IDLE_MS - 1);
      assert.equal(
        await claim(store, "c-idle", f.epoch, "w", clock.now()),
        undefined,
        "not before its limit",
      );
      await clock.advance(1);
      const g = { runId: "c-idle", epoch: (await claim(store, "c-idle", f.epoch, "w", clock.now()))! };
      assert.equal(await chat.endIdle(f, 0, clock.now()), false, "an old epoch");
      await send("c-idle", "m1", "still there?");
      assert.equal(await chat.endIdle(g, 0, clock.now()), false, "a message came");
      await answer(g, 1, 1, "yes");
      await clock.advance(IDLE_MS);
      const h = { runId: "c-idle", epoch: (await claim(store, "c-idle", g.epoch, "w", clock.now()))! };
      assert.equal(await chat.endIdle(h, 1, clock.now()), true);
      assert.deepEqual(await runOf("c-idle"), ["done", 2, null, null]);
      assert.equal((await store.reads.getRun("c-idle"))?.heartbeat_at, null);
      assert.equal(await send("c-idle", "m2", "late"), undefined, "an ended conversation takes no message");
    },
  );

  await t.step("end() closes an idle conversation at once, a working one after its answer", async () => {
    await answer(await started("c-idle-end"), 0, 0, "hi");
    assert.equal((await chat.end("c-idle-end", clock.now()))?.status, "done");
    assert.deepEqual(await runOf("c-idle-end"), ["done", 1, null, null]);
    assert.equal(await chat.end("c-idle-end", clock.now()), undefined, "closed once");
    const f = await started("c-busy-end");
    const closed = await chat.end("c-busy-end", clock.now());
    assert.deepEqual([closed?.status, closed?.conversation_ended_at], ["running", clock.now()]);
    assert.equal(await chat.end("c-busy-end", clock.now()), undefined, "closed once, though still at work");
    assert.equal(await send("c-busy-end", "m1", "wait"), undefined, "a closed conversation takes no message");
    assert.deepEqual(await answer(f, 0, 0, "bye"), { status: "done", messageCount: 1 });
    assert.deepEqual(await runOf("c-busy-end"), ["done", 1, null, null]);
    await store.leases.createRun({ runId: "c-plain", agent: "chat", goal: "g" }, clock.now());
    assert.equal(await chat.end("c-plain", clock.now()), undefined, "not a conversation");
  });

  await t.step("a memo counts its attempts until its value is written, once; then it replays", async () => {
    const f = await started("c-memo");
    const first = await chat.memoIntent(f, "summary", clock.now());
    assert.deepEqual([first?.status, first?.attempts, first?.value], ["intent", 1, null]);
    await clock.advance(1_000);
    const second = await chat.memoIntent(f, "summary", clock.now());
    assert.deepEqual([second?.attempts, second?.intent_at], [2, clock.now()]);
    const value = { text: "short" };
    const confirmed = await chat.memoConfirm(f, "summary", value, clock.now());
    assert.deepEqual([confirmed?.status, confirmed?.value, confirmed?.confirmed_at], [
      "confirmed",
      value,
      clock.now(),
    ]);
    await clock.advance(1_000);
    const other = await chat.memoConfirm(f, "summary", { text: "other" }, clock.now());
    assert.equal(other, undefined, "written once");
    assert.deepEqual(await chat.memoIntent(f, "summary", clock.now()), confirmed, "replayed as it is");
    const g = { runId: "c-memo", epoch: (await claim(store, "c-memo", f.epoch, "w2", clock.now()))! };
    assert.equal(await chat.memoIntent(f, "other", clock.now()), undefined, "an old epoch");
    assert.deepEqual((await chat.memoIntent(g, "other", clock.now()))?.epoch, g.epoch);
  });
});

// Two sends of one id that both found no message yet: the later one's insert
// fails on the unique id (23505) once the earlier commits, and it is sent
// again to read the message the earlier one stored. A transaction holding the
// run's row makes both wait at once; the senders' application_name finds them.
pgTest("two sends of one id that race store one message, the later finding the earlier's", async (pg) => {
  const app = `race_${crypto.randomUUID().slice(0, 8)}`;
  const u = new URL(pg.url);
  u.searchParams.set("application_name", app);
  const senders = new Store(await openPostgres(u.toString(), { max: 2 }));
  const admin = postgres(pg.url, { max: 2, onnotice: () => {} });
  try {
    const now = new Date(Date.UTC(2026, 0, 1));
    await senders.leases.createRun(
      { runId: "race", agent: "chat", goal: "g", conversationIdleMs: IDLE_MS },
      now,
    );
    const holder = await admin.reserve();
    await holder.unsafe("begin");
    await holder.unsafe("select 1 from runs where run_id = 'race' for update");
    const msg = { runId: "race", messageId: "same", text: "hi" };
    const both = Promise.all([senders.conversations.send(msg, now), senders.conversations.send(msg, now)]);
    const waiting = `select count(*)::int as n from pg_stat_activity where application_name = $1
                       and wait_event_type = 'Lock'`;
    for (let tries = 0; (await admin.unsafe(waiting, [app]))[0].n < 2; tries++) {
      assert.ok(tries < 10_000, "both sends wait for the run's row");
    }
    await holder.unsafe("commit");
    holder.release();
    const sent = await both;
    assert.deepEqual(sent.map((s) => s?.duplicate).sort(), [false, true]);
    assert.deepEqual(sent[0]?.message, sent[1]?.message);
    assert.equal((await senders.reads.getRun("race"))?.message_count, 2, "the goal and one message");
  } finally {
    await admin.end({ timeout: 1 });
    await senders.client.close();
  }
});
