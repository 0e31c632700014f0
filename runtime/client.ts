/**
 * The client: the one API through which runs are started, watched and
 * steered. The CLI commands (`submit`, `runs`, `inspect`, `cancel`,
 * `resolve`, `reopen`) are thin wrappers over it, and so is anything a user
 * builds. It can also host a worker in the same process (the embedded way to
 * run agents without a supervisor).
 *
 * @module
 */

import {
  type Agent,
  type AgentContext,
  checkInput,
  type ModelEndpoint,
  NAME_PATTERN,
  prepareAgent,
} from "./agent.ts";
import { type Budget, checkBudget, mergeBudget, spendOf } from "./budget.ts";
import { type Clock, SystemClock } from "./clock.ts";
import { redactUrl } from "./config.ts";
import { RuntimeError } from "./errors.ts";
import { parseKeyValues } from "./http.ts";
import { WorkerHost, type WorkerHostOptions } from "./host.ts";
import { OpenAIPlanner, type Planner } from "./planner.ts";
import { openStore } from "./store/open.ts";
import { agentsWithRuns, countByStatus, type RunTokens, tokensByRun } from "./store/overview.ts";
import { openPglite } from "./store/pglite.ts";
import type {
  AnsweredApproval,
  ApprovalRow,
  JournalRow,
  RunFilter,
  RunRow,
  RunStatus,
  RunSummary,
  SideEffectRow,
  Store,
} from "./store/store.ts";
import { Store as StoreClass } from "./store/store.ts";
import type { Json } from "./tools.ts";

/** Where the runs live. */
export interface ConnectOptions {
  /** PostgreSQL (`postgres://...`); the tables must exist (schema.sql). */
  databaseUrl?: string;
  /** The embedded database's directory (PGlite); used when `databaseUrl` is unset. */
  dataDir?: string;
  /** An in-memory embedded database (tests, examples); used when neither is set. */
  memory?: boolean;
  /** Time for timestamps and waits. Default: the system clock. */
  clock?: Clock;
  /** Connections in the PostgreSQL pool. Default 4. */
  poolSize?: number;
}

/** A run as the client reports it. */
export interface RunInfo {
  /** The run's id. */
  runId: string;
  /** The agent that drives it. */
  agent: string;
  /** Where it stands. */
  status: RunStatus;
  /** Its input. */
  input: Json | null;
  /** The model's final answer, once done. */
  output: string | null;
  /** Why it failed, was blocked or cancelled. */
  error: string | null;
  /** The fencing epoch of its latest claim. */
  epoch: number;
  /** The worker that holds (or last held) it. */
  owner: string | null;
  /** When it was created. */
  createdAt: Date;
  /** When its status last changed. */
  updatedAt: Date;
  /** Its ceilings, if any. */
  budget: Budget | null;
}

/** One run's whole record: the run, its decisions and its tool calls, by step. */
export interface RunRecord {
  /** The run row. */
  run: RunRow;
  /** Its decisions. */
  journal: JournalRow[];
  /** Its tool calls. */
  effects: SideEffectRow[];
  /** What it has spent: tokens (reported, plus reservations not yet settled), model requests, tool requests. */
  spend: { tokens: number; modelCalls: number; toolCalls: number };
}

/** How a human settles a flagged tool call. */
export type Resolution =
  | { action: "result"; result: Json }
  | { action: "retry" }
  | { action: "fail"; reason?: string };

/** A client call was refused: the run does not exist, is in the wrong state, ... `code` says which. */
export class ClientError extends RuntimeError {
  /** Creates a client error. */
  constructor(code: string, message: string) {
    super(code, message);
    this.name = "ClientError";
  }
}

/** Statuses in which a run will not move again without a person (`blocked`) or at all. */
export const SETTLED_STATUSES: readonly RunStatus[] = ["done", "failed", "cancelled", "blocked", "waiting"];

/** The client over one database. Use {@link connect}. */
export class Client {
  /** The store underneath (every statement goes through it). */
  readonly store: Store;
  /** The client's clock. */
  readonly clock: Clock;

  /** Wraps an open store. */
  constructor(store: Store, clock: Clock = new SystemClock()) {
    this.store = store;
    this.clock = clock;
  }

