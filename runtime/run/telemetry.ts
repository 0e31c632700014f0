/**
 * Telemetry: OpenTelemetry spans and counters for worker attempts, steps,
 * model requests and tool calls, through the standard API
 * (`@opentelemetry/api`) and exported by Deno's built-in OpenTelemetry
 * (`OTEL_DENO=true`, `OTEL_EXPORTER_OTLP_ENDPOINT`, ...).
 *
 * Off (no `OTEL_DENO`), {@link telemetryFromEnv} returns {@link NO_TELEMETRY},
 * whose every method just calls the function it wraps: no span, no
 * attribute, no allocation beyond the call itself.
 *
 * The spans of one run share one trace id, derived from the run id, so every
 * worker attempt on a run (and the attempt a crash cut short, which a killed
 * process never exports: the next attempt records it from the rows it left)
 * lands in one trace:
 *
 * ```text
 * agent.attempt            run, epoch, owner, outcome        (one per worker attempt: claim to exit)
 *   agent.recover          re-sends of calls a crash left at intent
 *     execute_tool NAME
 *   agent.step             seq, idempotency key
 *     agent.decide         replayed, llm attempts, tokens, the tool chosen
 *       chat MODEL         gen_ai.* (one per paid model request)
 *     agent.act            key, tool, status, remote, attempts
 *       execute_tool NAME  gen_ai.tool.name, attempts, remote
 * ```
 *
 * @module
 */

import {
  type Attributes,
  type Context,
  context,
  type Counter,
  metrics,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Tracer,
} from "npm:@opentelemetry/api@1.10.0";
import type { Ended, StepRows } from "./ended.ts";
import { traceHeaders } from "../base/trace.ts";
import type { Fence, JournalRow, SideEffectRow } from "../store/store.ts";

export type { Ended, Failed, Finished, StepRows } from "./ended.ts";

/** The instrumentation scope's name. */
export const SCOPE = "agent-runtime";

/** A step, as its spans name it. */
export interface TracedStep {
  /** The run and the epoch this worker holds. */
  fence: Fence;
  /** The step. */
  seq: number;
}

/** The decision half of a step, as its span opens. */
export interface TracedDecision extends TracedStep {
  /** The step's journal row before it: a confirmed one is replayed. */
  before?: JournalRow;
}

/** One tool call, as its span opens. */
export interface TracedCall extends TracedStep {
  /** Its idempotency key. */
  key: string;
  /** The tool. */
  tool: string;
  /** Its row before the span (a call an earlier worker left at intent): the attempts it had. */
  before?: SideEffectRow;
}

/** Settling a crash's leftovers, as its span opens. */
export interface TracedRecovery {
  /** The run and the epoch this worker holds. */
  fence: Fence;
  /** Journal and tool-call rows read back at the claim: none, and there is nothing to recover (no span). */
  rows: number;
  /** Tool calls left at `intent`. */
  strandedCalls: number;
}

/** A worker attempt, as the telemetry sees it at claim time. */
export interface TracedAttempt {
  /** The run. */
  runId: string;
  /** The agent. */
  agent: string;
  /** The epoch this attempt holds. */
  epoch: number;
  /** This worker (`runs.owner`). */
  owner: string;
  /** Who held the run before. */
  previousOwner: string | null;
  /** Age of the previous holder's lease; set only when it left the run without closing it. */
  leaseAgeMs?: number;
}

/** A model answer's token counts, as far as the wrapper reads them (transcript.ts `Usage`). */
interface UsageLike {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number; cache_write_tokens?: number };
  completion_tokens_details?: { reasoning_tokens?: number };
}

