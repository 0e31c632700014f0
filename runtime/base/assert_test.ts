import assert from "node:assert/strict";
import { invariant, InvariantError } from "./assert.ts";
import { ERROR_CODES, RuntimeError } from "./errors.ts";

Deno.test("invariant() throws an InvariantError naming the run and what was found, and only builds the text when broken", () => {
  let built = 0;
  invariant(true, "r1", () => {
    built++;
    return "never";
  });
  assert.equal(built, 0);
  assert.throws(
    () => invariant(1 > 2, "r1", "one is more than two"),
    (e: InvariantError) =>
      e instanceof RuntimeError && e.code === "INVARIANT_BROKEN" && e.runId === "r1" &&
      e.message ===
        "Invariant broken in run r1: one is more than two (a bug in agent-runtime; please report it)",
  );
  assert.ok(ERROR_CODES.InvariantError.includes("INVARIANT_BROKEN"));
});
