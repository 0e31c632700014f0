import assert from "node:assert/strict";
import { EffectRows, JournalRows, rowsFrom } from "./tallied.ts";
import { llmCallsOf, toolCallsOf } from "./context.ts";
import { spendOf, spendOfRows } from "../agent/budget.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";

const RUN = "t-1";
const pay = (cents: number) => ({ tool: "pay", args: { cents } });

Deno.test("a worker's row maps keep the sums a scan of their rows gives, as rows are set, replaced and deleted", () => {
  const journal = JournalRows.of([
    { ...journalRow(RUN, 0, pay(1)), llm_attempts: 2, spent_tokens: 30 },
    { ...journalRow(RUN, 1, { calls: [pay(2), pay(3)] }), reserved_tokens: 5 },
  ]);
  const effects = EffectRows.of([effectRow(RUN, 0, pay(1), { attempts: 3 }), effectRow(RUN, 1, pay(2), {})]);
  const plain = () => ({ journal: new Map(journal), effects: new Map(effects) });
  const same = () => {
    assert.deepEqual(spendOfRows({ journal, effects }), spendOf(journal.values(), effects.values()));
    assert.equal(llmCallsOf({ journal }), llmCallsOf(plain()));
    assert.equal(toolCallsOf({ journal }), toolCallsOf(plain()));
  };
  same();
  assert.deepEqual(spendOfRows({ journal, effects }), { tokens: 35, modelCalls: 3, toolCalls: 4 });
  assert.equal(toolCallsOf({ journal }), 3);
  journal.set(1, { ...journalRow(RUN, 1, { calls: [pay(2), pay(3)] }), llm_attempts: 4, spent_tokens: 9 });
  journal.set(3, journalRow(RUN, 3, { done: true, message: "paid" }));
  effects.set(1, effectRow(RUN, 1, pay(2), { attempts: 2 }));
  same();
  journal.delete(0);
  effects.delete(0);
  same();
  journal.clear();
  effects.clear();
  assert.deepEqual(spendOfRows({ journal, effects }), { tokens: 0, modelCalls: 0, toolCalls: 0 });
});

Deno.test("rowsFrom gives a worker's rows at a seq and after in seq order, as a walk of every row does, looking up only those seqs", () => {
  const effects = EffectRows.of([5, 2, 9, 0, 7].map((seq) => effectRow(RUN, seq, pay(seq), {})));
  const journal = JournalRows.of([0, 2, 5, 7].map((seq) => journalRow(RUN, seq, pay(seq))));
  const seqs = (rows: { seq: number }[]) => rows.map((r) => r.seq);
  for (const from of [-1, 0, 3, 7, 9, 10]) {
    assert.deepEqual(seqs(rowsFrom(effects, from)), seqs(rowsFrom(new Map(effects), from)));
    assert.deepEqual(seqs(rowsFrom(journal, from)), seqs(rowsFrom(new Map(journal), from)));
  }
  assert.deepEqual(seqs(rowsFrom(effects, 3)), [5, 7, 9]);
  assert.deepEqual(seqs(rowsFrom(new Map(effects), 0)), [0, 2, 5, 7, 9]);
  // A deleted row is not given; the highest seq is only a bound.
  effects.delete(9);
  assert.deepEqual(seqs(rowsFrom(effects, 6)), [7]);
  assert.equal(effects.lastSeq, 9);
  effects.clear();
  assert.equal(effects.lastSeq, -1);
  assert.deepEqual(rowsFrom(effects, 0), []);

  // A long run: the rows past its settled steps are looked up by seq, never by walking them all.
  const long = EffectRows.of(Array.from({ length: 20_000 }, (_, seq) => effectRow(RUN, seq, pay(seq), {})));
  const looked: number[] = [];
  const get = long.get.bind(long);
  Object.assign(long, {
    values: () => assert.fail("rowsFrom walked every row"),
    get: (seq: number) => (looked.push(seq), get(seq)),
  });
  assert.deepEqual(seqs(rowsFrom(long, 19_998)), [19_998, 19_999]);
  assert.deepEqual(looked, [19_998, 19_999]);
});
