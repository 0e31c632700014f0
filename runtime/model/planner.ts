/**
 * The model, behind the {@link Planner} interface: asked with a neutral
 * transcript (`transcript.ts`), it answers with a decision. Each model
 * protocol has its own planner in `planners/`; this module re-exports the
 * chat-completions one ({@link OpenAIPlanner}) where it was before.
 *
 * @module
 */

import type { DecideRequest, PlannerDecision } from "./transcript.ts";

// The contract's types and the planner that ships, from the one module that named them all before #23
// (and that mod.ts exports them from). openai.ts cannot import this module back: no cycle.
export * from "./transcript.ts";
export * from "./openai.ts";
export { isTransientStatus } from "../base/http.ts";

/** Asks a model what to do next. One call is one (billable) request. */
export interface Planner {
  /** A short description for the start-up log, e.g. the endpoint. */
  readonly describe: string;
  /** The model's name, for telemetry (`gen_ai.request.model`) and a limit on it, when known. */
  readonly model?: string;
  /** Who serves it (an endpoint's host, an AI SDK provider's id), for a limit on a provider, when known. */
  readonly provider?: string;
  /**
   * Asks once. Throws a `ModelError`: `transient` when asking again may
   * help, `badAnswer` when an answer arrived but cannot be used.
   */
  decide(req: DecideRequest): Promise<PlannerDecision>;
  /**
   * The characters of the prompt this planner would send for `req`, the
   * basis of a budgeted request's reservation (four characters a token).
   * Optional: without it, the transcript's and the tools' JSON are counted.
   */
  promptChars?(req: Pick<DecideRequest, "transcript" | "tools">): number;
}
