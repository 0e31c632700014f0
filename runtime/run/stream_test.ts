import assert from "node:assert/strict";
import { ManualClock } from "../base/clock.ts";
import { PAYLOAD_TEXT_MAX } from "../store/notify.ts";
import type { JournalRow, RunRow, SideEffectRow } from "../store/store.ts";
import { decodeDelta, type Delta, encodeDelta, type StreamEvent, StreamFollower } from "./stream.ts";
import { DeltaPublisher } from "./deltas.ts";

const call = { runId: "r", epoch: 1, seq: 2, attempt: 1 };

function publisher(opts: { fail?: boolean } = {}) {
  const clock = new ManualClock(0);
  const sent: Delta[] = [];
  const pub = new DeltaPublisher({
    clock,
    call,
    batchMs: 30,
    notify: (payload) => {
      if (opts.fail) return Promise.reject(new Error("connection closed"));
      assert.ok(new TextEncoder().encode(payload).length < 8000, "a payload stays under PostgreSQL's limit");
      sent.push(decodeDelta(payload)!);
      return Promise.resolve();
    },
  });
  return { clock, sent, pub };
}

/** Lets the publisher's chained sends settle. */
const settle = () => new Promise((r) => setTimeout(r, 0));

Deno.test("DeltaPublisher sends the first piece at once, then gathers what arrives within its window", async () => {
  const { clock, sent, pub } = publisher();
  pub.push("He");
  await settle();
  assert.deepEqual(sent.map((d) => d.text), ["He"]);
  await clock.advance(10);
  pub.push("ll");
  pub.push("o");
  await settle();
  assert.equal(sent.length, 1, "within the window: held");
  await clock.advance(20);
  await settle();
  assert.deepEqual(sent.map((d) => [d.offset, d.text]), [[0, "He"], [2, "llo"]]);
  await clock.advance(100);
  pub.push(", world");
  await pub.close();
  assert.deepEqual(sent.map((d) => [d.offset, d.text]), [[0, "He"], [2, "llo"], [5, ", world"]]);
  assert.ok(sent.every((d) => d.runId === "r" && d.epoch === 1 && d.seq === 2 && d.attempt === 1));
  pub.push("after close");
  await settle();
  assert.equal(sent.length, 3, "nothing is sent after close");
});

Deno.test("DeltaPublisher cuts long text into payloads under the limit, never inside a surrogate pair", async () => {
  const { sent, pub } = publisher();
  const text = "a" + "😀".repeat(PAYLOAD_TEXT_MAX) + '\u0000"\\';
  pub.push(text);
  await pub.close();
  assert.ok(sent.length >= 3);
  assert.equal(sent.map((d) => d.text).join(""), text);
  let end = 0;
  for (const d of sent) {
    assert.equal(d.offset, end);
    assert.ok(!/[\uD800-\uDBFF]$/.test(d.text), "no piece ends with half a pair");
    end += d.text.length;
  }
});

Deno.test("DeltaPublisher stops at the first failed send and lets the answer go on", async () => {
  const { pub } = publisher({ fail: true });
  pub.push("one");
  await pub.close();
  assert.equal(pub.sends, 1);
});

Deno.test("decodeDelta refuses what is not a delta of this version", () => {
  const d: Delta = { runId: "r", epoch: 3, seq: 1, attempt: 2, offset: 5, text: "x" };
  assert.deepEqual(decodeDelta(encodeDelta(d)), d);
  for (
    const bad of [
      "",
      "null",
      "{}",
      '{"v":2,"r":"r","e":1,"s":0,"a":1,"o":0,"t":""}',
      '{"v":1,"r":"r","e":-1}',
    ]
  ) {
    assert.equal(decodeDelta(bad), undefined, bad);
  }
});

function runRow(status: RunRow["status"], epoch: number): RunRow {
  return { run_id: "r", status, epoch, error: null } as RunRow;
}
const delta = (epoch: number, attempt: number, offset: number, text: string, seq = 1): Delta => ({
  runId: "r",
  epoch,
  seq,
  attempt,
  offset,
  text,
});

Deno.test("StreamFollower: text of a later attempt resets the step, text of an earlier one is dropped", () => {
  const f = new StreamFollower("r");
  const events: StreamEvent[] = [];
  events.push(...f.rows(runRow("running", 1), [], []));
  events.push(...f.delta(delta(1, 1, 0, "first ")));
  events.push(...f.delta(delta(1, 1, 6, "try")));
  // The call was asked again in the same worker.
  events.push(...f.delta(delta(1, 2, 0, "second")));
  // A late piece of the superseded attempt: dropped.
  events.push(...f.delta(delta(1, 1, 9, " (late)")));
  events.push(...f.delta(delta(1, 2, 6, " try")));
  assert.deepEqual(events, [
    { type: "status", status: "running", epoch: 1, error: null, idle: false },
    { type: "delta", seq: 1, epoch: 1, attempt: 1, offset: 0, text: "first " },
    { type: "delta", seq: 1, epoch: 1, attempt: 1, offset: 6, text: "try" },
    { type: "reset", seq: 1, epoch: 1, attempt: 2, reason: "retry", dropped: 9 },
    { type: "delta", seq: 1, epoch: 1, attempt: 2, offset: 0, text: "second" },
    { type: "delta", seq: 1, epoch: 1, attempt: 2, offset: 6, text: " try" },
  ]);
});

