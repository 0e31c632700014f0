/**
 * A run's page data, shaped from `client.reads.timeline`: the run, its
 * totals, and a range of its steps, one row per step, each event tagged with
 * the worker epoch that wrote it, so a crash (a new epoch) and what the next
 * worker did after it sit side by side in their lanes. Long values arrive
 * clipped (`{ head, chars }`); the page asks for one whole when a person
 * wants it. Pure.
 *
 * @module
 */

import type { RunTimeline } from "../runtime/client/shapes.ts";
import type { ApprovalView, Clipped, EffectView, JournalView } from "../runtime/store/overview.ts";
import type { Rejection, RunStatus } from "../runtime/store/store.ts";
import type { Json } from "../runtime/agent/tools.ts";

/** What happened in one step, in the lane of the epoch that wrote it. */
export interface LaneEvent {
  /** The worker epoch that wrote it. */
  epoch: number;
  /** `decision` (the model half), `approval` (a person's half) or `tool` (the action half). */
  kind: "decision" | "approval" | "tool";
  /** The row's status (`intent`, `confirmed`, `pending`, `approved`, `denied`, `flagged`, `failed`). */
  status: string;
  /** One line: the decision, the approval, or the tool and its outcome. */
  summary: string;
}

/** One step of the timeline. */
export interface TimelineStep {
  /** The step. */
  seq: number;
  /** The decision row. */
  decision: {
    status: string;
    tool?: string;
    args?: Clipped<Json | null>;
    done?: boolean;
    message?: Clipped<string | null>;
    llmAttempts: number;
    epoch: number;
    intentAt: string | null;
    confirmedAt: string | null;
    inputTokens?: number;
    outputTokens?: number;
    rejections: Clipped<Rejection[]>;
  } | null;
  /** The approval request, when the call needed a person's yes or no. */
  approval: {
    key: string;
    tool: string;
    args: Clipped<Json>;
    status: string;
    epoch: number;
    requestedAt: string | null;
    decidedBy: string | null;
    decidedAt: string | null;
    reason: Clipped<string | null>;
  } | null;
  /** The tool call row. */
  call: {
    key: string;
    tool: string;
    args: Clipped<Json>;
    status: string;
    attempts: number;
    epoch: number;
    remote: string | null;
    result: Clipped<Json | null>;
    error: Clipped<string | null>;
    intentAt: string | null;
    confirmedAt: string | null;
    resolvedBy: string | null;
    resolvedAt: string | null;
    /** When a `waiting` call is re-sent to ask how its job stands. */
    checkAt: string | null;
    /** When a call its remote accepted fails if the job is not done. */
    waitDeadlineAt: string | null;
    /** Re-sends that asked how the job stands. */
    polls: number;
    /** Requests that failed as in an outage (sent again at `checkAt`, until the retry horizon). */
    failures: number;
    /** When the first of them failed. */
    failingSince: string | null;
  } | null;
  /** Its events, each with the epoch that wrote it. */
  events: LaneEvent[];
  /** What a crash or a wait for a person left unfinished. */
  gaps: string[];
}

/** A call waiting for a person's yes or no, bound to its exact arguments. */
export interface PendingApproval {
  key: string;
  seq: number;
  tool: string;
  args: Clipped<Json>;
}

/** The page's data for one request. */
export interface Timeline {
  /** The run, with its dates as ISO strings and long values clipped. */
  run: {
    runId: string;
    agent: string;
    status: RunStatus;
    epoch: number;
    owner: string | null;
    input: Clipped<Json | null>;
    output: Clipped<string | null>;
    error: Clipped<string | null>;
    createdAt: string;
    updatedAt: string;
    heartbeatAt: string | null;
    /** The run whose call started this one (agentTool), and that call's key; null for a run without a parent. */
    parentRunId: string | null;
    parentKey: string | null;
    /** When a run waiting on its calls' remotes is taken again; null otherwise (and waiting for a person). */
    wakeAt: string | null;
  };
  /** The lanes: epochs 1..run.epoch, the last {@link MAX_LANES} when there are more (older ones fold into the first). */
  epochs: number[];
  /** Totals over every step, not only those sent (`toolCalls`: a step of three calls counts three). */
  totals: { toolCalls: number; llmCalls: number; inputTokens: number; outputTokens: number; flagged: number };
  /** The run's first and last step, and the steps sent (`to < from` when none). */
  range: { minSeq: number | null; maxSeq: number | null; from: number; to: number };
  /** The steps sent, in order. */
  steps: TimelineStep[];
}

/** The most lanes drawn; older epochs beyond this are folded into the first lane shown. */
export const MAX_LANES = 8;

const iso = (d: Date | string | null | undefined): string | null => d ? new Date(d).toISOString() : null;

function decisionOf(j: JournalView): NonNullable<TimelineStep["decision"]> {
  return {
    status: j.status,
    ...(j.tool !== null ? { tool: j.tool, args: j.args } : {}),
    ...(j.done ? { done: true, message: j.message } : {}),
    llmAttempts: j.llm_attempts,
    epoch: j.epoch,
    intentAt: iso(j.intent_at),
    confirmedAt: iso(j.confirmed_at),
    ...(j.prompt_tokens !== null ? { inputTokens: j.prompt_tokens } : {}),
    ...(j.completion_tokens !== null ? { outputTokens: j.completion_tokens } : {}),
    rejections: j.rejections,
  };
}

