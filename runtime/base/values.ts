/**
 * Values every floor speaks: a JSON value, the shape of a budget and the
 * range of the token columns. The store (a run row carries its budget and
 * JSON columns), the model's transcript and the agent's tools all need them,
 * so they live in a leaf module each imports, and none imports another for
 * a type.
 *
 * @module
 */

/** A JSON value: what a tool's arguments and result, a run's input and output, are. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

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