/** Spans and counters of the worker. {@link NO_TELEMETRY} is the no-op. */
export interface Telemetry {
  /** False for the no-op. */
  readonly enabled: boolean;
  /** One worker attempt on a run, claim to exit; `fn`'s outcome is recorded on it. */
  attempt<T extends { status: string; toolCalls: number; llmCalls: number }>(
    a: TracedAttempt,
    fn: () => Promise<T>,
  ): Promise<T>;
  /**
   * Records the attempt before this one, when it left the run without closing
   * it (killed, stalled): its process never exported its own span.
   */
  lostAttempt(a: TracedAttempt, journal: readonly JournalRow[], effects: readonly SideEffectRow[]): void;
  /** Settling a crash's leftovers. */
  recover<T>(at: TracedRecovery, fn: () => Promise<T>): Promise<T>;
  /** One step; its outcome is read from how `fn` ended (the step's rows), which it returns. */
  step<T>(at: TracedStep, fn: () => Promise<Ended<T>>): Promise<Ended<T>>;
  /** The decision half of a step; its outcome is read from the journal row `fn` ended with. */
  decide<T>(at: TracedDecision, fn: () => Promise<Ended<T>>): Promise<Ended<T>>;
  /** One paid model request. */
  modelCall<T extends { usage?: unknown }>(model: string | undefined, fn: () => Promise<T>): Promise<T>;
  /** The action half of a step; its outcome is read from the tool call `fn` ended with. */
  act<T>(at: TracedStep, fn: () => Promise<Ended<T>>): Promise<Ended<T>>;
  /** Sending one tool call until it is confirmed, failed or flagged; read from the row `fn` ended with. */
  toolCall<T>(call: TracedCall, fn: () => Promise<Ended<T>>): Promise<Ended<T>>;
  /** A worker lost the claim on a run of `agent` to another worker. */
  lostClaim(agent: string): void;
  /** The W3C trace context of the active span, as HTTP headers (`traceparent`), or none. */
  traceHeaders(): Record<string, string>;
}

/** Telemetry off: every wrapper calls its function and nothing else. */
export const NO_TELEMETRY: Telemetry = Object.freeze({
  enabled: false,
  attempt: (_a: TracedAttempt, fn: () => Promise<never>) => fn(),
  lostAttempt: () => {},
  recover: (_at: TracedRecovery, fn: () => Promise<never>) => fn(),
  step: (_at: TracedStep, fn: () => Promise<never>) => fn(),
  decide: (_at: TracedDecision, fn: () => Promise<never>) => fn(),
  modelCall: (_m: string | undefined, fn: () => Promise<never>) => fn(),
  act: (_at: TracedStep, fn: () => Promise<never>) => fn(),
  toolCall: (_c: TracedCall, fn: () => Promise<never>) => fn(),
  lostClaim: () => {},
  traceHeaders: () => ({}),
}) as Telemetry;

/** True when `OTEL_DENO` turns Deno's OpenTelemetry on (`true` or `1`). */
export function telemetryEnabled(env?: Record<string, string | undefined>): boolean {
  try {
    const v = env ? env.OTEL_DENO : Deno.env.get("OTEL_DENO");
    return v === "true" || v === "1";
  } catch {
    return false; // no env permission: off
  }
}

/** {@link OtelTelemetry} when `OTEL_DENO` is on, else {@link NO_TELEMETRY}. */
export function telemetryFromEnv(env?: Record<string, string | undefined>): Telemetry {
  return telemetryEnabled(env) ? new OtelTelemetry() : NO_TELEMETRY;
}