Deno.test("StreamFollower: a takeover seen in the run's row resets at once, and the new worker's text follows without a second reset", () => {
  const f = new StreamFollower("r");
  f.rows(runRow("running", 1), [], []);
  f.delta(delta(1, 1, 0, "old worker's text"));
  const takeover = f.rows(runRow("running", 2), [], []);
  assert.deepEqual(takeover, [
    { type: "reset", seq: 1, epoch: 2, attempt: 0, reason: "takeover", dropped: 17 },
  ]);
  // The old worker (a stalled one, still writing): dropped. The new one's: told.
  assert.deepEqual(f.delta(delta(1, 1, 17, " more")), []);
  assert.deepEqual(f.delta(delta(2, 2, 0, "new")), [
    { type: "delta", seq: 1, epoch: 2, attempt: 2, offset: 0, text: "new" },
  ]);
});

Deno.test("StreamFollower: a takeover seen first in the text resets with the new epoch; a piece seen twice is told once", () => {
  const f = new StreamFollower("r");
  f.rows(runRow("running", 1), [], []);
  f.delta(delta(1, 1, 0, "abc"));
  assert.deepEqual(f.delta(delta(2, 2, 0, "xy")).map((e) => e.type), ["reset", "delta"]);
  assert.deepEqual(f.delta(delta(2, 2, 0, "xy")), []);
  assert.deepEqual(f.delta(delta(2, 2, 1, "yz")), [
    { type: "delta", seq: 1, epoch: 2, attempt: 2, offset: 2, text: "z" },
  ]);
  // No reset again when the run's row catches up with the epoch the text showed.
  assert.deepEqual(f.rows(runRow("running", 2), [], []), []);
});

Deno.test("StreamFollower tells each journaled event once, and no text for a step the journal decided", () => {
  const f = new StreamFollower("r");
  const journal = [
    { seq: 0, status: "confirmed", decision: { tool: "lookup", args: { q: "x" } } },
    { seq: 1, status: "intent", decision: null },
  ] as JournalRow[];
  const effects = [{ seq: 0, status: "intent", idempotency_key: "r:0", tool: "lookup" }] as SideEffectRow[];
  assert.deepEqual(f.rows(runRow("running", 1), journal, effects).map((e) => e.type), [
    "tool_calls",
    "status",
  ]);
  const confirmed = [{
    ...effects[0],
    status: "confirmed",
    result: { ok: 1 },
    error: null,
  }] as SideEffectRow[];
  assert.deepEqual(f.rows(runRow("running", 1), journal, confirmed).map((e) => e.type), ["tool_result"]);
  assert.deepEqual(f.rows(runRow("running", 1), journal, confirmed), [], "nothing new: nothing told");
  assert.equal(f.isNewCall(1), true);
  f.delta(delta(1, 1, 0, "The answ"));
  assert.equal(f.isNewCall(1), false);
  const answered = [journal[0], {
    seq: 1,
    status: "confirmed",
    decision: { done: true, message: "The answer" },
  }];
  assert.deepEqual(f.rows(runRow("done", 1), answered as JournalRow[], confirmed), [
    { type: "answer", seq: 1, text: "The answer" },
    { type: "status", status: "done", epoch: 1, error: null, idle: false },
  ]);
  assert.deepEqual(f.delta(delta(1, 1, 8, "er")), [], "text after the answer is journaled is dropped");
  assert.equal(f.ended, true);
  assert.deepEqual(
    f.delta({ ...delta(1, 1, 0, "x", 5), runId: "other" }),
    [],
    "another run's text is not ours",
  );
});

Deno.test("StreamFollower: a takeover after the answer was journaled tells the answer, with no reset", () => {
  const f = new StreamFollower("r");
  f.rows(runRow("running", 1), [], []);
  f.delta(delta(1, 1, 0, "the whole answer"));
  const journal = [{ seq: 1, status: "confirmed", decision: { done: true, message: "the whole answer" } }];
  assert.deepEqual(f.rows(runRow("done", 2), journal as JournalRow[], []), [
    { type: "answer", seq: 1, text: "the whole answer" },
    { type: "status", status: "done", epoch: 2, error: null, idle: false },
  ]);
});

const decided = (seq: number, decision: JournalRow["decision"]) =>
  ({ seq, status: "confirmed", decision }) as JournalRow;
