import assert from "node:assert/strict";
import { BudgetError, ToolCallReservation } from "./budget.ts";
import { InvariantError } from "../base/assert.ts";

/** A run's spend with `attempts` tool requests made, one row each, under `toolCalls`. */
function spend(attempts: number[], toolCalls?: number) {
  return {
    budget: toolCalls === undefined ? undefined : { toolCalls },
    effects: new Map(attempts.map((a, i) => [i, { attempts: a }])),
  };
}

Deno.test("a reservation holds a step's unsent calls and is used up call by call; a retry may not take theirs", () => {
  const r = new ToolCallReservation("run-b");
  const s = spend([1], 4);
  r.reserve(s, 3);
  assert.equal(r.held, 3);
  r.take(s, true); // the first call's first request uses its own reservation
  assert.equal(r.held, 2);
  s.effects.set(1, { attempts: 1 }); // its intent row applied: 2 made, 2 held
  assert.throws(() => r.take(s, false), BudgetError, "a retry would leave no room for the calls held");
  r.take(s, true);
  r.release();
  assert.equal(r.held, 0);
  assert.throws(
    () => r.reserve(s, 4),
    (e: BudgetError) => /2 tool requests made, the step asks for 4/.test(e.message),
  );
  assert.equal(r.held, 0, "a refused reservation holds nothing");
});

Deno.test("each invariant of the reservation fires as a bug naming the run, never as a budget refusal", async (t) => {
  await t.step("a step reserving a negative or fractional number of calls", () => {
    for (const calls of [-1, 1.5, Number.NaN]) {
      assert.throws(
        () => new ToolCallReservation("run-i").reserve(spend([], 5), calls),
        (e: InvariantError) =>
          e instanceof InvariantError && e.runId === "run-i" && /reserves/.test(e.message),
      );
    }
  });
  await t.step(
    "what was spent and what is held past the ceiling, found on entry (rows changed under it)",
    () => {
      const r = new ToolCallReservation("run-j");
      const s = spend([0], 3);
      r.reserve(s, 3);
      s.effects.set(0, { attempts: 2 }); // two requests the reservation never let out
      assert.throws(
        () => r.take(s, true),
        (e: InvariantError) =>
          e instanceof InvariantError && !(e instanceof BudgetError) &&
          e.message === "Invariant broken in run run-j: 2 tool requests made and 3 held pass the ceiling 3 " +
              "before a request (a bug in agent-runtime; please report it)",
      );
      assert.throws(
        () => r.reserve(s, 1),
        InvariantError,
        "a new reservation checks what the last one left too",
      );
    },
  );
  await t.step("with no ceiling, any number is held and nothing can pass it", () => {
    const r = new ToolCallReservation("run-k");
    const s = spend([100]);
    r.reserve(s, 50);
    r.take(s, true);
    assert.equal(r.held, 49);
  });
});
