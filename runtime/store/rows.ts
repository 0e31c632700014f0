/**
 * The store's rows and statuses, as its statements read and write them: a
 * run, a step's decision (its journal row), a tool call, an approval request,
 * and the values the store's methods take and return. No SQL here.
 *
 * @module
 */

import type { Budget } from "../base/values.ts";
import type { Json } from "../base/values.ts";
import type { AssistantPart, ModelParams } from "../model/transcript.ts";
import type { ApprovalStatus, EffectStatus, JournalStatus, RemoteOutcome, RunStatus } from "./statuses.ts";

// The statuses are declared once, in statuses.ts; every import of them from the rows keeps working.
export * from "./statuses.ts";

/**
 * The tables whose rows belong to a run (each has a foreign key to `runs`),
 * with the name under which `Operators.pruneRuns` counts what it deleted
 * from each. A table added to schema.sql with a key to runs belongs here, or
 * prune could delete no run that has such a row (tests/prune_pg_test.ts compares
 * this list with the foreign keys in the catalog).
 */
export const RUN_ROW_TABLES = {
  journal: "journal",
  side_effects: "effects",
  approvals: "approvals",
  messages: "messages",
  memos: "memos",
  signals: "signals",
  chat_chunks: "chunks",
} as const;

/** Rows deleted (or that would be) with pruned runs, per table of {@link RUN_ROW_TABLES}. */
export type PrunedRows = { -readonly [T in keyof typeof RUN_ROW_TABLES as typeof RUN_ROW_TABLES[T]]: number };

/** A row of `runs`. */
export interface RunRow {
  /** The run. */
  run_id: string;
  /** The agent whose tools and model drive it. */
  agent: string;
  /** What the model is told to do: the input text, or the input as JSON text. */
  goal: string;
  /** The input as given. */
  input: Json | null;
  /** The model's final answer, once the run is done. */
  output: string | null;
  /** Where the row stands. */
  status: RunStatus;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** The worker that claimed it last. */
  owner: string | null;
  /** The lease: when the owner last proved it is alive. */
  heartbeat_at: Date | null;
  /** Why it failed, was flagged or was blocked. */
  error: string | null;
  /** When it was created. */
  created_at: Date;
  /** When its status last changed. */
  updated_at: Date;
  /** Claims in a row (this one included) that found no progress since the claim before. */
  stuck_claims: number;
  /** One past the seq of the last confirmed decision, at the last claim (`claims.ts`). */
  progress_mark: number;
  /** The progress of the rows that could still change then: the decision asked for, the last decision's calls. */
  progress_step: number;
  /** The run's ceilings, if any. */
  budget: Budget | null;
  /** The run's own model request parameters (over its agent's), if any. */
  model_params: ModelParams | null;
  /**
   * When a run `waiting` on its calls' remotes may be taken again (a take or
   * a claim clears it); null for any other run, and for one waiting only for
   * a person.
   */
  wake_at: Date | null;
  /** The run whose tool call started this one (agent_tool.ts); null for a run started by a person. */
  parent_run_id: string | null;
  /** The idempotency key of that call, `<parent_run_id>:<seq>`; null for a run without a parent. */
  parent_key: string | null;
  /**
   * The first run of the family this run belongs to (its own id for a root
   * that has started a child); null for a run that is in no family.
   */
  root_run_id: string | null;
  /** A conversation's idle limit (defineAgent's `conversation.idleMs`); null for a run that is not one. */
  conversation_idle_ms?: number | null;
  /** Messages of a conversation so far, its goal (message 0) included; 0 for a run that is not one. */
  message_count?: number;
  /** When a conversation answered its latest message and began to wait for the next; null otherwise. */
  idle_since?: Date | null;
  /** When a conversation was closed while it worked (it ends after its current answer); null otherwise. */
  conversation_ended_at?: Date | null;
  /** The schedule that started the run (`<schedule>@<occurrence>`); null for a run started otherwise. */
  schedule?: string | null;
  /** The occurrence of that schedule the run was started for; null for a run started otherwise. */
  scheduled_at?: Date | null;
  /** The version of its agent that drives it (agent/version.ts); null until a worker first takes it. */
  agent_version?: string | null;
  /** True when the version that started it lets it move to a newer version at its next decision. */
  may_move?: boolean;
  /** The version it is to move to at its next decision (an operator's move, or a newer version's); null: none. */
  move_to?: string | null;
  /** The version it last moved from; null if it never moved. */
  moved_from?: string | null;
  /** When it last moved. */
  moved_at?: Date | null;
  /** The epoch of the claim that last moved it: calls sent under an earlier one were sent by `moved_from`. */
  moved_epoch?: number | null;
  /** A version that could not carry its decided step (it went back); null: none. */
  move_refused?: string | null;
  /** Signals sent to the run so far (each send bumps it, and numbers its signal by it). */
  signals_sent?: number;
  /** The names of the signals its calls waited for when it last slept on them; null when it never did. */
  signal_waits?: string[] | null;
  /** The epoch it slept on those calls at: a send wakes it only while it still sleeps at that epoch. */
  signal_waits_epoch?: number | null;
  /** The labels it was started with (`{ tenant: "acme" }`), which limits may key on; null for none. */
  labels?: Record<string, string> | null;
  /** The run this one is a fork of (docs/fork.md); null for a run that is not a fork. */
  forked_from?: string | null;
  /** The first step a fork decided itself: the original's before it were copied; null for no fork. */
  forked_at_seq?: number | null;
  /** True when the run sends no call of a tool that acts on the world (a fork not live, an eval's case). */
  dry_run?: boolean;
  /** The evaluation the run is a case of; null for none. */
  eval_id?: string | null;
}

