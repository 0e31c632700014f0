import assert from "node:assert/strict";
import { buildTranscript, callId, UNKNOWN_OUTCOME } from "./history.ts";
import type { SettledTranscript } from "../run/tallied.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";
import type { Decision, JournalRow, SideEffectRow } from "../store/store.ts";

const RUN = "h-1";
const pay = (cents: number) => ({ tool: "pay", args: { cents } });

function state(journal: JournalRow[], effects: SideEffectRow[] = []) {
  return {
    goal: "Pay the bills.",
    journal: new Map(journal.map((j) => [j.seq, j])),
    effects: new Map(effects.map((e) => [e.seq, e])),
  };
}

Deno.test("buildTranscript() starts with the instructions and the goal", () => {
  assert.deepEqual(buildTranscript(state([]), 0, "Be careful."), [
    { role: "system", text: "Be careful." },
    { role: "user", text: "Pay the bills." },
  ]);
});

Deno.test("buildTranscript() shows each decided call with its outcome, matched by a call id derived from the step", async (t) => {
  const cases: Array<[string, Partial<SideEffectRow> | undefined, Record<string, unknown>]> = [
    ["confirmed: the result", { result: { paid: 5 }, remote: "created" }, {
      failed: false,
      result: { paid: 5 },
    }],
    ["a null result is a result", { result: null, remote: "already_done" }, { failed: false, result: null }],
    ["reconciled: the result found", { result: "found", remote: "reconciled" }, {
      failed: false,
      result: "found",
    }],
    [
      "flagged, then resolved by a person: the result given",
      { result: { by: "hand" }, remote: "resolved", resolved_by: "ops", error: "flagged: unknown outcome" },
      { failed: false, result: { by: "hand" } },
    ],
    [
      "failed: the tool's error",
      { status: "failed", error: "TOOL_PERMANENT: card declined" },
      { failed: true, error: "TOOL_PERMANENT: card declined" },
    ],
    [
      "denied by a person: the denial",
      { status: "failed", error: "denied by alice: too expensive", attempts: 0 },
      { failed: true, error: "denied by alice: too expensive" },
    ],
    [
      "flagged, then marked failed by a person: the reason",
      { status: "failed", error: "marked failed by ops: charged twice", remote: null },
      { failed: true, error: "marked failed by ops: charged twice" },
    ],
    [
      "flagged and unresolved: unknown",
      { status: "flagged", error: "no idempotency key" },
      { failed: true, error: UNKNOWN_OUTCOME },
    ],
    ["at intent: unknown", { status: "intent", confirmed_at: null }, {
      failed: true,
      error: UNKNOWN_OUTCOME,
    }],
    ["never sent (no row): unknown", undefined, { failed: true, error: UNKNOWN_OUTCOME }],
  ];
  for (const [name, row, outcome] of cases) {
    await t.step(name, () => {
      const effects = row ? [effectRow(RUN, 3, pay(5), row)] : [];
      const transcript = buildTranscript(state([journalRow(RUN, 3, pay(5))], effects), 4, "i");
      assert.deepEqual(transcript.slice(2), [
        { role: "assistant", calls: [{ id: "call_3", name: "pay", args: { cents: 5 } }] },
        { role: "tool", callId: "call_3", name: "pay", ...outcome },
      ]);
    });
  }
});

Deno.test("buildTranscript() keeps only the steps before the one being decided, in order, skipping gaps", () => {
  const done: Decision = { done: true, message: "earlier answer" };
  const journal = [
    journalRow(RUN, 0, pay(1)),
    journalRow(RUN, 2, pay(2)), // step 1 has no row
    journalRow(RUN, 3, done), // not a call: nothing to show
    journalRow(RUN, 4, pay(4)), // the step being decided has a decision already: not shown
  ];
  const effects = [effectRow(RUN, 0, pay(1), { result: 1 }), effectRow(RUN, 2, pay(2), { result: 2 })];
  const ids = buildTranscript(state(journal, effects), 4, "i").flatMap((m) =>
    m.role === "assistant" ? m.calls.map((c) => c.id) : m.role === "tool" ? [m.callId] : []
  );
  assert.deepEqual(ids, ["call_0", "call_0", "call_2", "call_2"]);
  assert.equal(callId(7), "call_7");
});

Deno.test("buildTranscript() ends with why each answer for this step was refused, in order", () => {
  const journal = [
    journalRow(RUN, 0, pay(1)),
    journalRow(RUN, 1, null, [
      { code: "UNKNOWN_TOOL", message: 'Unknown tool "refund". Available tools: pay' },
      { code: "BAD_ARGS", message: "Arguments for pay do not fit its schema: cents must be a number" },
    ]),
  ];
  const transcript = buildTranscript(state(journal, [effectRow(RUN, 0, pay(1), { result: 1 })]), 1, "i");
  const again = "Answer again with calls to listed tools, or with no tool call when the goal is complete.";
  assert.deepEqual(transcript.slice(-2), [
    {
      role: "user",
      text:
        `Your previous answer was refused (UNKNOWN_TOOL): Unknown tool "refund". Available tools: pay. ${again}`,
    },
    {
      role: "user",
      text:
        "Your previous answer was refused (BAD_ARGS): Arguments for pay do not fit its schema: cents must be " +
        `a number. ${again}`,
    },
  ]);
  assert.equal(transcript.length, 6, "system, goal, the call, its result, two refusals");
});

