/**
 * Limits shared by the fleet, as a user declares them: on an agent
 * (`defineAgent({ limits })`) or on a process (`LIMITS`, the same list as
 * JSON). Each names what it holds (a model, a provider, a tool, or a label a
 * run carries) and any of requests, input tokens and output tokens per minute
 * and calls in flight (the declaration and its checks: `base/limit_spec.ts`).
 * This module turns a request into what it asks of the store: one
 * {@link LimitAsk} per key it falls under.
 *
 * A model request falls under the limits of its model, its provider and each
 * label its run carries; a tool call under those of its tool. Two limits on
 * one key (the agent's and the process's) are held as one, the tighter of
 * each. Every process that takes a key should declare the same limit for it:
 * each take is judged by the limit its own process was given.
 *
 * @module
 */

import { DEFAULTS } from "../base/defaults.ts";
import type { Limit } from "../base/limit_spec.ts";
import type { LimitAsk } from "../store/store.ts";

export {
  checkLabels,
  checkLimits,
  LABEL_PATTERN,
  type Limit,
  NO_LIMITS,
  parseLimits,
} from "../base/limit_spec.ts";

/** What a model request is, for its limits: its model, provider, the run's labels, its estimate. */
export interface ModelRequestLimits {
  /** The model's name, if its planner says. */
  model?: string;
  /** The provider, if its planner says. */
  provider?: string;
  /** The run's labels. */
  labels?: Readonly<Record<string, string>>;
  /** The prompt's estimated tokens. */
  inputTokens: number;
  /** The answer's cap, if the request sets one. */
  maxOutputTokens?: number;
}

/** The asks of a model request: one per key among `limits` it falls under (none: it takes nothing). */
export function modelAsks(limits: readonly Limit[], req: ModelRequestLimits): LimitAsk[] {
  if (limits.length === 0) return [];
  const estimate = {
    input: req.inputTokens,
    output: req.maxOutputTokens ?? DEFAULTS.limitOutputEstimate,
  };
  const names = { model: req.model, provider: req.provider };
  return asks(limits, req.labels, estimate, (l) => {
    if (l.label !== undefined) {
      const value = req.labels?.[l.label];
      return value === undefined ? undefined : `label:${l.label}=${value}`;
    }
    for (const kind of ["model", "provider"] as const) {
      const name = names[kind];
      const want = l[kind];
      if (want !== undefined && name !== undefined && (want === "*" || want === name)) {
        return `${kind}:${name}`;
      }
    }
    return undefined;
  });
}

/** The asks of a call of `tool`: one per key among `limits` it falls under. */
export function toolAsks(
  limits: readonly Limit[],
  tool: string,
  labels?: Readonly<Record<string, string>>,
): LimitAsk[] {
  if (limits.length === 0) return [];
  return asks(
    limits,
    labels,
    { input: 0, output: 0 },
    (l) => l.tool !== undefined && (l.tool === "*" || l.tool === tool) ? `tool:${tool}` : undefined,
  );
}

/** The limits that `keyOf` maps to a key, one ask per key, the tighter of each amount where two meet. */
function asks(
  limits: readonly Limit[],
  labels: Readonly<Record<string, string>> | undefined,
  estimate: { input: number; output: number },
  keyOf: (l: Limit) => string | undefined,
): LimitAsk[] {
  const byKey = new Map<string, LimitAsk>();
  for (const l of limits) {
    const key = keyOf(l);
    if (key === undefined) continue;
    const windowMs = (l.windowS ?? DEFAULTS.limitWindowS) * 1000;
    const share = (perMinute: number | undefined) =>
      perMinute === undefined ? undefined : Math.max(1, Math.floor(perMinute * windowMs / 60_000));
    const ask: LimitAsk = {
      key,
      described: "",
      windowMs,
      requests: share(l.requestsPerMinute),
      inputTokens: share(l.inputTokensPerMinute),
      outputTokens: share(l.outputTokensPerMinute),
      inFlight: l.inFlight,
      estimatedInput: estimate.input,
      estimatedOutput: estimate.output,
      ...(l.fairBy === undefined ? {} : { group: labels?.[l.fairBy] ?? "" }),
    };
    const before = byKey.get(key);
    byKey.set(key, before ? tighter(before, ask) : ask);
  }
  return [...byKey.values()].map((a) => ({ ...a, described: describeAsk(a) }));
}

/** Two asks of one key as one: the shorter window's amounts scaled, the smaller of each. */
function tighter(a: LimitAsk, b: LimitAsk): LimitAsk {
  const min = (x: number | undefined, y: number | undefined) =>
    x === undefined ? y : y === undefined ? x : Math.min(x, y);
  const windowMs = Math.min(a.windowMs, b.windowMs);
  const scale = (ask: LimitAsk, n: number | undefined) =>
    n === undefined ? undefined : Math.max(1, Math.floor(n * windowMs / ask.windowMs));
  return {
    ...a,
    windowMs,
    requests: min(scale(a, a.requests), scale(b, b.requests)),
    inputTokens: min(scale(a, a.inputTokens), scale(b, b.inputTokens)),
    outputTokens: min(scale(a, a.outputTokens), scale(b, b.outputTokens)),
    inFlight: min(a.inFlight, b.inFlight),
    ...(a.group ?? b.group) === undefined ? {} : { group: a.group ?? b.group },
  };
}

/** An ask's limit in words: `10 requests, 2000 input tokens per 1 s; 4 in flight`. */
export function describeAsk(
  a: Pick<LimitAsk, "windowMs" | "requests" | "inputTokens" | "outputTokens" | "inFlight">,
): string {
  const count = (n: number | undefined, what: string) =>
    n === undefined ? undefined : `${n} ${what}${n === 1 ? "" : "s"}`;
  const per = [
    count(a.requests, "request"),
    count(a.inputTokens, "input token"),
    count(a.outputTokens, "output token"),
  ].filter((p) => p !== undefined);
  const window = a.windowMs % 1000 === 0 ? `${a.windowMs / 1000} s` : `${a.windowMs} ms`;
  return [
    per.length > 0 ? `${per.join(", ")} per ${window}` : undefined,
    a.inFlight === undefined ? undefined : `${a.inFlight} in flight`,
  ].filter((p) => p !== undefined).join("; ");
}
