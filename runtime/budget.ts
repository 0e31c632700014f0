/**
 * Budgets: ceilings on what a run may spend, per agent and overridable per
 * run: model tokens, model requests and tool requests. Each model request
 * reserves its worst case (the prompt's estimated tokens plus the largest
 * answer allowed) in the same write as its intent, and the confirm (or the
 * refusal of the answer) settles the reservation against the usage the model
 * reported. A crash that loses an answer leaves its reservation standing:
 * what that request cost is unknown, so it is counted at its worst case. The
 * check before each request reads only what the database holds (the run's
 * rows as read at claim time plus this worker's own writes), so no sequence of
 * crashes and retries can spend past the ceiling by more than one request's
 * misestimate.
 *
 * @module
 */

import type { RunState } from "./context.ts";
import { RuntimeError } from "./errors.ts";
import type { JournalRow, SideEffectRow } from "./store/store.ts";

/** Ceilings on a run's spend. Every field is optional; a missing one is no ceiling. */
export interface Budget {
  /** Model tokens (prompt plus completion), reserved before each request and settled after. */
  tokens?: number;
  /** Model requests, refused answers and retries included. */
  modelCalls?: number;
  /** Tool requests, re-sends included. */
  toolCalls?: number;
  /** The largest answer a request may produce, in tokens (the reservation's second half). Default 4096. */
  maxOutputTokens?: number;
}

/** A run stopped because its next request would pass a ceiling. */
export class BudgetError extends RuntimeError {
  /** Creates a budget refusal. */
  constructor(message: string) {
    super("BUDGET_EXCEEDED", message);
    this.name = "BudgetError";
  }
}

/** Checks a budget's fields; returns it without empty fields, or undefined when it sets nothing. */
export function checkBudget(budget: Budget | undefined, where: string): Budget | undefined {
  if (!budget) return undefined;
  const out: Budget = {};
  for (const key of ["tokens", "modelCalls", "toolCalls", "maxOutputTokens"] as const) {
    const v = budget[key];
    if (v === undefined) continue;
    if (!Number.isSafeInteger(v) || v < 1) {
      throw new RuntimeError(
        "BUDGET_INVALID",
        `${where}: budget '${key}' must be a positive integer: current value is ${JSON.stringify(v)}`,
      );
    }
    out[key] = v;
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The run's budget: the agent's, with the run's own fields on top. */
export function mergeBudget(agent: Budget | undefined, run: Budget | undefined): Budget | undefined {
  const merged = { ...agent, ...run };
  return Object.keys(merged).length > 0 ? merged : undefined;
}

/** Tokens a journal row holds against the budget: the usage reported so far plus outstanding reservations. */
export function rowTokens(row: Pick<JournalRow, "usage" | "reserved_tokens">): number {
  const u = row.usage as Record<string, unknown> | null;
  let used = 0;
  if (u && typeof u === "object") {
    if (typeof u.total_tokens === "number") used = u.total_tokens;
    else used = Number(u.prompt_tokens ?? 0) + Number(u.completion_tokens ?? 0);
  }
  return (Number.isFinite(used) ? used : 0) + (row.reserved_tokens ?? 0);
}

/** What a run has spent (or holds reserved) so far. */
export function spendOf(
  journal: Iterable<Pick<JournalRow, "usage" | "reserved_tokens" | "llm_attempts">>,
  effects: Iterable<Pick<SideEffectRow, "attempts">>,
): { tokens: number; modelCalls: number; toolCalls: number } {
  let tokens = 0;
  let modelCalls = 0;
  let toolCalls = 0;
  for (const j of journal) {
    tokens += rowTokens(j);
    modelCalls += j.llm_attempts;
  }
  for (const e of effects) toolCalls += e.attempts;
  return { tokens, modelCalls, toolCalls };
}

/** A request's worst case in tokens: the prompt estimated at 4 characters a token, plus the largest answer. */
export function worstCaseTokens(budget: Budget, promptChars: number): number {
  return Math.ceil(promptChars / 4) + (budget.maxOutputTokens ?? 4096);
}

/** Throws {@link BudgetError} when one more model request, reserving `reserve` tokens, would pass a ceiling. */
export function checkModelRequest(state: RunState, reserve: number): void {
  const budget = state.budget;
  if (!budget) return;
  const spent = spendOf(state.journal.values(), state.effects.values());
  if (budget.modelCalls !== undefined && spent.modelCalls + 1 > budget.modelCalls) {
    throw new BudgetError(
      `budget: ${spent.modelCalls} model requests made, and the ceiling is ${budget.modelCalls}`,
    );
  }
  if (budget.tokens !== undefined && spent.tokens + reserve > budget.tokens) {
    throw new BudgetError(
      `budget: ${spent.tokens} tokens spent or reserved, and the next request reserves ${reserve} ` +
        `(its worst case); the ceiling is ${budget.tokens}`,
    );
  }
}

/** Throws {@link BudgetError} when one more tool request would pass the ceiling. */
export function checkToolRequest(state: RunState): void {
  const ceiling = state.budget?.toolCalls;
  if (ceiling === undefined) return;
  const spent = spendOf([], state.effects.values()).toolCalls;
  if (spent + 1 > ceiling) {
    throw new BudgetError(`budget: ${spent} tool requests made, and the ceiling is ${ceiling}`);
  }
}
