/**
 * The supervisor keeps `workers` worker processes alive. It never runs an
 * agent and never takes runs itself: each worker takes runs of the agents it
 * hosts. What the supervisor adds is speed and liveness:
 *
 * - When one of its workers dies it knows at once (it waits on the child's
 *   exit status). It clears the lease of every run that worker held (a reaped
 *   process cannot write again), so they can be taken at once instead of after
 *   the lease, and starts a replacement, which takes them at its first poll.
 * - A worker that stops heartbeating but lives on (frozen) is found at a poll
 *   by its own heartbeat (its row in `workers`, renewed with its leases) and
 *   killed; its replacement takes its runs, and the epoch fences it should it
 *   wake. One run's stale lease is no sign of a frozen worker: a worker lets
 *   go of a run that failed and goes on driving the others.
 * - A worker that exits with code 2 (`EXIT_CODES.settings`: settings that
 *   cannot work, such as a wrong password or a database that does not exist)
 *   is not restarted: the same settings would fail again. Every other exit
 *   is restarted, 7 (the database away) included; a worker waits for a
 *   database that is away rather than exiting, so a replacement started
 *   during an outage lives and takes runs once it is back. A worker that
 *   keeps dying right after it starts is restarted with a growing delay.
 * - Its own database away (a poll or a release that fails) is logged and
 *   waited out: no worker is judged, killed or given up on for it.
 *
 * Time comes from a {@link Clock} and processes from a {@link SpawnWorker}
 * function, so the logic runs in-process in tests.
 *
 * @module
 */

import type { Clock } from "../runtime/base/clock.ts";
import { describeError } from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import type { Logger } from "../runtime/base/log.ts";
import type { Store } from "../runtime/store/store.ts";

/** A started worker process (or a stand-in for one). */
export interface WorkerHandle {
  /** Its process id. */
  readonly pid: number;
  /** Resolves with the exit code (128 + signal number when killed by a signal). */
  readonly exited: Promise<number>;
  /** Sends a signal; ignores a process that has already gone. */
  kill(signal: Deno.Signal): void;
}

/** Starts a worker process that will write `workerName` as the owner of the runs it takes. */
export type SpawnWorker = (workerName: string) => WorkerHandle;

/** Options of a {@link Supervisor}. */
export interface SupervisorOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  spawn: SpawnWorker;
  /** This supervisor's name; its workers are named `<name>/w<slot>.<generation>`. */
  name: string;
  /** Worker processes kept alive. */
  workers: number;
  /** A run with no heartbeat for this long is abandoned, and a worker with none for this long is frozen. */
  leaseMs: number;
  /** How often to look for frozen workers. */
  pollMs: number;
  /** The workers' heartbeat interval (logged; passed to workers by the spawner). */
  heartbeatMs: number;
  /** A worker that exits sooner than this after it started counts as a crash loop. Default 5 000. */
  quickExitMs?: number;
  /** Quick exits in a row restarted at once, before restarts are delayed. Default 3. */
  maxQuickRestarts?: number;
  /** The longest delay before a crash-looping worker is restarted. Default 60 000. */
  maxRestartDelayMs?: number;
  /** How long to wait for workers after SIGTERM before SIGKILL. Default 10 000. */
  stopGraceMs?: number;
}

interface Slot {
  index: number;
  generation: number;
  workerName: string;
  handle?: WorkerHandle;
  startedMs: number;
  quickExits: number;
  /** Set when this worker was killed as frozen: logged as such. */
  replaced: boolean;
  /** Set when the slot gave up (exit code 2, settings that cannot work). */
  refused: boolean;
}

/** Keeps worker processes alive and hands a dead one's runs on at once. */
export class Supervisor {
  readonly #o: Required<SupervisorOptions>;
  readonly #slots: Slot[] = [];
  readonly #stop = new AbortController();
  // Exit handlers running now (added when a worker exits, not when it starts).
  readonly #handlers = new Set<Promise<void>>();
  // Workers' exits still awaited, and delayed restarts: waited for by drain only.
  readonly #pending = new Set<Promise<unknown>>();
  // A worker's stale heartbeat proves it frozen only if the database could
  // have taken its beats. After polls that failed (or one that took half a
  // lease: the database was away meanwhile, as in a failover) this is when
  // the database answered again, and nobody is judged frozen for a lease
  // from then: the workers' beats failed too, and their next ones land now.
  #answeringAgainMs?: number;
  #pollFailed = false;

