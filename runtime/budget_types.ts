/**
 * The shape of a budget and the range of the token columns: what the store
 * (a run row carries its budget) and the budget checks both need, in a leaf
 * module both import, so the store never imports the checks.
 *
 * @module
 */

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

/** The most a journal row's token columns hold (PostgreSQL `integer`): larger counts stop there. */
export const MAX_ROW_TOKENS = 2_147_483_647;
