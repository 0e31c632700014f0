/**
 * The seven crash points. `CRASH_AT` names one and `CRASH_SEQ` the step it
 * fires on; `STALL_AT` with `STALL_MS` parks the worker there instead. The
 * call sites sit on the normal path, so an injected run runs the same code as
 * a production run.
 *
 * @module
 */

import type { Clock } from "./clock.ts";
import { RuntimeError } from "./errors.ts";
import type { Logger } from "./log.ts";

/** Every crash point, in the order a step passes them. */
export const CRASH_POINTS = [
  "before_decide",
  "after_decide_before_journal",
  "after_decide",
  "before_intent",
  "after_intent",
  "after_call",
  "after_confirm",
] as const;

/** The name of a crash point. */
export type CrashPoint = typeof CRASH_POINTS[number];

/** True when `name` is one of {@link CRASH_POINTS}. */
export function isCrashPoint(name: string): name is CrashPoint {
  return (CRASH_POINTS as readonly string[]).includes(name);
}

/** Where (if anywhere) to crash or stall. */
export interface CrashPlan {
  /** Crash here. */
  crashAt?: CrashPoint;
  /** On this step (default 0). */
  crashSeq: number;
  /** Stall here instead (a worker that freezes, for steal tests). */
  stallAt?: CrashPoint;
  /** On this step (default: `crashSeq`). */
  stallSeq?: number;
  /** For this long. */
  stallMs: number;
}

/**
 * Where a simulated kill may land: a named crash point, or (the fuzzer) a
 * boundary of the n-th store statement or remote request, e.g. `stmt:17:before`.
 */
export type KillPoint = CrashPoint | `${"stmt" | "model" | "cloud"}:${number}:${"before" | "after"}`;

/**
 * Thrown by a simulated `kill -9` in the harness. Nothing may catch it except
 * the harness: it stands for a process that no longer exists.
 */
export class SimulatedKill extends RuntimeError {
  /** The crash point (or fuzzer boundary) it fired at. */
  readonly point: KillPoint;
  /** The step it fired on. */
  readonly seq: number;
  /** Creates the marker for a simulated kill at `point`. */
  constructor(point: KillPoint, seq: number) {
    super("SIMULATED_KILL", `Simulated kill -9 at ${point} seq=${seq}`);
    this.name = "SimulatedKill";
    this.point = point;
    this.seq = seq;
  }
}

/** How a crash happens: a real process kills itself, the harness throws. */
export type KillFn = (point: CrashPoint, seq: number) => Promise<never>;
/** How a stall happens: by default a sleep on the worker's clock. */
export type StallFn = (point: CrashPoint, seq: number) => Promise<void>;

/** Kills this process as `kill -9` does: no `finally`, no unload, no flush. */
export const killProcess: KillFn = () => {
  Deno.kill(Deno.pid, "SIGKILL");
  // SIGKILL is not catchable; this promise is never reached in practice.
  return new Promise<never>(() => {});
};

// Already settled, and never settled otherwise: shared by every point passed without incident.
const PASSED: Promise<void> = Promise.resolve();

/** Crash points bound to a plan. One instance per worker incarnation. */
export class CrashPoints {
  readonly #plan: CrashPlan;
  readonly #kill: KillFn;
  readonly #stall: StallFn;
  readonly #log: Logger;
  #stalled = false;
  #stalling = false;

  /** Binds a plan to a kill function, a stall function and a logger. */
  constructor(plan: CrashPlan, deps: { log: Logger; clock: Clock; kill?: KillFn; stall?: StallFn }) {
    this.#plan = plan;
    this.#log = deps.log;
    this.#kill = deps.kill ?? killProcess;
    this.#stall = deps.stall ?? ((_p, _s) => deps.clock.sleep(plan.stallMs));
  }

  /** A plan that never fires. */
  static none(deps: { log: Logger; clock: Clock }): CrashPoints {
    return new CrashPoints({ crashSeq: 0, stallMs: 0 }, deps);
  }

  /** True while the worker is parked at a stall point: a frozen worker does not heartbeat either. */
  get stalling(): boolean {
    return this.#stalling;
  }

  /** Passes the point `point` of step `seq`: dies or stalls there if the plan says so. */
  hit(point: CrashPoint, seq: number): Promise<void> {
    // Passed six times a step: a point the plan does not name costs no promise of its own (#11).
    if (this.#plan.crashAt !== point && this.#plan.stallAt !== point) return PASSED;
    return this.#fire(point, seq);
  }

  async #fire(point: CrashPoint, seq: number): Promise<void> {
    const plan = this.#plan;
    if (plan.crashAt === point && plan.crashSeq === seq) {
      this.#log.warn("crash", { point, seq, action: "kill -9" });
      await this.#kill(point, seq);
    }
    if (!this.#stalled && plan.stallAt === point && (plan.stallSeq ?? plan.crashSeq) === seq) {
      // A stall happens once per process: a frozen worker that wakes carries on.
      this.#stalled = true;
      this.#log.warn("stall", { point, seq, stall_ms: plan.stallMs });
      this.#stalling = true;
      try {
        await this.#stall(point, seq);
      } finally {
        this.#stalling = false;
      }
      this.#log.warn("stall-woke", { point, seq });
    }
  }
}
