/**
 * Read-only statements for the web page: for its runs list, how many runs
 * there are per status, which agents have runs, and the tokens each run has
 * spent; for a run's page, the run with totals, a range of its steps with long
 * values clipped, and a clipped value whole. Beside the store because this
 * folder is the one place that speaks SQL.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { SqlClient } from "./driver.ts";
import type { ApprovalRow, EffectStatus, Rejection, RunStatus, SideEffectRow } from "./rows.ts";
import { queryRows, type Statement, statement } from "./sql.ts";

/** Token totals of one run, summed over its journal rows' `usage`. */
export interface RunTokens {
  /** Prompt tokens (`prompt_tokens`). */
  input: number;
  /** Answer tokens (`completion_tokens`). */
  output: number;
}

const COUNT_BY_STATUS = statement(
  "count-by-status",
  `select status, count(*)::int as n from runs
      where ($1::text is null or agent = $1) and ($2::text is null or strpos(run_id, $2) > 0)
      group by status`,
);
const AGENTS_WITH_RUNS = statement("agents-with-runs", `select distinct agent from runs order by agent`);
const TOKENS_BY_RUN = statement(
  "tokens-by-run",
  `select run_id,
            coalesce(sum(case when jsonb_typeof(usage->'prompt_tokens') = 'number'
                              then (usage->>'prompt_tokens')::numeric end), 0)::bigint::int as input,
            coalesce(sum(case when jsonb_typeof(usage->'completion_tokens') = 'number'
                              then (usage->>'completion_tokens')::numeric end), 0)::bigint::int as output
       from journal where run_id = any($1::text[]) and usage is not null
      group by run_id`,
);

