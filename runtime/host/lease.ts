/**
 * Leases: a process renews the lease of every run it holds each
 * `heartbeatMs`, one module for both paths. The worker host holds many runs
 * and renews them all (and its own row) in one statement; the single-run path
 * is a holder of one run with the one-run statement ({@link keepLease}).
 *
 * A refused renewal (the run was taken over, closed or cancelled) aborts that
 * run's signal, which cuts off its model or tool request in flight; a
 * database unreachable for longer than the lease (its renewals failing, or
 * one renewal not answering at all) aborts every run held:
 * whoever takes a run next must not meet this process still acting on it.
 * Either way the run is not renewed again. While a crash point stalls the
 * process no beat goes out, which is what makes a frozen worker's runs
 * stealable.
 *
 * @module
 */

import { type Clock, startTimer } from "../base/clock.ts";
import type { CrashPoints } from "../base/crashpoints.ts";
import type { ProcessDeps } from "../run/deps.ts";
import { describeError, FencedError } from "../base/errors.ts";
import type { LogFields, Logger } from "../base/log.ts";
import type { Fence } from "../store/store.ts";

/** Options of a {@link LeaseKeeper}. */
export interface LeaseKeeperOptions {
  /** Times the beats and the lease. */
  clock: Clock;
  /** Gets `heartbeat-refused`, `heartbeat-failed` and `lease-lost`. */
  log: Logger;
  /** Read before each beat: while the process is parked at a stall point, no beat goes out. */
  crash: Pick<CrashPoints, "stalling">;
  /** The wait between the end of one beat and the next. */
  heartbeatMs: number;
  /** How long renewals may fail before every run held is given up. */
  leaseMs: number;
  /**
   * Renews the leases of `fences` (every run held, in the order taken), in
   * one statement: the runs whose renewal the database accepted, or one
   * answer for all of them. Throws when the database cannot be reached.
   */
  renew: (fences: readonly Fence[], now: Date) => Promise<readonly string[] | boolean>;
  /** Why the renewal of `fence` was refused: asked once per refused run. */
  refusal: (fence: Fence) => Promise<FencedError>;
  /** Called after each beat the database answered (the host's row is known to exist then). */
  onRenewed?: () => void;
  /** Who could not beat, the first fields of `heartbeat-failed`: `{ run }` for one run, `{ owner }` for a host. */
  subject: LogFields;
  /**
   * True: beat while no run is held too (a host's beat renews its own row).
   * Default false: the timer runs only while a run is held.
   */
  beatWhenIdle?: boolean;
}

interface Hold {
  readonly fence: Fence;
  readonly stop: AbortController;
  /** False once released, refused or lost: a beat on its way judges it no more. */
  held: boolean;
}

/**
 * The leases of the runs one process holds. One timer at a time, re-armed
 * after each beat ends (a slow database never has two beats in flight), and
 * none while no run is held unless the keeper beats when idle.
 */
export class LeaseKeeper {
  readonly #opts: LeaseKeeperOptions;
  readonly #holds = new Set<Hold>();
  #lastOkMs = 0;
  #started = false;
  #stopped = false;
  #cancel?: () => void;
  #beating?: Promise<boolean>;

  /** Takes the options; nothing beats before {@link LeaseKeeper.start}. */
  constructor(opts: LeaseKeeperOptions) {
    this.#opts = opts;
  }

  /** Runs held now. */
  get held(): number {
    return this.#holds.size;
  }

  /** Starts beating: now for a keeper that beats when idle, else with the first run held. */
  start(): this {
    if (this.#started) return this;
    this.#started = true;
    this.#lastOkMs = this.#opts.clock.now().getTime();
    this.#armIfDue();
    return this;
  }

  /**
   * Renews `fence` from the next beat on, until the returned function
   * releases it. A refused renewal aborts `stop` with the refusal; a lease
   * lost to an unreachable database aborts it with `STALLED`.
   */
  hold(fence: Fence, stop: AbortController): () => void {
    const hold: Hold = { fence, stop, held: true };
    this.#holds.add(hold);
    this.#armIfDue();
    return () => this.#drop(hold);
  }

  /**
   * Stops beating (a beat on its way is then ignored, whatever it meets).
   * Resolves once that beat has ended, so a statement that follows (a
   * release) does not race it.
   */
  stop(): Promise<void> {
    this.#stopped = true;
    this.#cancel?.();
    this.#cancel = undefined;
    return this.#beating ? this.#beating.then(() => {}) : Promise.resolve();
  }

  get #idle(): boolean {
    return this.#holds.size === 0 && !this.#opts.beatWhenIdle;
  }

