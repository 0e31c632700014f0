import assert from "node:assert/strict";
import { EXIT_CODES } from "./exit_codes.ts";
import { exitCodeOf, WORKER_STATUSES, type WorkerStatus } from "../host/outcome.ts";

Deno.test("every exit code is a different small number, and each outcome's code is the one listed for it", async (t) => {
  const codes = Object.values(EXIT_CODES);
  assert.equal(new Set(codes).size, codes.length, "two meanings share a code");
  assert.ok(
    codes.every((c) => Number.isInteger(c) && c >= 0 && c < 64),
    "codes stay below the signals' 128+",
  );
  // Every status, so a new one does not compile until its code is chosen here.
  const expected: Record<WorkerStatus, number> = {
    done: EXIT_CODES.done,
    failed: EXIT_CODES.failed,
    waiting: EXIT_CODES.personMustAct,
    blocked: EXIT_CODES.personMustAct,
    cancelled: EXIT_CODES.cancelled,
    fenced: EXIT_CODES.fenced,
    stalled: EXIT_CODES.fenced,
    lost_claim: EXIT_CODES.fenced,
    moved: EXIT_CODES.fenced,
  };
  for (const status of WORKER_STATUSES) {
    await t.step(`${status}: ${expected[status]}`, () => {
      const outcome = { runId: "r", status, alreadyClosed: false, toolCalls: 0, llmCalls: 0 };
      assert.equal(exitCodeOf(outcome), expected[status]);
    });
  }
});
