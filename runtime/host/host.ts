/**
 * The worker host: one process driving many runs at once. It takes runs
 * itself (one statement takes and claims up to its free slots, of the agents
 * it hosts only, and by default no more than its fair share of each agent's
 * runs among the live workers hosting that agent, so new work is spread
 * across workers and hosts), drives each with the same fenced loop as a single worker,
 * and renews the leases of all of them with one statement per heartbeat
 * (lease.ts, which the single-run path uses too).
 *
 * A refused renewal (the run was taken over, closed or cancelled) aborts that
 * run's signal, which cuts off its model or tool request in flight; a
 * database unreachable for longer than the lease aborts every run. A crash
 * point kills the whole process, as a real crash would: every run in it is
 * recovered by whoever takes it next.
 *
 * @module
 */

import type { PreparedAgent } from "../agent/agent.ts";
import { startTimer } from "../base/clock.ts";
import { runDepsFor } from "../run/context.ts";
import {
  agentDeps,
  type AgentOptions,
  type ProcessDeps,
  processDeps,
  type ProcessDepsOptions,
  type ProcessSettings,
} from "../run/deps.ts";
import { describeError, FencedError, RuntimeError } from "../base/errors.ts";
import { SimulatedKill } from "../base/crashpoints.ts";
import { LeaseKeeper } from "./lease.ts";
import { driveRun, releaseAfterError } from "./run_driver.ts";
import type { RunOutcome } from "./outcome.ts";
import { ParkedRuns } from "../run/parked.ts";
import type { Fence, TakenRun } from "../store/store.ts";
import { TAKE_SHARES, type TakeShare } from "../base/take_share.ts";
import { HostedVersions } from "./hosted_versions.ts";
import { DEFAULTS } from "../base/defaults.ts";

/**
 * How a worker host runs, every field with a default: its process's settings,
 * the limits applied to every agent it hosts (as {@link agentDeps} takes
 * them), and its own. What `client.startWorker` takes.
 */
export interface WorkerOptions extends Partial<ProcessSettings>, AgentOptions {
  /** The most runs held at once. Default {@link DEFAULT_RUNS_PER_WORKER}. */
  runsPerWorker?: number;
  /** How often to look for runs when idle, in ms. Default {@link DEFAULTS}' `pollMs` (`POLL_S`, 3 s). */
  pollMs?: number;
  /**
   * Group commit (`GROUP_COMMIT_MS`): the longest, in ms, one of the host's
   * writes waits to share a statement and a commit with its other runs'
   * writes (`store/group_commit.ts`). Default {@link DEFAULTS}'
   * `groupCommitMs` (2), as the commands'; 0 turns it off, every write alone.
   * A write that finds no statement in flight never waits.
   */
  groupCommitMs?: number;
  /**
   * How much of the takeable work one poll takes: `fair` (the default) no
   * more than this host's share by capacity of each agent's runs among the
   * live workers hosting that agent, so new work is spread; `all` every free
   * slot. Runs of an agent no live peer hosts fill every free slot either way.
   */
  // Written out (a published type must be), and held to take_share.ts's list below.
  takeShare?: "fair" | "all";
}

// The option's type and the list are the same set, or this does not compile.
const SAME_RULES: [TakeShare, NonNullable<WorkerOptions["takeShare"]>] extends
  [NonNullable<WorkerOptions["takeShare"]>, TakeShare] ? true : never = true;
void SAME_RULES;

/**
 * Options of a {@link WorkerHost}: the agents, a store (the rest of the
 * process's dependencies defaulted as {@link processDeps} does), and
 * {@link WorkerOptions}.
 */