Deno.test("buildTranscript() keeps the settled steps for the next step and builds again only what may change", () => {
  const s: ReturnType<typeof state> & { transcript?: SettledTranscript } = state(
    [journalRow(RUN, 0, pay(1)), journalRow(RUN, 1, pay(2))],
    [
      effectRow(RUN, 0, pay(1), { result: 1 }),
      effectRow(RUN, 1, pay(2), { status: "intent", confirmed_at: null }),
    ],
  );
  const first = buildTranscript(s, 2, "i");
  // Step 0 settled is kept; step 1, its call's outcome unknown, is not.
  assert.deepEqual([s.transcript?.upTo, s.transcript?.messages.length], [1, 4]);
  assert.deepEqual(first.at(-1), {
    role: "tool",
    callId: "call_1",
    name: "pay",
    failed: true,
    error: UNKNOWN_OUTCOME,
  });
  // The call settles, the next step is decided: what is built is what a worker that just read the rows builds.
  s.effects.set(1, effectRow(RUN, 1, pay(2), { result: 2 }));
  s.journal.set(2, journalRow(RUN, 2, pay(3)));
  s.effects.set(2, effectRow(RUN, 2, pay(3), { result: 3 }));
  const later = buildTranscript(s, 3, "i");
  assert.deepEqual(later, buildTranscript(state([...s.journal.values()], [...s.effects.values()]), 3, "i"));
  assert.deepEqual([s.transcript?.upTo, s.transcript?.messages.length], [3, 8]);
  // A new array each time: what a planner or a history hook does to it leaves the kept steps alone.
  later.length = 0;
  assert.equal(buildTranscript(s, 3, "i").length, 8);
  // Other instructions: built anew.
  assert.deepEqual(buildTranscript(s, 3, "j")[0], { role: "system", text: "j" });
});

/** A run whose steps 0 to n - 1 each made one call that was confirmed. */
function settledRun(n: number) {
  const journal: JournalRow[] = [];
  const effects: SideEffectRow[] = [];
  for (let seq = 0; seq < n; seq++) {
    journal.push(journalRow(RUN, seq, pay(seq)));
    effects.push(effectRow(RUN, seq, pay(seq), { result: seq }));
  }
  return { journal, effects };
}

Deno.test("buildTranscript() with historySteps shows the instructions, the goal, the last settled steps whole, and every open step", () => {
  const { journal, effects } = settledRun(6);
  // Step 6 decided, its call still at intent: open, so shown whatever the window.
  journal.push(journalRow(RUN, 6, pay(6)));
  effects.push(effectRow(RUN, 6, pay(6), { status: "intent", confirmed_at: null }));
  const s: ReturnType<typeof state> & { transcript?: SettledTranscript } = state(journal, effects);
  const ids = (t: ReturnType<typeof buildTranscript>) =>
    t.slice(2).map((m) =>
      m.role === "assistant" ? `a${m.calls[0].id}` : m.role === "tool" ? m.callId : m.role
    );
  const windowed = buildTranscript(s, 7, "i", 2);
  assert.deepEqual(windowed.slice(0, 2), [{ role: "system", text: "i" }, {
    role: "user",
    text: "Pay the bills.",
  }]);
  assert.deepEqual(ids(windowed), ["acall_4", "call_4", "acall_5", "call_5", "acall_6", "call_6"]);
  // The kept steps stay whole: without the window, the same state shows them all.
  assert.equal(buildTranscript(s, 7, "i").length, 2 + 7 * 2);
  assert.deepEqual(s.transcript?.starts, [2, 4, 6, 8, 10, 12]);
  // A window wider than the run shows it all.
  assert.equal(buildTranscript(s, 7, "i", 50).length, 2 + 7 * 2);
});

Deno.test("buildTranscript() with historySteps is the same size at step 10 and at step 1,000, and kept steps are built once", () => {
  const short = settledRun(10);
  const long = settledRun(1_000);
  const a = state(short.journal, short.effects);
  const b: ReturnType<typeof state> & { transcript?: SettledTranscript } = state(long.journal, long.effects);
  assert.equal(buildTranscript(a, 10, "i", 5).length, buildTranscript(b, 1_000, "i", 5).length);
  assert.equal(buildTranscript(b, 1_000, "i", 5).length, 2 + 5 * 2);
  // The next step adds its own messages to what was kept; the window moves with it.
  b.journal.set(1_000, journalRow(RUN, 1_000, pay(1_000)));
  b.effects.set(1_000, effectRow(RUN, 1_000, pay(1_000), { result: 1_000 }));
  const next = buildTranscript(b, 1_001, "i", 5);
  assert.equal(b.transcript?.messages.length, 2 + 1_001 * 2);
  assert.deepEqual(next.at(-1), {
    role: "tool",
    callId: "call_1000",
    name: "pay",
    failed: false,
    result: 1_000,
  });
  assert.equal(next.length, 2 + 5 * 2);
});
