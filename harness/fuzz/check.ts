/**
 * The checks particular to the fuzzer, beside the invariants every run is
 * held to (`invariants.ts`): what a budget promises, from the answers the
 * fuzzer saw go by at a process's boundary.
 *
 * @module
 */

import { spendOf } from "../../runtime/agent/budget.ts";
import { childRunId } from "../../runtime/families/family.ts";
import { checkShape } from "../invariants.ts";
import type { RunSnapshot } from "../sim.ts";
import type { ScheduleBudget } from "./schedule.ts";

/** A budgeted schedule's model answer, as the fuzzer saw it at the process's boundary. */
export interface BudgetAnswer {
  /** What its request reserved: the prompt at four characters a token, plus the cap it asked for. */
  reserved: number;
  /** What the server billed for it. */
  billed: number;
  /** The usage it reported (after any usage fault). */
  reported: unknown;
}

/**
 * What the README promises of a budget, checked on a budgeted schedule's
 * end: the run either finished or stopped with `BUDGET_EXCEEDED`; the model
 * requests stay within their ceiling; and the tokens, counted by the runtime
 * and billed by the server, pass the token ceiling only by what answers
 * billed beyond their requests' reservations (a server ignoring the cap).
 * No answer counts less than it cost, lost ones included, but for what a lost
 * answer billed beyond its reservation.
 */
export function checkBudget(
  final: RunSnapshot,
  budget: ScheduleBudget | undefined,
  answers: readonly BudgetAnswer[],
): string[] {
  if (!budget) return [];
  const problems: string[] = [];
  const run = final.run;
  if (run?.status === "failed" && !/^BUDGET_EXCEEDED: /.test(run.error ?? "")) {
    problems.push(`a budgeted run failed for another reason: ${run.error}`);
  }
  if (budget.modelCalls !== undefined && final.modelCalls > budget.modelCalls) {
    problems.push(`the model was asked ${final.modelCalls} times, the ceiling is ${budget.modelCalls}`);
  }
  const counted = spendOf(final.journal, final.effects).tokens;
  const billed = answers.reduce((n, a) => n + a.billed, 0);
  const beyond = answers.reduce((n, a) => n + Math.max(0, a.billed - a.reserved), 0);
  if (billed > budget.tokens + beyond) {
    problems.push(
      `the model billed ${billed} tokens against a ceiling of ${budget.tokens}, past it by more than the ` +
        `${beyond} its answers billed beyond their reservations`,
    );
  }
  if (counted > budget.tokens + beyond) {
    problems.push(
      `the run counts ${counted} tokens against a ceiling of ${budget.tokens} (+${beyond} beyond)`,
    );
  }
  // An answer lost counts its reservation: less than it billed only by what it billed beyond it.
  if (counted < billed - beyond) {
    problems.push(
      `the run counts ${counted} tokens, the model billed ${billed} (${beyond} beyond reservations)`,
    );
  }
  return problems;
}

/** What the processes of a schedule wrote of one call, as the fuzzer counted the statements that committed. */
export interface CallWrites {
  /** Intents written (`effect-intent`, `effect-intent-upsert`): each is an attempt or a poll. */
  intents: number;
  /** Accepted answers written (`effect-waiting`): the remote said it will finish later. */
  accepted: number;
}

/**
 * Polls are never attempts: every intent a call's row counts is either an
 * attempt or a poll (`attempts + polls` is the intents written), a poll only
 * ever follows an accepted answer (`polls` at most the accepted answers), and
 * a call its remote's answer settled after accepting it polled once per
 * accepted answer. A poll counted as an attempt would spend the tool's
 * `maxAttempts` on a job that is only running.
 */
export function checkPolls(final: RunSnapshot, writes: ReadonlyMap<string, CallWrites>): string[] {
  const problems: string[] = [];
  for (const e of final.effects) {
    const w = writes.get(e.idempotency_key) ?? { intents: 0, accepted: 0 };
    const polls = e.polls;
    if (e.attempts + polls !== w.intents) {
      problems.push(
        `tool call ${e.idempotency_key} counts ${e.attempts} attempt(s) and ${polls} poll(s), ` +
          `but ${w.intents} intent(s) were written`,
      );
    }
    if (polls > w.accepted) {
      problems.push(
        `tool call ${e.idempotency_key} counts ${polls} poll(s) after ${w.accepted} accepted answer(s)`,
      );
    }
    const answeredAfterAccept = e.status === "confirmed" && w.accepted > 0 && e.resolved_by == null;
    if (answeredAfterAccept && polls !== w.accepted) {
      problems.push(
        `tool call ${e.idempotency_key} was answered after ${w.accepted} accepted answer(s), ` +
          `yet counts ${polls} poll(s)`,
      );
    }
  }
  return problems;
}