  /**
   * Starts a run of `agent` (it stays `pending` until a worker hosting the
   * agent takes it). The input is checked against the agent first; a run id
   * is generated when none is given. Throws `RUN_EXISTS` for a taken id.
   */
  async start(
    agent: Agent,
    opts: { runId?: string; input?: unknown; budget?: Budget } = {},
  ): Promise<RunInfo> {
    const runId = opts.runId ?? `${agent.name}-${crypto.randomUUID().slice(0, 8)}`;
    checkRunId(runId);
    const { input, goal } = checkInput(agent, opts.input);
    const budget = mergeBudget(agent.budget, checkBudget(opts.budget, `Run ${runId}`));
    const created = await this.store.createRun(
      { runId, agent: agent.name, goal, input, budget },
      this.clock.now(),
    );
    const run = await this.store.getRun(runId);
    if (!created || !run) {
      throw new ClientError(
        "RUN_EXISTS",
        `Run ${runId} exists already (agent ${run?.agent ?? "?"}, status ${
          run?.status ?? "unknown"
        }); choose another run id`,
      );
    }
    return info(run);
  }

  /** One run, or undefined. */
  async get(runId: string): Promise<RunInfo | undefined> {
    const run = await this.store.getRun(runId);
    return run ? info(run) : undefined;
  }

  /**
   * Waits until the run is settled (done, failed, cancelled, or blocked on a
   * person) and returns it with its output. Throws `WAIT_TIMEOUT` after
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
      if (SETTLED_STATUSES.includes(run.status)) return run;
      if (this.clock.now().getTime() >= deadline) {
        throw new ClientError(
          "WAIT_TIMEOUT",
          `Run ${runId} is still ${run.status} after ${timeoutMs}ms (owner ${run.owner ?? "none"})`,
        );
      }
      await this.clock.sleep(opts.pollMs ?? 100, opts.signal);
    }
  }

  /** Runs, newest first, one page at a time, with the number matching the filter. */
  async list(filter: RunFilter = {}): Promise<{ runs: RunSummary[]; total: number }> {
    return await this.store.listRuns(filter);
  }

  /**
   * What an overview shows beside a page of runs: runs per status (among those
   * matching `agent` and `search`), the agents that have runs, and the tokens
   * each of `runIds` has spent.
   */
  async overview(
    opts: { agent?: string; search?: string; runIds?: string[] } = {},
  ): Promise<
    { counts: Partial<Record<RunStatus, number>>; agents: string[]; tokens: Map<string, RunTokens> }
  > {
    const client = this.store.client;
    const [counts, agents, tokens] = [
      await countByStatus(client, opts),
      await agentsWithRuns(client),
      await tokensByRun(client, opts.runIds ?? []),
    ];
    return { counts, agents, tokens };
  }

  /** The agents some live worker hosts now (its heartbeat is younger than `leaseMs`). */
  async hostedAgents(leaseMs = 12_000): Promise<string[]> {
    return await this.store.hostedAgents(new Date(this.clock.now().getTime() - leaseMs));
  }

  /** A run with its decisions, tool calls, and spend (against its budget, if any). Throws `RUN_NOT_FOUND`. */
  async inspect(runId: string): Promise<RunRecord> {
    const run = await this.store.getRun(runId);
    if (!run) throw notFound(runId);
    const { journal, effects } = await this.store.loadHistory(runId);
    return { run, journal, effects, spend: spendOf(journal, effects) };
  }

  /** Cancels a run that is not closed; a worker holding it stops at its next write. */
  async cancel(runId: string, opts: { by?: string; reason?: string } = {}): Promise<RunInfo> {
    const why = `cancelled by ${opts.by ?? "client"}${opts.reason ? `: ${opts.reason}` : ""}`;
    const run = await this.store.cancelRun(runId, why, this.clock.now());
    if (!run) {
      const existing = await this.store.getRun(runId);
      throw existing
        ? new ClientError("RUN_CLOSED", `Run ${runId} is ${existing.status} already; nothing to cancel`)
        : notFound(runId);
    }
    return info(run);
  }

  /**
   * Reopens a failed or cancelled run as pending, keeping its history: a
   * worker resumes it where it stopped, re-sending any call left at `intent`
   * under its original key.
   */
  async reopen(runId: string): Promise<RunInfo> {
    const run = await this.store.reopenRun(runId, this.clock.now());
    if (!run) {
      const existing = await this.store.getRun(runId);
      throw existing
        ? new ClientError(
          "NOT_REOPENABLE",
          `Run ${runId} is ${existing.status}; only a failed or cancelled run can be reopened`,
        )
        : notFound(runId);
    }
    return info(run);
  }

