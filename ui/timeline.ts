/**
 * A run's record shaped for the page: one row per step, one lane per worker
 * epoch, so a crash (a new epoch) and what the next worker did after it sit
 * side by side. Pure: the server builds it from {@link Client.inspect}.
 *
 * @module
 */

import type { RunRecord } from "../runtime/client.ts";
import type { JournalRow, RunStatus, SideEffectRow } from "../runtime/store/store.ts";
import type { Json } from "../runtime/tools.ts";

/** What happened in one step, in one epoch's lane. */
export interface LaneEvent {
  /** `decision` (the model half) or `tool` (the action half). */
  kind: "decision" | "tool";
  /** The row's status (`intent`, `confirmed`, `flagged`, `failed`). */
  status: string;
  /** One line: the decision, or the tool and its outcome. */
  summary: string;
}

/** One step of the timeline. */
export interface TimelineStep {
  /** The step. */
  seq: number;
  /** The decision row, as stored. */
  decision: {
    status: string;
    tool?: string;
    args?: Json;
    done?: boolean;
    message?: string;
    llmAttempts: number;
    epoch: number;
    intentAt: string | null;
    confirmedAt: string | null;
    inputTokens?: number;
    outputTokens?: number;
    rejections: { code: string; message: string }[];
  } | null;
  /** The tool call row, as stored. */
  call: {
    key: string;
    tool: string;
    args: Json;
    status: string;
    attempts: number;
    epoch: number;
    remote: string | null;
    result: Json | null;
    error: string | null;
    intentAt: string | null;
    confirmedAt: string | null;
    resolvedBy: string | null;
  } | null;
  /** Events by epoch: which worker incarnation wrote what. */
  lanes: Record<number, LaneEvent[]>;
  /** What a crash or a wait for a human left unfinished. */
  gaps: string[];
}

/** The whole page's data. */
export interface Timeline {
  /** The run, with its dates as ISO strings. */
  run: {
    runId: string;
    agent: string;
    status: RunStatus;
    epoch: number;
    owner: string | null;
    input: Json | null;
    output: string | null;
    error: string | null;
    createdAt: string;
    updatedAt: string;
    heartbeatAt: string | null;
  };
  /** Epochs 1..run.epoch (the last ones when there are many), one lane each. */
  epochs: number[];
  /** Steps in order. */
  steps: TimelineStep[];
  /** Totals. */
  totals: { steps: number; llmCalls: number; inputTokens: number; outputTokens: number; flagged: number };
}

/** The most lanes drawn; older epochs beyond this are folded into the first lane shown. */
export const MAX_LANES = 8;

const iso = (d: Date | string | null | undefined): string | null => d ? new Date(d).toISOString() : null;

function tokens(usage: Json | null): { inputTokens?: number; outputTokens?: number } {
  if (!usage || typeof usage !== "object" || Array.isArray(usage)) return {};
  const u = usage as Record<string, Json>;
  return {
    inputTokens: typeof u.prompt_tokens === "number" ? u.prompt_tokens : undefined,
    outputTokens: typeof u.completion_tokens === "number" ? u.completion_tokens : undefined,
  };
}

function decisionOf(j: JournalRow): NonNullable<TimelineStep["decision"]> {
  const d = j.decision;
  return {
    status: j.status,
    ...(d && "tool" in d ? { tool: d.tool, args: d.args } : {}),
    ...(d && "done" in d ? { done: true, message: d.message } : {}),
    llmAttempts: j.llm_attempts,
    epoch: j.epoch,
    intentAt: iso(j.intent_at),
    confirmedAt: iso(j.confirmed_at),
    ...tokens(j.usage),
    rejections: (j.rejections ?? []).map((r) => ({ code: r.code, message: r.message })),
  };
}

function callOf(e: SideEffectRow): NonNullable<TimelineStep["call"]> {
  return {
    key: e.idempotency_key,
    tool: e.tool,
    args: e.args,
    status: e.status,
    attempts: e.attempts,
    epoch: e.epoch,
    remote: e.remote,
    result: e.result,
    error: e.error,
    intentAt: iso(e.intent_at),
    confirmedAt: iso(e.confirmed_at),
    resolvedBy: e.resolved_by,
  };
}

function gapsOf(j: JournalRow | undefined, e: SideEffectRow | undefined): string[] {
  const out: string[] = [];
  if (j?.status === "intent") out.push("the model was asked and no answer was recorded");
  if (j?.status === "confirmed" && j.decision && "tool" in j.decision && !e) {
    out.push("decided; the call is made when a worker resumes");
  }
  if (e?.status === "intent") out.push("outcome unknown: re-sent under its key when a worker resumes");
  if (e?.status === "flagged") out.push("flagged: a person must resolve it");
  return out;
}

/** Builds the page's timeline from a run's record. */
export function buildTimeline(record: RunRecord): Timeline {
  const { run, journal, effects } = record;
  const first = Math.max(1, run.epoch - MAX_LANES + 1);
  const lane = (epoch: number) => Math.max(first, epoch);
  const epochs = run.epoch > 0 ? Array.from({ length: run.epoch - first + 1 }, (_, i) => first + i) : [];
  const bySeq = new Map(effects.map((e) => [e.seq, e]));
  const seqs = [...new Set([...journal.map((j) => j.seq), ...effects.map((e) => e.seq)])].sort((a, b) =>
    a - b
  );
  let inputTokens = 0;
  let outputTokens = 0;
  const steps = seqs.map((seq): TimelineStep => {
    const j = journal.find((x) => x.seq === seq);
    const e = bySeq.get(seq);
    const lanes: Record<number, LaneEvent[]> = {};
    const add = (epoch: number, ev: LaneEvent) => (lanes[lane(epoch)] ??= []).push(ev);
    const decision = j ? decisionOf(j) : null;
    if (decision) {
      inputTokens += decision.inputTokens ?? 0;
      outputTokens += decision.outputTokens ?? 0;
      add(decision.epoch, {
        kind: "decision",
        status: decision.status,
        summary: decision.done
          ? "done"
          : decision.tool
          ? `decided ${decision.tool}`
          : `asked the model (${decision.llmAttempts}x), no answer recorded`,
      });
    }
    const call = e ? callOf(e) : null;
    if (call) {
      add(call.epoch, {
        kind: "tool",
        status: call.status,
        summary: `${call.tool} ${call.status}${call.remote ? ` (${call.remote})` : ""}${
          call.attempts > 1 ? `, attempt ${call.attempts}` : ""
        }`,
      });
    }
    return { seq, decision, call, lanes, gaps: gapsOf(j, e) };
  });
  return {
    run: {
      runId: run.run_id,
      agent: run.agent,
      status: run.status,
      epoch: run.epoch,
      owner: run.owner,
      input: run.input,
      output: run.output,
      error: run.error,
      createdAt: iso(run.created_at)!,
      updatedAt: iso(run.updated_at)!,
      heartbeatAt: iso(run.heartbeat_at),
    },
    epochs,
    steps,
    totals: {
      steps: steps.filter((s) => s.decision?.tool).length,
      llmCalls: journal.reduce((n, j) => n + j.llm_attempts, 0),
      inputTokens,
      outputTokens,
      flagged: effects.filter((e) => e.status === "flagged").length,
    },
  };
}
