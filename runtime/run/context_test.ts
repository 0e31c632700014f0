import assert from "node:assert/strict";
import { applyMessages, applyRow } from "./context.ts";
import { InvariantError } from "../base/assert.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";
import type { JournalRow, SideEffectRow } from "../store/rows.ts";
import type { MessageRow } from "../store/store.ts";
import type { ConversationState } from "../agent/conversation_options.ts";

const CALL = { tool: "t", args: {} };

function state(runId = "run-a") {
  return {
    fence: { runId, epoch: 1 },
    journal: new Map<number, JournalRow>(),
    effects: new Map<number, SideEffectRow>(),
  };
}

Deno.test("applyRow() applies a row to its step, and each of its invariants fires as a bug naming the run", async (t) => {
  await t.step("a row of another run", () => {
    const s = state();
    assert.throws(
      () => applyRow(s, journalRow("run-b", 0, null)),
      (e: InvariantError) =>
        e instanceof InvariantError && e.runId === "run-a" && /a row of run run-b/.test(e.message),
    );
    assert.equal(s.journal.size, 0, "nothing applied");
  });
  await t.step("a row at a seq that is no whole number", () => {
    assert.throws(() => applyRow(state(), journalRow("run-a", -1, null)), InvariantError);
  });
  await t.step("a confirmed decision or result replaced by one that is not", () => {
    const s = state();
    applyRow(s, journalRow("run-a", 0, null));
    applyRow(s, journalRow("run-a", 0, { done: true, message: "ok" }));
    assert.equal(s.journal.get(0)?.status, "confirmed");
    assert.throws(
      () => applyRow(s, journalRow("run-a", 0, null)),
      /the confirmed decision at seq 0 replaced by one intent/,
    );
    applyRow(s, effectRow("run-a", 0, CALL, {}));
    assert.throws(
      () => applyRow(s, effectRow("run-a", 0, CALL, { status: "intent", confirmed_at: null })),
      /the confirmed tool call at seq 0 replaced by one intent/,
    );
    assert.equal(s.effects.get(0)?.status, "confirmed");
  });
});

function message(runId: string, seq: number): MessageRow {
  return {
    run_id: runId,
    seq,
    message_id: null,
    text: `message ${seq}`,
    created_at: new Date(0),
    answer_seq: null,
    answered_at: null,
  };
}

Deno.test("applyMessages() replaces the conversation, never the messages a copy holds, and its invariants fire", async (t) => {
  const conversing = () => {
    const conversation: ConversationState = {
      idleMs: 1000,
      messages: [message("run-a", 0)],
      turn: 0,
      memos: new Map(),
    };
    return { fence: { runId: "run-a", epoch: 1 }, conversation };
  };
  await t.step("an answer recorded and a message taken, the old state untouched", () => {
    const s = conversing();
    const before = s.conversation;
    const answered = { ...before.messages[0], answer_seq: 0, answered_at: new Date(5) };
    applyMessages(s, [answered]);
    applyMessages(s, [message("run-a", 1)], 1);
    assert.equal(s.conversation.turn, 1);
    assert.deepEqual(s.conversation.messages.map((m) => m.seq), [0, 1]);
    assert.equal(s.conversation.messages[0].answer_seq, 0);
    assert.equal(before.messages.length, 1, "the parked copy keeps its one message");
    assert.equal(before.messages[0].answer_seq, null, "and its row is not changed");
    assert.equal(before.turn, 0);
  });
  await t.step("a message that skips a seq", () => {
    assert.throws(
      () => applyMessages(conversing(), [message("run-a", 2)]),
      (e: InvariantError) => e.runId === "run-a" && /message 2 applied after 1 messages/.test(e.message),
    );
  });
  await t.step("a message of another run", () => {
    assert.throws(() => applyMessages(conversing(), [message("run-b", 1)]), InvariantError);
  });
  await t.step("a turn past the messages held", () => {
    assert.throws(() => applyMessages(conversing(), [], 1), /turn 1 of 1 messages/);
  });
  await t.step("a run that does not converse", () => {
    assert.throws(() => applyMessages({ fence: { runId: "run-a", epoch: 1 } }, []), /does not converse/);
  });
});