/**
 * A decision: one tool call (the shape every one-call step keeps), two or
 * more tool calls at once (`calls`, in the model's order: the calls of the
 * decision at seq s take seqs s, s+1, ..., each its own row and key), or done.
 * Any of them may carry `parts`: the answer as the model gave it (reasoning
 * with its signature, provider metadata, tools the provider ran itself), kept
 * by a planner that sends them back (the AI SDK adapter); absent otherwise,
 * so a decision of any other planner is stored as it always was.
 */
export type Decision =
  | { tool: string; args: Json; parts?: AssistantPart[] }
  | { calls: DecidedCall[]; parts?: AssistantPart[] }
  | { done: true; message: string; parts?: AssistantPart[] };

/** A call that needs a person's yes, as a worker asks for it: its key, seq, tool, exact arguments and their hash. */
export interface ApprovalAsk {
  /** The call's idempotency key. */
  key: string;
  /** The call's seq. */
  seq: number;
  /** The tool. */
  tool: string;
  /** The arguments as decided. */
  args: Json;
  /** sha-256 of their canonical JSON. */
  hash: string;
}

/** One call of a decision with several (`{ calls }`). */
export interface DecidedCall {
  /** The tool's name. */
  tool: string;
  /** Its arguments as decided. */
  args: Json;
}

/** An answer the runtime refused, kept so a re-ask (and a restart) can tell the model why. */
export interface Rejection {
  /** Why, as a stable code such as `UNKNOWN_TOOL`. */
  code: string;
  /** Why, in words the model can act on. */
  message: string;
}

/** A row of `journal`. */
export interface JournalRow {
  /** The run. */
  run_id: string;
  /** The step number, from 0. */
  seq: number;
  /** Where the row stands. */
  status: JournalStatus;
  /** The committed decision, once confirmed. */
  decision: Decision | null;
  /** Model requests paid for this step. */
  llm_attempts: number;
  /** Token usage the model reported for the deciding answer. */
  usage: Json | null;
  /** Answers refused for this step. */
  rejections: Rejection[];
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the outcome was written. */
  confirmed_at: Date | null;
  /** Tokens reserved by requests of this step whose answers are not settled. */
  reserved_tokens: number;
  /** Tokens this step's settled answers count against the budget (budget.ts `answerTokens`). */
  spent_tokens: number;
  /** The parameters its last model request was sent with (the cap as sent), or null for none. */
  params: ModelParams | null;
  /**
   * Requests of this step that failed for a reason an outage explains (a
   * refused or reset connection, a timeout, 5xx, 429), each recorded by the
   * worker that saw it: asked again until the retry horizon has passed since
   * `failing_since`.
   */
  failures: number;
  /** When the first of {@link JournalRow.failures} was recorded; null before any. */
  failing_since: Date | null;
  /** The last recorded failure's message; null before any. */
  error: string | null;
}