function approvalOf(a: ApprovalView): NonNullable<TimelineStep["approval"]> {
  return {
    key: a.idempotency_key,
    tool: a.tool,
    args: a.args,
    status: a.status,
    epoch: a.epoch,
    requestedAt: iso(a.requested_at),
    decidedBy: a.decided_by,
    decidedAt: iso(a.decided_at),
    reason: a.reason,
  };
}

function callOf(e: EffectView): NonNullable<TimelineStep["call"]> {
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
    resolvedAt: iso(e.resolved_at),
    checkAt: iso(e.check_at),
    waitDeadlineAt: iso(e.wait_deadline_at),
    polls: e.polls,
    failures: e.failures,
    failingSince: iso(e.failing_since),
  };
}

/** ` (last: ERROR)` for a failure's error, clipped as the page clips it; empty without one. */
function lastError(error: Clipped<string | null>): string {
  const text = "value" in error ? error.value : `${error.head}...`;
  return text ? ` (last: ${text})` : "";
}

function gapsOf(
  j: JournalView | undefined,
  a: ApprovalView | undefined,
  e: EffectView | undefined,
): string[] {
  const out: string[] = [];
  if (j?.status === "intent" && j.failures > 0) {
    out.push(
      `the model's server failed as in an outage ${j.failures}x since ${iso(j.failing_since)}` +
        `${lastError(j.error)}: asked again after a backoff, until the retry horizon`,
    );
  } else if (j?.status === "intent") out.push("the model was asked and no answer was recorded");
  if (a?.status === "pending") out.push("waiting for a person to approve or deny the call");
  else if (j?.status === "confirmed" && j.tool !== null && !e) {
    out.push("decided; the call is made when a worker resumes");
  }
  if (e?.status === "intent" && e.failures > 0) {
    out.push(
      `its remote failed as in an outage ${e.failures}x since ${iso(e.failing_since)}` +
        `${lastError(e.error)}: re-sent under its key after a backoff, ` +
        "until the retry horizon",
    );
  } else if (e?.status === "intent") {
    out.push(
      "outcome unknown: when a worker resumes, re-sent under its key within the tool's maxAttempts, " +
        "or looked up by its reconcile, or else flagged for a person (a tool that takes no key) or given up",
    );
  }
  if (e?.status === "waiting") {
    out.push(
      `waiting on its remote: asked again at ${iso(e.check_at)} how the job stands, until ${
        iso(e.wait_deadline_at)
      }; a webhook or a person may settle it (deno task settle ${e.idempotency_key})`,
    );
  }
  if (e?.status === "flagged") out.push("flagged: a person must resolve it");
  return out;
}

function eventsOf(step: TimelineStep): LaneEvent[] {
  const out: LaneEvent[] = [];
  const { decision: d, approval: a, call: c } = step;
  if (d) {
    out.push({
      epoch: d.epoch,
      kind: "decision",
      status: d.status,
      summary: d.done
        ? "done"
        : d.tool
        ? `decided ${d.tool}`
        : `asked the model (${d.llmAttempts}x), no answer recorded`,
    });
  }
  if (a) {
    out.push({
      epoch: a.epoch,
      kind: "approval",
      status: a.status,
      summary: a.status === "pending"
        ? `${a.tool} waits for a person`
        : `${a.status} by ${a.decidedBy ?? "?"}`,
    });
  }
  if (c) {
    out.push({
      epoch: c.epoch,
      kind: "tool",
      status: c.status,
      summary: `${c.tool} ${c.status}${c.remote ? ` (${c.remote})` : ""}${
        c.attempts > 1 ? `, attempt ${c.attempts}` : ""
      }${c.polls > 0 ? `, asked ${c.polls}x` : ""}`,
    });
  }
  return out;
}

/** Shapes a run's {@link RunTimeline} for the page. */
export function buildTimeline(t: RunTimeline): Timeline {
  const { run } = t;
  const first = Math.max(1, run.epoch - MAX_LANES + 1);
  const epochs = run.epoch > 0 ? Array.from({ length: run.epoch - first + 1 }, (_, i) => first + i) : [];
  const bySeq = <R extends { seq: number }>(rows: R[]) => new Map(rows.map((r) => [r.seq, r]));
  const journal = bySeq(t.steps.journal);
  const effects = bySeq(t.steps.effects);
  const approvals = bySeq(t.steps.approvals.filter((a) => a.seq >= t.from && a.seq <= t.to));
  const seqs = [...new Set([...journal.keys(), ...effects.keys(), ...approvals.keys()])].sort((a, b) =>
    a - b
  );
  const steps = seqs.map((seq): TimelineStep => {
    const [j, a, e] = [journal.get(seq), approvals.get(seq), effects.get(seq)];
    const step: TimelineStep = {
      seq,
      decision: j ? decisionOf(j) : null,
      approval: a ? approvalOf(a) : null,
      call: e ? callOf(e) : null,
      events: [],
      gaps: gapsOf(j, a, e),
    };
    step.events = eventsOf(step);
    return step;
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
      parentRunId: run.parent_run_id,
      parentKey: run.parent_key,
      wakeAt: iso(run.wake_at),
    },
    epochs,
    totals: {
      toolCalls: run.tool_calls,
      llmCalls: run.llm_calls,
      inputTokens: run.input_tokens,
      outputTokens: run.output_tokens,
      flagged: run.flagged,
    },
    range: { minSeq: run.min_seq, maxSeq: run.max_seq, from: t.from, to: t.to },
    steps,
  };
}
