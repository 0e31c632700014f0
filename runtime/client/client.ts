/**
 * The client: the one API through which runs are started, watched and
 * steered. The CLI commands (`submit`, `runs`, `inspect`, `cancel`,
 * `resolve`, `reopen`) are thin wrappers over it, and so is anything a user
 * builds. It can also host a worker in the same process (the embedded way to
 * run agents without a supervisor).
 *
 * @module
 */

import { type Agent, type AgentContext, checkInput, prepareAgent } from "../agent/agent.ts";
import { withChildAgents } from "../agent/agent_tool.ts";
import { type Budget, checkBudget, mergeBudget, spendOf } from "../agent/budget.ts";
import { checkModelParams } from "../model/params.ts";
import { endpointPlanner } from "./model_endpoint.ts";
import type { ModelParams } from "../model/transcript.ts";
import { type Clock, SystemClock } from "../base/clock.ts";
import { ClientError, describeError, describeValue } from "../base/errors.ts";
import { WorkerHost, type WorkerOptions } from "../host/host.ts";
import { openStore } from "../store/open.ts";
import {
  agentsWithRuns,
  countByStatus,
  type RunTokens,
  runView,
  stepsView,
  tokensByRun,
  wholeValue,
  type WholeValueField,
} from "../store/overview.ts";
import { openPglite } from "../store/pglite.ts";
import {
  type AnsweredApproval,
  type ApprovalRow,
  type FlaggedFilter,
  RESOLVE_BATCH_MAX,
  type RunFilter,
  type RunRow,
  type RunStatus,
  type RunSummary,
  type SideEffectRow,
  type Store,
} from "../store/store.ts";
import { Store as StoreClass } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";
import type { StreamEvent } from "../run/stream.ts";
import { type WatchOptions, watchRun } from "./watch.ts";
import {
  ConnectOptions,
  ConversationTurn,
  MESSAGE_CHARS_MAX,
  PruneResult,
  Resolution,
  RunCallOptions,
  RunInfo,
  RunRecord,
  RunTimeline,
  SendResult,
  SETTLED_STATUSES,
  Settlement,
  StepRange,
} from "./shapes.ts";
import {
  checkBy,
  checkFlaggedFilter,
  checkId,
  checkKey,
  checkListFilter,
  checkRunId,
  checkSettlement,
  describeFilter,
  info,
  notFound,
  readEnv,
  storedResolution,
} from "./checks.ts";

