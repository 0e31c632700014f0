/**
 * What operators do to runs from outside them: cancel and reopen a run,
 * settle a flagged call (one or many at once) or a call waiting on its
 * remote, answer a call that waits for a person's approval, and delete
 * finished runs (retention). The commands `cancel`, `reopen`, `resolve`,
 * `settle`, `approve`, `deny` and `prune` are thin wrappers over it, and so
 * are the page's buttons. Reached as `client.operators`.
 *
 * An approval is here, not with the application's calls: whoever answers it
 * (a person at the page or the command line, or an application acting for
 * one) steers a run from outside, as a resolve does.
 *
 * @module
 */

import type { Clock } from "../base/clock.ts";
import { ClientError, describeError } from "../base/errors.ts";
import {
  type AnsweredApproval,
  type ApprovalRow,
  type FlaggedFilter,
  RESOLVE_BATCH_MAX,
  type RunStatus,
  type SideEffectRow,
  type Store,
} from "../store/store.ts";
import type { MoveResult, PruneResult, Resolution, RunInfo, Settlement } from "./shapes.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { takeKey } from "../agent/version.ts";
import {
  checkBy,
  checkFlaggedFilter,
  checkKey,
  checkMove,
  checkRunId,
  checkSettlement,
  describeFilter,
  info,
  notFound,
  storedResolution,
} from "./checks.ts";

/**
 * The operators' calls over one database (`client.operators`). Every call
 * checks the ids it is given before any statement is sent, as the client
 * does, and records who acted (`by`, default `client`). A call that makes a
 * run takeable again (reopen, resolve, settle, approve, deny) wakes the
 * worker hosts its client started, so they take the run at once instead of
 * at their next poll.
 */
export class OperatorClient {
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #wakeHosts: () => void;

  /** Built by the client: its store and clock, and how to wake the worker hosts it started. */
  constructor(opts: { store: Store; clock: Clock; wakeHosts?: () => void }) {
    this.#store = opts.store;
    this.#clock = opts.clock;
    this.#wakeHosts = opts.wakeHosts ?? (() => {});
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
    const out = await this.#store.families.cancel(runId, why, this.#clock.now());
    if (!out) {
      const existing = await this.#store.reads.getRun(runId);
      throw existing
        ? new ClientError("RUN_CLOSED", `Run ${runId} is ${existing.status} already; nothing to cancel`)
        : notFound(runId);
    }
    return { ...info(out.run), descendants: out.cancelled };
  }

  /**
   * Moves the open runs of `agent` (at version `from`, and the run `runId`,
   * when given) to version `to` at their next decision, whether their agent
   * lets them move or not: a worker of their version lets each go at its
   * next decision (a decided step is carried out first; a call in flight is
   * settled by the version that sent it), and a worker of `to` takes it. A
   * run not started yet is started on `to`. Says whether a live worker hosts
   * `to` now (the runs wait for one, pending, if not). `MOVE_INVALID` for a
   * malformed agent name or version. Reached from `deno task move`.
   */
  async move(move: { agent: string; to: string; from?: string; runId?: string }): Promise<MoveResult> {
    checkMove(move);
    if (move.runId !== undefined) checkRunId(move.runId);
    const now = this.#clock.now();
    const rows = await this.#store.versions.requestMove(move, now);
    const live = await this.#store.versions.liveKeys(new Date(now.getTime() - DEFAULTS.leaseMs));
    this.#wakeHosts();
    return {
      agent: move.agent,
      to: move.to,
      runs: rows.map((r) => ({ runId: r.run_id, from: r.agent_version })),
      hosted: live.includes(takeKey(move.agent, move.to)),
    };
  }

  /**
   * Reopens a failed or cancelled run as pending, keeping its history: a
   * worker resumes it where it stopped, re-sending any call left at `intent`
   * under its original key.
   */
  async reopen(runId: string): Promise<RunInfo> {
    checkRunId(runId);
    const run = await this.#store.operators.reopenRun(runId, this.#clock.now());
    if (!run) {
      const existing = await this.#store.reads.getRun(runId);
      throw existing
        ? new ClientError(
          "NOT_REOPENABLE",
          `Run ${runId} is ${existing.status}; only a failed or cancelled run can be reopened`,
        )
        : notFound(runId);
    }
    this.#wakeHosts();
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
    const out = await this.#store.operators.resolveEffect(
      key,
      storedResolution(resolution, by),
      by,
      this.#clock.now(),
    );
    if (out) {
      if (out.unblocked) this.#wakeHosts();
      return out;
    }
    const e = await this.#store.reads.getEffect(key);
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
    const run = await this.#store.reads.getRun(e.run_id);
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
    const out = await this.#store.operators.settleCall(key, stored, by, this.#clock.now());
    if (!out.effect || !out.runStatus) {
      throw new ClientError(
        "CALL_NOT_FOUND",
        `No tool call with key ${JSON.stringify(key)}; 'deno task inspect RUN' shows a run's keys`,
      );
    }
    const e = out.effect;
    if (out.settled) {
      if (out.woken) this.#wakeHosts();
      return { effect: e, runStatus: out.runStatus, woken: out.woken };
    }
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
   * what {@link OperatorClient.resolveMany} with the same filter would settle.
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
    return await this.#store.operators.flaggedCalls(filter, limit);
  }

  /**
   * Settles every flagged call of a blocked run that matches `filter` the
   * same way, in one statement, as {@link OperatorClient.resolve} settles one (each
   * recorded with who and when; each run left with none flagged back to
   * pending). `expect` is the count a person confirmed after checking the
   * remote (from {@link OperatorClient.flagged}): when another number matches as the
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
    const out = await this.#store.operators.resolveEffects(filter, storedResolution(resolution, by), {
      by,
      now: this.#clock.now(),
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
    if (out.unblocked.length > 0) this.#wakeHosts();
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
   * {@link OperatorClient.approve} is.
   */
  async deny(key: string, opts: { by?: string; reason?: string } = {}): Promise<AnsweredApproval> {
    return await this.#decide(key, "denied", opts.by, opts.reason ?? null);
  }

  /** The approval requests of a run, by step. */
  async approvals(runId: string): Promise<ApprovalRow[]> {
    checkRunId(runId);
    return await this.#store.reads.listApprovals(runId);
  }

  async #decide(
    key: string,
    decision: "approved" | "denied",
    by: string | undefined,
    reason: string | null,
  ): Promise<AnsweredApproval> {
    checkKey(key);
    const { approval, decided, runStatus } = await this.#store.operators.decideApproval(
      key,
      decision,
      checkBy(by),
      reason,
      this.#clock.now(),
    );
    if (!approval || !runStatus) {
      throw new ClientError(
        "APPROVAL_NOT_FOUND",
        `No approval request for ${
          JSON.stringify(key)
        }; 'deno task runs --status waiting' lists the runs that wait`,
      );
    }
    if (decided) {
      this.#wakeHosts();
      return { ...approval, run_status: runStatus };
    }
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
      signals: 0,
      chunks: 0,
      batches: 0,
    };
    if (opts.dryRun) {
      const seen = await this.#store.operators.pruneRuns(before, maxRuns, true);
      return { ...seen, batches: 0 };
    }
    // Bounded by maxRuns: each batch deletes at least one run or ends the loop.
    while (out.runs.length < maxRuns) {
      let batch;
      try {
        batch = await this.#store.operators.pruneRuns(before, Math.min(batchSize, maxRuns - out.runs.length));
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
      out.signals += batch.signals;
      out.chunks += batch.chunks;
      out.batches++;
      if (batch.runs.length < batchSize) break;
    }
    return out;
  }
}
