/**
 * Budgets: ceilings on what a run may spend, per agent and overridable per
 * run: model tokens, model requests and tool requests. Each model request
 * reserves its worst case (the prompt's estimated tokens plus the largest
 * answer allowed) in the same write as its intent, and asks the model for no
 * longer an answer than that (the planner's `maxOutputTokens`). The confirm
 * (or the refusal of the answer) settles the reservation: the answer counts
 * what {@link answerTokens} says, whatever the server reported. A crash that
 * loses an answer leaves its reservation standing: what that request cost is
 * unknown, so it is counted at its worst case. The check before each request
 * reads only what the database holds (the run's rows as read at claim time
 * plus this worker's own writes), so no sequence of crashes and retries can
 * spend past the ceiling, unless an answer reports more than its request
 * reserved (a server that ignores the cap, or a prompt denser than four
 * characters a token): that answer counts in full, and no request follows it.
 *
 * @module
 */

import { type Budget, MAX_ROW_TOKENS } from "../base/values.ts";
import { RuntimeError } from "../base/errors.ts";
import { invariant } from "../base/assert.ts";
import type { JournalRow, SideEffectRow } from "../store/store.ts";

export { type Budget, MAX_ROW_TOKENS };

/**
 * What a budget check reads: the run's ceilings and the rows it has
 * written (a worker's `RunState` is one), and nothing else of the run.
 */
