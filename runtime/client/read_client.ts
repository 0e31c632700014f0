/**
 * What the page and the commands read of runs: a page of runs with its
 * counts, the agents live workers host, one run's whole record, its child
 * runs, the signals sent to it, a range of its steps with long values
 * clipped, and a clipped value whole. `deno task runs` and `inspect`, and the page (`ui/server.ts`), are
 * thin wrappers over it. Reached as `client.reads`. Nothing here writes.
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import { ClientError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { spendOf } from "../agent/budget.ts";
import type { Json } from "../agent/tools.ts";
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
import type { LimitKeyView, RunFilter, RunRow, RunStatus, RunSummary, Store } from "../store/store.ts";
import type { RunInfo, RunRecord, RunTimeline, SignalInfo, StepRange } from "./shapes.ts";
import { checkListFilter, checkRunId, notFound } from "./checks.ts";

/**
 * The reads of the page and the commands over one database
 * (`client.reads`). Every call checks the ids and filters it is given before
 * any statement is sent (`BAD_RUN_ID`, `FILTER_INVALID`).
 */
export class ReadClient {
  readonly #store: Store;
  readonly #clock: Clock;

  /** Built by the client: its store, and its clock (which judges a worker live). */
  constructor(opts: { store: Store; clock: Clock }) {
    this.#store = opts.store;
    this.#clock = opts.clock;
  }

  /**
   * The keys of the limits shared by the fleet, each with its limit, calls
   * in flight now, requests taken in the last minute, runs waiting for it,
   * and a provider's hold (`limits`, the page). A lease older than the
   * default lease holds nothing.
   */
  async limits(): Promise<LimitKeyView[]> {
    const now = this.#clock.now();
    return await this.#store.limits.list(now, new Date(now.getTime() - DEFAULTS.leaseMs));
  }

  /** The limits' keys each of `runIds` waits for, by run (none: not waiting for a limit). */
  async waitingFor(runIds: readonly string[]): Promise<Map<string, string[]>> {
    for (const runId of runIds) checkRunId(runId);
    if (runIds.length === 0) return new Map();
    return await this.#store.limits.waitingFor(runIds);
  }

  /**
   * Runs, newest first, one page at a time, with the number matching the
   * filter. Throws `FILTER_INVALID` for a `limit` that is not an integer from
   * 1 to {@link LIST_LIMIT_MAX}, an `offset` that is not an integer 0 or more,
   * or an unknown `status`.
   */
  async list(filter: RunFilter = {}): Promise<{ runs: RunSummary[]; total: number }> {
    return await this.#store.operators.listRuns(checkListFilter(filter));
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
    const client = this.#store.client;
    const [counts, agents, tokens] = [
      await countByStatus(client, opts),
      await agentsWithRuns(client),
      await tokensByRun(client, opts.runIds ?? []),
    ];
    return { counts, agents, tokens };
  }

  /**
   * The agents some live worker hosts now: its heartbeat is younger than
   * `leaseMs` (default the lease's, {@link DEFAULTS}).
   */
  async hostedAgents(leaseMs: number = DEFAULTS.leaseMs): Promise<string[]> {
    return await this.#store.leases.hostedAgents(new Date(this.#clock.now().getTime() - leaseMs));
  }

  /**
   * The versions live workers take runs of, as `agent@version` (and
   * `agent@` for an agent's runs not started yet): a worker whose heartbeat
   * is younger than `leaseMs` (default the lease's). What says why a pending
   * run waits ({@link versionWait}).
   */
  async hostedVersions(leaseMs: number = DEFAULTS.leaseMs): Promise<string[]> {
    return await this.#store.versions.liveKeys(new Date(this.#clock.now().getTime() - leaseMs));
  }

  /**
   * A run with its decisions, tool calls, approval requests, spend
   * (against its budget, if any) and child runs. Throws `RUN_NOT_FOUND`.
   */
  async inspect(runId: string): Promise<RunRecord> {
    checkRunId(runId);
    const run = await this.#store.reads.getRun(runId);
    if (!run) throw notFound(runId);
    const { journal, effects } = await this.#store.reads.loadHistory(runId);
    const approvals = await this.#store.reads.listApprovals(runId);
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
    const members = await this.#store.families.readFamily(run.root_run_id);
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
    return (await this.#store.families.children(runId)).map((c) => ({
      runId: c.run_id,
      agent: c.agent,
      status: c.status,
      parentKey: c.parent_key,
      error: c.error,
    }));
  }

  /**
   * The signals sent to `runId` (`client.signal`), in the order they came,
   * each with the call that took it, if one has: up to `limit` (default
   * 1 000) after `afterSeq` (default 0). Throws `BAD_RUN_ID`.
   */
  async signals(runId: string, opts: { afterSeq?: number; limit?: number } = {}): Promise<SignalInfo[]> {
    checkRunId(runId);
    const rows = await this.#store.signals.list(runId, opts);
    return rows.map((s) => ({
      seq: s.seq,
      name: s.name,
      signalId: s.signal_id,
      payload: s.payload,
      sentAt: new Date(s.sent_at),
      takenBy: s.consumed_by,
      takenAt: s.consumed_at ? new Date(s.consumed_at) : null,
    }));
  }

  /**
   * What a page shows of a run: the run with totals, and the steps of
   * `range`, with every value longer than `maxChars` characters clipped (see
   * {@link ReadClient.wholeValue}). Throws `RUN_NOT_FOUND`.
   */
  async timeline(runId: string, opts: { steps: StepRange; maxChars: number }): Promise<RunTimeline> {
    checkRunId(runId);
    // The run first, then its steps: a run seen closed here has written every row the steps read returns.
    const run = await runView(this.#store.client, runId, { maxChars: opts.maxChars });
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
    const steps = await stepsView(this.#store.client, runId, { from, to, maxChars: opts.maxChars });
    return { run, from, to, steps };
  }

  /**
   * The whole value of a field {@link ReadClient.timeline} clipped: the run's
   * `input`, `output` or `error`, or a step's decision, call or approval
   * field. Throws `RUN_NOT_FOUND` when there is no such run or step.
   */
  async wholeValue(runId: string, field: WholeValueField, seq?: number): Promise<Json> {
    checkRunId(runId);
    const found = await wholeValue(this.#store.client, { runId, field, seq });
    if (!found) {
      throw new ClientError(
        "RUN_NOT_FOUND",
        `No ${field} for run ${JSON.stringify(runId)}${seq === undefined ? "" : ` step ${seq}`}`,
      );
    }
    return found.value;
  }
}
