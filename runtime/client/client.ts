/**
 * The client: the one API through which runs are started, watched and
 * steered, split by audience. The application's calls are {@link Client}'s
 * own: start a run, run an agent to its answer, get, wait for and follow a
 * run, host a worker in this process (the embedded way to run agents without
 * a supervisor). The operators' calls are `client.operators`
 * (`operator_client.ts`), the page's and the commands' reads `client.reads`
 * (`read_client.ts`), a conversation's calls `client.conversations`
 * (`conversation_client.ts`). The CLI commands and the page are thin wrappers over
 * them, and so is anything a user builds.
 *
 * @module
 */

import { type Agent, type AgentContext, checkInput, prepareAgent } from "../agent/agent.ts";
import { withChildAgents } from "../agent/agent_tool.ts";
import { type Budget, checkBudget, mergeBudget } from "../agent/budget.ts";
import { checkLabels } from "../agent/limit_asks.ts";
import { checkModelParams } from "../model/params.ts";
import { endpointPlanner } from "../model/endpoint.ts";
import type { ModelParams } from "../model/transcript.ts";
import { type Clock, SystemClock } from "../base/clock.ts";
import { ClientError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { WorkerHost, type WorkerOptions } from "../host/host.ts";
import { openStore } from "../store/open.ts";
import { openPglite } from "../store/pglite.ts";
import { Store } from "../store/store.ts";
import type { StreamEvent } from "../run/stream.ts";
import { type WatchOptions, watchRun } from "./watch.ts";
import {
  type ConnectOptions,
  type RunCallOptions,
  type RunInfo,
  SETTLED_STATUSES,
  type SignalResult,
} from "./shapes.ts";
import { checkRunId, checkSignal, info, notFound, readEnv } from "./checks.ts";
import { OperatorClient } from "./operator_client.ts";
import { ReadClient } from "./read_client.ts";
import { ConversationClient } from "./conversation_client.ts";
import { ScheduleClient } from "./schedule_client.ts";
import { type ForkInfo, type ForkOptions, forkRun } from "./fork_client.ts";
import { ScheduleTicker } from "../schedules/ticker.ts";
import { Logger } from "../base/log.ts";

/**
 * The client over one database. Use {@link connect}. Its own calls are the
 * application's; `operators`, `reads` and `conversations` hold the other
 * audiences' calls, over the same store and clock. Every call checks the
 * ids it is given by the rule of ids.ts before any statement is sent, and
 * refuses one that breaks it: `BAD_RUN_ID` (a run id), `ID_INVALID` (a tool
 * call's key, who acts), `MESSAGE_INVALID` (a message id), `FILTER_INVALID`
 * (a list's filter).
 */
export class Client {
  /** The store underneath (every statement goes through it). */
  readonly store: Store;
  /** The client's clock. */
  readonly clock: Clock;
  /** What operators do to runs: cancel, reopen, resolve, settle, approve, deny, prune. */
  readonly operators: OperatorClient;
  /** What the page and the commands read: lists, counts, a run's record, its timeline. */
  readonly reads: ReadClient;
  /** A conversation's calls: send a message, read the answers, close it. */
  readonly conversations: ConversationClient;
  /** Schedules: set, list, pause, resume, remove. */
  readonly schedules: ScheduleClient;
  // The worker hosts this client started and that still run: a call that makes a run takeable wakes them.
  readonly #hosts = new Set<WorkerHost>();
  // The schedule tickers of those hosts: a schedule written through this client wakes them.
  readonly #tickers = new Set<ScheduleTicker>();

  /** Wraps an open store. */
  constructor(store: Store, clock: Clock = new SystemClock()) {
    this.store = store;
    this.clock = clock;
    const wakeHosts = () => this.#wakeHosts();
    this.operators = new OperatorClient({ store, clock, wakeHosts });
    this.reads = new ReadClient({ store, clock });
    this.conversations = new ConversationClient({ store, clock, wakeHosts });
    this.schedules = new ScheduleClient({
      store,
      clock,
      wakeTickers: () => this.#tickers.forEach((t) => t.wake()),
    });
  }

  /**
   * Starts a run of `agent` (it stays `pending` until a worker hosting the
   * agent takes it). The input is checked against the agent first; a run id
   * is generated when none is given. `modelParams` are the run's own request
   * parameters, over the agent's (`MODEL_PARAMS_INVALID` when wrong);
   * `labels` are stored on the run (`{ tenant: "acme" }`), for limits to key
   * on and be fair across (`LABELS_INVALID` when wrong). Throws `RUN_EXISTS`
   * for a taken id.
   */
  async start(
    agent: Agent,
    opts: {
      runId?: string;
      input?: unknown;
      budget?: Budget;
      modelParams?: ModelParams;
      labels?: Record<string, string>;
    } = {},
  ): Promise<RunInfo> {
    const runId = opts.runId ?? newRunId(agent);
    checkRunId(runId);
    const { input, goal } = checkInput(agent, opts.input);
    const budget = mergeBudget(agent.budget, checkBudget(opts.budget, `Run ${runId}`));
    const modelParams = checkModelParams(opts.modelParams, `Cannot start run ${runId}`);
    const labels = checkLabels(opts.labels, `Cannot start run ${runId}`);
    const created = await this.store.leases.createRun(
      {
        runId,
        agent: agent.name,
        goal,
        input,
        budget,
        modelParams,
        conversationIdleMs: agent.conversation?.idleMs,
        ...(labels ? { labels } : {}),
      },
      this.clock.now(),
    );
    const run = await this.store.reads.getRun(runId);
    if (!created || !run) {
      throw new ClientError(
        "RUN_EXISTS",
        `Run ${runId} exists already (agent ${run?.agent ?? "?"}, status ${
          run?.status ?? "unknown"
        }); choose another run id`,
      );
    }
    this.#wakeHosts();
    return info(run);
  }

  /**
   * Forks the run `runId` at its step `opts.atSeq` (docs/fork.md): a new run,
   * pending, whose steps before it are the original's, copied under its own
   * keys, nothing sent again and no model asked; from there it decides with
   * `opts.agent`, `opts.model` or `opts.modelParams`. Unless `opts.live`, it
   * sends no call of a tool that acts on the world: each is answered from the
   * original's record for the same arguments, or the tool's stub, or flagged.
   * Throws `RUN_NOT_FOUND`, `FORK_INVALID`, `RUN_EXISTS`, `BAD_RUN_ID`.
   */
  async fork(runId: string, opts: ForkOptions): Promise<ForkInfo> {
    const forked = await forkRun({ store: this.store, now: () => this.clock.now() }, runId, opts);
    this.#wakeHosts();
    return forked;
  }

  /**
   * Sends the run `runId` the signal `name` (`payment-received`), with
   * `payload` (JSON, at most `SIGNAL_PAYLOAD_BYTES_MAX`, 1 000 000 bytes;
   * default null): kept until one of the run's calls that waits for that name takes
   * it, each signal by one call, whether a call waits for it now or only
   * later. A call waiting for it is woken at once. A send with the
   * `signalId` of an earlier one (default: a random id) is that signal:
   * nothing is written and the answer says `duplicate`. A run not closed
   * takes signals (pending, running, waiting, blocked). Throws
   * `RUN_NOT_FOUND`, `RUN_CLOSED`, `BAD_RUN_ID`, `SIGNAL_INVALID` (a name,
   * an id or a payload the runtime refuses).
   */
  async signal(
    runId: string,
    name: string,
    payload: unknown = null,
    opts: { signalId?: string } = {},
  ): Promise<SignalResult> {
    checkRunId(runId);
    const signalId = opts.signalId ?? crypto.randomUUID();
    const checked = checkSignal(name, signalId, payload);
    const sent = await this.store.signals.send({ runId, name, signalId, payload: checked }, this.clock.now());
    if (!sent) {
      const run = await this.store.reads.getRun(runId);
      if (!run) throw notFound(runId);
      throw new ClientError(
        "RUN_CLOSED",
        `Cannot send signal ${name} to run ${runId}: it is ${run.status}${
          run.error ? ` (${run.error})` : ""
        }, ` +
          `and a closed run takes no signal`,
      );
    }
    if (sent.woken) this.#wakeHosts();
    const { signal } = sent;
    return {
      runId,
      name: signal.name,
      signalId,
      seq: signal.seq,
      sentAt: new Date(signal.sent_at),
      duplicate: sent.duplicate,
      woken: sent.woken,
    };
  }

  /**
   * Runs `agent` on `input` and returns the run once it is settled, as
   * {@link Client.wait} does: done (its `output` the answer), failed,
   * cancelled, or waiting on a person. When no live worker hosts the agent,
   * this process hosts it for the call ({@link Client.startWorker}, with the
   * agents its tools start), for this run and the runs under it only, and
   * stops it once the run is settled.
   * The run is as durable as any: with a `runId` that exists already (this
   * agent's), the run is taken up where it stands instead of started again,
   * so calling `run` again after a crash finishes it. `timeoutMs` (default
   * ten minutes) bounds the wait; the run itself goes on.
   */
  async run(agent: Agent, input?: unknown, opts: RunCallOptions = {}): Promise<RunInfo> {
    const { runId: given, budget, modelParams, labels, timeoutMs = 600_000, signal, ...worker } = opts;
    const runId = given ?? newRunId(agent);
    checkRunId(runId);
    // The worker first, so an agent that cannot be built (no model) is refused before a run is stored.
    const hosted = (await this.reads.hostedAgents()).includes(agent.name);
    const host = hosted ? undefined : await this.startWorker([agent], { ...worker, family: runId });
    try {
      const existing = given === undefined ? undefined : await this.get(runId);
      if (existing && existing.agent !== agent.name) {
        throw new ClientError(
          "RUN_EXISTS",
          `Run ${runId} belongs to agent ${existing.agent}, not ${agent.name}: choose another run id`,
        );
      }
      if (!existing) await this.start(agent, { runId, input, budget, modelParams, labels });
      return await this.wait(runId, { timeoutMs, signal, pollMs: host ? 20 : 100 });
    } finally {
      await host?.stop();
    }
  }

  /** One run, or undefined. */
  async get(runId: string): Promise<RunInfo | undefined> {
    checkRunId(runId);
    const run = await this.store.reads.getRun(runId);
    return run ? info(run) : undefined;
  }

  /**
   * Waits until the run is settled (done, failed, cancelled, or blocked or
   * waiting on a person; not while it waits on its calls' remotes) and
   * returns it with its output. A conversation is settled when it has
   * answered its latest message (its `output` is that answer) and waits for
   * the next. Throws `WAIT_TIMEOUT` after
   * `timeoutMs` (default 60 000) and `RUN_NOT_FOUND` for an unknown run.
   */
  async wait(
    runId: string,
    opts: { timeoutMs?: number; pollMs?: number; signal?: AbortSignal } = {},
  ): Promise<RunInfo> {
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const deadline = this.clock.now().getTime() + timeoutMs;
    // Bounded by the deadline.
    for (;;) {
      const run = await this.get(runId);
      if (!run) throw notFound(runId);
      if (SETTLED_STATUSES.includes(run.status) && (run.wakeAt === null || run.conversation?.idle)) {
        return run;
      }
      if (this.clock.now().getTime() >= deadline) {
        throw new ClientError(
          "WAIT_TIMEOUT",
          `Run ${runId} is still ${run.status} after ${timeoutMs}ms (owner ${run.owner ?? "none"})`,
        );
      }
      await this.clock.sleep(opts.pollMs ?? 100, opts.signal);
    }
  }

  /**
   * Follows a run as it happens: an async iterator of its events (text as
   * the model writes it, tool calls decided, tool results, answers, status
   * changes, resets), its journaled history first, then the live tail, until
   * the run is done, failed or cancelled (or `opts.signal` aborts). Text
   * arrives only from workers started with `STREAM_DELTAS=1`, and only
   * through a database other processes share (PostgreSQL), or in the
   * process that drives the run (PGlite); see `stream.ts` for the reset
   * rule. Throws `RUN_NOT_FOUND` for an unknown run, `STREAM_UNSUPPORTED`
   * for a store that cannot listen.
   */
  async *stream(runId: string, opts: WatchOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    checkRunId(runId);
    if (!(await this.store.reads.watchRun(runId))) throw notFound(runId);
    yield* watchRun(this.store, this.clock, runId, opts);
  }

  /**
   * Hosts a worker in this process for `agents`: it takes their runs from this
   * client's database and drives them until {@link WorkerHost.stop}. An agent
   * that names an endpoint (or nothing) is given an OpenAI-compatible client
   * from the endpoint and `MODEL_URL`, `MODEL`, `MODEL_API_KEY`, by the rule
   * of `model/endpoint.ts` (what the agent names wins). The agents
   * their tools start runs of (`agentTool`) are hosted with them. Every
   * option left unset is the `worker` command's default (`DEFAULTS`: a 3 s
   * poll, group commit on; `groupCommitMs: 0` turns it off); a run this
   * client makes takeable (started, reopened, resolved, settled, answered,
   * sent a message) is taken at once, not at the next poll. Unless
   * `schedules: false`, the host also ticks its agents' schedules
   * (`client.schedules`): it starts their runs at their occurrences, which is
   * safe beside any number of other tickers.
   */
  async startWorker(
    agents: Agent[],
    opts: WorkerOptions & {
      /** What the agents' tools and models are built with. Default: this process's environment, `.data`, embedded. */
      context?: Partial<AgentContext>;
      /** Takes only this run and the runs under it (see {@link WorkerHostOptions.family}). */
      family?: string;
      /** Tick the agents' schedules in this process. Default true (false for a host of one run's `family`). */
      schedules?: boolean;
    } = {},
  ): Promise<WorkerHost> {
    const { context, schedules, ...hostOpts } = opts;
    // The host's log is the tools' too (an MCP server's tool list changing is reported in it).
    const ctx: AgentContext = {
      env: readEnv(),
      dataDir: DEFAULTS.dataDir,
      embedded: true,
      log: hostOpts.log,
      ...context,
    };
    const prepare = (a: Agent) => prepareAgent(a, ctx, (e) => endpointPlanner(a, e, ctx.env));
    // The agents these agents call (agentTool) are hosted too: a child run is driven where its parent is.
    const prepared = await withChildAgents(await Promise.all(agents.map(prepare)), prepare);
    // Every setting the host's own default (DEFAULTS, as the commands'): a run this client makes takeable
    // wakes the host at once (#wakeHosts), so an in-process host has no need of a shorter poll.
    const ticker = (schedules ?? hostOpts.family === undefined)
      ? new ScheduleTicker({
        store: this.store,
        clock: this.clock,
        log: hostOpts.log ?? new Logger({ clock: this.clock }),
        agents: prepared.map((a) => a.agent.name),
        name: hostOpts.owner ?? `worker:${Deno.pid}`,
        onStarted: () => this.#wakeHosts(),
      })
      : undefined;
    const host = new WorkerHost({
      clock: this.clock,
      ...hostOpts,
      store: this.store,
      agents: prepared,
      companions: ticker ? [ticker] : [],
    }).start();
    this.#hosts.add(host);
    if (ticker) this.#tickers.add(ticker);
    const forget = () => {
      this.#hosts.delete(host);
      if (ticker) this.#tickers.delete(ticker);
    };
    host.finished.then(forget, forget);
    return host;
  }

  /** Closes the connection (and the embedded database's lock). */
  async close(): Promise<void> {
    await this.store.client.close();
  }

  /** Has every worker host this client started look for runs now, not at its next poll. */
  #wakeHosts(): void {
    for (const host of this.#hosts) host.wake();
  }
}

/**
 * Connects to the runs' database: PostgreSQL when `databaseUrl` is given
 * (its tables must exist), else the embedded database under `dataDir`
 * (created, tables and all, on first use), else an in-memory one.
 */
export async function connect(opts: ConnectOptions = {}): Promise<Client> {
  let store: Store;
  if (opts.databaseUrl || opts.dataDir) {
    store = await openStore({ databaseUrl: opts.databaseUrl, dataDir: opts.dataDir ?? DEFAULTS.dataDir }, {
      max: opts.poolSize ?? 4,
    });
  } else {
    store = new Store(await openPglite());
    await store.applySchema();
  }
  return new Client(store, opts.clock);
}

/** A new run's id: the agent's name and eight hex digits. */
function newRunId(agent: Agent): string {
  return `${agent.name}-${crypto.randomUUID().slice(0, 8)}`;
}
