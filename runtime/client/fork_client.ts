/**
 * A fork of a run (`client.fork`, `deno task fork`): a new run whose steps
 * before `atSeq` are the original's, copied under its own keys with their
 * decisions and results (nothing sent again, no model asked), marked as a
 * fork of that run and step; from `atSeq` on it decides with its own agent,
 * model or parameters. Unless `live`, it is a dry run: no call of a tool that
 * acts on the world is sent (`step/dry_run.ts`). See docs/fork.md.
 *
 * @module
 */

import { type Agent, checkInput } from "../agent/agent.ts";
import { type Budget, checkBudget } from "../agent/budget.ts";
import { ClientError } from "../base/errors.ts";
import type { Json } from "../base/values.ts";
import { checkModelParams, mergeModelParams } from "../model/params.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { Store } from "../store/store.ts";
import type { RunRow } from "../store/rows.ts";
import { checkRunId, notFound } from "./checks.ts";

/** What {@link forkRun} takes besides the original's id. */
export interface ForkOptions {
  /**
   * The first step the fork decides itself: the seq of one of the original's
   * steps (0 decides everything anew). The original's steps before it, and
   * their calls, are copied; each must be settled.
   */
  atSeq: number;
  /** The agent that decides from `atSeq` on (a worker hosting it takes the fork); default the original's. */
  agent?: Agent;
  /** The model's name from `atSeq` on (its endpoint's other settings kept): `modelParams.model`. */
  model?: string;
  /** Request parameters, over the original run's own, field by field. */
  modelParams?: ModelParams;
  /** Another input (a fork at step 0 only): checked against `agent` when given. */
  input?: unknown;
  /** True: the fork sends its calls as any run does. Default false: a dry run, which sends none acting on the world. */
  live?: boolean;
  /** The fork's run id; default `<runId>-fork-<random>`. An id taken already is refused (`RUN_EXISTS`). */
  runId?: string;
  /** The evaluation the fork is a case of (`runEval` sets it). */
  evalId?: string;
  /** The fork's own ceilings, in place of the original's (an evaluation's share of its budget). */
  budget?: Budget;
}

/** What a fork made. */
export interface ForkInfo {
  /** The fork's run id. */
  runId: string;
  /** The original. */
  forkedFrom: string;
  /** The first step the fork decides itself. */
  atSeq: number;
  /** True when it sends no call of a tool that acts on the world. */
  dryRun: boolean;
  /** Steps, calls and messages copied from the original. */
  copied: { steps: number; calls: number; messages: number };
}

/**
 * Forks the run `runId` at `opts.atSeq` (see the module): checks the fork can
 * be made, then writes it in one statement. Throws `RUN_NOT_FOUND`,
 * `BAD_RUN_ID`, `FORK_INVALID` (a seq that is not a step of the original, a
 * step before it not settled, an input past step 0), `MODEL_PARAMS_INVALID`,
 * `INPUT_INVALID`, `RUN_EXISTS`.
 */
