/**
 * The supervisor: every `pollMs` it takes the runs that are `pending` or whose
 * lease expired (no heartbeat for `leaseMs`) and starts a worker on each, at
 * most `maxWorkers` at a time. When one of its own workers dies with the run
 * still open it takes the run back at once instead of waiting out the lease.
 *
 * Taking a run is a lease handoff: one conditional update stamps the
 * supervisor's name and a fresh `heartbeat_at` on the row, so a second
 * supervisor no longer sees it as abandoned. The worker then claims the run
 * with the usual epoch compare-and-swap, so even a mistaken double start ends
 * with one worker holding the run and the other fenced.
 *
 * Time comes from a {@link Clock} and processes from a {@link SpawnWorker}
 * function, so the logic runs in-process in tests.
 *
 * @module
 */

import type { Clock } from "../runtime/clock.ts";
import { describeError } from "../runtime/errors.ts";
import type { Logger } from "../runtime/log.ts";
import type { RunRow, Store } from "../runtime/store/store.ts";

/** A started worker process (or a stand-in for one). */
export interface WorkerHandle {
  /** Its process id. */
  readonly pid: number;
  /** Resolves with the exit code (128 + signal number when killed by a signal). */
  readonly exited: Promise<number>;
  /** Sends a signal; ignores a process that has already gone. */
  kill(signal: Deno.Signal): void;
}

/** Starts a worker for `runId` that will write `workerName` as the run's owner. */
export type SpawnWorker = (runId: string, workerName: string) => WorkerHandle;

/** Options of a {@link Supervisor}. */
export interface SupervisorOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  spawn: SpawnWorker;
  /** This supervisor's name, written to `runs.owner` while a run is handed to a worker. */
  name: string;
  /** A run with no heartbeat for this long is abandoned. */
  leaseMs: number;
  /** How often to look for runs to take. */
  pollMs: number;
  /** The workers' heartbeat interval (logged; passed to workers by the spawner). */
  heartbeatMs: number;
  /** The most workers alive at once. */
  maxWorkers: number;
  /** Immediate restarts of one run after its worker died, before falling back to the poll. Default 3. */
  maxQuickRestarts?: number;
  /** How long to wait for workers after SIGTERM before SIGKILL. Default 10 000. */
  stopGraceMs?: number;
}

interface Active {
  runId: string;
  workerName: string;
  handle: WorkerHandle;
  /** Set when this worker was replaced: its exit must not trigger a restart. */
  superseded: boolean;
}

/** Watches for pending and abandoned runs and keeps a worker on each. */
export class Supervisor {
  readonly #o: Required<SupervisorOptions>;
  readonly #active = new Map<number, Active>();
  readonly #quickRestarts = new Map<string, number>();
  readonly #stop = new AbortController();
  readonly #wake = { controller: new AbortController() };
  #spawned = 0;
  // Slots promised to a take that is still waiting on the database, so a poll
  // and an immediate restart running at once cannot exceed maxWorkers.
  #reserved = 0;
  #exits: Promise<void>[] = [];
  readonly #handlers = new Set<Promise<void>>();

  /** Validates the options. */
  constructor(opts: SupervisorOptions) {
    if (!Number.isInteger(opts.maxWorkers) || opts.maxWorkers < 1) {
      throw new RangeError(
        `Cannot supervise as 'maxWorkers' must be a positive integer: current value is ${opts.maxWorkers}`,
      );
    }
    this.#o = { maxQuickRestarts: 3, stopGraceMs: 10_000, ...opts };
  }

  /** Workers alive now. */
  get workers(): number {
    return this.#active.size;
  }

  /** True once {@link Supervisor.stop} was called. */
  get stopping(): boolean {
    return this.#stop.signal.aborted;
  }