/** A family of runs at a schedule's end: the root, every other run of it, and what the remote holds. */
export interface FamilySnapshot {
  /** The root (the parent). */
  root: RunSnapshot;
  /** Every other run whose id starts with the root's, by id. */
  children: ReadonlyMap<string, RunSnapshot>;
  /** The key of every effect the remote performed for the family, one entry per effect. */
  remoteKeys: readonly string[];
}

const canon = (value: unknown): string => JSON.stringify(value);

/**
 * A family of runs ended as one worker would have left it: the root holds
 * invariant 5 with each call's child run standing in for its remote effect;
 * every call started exactly one child run, `<run>.<seq>`, of the agent it
 * names, and no run of the family is any other's; each child is done and
 * holds invariant 5 itself (its steps and tools those of the clean run's
 * child of that agent); the parent's call stored its child's final answer;
 * and the remote holds one effect per key, every one owned by a child's call.
 */
export function checkFamily(
  family: FamilySnapshot,
  opts: {
    runId: string;
    steps: number;
    tools?: string[];
    earlier?: RunSnapshot[];
    children?: Record<string, { steps: number; tools: string[] }>;
    resultIsId: boolean;
  },
): string[] {
  const { root } = family;
  const { runId } = opts;
  // The root's calls have no effect at the remote: each one's child run is what it made, once.
  const made = [...family.children.values()].flatMap((c) =>
    c.run?.parent_key
      ? [{ key: c.run.parent_key, kind: "server" as const, id: c.run.run_id, payload: {}, created_at: "" }]
      : []
  );
  const problems = checkShape({ ...root, created: made, requestsByKey: {} }, {
    runId,
    steps: opts.steps,
    earlier: opts.earlier,
    resultIsId: false,
    tools: opts.tools,
  });
  const owned = new Set<string>();
  for (const e of root.effects) {
    const id = childRunId(runId, e.seq);
    owned.add(id);
    const child = family.children.get(id)?.run;
    if (!child) {
      problems.push(`tool call ${e.idempotency_key} (${e.tool}) started no child run ${id}`);
      continue;
    }
    if (child.agent !== e.tool || child.parent_key !== e.idempotency_key) {
      problems.push(
        `run ${id} is of agent ${child.agent} started by ${child.parent_key}, expected ${e.tool} started by ` +
          e.idempotency_key,
      );
    }
    if (child.status !== "done") {
      problems.push(
        `child run ${id} is ${child.status}${child.error ? ` (${child.error})` : ""}, expected done`,
      );
    } else if (canon(e.result) !== canon(child.output ?? "")) {
      problems.push(
        `tool call ${e.idempotency_key} stored ${canon(e.result)}, its child ${id} answered ${
          canon(child.output)
        }`,
      );
    }
  }
  for (const [id, child] of family.children) {
    if (!owned.has(id)) {
      problems.push(`run ${id} (${child.run?.agent}) is no call's child: a call started two runs`);
      continue;
    }
    const clean = child.run ? opts.children?.[child.run.agent] : undefined;
    problems.push(...checkShape(child, {
      runId: id,
      steps: clean?.steps ?? child.journal.length,
      tools: clean?.tools,
      resultIsId: opts.resultIsId,
    }));
  }
  const keys = new Set([...family.children.values()].flatMap((c) => c.effects.map((e) => e.idempotency_key)));
  const perKey = new Map<string, number>();
  for (const key of family.remoteKeys) perKey.set(key, (perKey.get(key) ?? 0) + 1);
  for (const [key, n] of perKey) {
    if (n !== 1) problems.push(`the remote performed ${n} effects under ${key} across the family`);
    if (!keys.has(key)) {
      problems.push(`the remote performed an effect under ${key}, which no child's call owns`);
    }
  }
  return problems;
}
