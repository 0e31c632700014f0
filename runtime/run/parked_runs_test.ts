import assert from "node:assert/strict";
import { type ParkedRun, ParkedRuns } from "./parked.ts";
import type { JournalRow, SideEffectRow } from "../store/rows.ts";

/** A parked run of `steps` steps: a journal row and a tool call each (their contents are not read). */
function parkedRun(steps: number, epoch = 1): ParkedRun {
  const journal = new Map<number, JournalRow>();
  const effects = new Map<number, SideEffectRow>();
  for (let s = 0; s < steps; s++) {
    journal.set(2 * s, {} as JournalRow);
    effects.set(2 * s + 1, {} as SideEffectRow);
  }
  return { epoch, seq: 2 * steps, journal, effects };
}

Deno.test("parked runs are bounded by their rows as well as their count: the oldest go first", () => {
  const parked = new ParkedRuns(3, 100);
  parked.park("a", parkedRun(20)); // 40 rows
  parked.park("b", parkedRun(20)); // 80
  assert.deepEqual([parked.size, parked.rows], [2, 80]);
  // 40 more would make 120: the oldest, a, goes.
  parked.park("c", parkedRun(20));
  assert.deepEqual([parked.size, parked.rows], [2, 80]);
  assert.equal(parked.take("a"), undefined);
  // Taken, a run is no longer kept, nor counted.
  assert.equal(parked.take("b")?.seq, 40);
  assert.deepEqual([parked.size, parked.rows], [1, 40]);
  assert.equal(parked.take("b"), undefined);
  // The count bound: a fourth small run drops the oldest of four.
  for (const id of ["d", "e", "f"]) parked.park(id, parkedRun(1));
  assert.deepEqual([parked.size, parked.rows], [3, 6]);
  assert.equal(parked.take("c"), undefined, "c was the oldest of four");
});

Deno.test("a run parked again replaces its earlier rows; one alone past the row bound is not kept", () => {
  const parked = new ParkedRuns(10, 100);
  parked.park("a", parkedRun(10, 1));
  parked.park("a", parkedRun(30, 2));
  assert.deepEqual([parked.size, parked.rows], [1, 60]);
  assert.equal(parked.take("a")?.epoch, 2);
  parked.park("small", parkedRun(5));
  parked.park("huge", parkedRun(51)); // 102 rows: past the bound alone
  assert.deepEqual([parked.size, parked.rows], [0, 0]);
  assert.equal(parked.take("huge"), undefined, "its next take reads its history back");
});

Deno.test("a parked conversation counts its messages among its rows", () => {
  const parked = new ParkedRuns(10, 1_000);
  const messages = Array.from({ length: 7 }, () => ({}));
  parked.park("talk", {
    ...parkedRun(2),
    conversation: { idleMs: 1, messages, turn: 3, memos: new Map() },
  } as unknown as ParkedRun);
  assert.equal(parked.rows, 4 + 7);
});
