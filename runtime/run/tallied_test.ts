import assert from "node:assert/strict";
import { EffectRows, JournalRows } from "./tallied.ts";
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