export interface WorkerHostOptions extends ProcessDepsOptions, WorkerOptions {
  /** The agents this host runs; it takes runs of these only. */
  agents: PreparedAgent[];
  /** Called with each run's outcome as it ends. */
  onOutcome?: (outcome: RunOutcome) => void;
  /**
   * Takes only the runs of the family rooted at this run (the run and the
   * runs its tools start), and tells no peer it hosts the agents: a host that
   * exists for one run (`client.run`). Unset: every takeable run of the agents.
   */
  family?: string;
  /** What lives as long as the host (a schedule ticker, which `client.startWorker` adds), started and stopped with it. */
  companions?: readonly HostCompanion[];
}

/** Something a {@link WorkerHost} starts and stops with itself. */
export interface HostCompanion {
  /** Starts it. */
  start(): unknown;
  /** Stops it; resolves once it has stopped. */
  stop(): Promise<void>;
}

/**
 * Runs one worker process holds at once by default. A run waiting on a model
 * or a tool costs a few kilobytes and no CPU, so the limit is set by what the
 * database and the remotes can take, not by the process: 100 keeps one
 * heartbeat statement small and a pool of a few connections busy, while a
 * crash of one process strands at most 100 runs, all taken back at once.
 */
export const DEFAULT_RUNS_PER_WORKER = DEFAULTS.runsPerWorker;

/** The most runs a host keeps in memory while they wait (conversations for their next message). */
const PARKED_MAX = 1_000;
/** The most rows among them (`ParkedRuns`): about 200 MB of a worker's heap, ten runs of 10,000 steps. */
const PARKED_ROWS_MAX = 200_000;

interface Held {
  fence: Fence;
  stop: AbortController;
  done: Promise<void>;
  /** Ends the renewal of its lease. */
  release: () => void;
  /** The version the run is to move to at its next decision, as its claim and then each heartbeat said. */
  moveTo: string | null;
}

/** Takes runs of its agents and drives up to `runsPerWorker` of them at once. */
export class WorkerHost {
  /** What this process has: one store, clock, log, name, crash plan and lease timings for every agent. */
  readonly #process: ProcessDeps;
  /** Each hosted agent's worker deps, by version: the process's, beside that version's. */
  readonly #versions: HostedVersions;
  readonly #leases: LeaseKeeper;
  readonly #capacity: number;
  readonly #pollMs: number;
  readonly #takeShare: TakeShare;
  readonly #family?: string;
  readonly #startedAt: Date;
  readonly #onOutcome?: (outcome: RunOutcome) => void;
  readonly #companions: readonly HostCompanion[];
  readonly #held = new Map<string, Held>();
  // Runs this host let go to wait (conversations for their next message), by run: taken again by this host
  // with nobody's claim in between, they go on from these rows (run_driver.ts). Bounded: the oldest are dropped.
  readonly #parked = new ParkedRuns(PARKED_MAX, PARKED_ROWS_MAX);
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

