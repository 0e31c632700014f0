/**
 * Which run an MCP call of an agent's tool means, so that a call a client
 * retries never starts a second run. A call that carries an idempotency key
 * in its `_meta` ({@link IDEMPOTENCY_KEY_META}, or `idempotencyKey`) is the
 * run whose id is derived from the agent and the key, for as long as the run
 * is kept. A call without one is the run derived from the client's name (its
 * `initialize` clientInfo), the agent and the canonical JSON of the
 * arguments within a window of time: the window's run, or the one of the
 * window before when that run was started less than a window ago.
 *
 * A run id so derived is `mcp-<agent, at most 32 characters>-<24 hex digits of
 * sha-256>`, at most 61 characters: a valid run id whatever the key holds.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { canonicalJson } from "../agent/version.ts";
import { ClientError, describeValue } from "../base/errors.ts";
import { ID_RULE, idProblem } from "../base/ids.ts";

/**
 * The `_meta` field a call's idempotency key comes in: the one the
 * runtime's own MCP client sends (`agent-runtime/idempotency-key`), so an
 * agent of one runtime calling an agent of another over MCP starts one run
 * per tool call whatever is re-sent.
 */
export const IDEMPOTENCY_KEY_META = "agent-runtime/idempotency-key";

/** Every `_meta` field read as the idempotency key, in order: the first one present is the key. */
export const IDEMPOTENCY_KEY_FIELDS: readonly string[] = [IDEMPOTENCY_KEY_META, "idempotencyKey"];

/** Hex digits of the digest in a derived run id: 96 bits, so two keys never meet by chance. */
const DIGEST_HEX = 24;
/** The agent's name is cut to this many characters in a derived run id (the id stays at most 61). */
const AGENT_CHARS = 32;

/**
 * The idempotency key a call's `_meta` carries, or undefined for none.
 * Throws `IDEMPOTENCY_KEY_INVALID` for one that is not text by the rule of
 * ids.ts (1 to 200 characters, no control character).
 */
export function keyOf(meta: Record<string, unknown> | undefined): string | undefined {
  for (const field of IDEMPOTENCY_KEY_FIELDS) {
    const value = meta?.[field];
    if (value === undefined) continue;
    const problem = typeof value === "string" ? idProblem(value) : "it is not a string";
    if (problem !== undefined) {
      throw new ClientError(
        "IDEMPOTENCY_KEY_INVALID",
        `The idempotency key in _meta["${field}"] is refused: ${problem}. A key is ${ID_RULE}: current ` +
          `value is ${describeValue(value, 80)}`,
      );
    }
    return value as string;
  }
  return undefined;
}

function runIdOf(agent: string, parts: unknown[]): string {
  const hex = createHash("sha256").update(canonicalJson(parts)).digest("hex").slice(0, DIGEST_HEX);
  return `mcp-${agent.slice(0, AGENT_CHARS)}-${hex}`;
}

/** The run a call of `agent`'s tool with idempotency key `key` is, whoever sends it. */
export function keyedRunId(agent: string, key: string): string {
  return runIdOf(agent, ["key", agent, key]);
}

/** A call without a key, as {@link windowRunIds} digests it. */
export interface UnkeyedCall {
  /** The client's name, from its `initialize` (`clientInfo.name`); empty when it gave none. */
  client: string;
  /** The agent whose tool was called. */
  agent: string;
  /** The call's arguments, as sent. */
  args: unknown;
}

/**
 * The runs a call without a key may be: `current`, its window's (the one it
 * starts when neither exists), and `previous`, the window before's, which is
 * the call's run only when it was started less than `windowMs` before
 * `nowMs`. Windows are `windowMs` long, counted from the epoch.
 */
export function windowRunIds(
  call: UnkeyedCall,
  nowMs: number,
  windowMs: number,
): { current: string; previous: string } {
  const window = Math.floor(nowMs / windowMs);
  const parts = (w: number) => ["call", call.client, call.agent, call.args ?? null, windowMs, w];
  return { current: runIdOf(call.agent, parts(window)), previous: runIdOf(call.agent, parts(window - 1)) };
}