export interface RunSpend {
  /** The run's ceilings, if any. */
  budget?: Budget;
  /** The run's journal rows. */
  journal: { values(): Iterable<Pick<JournalRow, "spent_tokens" | "reserved_tokens" | "llm_attempts">> };
  /** The run's tool calls. */
  effects: { values(): Iterable<Pick<SideEffectRow, "attempts">> };
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

/**
 * What one answer counts against the token budget: the usage it reported,
 * read so that no report can lower the count (a field that is not a finite
 * number above zero counts as zero; the larger of `total_tokens` and
 * `prompt_tokens + completion_tokens`), counted in full even past what its
 * request reserved. An answer that reports no tokens at all counts what its
 * request reserved (`reserved`): its cost is unknown, so it is counted at the
 * worst case the request was allowed.
 *
 * @example
 * ```ts
 * import { answerTokens } from "./budget.ts";
 * answerTokens({ prompt_tokens: 1000, completion_tokens: 100, total_tokens: -1 }, 4596); // 1100
 * answerTokens(undefined, 4596); // 4596
 * answerTokens({ prompt_tokens: 10, completion_tokens: 100_000 }, 4596); // 100010
 * ```
 */
export function answerTokens(usage: unknown, reserved: number): number {
  const u = usage !== null && typeof usage === "object" ? usage as Record<string, unknown> : {};
  const count = (v: unknown): number => typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0;
  const reported = Math.max(count(u.total_tokens), count(u.prompt_tokens) + count(u.completion_tokens));
  return Math.min(MAX_ROW_TOKENS, Math.ceil(reported > 0 ? reported : Math.max(0, reserved)));
}

/** Tokens a journal row holds against the budget: what its settled answers count, plus outstanding reservations. */
export function rowTokens(row: Pick<JournalRow, "spent_tokens" | "reserved_tokens">): number {
  return (row.spent_tokens ?? 0) + (row.reserved_tokens ?? 0);
}

/** What a run has spent (or holds reserved) so far. */
export function spendOf(
  journal: Iterable<Pick<JournalRow, "spent_tokens" | "reserved_tokens" | "llm_attempts">>,
  effects: Iterable<Pick<SideEffectRow, "attempts">>,
): Spend {
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

/** What a worker's map of decisions keeps summed as rows are set (`run/tallied.ts`). */
export interface JournalSums {
  /** Tokens spent or reserved: each row's {@link rowTokens}. */
  readonly tokens: number;
  /** Model requests paid for. */
  readonly llmAttempts: number;
}

/** What a worker's map of tool calls keeps summed as rows are set (`run/tallied.ts`). */
export interface EffectSums {
  /** Tool requests sent. */
  readonly attempts: number;
}

/**
 * What the run whose rows `state` holds has spent: from the sums a worker's
 * maps keep ({@link JournalSums}, {@link EffectSums}), else by {@link spendOf}.
 */
export function spendOfRows(state: Pick<RunSpend, "journal" | "effects">): Spend {
  const sums = state.journal as Partial<JournalSums>;
  const decided = typeof sums.tokens === "number" && typeof sums.llmAttempts === "number"
    ? { tokens: sums.tokens, modelCalls: sums.llmAttempts }
    : spendOf(state.journal.values(), []);
  return { tokens: decided.tokens, modelCalls: decided.modelCalls, toolCalls: toolRequestsOf(state) };
}

/** Tool requests the run whose calls `state` holds has sent, as {@link spendOfRows} counts them. */
function toolRequestsOf(state: Pick<RunSpend, "effects">): number {
  const sums = state.effects as Partial<EffectSums>;
  return typeof sums.attempts === "number" ? sums.attempts : spendOf([], state.effects.values()).toolCalls;
}

/**
 * The longest answer a request of a run with `budget` may ask for, in tokens
 * (sent to the model as its cap, and reserved): `maxOutputTokens`, default
 * 4096, when the budget sets a token ceiling or `maxOutputTokens`; otherwise
 * undefined (no cap is asked for).
 */
export function answerCap(budget: Budget | undefined): number | undefined {
  if (budget?.tokens === undefined && budget?.maxOutputTokens === undefined) return undefined;
  return budget.maxOutputTokens ?? 4096;
}

/** A request's worst case in tokens: the prompt estimated at 4 characters a token, plus the largest answer. */
export function worstCaseTokens(budget: Budget, promptChars: number): number {
  return Math.min(MAX_ROW_TOKENS, Math.ceil(promptChars / 4) + (budget.maxOutputTokens ?? 4096));
}

/** What a run has spent (or holds reserved): tokens, model requests, tool requests. */
export interface Spend {
  /** Model tokens spent or reserved. */
  tokens: number;
  /** Model requests made. */
  modelCalls: number;
  /** Tool requests made. */
  toolCalls: number;
}

/**
 * A ceiling a run of a family is held to besides its own (family.ts): that
 * of an ancestor, which counts what its whole subtree spends, or the run's
 * own, which counts what its descendants spend too. `others` is what the
 * ceiling's subtree has spent apart from the run itself, as the database
 * held it when the run last read its family.
 */
export interface FamilyCeiling {
  /** The run whose ceiling it is. */
  runId: string;
  /** `own` for the run's own ceiling, `ancestor` for one of its ancestors'. */
  of: "own" | "ancestor";
  /** Its ceilings. */
  budget: Budget;
  /** What the rest of its subtree has spent. */
  others: Spend;
}

/** The ceilings of a run with no family: none besides its own. */
export const NO_FAMILY: readonly FamilyCeiling[] = Object.freeze([]);

/**
 * The budget a run's model requests reserve by and cap their answers at:
 * its own, or, when a ceiling of its family counts tokens and its own does
 * not, one with that ceiling's `maxOutputTokens` (default 4096), so a child
 * reserves its worst case against its parent's token ceiling too.
 */
export function reservationBudget(
  own: Budget | undefined,
  family: readonly FamilyCeiling[],
): Budget | undefined {
  if (own?.tokens !== undefined || own?.maxOutputTokens !== undefined) return own;
  const counting = family.filter((c) =>
    c.budget.tokens !== undefined || c.budget.maxOutputTokens !== undefined
  );
  if (counting.length === 0) return own;
  return { ...own, maxOutputTokens: Math.min(...counting.map((c) => c.budget.maxOutputTokens ?? 4096)) };
}

/** How a family ceiling is named in a refusal. */
function ceilingOf(c: FamilyCeiling): string {
  return c.of === "own"
    ? "this run's ceiling (which counts its child runs)"
    : `the ceiling of its ancestor run ${c.runId}`;
}

/**
 * Throws {@link BudgetError} when one more model request, reserving `reserve`
 * tokens, would pass a ceiling: the run's own, or one of its family's
 * (`family`, {@link FamilyCeiling}: counting what the rest of that subtree
 * has spent).
 */
export function checkModelRequest(
  state: RunSpend,
  reserve: number,
  family: readonly FamilyCeiling[] = NO_FAMILY,
): void {
  const spent = spendOfRows(state);
  for (const c of family) {
    const calls = spent.modelCalls + c.others.modelCalls;
    if (c.budget.modelCalls !== undefined && calls + 1 > c.budget.modelCalls) {
      throw new BudgetError(
        `budget: ${calls} model requests made by run ${c.runId} and its descendants, and ` +
          `${ceilingOf(c)} is ${c.budget.modelCalls}`,
      );
    }
    const tokens = spent.tokens + c.others.tokens;
    if (c.budget.tokens !== undefined && tokens + reserve > c.budget.tokens) {
      throw new BudgetError(
        `budget: ${tokens} tokens spent or reserved by run ${c.runId} and its descendants, and the next ` +
          `request reserves ${reserve}; ${ceilingOf(c)} is ${c.budget.tokens}`,
      );
    }
  }
  const budget = state.budget;
  if (!budget) return;
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

/** What the tool-call checks read: the run's ceilings and its calls. */
export type ToolSpend = Pick<RunSpend, "budget" | "effects">;

/**
 * The tool requests reserved for a step's calls not yet sent, held against
 * the tool-call ceiling so that a step is never left half sent by its own
 * budget. One per run, changed only through its methods. Each checks on
 * entry (and `reserve` on exit too) that the reservation is a whole number
 * of calls, never below zero, and that what the run spent and what it holds
 * never pass the ceiling together ({@link invariant}: a broken one stops the
 * run's turn as a bug); what `take` leaves, its own refusal guarantees.
 */
export class ToolCallReservation {
  /** The run it belongs to, named by a broken invariant. */
  readonly runId: string;
  #held = 0;

  /** An empty reservation for run `runId`. */
  constructor(runId: string) {
    this.runId = runId;
  }

  /** Requests held for the step's calls not yet sent. */
  get held(): number {
    return this.#held;
  }

  /**
   * Reserves the requests of a step's `calls` calls not yet sent, before any
   * of them goes out: throws {@link BudgetError} when they would pass the
   * run's or its family's tool-call ceiling together. Used up call by call
   * ({@link ToolCallReservation.take}).
   */
  reserve(spend: ToolSpend, calls: number, family: readonly FamilyCeiling[] = NO_FAMILY): void {
    invariant(Number.isInteger(calls) && calls >= 0, this.runId, `a step reserves ${calls} tool calls`);
    this.#check(spend, "before a reservation");
    this.#held = 0;
    checkFamilyToolCalls(spend, calls, family);
    const ceiling = spend.budget?.toolCalls;
    if (ceiling !== undefined) {
      const spent = toolRequestsOf(spend);
      if (spent + calls > ceiling) {
        throw new BudgetError(
          `budget: ${spent} tool requests made, the step asks for ${calls} calls at once, and the ceiling is ${ceiling}`,
        );
      }
    }
    this.#held = calls;
    this.#check(spend, "after a reservation");
  }

  /**
   * Throws {@link BudgetError} when one more tool request would pass the
   * ceiling, counting the requests held for the step's calls not yet sent (a
   * retry may not take theirs). `first`: the call's first request, which
   * uses its own reservation.
   */
  take(spend: ToolSpend, first: boolean, family: readonly FamilyCeiling[] = NO_FAMILY): void {
    this.#check(spend, "before a request");
    if (first && this.#held > 0) this.#held -= 1;
    checkFamilyToolCalls(spend, 1 + this.#held, family);
    const ceiling = spend.budget?.toolCalls;
    if (ceiling === undefined) return;
    const spent = toolRequestsOf(spend);
    if (spent + 1 + this.#held > ceiling) {
      const held = this.#held > 0 ? `, ${this.#held} more are reserved for this step's other calls` : "";
      throw new BudgetError(`budget: ${spent} tool requests made${held}, and the ceiling is ${ceiling}`);
    }
  }

  /** The step has ended: nothing is held for it any more. */
  release(): void {
    this.#held = 0;
  }

  #check(spend: ToolSpend, when: string): void {
    const held = this.#held;
    invariant(Number.isInteger(held) && held >= 0, this.runId, () => `${held} tool calls held ${when}`);
    const ceiling = spend.budget?.toolCalls;
    if (ceiling === undefined || held === 0) return;
    const spent = toolRequestsOf(spend);
    invariant(
      spent + held <= ceiling,
      this.runId,
      () => `${spent} tool requests made and ${held} held pass the ceiling ${ceiling} ${when}`,
    );
  }
}

/** Throws {@link BudgetError} when `calls` more tool requests would pass a ceiling of the run's family. */
function checkFamilyToolCalls(state: ToolSpend, calls: number, family: readonly FamilyCeiling[]): void {
  if (family.length === 0) return;
  const spent = toolRequestsOf(state);
  for (const c of family) {
    const made = spent + c.others.toolCalls;
    if (c.budget.toolCalls !== undefined && made + calls > c.budget.toolCalls) {
      throw new BudgetError(
        `budget: ${made} tool requests made by run ${c.runId} and its descendants, ${calls} more asked for, ` +
          `and ${ceilingOf(c)} is ${c.budget.toolCalls}`,
      );
    }
  }
}