  #armIfDue(): void {
    if (!this.#started || this.#stopped || this.#idle || this.#cancel || this.#beating) return;
    this.#cancel = startTimer(this.#opts.clock, this.#opts.heartbeatMs, async () => {
      this.#cancel = undefined;
      const beating = this.#beat();
      this.#beating = beating;
      const again = await beating;
      this.#beating = undefined;
      if (again) this.#armIfDue();
    });
  }

  #drop(hold: Hold): void {
    hold.held = false;
    this.#holds.delete(hold);
    if (this.#idle) {
      this.#cancel?.();
      this.#cancel = undefined;
    }
  }

  /** One beat; false once the keeper was stopped while it was on its way. */
  async #beat(): Promise<boolean> {
    const { clock, log } = this.#opts;
    // A frozen (stalled) process does not heartbeat either; that is what makes its runs stealable.
    if (this.#opts.crash.stalling) return true;
    const holds = [...this.#holds];
    // A renewal that hangs (a link cut under an open connection: the statement waits in TCP, it
    // does not fail) is not waited out past the lease: the runs are given up when the lease ends,
    // those taken while it was on its way too (no beat renews them while it hangs).
    const unanswered = startTimer(
      clock,
      Math.max(0, this.#lastOkMs + this.#opts.leaseMs - clock.now().getTime()) + 1,
      () => {
        if (!this.#stopped) {
          this.#lose([...this.#holds], clock.now().getTime() - this.#lastOkMs, "unanswered");
        }
      },
    );
    try {
      const accepted = await this.#opts.renew(holds.map((h) => h.fence), clock.now());
      if (this.#stopped) return false;
      this.#lastOkMs = clock.now().getTime();
      this.#opts.onRenewed?.();
      const renewed = typeof accepted === "boolean" ? undefined : new Set(accepted);
      for (const hold of holds) {
        if (!hold.held || (renewed ? renewed.has(hold.fence.runId) : accepted)) continue;
        const err = await this.#opts.refusal(hold.fence);
        // A run that ended while the heartbeat was on its way is not a refusal
        // worth a warning: by now it has been released.
        if (!hold.held) continue;
        log.warn("heartbeat-refused", {
          run: hold.fence.runId,
          epoch: hold.fence.epoch,
          reason: err.message,
        });
        this.#drop(hold);
        hold.stop.abort(err);
      }
    } catch (err) {
      if (this.#stopped) return false;
      const sinceMs = clock.now().getTime() - this.#lastOkMs;
      log.warn("heartbeat-failed", { ...this.#opts.subject, error: describeError(err), since_ms: sinceMs });
      if (sinceMs > this.#opts.leaseMs) this.#lose(holds, sinceMs, "failed");
    } finally {
      unanswered();
    }
    return true;
  }

  /** Gives up every run of `holds` still held: the lease could not be renewed for `sinceMs`. */
  #lose(holds: readonly Hold[], sinceMs: number, renewal: "failed" | "unanswered"): void {
    for (const hold of holds) {
      if (!hold.held) continue;
      this.#opts.log.error("lease-lost", { run: hold.fence.runId, since_ms: sinceMs, renewal });
      this.#drop(hold);
      hold.stop.abort(new FencedError("STALLED", `The lease could not be renewed for ${sinceMs}ms`));
    }
  }
}

/**
 * Keeps the lease of the one run a worker drives by itself (`claimAndDrive`):
 * the one-run heartbeat statement every `heartbeatMs`, from now until
 * `stop()`.
 */
export function keepLease(
  deps: Pick<ProcessDeps, "store" | "clock" | "log" | "crash" | "heartbeatMs" | "leaseMs">,
  fence: Fence,
  stop: AbortController,
): { stop(): void } {
  const { store } = deps;
  const keeper = new LeaseKeeper({
    clock: deps.clock,
    log: deps.log,
    crash: deps.crash,
    heartbeatMs: deps.heartbeatMs,
    leaseMs: deps.leaseMs,
    // The keeper holds this run only: one answer for it.
    renew: (fences, now) => store.writes.heartbeat(fences[0], now),
    refusal: (f) => store.writes.refusal(f, "heartbeat"),
    subject: { run: fence.runId },
  }).start();
  keeper.hold(fence, stop);
  return { stop: () => void keeper.stop() };
}