/** Runs per status among those matching `agent` and `search` (the status filter itself is left out). */
export async function countByStatus(
  client: SqlClient,
  filter: { agent?: string; search?: string } = {},
): Promise<Partial<Record<RunStatus, number>>> {
  const rows = await queryRows<{ status: RunStatus; n: number }>(client, COUNT_BY_STATUS, [
    filter.agent ?? null,
    filter.search ?? null,
  ]);
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** The agents that have runs, by name. */
export async function agentsWithRuns(client: SqlClient): Promise<string[]> {
  const rows = await queryRows<{ agent: string }>(client, AGENTS_WITH_RUNS, []);
  return rows.map((r) => r.agent);
}

/** Tokens spent per run, for the given runs (a run with no recorded usage is absent). */
export async function tokensByRun(client: SqlClient, runIds: string[]): Promise<Map<string, RunTokens>> {
  if (runIds.length === 0) return new Map();
  const rows = await queryRows<{ run_id: string; input: number; output: number }>(client, TOKENS_BY_RUN, [
    runIds,
  ]);
  return new Map(rows.map((r) => [r.run_id, { input: Number(r.input), output: Number(r.output) }]));
}

/**
 * A value as a page shows it: whole when its JSON text (or its text) is at
 * most the limit asked for, otherwise its first characters and its length,
 * so a 50 MB answer costs a page a few kilobytes until someone asks for it.
 */
export type Clipped<T> = { value: T } | { head: string; chars: number };

/** One run's row for its page, long values clipped, with totals over its whole history. */
export interface RunView {
  /** The run. */
  run_id: string;
  /** The agent that drives it. */
  agent: string;
  /** Where it stands. */
  status: RunStatus;
  /** The fencing epoch of its latest claim. */
  epoch: number;
  /** The worker that holds (or last held) it. */
  owner: string | null;
  /** Its lease's last renewal. */
  heartbeat_at: Date | null;
  /** When a run waiting on its calls' remotes is taken again; null otherwise (and waiting for a person). */
  wake_at: Date | null;
  /** When it was created. */
  created_at: Date;
  /** When its status last changed. */
  updated_at: Date;
  /** Its input (its JSON text, when clipped). */
  input: Clipped<Json | null>;
  /** The final answer, once done. */
  output: Clipped<string | null>;
  /** Why it failed, was blocked or cancelled. */
  error: Clipped<string | null>;
  /** Tool calls of confirmed decisions, as the runs list counts them (a decision of three calls counts 3). */
  tool_calls: number;
  /** Model requests paid for, over every step. */
  llm_calls: number;
  /** Prompt tokens reported, over every step. */
  input_tokens: number;
  /** Answer tokens reported, over every step. */
  output_tokens: number;
  /** Tool calls waiting for a person to resolve them. */
  flagged: number;
  /** The first step with a row, or null before the first. */
  min_seq: number | null;
  /** The last step with a row, or null before the first. */
  max_seq: number | null;
  /** The run whose call started this one (agentTool), if any. */
  parent_run_id: string | null;
  /** That call's key. */
  parent_key: string | null;
  /** A conversation's idle limit; null for a run that is not one. */
  conversation_idle_ms?: number | null;
  /** Messages of a conversation so far, its goal included. */
  message_count?: number;
  /** When a conversation began to wait for its next message; null while it works. */
  idle_since?: Date | null;
  /** When a conversation was closed; null while it is open. */
  conversation_ended_at?: Date | null;
}

/** A decision row for a page. */
export interface JournalView {
  /** The step. */
  seq: number;
  /** `intent` while the model is (or was) asked, `confirmed` once decided. */
  status: "intent" | "confirmed";
  /** The epoch of the claim that last wrote it. */
  epoch: number;
  /** Model requests paid for this step. */
  llm_attempts: number;
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the decision was written. */
  confirmed_at: Date | null;
  /** `usage.prompt_tokens`, when a number. */
  prompt_tokens: number | null;
  /** `usage.completion_tokens`, when a number. */
  completion_tokens: number | null;
  /** The tool decided, if the decision is a tool call. */
  tool: string | null;
  /** True when the decision is the final answer. */
  done: boolean;
  /** The tool's arguments as decided (null for an answer). */
  args: Clipped<Json | null>;
  /** The final answer (null for a tool call). */
  message: Clipped<string | null>;
  /** Answers refused for this step. */
  rejections: Clipped<Rejection[]>;
  /** Model requests that failed as in an outage, recorded (asked again after a backoff, until the retry horizon). */
  failures: number;
  /** When the first of them failed. */
  failing_since: Date | null;
  /** The last of them's error. */
  error: Clipped<string | null>;
}

/** A tool call row for a page. */
export interface EffectView {
  /** `<run_id>:<seq>`. */
  idempotency_key: string;
  /** The step. */
  seq: number;
  /** The tool called. */
  tool: string;
  /** Where the call stands. */
  status: EffectStatus;
  /** Requests sent (or about to be) under the key. */
  attempts: number;
  /** The epoch of the claim that last wrote it. */
  epoch: number;
  /** `created`, `already_done`, or `resolved` by a person. */
  remote: SideEffectRow["remote"];
  /** When the (last) intent was written. */
  intent_at: Date;
  /** When the outcome was written. */
  confirmed_at: Date | null;
  /** Who resolved a flagged call (or settled a waiting one). */
  resolved_by: string | null;
  /** When. */
  resolved_at: Date | null;
  /** When a `waiting` call is re-sent to ask how its job stands. */
  check_at: Date | null;
  /** When a call its remote accepted fails if the job is not done. */
  wait_deadline_at: Date | null;
  /** Re-sends that asked how the job stands. */
  polls: number;
  /** Requests that failed as in an outage, recorded (sent again at `check_at`, until the retry horizon). */
  failures: number;
  /** When the first of them failed. */
  failing_since: Date | null;
  /** The arguments sent. */
  args: Clipped<Json>;
  /** What the remote answered. */
  result: Clipped<Json | null>;
  /** Why it failed, was flagged or denied. */
  error: Clipped<string | null>;
}

/** An approval request for a page. */
export interface ApprovalView {
  /** The call's idempotency key. */
  idempotency_key: string;
  /** The step. */
  seq: number;
  /** The tool. */
  tool: string;
  /** `pending`, `approved` or `denied`. */
  status: ApprovalRow["status"];
  /** The epoch of the worker that asked. */
  epoch: number;
  /** When it was asked. */
  requested_at: Date;
  /** Who answered. */
  decided_by: string | null;
  /** When. */
  decided_at: Date | null;
  /** The exact arguments asked about. */
  args: Clipped<Json>;
  /** Why it was denied. */
  reason: Clipped<string | null>;
}

/** The rows of steps `from` to `to` of a run, and every approval request still pending. */
export interface StepsView {
  /** Decisions, by step. */
  journal: JournalView[];
  /** Tool calls, by step. */
  effects: EffectView[];
  /** Approval requests of the steps read, and every pending one, by step. */
  approvals: ApprovalView[];
}

// A clipped column, in two parts. `clipFrom` computes a value's text and its
// length once (`offset 0` keeps the planner from copying the expression into
// each use, which would serialise a 50 MB value three times); `clipped`
// selects the whole value when it is short ($2 characters at most), else its
// first $2 characters, and the length. The value expression is evaluated only
// for a short value.
const clipFrom = (name: string, text: string) =>
  `cross join lateral (select s.t as ${name}_t, length(s.t) as ${name}_n
                         from (select ${text} as t offset 0) s offset 0) ${name}_c`;
const clipped = (name: string, value = `${name}_t`) =>
  `case when ${name}_n <= $2 then ${value} end as ${name},
   case when ${name}_n > $2 then left(${name}_t, $2) end as ${name}_head, ${name}_n as ${name}_chars`;

/** Folds a clipped column's three parts into one {@link Clipped}; a null value is `{ value: null }`. */
function unclip<T>(row: Record<string, unknown>, name: string): Clipped<T> {
  const head = row[`${name}_head`];
  if (typeof head === "string") return { head, chars: Number(row[`${name}_chars`]) };
  return { value: (row[name] ?? null) as T };
}

/** A numeric usage field of a journal row, when it is a number. */
const usageField = (field: string) =>
  `case when jsonb_typeof(j.usage->'${field}') = 'number' then (j.usage->>'${field}')::numeric end`;

const RUN_VIEW = statement(
  "run-view",
  `select r.run_id, r.agent, r.status, r.epoch, r.owner, r.heartbeat_at, r.wake_at, r.created_at, r.updated_at,
            r.parent_run_id, r.parent_key,
            r.conversation_idle_ms, r.message_count, r.idle_since, r.conversation_ended_at,
            ${clipped("input", "r.input")}, ${clipped("output")}, ${clipped("error")},
            js.tool_calls, js.llm_calls, js.input_tokens, js.output_tokens, es.flagged,
            least(js.min_seq, es.min_seq) as min_seq, greatest(js.max_seq, es.max_seq) as max_seq
       from runs r
       ${clipFrom("input", "r.input::text")}
       ${clipFrom("output", "r.output")}
       ${clipFrom("error", "r.error")}
       cross join lateral (
         select coalesce(sum(case when j.status <> 'confirmed' then 0 when j.decision ? 'tool' then 1
                                  when j.decision ? 'calls' then jsonb_array_length(j.decision->'calls')
                                  else 0 end), 0)::int as tool_calls,
                coalesce(sum(j.llm_attempts), 0)::int as llm_calls,
                coalesce(sum(${usageField("prompt_tokens")}), 0)::bigint::int as input_tokens,
                coalesce(sum(${usageField("completion_tokens")}), 0)::bigint::int as output_tokens,
                min(j.seq) as min_seq, max(j.seq) as max_seq
           from journal j where j.run_id = r.run_id) js
       cross join lateral (
         select (count(*) filter (where e.status = 'flagged'))::int as flagged,
                min(e.seq) as min_seq, max(e.seq) as max_seq
           from side_effects e where e.run_id = r.run_id) es
      where r.run_id = $1`,
);

const STEPS_JOURNAL = statement(
  "steps-journal",
  `select j.seq, j.status, j.epoch, j.llm_attempts, j.intent_at, j.confirmed_at,
            ${usageField("prompt_tokens")} as prompt_tokens, ${
    usageField("completion_tokens")
  } as completion_tokens,
            coalesce(j.decision->>'tool',
                     (select string_agg(c->>'tool', ', ' order by o) from jsonb_array_elements(j.decision->'calls')
                        with ordinality as x(c, o))) as tool,
            coalesce(j.decision ? 'done', false) as done,
            ${clipped("args", "coalesce(j.decision->'args', j.decision->'calls')")}, ${clipped("message")},
            ${clipped("rejections", "j.rejections")}, j.failures, j.failing_since, ${clipped("error")}
       from journal j
       ${clipFrom("args", "coalesce(j.decision->'args', j.decision->'calls')::text")}
       ${clipFrom("message", "j.decision->>'message'")}
       ${clipFrom("rejections", "j.rejections::text")}
       ${clipFrom("error", "j.error")}
      where j.run_id = $1 and j.seq between $3 and $4
      order by j.seq`,
);

const STEPS_EFFECTS = statement(
  "steps-effects",
  `select e.idempotency_key, e.seq, e.tool, e.status, e.attempts, e.epoch, e.remote, e.intent_at,
            e.confirmed_at, e.resolved_by, e.resolved_at, e.check_at, e.wait_deadline_at, e.polls,
            e.failures, e.failing_since, ${clipped("args", "e.args")}, ${clipped("result", "e.result")}, ${
    clipped("error")
  }
       from side_effects e
       ${clipFrom("args", "e.args::text")}
       ${clipFrom("result", "e.result::text")}
       ${clipFrom("error", "e.error")}
      where e.run_id = $1 and e.seq between $3 and $4
      order by e.seq`,
);

const STEPS_APPROVALS = statement(
  "steps-approvals",
  `select a.idempotency_key, a.seq, a.tool, a.status, a.epoch, a.requested_at, a.decided_by, a.decided_at,
            ${clipped("args", "a.args")}, ${clipped("reason")}
       from approvals a
       ${clipFrom("args", "a.args::text")}
       ${clipFrom("reason", "a.reason")}
      where a.run_id = $1 and (a.seq between $3 and $4 or a.status = 'pending')
      order by a.seq`,
);

/**
 * One run for its page: the row with `input`, `output` and `error` clipped
 * at `maxChars`, and totals over every step. Undefined for an unknown run.
 */
export async function runView(
  client: SqlClient,
  runId: string,
  opts: { maxChars: number },
): Promise<RunView | undefined> {
  const rows = await queryRows<Record<string, unknown>>(client, RUN_VIEW, [runId, opts.maxChars]);
  const r = rows[0];
  if (!r) return undefined;
  const seq = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    run_id: r.run_id as string,
    agent: r.agent as string,
    status: r.status as RunStatus,
    epoch: Number(r.epoch),
    owner: r.owner as string | null,
    heartbeat_at: r.heartbeat_at as Date | null,
    wake_at: r.wake_at as Date | null,
    created_at: r.created_at as Date,
    updated_at: r.updated_at as Date,
    conversation_idle_ms: r.conversation_idle_ms as number | null,
    message_count: Number(r.message_count),
    idle_since: r.idle_since as Date | null,
    conversation_ended_at: r.conversation_ended_at as Date | null,
    input: unclip(r, "input"),
    output: unclip(r, "output"),
    error: unclip(r, "error"),
    tool_calls: Number(r.tool_calls),
    llm_calls: Number(r.llm_calls),
    input_tokens: Number(r.input_tokens),
    output_tokens: Number(r.output_tokens),
    flagged: Number(r.flagged),
    min_seq: seq(r.min_seq),
    max_seq: seq(r.max_seq),
    parent_run_id: (r.parent_run_id as string | null) ?? null,
    parent_key: (r.parent_key as string | null) ?? null,
  };
}

