/**
 * Simulated worker processes for the harness. Many incarnations share one
 * in-process PGlite, one {@link ManualClock} and one pair of in-process mocks,
 * yet each incarnation is as separate as a process: it has its own store
 * handle, its own clock view, its own fetch and its own log. A simulated
 * `kill -9` closes all four at the crash point, so nothing after the point (no
 * `finally`, no pending heartbeat, no promise still running) can write, send
 * or log, just as after a real `kill -9`. A stall parks the incarnation at
 * its point until the harness releases it.
 *
 * The same inputs give the same transcript, byte for byte: timestamps come
 * from the manual clock, backoff jitter from a seeded PRNG, and the mocks'
 * answers from their counters.
 *
 * @module
 */

import { PGlite } from "npm:@electric-sql/pglite@0.5.16";
import { type CreatedResource, MockCloud } from "../mock/cloud.ts";
import demoAgent, { DEMO_GOAL } from "../examples/provision/agent.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { MockModel } from "../mock/model.ts";
import { type Clock, ManualClock } from "../runtime/base/clock.ts";
import type { Agent, AgentContext } from "../runtime/agent/agent.ts";
import { type RunDeps, runDepsFor } from "../runtime/run/context.ts";
import { agentDeps, processDeps, type RetryPolicy } from "../runtime/run/deps.ts";
import { describeError, ownCode, RuntimeError } from "../runtime/base/errors.ts";
import {
  type CrashPlan,
  type CrashPoint,
  CrashPoints,
  type KillPoint,
  SimulatedKill,
} from "../runtime/base/crashpoints.ts";
import { Logger } from "../runtime/base/log.ts";
import { claimAndDrive } from "../runtime/host/run_driver.ts";
import type { RunOutcome } from "../runtime/host/outcome.ts";
import { type FetchLike, OpenAIPlanner, type Planner } from "../runtime/model/planner.ts";
import { PgliteClient, PgliteSession } from "../runtime/store/pglite.ts";
import {
  type GroupCommitOptions,
  type GroupCommitStats,
  type JournalRow,
  type RunRow,
  SCHEMA_SQL,
  type SideEffectRow,
  type SqlClient,
  Store,
} from "../runtime/store/store.ts";
import { type Tool, ToolRegistry } from "../runtime/agent/tools.ts";

/** Where every simulated run starts on the manual clock: 2026-01-01T00:00:00Z. */
export const SIM_START_MS: number = Date.UTC(2026, 0, 1);

/** The URLs the simulated workers use; requests never leave the process. */
export const SIM_MODEL_URL = "http://mock-model.sim/v1";
/** See {@link SIM_MODEL_URL}. */
export const SIM_CLOUD_URL = "http://mock-cloud.sim";

/**
 * A deterministic PRNG in [0, 1) (mulberry32): the harness's `random`, and
 * the source of every seeded choice (crash lists, jitter).
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * One in-process PGlite shared by every simulated process of a test file or
 * a matrix run. Each {@link SimDb.freshSchema} call points it at a new empty
 * schema, so two matrix runs in one instance see the same (empty) database.
 */
export class SimDb {
  // The shared instance: private, so its type (PGlite's own) stays out of the testing kit's surface.
  readonly #db: PGlite;
  #schemas = 0;
  /** The session's prepared statements and analysis schedule, shared by every handle (they live in the one session). */
  readonly #session = new PgliteSession();

  /**
   * Group commit for every simulated process on this database: the bound on
   * a write's wait (`GROUP_COMMIT_MS`), or 0 for off. Each process gets a
   * group commit of its own, on its own clock, as a real process would.
   */
  readonly groupCommitMs: number;

  private constructor(db: PGlite, groupCommitMs: number) {
    this.#db = db;
    this.groupCommitMs = groupCommitMs;
  }

  /**
   * Starts an in-memory PGlite (a cold start of a few seconds, about one from
   * a `template` of `pgliteTemplate()`) with the tables loaded.
   * `groupCommitMs` turns group commit on in every process the harness
   * simulates on it (the crash matrix, fence, race and fuzzer proofs all take
   * a `SimDb`).
   */
  static async open(opts: { groupCommitMs?: number; template?: Blob } = {}): Promise<SimDb> {
    const db = await PGlite.create(opts.template ? { loadDataDir: opts.template } : {});
    const sim = new SimDb(db, opts.groupCommitMs ?? 0);
    await sim.freshSchema();
    return sim;
  }