export async function forkRun(
  deps: { store: Store; now: () => Date },
  runId: string,
  opts: ForkOptions,
): Promise<ForkInfo> {
  checkRunId(runId);
  const forkId = opts.runId ?? defaultForkId(runId);
  checkRunId(forkId);
  const original = await deps.store.reads.getRun(runId);
  if (!original) throw notFound(runId);
  await checkForkPoint(deps.store, original, opts.atSeq);
  const where = `Cannot fork run ${runId}`;
  const asked = checkModelParams(
    opts.model === undefined ? opts.modelParams : { ...opts.modelParams, model: opts.model },
    where,
  );
  const modelParams = mergeModelParams(original.model_params ?? undefined, asked);
  const given = givenInput(opts, original, where);
  const dryRun = opts.live !== true;
  const written = await deps.store.forks.fork({
    runId: forkId,
    from: runId,
    atSeq: opts.atSeq,
    agent: opts.agent?.name,
    modelParams: modelParams as Json | undefined,
    dryRun,
    evalId: opts.evalId,
    given,
    ...(opts.budget ? { budget: checkBudget(opts.budget, `Fork ${forkId}`) as Json } : {}),
  }, deps.now());
  if (!written.created) {
    const there = await deps.store.reads.getRun(forkId);
    throw new ClientError(
      "RUN_EXISTS",
      `Run ${forkId} exists already (agent ${there?.agent ?? "?"}, status ${there?.status ?? "unknown"}${
        there?.forked_from ? `, a fork of ${there.forked_from} at step ${there.forked_at_seq}` : ""
      }); choose another run id for the fork`,
    );
  }
  return {
    runId: forkId,
    forkedFrom: runId,
    atSeq: opts.atSeq,
    dryRun,
    copied: { steps: written.journal, calls: written.effects, messages: written.messages },
  };
}

/** A fork's id made from its original's, within the run id rule's 64 characters. */
function defaultForkId(runId: string): string {
  const tail = `-fork-${crypto.randomUUID().slice(0, 6)}`;
  return runId.slice(0, 64 - tail.length) + tail;
}

/**
 * Refuses a fork point that is not a step of the original (`FORK_INVALID`):
 * `atSeq` must be 0 or the seq of one of its decisions, and every decision
 * and call before it settled (confirmed, or a call failed), as copies must be.
 */
async function checkForkPoint(store: Store, original: RunRow, atSeq: number): Promise<void> {
  const runId = original.run_id;
  const refuse = (why: string) =>
    new ClientError("FORK_INVALID", `Cannot fork run ${runId} at step ${atSeq}: ${why}`);
  if (!Number.isSafeInteger(atSeq) || atSeq < 0) {
    throw new ClientError(
      "FORK_INVALID",
      `Cannot fork run ${runId} as 'atSeq' must be an integer of at least 0: current value is ${
        JSON.stringify(atSeq) ?? String(atSeq)
      }`,
    );
  }
  if (atSeq === 0) return;
  const { journal, effects } = await store.reads.loadHistory(runId);
  const steps = journal.map((j) => j.seq);
  if (!steps.includes(atSeq)) {
    throw refuse(
      `it is not the seq of one of its steps (its steps are at ${steps.join(", ") || "none"}; a step of ` +
        `several calls owns the seqs after it)`,
    );
  }
  const open = journal.find((j) => j.seq < atSeq && j.status !== "confirmed");
  if (open) throw refuse(`its step ${open.seq} is not decided yet (a fork copies settled steps)`);
  const unsettled = effects.find((e) => e.seq < atSeq && e.status !== "confirmed" && e.status !== "failed");
  if (unsettled) {
    throw refuse(
      `its call ${unsettled.idempotency_key} is ${unsettled.status}, not settled (a fork copies settled calls: ` +
        `fork at an earlier step, or settle it first)`,
    );
  }
}

/** The fork's own input and goal, if it was given one: at step 0 only, checked against its agent when given. */
function givenInput(
  opts: ForkOptions,
  original: RunRow,
  where: string,
): { input: Json; goal: string } | undefined {
  if (opts.input === undefined) return undefined;
  if (opts.atSeq !== 0) {
    throw new ClientError(
      "FORK_INVALID",
      `${where} at step ${opts.atSeq} with another input: the steps it copies were decided on the original's ` +
        `input; fork at step 0 to give another`,
    );
  }
  if (opts.agent) return checkInput(opts.agent, opts.input);
  const input = opts.input as Json;
  if (typeof input === "string") return { input, goal: input };
  if (original.input !== null && typeof original.input === "string") {
    throw new ClientError(
      "FORK_INVALID",
      `${where}: agent ${original.agent} takes text input, and a ${typeof input} was given`,
    );
  }
  return { input, goal: JSON.stringify(input) };
}