/**
 * Steps `from` to `to` (inclusive) of a run for its page: decisions, tool
 * calls and approval requests, long values clipped at `maxChars`, plus every
 * approval request of the run still pending (wherever it is).
 */
export async function stepsView(
  client: SqlClient,
  runId: string,
  opts: { from: number; to: number; maxChars: number },
): Promise<StepsView> {
  const params = [runId, opts.maxChars, opts.from, opts.to];
  const journal = await queryRows<Record<string, unknown>>(client, STEPS_JOURNAL, params);
  const effects = await queryRows<Record<string, unknown>>(client, STEPS_EFFECTS, params);
  const approvals = await queryRows<Record<string, unknown>>(client, STEPS_APPROVALS, params);
  const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
  return {
    journal: journal.map((j) => ({
      seq: Number(j.seq),
      status: j.status as JournalView["status"],
      epoch: Number(j.epoch),
      llm_attempts: Number(j.llm_attempts),
      intent_at: j.intent_at as Date,
      confirmed_at: j.confirmed_at as Date | null,
      prompt_tokens: num(j.prompt_tokens),
      completion_tokens: num(j.completion_tokens),
      tool: j.tool as string | null,
      done: j.done === true,
      args: unclip(j, "args"),
      message: unclip(j, "message"),
      rejections: unclip(j, "rejections"),
      failures: Number(j.failures),
      failing_since: j.failing_since as Date | null,
      error: unclip(j, "error"),
    })),
    effects: effects.map((e) => ({
      idempotency_key: e.idempotency_key as string,
      seq: Number(e.seq),
      tool: e.tool as string,
      status: e.status as EffectStatus,
      attempts: Number(e.attempts),
      epoch: Number(e.epoch),
      remote: e.remote as SideEffectRow["remote"],
      intent_at: e.intent_at as Date,
      confirmed_at: e.confirmed_at as Date | null,
      resolved_by: e.resolved_by as string | null,
      resolved_at: e.resolved_at as Date | null,
      check_at: e.check_at as Date | null,
      wait_deadline_at: e.wait_deadline_at as Date | null,
      polls: Number(e.polls),
      failures: Number(e.failures),
      failing_since: e.failing_since as Date | null,
      args: unclip(e, "args"),
      result: unclip(e, "result"),
      error: unclip(e, "error"),
    })),
    approvals: approvals.map((a) => ({
      idempotency_key: a.idempotency_key as string,
      seq: Number(a.seq),
      tool: a.tool as string,
      status: a.status as ApprovalRow["status"],
      epoch: Number(a.epoch),
      requested_at: a.requested_at as Date,
      decided_by: a.decided_by as string | null,
      decided_at: a.decided_at as Date | null,
      args: unclip(a, "args"),
      reason: unclip(a, "reason"),
    })),
  };
}