/** A row of `side_effects`. */
export interface SideEffectRow {
  /** `<run_id>:<seq>`. */
  idempotency_key: string;
  /** The run. */
  run_id: string;
  /** The step number, from 0. */
  seq: number;
  /** The tool called. */
  tool: string;
  /** The arguments as decided. */
  args: Json;
  /** Where the row stands. */
  status: EffectStatus;
  /** What the remote answered. */
  result: Json | null;
  /**
   * `created`, `already_done`, `reconciled` (the tool's `reconcile` found
   * that it had happened), or `resolved` by a human.
   */
  remote: RemoteOutcome | null;
  /** Why it failed, was flagged or was blocked. */
  error: string | null;
  /** Requests sent (or about to be) under the key. */
  attempts: number;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the outcome was written. */
  confirmed_at: Date | null;
  /** Who resolved a flagged call. */
  resolved_by: string | null;
  /** When a flagged call was resolved. */
  resolved_at: Date | null;
  /**
   * `attempts` when a person last reopened the run with this call at
   * `intent`: while `attempts` still equals it, one request more than the
   * tool's `maxAttempts` is allowed. Null: never reopened so.
   */
  attempts_at_reopen: number | null;
  /**
   * When the call may be sent again: a `waiting` call, to ask how the job
   * stands; a call at `intent` whose last request failed (see
   * {@link SideEffectRow.failures}), to try again. Null otherwise.
   */
  check_at: Date | null;
  /** When a call its remote accepted and has not finished fails: fixed by its first accepted answer. */
  wait_deadline_at: Date | null;
  /** Re-sends of an accepted call to ask how its job stands, counted at each one's intent (0 before any). */
  polls: number;
  /**
   * Requests under the key that failed for a reason an outage explains (a
   * refused or reset connection, a timeout, 5xx, 429), each recorded by the
   * worker that saw it (its message in `error`, the next request not before
   * `check_at`): sent again until the retry horizon has passed since
   * `failing_since`. `attempts - failures` is the requests whose outcome no
   * worker lived to record, which the tool's `maxAttempts` bounds.
   */
  failures: number;
  /** When the first of {@link SideEffectRow.failures} was recorded; null before any. */
  failing_since: Date | null;
  /**
   * The name of the signal the call waits for (signals.ts): set when a look
   * for one found none; null for a call that waits for no signal.
   */
  wait_signal: string | null;
  /** The run's `signals_sent` that look saw: a send after it wakes the call. */
  signals_seen: number | null;
}

/** A row of `approvals`: a person's yes or no to one tool call, bound to its key and exact arguments. */
export interface ApprovalRow {
  /** The call's idempotency key. */
  idempotency_key: string;
  /** The run. */
  run_id: string;
  /** The step. */
  seq: number;
  /** The tool. */
  tool: string;
  /** The arguments asked about. */
  args: Json;
  /** sha-256 of their canonical JSON. */
  args_hash: string;
  /** Where the request stands. */
  status: ApprovalStatus;
  /** Why it was denied. */
  reason: string | null;
  /** When it was asked. */
  requested_at: Date;
  /** Who answered. */
  decided_by: string | null;
  /** When. */
  decided_at: Date | null;
  /** The epoch of the worker that asked. */
  epoch: number;
}

/** An approval request just answered, with its run's status after the answer. */
export interface AnsweredApproval extends ApprovalRow {
  /** The run's status after the answer: `pending` when it released a waiting run. */
  run_status: RunStatus;
}