/**
 * The client over one database. Use {@link connect}. Every method checks the
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

  /** Wraps an open store. */
  constructor(store: Store, clock: Clock = new SystemClock()) {
    this.store = store;
    this.clock = clock;
  }

  /**
   * Starts a run of `agent` (it stays `pending` until a worker hosting the
   * agent takes it). The input is checked against the agent first; a run id
   * is generated when none is given. `modelParams` are the run's own request
   * parameters, over the agent's (`MODEL_PARAMS_INVALID` when wrong). Throws
   * `RUN_EXISTS` for a taken id.
   */
  async start(
    agent: Agent,
    opts: { runId?: string; input?: unknown; budget?: Budget; modelParams?: ModelParams } = {},
  ): Promise<RunInfo> {
    const runId = opts.runId ?? newRunId(agent);
    checkRunId(runId);
    const { input, goal } = checkInput(agent, opts.input);
    const budget = mergeBudget(agent.budget, checkBudget(opts.budget, `Run ${runId}`));
    const modelParams = checkModelParams(opts.modelParams, `Cannot start run ${runId}`);
    const created = await this.store.createRun(
      {
        runId,
        agent: agent.name,
        goal,
        input,
        budget,
        modelParams,
        conversationIdleMs: agent.conversation?.idleMs,
      },
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
    const { runId: given, budget, modelParams, timeoutMs = 600_000, signal, ...worker } = opts;
    const runId = given ?? newRunId(agent);
    checkRunId(runId);
    // The worker first, so an agent that cannot be built (no model) is refused before a run is stored.
    const hosted = (await this.hostedAgents()).includes(agent.name);
    const host = hosted ? undefined : await this.startWorker([agent], { ...worker, family: runId });
    try {
      const existing = given === undefined ? undefined : await this.get(runId);
      if (existing && existing.agent !== agent.name) {
        throw new ClientError(
          "RUN_EXISTS",
          `Run ${runId} belongs to agent ${existing.agent}, not ${agent.name}: choose another run id`,
        );
      }
      if (!existing) await this.start(agent, { runId, input, budget, modelParams });
      return await this.wait(runId, { timeoutMs, signal, pollMs: host ? 20 : 100 });
    } finally {
      await host?.stop();
    }
  }

  /** One run, or undefined. */
  async get(runId: string): Promise<RunInfo | undefined> {
    checkRunId(runId);
    const run = await this.store.getRun(runId);
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
   * Runs, newest first, one page at a time, with the number matching the
   * filter. Throws `FILTER_INVALID` for a `limit` that is not an integer from
   * 1 to {@link LIST_LIMIT_MAX}, an `offset` that is not an integer 0 or more,
   * or an unknown `status`.
   */
  async list(filter: RunFilter = {}): Promise<{ runs: RunSummary[]; total: number }> {
    return await this.store.listRuns(checkListFilter(filter));
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
    checkListFilter({ agent: opts.agent, search: opts.search });
    for (const runId of opts.runIds ?? []) checkRunId(runId);
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

  /**
   * A run with its decisions, tool calls, approval requests, spend
   * (against its budget, if any) and child runs. Throws `RUN_NOT_FOUND`.
   */
  async inspect(runId: string): Promise<RunRecord> {
    checkRunId(runId);
    const run = await this.store.getRun(runId);
    if (!run) throw notFound(runId);
    const { journal, effects } = await this.store.loadHistory(runId);
    const approvals = await this.store.listApprovals(runId);
    const children = await this.children(runId);
    const spend = spendOf(journal, effects);
    return {
      run,
      journal,
      effects,
      approvals,
      spend,
      children,
      familySpend: await this.#familySpend(run, children),
    };
  }

  /** What `run` and its descendants have spent together (family.ts reads the same), when it has children. */
  async #familySpend(
    run: RunRow,
    children: readonly unknown[],
  ): Promise<RunRecord["familySpend"]> {
    if (children.length === 0 || !run.root_run_id) return undefined;
    const members = await this.store.families.readFamily(run.root_run_id);
    const parentOf = new Map(members.map((m) => [m.run_id, m.parent_run_id]));
    const under = (id: string): boolean => {
      // Bounded by the family's depth.
      for (let at: string | null | undefined = id, d = 0; at && d < 64; at = parentOf.get(at), d++) {
        if (at === run.run_id) return true;
      }
      return false;
    };
    const total = { tokens: 0, modelCalls: 0, toolCalls: 0 };
    for (const m of members.filter((m) => under(m.run_id))) {
      total.tokens += m.tokens;
      total.modelCalls += m.model_calls;
      total.toolCalls += m.tool_calls;
    }
    return total;
  }

  /** The runs the tool calls of `runId` started (`agentTool`), in the order they were started. */
  async children(
    runId: string,
  ): Promise<Pick<RunInfo, "runId" | "agent" | "status" | "parentKey" | "error">[]> {
    checkRunId(runId);
    return (await this.store.families.children(runId)).map((c) => ({
      runId: c.run_id,
      agent: c.agent,
      status: c.status,
      parentKey: c.parent_key,
      error: c.error,
    }));
  }

  /**
   * What a page shows of a run: the run with totals, and the steps of
   * `range`, with every value longer than `maxChars` characters clipped (see
   * {@link Client.wholeValue}). Throws `RUN_NOT_FOUND`.
   */
  async timeline(runId: string, opts: { steps: StepRange; maxChars: number }): Promise<RunTimeline> {
    checkRunId(runId);
    // The run first, then its steps: a run seen closed here has written every row the steps read returns.
    const run = await runView(this.store.client, runId, { maxChars: opts.maxChars });
    if (!run) throw notFound(runId);
    const r = opts.steps;
    let from = 0;
    let to = -1;
    if (run.min_seq !== null && run.max_seq !== null) {
      const last = (n: number) => [Math.max(run.min_seq!, run.max_seq! - n + 1), run.max_seq!];
      if ("last" in r) [from, to] = last(r.last);
      else if ("from" in r) {
        [from, to] = run.max_seq - r.from + 1 > r.limit ? last(r.limit) : [r.from, run.max_seq];
      } else [from, to] = [Math.max(run.min_seq, r.before - r.limit), r.before - 1];
    }
    // An empty range (to < from) still reads the pending approval requests.
    const steps = await stepsView(this.store.client, runId, { from, to, maxChars: opts.maxChars });
    return { run, from, to, steps };
  }

  /**
   * The whole value of a field {@link Client.timeline} clipped: the run's
   * `input`, `output` or `error`, or a step's decision, call or approval
   * field. Throws `RUN_NOT_FOUND` when there is no such run or step.
   */
  async wholeValue(runId: string, field: WholeValueField, seq?: number): Promise<Json> {
    checkRunId(runId);
    const found = await wholeValue(this.store.client, { runId, field, seq });
    if (!found) {
      throw new ClientError(
        "RUN_NOT_FOUND",
        `No ${field} for run ${JSON.stringify(runId)}${seq === undefined ? "" : ` step ${seq}`}`,
      );
    }
    return found.value;
  }

  /**
   * Cancels a run that is not closed, with its open descendants (the child
   * runs its calls started, theirs in turn), in the same operation; a worker
   * holding any of them stops at its next write. Returns the run, with the
   * descendants it cancelled.
   */
  async cancel(
    runId: string,
    opts: { by?: string; reason?: string } = {},
  ): Promise<RunInfo & { descendants: string[] }> {
    checkRunId(runId);
    const why = `cancelled by ${checkBy(opts.by)}${opts.reason ? `: ${opts.reason}` : ""}`;
    const out = await this.store.families.cancel(runId, why, this.clock.now());
    if (!out) {
      const existing = await this.store.getRun(runId);
      throw existing
        ? new ClientError("RUN_CLOSED", `Run ${runId} is ${existing.status} already; nothing to cancel`)
        : notFound(runId);
    }
    return { ...info(out.run), descendants: out.cancelled };
  }

  /**
   * Reopens a failed or cancelled run as pending, keeping its history: a
   * worker resumes it where it stopped, re-sending any call left at `intent`
   * under its original key.
   */
  async reopen(runId: string): Promise<RunInfo> {
    checkRunId(runId);
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
    checkKey(key);
    const by = checkBy(opts.by);
    const out = await this.store.resolveEffect(key, storedResolution(resolution, by), by, this.clock.now());
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
   * Settles from outside a tool call that waits on its remote (its remote
   * accepted the work and has not finished it): a webhook, or a person who
   * saw the job end, reports `{ result }` (the call is confirmed with that
   * result, remote `resolved`) or `{ error }` (it fails, and the model sees
   * why). Records who (`by`) and when. A run waiting on a timer is woken, so
   * a worker takes it up at once. Throws `CALL_NOT_FOUND`, `NOT_WAITING` (the
   * call is not waiting: settled already, or being asked about right now),
   * `RUN_CLOSED` (its run is cancelled, done or failed: reopen it first), and
   * `SETTLEMENT_INVALID` for a settlement with neither or both fields, or an
   * empty error.
   */
  async settleCall(
    key: string,
    settlement: Settlement,
    opts: { by?: string } = {},
  ): Promise<{ effect: SideEffectRow; runStatus: RunStatus; woken: boolean }> {
    checkKey(key);
    const by = checkBy(opts.by);
    const stored = checkSettlement(settlement, by);
    const out = await this.store.settleCall(key, stored, by, this.clock.now());
    if (!out.effect || !out.runStatus) {
      throw new ClientError(
        "CALL_NOT_FOUND",
        `No tool call with key ${JSON.stringify(key)}; 'deno task inspect RUN' shows a run's keys`,
      );
    }
    const e = out.effect;
    if (out.settled) return { effect: e, runStatus: out.runStatus, woken: out.woken };
    if (e.status === "waiting") {
      throw new ClientError(
        "RUN_CLOSED",
        `Run ${e.run_id} is ${out.runStatus}, so tool call ${key} was not settled: a closed run's calls are ` +
          `not answered. Reopen it first ('deno task reopen ${e.run_id}'); its worker then asks the remote again`,
      );
    }
    const why = e.status === "intent"
      ? "a worker is asking its remote how the job stands right now: try again in a moment"
      : e.status === "flagged"
      ? `its outcome is unknown: settle it with 'deno task resolve ${key}'`
      : `it is settled already${
        e.resolved_by ? ` (by ${e.resolved_by} at ${e.resolved_at?.toISOString()})` : ""
      }`;
    throw new ClientError(
      "NOT_WAITING",
      `Tool call ${key} is ${e.status}, not waiting on its remote: ${why}`,
    );
  }

  /**
   * The flagged calls of blocked runs that match `filter` (a tool, a run, or
   * both), by key, at most `limit` (default 100), with how many match in all:
   * what {@link Client.resolveMany} with the same filter would settle.
   */
  async flagged(
    filter: FlaggedFilter,
    opts: { limit?: number } = {},
  ): Promise<{ calls: SideEffectRow[]; total: number }> {
    checkFlaggedFilter(filter);
    const limit = opts.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > RESOLVE_BATCH_MAX) {
      throw new ClientError(
        "LIMIT_INVALID",
        `'limit' must be an integer from 1 to ${RESOLVE_BATCH_MAX}: current value is ${limit}`,
      );
    }
    return await this.store.flaggedCalls(filter, limit);
  }

  /**
   * Settles every flagged call of a blocked run that matches `filter` the
   * same way, in one statement, as {@link Client.resolve} settles one (each
   * recorded with who and when; each run left with none flagged back to
   * pending). `expect` is the count a person confirmed after checking the
   * remote (from {@link Client.flagged}): when another number matches as the
   * statement runs, nothing is settled and `COUNT_CHANGED` says how many do.
   * At most {@link RESOLVE_BATCH_MAX} at once.
   */
  async resolveMany(
    filter: FlaggedFilter,
    resolution: Resolution,
    opts: { expect: number; by?: string },
  ): Promise<{ effects: SideEffectRow[]; unblocked: string[] }> {
    checkFlaggedFilter(filter);
    const { expect } = opts;
    if (!Number.isInteger(expect) || expect < 1 || expect > RESOLVE_BATCH_MAX) {
      throw new ClientError(
        "COUNT_INVALID",
        `'expect' (the number of flagged calls to resolve) must be an integer from 1 to ${RESOLVE_BATCH_MAX}: ` +
          `current value is ${expect}`,
      );
    }
    const by = checkBy(opts.by);
    const out = await this.store.resolveEffects(filter, storedResolution(resolution, by), {
      by,
      now: this.clock.now(),
      expect,
    });
    if (out.matched !== expect) {
      throw new ClientError(
        "COUNT_CHANGED",
        `${out.matched > RESOLVE_BATCH_MAX ? `More than ${RESOLVE_BATCH_MAX}` : out.matched} flagged ` +
          `call(s) of blocked runs match ${
            describeFilter(filter)
          } now, not the ${expect} confirmed: nothing ` +
          `was resolved. List them again (--dry-run), check the remote, and confirm that count`,
      );
    }
    return { effects: out.effects, unblocked: out.unblocked };
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
    return await this.#decide(key, "approved", opts.by, null);
  }

  /**
   * Denies a tool call that waits for a person: it is never sent, and the
   * model sees the refusal (with `reason`) as that tool's result. Refused as
   * {@link Client.approve} is.
   */
  async deny(key: string, opts: { by?: string; reason?: string } = {}): Promise<AnsweredApproval> {
    return await this.#decide(key, "denied", opts.by, opts.reason ?? null);
  }

  /** The approval requests of a run, by step. */
  async approvals(runId: string): Promise<ApprovalRow[]> {
    checkRunId(runId);
    return await this.store.listApprovals(runId);
  }

  async #decide(
    key: string,
    decision: "approved" | "denied",
    by: string | undefined,
    reason: string | null,
  ): Promise<AnsweredApproval> {
    checkKey(key);
    const { approval, decided, runStatus } = await this.store.decideApproval(
      key,
      decision,
      checkBy(by),
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
   * Appends a message to a conversation (a run of an agent with
   * `conversation`) and wakes it when it waits for one; sent while the run
   * works, the message is queued and taken after the current answer. A
   * retried send with the same `messageId` is one message: it returns the
   * stored message's seq with `duplicate: true` (default id: a random one).
   * Throws `RUN_NOT_FOUND`, `NOT_A_CONVERSATION`, `CONVERSATION_ENDED` (closed,
   * idle past its limit, failed or cancelled), `MESSAGE_INVALID`.
   */
  async send(runId: string, text: string, opts: { messageId?: string } = {}): Promise<SendResult> {
    checkRunId(runId);
    if (typeof text !== "string" || text.trim() === "" || text.length > MESSAGE_CHARS_MAX) {
      throw new ClientError(
        "MESSAGE_INVALID",
        `A message is a non-empty text of at most ${MESSAGE_CHARS_MAX} characters: current value is ${
          describeValue(typeof text === "string" && text.length > 80 ? `${text.slice(0, 80)}...` : text)
        }`,
      );
    }
    const messageId = opts.messageId ?? crypto.randomUUID();
    checkId("message id", messageId, "MESSAGE_INVALID");
    const sent = await this.store.conversations.send({ runId, messageId, text }, this.clock.now());
    if (sent) return { runId, seq: sent.message.seq, messageId, duplicate: sent.duplicate };
    throw await this.#notConversing(runId, "send a message to");
  }

  /**
   * Every message of a conversation with its answer, in order (the goal
   * first): what a program following along reads. `fromSeq` and `limit`
   * (default 0 and 1 000) page through a long one. Throws `RUN_NOT_FOUND` and
   * `NOT_A_CONVERSATION`.
   */
  async answers(runId: string, opts: { fromSeq?: number; limit?: number } = {}): Promise<ConversationTurn[]> {
    checkRunId(runId);
    const run = await this.store.getRun(runId);
    if (!run) throw notFound(runId);
    if (run.conversation_idle_ms === null || run.conversation_idle_ms === undefined) {
      throw await this.#notConversing(runId, "list the answers of");
    }
    const fromSeq = opts.fromSeq ?? 0;
    const limit = opts.limit ?? 1_000;
    if (!Number.isSafeInteger(fromSeq) || fromSeq < 0 || !Number.isSafeInteger(limit) || limit < 1) {
      throw new ClientError(
        "LIMIT_INVALID",
        `'fromSeq' must be an integer 0 or more and 'limit' one 1 or more: current values are ${
          describeValue(fromSeq)
        } and ${describeValue(limit)}`,
      );
    }
    const rows = await this.store.conversations.answers(runId, fromSeq, limit);
    const turns = rows.map((m): ConversationTurn => ({
      seq: m.seq,
      messageId: m.message_id,
      text: m.text,
      sentAt: new Date(m.created_at),
      answer: m.answer,
      answerSeq: m.answer_seq,
      answeredAt: m.answered_at ? new Date(m.answered_at) : null,
    }));
    // The goal's row is written with its answer: before that it is the run's goal.
    if (fromSeq === 0 && turns[0]?.seq !== 0) {
      turns.unshift({
        seq: 0,
        messageId: null,
        text: run.goal,
        sentAt: new Date(run.created_at),
        answer: null,
        answerSeq: null,
        answeredAt: null,
      });
      if (turns.length > limit) turns.pop();
    }
    return turns;
  }

  /**
   * Closes a conversation: one waiting for its next message is done at once
   * (its output the last answer); one at work ends after its current answer
   * (queued messages answered first). Later sends are refused. Throws
   * `RUN_NOT_FOUND`, `NOT_A_CONVERSATION`, `CONVERSATION_ENDED`.
   */
  async endConversation(runId: string): Promise<RunInfo> {
    checkRunId(runId);
    const run = await this.store.conversations.end(runId, this.clock.now());
    if (run) return info(run);
    throw await this.#notConversing(runId, "end");
  }

  /** Why a conversation refused `what`: no such run, not a conversation, or ended. */
  async #notConversing(runId: string, what: string): Promise<ClientError> {
    const run = await this.store.getRun(runId);
    if (!run) return notFound(runId);
    if (run.conversation_idle_ms === null || run.conversation_idle_ms === undefined) {
      return new ClientError(
        "NOT_A_CONVERSATION",
        `Cannot ${what} run ${runId}: its agent ${run.agent} does not converse (give it ` +
          `defineAgent({ conversation: { idleMs } }) and start a new run)`,
      );
    }
    const why = run.conversation_ended_at
      ? `it was closed at ${new Date(run.conversation_ended_at).toISOString()}`
      : `it is ${run.status}${run.error ? ` (${run.error})` : ""}`;
    // A conversation that failed or was cancelled keeps its history: reopening it goes on from there.
    const next = !run.conversation_ended_at && (run.status === "failed" || run.status === "cancelled")
      ? `'deno task reopen ${runId}' (client.reopen) takes it up again with its history, then send again`
      : "start a new run to go on";
    return new ClientError("CONVERSATION_ENDED", `Cannot ${what} conversation ${runId}: ${why}; ${next}`);
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
  ): Promise<PruneResult> {
    const batchSize = opts.batchSize ?? 500;
    const maxRuns = opts.maxRuns ?? 1_000_000;
    const out: PruneResult = {
      runs: [],
      journal: 0,
      effects: 0,
      approvals: 0,
      messages: 0,
      memos: 0,
      batches: 0,
    };
    if (opts.dryRun) {
      const seen = await this.store.pruneRuns(before, maxRuns, true);
      return { ...seen, batches: 0 };
    }
    // Bounded by maxRuns: each batch deletes at least one run or ends the loop.
    while (out.runs.length < maxRuns) {
      let batch;
      try {
        batch = await this.store.pruneRuns(before, Math.min(batchSize, maxRuns - out.runs.length));
      } catch (err) {
        // The failed batch's statement rolled back whole; the batches before it stay deleted.
        throw new ClientError(
          "PRUNE_FAILED",
          `Prune stopped at batch ${out.batches + 1}, which was rolled back and deleted nothing: ${
            describeError(err).split("\n")[0]
          }. Deleted before it: ${out.runs.length} runs in ${out.batches} batches`,
          { cause: err },
        );
      }
      if (batch.runs.length === 0) break;
      out.runs.push(...batch.runs);
      out.journal += batch.journal;
      out.effects += batch.effects;
      out.approvals += batch.approvals;
      out.messages += batch.messages;
      out.memos += batch.memos;
      out.batches++;
      if (batch.runs.length < batchSize) break;
    }
    return out;
  }

  /**
   * Hosts a worker in this process for `agents`: it takes their runs from this
   * client's database and drives them until {@link WorkerHost.stop}. An agent
   * that names an endpoint (or nothing) is given an OpenAI-compatible client
   * from the endpoint and `MODEL_URL`, `MODEL`, `MODEL_API_KEY`, by the rule
   * of `model_endpoint.ts` (what the agent names wins). The agents
   * their tools start runs of (`agentTool`) are hosted with them.
   */
  async startWorker(
    agents: Agent[],
    opts: WorkerOptions & {
      /** What the agents' tools and models are built with. Default: this process's environment, `.data`, embedded. */
      context?: Partial<AgentContext>;
      /** Takes only this run and the runs under it (see {@link WorkerHostOptions.family}). */
      family?: string;
    } = {},
  ): Promise<WorkerHost> {
    const { context, ...hostOpts } = opts;
    // The host's log is the tools' too (an MCP server's tool list changing is reported in it).
    const ctx: AgentContext = {
      env: readEnv(),
      dataDir: ".data",
      embedded: true,
      log: hostOpts.log,
      ...context,
    };
    const prepare = (a: Agent) => prepareAgent(a, ctx, (e) => endpointPlanner(a, e, ctx.env));
    // The agents these agents call (agentTool) are hosted too: a child run is driven where its parent is.
    const prepared = await withChildAgents(await Promise.all(agents.map(prepare)), prepare);
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

/** A new run's id: the agent's name and eight hex digits. */
function newRunId(agent: Agent): string {
  return `${agent.name}-${crypto.randomUUID().slice(0, 8)}`;
}