  /** Logs the start line, then polls until {@link Supervisor.stop}; resolves when every worker is gone. */
  async run(): Promise<void> {
    const { log, clock } = this.#o;
    log.info("supervisor", {
      lease: (this.#o.leaseMs / 1000).toFixed(1),
      poll: (this.#o.pollMs / 1000).toFixed(1),
      heartbeat: (this.#o.heartbeatMs / 1000).toFixed(1),
      max_workers: this.#o.maxWorkers,
      name: this.#o.name,
    });
    // Bounded by stop(): each pass sleeps pollMs (or until a worker exits).
    while (!this.stopping) {
      await this.poll();
      const wake = this.#wake.controller.signal;
      await clock.sleep(this.#o.pollMs, AbortSignal.any([wake, this.#stop.signal])).catch(() => {});
      if (wake.aborted) this.#wake.controller = new AbortController();
    }
    await this.#drain();
  }

  /** One pass: takes as many open runs as there are free worker slots and starts a worker on each. */
  async poll(): Promise<RunRow[]> {
    const free = this.#o.maxWorkers - this.#active.size - this.#reserved;
    if (this.stopping || free <= 0) return [];
    const now = this.#o.clock.now();
    let taken: RunRow[];
    this.#reserved += free;
    try {
      taken = await this.#o.store.takeRuns(
        this.#o.name,
        new Date(now.getTime() - this.#o.leaseMs),
        now,
        free,
      );
    } catch (err) {
      this.#o.log.warn("poll-failed", { error: describeError(err) });
      return [];
    } finally {
      this.#reserved -= free;
    }
    for (const run of taken) this.#start(run);
    return taken;
  }

  /** Resolves once every worker exit seen so far has been handled (logged, and restarted if due). */
  async settled(): Promise<void> {
    // Bounded: a handler starts at most one worker, whose exit is handled only once it exits.
    for (let i = 0; i < 100 && this.#handlers.size > 0; i++) await Promise.all(this.#handlers);
  }

  /** Stops taking runs, sends SIGTERM to every worker and waits for them (SIGKILL after the grace period). */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.#o.log.info("stopping", { workers: this.#active.size });
      this.#stop.abort();
    }
    await this.#drain();
  }

  async #drain(): Promise<void> {
    for (const a of this.#active.values()) a.handle.kill("SIGTERM");
    const grace = new AbortController();
    const all = Promise.all([...this.#active.values()].map((a) => a.handle.exited));
    const timer = this.#o.clock.sleep(this.#o.stopGraceMs, grace.signal).then(() => {
      for (const a of this.#active.values()) {
        this.#o.log.warn("worker-kill", { run: a.runId, pid: a.handle.pid, reason: "did not stop in time" });
        a.handle.kill("SIGKILL");
      }
    }, () => {});
    await all;
    grace.abort();
    await timer;
    // Let the exit handlers (which log worker-exited) finish.
    await Promise.all(this.#exits);
  }

  #start(run: RunRow): void {
    // A run taken while one of our workers still holds it: that worker stopped
    // heartbeating (frozen). Replace it; the epoch fences it if it wakes.
    for (const a of this.#active.values()) {
      if (a.runId === run.run_id && !a.superseded) {
        a.superseded = true;
        this.#o.log.warn("replacing", { run: run.run_id, pid: a.handle.pid, reason: "lease expired" });
        a.handle.kill("SIGKILL");
      }
    }
    const workerName = `${this.#o.name}/${run.run_id}/${++this.#spawned}`;
    let handle: WorkerHandle;
    try {
      handle = this.#o.spawn(run.run_id, workerName);
    } catch (err) {
      // The lease handoff expires by itself: the run is taken again after leaseMs.
      this.#o.log.error("spawn-failed", { run: run.run_id, error: describeError(err) });
      return;
    }
    const active: Active = { runId: run.run_id, workerName, handle, superseded: false };
    this.#active.set(handle.pid, active);
    this.#o.log.info("resuming", { run: run.run_id, pid: handle.pid, status: run.status, epoch: run.epoch });
    const exit = handle.exited.then(
      (code) => this.#track(this.#exited(active, code)),
      (err) => this.#track(this.#exited(active, -1, err)),
    );
    this.#exits.push(exit);
    void exit.finally(() => {
      this.#exits = this.#exits.filter((e) => e !== exit);
    });
  }

  #track(handler: Promise<void>): Promise<void> {
    this.#handlers.add(handler);
    void handler.finally(() => this.#handlers.delete(handler));
    return handler;
  }

  async #exited(a: Active, code: number, err?: unknown): Promise<void> {
    this.#active.delete(a.handle.pid);
    this.#o.log.info("worker-exited", {
      run: a.runId,
      code,
      pid: a.handle.pid,
      error: err === undefined ? undefined : describeError(err),
    });
    if (this.stopping || a.superseded) return;
    try {
      await this.#restartIfOpen(a);
    } catch (e) {
      this.#o.log.warn("restart-failed", { run: a.runId, error: describeError(e) });
    }
    // A slot is free: look for more work now rather than at the next tick.
    this.#wake.controller.abort();
  }

  /** Takes the run back at once if the worker left it open and nobody moved it since. */
  async #restartIfOpen(a: Active): Promise<void> {
    const { store, clock, log } = this.#o;
    const run = await store.getRun(a.runId);
    const open = run && (run.status === "pending" || run.status === "running");
    if (!run || !open) {
      this.#quickRestarts.delete(a.runId);
      return;
    }
    // Ours: the worker claimed it (its name) or never got that far (ours).
    if (run.owner !== a.workerName && run.owner !== this.#o.name) return;
    const restarts = (this.#quickRestarts.get(a.runId) ?? 0) + 1;
    if (restarts > this.#o.maxQuickRestarts) {
      this.#quickRestarts.delete(a.runId);
      log.warn("restart-deferred", {
        run: a.runId,
        reason: `its workers died ${restarts - 1} times in a row; it is taken again when its lease expires`,
      });
      return;
    }
    if (this.stopping || this.#active.size + this.#reserved >= this.#o.maxWorkers) return;
    this.#reserved++;
    try {
      const taken = await store.retakeRun(
        a.runId,
        { epoch: run.epoch, owner: run.owner },
        this.#o.name,
        clock.now(),
      );
      if (!taken || this.stopping) return;
      this.#quickRestarts.set(a.runId, restarts);
      this.#start(taken);
    } finally {
      this.#reserved--;
    }
  }
}