  /**
   * Settles a flagged tool call of a blocked run (`result`: it happened, with
   * this result; `retry`: send it once more; `fail`), and sets the run back to
   * pending once no flagged call is left.
   */
  async resolve(
    key: string,
    resolution: Resolution,
    opts: { by?: string } = {},
  ): Promise<{ effect: SideEffectRow; unblocked: boolean }> {
    const by = opts.by ?? "client";
    const r = resolution.action === "fail"
      ? {
        action: "fail" as const,
        error: `marked failed by ${by}${resolution.reason ? `: ${resolution.reason}` : ""}`,
      }
      : resolution;
    const out = await this.store.resolveEffect(key, r, by, this.clock.now());
    if (out) return out;
    const e = await this.store.getEffect(key);
    if (!e) {
      throw new ClientError(
        "CALL_NOT_FOUND",
        `No tool call with key ${JSON.stringify(key)}; 'deno task inspect RUN' shows a run's keys`,
      );
    }
    if (e.status !== "flagged") {
      throw new ClientError(
        "NOT_FLAGGED",
        `Tool call ${key} is ${e.status}, not flagged: nothing to resolve`,
      );
    }
    const run = await this.store.getRun(e.run_id);
    throw new ClientError(
      "RUN_NOT_BLOCKED",
      `Tool call ${key} is flagged but run ${e.run_id} is ${run?.status}, not blocked: ` +
        `wait until a worker has blocked it ('deno task runs'), then resolve`,
    );
  }

  /**
   * Approves a tool call that waits for a person, for the exact arguments it
   * was asked about; a waiting run is taken up again at once. Returns the
   * request as answered, with its run's status after the answer. Throws
   * `APPROVAL_NOT_FOUND`, `NOT_PENDING` (answered already), or `RUN_CLOSED`
   * when the run is cancelled, done or failed: the request then stays pending,
   * and is asked again if the run is reopened.
   */
  async approve(key: string, opts: { by?: string } = {}): Promise<AnsweredApproval> {
    return await this.#decide(key, "approved", opts.by ?? "client", null);
  }

  /**
   * Denies a tool call that waits for a person: it is never sent, and the
   * model sees the refusal (with `reason`) as that tool's result. Refused as
   * {@link Client.approve} is.
   */
  async deny(key: string, opts: { by?: string; reason?: string } = {}): Promise<AnsweredApproval> {
    return await this.#decide(key, "denied", opts.by ?? "client", opts.reason ?? null);
  }

  /** The approval requests of a run, by step. */
  async approvals(runId: string): Promise<ApprovalRow[]> {
    return await this.store.listApprovals(runId);
  }

  async #decide(
    key: string,
    decision: "approved" | "denied",
    by: string,
    reason: string | null,
  ): Promise<AnsweredApproval> {
    const { approval, decided, runStatus } = await this.store.decideApproval(
      key,
      decision,
      by,
      reason,
      this.clock.now(),
    );
    if (!approval || !runStatus) {
      throw new ClientError(
        "APPROVAL_NOT_FOUND",
        `No approval request for ${
          JSON.stringify(key)
        }; 'deno task runs --status waiting' lists the runs that wait`,
      );
    }
    if (decided) return { ...approval, run_status: runStatus };
    if (approval.status === "pending") {
      throw new ClientError(
        "RUN_CLOSED",
        `Run ${approval.run_id} is ${runStatus}, so tool call ${key} was not ${decision}: a closed run's ` +
          `calls are not answered. Reopen it first ('deno task reopen ${approval.run_id}'); the call is then asked ` +
          `about again`,
      );
    }
    throw new ClientError(
      "NOT_PENDING",
      `The approval request for ${key} was ${approval.status} already by ${approval.decided_by ?? "someone"}`,
    );
  }

  /**
   * Retention: deletes finished runs (done, failed, cancelled) last changed
   * before `before`, with every row of theirs, `batchSize` runs per statement
   * (so no statement holds many locks), never an open run. With `dryRun` it
   * deletes nothing and reports what it would. Returns what it removed.
   */
  async prune(
    before: Date,
    opts: { batchSize?: number; dryRun?: boolean; maxRuns?: number } = {},
  ): Promise<{ runs: string[]; journal: number; effects: number; batches: number }> {
    const batchSize = opts.batchSize ?? 500;
    const maxRuns = opts.maxRuns ?? 1_000_000;
    const out = { runs: [] as string[], journal: 0, effects: 0, batches: 0 };
    if (opts.dryRun) {
      const seen = await this.store.pruneRuns(before, maxRuns, true);
      return { ...seen, batches: 0 };
    }
    // Bounded by maxRuns: each batch deletes at least one run or ends the loop.
    while (out.runs.length < maxRuns) {
      const batch = await this.store.pruneRuns(before, Math.min(batchSize, maxRuns - out.runs.length));
      if (batch.runs.length === 0) break;
      out.runs.push(...batch.runs);
      out.journal += batch.journal;
      out.effects += batch.effects;
      out.batches++;
      if (batch.runs.length < batchSize) break;
    }
    return out;
  }

  /**
   * Hosts a worker in this process for `agents`: it takes their runs from this
   * client's database and drives them until {@link WorkerHost.stop}. An agent
   * that names an endpoint (or nothing) is given an OpenAI-compatible client
   * from the endpoint and `MODEL_URL`, `MODEL`, `MODEL_API_KEY`.
   */
  async startWorker(
    agents: Agent[],
    opts: Partial<Omit<WorkerHostOptions, "agents" | "store">> & { context?: Partial<AgentContext> } = {},
  ): Promise<WorkerHost> {
    const { context, ...hostOpts } = opts;
    const ctx: AgentContext = { env: readEnv(), dataDir: ".data", embedded: true, ...context };
    const prepared = await Promise.all(
      agents.map((a) => prepareAgent(a, ctx, (e) => endpointPlanner(a, e, ctx))),
    );
    return new WorkerHost({
      clock: this.clock,
      pollMs: 200,
      ...hostOpts,
      store: this.store,
      agents: prepared,
    }).start();
  }

  /** Closes the connection (and the embedded database's lock). */
  async close(): Promise<void> {
    await this.store.client.close();
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
    store = await openStore({ databaseUrl: opts.databaseUrl, dataDir: opts.dataDir ?? ".data" }, {
      max: opts.poolSize ?? 4,
    });
  } else {
    store = new StoreClass(await openPglite());
    await store.applySchema();
  }
  return new Client(store, opts.clock);
}