  /**
   * Points every handle at a new schema with empty tables. Safe because the
   * harness runs one world at a time on an instance (PGlite has one session).
   */
  async freshSchema(): Promise<void> {
    const name = `sim_${++this.#schemas}`;
    await this.#db.exec(`create schema ${name}; set search_path to ${name};\n${SCHEMA_SQL}`);
  }

  /**
   * A new store handle on the shared instance; closing it cuts off only this
   * handle. `wrap` puts a layer (the fuzzer's statement counter, a planted
   * bug) between the store and the handle.
   */
  handle(
    describe: string,
    opts: { wrap?: (client: SqlClient) => SqlClient; groupCommit?: GroupCommitOptions } = {},
  ): Store {
    const client = new PgliteClient(this.#db, { describe, owned: false, session: this.#session });
    return new Store(opts.wrap ? opts.wrap(client) : client, { groupCommit: opts.groupCommit });
  }

  /** Runs a script on the shared instance, in the current schema (the fuzzer empties the tables this way). */
  async exec(script: string): Promise<void> {
    await this.#db.exec(script);
  }

  /** Closes the instance. */
  async close(): Promise<void> {
    await this.#db.close();
  }
}

/**
 * A simulated process's tools, built in that process: their requests go
 * through `fetch` (the process's own, which the fuzzer's faults sit on), and
 * `ctx` is what a process gives its tools (its log; a signal that aborts when
 * it dies, so a connection it opened is closed with it).
 */
export type SimTools = (fetch: FetchLike, ctx: AgentContext) => Tool[] | Promise<Tool[]>;

/** Options of {@link SimWorld.open}. */
export interface SimWorldOptions {
  /** Seeds each incarnation's jitter source. Default 1. */
  seed?: number;
  /**
   * Replaces the demo tools (e.g. a variant that takes no idempotency key).
   * Built in each process, with what a process gives its tools (`ctx`: its
   * log, and a signal that aborts when it dies); may be asynchronous (an MCP
   * server's tools are listed first).
   */
  tools?: SimTools;
  /** The agent (its name, instructions, limits); default the demo agent. Tools come from `tools`. */
  agent?: Agent;
  /** Heartbeat period and lease of every worker. Defaults: the settings' defaults (3 s, 12 s). */
  heartbeatMs?: number;
  /** See {@link SimWorldOptions.heartbeatMs}. */
  leaseMs?: number;
  /** Answers the tools' requests instead of the mock cloud (a user's fake remote). */
  remote?: FetchLike;
  /**
   * Calls the mock model puts in one answer of the demo's (or the generic)
   * plan: 3 answers the demo's server, database and DNS record at once, a
   * step of three calls. Default 1.
   */
  modelParallel?: number;
}

/**
 * What the fuzzer puts into one incarnation: layers around its store handle
 * and its fetches (to count, kill and freeze at every boundary, or to plant
 * a bug), and a retry policy. Each hook gets the process it is built for.
 */
export interface ProcessHooks {
  /** Wraps the process's store client (closed by a kill like the handle it wraps). */
  wrapStore?: (client: SqlClient, proc: SimProcess) => SqlClient;
  /** Wraps the process's store itself: a layer around its calls (the fence proof freezes one, say). */
  layerStore?: (store: Store, proc: SimProcess) => Store;
  /** Wraps the process's fetch to the model or the cloud (outside the process's own counting). */
  wrapFetch?: (remote: "model" | "cloud", fetch: FetchLike, proc: SimProcess) => FetchLike;
  /** Replaces fields of the default retry policy. */
  retry?: Partial<RetryPolicy>;
}

/** Everything a set of simulated processes share: the database, the clock, the remotes, the transcript. */
export class SimWorld {
  /** The shared database. */
  readonly db: SimDb;
  /** The one timeline every process reads. */
  readonly clock: ManualClock;
  /** The in-process model; its counters are the truth about model spend. */
  readonly model: MockModel;
  /** The in-process cloud; its resources are the truth about side effects. */
  readonly cloud: MockCloud;
  /** Every line any process logged, prefixed with its name, in order. */
  readonly transcript: string[] = [];
  /** A handle for the harness's own reads (never closed by a kill). */
  readonly observer: Store;
  /** What answers the tools' requests: the mock cloud, or {@link SimWorldOptions.remote}. */
  readonly remote: FetchLike;
  readonly #opts: SimWorldOptions;
  #spawned = 0;

