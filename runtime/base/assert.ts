/**
 * Assertions: the invariants the runtime keeps, checked where they must
 * hold, in production code as in tests. A broken one is a bug of ours, never
 * an input: {@link invariant} throws an {@link InvariantError} that names the
 * run and what was found, the run's worker turn ends there (the run driver
 * does not know the error, so it lets the run go with the message on it, as
 * for any error it cannot classify), and nothing goes on from a state it
 * cannot trust. Each check is a comparison or two: cheap enough to leave on.
 *
 * @module
 */

import { type CodeOf, RuntimeError } from "./errors.ts";

/** An invariant of the runtime did not hold: a bug, reported with the run it was found in. */
export class InvariantError extends RuntimeError {
  /** Always `INVARIANT_BROKEN`. */
  declare readonly code: CodeOf<"InvariantError">;
  /** The run whose state broke it. */
  readonly runId: string;
  /** Creates the error for run `runId`: `what` says which invariant and the values found. */
  constructor(runId: string, what: string) {
    super(
      "INVARIANT_BROKEN",
      `Invariant broken in run ${runId}: ${what} (a bug in agent-runtime; please report it)`,
    );
    this.name = "InvariantError";
    this.runId = runId;
  }
}

/**
 * Throws an {@link InvariantError} for run `runId` unless `holds`. `what`
 * says what should hold and what was found; a function is called only when
 * it does not hold, so building the text costs nothing on the normal path.
 */
export function invariant(holds: boolean, runId: string, what: string | (() => string)): asserts holds {
  if (!holds) throw new InvariantError(runId, typeof what === "function" ? what() : what);
}