/**
 * An OpenAI-compatible client from an agent's endpoint and the `MODEL_*`
 * settings. Throws `MODEL_MISSING` when there is no URL or no model name
 * (a real endpoint always needs `MODEL`), `MODEL_SETTINGS_INVALID` for
 * malformed `MODEL_HEADERS` or `MODEL_QUERY`.
 */
export function endpointPlanner(agent: Agent, endpoint: ModelEndpoint, ctx: AgentContext): Planner {
  const url = ctx.env.MODEL_URL || endpoint.url;
  const model = ctx.env.MODEL || endpoint.model;
  if (!url || !model) {
    throw new RuntimeError(
      "MODEL_MISSING",
      `Agent ${agent.name} has no model: give 'model' in defineAgent({ model: { url, model } }) or set ` +
        `MODEL_URL and MODEL (now ${url ? "MODEL" : "MODEL_URL"} is missing${
          url ? `; ${redactUrl(url)} needs a model name such as MODEL=gpt-4o-mini` : ""
        })`,
    );
  }
  if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    throw new RuntimeError(
      "MODEL_SETTINGS_INVALID",
      `The model URL of agent ${agent.name} must be an http(s) URL like http://127.0.0.1:9100/v1: ` +
        `current value is ${JSON.stringify(redactUrl(url))}`,
    );
  }
  const extra = (name: "MODEL_HEADERS" | "MODEL_QUERY", kind: "headers" | "query") => {
    const raw = ctx.env[name];
    if (!raw) return {};
    try {
      return parseKeyValues(raw, kind);
    } catch (err) {
      throw new RuntimeError(
        "MODEL_SETTINGS_INVALID",
        `${name} must be a JSON object of strings or name=value pairs separated by commas: ${
          (err as Error).message
        }`,
      );
    }
  };
  return new OpenAIPlanner({
    url,
    model,
    apiKey: ctx.env[endpoint.apiKeyEnv ?? "MODEL_API_KEY"] || undefined,
    headers: { ...endpoint.headers, ...extra("MODEL_HEADERS", "headers") },
    query: { ...endpoint.query, ...extra("MODEL_QUERY", "query") },
  });
}

function readEnv(): Record<string, string | undefined> {
  try {
    return Deno.env.toObject();
  } catch {
    return {}; // no env permission: the agent's own settings must do
  }
}

function checkRunId(runId: string): void {
  if (!NAME_PATTERN.test(runId)) {
    throw new ClientError(
      "BAD_RUN_ID",
      `A run id is 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit: ` +
        `current value is ${JSON.stringify(runId)}`,
    );
  }
}

function notFound(runId: string): ClientError {
  return new ClientError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}; 'deno task runs' lists them`);
}

function info(run: RunRow): RunInfo {
  return {
    runId: run.run_id,
    agent: run.agent,
    status: run.status,
    input: run.input,
    output: run.output,
    error: run.error,
    epoch: run.epoch,
    owner: run.owner,
    createdAt: new Date(run.created_at),
    updatedAt: new Date(run.updated_at),
    budget: run.budget ?? null,
  };
}
