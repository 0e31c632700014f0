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
  /** The version of its agent that drives it, and its moves between versions (docs/versions.md). */
  version: RunVersion;
}

/** A run's version, as {@link RunInfo.version} gives it. */
export interface RunVersion {
  /** The version that drives it; null until a worker first takes it (it is started on that worker's). */
  current: string | null;
  /** True when the version that started it lets it move to a newer one at its next decision. */
  mayMove: boolean;
  /** The version it is to move to at its next decision; null: none asked. */
  moveTo: string | null;
  /** The version it last moved from, and when; null if it never moved. */
  movedFrom: string | null;
  /** When it last moved. */
  movedAt: Date | null;
  /** A version that could not carry its decided step (it went back); null: none. */
  moveRefused: string | null;
}

/** What {@link OperatorClient.move} did: the runs it asked to move, and whether a live worker hosts the version. */
export interface MoveResult {
  /** The agent. */
  agent: string;
  /** The version they move to at their next decision. */
  to: string;
  /** Each run asked to move, with the version it is at (null: not started yet). */
  runs: { runId: string; from: string | null }[];
  /** True when a live worker hosts `agent@to` now; else the runs wait for one, pending. */
  hosted: boolean;
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

/** What {@link Client.signal} did. */
export interface SignalResult {
  /** The run it was sent to. */
  runId: string;
  /** The signal's name. */
  name: string;
  /** The sender's id for it (given, or made up by the send). */
  signalId: string;
  /** Its place among the run's signals, from 1 (the earlier one's, for a duplicate). */
  seq: number;
  /** When it was sent (the earlier send's time, for a duplicate). */
  sentAt: Date;
  /** True when a send with this id had stored it already: this one wrote nothing. */
  duplicate: boolean;
  /** True when the run slept on calls waiting for this name and was woken by this send. */
  woken: boolean;
}

/** A signal sent to a run, as {@link ReadClient.signals} lists it. */
export interface SignalInfo {
  /** Its place among the run's signals, from 1. */
  seq: number;
  /** Its name. */
  name: string;
  /** The sender's id for it. */
  signalId: string;
  /** What the sender said with it; null when it said nothing. */
  payload: Json | null;
  /** When it was sent. */
  sentAt: Date;
  /** The key of the tool call that took it (`<run>:<seq>`); null while none has. */
  takenBy: string | null;
  /** When it was taken. */
  takenAt: Date | null;
}

/** The largest payload {@link Client.signal} takes, in bytes of its JSON text. */
export const SIGNAL_PAYLOAD_BYTES_MAX = 1_000_000;

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