  /** Validates the options and builds the process's dependencies and each agent's. */
  constructor(opts: WorkerHostOptions) {
    const { agents, runsPerWorker, pollMs, onOutcome, takeShare = "fair", family } = opts;
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
    if (!(TAKE_SHARES as readonly string[]).includes(takeShare)) {
      throw new RuntimeError(
        "HOST_INVALID",
        `Cannot host workers as 'takeShare' must be one of ${TAKE_SHARES.join(", ")}: current value is ${
          JSON.stringify(takeShare)
        }`,
      );
    }
    // Group commit is on for a host unless turned off, as for the commands' workers (one default, DEFAULTS).
    const proc = processDeps({ ...opts, groupCommitMs: opts.groupCommitMs ?? DEFAULTS.groupCommitMs });
    this.#process = proc;
    // One agent may be hosted at several versions (the old module beside the new during a rollout).
    this.#versions = new HostedVersions(agents.map((a) => runDepsFor(proc, agentDeps(a, opts))));
    this.#capacity = capacity;
    this.#pollMs = pollMs ?? DEFAULTS.pollMs;
    this.#takeShare = takeShare;
    this.#family = family;
    this.#startedAt = proc.clock.now();
    this.#onOutcome = onOutcome;
    this.#companions = opts.companions ?? [];
    // One statement per beat renews every run held and this host's row in
    // `workers`, which the beat renews even while no run is held.
    this.#leases = new LeaseKeeper({
      clock: proc.clock,
      log: proc.log,
      crash: proc.crash,
      heartbeatMs: proc.heartbeatMs,
      leaseMs: proc.leaseMs,
      renew: (fences, now) => this.#beat(fences, now),
      refusal: (f) => proc.store.writes.refusal(f, "heartbeat"),
      onRenewed: () => this.#registered = true,
      subject: { owner: proc.owner },
      beatWhenIdle: true,
    });
    // Stopping (or a simulated kill) ends the take loop's nap too.
    this.#stop.signal.addEventListener("abort", () => this.wake(), { once: true });
  }

  /** This host's name, written to `runs.owner`. */
  get owner(): string {
    return this.#process.owner;
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
    this.#process.log.info("worker", {
      owner: this.#process.owner,
      agents: this.#versions.agents.join(","),
      versions: this.#versions.versions.join(","),
      runs_per_worker: this.#capacity,
      poll_ms: this.#pollMs,
      take_share: this.#takeShare,
      heartbeat_ms: this.#process.heartbeatMs,
      // Said only when on: the writes of the runs it holds share statements (GROUP_COMMIT_MS).
      ...(this.#process.groupCommitMs ? { group_commit_ms: this.#process.groupCommitMs } : {}),
    });
    this.#loops = [this.#takeLoop(), this.#heartbeats(), this.#withCompanions()];
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
      const cancel = startTimer(this.#process.clock, this.#pollMs, end);
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
    const { store, clock, log, owner } = this.#process;
    {
      log.info("worker-stopping", { owner, runs: this.#held.size, reason });
      this.#stop.abort();
      for (const h of this.#held.values()) {
        h.stop.abort(new FencedError("RUN_CLOSED", `The worker ${owner} is stopping`));
      }
    }
    await Promise.all([...this.#held.values()].map((h) => h.done));
    await Promise.all(this.#loops);
    try {
      await store.leases.releaseRuns(owner, clock.now());
      await store.leases.removeWorker(owner);
    } catch (err) {
      log.warn("release-failed", { owner, error: describeError(err) });
    }
  }

  /**
   * One pass: takes runs into its free slots (with `takeShare: "fair"`, no
   * more than its share: the store's `takeShare`) and starts each.
   * Returns how many it took.
   */
  async poll(): Promise<number> {
    const free = this.#capacity - this.#held.size;
    if (this.stopping || free <= 0) return 0;
    const { store, clock, owner, leaseMs } = this.#process;
    const now = clock.now();
    const agents = this.#versions.takeKeys();
    const versions = this.#versions.takeVersions();
    const staleBefore = new Date(now.getTime() - leaseMs);
    const taken = this.#family !== undefined
      ? await store.leases.takeFamily(owner, agents, this.#family, staleBefore, now, free, versions)
      : this.#takeShare === "fair"
      ? await store.leases.takeShare({
        owner,
        agents,
        staleBefore,
        now,
        free,
        capacity: this.#capacity,
        versions,
      })
      : await store.leases.takeRuns(owner, agents, staleBefore, now, free, versions);
    for (const run of taken) this.#drive(run);
    return taken.length;
  }

  #worker() {
    const hosts = this.#family === undefined;
    return {
      name: this.#process.owner,
      // A host for one run's family hosts the agents for nobody else: no peer counts it, no `run` relies on it.
      agents: hosts ? this.#versions.agents : [],
      capacity: this.#capacity,
      startedAt: this.#startedAt,
      takeKeys: hosts ? this.#versions.takeKeys() : [],
    };
  }

  /** One heartbeat: renews the runs held and this host's row; notes which runs are to move, and where. */
  async #beat(fences: readonly Fence[], now: Date): Promise<string[]> {
    const rows = await this.#process.store.leases.beat(this.#worker(), fences, now);
    for (const row of rows) {
      const held = this.#held.get(row.run_id);
      if (held) held.moveTo = row.move_to;
    }
    return rows.map((r) => r.run_id);
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
          await this.#process.store.leases.heartbeatMany(this.#worker(), [], this.#process.clock.now());
          this.#registered = true;
        }
        // The order of the versions it runs, then the runs of older ones that may move marked (not by
        // a host for one run's family, which takes no others).
        await this.#versions.refresh(this.#process.store, this.#process.clock.now(), {
          mark: this.#family === undefined,
          markEveryMs: this.#pollMs,
          log: this.#process.log,
        });
        // Full when it took a run for every free slot; a fair share short of
        // that leaves the rest to its peers, so it naps like an idle host.
        const free = this.#capacity - this.#held.size;
        full = free > 0 && (await this.poll()) === free;
      } catch (err) {
        this.#process.log.warn(this.#registered ? "poll-failed" : "heartbeat-failed", {
          owner: this.#process.owner,
          error: describeError(err),
        });
      }
      if (full) continue; // there may be more waiting: look again as soon as a slot frees
      await this.#nap();
    }
  }

  #drive(run: TakenRun): void {
    // The take started or moved the run at a version this host runs.
    const deps = this.#versions.depsFor(run);
    const stop = new AbortController();
    const fence = { runId: run.run_id, epoch: run.epoch };
    const now = this.#process.clock.now().getTime();
    const held: Held = {
      fence,
      stop,
      done: Promise.resolve(),
      release: this.#leases.hold(fence, stop),
      moveTo: run.move_to ?? null,
    };
    // Moved by this take, or by an earlier claim whose worker may have died before its carry check.
    const justMoved = !!run.previous_version && run.previous_version !== run.agent_version;
    const movedFrom = justMoved ? run.previous_version! : run.moved_from ?? undefined;
    this.#held.set(run.run_id, held);
    // Parked here under the epoch just before this claim's, by this host: nobody else had it meanwhile.
    const parked = this.#parked.take(run.run_id);
    const resume = parked && parked.epoch + 1 === run.epoch && run.previous_owner === this.owner
      ? parked
      : undefined;
    held.done = (async () => {
      try {
        const outcome = await driveRun(deps, {
          run,
          epoch: run.epoch,
          previousOwner: run.previous_owner,
          leaseAgeMs: run.previous_heartbeat_at
            ? now - new Date(run.previous_heartbeat_at).getTime()
            : undefined,
          ...(resume ? { parked: resume } : {}),
          ...(movedFrom ? { movedFrom, justMoved, movedEpoch: run.moved_epoch ?? run.epoch } : {}),
          moveTo: () => held.moveTo,
        }, stop);
        if (outcome.parked) this.#parked.park(run.run_id, outcome.parked);
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
        this.#process.log.error("worker-error", {
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

  /**
   * Drops `held` from the held set, unless the run was taken again since (by
   * this host, after its release), and ends the renewal of its lease.
   */
  #forget(runId: string, held: Held): void {
    if (this.#held.get(runId) === held) this.#held.delete(runId);
    held.release();
  }

  /** Starts the companions; once the host stops (or is killed), stops them and resolves. */
  #withCompanions(): Promise<void> {
    if (this.#companions.length === 0) return Promise.resolve();
    for (const c of this.#companions) c.start();
    return new Promise((resolve) => {
      this.#stop.signal.addEventListener(
        "abort",
        () => void Promise.all(this.#companions.map((c) => c.stop())).then(() => resolve()),
        { once: true },
      );
    });
  }

  /** Beats until the host stops; resolves once the beat on its way, if any, has ended. */
  #heartbeats(): Promise<void> {
    if (this.stopping) return Promise.resolve();
    this.#leases.start();
    return new Promise((resolve) => {
      this.#stop.signal.addEventListener("abort", () => void this.#leases.stop().then(resolve), {
        once: true,
      });
    });
  }
}
