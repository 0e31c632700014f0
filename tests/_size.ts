/**
 * How large a long proof runs. `deno task test` runs each at its suite size, which keeps the whole suite
 * within its time on a 2-core machine; `deno task test:proofs` sets `TEST_PROOFS=full` and runs the proof
 * files alone at their full size. CI (`.ci/run`) runs both. A size a test takes from its own variable
 * (`HOSTS_RUNS=...`) wins over either.
 *
 * @module
 */

/** Whether this run is the proofs at full size (`TEST_PROOFS=full`). */
const FULL_PROOFS: boolean = Deno.env.get("TEST_PROOFS") === "full";

/** `full` under `TEST_PROOFS=full`, else `suite`. */
export function proofSize(suite: number, full: number): number {
  return FULL_PROOFS ? full : suite;
}
