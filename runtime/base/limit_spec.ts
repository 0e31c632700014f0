/**
 * A limit shared by the fleet as a user declares it (on an agent, or on a
 * process as `LIMITS`), a run's labels, and their checks: leaves the settings
 * reader and the agent both use. What a request asks of the store under them
 * is `agent/limit_asks.ts`'s.
 *
 * @module
 */

import { RuntimeError } from "./errors.ts";

/**
 * A limit shared by every worker of every host, held in the database. It
 * names exactly one of `model`, `provider`, `tool` or `label`, and at least
 * one of the four limits.
 *
 * @example
 * ```ts
 * import type { Limit } from "./limit_spec.ts";
 * const limits: Limit[] = [
 *   { model: "gpt-4o", requestsPerMinute: 50, inputTokensPerMinute: 400_000 },
 *   { tool: "create_server", inFlight: 4 },
 *   { label: "tenant", inFlight: 10, fairBy: "tenant" },
 * ];
 * ```
 */
export interface Limit {
  /** A model's name as its requests send it (`gpt-4o`); `*` holds each model apart. */
  model?: string;
  /** A provider: the model endpoint's host (`api.openai.com`), or an AI SDK model's provider id; `*` each apart. */
  provider?: string;
  /** A tool's name; `*` holds each tool apart. */
  tool?: string;
  /** A label runs carry (`tenant`): each value of it is its own key, over the model requests of its runs. */
  label?: string;
  /** Requests a minute. */
  requestsPerMinute?: number;
  /** Input (prompt) tokens a minute, reserved from the request's estimate and settled to its answer's usage. */
  inputTokensPerMinute?: number;
  /** Output (completion) tokens a minute, reserved from the request's cap (else 4096) and settled. */
  outputTokensPerMinute?: number;
  /** Requests in flight at once. */
  inFlight?: number;
  /**
   * The window the per-minute limits are held over, in seconds, pro rata:
   * `requestsPerMinute: 600, windowS: 1` is at most 10 in any second, as a
   * provider that enforces its minute by the second counts. Default 60.
   */
  windowS?: number;
  /** Runs waiting for this key are served round-robin across the values of this label; default: in order. */
  fairBy?: string;
}

/** The kinds of key a limit names, in the order a key spells them. */
const KINDS = ["model", "provider", "tool", "label"] as const;
const AMOUNTS = ["requestsPerMinute", "inputTokensPerMinute", "outputTokensPerMinute", "inFlight"] as const;
const FIELDS = new Set<string>([...KINDS, ...AMOUNTS, "windowS", "fairBy"]);

/** A label's name and value: 1-64 letters, digits, `.`, `_`, `-` or `:`, as a run id. */
export const LABEL_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

/**
 * Checks a list of limits, every problem reported at once; returns them
 * frozen (an empty list for none). Throws `code` (`LIMITS_INVALID`; a
 * definition's `AGENT_INVALID`), each problem naming the limit by its place
 * in the list, after `where`.
 */
export function checkLimits(
  limits: unknown,
  where: string,
  code: "LIMITS_INVALID" | "AGENT_INVALID" = "LIMITS_INVALID",
): readonly Limit[] {
  if (limits === undefined) return NO_LIMITS;
  if (!Array.isArray(limits)) throw new RuntimeError(code, `${where}: 'limits' must be an array of limits`);
  const problems = limits.flatMap((l, i) => limitProblems(l).map((p) => `limit ${i}: ${p}`));
  if (problems.length > 0) throw new RuntimeError(code, `${where}: ${problems.join("; ")}`);
  return Object.freeze(limits.map((l) => Object.freeze({ ...l }) as Limit));
}

/** No limits. */
export const NO_LIMITS: readonly Limit[] = Object.freeze([]);

/** What is wrong with one limit, in words (none: it is good). */
function limitProblems(l: unknown): string[] {
  if (l === null || typeof l !== "object" || Array.isArray(l)) return ["must be an object"];
  const o = l as Record<string, unknown>;
  const problems = Object.keys(o).filter((k) => !FIELDS.has(k)).map((k) =>
    `unknown field '${k}'; a limit has ${[...FIELDS].join(", ")}`
  );
  const kinds = KINDS.filter((k) => o[k] !== undefined);
  if (kinds.length !== 1) {
    problems.push(
      `must name exactly one of ${KINDS.join(", ")}: current value names ${
        kinds.length === 0 ? "none" : kinds.join(" and ")
      }`,
    );
  }
  for (const k of kinds) {
    const v = o[k];
    const ok = typeof v === "string" &&
      (k === "label" ? LABEL_PATTERN.test(v) : v.length > 0 && v.length <= 200);
    if (!ok) {
      problems.push(
        `'${k}' must be ${k === "label" ? "a label name" : "a name, or *"}: current value is ${
          JSON.stringify(v)
        }`,
      );
    }
  }
  const amounts = AMOUNTS.filter((k) => o[k] !== undefined);
  if (amounts.length === 0) problems.push(`must set at least one of ${AMOUNTS.join(", ")}`);
  for (const k of amounts) {
    const v = o[k];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) {
      problems.push(`'${k}' must be a positive integer: current value is ${JSON.stringify(v)}`);
    }
  }
  const w = o.windowS;
  if (w !== undefined && (typeof w !== "number" || !Number.isFinite(w) || w < 0.1 || w > 60)) {
    problems.push(
      `'windowS' must be a number of seconds from 0.1 to 60: current value is ${JSON.stringify(w)}`,
    );
  }
  if (o.fairBy !== undefined && (typeof o.fairBy !== "string" || !LABEL_PATTERN.test(o.fairBy))) {
    problems.push(`'fairBy' must be a label name: current value is ${JSON.stringify(o.fairBy)}`);
  }
  return problems;
}

/** Parses `LIMITS` (a JSON array of limits); throws `LIMITS_INVALID` saying what is wrong. */
export function parseLimits(raw: string, setting = "LIMITS"): readonly Limit[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new RuntimeError(
      "LIMITS_INVALID",
      `${setting} must be a JSON array of limits (e.g. [{"model":"gpt-4o","requestsPerMinute":50}]): ${
        (err as Error).message
      }`,
    );
  }
  return checkLimits(parsed, setting);
}

/**
 * Checks a run's labels: an object of at most 16 names to values, each
 * matching {@link LABEL_PATTERN}. Returns them frozen, or undefined for none.
 */
export function checkLabels(labels: unknown, where: string): Readonly<Record<string, string>> | undefined {
  if (labels === undefined || labels === null) return undefined;
  const bad = (what: string) =>
    new RuntimeError(
      "LABELS_INVALID",
      `${where}: ${what}; labels are { name: value } of 1-64 letters, digits, '.', '_', '-' or ':'`,
    );
  if (typeof labels !== "object" || Array.isArray(labels)) throw bad("'labels' must be an object");
  const entries = Object.entries(labels as Record<string, unknown>);
  if (entries.length > 16) throw bad(`at most 16 labels: ${entries.length} given`);
  for (const [k, v] of entries) {
    if (!LABEL_PATTERN.test(k)) throw bad(`the label name ${JSON.stringify(k)} is not one`);
    if (typeof v !== "string" || !LABEL_PATTERN.test(v)) {
      throw bad(`the value of label ${k} must be one: current value is ${JSON.stringify(v)}`);
    }
  }
  return entries.length === 0
    ? undefined
    : Object.freeze(Object.fromEntries(entries) as Record<string, string>);
}