  private constructor(
    db: SimDb,
    clock: ManualClock,
    model: MockModel,
    cloud: MockCloud,
    opts: SimWorldOptions,
  ) {
    this.db = db;
    this.clock = clock;
    this.model = model;
    this.cloud = cloud;
    this.#opts = opts;
    this.observer = db.handle("pglite:sim:observer");
    this.remote = opts.remote ?? cloud.handler;
  }

  /** A world on `db` with a fresh manual clock and fresh in-memory mocks. */
  static async open(db: SimDb, opts: SimWorldOptions = {}): Promise<SimWorld> {
    const clock = new ManualClock(SIM_START_MS);
    const now = () => clock.now();
    const [model, cloud] = await Promise.all([
      MockModel.open({ now, parallel: opts.modelParallel }),
      MockCloud.open({ now }),
    ]);
    return new SimWorld(db, clock, model, cloud, opts);
  }

  /** Writes a harness line (not from any process) into the transcript. */
  note(line: string): void {
    this.transcript.push(line);
  }

  /**
   * Starts a new incarnation on `runId`, like `deno run cli/main.ts run` with
   * `RUN_ID`, `CRASH_AT`/`CRASH_SEQ` or `STALL_AT` set. It runs at once; await
   * {@link SimProcess.exit} (or {@link SimProcess.stalled}).
   */
  spawn(
    opts: {
      name?: string;
      runId: string;
      goal?: string;
      plan?: Partial<CrashPlan>;
      hooks?: ProcessHooks;
      /** This incarnation's agent and tools, instead of the world's (a world of runs of several agents). */
      agent?: Agent;
      /** See {@link SimWorldOptions.tools}. */
      tools?: SimTools;
      /** This incarnation's model, instead of an OpenAI client of the world's mock model. */
      planner?: (fetch: FetchLike) => Planner;
      /**
       * Runs this incarnation as another run of `host`'s process, as a worker
       * host carries several: the two share `host`'s store handle, and so
       * its group commit (their writes ready together ride one statement).
       * The process lives until its last run ends, and a kill of any of its
       * runs kills them all. `hooks.wrapStore` is `host`'s.
       */
      host?: SimProcess;
    },
  ): SimProcess {
    const index = ++this.#spawned;
    const name = opts.name ?? `w${index}`;
    const seed = ((this.#opts.seed ?? 1) * 1_000_003 + index) >>> 0;
    return new SimProcess(this, {
      name,
      runId: opts.runId,
      goal: opts.goal,
      plan: { crashSeq: 0, stallMs: 0, ...opts.plan },
      seed,
      tools: opts.tools ?? this.#opts.tools,
      agent: opts.agent ?? this.#opts.agent,
      planner: opts.planner,
      heartbeatMs: this.#opts.heartbeatMs,
      leaseMs: this.#opts.leaseMs,
      hooks: opts.hooks,
      host: opts.host,
    });
  }

  /** Moves the shared clock forward, letting every woken sleeper run. */
  async advance(ms: number, opts: { settle?: () => Promise<void> } = {}): Promise<void> {
    await this.clock.advance(ms, opts);
  }

  /** Reads everything the checks need about `runId`: its rows and what the mocks saw. */
  async snapshot(runId: string): Promise<RunSnapshot> {
    return await readSnapshot(this.observer, this.model, this.cloud, runId);
  }
}

/** A run's rows and what the remotes saw of it, at one moment. */
export interface RunSnapshot {
  /** The run's row, unless it does not exist. */
  run?: RunRow;
  /** Its decisions, by step. */
  journal: JournalRow[];
  /** Its tool calls, by step. */
  effects: SideEffectRow[];
  /** Chat-completions requests the mock model received for the run. */
  modelCalls: number;
  /** Resources the mock cloud created under the run's keys. */
  created: CreatedResource[];
  /** Requests the mock cloud received per key of the run. */
  requestsByKey: Record<string, number>;
}

/** Reads a {@link RunSnapshot} through `store` and the in-process mocks. */
export async function readSnapshot(
  store: Store,
  model: MockModel,
  cloud: MockCloud,
  runId: string,
): Promise<RunSnapshot> {
  const run = await store.reads.getRun(runId);
  const { journal, effects } = await store.reads.loadHistory(runId);
  const prefix = `${runId}:`;
  const requestsByKey = Object.fromEntries(
    Object.entries(cloud.requests().by_key).filter(([key]) => key.startsWith(prefix)),
  );
  return {
    run,
    journal,
    effects,
    modelCalls: model.calls(runId),
    created: cloud.created(prefix),
    requestsByKey,
  };
}

/** How an incarnation ended. */
export type SimExit =
  /** `claimAndDrive` returned (done, fenced, lost_claim, ...). */
  | { kind: "exited"; outcome: RunOutcome }
  /** Killed at a crash point. */
  | { kind: "killed"; point: KillPoint; seq: number }
  /** Threw something else (a bug, or the store went away). */
  | { kind: "error"; error: string };

/** A fetch that a process can park: the harness holds the next answer until it lets go. */
interface Gate {
  /** Resolved by the harness. */
  release: () => void;
  /** Resolves when a request is parked at the gate. */
  reached: Promise<void>;
  reach: () => void;
  wait: Promise<void>;
}

function newGate(): Gate {
  let release!: () => void;
  let reach!: () => void;
  const wait = new Promise<void>((r) => release = r);
  const reached = new Promise<void>((r) => reach = r);
  return { release, reach, reached, wait };
}

/**
 * The store handle of one simulated process, shared by the runs it carries.
 * It is closed (and `death` aborted) when the process's last run ends or any
 * of them is killed.
 */
class ProcessHandle {
  readonly death = new AbortController();
  /** The runs alive on it. */
  readonly runs = new Set<SimProcess>();
  store!: Store;
}

/** A clock view of one process: the shared time, but its sleeps die with it. */
class ProcessClock implements Clock {
  readonly #base: ManualClock;
  readonly #dead: AbortSignal;
  constructor(base: ManualClock, dead: AbortSignal) {
    this.#base = base;
    this.#dead = dead;
  }
  now(): Date {
    return this.#base.now();
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return this.#base.sleep(ms, signal ? AbortSignal.any([signal, this.#dead]) : this.#dead);
  }
}

/** One simulated worker process (one incarnation) on one run. */
export class SimProcess {
  /** Its name in the transcript and in `runs.owner`. */
  readonly name: string;
  /** The run it drives. */
  readonly runId: string;
  /** Resolves when it ends, however it ends; never rejects. */
  readonly exit: Promise<SimExit>;
  /** Resolves when it parks at its stall point. */
  readonly stalled: Promise<{ point: CrashPoint; seq: number }>;
  /** Requests this process sent to the model, and to the cloud. */
  readonly sent = { model: 0, cloud: 0 };
  readonly #world: SimWorld;
  readonly #handle: ProcessHandle;
  /** Aborted when this run ends: at its exit, or with its process. */
  readonly #death = new AbortController();
  #releaseStall?: () => void;
  #stallReleased = false;
  #gates: Partial<Record<"model" | "cloud", { gate: Gate; when: (req: Request, n: number) => boolean }>> = {};

  /** Use {@link SimWorld.spawn}. */
  constructor(
    world: SimWorld,
    opts: {
      name: string;
      runId: string;
      goal?: string;
      plan: CrashPlan;
      seed: number;
      tools?: SimTools;
      agent?: Agent;
      planner?: (fetch: FetchLike) => Planner;
      heartbeatMs?: number;
      leaseMs?: number;
      hooks?: ProcessHooks;
      host?: SimProcess;
    },
  ) {
    this.#world = world;
    this.name = opts.name;
    this.runId = opts.runId;
    const hooks = opts.hooks ?? {};
    const wrapStore = hooks.wrapStore;
    const clock = new ProcessClock(world.clock, this.#death.signal);
    if (opts.host && opts.host.#handle.runs.size === 0) {
      throw new RuntimeError(
        ownCode("EXITED"),
        `${opts.host.name}'s process has ended: it carries no more runs`,
      );
    }
    this.#handle = opts.host ? opts.host.#handle : new ProcessHandle();
    this.#handle.runs.add(this);
    if (!opts.host) {
      this.#handle.store = world.db.handle(`pglite:sim:${opts.name}`, {
        wrap: wrapStore ? (client) => wrapStore(client, this) : undefined,
        groupCommit: world.db.groupCommitMs > 0
          // The process's group commit times its waits on the process's clock, which outlives any one run.
          ? {
            maxWaitMs: world.db.groupCommitMs,
            clock: new ProcessClock(world.clock, this.#handle.death.signal),
          }
          : undefined,
      });
    }
    const log = new Logger({
      clock,
      // A dead process writes nothing more, not even a log line.
      sink: (line) => {
        if (!this.dead) world.transcript.push(`${this.name} | ${line}`);
      },
    });
    let onStall!: (where: { point: CrashPoint; seq: number }) => void;
    this.stalled = new Promise((r) => onStall = r);
    const crash = new CrashPoints(opts.plan, {
      log,
      clock,
      kill: async (point, seq) => {
        await this.kill(new SimulatedKill(point, seq));
        throw new SimulatedKill(point, seq);
      },
      stall: (point, seq) => {
        onStall({ point, seq });
        if (this.#stallReleased) return Promise.resolve();
        return new Promise<void>((resolve) => this.#releaseStall = resolve);
      },
    });
    const wrapFetch = (remote: "model" | "cloud", fetch: FetchLike) =>
      hooks.wrapFetch ? hooks.wrapFetch(remote, fetch, this) : fetch;
    const modelFetch = wrapFetch("model", this.#fetch("model", world.model.handler));
    const cloudFetch = wrapFetch("cloud", this.#fetch("cloud", world.remote));
    const agent: Agent = opts.agent ?? demoAgent;
    // One process (this incarnation) driving one agent's run.
    const proc = processDeps({
      store: hooks.layerStore ? hooks.layerStore(this.#handle.store, this) : this.#handle.store,
      clock,
      log,
      crash,
      owner: opts.name,
      heartbeatMs: opts.heartbeatMs,
      leaseMs: opts.leaseMs,
      random: seededRandom(opts.seed),
    });
    const start = (tools: Tool[]) => {
      const prepared = {
        agent,
        planner: opts.planner
          ? opts.planner(modelFetch)
          : new OpenAIPlanner({ url: SIM_MODEL_URL, model: "mock-planner", fetch: modelFetch }),
        tools: new ToolRegistry(tools),
      };
      const deps: RunDeps = runDepsFor(proc, agentDeps(prepared, { retry: hooks.retry }));
      return claimAndDrive(deps, {
        runId: opts.runId,
        goal: opts.goal ?? DEMO_GOAL,
        budget: agent.budget,
      });
    };
    this.exit = (async (): Promise<SimExit> => {
      try {
        const ctx: AgentContext = { env: {}, dataDir: ".", embedded: true, log, signal: this.#death.signal };
        const tools = opts.tools
          ? opts.tools(cloudFetch, ctx)
          : demoTools({ cloudUrl: SIM_CLOUD_URL, fetch: cloudFetch });
        // Tools built at once start the run at once, as they always did: no turn is added before it.
        const outcome = await (tools instanceof Promise ? tools.then(start) : start(tools));
        return { kind: "exited", outcome };
      } catch (err) {
        if (err instanceof SimulatedKill) return { kind: "killed", point: err.point, seq: err.seq };
        return { kind: "error", error: describeError(err) };
      } finally {
        // The run is gone either way, its timers and fetches with it; the process with its last run.
        await this.#end(new RuntimeError(ownCode("EXITED"), `${opts.name} exited`));
      }
    })();
  }

  /** True once this run has ended: its process killed, or the run exited. */
  get dead(): boolean {
    return this.#death.signal.aborted;
  }

  /**
   * The process's group commit so far (the counts of every run it carries),
   * or undefined with grouping off.
   */
  get groupStats(): Readonly<GroupCommitStats> | undefined {
    const stats = this.#handle.store.writes.group?.stats;
    return stats && { ...stats };
  }

  /**
   * Ends the process on the spot, with every run it carries: its store
   * handle is closed (any later statement throws), its clock's sleeps are
   * cancelled, its fetches refuse and its log goes quiet.
   */
  async kill(reason: Error = new RuntimeError(ownCode("KILLED"), `${this.name} was killed`)): Promise<void> {
    const handle = this.#handle;
    if (handle.death.signal.aborted) return;
    for (const run of handle.runs) run.#death.abort(reason);
    handle.runs.clear();
    handle.death.abort(reason);
    await handle.store.client.close();
  }

  /** This run has ended: its own sleeps and fetches end; the process ends with its last run. */
  async #end(reason: Error): Promise<void> {
    this.#death.abort(reason);
    this.#handle.runs.delete(this);
    if (this.#handle.runs.size === 0) await this.kill(reason);
  }

  /** Lets a process parked at its stall point carry on. */
  releaseStall(): void {
    this.#stallReleased = true;
    this.#releaseStall?.();
  }

  /**
   * Parks the first request of this process to the model (or cloud) that
   * `when` picks, after the remote has answered, until `release` is called:
   * a process frozen with a request in flight. `when` gets the request and
   * its number among this process's requests to that remote (from 1).
   * `reached` resolves once a request is parked. An abort of the request's
   * signal (the worker stopping) ends the wait, as it would end a real one.
   */
  holdWhen(
    remote: "model" | "cloud",
    when: (req: Request, n: number) => boolean = () => true,
  ): { reached: Promise<void>; release: () => void } {
    const gate = newGate();
    this.#gates[remote] = { gate, when };
    return { reached: gate.reached, release: gate.release };
  }

  #fetch(remote: "model" | "cloud", handler: FetchLike): FetchLike {
    return async (req) => {
      if (this.dead) throw new TypeError(`${this.name} is dead and cannot send ${req.method} ${req.url}`);
      const n = ++this.sent[remote];
      const hold = this.#gates[remote];
      const gate = hold && hold.when(req, n) ? hold.gate : undefined;
      if (gate) delete this.#gates[remote];
      // A killed process's connections close: the remote sees the request aborted
      // (as a server sees a reset socket), so nothing it holds for it stays held.
      const res = await handler(
        new Request(req, { signal: AbortSignal.any([req.signal, this.#death.signal]) }),
      );
      if (gate) {
        gate.reach();
        const aborted = new Promise<never>((_, reject) => {
          const abort = () => reject(req.signal.reason ?? new DOMException("aborted", "AbortError"));
          if (req.signal.aborted) abort();
          req.signal.addEventListener("abort", abort, { once: true });
        });
        // Marked handled: the signal may abort long after the gate opened.
        aborted.catch(() => {});
        await Promise.race([gate.wait, aborted]);
      }
      return res;
    };
  }
}

/** What a process's group commit sent between two readings of {@link SimProcess.groupStats}. */
export function groupStatsSince(
  from: Readonly<GroupCommitStats>,
  to: Readonly<GroupCommitStats>,
): GroupCommitStats {
  return {
    groupStatements: to.groupStatements - from.groupStatements,
    grouped: to.grouped - from.grouped,
    refused: to.refused - from.refused,
    alone: to.alone - from.alone,
  };
}

/** Waits for whichever comes first: the process parks at its stall point, or it ends. */
export async function untilStalledOrExit(
  proc: SimProcess,
): Promise<{ stalled: true } | { stalled: false; exit: SimExit }> {
  return await Promise.race([
    proc.stalled.then(() => ({ stalled: true as const })),
    proc.exit.then((exit) => ({ stalled: false as const, exit })),
  ]);
}