/** 128-bit FNV-1a of `s` as 32 hex digits: a run's trace id, the same in every process. */
export function runTraceId(runId: string): string {
  let out = "";
  for (const seed of [0xcbf29ce4n, 0x84222325n, 0x1b873593n, 0x5bd1e995n]) {
    let h = Number(seed) >>> 0;
    for (let i = 0; i < runId.length; i++) {
      h ^= runId.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    out += h.toString(16).padStart(8, "0");
  }
  return out === "0".repeat(32) ? "1".padStart(32, "0") : out;
}

/** The context every span of a run descends from: a remote parent in the run's trace. */
function runContext(runId: string): Context {
  const traceId = runTraceId(runId);
  const parent = { traceId, spanId: traceId.slice(0, 16), traceFlags: TraceFlags.SAMPLED, isRemote: true };
  return trace.setSpanContext(ROOT_CONTEXT, parent);
}

/** Marks `span` as ended by `err`. */
function failSpan(span: Span, err: unknown): void {
  span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
}

/**
 * Describes on `span` how its work ended: `describe` reads the rows it left,
 * and an error it ended with is recorded as a thrown one would be. A tool
 * call it left flagged (its outcome unknown: a person must look) marks the
 * span as an error too, with the flag's reason, though nothing was thrown.
 * Returns `ended` as it came.
 */
function endedOn<T>(span: Span, ended: Ended<T>, describe: (rows: StepRows) => void): Ended<T> {
  describe(ended.rows);
  if (!ended.ok) {
    failSpan(span, ended.error);
    return ended;
  }
  const flagged = [ended.rows.effect, ...(ended.rows.effects ?? [])].find((e) => e?.status === "flagged");
  if (flagged) {
    span.setStatus({
      code: SpanStatusCode.ERROR,
      message: `flagged: ${flagged.error ?? "its outcome is unknown"}`,
    });
  }
  return ended;
}

function usageAttrs(usage: unknown): Attributes {
  if (!usage || typeof usage !== "object") return {};
  const u = usage as UsageLike;
  const out: Attributes = {};
  if (typeof u.prompt_tokens === "number") out["gen_ai.usage.input_tokens"] = u.prompt_tokens;
  if (typeof u.completion_tokens === "number") out["gen_ai.usage.output_tokens"] = u.completion_tokens;
  // The cache and reasoning detail, under the GenAI conventions' names, when the model reported it.
  const cached = u.prompt_tokens_details?.cached_tokens;
  if (typeof cached === "number") out["gen_ai.usage.cache_read.input_tokens"] = cached;
  const written = u.prompt_tokens_details?.cache_write_tokens;
  if (typeof written === "number") out["gen_ai.usage.cache_creation.input_tokens"] = written;
  const reasoning = u.completion_tokens_details?.reasoning_tokens;
  if (typeof reasoning === "number") out["gen_ai.usage.reasoning.output_tokens"] = reasoning;
  return out;
}

function time(d: Date | string | null | undefined): number | undefined {
  return d ? new Date(d).getTime() : undefined;
}

/** Telemetry on: spans through the global tracer, counters through the global meter. */
export class OtelTelemetry implements Telemetry {
  /** Always true. */
  readonly enabled = true;
  readonly #tracer: Tracer;
  readonly #steps: Counter;
  readonly #modelCalls: Counter;
  readonly #toolCalls: Counter;
  readonly #retries: Counter;
  readonly #recoveries: Counter;
  readonly #fencings: Counter;

  /** Takes the tracer and meter from the global providers (Deno's, when `OTEL_DENO=true`). */
  constructor() {
    this.#tracer = trace.getTracer(SCOPE);
    const meter = metrics.getMeter(SCOPE);
    this.#steps = meter.createCounter("agent.steps", { description: "Steps driven (decided or replayed)" });
    this.#modelCalls = meter.createCounter("agent.model.calls", { description: "Paid model requests" });
    this.#toolCalls = meter.createCounter("agent.tool.calls", { description: "Tool calls by outcome" });
    this.#retries = meter.createCounter("agent.retries", {
      description: "Model requests and tool sends repeated after a transient failure or refused answer",
    });
    this.#recoveries = meter.createCounter("agent.recoveries", {
      description: "Runs taken over from a worker that left them unclosed (crash, stall)",
    });
    this.#fencings = meter.createCounter("agent.fencings", {
      description: "Worker attempts that lost their run to a newer epoch",
    });
  }

  /** Runs `fn` in a new active span; records a thrown error on it. */
  #span<T>(
    name: string,
    attrs: Attributes,
    fn: (span: Span) => Promise<T>,
    parent?: Context,
    kind: SpanKind = SpanKind.INTERNAL,
  ): Promise<T> {
    return this.#tracer.startActiveSpan(
      name,
      { attributes: attrs, kind },
      parent ?? context.active(),
      async (span) => {
        try {
          return await fn(span);
        } catch (err) {
          failSpan(span, err);
          throw err;
        } finally {
          span.end();
        }
      },
    );
  }

  /** {@inheritDoc Telemetry.attempt} */
  attempt<T extends { status: string; toolCalls: number; llmCalls: number }>(
    a: TracedAttempt,
    fn: () => Promise<T>,
  ): Promise<T> {
    const attrs: Attributes = {
      "agent.run.id": a.runId,
      "agent.name": a.agent,
      "agent.run.epoch": a.epoch,
      "agent.worker.owner": a.owner,
    };
    if (a.previousOwner) attrs["agent.previous_owner"] = a.previousOwner;
    if (a.leaseAgeMs !== undefined) {
      attrs["agent.previous_lease_age_ms"] = a.leaseAgeMs;
      this.#recoveries.add(1, { "agent.name": a.agent });
    }
    return this.#span("agent.attempt", attrs, async (span) => {
      const out = await fn();
      span.setAttributes({
        "agent.attempt.outcome": out.status,
        "agent.run.tool_calls": out.toolCalls,
        "agent.run.llm_calls": out.llmCalls,
      });
      if (out.status === "fenced" || out.status === "stalled") {
        this.#fencings.add(1, { "agent.name": a.agent, "agent.reason": out.status });
      }
      if (out.status === "failed") span.setStatus({ code: SpanStatusCode.ERROR, message: "run failed" });
      return out;
    }, runContext(a.runId));
  }

  /** {@inheritDoc Telemetry.lostAttempt} */
  lostAttempt(a: TracedAttempt, journal: readonly JournalRow[], effects: readonly SideEffectRow[]): void {
    if (a.leaseAgeMs === undefined || a.epoch <= 1) return;
    const lost = a.epoch - 1;
    const times: number[] = [];
    for (const r of [...journal, ...effects]) {
      if (r.epoch !== lost) continue;
      for (const t of [time(r.intent_at), time(r.confirmed_at)]) if (t !== undefined) times.push(t);
    }
    // The last heartbeat is the last moment that worker was known alive.
    const lastSeen = Date.now() - a.leaseAgeMs;
    times.push(lastSeen);
    const span = this.#tracer.startSpan("agent.attempt", {
      startTime: Math.min(...times),
      attributes: {
        "agent.run.id": a.runId,
        "agent.name": a.agent,
        "agent.run.epoch": lost,
        "agent.worker.owner": a.previousOwner ?? "",
        "agent.attempt.outcome": "lost",
        "agent.attempt.reconstructed": true,
        "agent.attempt.recorded_by_epoch": a.epoch,
      },
    }, runContext(a.runId));
    span.setStatus({ code: SpanStatusCode.ERROR, message: "the worker left the run without closing it" });
    span.end(Math.max(...times));
  }

  /** {@inheritDoc Telemetry.recover} */
  recover<T>(at: TracedRecovery, fn: () => Promise<T>): Promise<T> {
    if (at.rows === 0) return fn();
    return this.#span("agent.recover", {
      "agent.run.id": at.fence.runId,
      "agent.run.epoch": at.fence.epoch,
      "agent.recover.stranded_calls": at.strandedCalls,
    }, () => fn());
  }

  /** {@inheritDoc Telemetry.step} */
  step<T>(at: TracedStep, fn: () => Promise<Ended<T>>): Promise<Ended<T>> {
    return this.#span("agent.step", {
      "agent.run.id": at.fence.runId,
      "agent.run.epoch": at.fence.epoch,
      "agent.step.seq": at.seq,
    }, async (span) => {
      try {
        return endedOn(span, await fn(), ({ effect: e, journal }) => {
          if (e) {
            span.setAttributes({
              "agent.idempotency_key": e.idempotency_key,
              "agent.tool.name": e.tool,
              "agent.tool.status": e.status,
              "agent.tool.attempts": e.attempts,
            });
            if (e.remote) span.setAttribute("agent.tool.remote", e.remote);
          }
          const d = journal?.decision;
          if (d && "done" in d) span.setAttribute("agent.step.done", true);
        });
      } finally {
        this.#steps.add(1);
      }
    });
  }

  /** {@inheritDoc Telemetry.decide} */
  decide<T>(at: TracedDecision, fn: () => Promise<Ended<T>>): Promise<Ended<T>> {
    const replayed = at.before?.status === "confirmed";
    const attemptsBefore = at.before?.llm_attempts ?? 0;
    return this.#span("agent.decide", {
      "agent.run.id": at.fence.runId,
      "agent.step.seq": at.seq,
      "agent.decision.replayed": replayed,
    }, async (span) =>
      endedOn(span, await fn(), ({ journal: row }) => {
        if (!row) return;
        const paid = row.llm_attempts - attemptsBefore;
        if (paid > 1) this.#retries.add(paid - 1, { "agent.retry.kind": "model" });
        span.setAttributes({
          "agent.decision.llm_attempts": row.llm_attempts,
          "agent.decision.rejections": row.rejections.length,
          ...usageAttrs(row.usage),
        });
        const d = row.decision;
        if (d && "tool" in d) span.setAttribute("gen_ai.tool.name", d.tool);
        if (d && "calls" in d) span.setAttribute("agent.decision.calls", d.calls.length);
        if (d && "done" in d) span.setAttribute("agent.decision.done", true);
      }));
  }

  /** {@inheritDoc Telemetry.modelCall} */
  modelCall<T extends { usage?: unknown }>(model: string | undefined, fn: () => Promise<T>): Promise<T> {
    const attrs: Attributes = { "gen_ai.operation.name": "chat" };
    if (model) attrs["gen_ai.request.model"] = model;
    return this.#span(
      `chat${model ? ` ${model}` : ""}`,
      attrs,
      async (span) => {
        let outcome = "error";
        try {
          const answer = await fn();
          outcome = "answered";
          span.setAttributes(usageAttrs(answer.usage));
          return answer;
        } catch (err) {
          const e = err as { badAnswer?: boolean; usage?: unknown; code?: string };
          if (e?.badAnswer) outcome = "bad_answer";
          span.setAttributes(usageAttrs(e?.usage));
          if (e?.code) span.setAttribute("error.type", e.code);
          throw err;
        } finally {
          this.#modelCalls.add(1, { "agent.model.outcome": outcome });
        }
      },
      undefined,
      SpanKind.CLIENT,
    );
  }

  /** {@inheritDoc Telemetry.act} */
  act<T>(at: TracedStep, fn: () => Promise<Ended<T>>): Promise<Ended<T>> {
    return this.#span("agent.act", {
      "agent.run.id": at.fence.runId,
      "agent.step.seq": at.seq,
    }, async (span) =>
      endedOn(span, await fn(), ({ effect: e }) => {
        if (!e) return;
        span.setAttributes({
          "agent.idempotency_key": e.idempotency_key,
          "gen_ai.tool.name": e.tool,
          "agent.tool.status": e.status,
          "agent.tool.attempts": e.attempts,
        });
        if (e.remote) span.setAttribute("agent.tool.remote", e.remote);
      }));
  }

  /** {@inheritDoc Telemetry.toolCall} */
  toolCall<T>(call: TracedCall, fn: () => Promise<Ended<T>>): Promise<Ended<T>> {
    const attemptsBefore = call.before?.attempts ?? 0;
    return this.#span(`execute_tool ${call.tool}`, {
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": call.tool,
      "agent.run.id": call.fence.runId,
      "agent.step.seq": call.seq,
      "agent.idempotency_key": call.key,
    }, async (span) =>
      endedOn(span, await fn(), ({ effect: e }) => {
        const attempts = e?.attempts ?? attemptsBefore;
        if (attempts - attemptsBefore > 1) {
          this.#retries.add(attempts - attemptsBefore - 1, { "agent.retry.kind": "tool" });
        }
        const outcome = e?.status === "confirmed" ? (e.remote ?? "created") : (e?.status ?? "unknown");
        this.#toolCalls.add(1, { "gen_ai.tool.name": call.tool, "agent.tool.outcome": outcome });
        span.setAttributes({ "agent.tool.attempts": attempts, "agent.tool.outcome": outcome });
        if (e?.remote) span.setAttribute("agent.tool.remote", e.remote);
      }));
  }

  /** {@inheritDoc Telemetry.lostClaim} */
  lostClaim(agent: string): void {
    this.#fencings.add(1, { "agent.name": agent, "agent.reason": "lost_claim" });
  }

  /** {@inheritDoc Telemetry.traceHeaders} */
  traceHeaders(): Record<string, string> {
    return traceHeaders();
  }
}