/** A field whose whole value a page can ask for (what {@link runView} and {@link stepsView} clip). */
export type WholeValueField =
  | "input"
  | "output"
  | "error"
  | "decision.args"
  | "decision.message"
  | "decision.rejections"
  | "call.args"
  | "call.result"
  | "call.error"
  | "approval.args"
  | "approval.reason";

// The statement for each field: $1 the run, $2 the step (unused by the run's own fields).
const WHOLE_VALUE_SQL = {
  "input": statement(
    "whole-value-input",
    `select input as v from runs where run_id = $1 and $2::int is not null`,
  ),
  "output": statement(
    "whole-value-output",
    `select to_jsonb(output) as v from runs where run_id = $1 and $2::int is not null`,
  ),
  "error": statement(
    "whole-value-error",
    `select to_jsonb(error) as v from runs where run_id = $1 and $2::int is not null`,
  ),
  "decision.args": statement(
    "whole-value-decision-args",
    `select decision->'args' as v from journal where run_id = $1 and seq = $2`,
  ),
  "decision.message": statement(
    "whole-value-decision-message",
    `select decision->'message' as v from journal where run_id = $1 and seq = $2`,
  ),
  "decision.rejections": statement(
    "whole-value-decision-rejections",
    `select rejections as v from journal where run_id = $1 and seq = $2`,
  ),
  "call.args": statement(
    "whole-value-call-args",
    `select args as v from side_effects where run_id = $1 and seq = $2`,
  ),
  "call.result": statement(
    "whole-value-call-result",
    `select result as v from side_effects where run_id = $1 and seq = $2`,
  ),
  "call.error": statement(
    "whole-value-call-error",
    `select to_jsonb(error) as v from side_effects where run_id = $1 and seq = $2`,
  ),
  "approval.args": statement(
    "whole-value-approval-args",
    `select args as v from approvals where run_id = $1 and seq = $2`,
  ),
  "approval.reason": statement(
    "whole-value-approval-reason",
    `select to_jsonb(reason) as v from approvals where run_id = $1 and seq = $2`,
  ),
} as const satisfies Record<WholeValueField, Statement>;

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const OVERVIEW_STATEMENTS = [
  COUNT_BY_STATUS,
  AGENTS_WITH_RUNS,
  TOKENS_BY_RUN,
  RUN_VIEW,
  STEPS_JOURNAL,
  STEPS_EFFECTS,
  STEPS_APPROVALS,
  ...Object.values(WHOLE_VALUE_SQL),
] as const;

/** Every {@link WholeValueField}. */
export const WHOLE_VALUE_FIELDS: readonly WholeValueField[] = Object.keys(
  WHOLE_VALUE_SQL,
) as WholeValueField[];

/**
 * The whole value of one field that {@link runView} or {@link stepsView}
 * clipped (a text field as a JSON string). Undefined when the run or the
 * step has no such row.
 */
export async function wholeValue(
  client: SqlClient,
  ref: { runId: string; field: WholeValueField; seq?: number },
): Promise<{ value: Json } | undefined> {
  const rows = await queryRows<{ v: Json }>(client, WHOLE_VALUE_SQL[ref.field], [ref.runId, ref.seq ?? 0]);
  return rows[0] ? { value: rows[0].v ?? null } : undefined;
}