  /** Validates the options. */
  constructor(opts: SupervisorOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) {
      throw new RangeError(
        `Cannot supervise as 'workers' must be a positive integer: current value is ${opts.workers}`,
      );
    }
    this.#o = {
      quickExitMs: 5_000,
      maxQuickRestarts: 3,
      maxRestartDelayMs: 60_000,
      stopGraceMs: 10_000,
      ...opts,
    };
  }

  /** Worker processes alive now. */
  get workers(): number {
    return this.#slots.filter((s) => s.handle).length;
  }

  /** The pids of the live workers. */
  get pids(): number[] {
    return this.#slots.flatMap((s) => s.handle ? [s.handle.pid] : []);
  }

  /** True once {@link Supervisor.stop} was called. */
  get stopping(): boolean {
    return this.#stop.signal.aborted;
  }

  /** True when every slot gave up on a worker that refused its settings (exit code 2, `EXIT_CODES.settings`). */
  get refused(): boolean {
    return this.#slots.length > 0 && this.#slots.every((s) => s.refused);
  }

  /**
   * Logs the start line, starts the workers, then watches them until
   * {@link Supervisor.stop} (or until every worker refused its settings);
   * resolves when every worker is gone.
   */
  async run(): Promise<void> {
    const { log, clock } = this.#o;
    log.info("supervisor", {
      lease: (this.#o.leaseMs / 1000).toFixed(1),
      poll: (this.#o.pollMs / 1000).toFixed(1),
      heartbeat: (this.#o.heartbeatMs / 1000).toFixed(1),
      workers: this.#o.workers,
      name: this.#o.name,
    });
    for (let i = 0; i < this.#o.workers; i++) {
      const slot: Slot = {
        index: i,
        generation: 0,
        workerName: "",
        startedMs: 0,
        quickExits: 0,
        replaced: false,
        refused: false,
      };
      this.#slots.push(slot);
      this.#spawn(slot);
    }
    // Bounded by stop(): each pass sleeps pollMs.
    while (!this.stopping && !this.refused) {
      await clock.sleep(this.#o.pollMs, this.#stop.signal).catch(() => {});
      if (!this.stopping) await this.poll();
    }
    if (this.refused) {
      log.error("supervisor-giving-up", { reason: "every worker refused its settings (exit 2)" });
    }
    await this.#drain();
  }

  /**
   * One pass: kills workers whose own heartbeat (their row in `workers`) is
   * older than the lease: frozen processes. A run's stale lease is not a
   * reason: a worker lets go of a run that failed and goes on with the others.
   */
  async poll(): Promise<void> {
    const live = this.#slots.filter((s) => s.handle && !s.replaced);
    if (live.length === 0) return;
    const now = this.#o.clock.now();
    let frozen: { name: string; heartbeat_at: Date }[];
    try {
      frozen = await this.#o.store.leases.frozenWorkers(
        live.map((s) => s.workerName),
        new Date(now.getTime() - this.#o.leaseMs),
      );
    } catch (err) {
      this.#pollFailed = true;
      this.#o.log.warn("poll-failed", { error: describeError(err) });
      return;
    }
    const answeredMs = this.#o.clock.now().getTime();
    if (this.#pollFailed || answeredMs - now.getTime() >= this.#o.leaseMs / 2) {
      this.#pollFailed = false;
      this.#answeringAgainMs = answeredMs;
      this.#o.log.info("database-back", {
        note:
          `the database answers again; workers are judged by their heartbeats again in ${this.#o.leaseMs}ms`,
      });
    }
    if (this.#answeringAgainMs !== undefined && answeredMs - this.#answeringAgainMs < this.#o.leaseMs) return;
    for (const worker of frozen) {
      const slot = live.find((s) => s.workerName === worker.name)!;
      slot.replaced = true;
      this.#o.log.warn("replacing", {
        worker: slot.workerName,
        pid: slot.handle!.pid,
        reason: "its heartbeat stopped",
        heartbeat_age_ms: now.getTime() - new Date(worker.heartbeat_at).getTime(),
      });
      slot.handle!.kill("SIGKILL");
    }
  }

  /** Resolves once every worker exit seen so far has been handled (logged, runs released, restarted). */
  async settled(): Promise<void> {
    // Bounded: each handler restarts at most one worker, whose exit is handled only once it exits.
    for (let i = 0; i < 100 && this.#handlers.size > 0; i++) await Promise.all(this.#handlers);
  }

  /** Stops restarting, sends SIGTERM to every worker and waits for them (SIGKILL after the grace period). */
  async stop(): Promise<void> {
    if (!this.stopping) {
      this.#o.log.info("stopping", { workers: this.workers });
      this.#stop.abort();
    }
    await this.#drain();
  }

  async #drain(): Promise<void> {
    this.#stop.abort();
    const live = this.#slots.flatMap((s) => s.handle ? [s.handle] : []);
    for (const h of live) h.kill("SIGTERM");
    const grace = new AbortController();
    const timer = this.#o.clock.sleep(this.#o.stopGraceMs, grace.signal).then(() => {
      for (const s of this.#slots.filter((s) => s.handle)) {
        this.#o.log.warn("worker-kill", {
          worker: s.workerName,
          pid: s.handle!.pid,
          reason: "did not stop in time",
        });
        s.handle!.kill("SIGKILL");
      }
    }, () => {});
    await Promise.all(live.map((h) => h.exited.catch(() => -1)));
    grace.abort();
    await timer;
    // Bounded: after stop nothing starts again, so the pending set only shrinks.
    for (let i = 0; i < 100 && this.#pending.size > 0; i++) await Promise.all(this.#pending);
    await this.settled();
  }

  #spawn(slot: Slot): void {
    slot.generation++;
    slot.workerName = `${this.#o.name}/w${slot.index}.${slot.generation}`;
    slot.replaced = false;
    slot.startedMs = this.#o.clock.now().getTime();
    let handle: WorkerHandle;
    try {
      handle = this.#o.spawn(slot.workerName);
    } catch (err) {
      this.#o.log.error("spawn-failed", { worker: slot.workerName, error: describeError(err) });
      slot.handle = undefined;
      this.#later(slot, this.#o.pollMs);
      return;
    }
    slot.handle = handle;
    this.#o.log.info("worker-started", { worker: slot.workerName, pid: handle.pid });
    this.#hold(handle.exited.then(
      (code) => this.#track(this.#exited(slot, handle, code)),
      (err) => this.#track(this.#exited(slot, handle, -1, err)),
    ));
  }

  async #exited(slot: Slot, handle: WorkerHandle, code: number, err?: unknown): Promise<void> {
    const { log, store, clock } = this.#o;
    const workerName = slot.workerName;
    slot.handle = undefined;
    log.info("worker-exited", {
      worker: workerName,
      pid: handle.pid,
      code,
      error: err === undefined ? undefined : describeError(err),
    });
    // Whatever the reason, the dead worker's runs are takeable now: it cannot write again.
    // Its row in `workers` goes too, so the live workers' fair shares stop counting
    // it as a peer with free slots at once rather than after the lease.
    let released: string[] = [];
    try {
      released = await store.leases.releaseRuns(workerName, clock.now());
      await store.leases.removeWorker(workerName);
    } catch (e) {
      log.warn("release-failed", { worker: workerName, error: describeError(e) });
    }
    if (this.stopping) return;
    if (code === EXIT_CODES.settings) {
      slot.refused = true;
      log.error("worker-refused", {
        worker: workerName,
        reason: "it exited 2 (settings that cannot work; its error is above); not restarted",
      });
      if (this.refused) this.#stop.abort();
      return;
    }
    const livedMs = clock.now().getTime() - slot.startedMs;
    slot.quickExits = livedMs < this.#o.quickExitMs ? slot.quickExits + 1 : 0;
    if (slot.quickExits > this.#o.maxQuickRestarts) {
      const delay = Math.min(
        this.#o.maxRestartDelayMs,
        this.#o.pollMs * 2 ** (slot.quickExits - this.#o.maxQuickRestarts),
      );
      log.warn("restart-deferred", {
        worker: workerName,
        delay_ms: delay,
        reason:
          `its workers died ${slot.quickExits} times in a row within ${this.#o.quickExitMs}ms of starting`,
      });
      this.#later(slot, delay, released);
      return;
    }
    this.#spawn(slot);
    this.#resuming(slot, released);
  }

  #track(handler: Promise<void>): Promise<void> {
    this.#handlers.add(handler);
    void handler.finally(() => this.#handlers.delete(handler));
    return handler;
  }

  #hold(p: Promise<unknown>): void {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  /** Logs each released run as resuming under the slot's new worker (which takes it at its first poll). */
  #resuming(slot: Slot, released: string[]): void {
    const pid = (slot.handle as WorkerHandle | undefined)?.pid;
    for (const run of released) this.#o.log.info("resuming", { run, pid, worker: slot.workerName });
  }

  #later(slot: Slot, delayMs: number, released: string[] = []): void {
    const wait = this.#o.clock.sleep(delayMs, this.#stop.signal).then(() => {
      if (this.stopping) return;
      this.#spawn(slot);
      this.#resuming(slot, released);
    }, () => {});
    this.#hold(wait);
  }
}
