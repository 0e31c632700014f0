/**
 * The worker host: one process driving many runs at once. It takes runs
 * itself (one statement takes and claims up to its free slots, of the agents
 * it hosts only), drives each with the same fenced loop as a single worker,
 * and renews the leases of all of them with one statement per heartbeat.
 *
 * A refused renewal (the run was taken over, closed or cancelled) aborts that
 * run's signal, which cuts off its model or tool request in flight; a
 * database unreachable for longer than the lease aborts every run. A crash
 * point kills the whole process, as a real crash would: every run in it is
 * recovered by whoever takes it next.
 *
 * @module
 */

import type { PreparedAgent } from "./agent.ts";
import { type Clock, startTimer } from "./clock.ts";
import { type WorkerDeps, workerDeps, type WorkerDepsOptions } from "./context.ts";
import { describeError, FencedError, RuntimeError } from "./errors.ts";
import { SimulatedKill } from "./crashpoints.ts";
import type { Logger } from "./log.ts";
import { driveRun, releaseAfterError, type RunOutcome } from "./loop.ts";
import type { Fence, Store, TakenRun } from "./store/store.ts";

/** Options of a {@link WorkerHost}. */
export interface WorkerHostOptions extends Omit<WorkerDepsOptions, "agent"> {
  /** The agents this host runs; it takes runs of these only. */
  agents: PreparedAgent[];
  /** The most runs held at once. Default {@link DEFAULT_RUNS_PER_WORKER}. */
  runsPerWorker?: number;
  /** How often to look for runs when idle. Default 3 000. */
  pollMs?: number;
  /** Called with each run's outcome as it ends. */
  onOutcome?: (outcome: RunOutcome) => void;
}

/**
 * Runs one worker process holds at once by default. A run waiting on a model
 * or a tool costs a few kilobytes and no CPU, so the limit is set by what the
 * database and the remotes can take, not by the process: 100 keeps one
 * heartbeat statement small and a pool of a few connections busy, while a
 * crash of one process strands at most 100 runs, all taken back at once.
 */
export const DEFAULT_RUNS_PER_WORKER = 100;

interface Held {
  fence: Fence;
  stop: AbortController;
  done: Promise<void>;
}

/** Takes runs of its agents and drives up to `runsPerWorker` of them at once. */
export class WorkerHost {
  readonly #deps: Map<string, WorkerDeps>;
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #owner: string;
  readonly #capacity: number;
  readonly #pollMs: number;
  readonly #heartbeatMs: number;
  readonly #leaseMs: number;
  readonly #startedAt: Date;
  readonly #onOutcome?: (outcome: RunOutcome) => void;
  readonly #held = new Map<string, Held>();
  readonly #stop = new AbortController();
  // The take loop's doorbell: `#ring` ends its nap between polls; `#rung`
  // remembers a wake that came while it was polling, so the next nap ends at
  // once (#11: it was an abort controller, a combined signal, a sleep and an
  // AbortError per wake, that is per run taken: 14-23 µs against 2-3.5 µs).
  #rung = false;
  #ring?: () => void;
  #loops: Promise<void>[] = [];
  #killed?: unknown;
  #stopped?: Promise<void>;
  // True once this host's row in `workers` was written (see #takeLoop).
  #registered = false;

