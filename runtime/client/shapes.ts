/**
 * What the client takes and returns: a run as the client shows it, its
 * record, a timeline's range, a settlement and a resolution, the options of
 * `connect` and `run`, and the limits on each.
 *
 * @module
 */

import type { AgentContext } from "../agent/agent.ts";
import type { Budget } from "../agent/budget.ts";
export type { Limit } from "../agent/limit_asks.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { Clock } from "../base/clock.ts";
import type { WorkerOptions } from "../host/host.ts";
import type { RunView, StepsView } from "../store/overview.ts";
import {
  type ApprovalRow,
  type JournalRow,
  type PrunedRows,
  type RunRow,
  type RunStatus,
  type SideEffectRow,
} from "../store/store.ts";
import type { Json } from "../agent/tools.ts";

/** Where the runs live. */
export interface ConnectOptions {
  /** PostgreSQL (`postgres://...`); the tables must exist (schema.sql). */
  databaseUrl?: string;
  /** The embedded database's directory (PGlite); used when `databaseUrl` is unset. */
  dataDir?: string;
  /** An in-memory embedded database (tests, examples); used when neither is set. */
  memory?: boolean;
  /** Time for timestamps and waits. Default: the system clock. */
  clock?: Clock;
  /** Connections in the PostgreSQL pool. Default 4. */
  poolSize?: number;
}

/** A run as the client reports it. */
export interface RunInfo {
  /** The run's id. */
  runId: string;
  /** The agent that drives it. */
  agent: string;
  /** Where it stands. */
  status: RunStatus;
  /** Its input. */
  input: Json | null;
  /** The model's final answer, once done. */
  output: string | null;
  /** Why it failed, was blocked or cancelled. */
  error: string | null;
  /** The fencing epoch of its latest claim. */
  epoch: number;
  /** The worker that holds (or last held) it. */
  owner: string | null;
  /** When it was created. */
  createdAt: Date;
  /** When its status last changed. */
  updatedAt: Date;
  /** Its ceilings, if any. */
  budget: Budget | null;
  /** When a run waiting on its calls' remotes is taken again; null for any other (and one waiting for a person). */
  wakeAt: Date | null;
  /** The run whose tool call started this one (`agentTool`); null for a run started otherwise. */
  parentRunId: string | null;
  /** The key of that call. */
  parentKey: string | null;
  /** The labels it was started with (a child run carries its parent's); null for none. */
  labels: Record<string, string> | null;
  /**
   * For a conversation: messages so far (the goal is message 0), and whether
   * it waits for the next one now (its latest message answered, the answer in
   * `output`); undefined for a run that is not one.
   */
  conversation?: { messages: number; idle: boolean; idleMs: number; ended: boolean };
}

/** A message of a conversation with its answer, as {@link ConversationClient.answers} lists them. */
export interface ConversationTurn {
  /** Its place: 0 for the goal, then in the order sent. */
  seq: number;
  /** The sender's id for it; null for the goal. */
  messageId: string | null;
  /** What was said. */
  text: string;
  /** When it was sent. */
  sentAt: Date;
  /** The answer; null while it is not answered. */
  answer: string | null;
  /** The journal step whose final answer it is. */
  answerSeq: number | null;
  /** When it was answered. */
  answeredAt: Date | null;
}

/** What {@link ConversationClient.send} did. */
export interface SendResult {
  /** The run. */
  runId: string;
  /** The message's place in the conversation (1 for the first message after the goal). */
  seq: number;
  /** The message's id. */
  messageId: string;
  /** True when a send with this id had stored the message already: this one wrote nothing. */
  duplicate: boolean;
}

/** The longest message {@link ConversationClient.send} takes, in characters. */
export const MESSAGE_CHARS_MAX = 1_000_000;

/** One run's whole record: the run, its decisions, its tool calls and its approval requests, by step. */
export interface RunRecord {
  /** The run row. */
  run: RunRow;
  /** Its decisions. */
  journal: JournalRow[];
  /** Its tool calls. */
  effects: SideEffectRow[];
  /** Its approval requests: who approved or denied what, when, and why. */
  approvals: ApprovalRow[];
  /** What it has spent: tokens (reported, plus reservations not yet settled), model requests, tool requests. */
  spend: { tokens: number; modelCalls: number; toolCalls: number };
  /**
   * The runs its tool calls started (`agentTool`), in the order they were
   * started: each child's id, agent, status, the key of the call that started
   * it, and why it failed or was cancelled.
   */
  children: Pick<RunInfo, "runId" | "agent" | "status" | "parentKey" | "error">[];
  /**
   * What the run and all its descendants have spent together, for a run with
   * child runs: what its budget holds them to. Undefined for a run with none.
   */
  familySpend?: { tokens: number; modelCalls: number; toolCalls: number };
}

/**
 * Which steps of a run a page reads: the last `last`; those from step `from`
 * on (when more than `limit` were written since, the last `limit`: a page
 * that fell behind starts over from the newest); or the `limit` steps before
 * step `before`.
 */
export type StepRange =
  | { last: number }
  | { from: number; limit: number }
  | { before: number; limit: number };

/** A run's page: the run with its totals, and the steps of a {@link StepRange}. */
export interface RunTimeline {
  /** The run, long values clipped, with totals over every step. */
  run: RunView;
  /** The steps read, first to last (inclusive; `to < from` when none). */
  from: number;
  /** The last step read. */
  to: number;
  /** Their rows, and every approval request of the run still pending. */
  steps: StepsView;
}

/** How a human settles a flagged tool call. */
export type Resolution =
  | { action: "result"; result: Json }
  | { action: "retry" }
  | { action: "fail"; reason?: string };

/**
 * How a call waiting on its remote is settled from outside ({@link OperatorClient.settleCall}):
 * what the remote answered when the job ended, or why the job failed.
 */
export type Settlement = { result: Json } | { error: string };

/** What {@link Client.run} takes besides the agent and its input. */
export interface RunCallOptions extends Omit<WorkerOptions, "store" | "agents"> {
  /** The run's id; default a new one. An existing run of the agent is taken up, not started again. */
  runId?: string;
  /** Ceilings on the run's spend, over the agent's. */
  budget?: Budget;
  /** The run's own model request parameters, over the agent's. */
  modelParams?: ModelParams;
  /** The run's labels (`{ tenant: "acme" }`), which limits may key on and be fair across. */
  labels?: Record<string, string>;
  /** How long to wait for the run to settle. Default 600 000 (ten minutes). */
  timeoutMs?: number;
  /** Stops the wait (the run goes on). */
  signal?: AbortSignal;
  /** What the agent's tools and model are built with when this process hosts it (see {@link Client.startWorker}). */
  context?: Partial<AgentContext>;
}

/** What {@link OperatorClient.prune} removed (or, with `dryRun`, would remove). */
export interface PruneResult extends PrunedRows {
  /** The runs, by id. */
  runs: string[];
  /** Statements it took (0 for a dry run). */
  batches: number;
}

/** The largest page {@link ReadClient.list} returns. */
export const LIST_LIMIT_MAX = 10_000;

/**
 * Statuses in which a run will not move again without a person (`blocked`,
 * `waiting` for an approval) or at all. A run `waiting` with a wake time
 * waits on its calls' remotes and moves on by itself: {@link Client.wait}
 * goes on waiting for it.
 */
export const SETTLED_STATUSES: readonly RunStatus[] = ["done", "failed", "cancelled", "blocked", "waiting"];
