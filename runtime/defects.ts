/**
 * Planted defects: test seams that break one promise of the runtime on
 * purpose, so a test can prove the fuzzer (`harness/fuzz.ts`) finds the bug.
 * Every field is off by default; production code never sets one. They are
 * carried in {@link WorkerDeps} and in the {@link Store} (no module-level state).
 *
 * @module
 */

/** Bugs a test may plant in one worker. Every field defaults to off. */
export interface PlantedDefects {
  /** The tool confirm is written without the fence: a stale worker can confirm a call. */
  confirmSkipsFence?: boolean;
  /** The heartbeat renews the lease whatever the epoch: a fenced worker keeps its lease alive. */
  heartbeatIgnoresFence?: boolean;
  /** Re-sends (attempt 2 and later) carry a key built from the attempt number, not `<run_id>:<seq>`. */
  keyFromAttempt?: boolean;
  /** Replaying a confirmed decision asks the model again, a request no journal row counts. */
  replayAsksModel?: boolean;
}