  /** Validates the options and builds each agent's dependencies. */
  constructor(opts: WorkerHostOptions) {
    const { agents, runsPerWorker, pollMs, onOutcome, ...shared } = opts;
    if (agents.length === 0) {
      throw new RuntimeError(
        "HOST_INVALID",
        "Cannot host workers as 'agents' is empty: give at least one agent",
      );
    }
    const capacity = runsPerWorker ?? DEFAULT_RUNS_PER_WORKER;
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RuntimeError(
        "HOST_INVALID",
        `Cannot host workers as 'runsPerWorker' must be a positive integer: current value is ${capacity}`,
      );
    }
    this.#deps = new Map(agents.map((a) => [a.agent.name, workerDeps({ ...shared, agent: a })]));
    const any = this.#deps.values().next().value!;
    this.#store = any.store;
    this.#clock = any.clock;
    this.#log = any.log;
    this.#owner = any.owner;
    this.#heartbeatMs = any.heartbeatMs;
    this.#leaseMs = any.leaseMs;
    this.#capacity = capacity;
    this.#pollMs = pollMs ?? 3_000;
    this.#startedAt = this.#clock.now();
    this.#onOutcome = onOutcome;
    // Stopping (or a simulated kill) ends the take loop's nap too.
    this.#stop.signal.addEventListener("abort", () => this.wake(), { once: true });
  }

  /** This host's name, written to `runs.owner`. */
  get owner(): string {
    return this.#owner;
  }

  /** Runs held now. */
  get active(): number {
    return this.#held.size;
  }

  /** True once {@link WorkerHost.stop} was called. */
  get stopping(): boolean {
    return this.#stop.signal.aborted;
  }

  /** Resolves when the host has stopped (or rejects with what killed it). */
  get finished(): Promise<void> {
    return Promise.all(this.#loops).then(() => {
      if (this.#killed !== undefined) throw this.#killed;
    });
  }

  /** Starts taking runs and heartbeating. */
  start(): this {
    this.#log.info("worker", {
      owner: this.#owner,
      agents: [...this.#deps.keys()].join(","),
      runs_per_worker: this.#capacity,
      poll_ms: this.#pollMs,
      heartbeat_ms: this.#heartbeatMs,
    });
    this.#loops = [this.#takeLoop(), this.#heartbeatLoop()];
    return this;
  }

  /** Looks for runs now instead of at the next poll (a run was just submitted, say). */
  wake(): void {
    this.#rung = true;
    this.#ring?.();
  }

  /** Waits `pollMs`, or until {@link WorkerHost.wake}: at once if a wake came since the last nap. */
  #nap(): Promise<void> {
    if (this.#rung) {
      this.#rung = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const end = () => {
        this.#ring = undefined;
        this.#rung = false;
        resolve();
      };
      const cancel = startTimer(this.#clock, this.#pollMs, end);
      this.#ring = () => {
        cancel();
        end();
      };
    });
  }

  /**
   * Stops taking runs, stops every run it holds at its next step (their
   * leases cleared, so another worker takes them at once), and waits.
   */
  stop(reason = "stopping"): Promise<void> {
    this.#stopped ??= this.#shutdown(reason);
    return this.#stopped;
  }

  async #shutdown(reason: string): Promise<void> {
    {
      this.#log.info("worker-stopping", { owner: this.#owner, runs: this.#held.size, reason });
      this.#stop.abort();
      for (const h of this.#held.values()) {
        h.stop.abort(new FencedError("RUN_CLOSED", `The worker ${this.#owner} is stopping`));
      }
    }
    await Promise.all([...this.#held.values()].map((h) => h.done));
    await Promise.all(this.#loops);
    try {
      await this.#store.releaseRuns(this.#owner, this.#clock.now());
      await this.#store.removeWorker(this.#owner);
    } catch (err) {
      this.#log.warn("release-failed", { owner: this.#owner, error: describeError(err) });
    }
  }

  /** One pass: takes as many runs as there are free slots and starts each. Returns how many it took. */
  async poll(): Promise<number> {
    const free = this.#capacity - this.#held.size;
    if (this.stopping || free <= 0) return 0;
    const now = this.#clock.now();
    const taken = await this.#store.takeRuns(
      this.#owner,
      [...this.#deps.keys()],
      new Date(now.getTime() - this.#leaseMs),
      now,
      free,
    );
    for (const run of taken) this.#drive(run);
    return taken.length;
  }

  #worker() {
    return {
      name: this.#owner,
      agents: [...this.#deps.keys()],
      capacity: this.#capacity,
      startedAt: this.#startedAt,
    };
  }

  async #takeLoop(): Promise<void> {
    // Bounded by stop(): each pass sleeps pollMs unless it filled every slot.
    while (!this.stopping && this.#killed === undefined) {
      let full = false;
      try {
        // This host's row comes before its first run: it says which agents the
        // process hosts (`runs` reads it), and the supervisor judges a worker
        // frozen by that row's heartbeat, so a host holding runs must have one.
        if (!this.#registered) {
          await this.#store.heartbeatMany(this.#worker(), [], this.#clock.now());
          this.#registered = true;
        }
        const free = this.#capacity - this.#held.size;
        full = free > 0 && (await this.poll()) === free;
      } catch (err) {
        this.#log.warn(this.#registered ? "poll-failed" : "heartbeat-failed", {
          owner: this.#owner,
          error: describeError(err),
        });
      }
      if (full) continue; // there may be more waiting: look again as soon as a slot frees
      await this.#nap();
    }
  }

  #drive(run: TakenRun): void {
    const deps = this.#deps.get(run.agent)!;
    const stop = new AbortController();
    const fence = { runId: run.run_id, epoch: run.epoch };
    const now = this.#clock.now().getTime();
    const held: Held = { fence, stop, done: Promise.resolve() };
    this.#held.set(run.run_id, held);
    held.done = (async () => {
      try {
        const outcome = await driveRun(deps, {
          run,
          epoch: run.epoch,
          previousOwner: run.previous_owner,
          leaseAgeMs: run.previous_heartbeat_at
            ? now - new Date(run.previous_heartbeat_at).getTime()
            : undefined,
        }, stop);
        this.#onOutcome?.(outcome);
      } catch (err) {
        if (err instanceof SimulatedKill) {
          // The whole (simulated) process is dead: nothing of it may run on.
          this.#killed = err;
          this.#stop.abort();
          for (const h of this.#held.values()) h.stop.abort(err);
          return;
        }
        // An error the loop does not classify (an agent's code threw, the
        // database refused a statement or went away) ends this run's turn,
        // and only this run's: the run is intact. It leaves the held set
        // first, so no heartbeat renews what the release clears; then its
        // lease is released (fenced on its epoch) with the error kept on it,
        // so the next take retries it at once and the bound on claims
        // without progress stops one that keeps failing, naming the error.
        // The other runs, and this host's own heartbeat, go on.
        this.#forget(run.run_id, held);
        const lease = await releaseAfterError(deps, fence, err);
        this.#log.error("worker-error", {
          run: run.run_id,
          epoch: run.epoch,
          error: describeError(err),
          lease,
        });
      } finally {
        this.#forget(run.run_id, held);
        // A slot is free: look for more work now rather than at the next tick.
        this.wake();
      }
    })();
  }

  /** Drops `held` from the held set, unless the run was taken again since (by this host, after its release). */
  #forget(runId: string, held: Held): void {
    if (this.#held.get(runId) === held) this.#held.delete(runId);
  }

  async #heartbeatLoop(): Promise<void> {
    let lastOkMs = this.#clock.now().getTime();
    // Bounded by stop(): each pass sleeps heartbeatMs.
    while (!this.stopping) {
      try {
        await this.#clock.sleep(this.#heartbeatMs, this.#stop.signal);
      } catch {
        return;
      }
      const crash = this.#deps.values().next().value!.crash;
      // A frozen (stalled) process does not heartbeat either; that is what makes its runs stealable.
      if (crash.stalling) continue;
      const fences = [...this.#held.values()].map((h) => h.fence);
      try {
        const renewed = new Set(
          await this.#store.heartbeatMany(
            this.#worker(),
            fences,
            this.#clock.now(),
          ),
        );
        lastOkMs = this.#clock.now().getTime();
        this.#registered = true;
        for (const f of fences) {
          const held = this.#held.get(f.runId);
          if (renewed.has(f.runId) || !held || held.fence.epoch !== f.epoch) continue;
          const err = await this.#store.refusal(f, "heartbeat");
          // A run that ended while the heartbeat was on its way is not a refusal
          // worth a warning: by now it has left the held set.
          if (this.#held.get(f.runId) !== held) continue;
          this.#log.warn("heartbeat-refused", { run: f.runId, epoch: f.epoch, reason: err.message });
          held.stop.abort(err);
        }
      } catch (err) {
        if (this.stopping) return;
        const sinceMs = this.#clock.now().getTime() - lastOkMs;
        this.#log.warn("heartbeat-failed", {
          owner: this.#owner,
          error: describeError(err),
          since_ms: sinceMs,
        });
        if (sinceMs > this.#leaseMs) {
          for (const h of this.#held.values()) {
            this.#log.error("lease-lost", { run: h.fence.runId, since_ms: sinceMs });
            h.stop.abort(new FencedError("STALLED", `The lease could not be renewed for ${sinceMs}ms`));
          }
        }
      }
    }
  }
}