/** What `Operators.decideApproval` found and did. */
export interface ApprovalAnswer {
  /** The request as it stands after the statement; undefined when there is none for the key. */
  approval: ApprovalRow | undefined;
  /** True when this statement answered it (it was pending and its run open). */
  decided: boolean;
  /** The run's status after the statement (`pending` when the answer released a waiting run). */
  runStatus: RunStatus | undefined;
}

/** A run to create. */
export interface NewRun {
  /** Its id. */
  runId: string;
  /** The agent that drives it. */
  agent: string;
  /** The text the model is given. */
  goal: string;
  /** The input as given; defaults to `goal`. */
  input?: Json;
  /** Ceilings on its spend. */
  budget?: Budget;
  /** The model's request parameters for this run, over its agent's. */
  modelParams?: ModelParams;
  /** For a conversation: its idle limit (the goal is then its message 0). */
  conversationIdleMs?: number;
  /** Its labels (`{ tenant: "acme" }`), checked by the caller. */
  labels?: Readonly<Record<string, string>>;
}

/**
 * How a journal write settles an answer's tokens: the reservation it releases
 * and what the answer counts (budget.ts `answerTokens`).
 */
export interface TokenSettlement {
  /** Tokens of the step's reservation this answer releases. */
  released: number;
  /** Tokens the answer counts against the budget. */
  spent: number;
}

/** A run a worker host has just taken: the row after its claim, and who held it before. */
export interface TakenRun extends RunRow {
  /** The owner before this take. */
  previous_owner: string | null;
  /** The heartbeat before this take. */
  previous_heartbeat_at: Date | null;
  /** Its version before this take (null: never taken); `agent_version` differs when the take moved it. */
  previous_version?: string | null;
}

/** Filters and paging of `Operators.listRuns`. */
export interface RunFilter {
  /** Only runs in this status. */
  status?: RunStatus;
  /** Only runs of this agent. */
  agent?: string;
  /** Only run ids containing this text. */
  search?: string;
  /** Page size. Default 50. */
  limit?: number;
  /** Rows to skip (newest first). Default 0. */
  offset?: number;
}

/** Who may write: a run and the epoch its claim produced. */
export interface Fence {
  /** The run. */
  runId: string;
  /** The fencing epoch of the claim that last wrote it. */
  epoch: number;
}

/** A run with its counts, for listings. */
export interface RunSummary extends RunRow {
  /** Tool calls of its confirmed decisions (a decision of three calls counts three, an answer none). */
  tool_calls: number;
  /** Model requests paid for across the run. */
  llm_calls: number;
  /** Tool calls waiting for a human. */
  flagged: number;
  /** Model tokens spent or reserved (what the token budget counts). */
  tokens: number;
  /** Tool requests sent, re-sends included (what the `toolCalls` ceiling counts). */
  tool_requests: number;
}

/** Which flagged calls a bulk resolve takes: those matching every field given. */
export interface FlaggedFilter {
  /** Calls of this tool. */
  tool?: string;
  /** Calls of this run. */
  runId?: string;
}

/** How a person settles a flagged call, as the store writes it. */
export type EffectResolution =
  | { action: "result"; result: Json }
  | { action: "retry" }
  | { action: "fail"; error: string };

/**
 * How a call waiting on its remote is settled from outside (a webhook, a
 * person who saw the job end): what the remote answered, or why it failed.
 */
export type CallSettlement = { result: Json } | { error: string };

/** What `Operators.settleCall` found and did. */
export interface SettledCall {
  /** The call as it stands after the statement; undefined when there is none for the key. */
  effect: SideEffectRow | undefined;
  /** True when this statement settled it (it was `waiting` and its run open). */
  settled: boolean;
  /** Its run's status (undefined when there is no call for the key). */
  runStatus: RunStatus | undefined;
  /** True when the statement woke the run: it waited on a timer, and a worker may take it at once. */
  woken: boolean;
}