const asking = (seq: number) => ({ seq, status: "intent", decision: null }) as JournalRow;
const callRow = (seq: number, status: SideEffectRow["status"]) =>
  ({ seq, status, idempotency_key: `r:${seq}`, tool: "t", result: null, error: null }) as SideEffectRow;

Deno.test("StreamFollower.mark: the lowest step whose rows may still change or appear", async (t) => {
  const cases: {
    name: string;
    reads: { journal: JournalRow[]; effects: SideEffectRow[] }[];
    mark: number;
  }[] = [
    { name: "nothing read yet", reads: [], mark: 0 },
    { name: "a decision being asked", reads: [{ journal: [asking(0)], effects: [] }], mark: 0 },
    {
      name: "a call decided and not yet written",
      reads: [{ journal: [decided(0, { tool: "t", args: {} })], effects: [] }],
      mark: 0,
    },
    {
      name: "a call sent, its outcome unknown",
      reads: [{ journal: [decided(0, { tool: "t", args: {} })], effects: [callRow(0, "intent")] }],
      mark: 0,
    },
    {
      name: "a call confirmed: the next decision comes after it",
      reads: [{ journal: [decided(0, { tool: "t", args: {} })], effects: [callRow(0, "confirmed")] }],
      mark: 1,
    },
    {
      name: "three calls at once, the middle one waiting for approval (no row) while the last is confirmed",
      reads: [{
        journal: [
          decided(0, { calls: [{ tool: "t", args: {} }, { tool: "t", args: {} }, { tool: "t", args: {} }] }),
        ],
        effects: [callRow(0, "confirmed"), callRow(2, "confirmed")],
      }],
      mark: 1,
    },
    {
      name: "a call waiting on its remote, read again from the mark, then settled from outside",
      reads: [
        {
          journal: [decided(0, { tool: "t", args: {} }), decided(1, { tool: "t", args: {} })],
          effects: [callRow(0, "confirmed"), callRow(1, "waiting")],
        },
        { journal: [decided(1, { tool: "t", args: {} })], effects: [callRow(1, "confirmed")] },
      ],
      mark: 2,
    },
    {
      name: "a flagged call stays until a person resolves it",
      reads: [{ journal: [decided(0, { tool: "t", args: {} })], effects: [callRow(0, "flagged")] }],
      mark: 0,
    },
    {
      name: "a failed call is final",
      reads: [{ journal: [decided(0, { tool: "t", args: {} })], effects: [callRow(0, "failed")] }],
      mark: 1,
    },
    {
      name: "a conversation that answered: every row final, the next message's decision at the next step",
      reads: [{
        journal: [decided(0, { tool: "t", args: {} }), decided(1, { done: true, message: "hi" })],
        effects: [callRow(0, "confirmed")],
      }],
      mark: 2,
    },
  ];
  for (const c of cases) {
    await t.step(c.name, () => {
      const f = new StreamFollower("r");
      for (const r of c.reads) f.rows(runRow("running", 1), r.journal, r.effects);
      assert.equal(f.mark, c.mark);
    });
  }
});

Deno.test("StreamFollower tells the status again when a conversation starts or stops waiting for its next message", () => {
  const f = new StreamFollower("r");
  const waiting = (idle: boolean) => ({ status: "waiting" as const, epoch: 1, error: null, idle });
  assert.deepEqual(f.rows(waiting(false), [], []), [
    { type: "status", status: "waiting", epoch: 1, error: null, idle: false },
  ]);
  assert.equal(f.waiting, true);
  assert.deepEqual(f.rows(waiting(true), [], []), [
    { type: "status", status: "waiting", epoch: 1, error: null, idle: true },
  ]);
  assert.deepEqual(f.rows(waiting(true), [], []), [], "no change: nothing told");
});

Deno.test("StreamFollower: text dropped for a slow consumer is a lagged reset, and what follows joins where it ended", () => {
  const f = new StreamFollower("r");
  f.rows(runRow("running", 1), [], []);
  f.delta(delta(1, 1, 0, "shown "));
  assert.deepEqual(f.gap({ seq: 1, epoch: 1, attempt: 1, end: 40 }), [
    { type: "reset", seq: 1, epoch: 1, attempt: 1, reason: "lagged", dropped: 6 },
  ]);
  assert.deepEqual(f.delta(delta(1, 1, 40, "tail")), [
    { type: "delta", seq: 1, epoch: 1, attempt: 1, offset: 40, text: "tail" },
  ]);
  // A gap of a superseded attempt, or of a step the journal decided, says nothing.
  f.delta(delta(1, 2, 0, "second"));
  assert.deepEqual(f.gap({ seq: 1, epoch: 1, attempt: 1, end: 50 }), []);
  f.rows(runRow("running", 1), [decided(1, { done: true, message: "second" })], []);
  assert.deepEqual(f.gap({ seq: 1, epoch: 1, attempt: 2, end: 6 }), []);
});
