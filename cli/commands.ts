/**
 * The run commands: thin wrappers over the {@link Client}, the one API for
 * starting and steering runs.
 *
 * ```sh
 * deno task submit   [--agent PATH] [--run-id ID] [--goal TEXT | --input JSON]   # a pending run
 * deno task runs     [--status S] [--agent-name A] [--search TEXT] [--limit N] [--page N]
 * deno task inspect  RUN                            # one run's timeline, step by step
 * deno task watch    RUN [--json] [--follow]        # follow a run: its answer as it is written
 * deno task resolve  KEY (--result JSON | --retry | --fail [--reason TEXT])   # settle a flagged tool call
 * deno task resolve  --tool T | --run R (...) --dry-run | --expect N             # settle many at once
 * deno task settle   KEY (--result JSON | --error TEXT)   # settle a call that waits on its remote
 * deno task cancel   RUN                            # stop a run; its worker stops at its next write
 * deno task reopen   RUN                            # a failed or cancelled run back to pending
 * deno task send     RUN --message TEXT [--message-id ID] [--wait] | --end   # a conversation's next message
 * deno task move     --agent-name A --to V [--from V] [--run RUN]   # runs to another version at their next decision
 * deno task signal   RUN NAME [--payload JSON] [--id ID]   # a named event, taken by a call that waits for it
 * ```
 *
 * They work on PostgreSQL (`DATABASE_URL`) and on the embedded database under
 * `DATA_DIR` (default `.data`); the embedded one allows one process at a time,
 * so a command refuses, naming the holder, while a worker has it open.
 *
 * Everything they print goes through the display rule (runtime/base/display.ts):
 * a control, bidi or other invisible character in a model's answer, a tool's
 * result or a user's input is shown as its escape (`\u001b`, `\u202e`), so no
 * value can drive the terminal or read as something else. A field that may
 * hold several lines (an input, an output, an error, a reason) shows its
 * first line after its label and the others indented behind `| `, so no line
 * of a value can pass for a line of the report.
 *
 * Exit codes: 0 done, 1 refused (no such run, not flagged, ...) or failed
 * (a prune batch the database refused, the database lost mid-command: one
 * line, never a stack trace), 2 bad arguments or no database.
 *
 * @module
 */

import { userInfo } from "node:os";
import { parseArgs } from "node:util";
import type { Agent } from "../runtime/agent/agent.ts";
import type { Budget } from "../runtime/agent/budget.ts";
import { Client } from "../runtime/client/client.ts";
import { ClientError } from "../runtime/base/errors.ts";
import { type FlaggedFilter, RESOLVE_BATCH_MAX } from "../runtime/store/store.ts";
import { LIST_LIMIT_MAX, type Resolution, type RunInfo, type Settlement } from "../runtime/client/shapes.ts";
import {
  checkBy,
  checkFlaggedFilter,
  checkId,
  checkKey,
  checkListFilter,
  checkRunId,
  REFUSED_INPUT_CODES,
} from "../runtime/client/checks.ts";
import { checkLabels } from "../runtime/base/limit_spec.ts";
import { callsOf, toolCallsIn } from "../runtime/run/calls.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { AGENT_LOAD_DEFAULT_S, flagProblem, integerIn, SettingsReader } from "../runtime/settings/config.ts";
import { displayText, hiddenIn } from "../runtime/base/display.ts";
import {
  ConfigError,
  describeError,
  hasCode,
  isDatabaseAway,
  ownCode,
  RuntimeError,
  StoreError,
} from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { formatValue } from "../runtime/base/log.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";
import {
  type ApprovalRow,
  isRunStatus,
  type JournalRow,
  RUN_STATUSES,
  type RunRow,
  type RunStatus,
  type SideEffectRow,
} from "../runtime/store/store.ts";
import type { Json } from "../runtime/agent/tools.ts";
import { parseModelParams } from "../runtime/model/params.ts";
import type { ModelParams } from "../runtime/model/transcript.ts";
import { loadAgents, type LoadedAgents } from "./agents.ts";
import { DATABASE_BACKOFF, waitAtStart } from "./start_wait.ts";
import { watchCommand } from "./watch.ts";
import { versionWait } from "../runtime/client/version_wait.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";

export type { Resolution };

/** A command was used wrongly, or refused. `code` says which. */
export class CommandError extends RuntimeError {
  /** Exit code: 2 for bad arguments, 1 for a refusal. */
  readonly exitCode: number;
  /** Creates a command error. */
  constructor(code: string, message: string, exitCode = 1) {
    // The code of the refusal it reports (the client's, or a setting's), passed on as it came.
    super(ownCode(code), message);
    this.name = "CommandError";
    this.exitCode = exitCode;
  }
}

/** What a command needs: a client, where to print, and who is acting. */
export interface CommandContext {
  client: Client;
  /** Receives each line, already escaped by the display rule. */
  print: (line: string) => void;
  /** Recorded as `resolved_by` and in a cancelled run's error. */
  actor: string;
}

/** Where a command's lines go: each through the display rule, so nothing hidden reaches the terminal. */
function printer(ctx: CommandContext): (line: string) => void {
  return (line) => ctx.print(displayText(line));
}

/**
 * A field that may hold several lines: the first after `label`, each other
 * one under it, indented behind `| ` (see the module's comment).
 */
export function fieldLines(label: string, text: string): string[] {
  const [first, ...rest] = text.split("\n");
  const indent = " ".repeat(label.length - label.trimStart().length);
  return [`${label}${first}`, ...rest.map((line) => `${indent}  | ${line}`)];
}

/** Creates a pending run of `agent`. */
export async function submit(
  ctx: CommandContext,
  agent: Agent,
  opts: {
    runId?: string;
    input?: unknown;
    budget?: Budget;
    modelParams?: ModelParams;
    labels?: Record<string, string>;
  },
): Promise<RunInfo> {
  const run = await asCommand(() => ctx.client.start(agent, opts));
  printer(ctx)(
    `submitted  run=${run.runId}  agent=${run.agent}  status=pending  input=${formatValue(run.input)}${
      run.labels ? `  labels=${Object.entries(run.labels).map(([k, v]) => `${k}=${v}`).join(",")}` : ""
    }`,
  );
  return run;
}

/** Prints one page of runs, newest first, with how many match and how many pages there are. */
export async function runs(
  ctx: CommandContext,
  filter: { status?: RunStatus; agent?: string; search?: string; limit?: number; page?: number } = {},
): Promise<void> {
  const limit = filter.limit ?? 50;
  const page = filter.page ?? 1;
  const { runs: rows, total } = await asCommand(() =>
    ctx.client.reads.list({ ...filter, limit, offset: (page - 1) * limit })
  );
  const live = await ctx.client.reads.hostedVersions();
  const waitingRuns = rows.filter((r) => r.status === "waiting" && r.wake_at).map((r) => r.run_id);
  const limited = await ctx.client.reads.waitingFor(waitingRuns);
  const now = ctx.client.clock.now().getTime();
  const table = [[
    "RUN",
    "AGENT",
    "STATUS",
    "EPOCH",
    "OWNER",
    "HEARTBEAT",
    "TOOL_CALLS",
    "LLM_CALLS",
    "FLAGGED",
    "TOKENS",
    "VERSION",
  ]];
  // Why each open run no live worker can take waits: runs waiting for the same thing are said once.
  const waiting = new Map<string, string[]>();
  for (const { run: r, depth } of asTree(rows)) {
    const why = versionWait(r, live, new Date(now - DEFAULTS.leaseMs));
    if (why !== undefined) waiting.set(why, [...(waiting.get(why) ?? []), r.run_id]);
    table.push([
      // A child run (agentTool) is shown under its parent, indented; one whose parent is on another page names it.
      (depth === 0
        ? r.run_id
        : `${"  ".repeat(depth - 1)}└ ${r.run_id}${
          rows.some((p) => p.run_id === r.parent_run_id) ? "" : ` (of ${r.parent_run_id})`
        }`) + forkText(r),
      r.agent,
      statusText(r, limited.get(r.run_id)),
      String(r.epoch),
      r.owner ?? "-",
      // A lease only means something while the run is open.
      r.heartbeat_at && (r.status === "running" || r.status === "pending")
        ? `${((now - new Date(r.heartbeat_at).getTime()) / 1000).toFixed(1)}s ago`
        : "-",
      String(r.tool_calls),
      String(r.llm_calls),
      String(r.flagged),
      // Spend against the budget, when the run has a token ceiling.
      r.budget?.tokens ? `${r.tokens}/${r.budget.tokens}` : String(r.tokens),
      versionText(r),
    ]);
  }
  // Each cell on one line, escaped before the widths are measured, so the columns line up as shown.
  const cells = table.map((row) => row.map((c) => displayText(c)));
  const widths = cells[0].map((_, i) => Math.max(...cells.map((row) => row[i].length)));
  const p = printer(ctx);
  for (const row of cells) p(row.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd());
  if (rows.length === 0) p("(no runs)");
  const pages = Math.max(1, Math.ceil(total / limit));
  p(
    `${rows.length} of ${total} runs, newest first; page ${page} of ${pages}${
      page < pages ? ` (--page ${page + 1} for more)` : ""
    }`,
  );
  for (const [why, ids] of waiting) {
    const runs = `${ids.slice(0, 3).join(", ")}${ids.length > 3 ? ", ..." : ""}`;
    p(`waiting: ${why}; ${ids.length === 1 ? "run" : `${ids.length} runs`}: ${runs}`);
  }
  // A run asleep on a timer says what for (its remote's job, or an outage ridden out) and until when.
  for (const r of rows) {
    if (r.status === "waiting" && r.wake_at && r.error) p(displayText(`${r.run_id}: ${clip(r.error, 240)}`));
  }
}

/**
 * A run's version as the list shows it: the version (`-` before a worker has
 * taken it), `->` the one it is to move to, `*` when it may move by itself.
 */
export function versionText(run: Pick<RunRow, "agent_version" | "move_to" | "may_move">): string {
  return `${run.agent_version ?? "-"}${run.may_move ? "*" : ""}${run.move_to ? `->${run.move_to}` : ""}`;
}

/** `text` cut to `max` characters, with an ellipsis when cut. */
function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * A page of runs as a tree: each run followed by its children on the page
 * (in the order of the calls that started them), each one level deeper. A child whose parent is
 * not on the page is shown one level deep where the page has it.
 */
export function asTree<R extends Pick<RunRow, "run_id" | "parent_run_id">>(
  rows: readonly R[],
): { run: R; depth: number }[] {
  const onPage = new Set(rows.map((r) => r.run_id));
  const children = new Map<string, R[]>();
  for (const r of rows) {
    if (r.parent_run_id && onPage.has(r.parent_run_id)) {
      children.set(r.parent_run_id, [...(children.get(r.parent_run_id) ?? []), r]);
    }
  }
  const out: { run: R; depth: number }[] = [];
  // Bounded by the page: each run is placed once, under its parent or at the top.
  // Children in the order their calls come (`<run>.<seq>`, seq as a number), whatever the page's order.
  const bySeq = (a: R, b: R) => a.run_id.localeCompare(b.run_id, "en", { numeric: true });
  const place = (r: R, depth: number) => {
    out.push({ run: r, depth });
    for (const c of [...(children.get(r.run_id) ?? [])].sort(bySeq)) place(c, depth + 1);
  };
  for (const r of rows) {
    if (r.parent_run_id && onPage.has(r.parent_run_id)) continue;
    place(r, r.parent_run_id ? 1 : 0);
  }
  // Rows whose parents point at each other (written by hand: the runtime cannot) are shown all the same.
  const placed = new Set(out.map((o) => o.run.run_id));
  for (const r of rows) if (!placed.has(r.run_id)) out.push({ run: r, depth: 1 });
  return out;
}

const iso = (d: Date | null | undefined): string => d ? new Date(d).toISOString() : "-";

/**
 * A run's status as a person reads it: a waiting run says what it waits for,
 * its calls' remotes (until its wake time) or a person.
 */
export function statusText(run: Pick<RunRow, "status" | "wake_at">, limits?: readonly string[]): string {
  if (run.status !== "waiting") return run.status;
  if (run.wake_at && limits && limits.length > 0) {
    return `waiting for ${limits.join(", ")} until ${iso(run.wake_at)}`;
  }
  return run.wake_at ? `waiting until ${iso(run.wake_at)}` : "waiting for a person";
}

/** Prints the keys of the limits shared by the fleet: each one's limit, use, waiting runs and hold. */
export async function limits(ctx: CommandContext): Promise<void> {
  const keys = await asCommand(() => ctx.client.reads.limits());
  const now = ctx.client.clock.now().getTime();
  const table = [["KEY", "LIMIT", "IN_FLIGHT", "LAST_MINUTE", "WAITING", "HELD", "HOLDS"]];
  for (const k of keys) {
    const held = k.hold_until && new Date(k.hold_until).getTime() > now
      ? `until ${iso(k.hold_until)}`
      : k.probing
      ? "one request tries"
      : "-";
    table.push([
      k.key,
      k.described ?? "-",
      String(k.in_flight),
      String(k.last_minute),
      String(k.waiting),
      held,
      String(k.holds),
    ]);
  }
  const cells = table.map((row) => row.map((c) => displayText(c)));
  const widths = cells[0].map((_, i) => Math.max(...cells.map((row) => row[i].length)));
  const p = printer(ctx);
  for (const row of cells) p(row.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd());
  if (keys.length === 0) p("(no limit has been taken: none declared, or no request yet)");
}

function tokens(usage: Json | null): string | undefined {
  if (!usage || typeof usage !== "object" || Array.isArray(usage)) return undefined;
  const u = usage as Record<string, Json>;
  return `${u.prompt_tokens ?? "?"}+${u.completion_tokens ?? "?"}`;
}

/** What `inspect` says of a fork (docs/fork.md): of which run, from which step, and whether it sends. */
export function forkLine(run: RunRow): string {
  const of = run.forked_from
    ? `fork of ${run.forked_from} at step ${run.forked_at_seq ?? 0} (steps before it copied, keys ` +
      `${run.run_id}:<seq>)`
    : "no original";
  const sends = run.dry_run
    ? "dry run: calls of tools that act on the world are answered from the original's record or a stub, " +
      "never sent"
    : "live: its calls are sent";
  return `  fork: ${of}  ${sends}${run.eval_id ? `  eval=${run.eval_id}` : ""}`;
}

/** What the runs list adds to a fork's id: ` (fork of orig@1, dry)`; nothing for a run that is none. */
function forkText(run: Pick<RunRow, "forked_from" | "forked_at_seq" | "dry_run">): string {
  if (!run.forked_from) return run.dry_run ? " (dry)" : "";
  return ` (fork of ${run.forked_from}@${run.forked_at_seq ?? 0}${run.dry_run ? ", dry" : ""})`;
}

/** What `inspect` says of a run's version: which, whether it may move, its last move, a move asked, why it waits. */
export function versionLines(run: RunRow, live: readonly string[]): string[] {
  const lines = [
    `  version: ${
      run.agent_version ?? "- (not started: the first worker to take it starts it on its version)"
    }${run.agent_version ? `  ${run.may_move ? "moves to newer versions" : "stays on its version"}` : ""}${
      run.moved_from ? `  moved from ${run.moved_from} at ${iso(run.moved_at)}` : ""
    }`,
  ];
  if (run.move_to) lines.push(`  move: to ${run.move_to} at its next decision`);
  if (run.move_refused) lines.push(`  move refused: ${run.move_refused} could not carry its decided step`);
  const why = versionWait(run, live, new Date(Date.now() - DEFAULTS.leaseMs));
  if (why) lines.push(`  waiting: ${why}`);
  return lines;
}

/**
 * Prints one run's timeline: each step's decision, approval request and tool
 * call, and any gap a crash (or a wait for a person) left.
 */
export async function inspect(ctx: CommandContext, runId: string): Promise<void> {
  const { run, journal, effects, approvals, spend, children, familySpend } = await asCommand(() =>
    ctx.client.reads.inspect(runId)
  );
  const bySeq = new Map(effects.map((e) => [e.seq, e]));
  const approvalBySeq = new Map(approvals.map((a) => [a.seq, a]));
  const say = printer(ctx);
  const p = (...lines: string[]) => lines.forEach((line) => say(line));
  p(`run ${run.run_id}  agent=${run.agent}  status=${statusText(run)}  epoch=${run.epoch}  owner=${
    run.owner ?? "-"
  }`);
  p(...versionLines(run, await ctx.client.reads.hostedVersions()));
  if (run.forked_from || run.dry_run) p(forkLine(run));
  if (run.parent_run_id) p(`  parent: ${run.parent_run_id}  call=${run.parent_key ?? "-"}`);
  for (const c of children) {
    p(`  child: ${c.runId}  agent=${c.agent}  status=${c.status}  call=${c.parentKey ?? "-"}`);
  }
  p(...fieldLines("  input: ", typeof run.input === "string" ? run.input : JSON.stringify(run.input)));
  if (run.output !== null) p(...fieldLines("  output: ", run.output));
  if (run.budget) {
    const of = (n: number, ceiling?: number) => ceiling === undefined ? `${n}` : `${n} of ${ceiling}`;
    p(
      `  budget: tokens ${of(spend.tokens, run.budget.tokens)} (reserved included)  model calls ${
        of(spend.modelCalls, run.budget.modelCalls)
      }  tool calls ${of(spend.toolCalls, run.budget.toolCalls)}`,
    );
  }
  if (familySpend) {
    const of = (n: number, ceiling?: number) => ceiling === undefined ? `${n}` : `${n} of ${ceiling}`;
    p(
      `  with its children: tokens ${of(familySpend.tokens, run.budget?.tokens)}  model calls ${
        of(familySpend.modelCalls, run.budget?.modelCalls)
      }  tool calls ${of(familySpend.toolCalls, run.budget?.toolCalls)}`,
    );
  }
  p(`  created ${iso(run.created_at)}  updated ${iso(run.updated_at)}  heartbeat ${iso(run.heartbeat_at)}`);
  if (run.error) p(...fieldLines("  error: ", run.error));
  if (run.conversation_idle_ms !== null && run.conversation_idle_ms !== undefined) {
    const turns = await asCommand(() => ctx.client.conversations.answers(runId));
    p(`  conversation: ${run.message_count ?? turns.length} messages  idle_ms=${run.conversation_idle_ms}${
      run.conversation_ended_at ? `  closed ${iso(run.conversation_ended_at)}` : ""
    }${run.status === "waiting" && run.idle_since ? "  waiting for the next message" : ""}`);
    for (const t of turns) {
      p(`  message ${t.seq}${t.messageId === null ? "  (the goal)" : `  id=${formatValue(t.messageId)}`}  ${
        t.answerSeq === null ? "not answered yet" : `answered at step ${t.answerSeq}`
      }`);
      p(...fieldLines("    text: ", t.text));
      if (t.answer !== null) p(...fieldLines("    answer: ", t.answer));
    }
  }
  const signals = await asCommand(() => ctx.client.reads.signals(runId));
  for (const sig of signals) {
    p(`  signal ${sig.seq}  ${formatValue(sig.name)}  id=${formatValue(sig.signalId)}  sent ${
      iso(sig.sentAt)
    }  ${sig.takenBy === null ? "not taken yet" : `taken by ${sig.takenBy} at ${iso(sig.takenAt)}`}`);
    if (sig.payload !== null) p(...fieldLines("    payload: ", JSON.stringify(sig.payload)));
  }
  let prompt = 0;
  let completion = 0;
  // Every decided call owns a seq (calls.ts): a call not sent yet is shown at its seq too.
  const decided = new Map(
    journal.flatMap((j) => j.decision ? callsOf(j.decision, j.seq) : []).map((c) => [c.seq, c]),
  );
  const seqs = [
    ...new Set([
      ...journal.map((j) => j.seq),
      ...decided.keys(),
      ...effects.map((e) => e.seq),
      ...approvals.map((a) => a.seq),
    ]),
  ].sort((a, b) => a - b);
  let lastEpoch: number | undefined;
  for (const seq of seqs) {
    const j = journal.find((x) => x.seq === seq);
    const e = bySeq.get(seq);
    const a = approvalBySeq.get(seq);
    const epoch = Math.max(j?.epoch ?? 0, e?.epoch ?? 0);
    const copied = run.forked_from && seq < (run.forked_at_seq ?? 0);
    if (lastEpoch !== undefined && epoch > lastEpoch && seq === run.forked_at_seq && run.forked_from) {
      p(`  -- the fork decides from here (the steps above are ${run.forked_from}'s, copied)`);
    } else if (lastEpoch !== undefined && epoch > lastEpoch) {
      p(`  -- epoch ${lastEpoch} -> ${epoch}: another worker took the run over`);
    }
    lastEpoch = epoch;
    p(`step ${seq}${copied ? `  (copied from ${run.forked_from}:${seq}: not asked, not sent)` : ""}`);
    if (j) {
      for (const line of decisionLines(j)) p(`  ${line}`);
      const u = j.usage as Record<string, number> | null;
      if (u && typeof u === "object") {
        prompt += Number(u.prompt_tokens ?? 0);
        completion += Number(u.completion_tokens ?? 0);
      }
    }
    if (a) { for (const line of approvalLines(a)) p(`  ${line}`); }
    if (e) { for (const line of effectLines(e)) p(`  ${line}`); }
    const call = decided.get(seq);
    if (call && !j) p(`  call ${call.index + 1} of the decision at step ${seq - call.index}: ${call.tool}`);
    for (const gap of [...gaps(j, e, call !== undefined), ...approvalGaps(a)]) p(`  !! ${gap}`);
  }
  // Steps are decisions (journal rows with one); each of a decision's calls owns a seq, as each answer does.
  const steps = journal.filter((j) => j.decision).length;
  const llmCalls = journal.reduce((n, j) => n + j.llm_attempts, 0);
  p(`total  steps=${steps}  tool_calls=${
    toolCallsIn(journal)
  }  llm_calls=${llmCalls}  tokens=${prompt}+${completion}`);
}

function decisionLines(j: JournalRow): string[] {
  const d = j.decision;
  const what = !d
    ? "(no answer recorded)"
    : "tool" in d
    ? `${d.tool} ${JSON.stringify(d.args)}`
    : "calls" in d
    ? `${d.calls.length} calls: ${d.calls.map((c) => `${c.tool} ${JSON.stringify(c.args)}`).join(", ")}`
    : "done";
  const lines = [
    `decision  ${j.status}  ${what}  attempts=${j.llm_attempts}  epoch=${j.epoch}  intent=${
      iso(j.intent_at)
    }  confirmed=${iso(j.confirmed_at)}${tokens(j.usage) ? `  tokens=${tokens(j.usage)}` : ""}${
      j.failures > 0 ? `  failures=${j.failures}  failing_since=${iso(j.failing_since)}` : ""
    }`,
  ];
  if (j.status === "intent" && j.error) lines.push(...fieldLines("  last failure: ", j.error));
  // What the step's (last) request was sent with: the agent's and the run's parameters, and the cap sent.
  if (j.params) lines.push(...fieldLines("  params: ", JSON.stringify(j.params)));
  for (const r of j.rejections ?? []) lines.push(...fieldLines(`  rejected ${r.code}: `, r.message));
  return lines;
}

function approvalLines(a: ApprovalRow): string[] {
  const decided = a.decided_by !== null ? `  by=${a.decided_by}  at=${iso(a.decided_at)}` : "";
  const lines = [
    `approval  ${a.status}  ${a.tool} ${JSON.stringify(a.args)}  asked=${
      iso(a.requested_at)
    }  epoch=${a.epoch}${decided}`,
  ];
  if (a.reason) lines.push(...fieldLines("  reason: ", a.reason));
  return lines;
}

/** What an approval request still waits for, and what its arguments hide. */
function approvalGaps(a: ApprovalRow | undefined): string[] {
  if (!a || a.status !== "pending") return [];
  const out = [
    `waiting for a person: 'deno task approve ${a.idempotency_key}' or 'deno task deny ${a.idempotency_key} --reason TEXT'`,
  ];
  const hidden = hiddenIn(a.args);
  if (hidden.count > 0) {
    out.push(
      `the arguments hold ${hidden.count} control, bidi or invisible character${
        hidden.count === 1 ? "" : "s"
      } (${hidden.escapes.join(" ")}), shown as escapes: read them before approving`,
    );
  }
  return out;
}

/** How a fork's call was answered without its remote: the original's record, or the tool's stub. */
function answeredBy(e: SideEffectRow): string {
  if (e.remote === "original") return "  answered=original (never sent)";
  if (e.remote === "stub") return "  answered=stub (never sent)";
  return "";
}

function effectLines(e: SideEffectRow): string[] {
  const lines = [
    `tool      ${e.status}  ${e.tool}  key=${e.idempotency_key}  attempts=${e.attempts}  epoch=${e.epoch}  intent=${
      iso(e.intent_at)
    }  confirmed=${iso(e.confirmed_at)}  remote=${e.remote ?? "-"}${answeredBy(e)}${waitFields(e)}${
      e.result !== null ? `  result=${JSON.stringify(e.result)}` : ""
    }`,
  ];
  if (e.error) lines.push(...fieldLines("  error: ", e.error));
  if (e.resolved_by) lines.push(`  resolved by ${e.resolved_by} at ${iso(e.resolved_at)}`);
  return lines;
}

/**
 * A call's wait: on its remote (when it is asked again, how often it was, and until when), or after
 * failures an outage explains (how many, since when, and when it is sent again).
 */
function waitFields(e: SideEffectRow): string {
  return `${
    e.status === "waiting" || (e.status === "intent" && e.check_at) ? `  check_at=${iso(e.check_at)}` : ""
  }${e.polls > 0 ? `  polls=${e.polls}` : ""}${
    e.wait_deadline_at ? `  deadline=${iso(e.wait_deadline_at)}` : ""
  }${e.failures > 0 ? `  failures=${e.failures}  failing_since=${iso(e.failing_since)}` : ""}`;
}

/**
 * What a crash (or a wait for a human) left unfinished at one seq: its
 * journal row, its tool call, and whether a confirmed decision owns a call
 * at this seq (`decided`).
 */
export function gaps(j: JournalRow | undefined, e: SideEffectRow | undefined, decided: boolean): string[] {
  const out: string[] = [];
  if (!decided && e) out.push("a tool call without a recorded decision");
  if (j?.status === "intent" && j.failures > 0) {
    out.push(
      `the model's requests failed ${j.failures} time${j.failures === 1 ? "" : "s"} as in an outage since ` +
        `${iso(j.failing_since)}: asked again when the run wakes, until its retry horizon`,
    );
  } else if (j?.status === "intent") {
    out.push("the model was asked and no answer was recorded: the step is decided again on resume");
  }
  if (decided && !e) {
    out.push("decided, no tool call recorded: the call is made on resume");
  }
  if (e?.status === "intent" && e.check_at) {
    out.push(
      `failed ${e.failures} time${e.failures === 1 ? "" : "s"} as in an outage: sent again under its key at ${
        iso(e.check_at)
      }, until its retry horizon from ${iso(e.failing_since)}`,
    );
  } else if (e?.status === "intent") {
    out.push(
      "tool call outcome unknown: on resume it is re-sent under its key within the tool's maxAttempts, " +
        "or looked up by its reconcile, or else flagged for a person (a tool that takes no key) or given up",
    );
  }
  if (e?.status === "waiting") {
    out.push(
      `waiting on its remote: re-sent under its key at ${iso(e.check_at)} to ask how the job stands, until ${
        iso(e.wait_deadline_at)
      }; 'deno task settle ${e.idempotency_key} --result JSON | --error TEXT' settles it from outside`,
    );
  }
  if (e?.status === "flagged") {
    out.push(`flagged: 'deno task resolve ${e.idempotency_key} --result JSON | --retry | --fail'`);
  }
  return out;
}

/** Settles a flagged tool call and, when none is left, sets its run back to `pending`. */
export async function resolve(
  ctx: CommandContext,
  key: string,
  resolution: Resolution,
): Promise<SideEffectRow> {
  const out = await asCommand(() => ctx.client.operators.resolve(key, resolution, { by: ctx.actor }));
  printer(ctx)(
    `resolved  key=${key}  status=${out.effect.status}  remote=${out.effect.remote ?? "-"}  by=${
      formatValue(ctx.actor)
    }  run=${out.effect.run_id}  run_status=${out.unblocked ? "pending" : "blocked"}`,
  );
  return out.effect;
}

/**
 * Settles every flagged call of a blocked run that `filter` names the same
 * way, after a person checked the remote: `dryRun` lists them and their
 * count; with `expect` (that count) they are settled in one statement, or
 * none when another number matches by then.
 */
export async function resolveMany(
  ctx: CommandContext,
  filter: FlaggedFilter,
  resolution: Resolution,
  opts: { dryRun: true } | { expect: number },
): Promise<SideEffectRow[]> {
  const p = ctx.print;
  const what = `${filter.tool === undefined ? "" : `  tool=${filter.tool}`}${
    filter.runId === undefined ? "" : `  run=${filter.runId}`
  }  action=${resolution.action}`;
  if ("dryRun" in opts) {
    const { calls, total } = await asCommand(() =>
      ctx.client.operators.flagged(filter, { limit: RESOLVE_BATCH_MAX })
    );
    p(`dry-run  would resolve ${total} flagged call(s) of blocked runs${what}`);
    for (const e of calls) {
      p(`  ${e.idempotency_key}  tool=${e.tool}  run=${e.run_id}  attempts=${e.attempts}  args=${
        formatValue(e.args)
      }  error=${formatValue(e.error ?? "")}`);
    }
    if (total > calls.length) {
      p(`  ... and ${total - calls.length} more: at most ${RESOLVE_BATCH_MAX} at once, narrow it with --run`);
    } else if (total > 0) {
      p(`check the remote for these, then run the same command with --expect ${total} instead of --dry-run`);
    }
    return calls;
  }
  const out = await asCommand(() =>
    ctx.client.operators.resolveMany(filter, resolution, { expect: opts.expect, by: ctx.actor })
  );
  const released = new Set(out.unblocked);
  for (const e of out.effects) {
    p(`resolved  key=${e.idempotency_key}  status=${e.status}  remote=${e.remote ?? "-"}  by=${
      formatValue(ctx.actor)
    }  run=${e.run_id}  run_status=${released.has(e.run_id) ? "pending" : "blocked"}`);
  }
  p(`resolved ${out.effects.length} flagged call(s)${what}  runs_unblocked=${out.unblocked.length}`);
  return out.effects;
}

/**
 * Settles from outside a tool call that waits on its remote (a webhook or a
 * person reports how the job ended); a run waiting on a timer is woken, so a
 * worker takes it up at once.
 */
export async function settle(
  ctx: CommandContext,
  key: string,
  settlement: Settlement,
): Promise<SideEffectRow> {
  const out = await asCommand(() => ctx.client.operators.settleCall(key, settlement, { by: ctx.actor }));
  printer(ctx)(
    `settled  key=${key}  status=${out.effect.status}  remote=${out.effect.remote ?? "-"}  by=${
      formatValue(ctx.actor)
    }  run=${out.effect.run_id}  run_status=${out.runStatus}${out.woken ? "  woken=now" : ""}`,
  );
  return out.effect;
}

/** Cancels a run and its open descendants (the child runs its calls started); a worker holding one stops at its next write. */
export async function cancel(ctx: CommandContext, runId: string): Promise<RunInfo> {
  const run = await asCommand(() => ctx.client.operators.cancel(runId, { by: ctx.actor }));
  printer(ctx)(
    `cancelled  run=${runId}  epoch=${run.epoch}  owner=${run.owner ?? "-"}${
      run.descendants.length > 0 ? `  with=${run.descendants.join(",")}` : ""
    }`,
  );
  return run;
}

/**
 * Reopens a failed or cancelled run as pending, keeping its history: a worker
 * (or the supervisor) resumes it where it stopped, re-sending any call left at
 * `intent` under its original key, so nothing done before is done again.
 */
export async function reopen(ctx: CommandContext, runId: string): Promise<RunInfo> {
  const run = await asCommand(() => ctx.client.operators.reopen(runId));
  printer(ctx)(
    `reopened  run=${runId}  status=${run.status}  epoch=${run.epoch}  by=${formatValue(ctx.actor)}`,
  );
  return run;
}

/**
 * Sends a conversation its next message (idempotent by `messageId`), and with
 * `wait` waits for its answer; or, with `end`, closes the conversation.
 */
export async function send(
  ctx: CommandContext,
  runId: string,
  opts: { message?: string; messageId?: string; wait?: boolean; end?: boolean; waitMs?: number },
): Promise<void> {
  const p = printer(ctx);
  if (opts.end) {
    const run = await asCommand(() => ctx.client.conversations.endConversation(runId));
    p(`ended  run=${runId}  status=${run.status}${
      run.status === "done" ? "" : "  (after its current answer)"
    }`);
    return;
  }
  const sent = await asCommand(() =>
    ctx.client.conversations.send(runId, opts.message!, { messageId: opts.messageId })
  );
  p(
    `sent  run=${runId}  message=${sent.seq}  message_id=${formatValue(sent.messageId)}${
      sent.duplicate ? "  duplicate=true (sent before: nothing written)" : ""
    }`,
  );
  if (!opts.wait) return;
  const run = await asCommand(() => ctx.client.wait(runId, { timeoutMs: opts.waitMs ?? 120_000 }));
  p(`answered  run=${runId}  status=${run.status}`);
  const lines = [
    ...(run.output !== null ? fieldLines("  answer: ", run.output) : []),
    ...(run.error !== null ? fieldLines("  error: ", run.error) : []),
  ];
  for (const line of lines) p(line);
}

/** Sends a run the signal `name` (idempotent by `signalId`) and says whether it woke a call waiting for it. */
export async function signal(
  ctx: CommandContext,
  runId: string,
  name: string,
  opts: { payload?: Json; signalId?: string },
): Promise<void> {
  const sent = await asCommand(() =>
    ctx.client.signal(runId, name, opts.payload ?? null, { signalId: opts.signalId })
  );
  printer(ctx)(
    `signalled  run=${runId}  signal=${formatValue(sent.name)}  seq=${sent.seq}  signal_id=${
      formatValue(sent.signalId)
    }${
      sent.duplicate
        ? "  duplicate=true (sent before: nothing written)"
        : sent.woken
        ? "  woken=true (a call was waiting for it)"
        : "  kept (a call that waits for it takes it)"
    }`,
  );
}

/**
 * Follows a run (`cli/watch.ts`) until it ends or Ctrl-C. Its text goes to
 * the terminal as it arrives when the lines go to the console; otherwise
 * (a caller's own `print`) in whole lines.
 */
async function watch(
  ctx: CommandContext,
  runId: string,
  opts: { json: boolean; follow: boolean },
): Promise<void> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  let pending = "";
  const encoder = new TextEncoder();
  const write = ctx.print === console.log
    ? (text: string) => void Deno.stdout.writeSync(encoder.encode(text))
    : (text: string) => {
      pending += text;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const l of lines) ctx.print(l);
    };
  try {
    await asCommand(() =>
      watchCommand(ctx.client, runId, { line: printer(ctx), write }, { ...opts, signal: stop.signal })
    );
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    if (pending !== "") ctx.print(pending);
  }
}

/**
 * Opens the store, waiting out a PostgreSQL that is away (`DATABASE_BACKOFF`:
 * 1 s doubling to 10 s) until it answers or Ctrl-C; each try is one line on
 * stderr, worded as `watch` words an outage met later.
 */
async function openWaiting(open: () => Promise<Store>, clock: SystemClock): Promise<Store> {
  const stop = new AbortController();
  const onSignal = () =>
    stop.abort(new StoreError("DB_UNREACHABLE", "Stopped (Ctrl-C) while waiting for the database"));
  Deno.addSignalListener("SIGINT", onSignal);
  try {
    const opened = await waitAtStart({
      attempt: open,
      isAway: (err) => isDatabaseAway(err) && err.code === "DB_UNREACHABLE",
      onAway: ({ error, retryMs }) =>
        console.error(
          `unreachable  the database could not be read (${
            (error as StoreError).message
          }); trying again in ${retryMs} ms`,
        ),
      clock,
      backoff: DATABASE_BACKOFF,
      signal: stop.signal,
      discard: (late) => late.client.close(),
    });
    return opened.value;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
  }
}

/**
 * Turns a client's refusal into a command error: exit 1, or 2 (as a bad flag)
 * for a refusal of what was given (an id, an input, a filter: REFUSED_INPUT_CODES).
 */
export async function asCommand<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ClientError || hasCode(err, REFUSED_INPUT_CODES)) {
      throw new CommandError(err.code, err.message, hasCode(err, REFUSED_INPUT_CODES) ? 2 : 1);
    }
    throw err;
  }
}

/** The last page `runs --page` goes to. */
const PAGE_MAX = 10_000;

/** Usage of each command. */
export const COMMAND_USAGE: Record<string, string> = {
  submit:
    `usage: deno task submit [--agent PATH] [--agent-name NAME] [--run-id ID] [--goal TEXT | --input JSON]
  Creates a pending run of the agent; a worker hosting the agent takes it.
  --agent PATH        the agent module (env AGENT; default: the demo)
  --agent-name NAME   which of the module's agents, when it exports several
  --run-id ID         the run's id (env RUN_ID; default: <agent>-<random>)
  --goal TEXT         text input (env GOAL; default: the agent's default input)
  --input JSON        JSON input, for an agent with an input schema (env INPUT)
  --budget-tokens N, --budget-model-calls N, --budget-tool-calls N
                      ceilings for this run (integers 1 or more), over the agent's budget
  --labels k=v,k2=v2  the run's labels (or a JSON object), which limits may key on and be fair across,
                      e.g. tenant=acme (docs/limits.md)
  --model-params JSON the run's own model request parameters, over the agent's (env MODEL_PARAMS),
                      e.g. '{"temperature":0.2,"maxOutputTokens":800}'
  (env AGENT_LOAD_S: how long the agent module may take to import, default 30 s)`,
  runs: `usage: deno task runs [--status S] [--agent-name NAME] [--search TEXT] [--limit N] [--page N]
  Lists runs, newest first, a page at a time, with how many match.
  --status S          ${RUN_STATUSES.slice(0, -1).join(", ")} or ${RUN_STATUSES.at(-1)}
  --agent-name NAME   only runs of this agent
  --search TEXT       only run ids containing TEXT
  --limit N           runs per page, 1 to ${LIST_LIMIT_MAX} (default 50)
  --page N            which page, 1 to ${PAGE_MAX} (default 1)`,
  limits: `usage: deno task limits
  Lists the keys of the limits shared by the fleet (defineAgent's limits, LIMITS): each one's limit, calls
  in flight, requests in the last minute, runs waiting for it, and a provider's hold (a 429 with
  Retry-After holds the key for every worker). See docs/limits.md.`,
  inspect: `usage: deno task inspect RUN
  Prints one run's timeline: each step's decision and tool call, and any gap a crash left.`,
  watch: `usage: deno task watch RUN [--json] [--follow]
  Follows a run as it happens: its history, then each decision, tool result and status change, and the
  answer's text as the model writes it (from workers started with STREAM_DELTAS=1; see docs/streaming.md).
  Ends when the run is done, failed or cancelled, when a conversation waits for its next message (the last
  line says how to send one), or on Ctrl-C. While the database cannot be read it says so and tries again.
  --json              one JSON object per event
  --follow            a conversation: follow it across messages, until it ends`,
  resolve: `usage: deno task resolve KEY (--result JSON | --retry | --fail [--reason TEXT]) [--by NAME]
       deno task resolve (--tool NAME | --run RUN | both) (--result JSON | --retry | --fail [--reason TEXT])
                         (--dry-run | --expect N) [--by NAME]
  Settles a flagged tool call of a blocked run; the run goes back to pending once none is left.
  --result JSON       it happened, and this is what the remote answered
  --retry             send it once more under the same key
  --fail              it did not happen and must not (--reason says why)
  Many at once: every flagged call of a blocked run of tool NAME and/or run RUN, settled the same way.
  --dry-run           list them and their count; nothing changes
  --expect N          settle them, in one statement, only if N match (the count the dry run listed,
                      after checking the remote): a call flagged since is not settled unchecked`,
  settle: `usage: deno task settle KEY (--result JSON | --error TEXT) [--by NAME]
  Settles a tool call that waits on its remote (the remote accepted the work and has not finished
  it), as a webhook or a person who saw the job end reports it; a run waiting on a timer is taken
  up again at once.
  --result JSON       the job is done, and this is what the remote answered
  --error TEXT        the job failed: the call fails, and the model sees why
  Refused (NOT_WAITING) for a call that is not waiting, (RUN_CLOSED) while its run is cancelled,
  done or failed: reopen it first.`,
  cancel: `usage: deno task cancel RUN [--by NAME]
  Cancels a run that is not closed, with the child runs its calls started (and theirs); a worker
  holding any of them stops at its next write.`,
  approve: `usage: deno task approve KEY [--by NAME]
  Approves a tool call that waits for a person, for the exact arguments it was asked about;
  the run is taken up again at once. Refused (RUN_CLOSED) while the run is cancelled, done or
  failed: reopen it first.`,
  deny: `usage: deno task deny KEY --reason TEXT [--by NAME]
  Denies a tool call that waits for a person: it is never sent, and the model sees the refusal.
  Refused (RUN_CLOSED) while the run is cancelled, done or failed.`,
  prune: `usage: deno task prune --finished-before AGE|DATE [--dry-run] [--batch N]
  Deletes finished runs (done, failed, cancelled) last changed before the cutoff, with their rows,
  in batches; never an open run.
  --finished-before AGE|DATE   30d, 12h, 90m, 45s, or a date such as 2026-11-01
  --dry-run                    say what would be deleted, delete nothing
  --batch N                    runs per statement, 1 to ${LIST_LIMIT_MAX} (default 500)
A batch that fails is rolled back whole; prune then stops with one line saying what was deleted before it.`,
  reopen: `usage: deno task reopen RUN
  Puts a failed or cancelled run back to pending, history kept: it resumes under its original keys.`,
  move: `usage: deno task move --agent-name NAME --to VERSION [--from VERSION] [--run RUN]
  Moves the open runs of an agent (at version --from, and the run --run, when given) to version --to at
  their next decision, whether their agent lets them move or not: a worker of their version lets each go
  at its next decision (a decided step is carried out first; a call in flight is settled by the version
  that sent it), and a worker of --to takes it, checking it can carry the run's decided step (or sending
  it back, with why). 'deno task runs' shows each run's version; 'deno task replay-check' what a version
  cannot carry (docs/versions.md).`,
  send: `usage: deno task send RUN --message TEXT [--message-id ID] [--wait]
       deno task send RUN --end
  Sends a conversation (a run of an agent with 'conversation') its next message, and wakes it; sent
  while it works, the message is queued and answered after the current answer.
  --message TEXT      what to say
  --message-id ID     the message's id: the same id sent again is one message (default: a random one)
  --wait              wait (up to 120 s) for the answer to the latest message, and print it
  --end               close the conversation: at once when it waits, else after its current answer
  Refused (NOT_A_CONVERSATION) for a run whose agent does not converse, (CONVERSATION_ENDED) for one
  closed, idle past its limit, failed or cancelled.`,
  signal: `usage: deno task signal RUN NAME [--payload JSON] [--id ID]
  Sends a run a named event (payment-received): kept until one of its calls that waits for NAME takes
  it (the waitForSignal tool, ctx.waitForSignal), each signal by one call; a call waiting for it now is
  woken at once. A run that is not closed takes signals.
  --payload JSON      what the event carries, as JSON (default null)
  --id ID             the signal's id: the same id sent again is one signal (default: a random one)
  Refused (RUN_NOT_FOUND) for no such run, (RUN_CLOSED) for one done, failed or cancelled,
  (SIGNAL_INVALID) for a name, id or payload the runtime refuses.`,
};

const COMMON =
  `settings: --database-url URL (env DATABASE_URL, PostgreSQL) or --data-dir DIR (env DATA_DIR, embedded,
default .data); --by NAME (who acts; default $USER)
exit codes: 0 done, 1 refused or failed (one line says why), 2 bad arguments or no database`;

const OPTIONS = {
  agent: { type: "string" },
  "agent-name": { type: "string" },
  "run-id": { type: "string" },
  goal: { type: "string" },
  input: { type: "string" },
  status: { type: "string" },
  search: { type: "string" },
  limit: { type: "string" },
  page: { type: "string" },
  result: { type: "string" },
  error: { type: "string" },
  retry: { type: "boolean" },
  fail: { type: "boolean" },
  reason: { type: "string" },
  by: { type: "string" },
  "database-url": { type: "string" },
  "data-dir": { type: "string" },
  "budget-tokens": { type: "string" },
  "budget-model-calls": { type: "string" },
  "budget-tool-calls": { type: "string" },
  "model-params": { type: "string" },
  labels: { type: "string" },
  "finished-before": { type: "string" },
  "dry-run": { type: "boolean" },
  batch: { type: "string" },
  tool: { type: "string" },
  run: { type: "string" },
  expect: { type: "string" },
  json: { type: "boolean" },
  follow: { type: "boolean" },
  message: { type: "string" },
  "message-id": { type: "string" },
  to: { type: "string" },
  from: { type: "string" },
  wait: { type: "boolean" },
  end: { type: "boolean" },
  payload: { type: "string" },
  id: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/** A cutoff: an age before `now` (`30d`, `12h`, `90m`, `45s`) or a date. Undefined when malformed. */
export function parseCutoff(raw: string, now: Date): Date | undefined {
  const age = /^(\d+)(d|h|m|s)$/.exec(raw.trim());
  if (age) {
    const unitMs = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1_000 }[age[2] as "d" | "h" | "m" | "s"];
    return new Date(now.getTime() - Number(age[1]) * unitMs);
  }
  if (!/^\d{4}-\d{2}-\d{2}/.test(raw)) return undefined;
  const date = new Date(raw);
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** Moves runs between versions at their next decision, and says which, and whether a worker hosts the version. */
export async function move(
  ctx: CommandContext,
  request: { agent: string; to: string; from?: string; runId?: string },
): Promise<void> {
  const out = await asCommand(() => ctx.client.operators.move(request));
  const p = printer(ctx);
  p(`move  agent=${out.agent}  to=${out.to}  runs=${out.runs.length}  (each at its next decision)`);
  for (const r of out.runs.slice(0, 20)) p(`  ${r.runId}  from=${r.from ?? "-"}`);
  if (out.runs.length > 20) p(`  ... and ${out.runs.length - 20} more`);
  if (!out.hosted && out.runs.length > 0) {
    p(`no live worker hosts ${out.agent}@${out.to}: the runs wait for one, pending (start a worker with that module)`);
  }
}

/** Deletes finished runs older than `before` (or says which it would) and prints what it removed. */
export async function prune(
  ctx: CommandContext,
  before: Date,
  opts: { dryRun?: boolean; batchSize?: number },
): Promise<void> {
  const out = await asCommand(() => ctx.client.operators.prune(before, opts));
  const verb = opts.dryRun ? "would delete" : "deleted";
  const p = printer(ctx);
  p(
    `${
      opts.dryRun ? "dry-run" : "pruned"
    }  finished_before=${before.toISOString()}  ${verb}: runs=${out.runs.length}  ` +
      `journal_rows=${out.journal}  tool_rows=${out.effects}  approval_rows=${out.approvals}${
        opts.dryRun ? "" : `  batches=${out.batches}`
      }`,
  );
  for (const id of out.runs.slice(0, 20)) p(`  ${id}`);
  if (out.runs.length > 20) p(`  ... and ${out.runs.length - 20} more`);
}

/** The flags each command takes, besides `--database-url`, `--data-dir`, `--by` and `--help`. */
export const COMMAND_FLAGS: Record<string, readonly (keyof typeof OPTIONS)[]> = {
  submit: [
    "agent",
    "agent-name",
    "run-id",
    "goal",
    "input",
    "budget-tokens",
    "budget-model-calls",
    "budget-tool-calls",
    "model-params",
    "labels",
  ],
  runs: ["status", "agent-name", "search", "limit", "page"],
  limits: [],
  inspect: [],
  watch: ["json", "follow"],
  resolve: ["result", "retry", "fail", "reason", "tool", "run", "dry-run", "expect"],
  cancel: [],
  reopen: [],
  prune: ["finished-before", "dry-run", "batch"],
  approve: [],
  deny: ["reason"],
  settle: ["result", "error"],
  send: ["message", "message-id", "wait", "end"],
  move: ["agent-name", "to", "from", "run"],
  signal: ["payload", "id"],
};

/** Runs one command (`args[0]`); returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
  preloaded?: LoadedAgents,
): Promise<number> {
  const command = args[0];
  if (!command || !(command in COMMAND_USAGE)) {
    console.error(
      displayText(
        `Unknown command ${JSON.stringify(command ?? "")}: one of ${Object.keys(COMMAND_USAGE).join(", ")}`,
      ),
    );
    return 2;
  }
  const usage = (problem: string) => {
    console.error(displayText(`${command}: ${problem}. 'deno task ${command} --help' lists the flags`));
    return 2;
  };
  let parsed;
  try {
    parsed = parseArgs({ args: args.slice(1), allowPositionals: true, strict: true, options: OPTIONS });
  } catch (err) {
    return usage(flagProblem(err));
  }
  // Only this command's flags: `inspect --status done` is a mistake, not a filter.
  const allowed = new Set<string>([...COMMAND_FLAGS[command], "database-url", "data-dir", "by", "help"]);
  const foreign = Object.keys(parsed.values).find((name) => !allowed.has(name));
  if (foreign !== undefined) return usage(`unknown flag '--${foreign}'`);
  const v = parsed.values;
  if (v.help) {
    print(`${COMMAND_USAGE[command]}\n${COMMON}`);
    return 0;
  }
  const [target, ...rest] = parsed.positionals;
  // `signal RUN NAME` is the one command with two.
  const signalName = command === "signal" ? rest.shift() : undefined;
  if (
    rest.length > 0 ||
    (target !== undefined && ["submit", "runs", "prune", "move", "limits"].includes(command))
  ) {
    return usage(`unexpected argument ${JSON.stringify(rest[0] ?? target)}`);
  }
  let payload: Json | undefined;
  if (command === "signal") {
    if (!target || signalName === undefined) return usage("signal needs a run id and a signal name");
    if (v.payload !== undefined) {
      try {
        payload = JSON.parse(v.payload) as Json;
      } catch {
        return usage(
          `--payload must be JSON, e.g. '{"cents":500}' or '"ok"': current value is ${
            JSON.stringify(v.payload)
          }`,
        );
      }
    }
  }
  if (command === "deny" && !v.reason) return usage("deny needs --reason TEXT: the model is shown it");
  if (command === "move" && (v["agent-name"] === undefined || v.to === undefined)) {
    return usage("move needs --agent-name NAME and --to VERSION");
  }
  const bulk: FlaggedFilter | undefined =
    command === "resolve" && (v.tool !== undefined || v.run !== undefined)
      ? { tool: v.tool, runId: v.run }
      : undefined;
  const byKey = ["resolve", "approve", "deny", "settle"].includes(command);
  if ((["inspect", "watch", "cancel", "reopen", "send"].includes(command) || byKey) && !target && !bulk) {
    return usage(`${command} needs a ${byKey ? "tool call key, e.g. demo:0" : "run id"}`);
  }
  if (command === "send") {
    if ((v.message === undefined) === (v.end !== true)) {
      return usage("send needs exactly one of --message TEXT, --end");
    }
    if (v.end && (v["message-id"] !== undefined || v.wait)) {
      return usage("--end takes no --message-id or --wait");
    }
    if (v.message !== undefined && v.message.trim() === "") {
      return usage("--message must say something: current value is empty");
    }
  }
  let settlement: Settlement | undefined;
  if (command === "settle") {
    if ((v.result === undefined) === (v.error === undefined)) {
      return usage("settle needs exactly one of --result JSON, --error TEXT");
    }
    if (v.error !== undefined) {
      if (v.error.trim() === "") return usage("--error must say why the job failed: current value is empty");
      settlement = { error: v.error };
    } else {
      try {
        settlement = { result: JSON.parse(v.result!) as Json };
      } catch {
        return usage(
          `--result must be JSON, e.g. '"i-0000001"' or '{"id":"i-1"}': current value is ${v.result}`,
        );
      }
    }
  }
  let resolution: Resolution | undefined;
  if (command === "resolve") {
    const chosen = [v.result !== undefined, v.retry === true, v.fail === true].filter(Boolean).length;
    if (chosen !== 1) return usage("resolve needs exactly one of --result JSON, --retry, --fail");
    if (v.result !== undefined) {
      try {
        resolution = { action: "result", result: JSON.parse(v.result) as Json };
      } catch {
        return usage(
          `--result must be JSON, e.g. '"i-0000001"' or '{"id":"i-1"}': current value is ${v.result}`,
        );
      }
    } else resolution = v.retry ? { action: "retry" } : { action: "fail", reason: v.reason };
  }
  let bulkOpts: { dryRun: true } | { expect: number } | undefined;
  if (command === "resolve") {
    if (bulk && target !== undefined) {
      return usage(
        `give a tool call key or --tool/--run, not both: current key is ${JSON.stringify(target)}`,
      );
    }
    if (!bulk && (v["dry-run"] || v.expect !== undefined)) {
      return usage("--dry-run and --expect go with --tool NAME or --run RUN");
    }
    if (bulk) {
      if ((v["dry-run"] === true) === (v.expect !== undefined)) {
        return usage(
          "resolve --tool/--run needs --dry-run (list what it would settle) or --expect N (the count listed)",
        );
      }
      if (v.expect !== undefined) {
        const n = Number(v.expect);
        if (!/^\d+$/.test(v.expect) || n < 1 || n > RESOLVE_BATCH_MAX) {
          return usage(
            `--expect must be an integer from 1 to ${RESOLVE_BATCH_MAX}: current value is ${
              JSON.stringify(v.expect)
            }`,
          );
        }
        bulkOpts = { expect: n };
      } else bulkOpts = { dryRun: true };
    }
  }
  // Every numeric flag: an exact integer in its range, or one line naming it (never a number the
  // client refuses later, or one rounded on the way, as 99999999999999999999 would be).
  const count = (name: "limit" | "page" | "batch", max: number): number | string | undefined =>
    v[name] === undefined ? undefined : integerIn(`--${name}`, v[name], 1, max);
  const limit = count("limit", LIST_LIMIT_MAX);
  const page = count("page", PAGE_MAX);
  const batch = count("batch", LIST_LIMIT_MAX);
  for (const n of [limit, page, batch]) if (typeof n === "string") return usage(n);
  if (v.status !== undefined && !isRunStatus(v.status)) {
    return usage(
      `--status must be one of ${RUN_STATUSES.join(", ")}: current value is ${JSON.stringify(v.status)}`,
    );
  }
  let cutoff: Date | undefined;
  let batchSize: number | undefined;
  if (command === "prune") {
    if (v["finished-before"] === undefined) return usage("prune needs --finished-before AGE|DATE, e.g. 30d");
    cutoff = parseCutoff(v["finished-before"], new Date());
    if (!cutoff) {
      return usage(
        `--finished-before must be an age like 30d, 12h, 90m, 45s or a date like 2026-11-01: current value is ${
          JSON.stringify(v["finished-before"])
        }`,
      );
    }
    batchSize = batch as number | undefined;
  }
  const budget: Budget = {};
  for (
    const [flag, key] of [
      ["budget-tokens", "tokens"],
      ["budget-model-calls", "modelCalls"],
      ["budget-tool-calls", "toolCalls"],
    ] as const
  ) {
    const raw = v[flag];
    if (raw === undefined) continue;
    const n = integerIn(`--${flag}`, raw, 1, Number.MAX_SAFE_INTEGER);
    if (typeof n === "string") return usage(n);
    budget[key] = n;
  }
  let agent: Agent | undefined;
  let input: unknown;
  let modelParams: ModelParams | undefined;
  let labels: Record<string, string> | undefined;
  if (command === "submit" && v.labels !== undefined) {
    const parsed = parseLabels(v.labels);
    if (typeof parsed === "string") return usage(parsed);
    labels = parsed;
  }
  if (command === "submit") {
    try {
      const load = new SettingsReader({ AGENT_LOAD_S: env.AGENT_LOAD_S || undefined });
      const timeoutMs = load.seconds("AGENT_LOAD_S", AGENT_LOAD_DEFAULT_S);
      if (load.problems.length > 0) return usage(load.problems[0]);
      const { agents } = await loadAgents(v.agent ?? (env.AGENT || undefined), { preloaded, timeoutMs });
      const name = v["agent-name"];
      agent = name === undefined ? agents[0] : agents.find((a) => a.name === name);
      if (!agent) {
        return usage(
          `the module has no agent named ${JSON.stringify(name)}: it has ${
            agents.map((a) => a.name).join(", ")
          }`,
        );
      }
      const raw = agent.input
        ? (v.input ?? (env.INPUT || undefined) ?? v.goal)
        : (v.goal ?? (env.GOAL || undefined) ?? v.input);
      if (agent.input && raw !== undefined) {
        try {
          input = JSON.parse(raw);
        } catch {
          return usage(
            `--input must be JSON for agent ${agent.name}: current value is ${
              JSON.stringify(raw.slice(0, 80))
            }`,
          );
        }
      } else input = raw;
      const paramsText = v["model-params"] ?? (env.MODEL_PARAMS || undefined);
      if (paramsText !== undefined) modelParams = parseModelParams(paramsText, "--model-params");
    } catch (err) {
      if (err instanceof ConfigError) return usage(err.problems.join("; "));
      if (err instanceof RuntimeError && err.code === "MODEL_PARAMS_INVALID") return usage(err.message);
      throw err;
    }
  }
  // A malformed id, key or filter is refused before the database is opened: nothing spent, and the same one
  // line while the database is away. The client checks each again where it is used.
  const refused = refusedInput(command, target, v, bulk);
  if (refused) {
    console.error(displayText(`${refused.code}: ${refused.message}`));
    return 2;
  }
  const databaseUrl = v["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = v["data-dir"] ?? (env.DATA_DIR || ".data");
  let client: Client;
  const clock = new SystemClock();
  const open = () => openStore({ databaseUrl, dataDir });
  try {
    // `watch` follows a run across a database that goes away (client.stream); one started while it is away waits
    // for it the same way, saying so on stderr. The other commands answer at once: exit 7, run it again later.
    client = new Client(
      command === "watch" && databaseUrl ? await openWaiting(open, clock) : await open(),
      clock,
    );
  } catch (err) {
    if (err instanceof StoreError) {
      console.error(`${err.code}: ${err.message}`);
      return isDatabaseAway(err) ? EXIT_CODES.databaseAway : EXIT_CODES.settings;
    }
    throw err;
  }
  const ctx: CommandContext = { client, print, actor: v.by ?? env.USER ?? safeUser() };
  try {
    switch (command) {
      case "submit":
        await submit(ctx, agent!, {
          runId: v["run-id"] ?? (env.RUN_ID || undefined),
          input,
          budget: Object.keys(budget).length > 0 ? budget : undefined,
          modelParams,
          ...(labels ? { labels } : {}),
        });
        break;
      case "runs":
        await runs(ctx, {
          status: v.status as RunStatus | undefined,
          agent: v["agent-name"],
          search: v.search,
          limit: limit as number | undefined,
          page: page as number | undefined,
        });
        break;
      case "limits":
        await limits(ctx);
        break;
      case "inspect":
        await inspect(ctx, target);
        break;
      case "watch":
        await watch(ctx, target, { json: v.json === true, follow: v.follow === true });
        break;
      case "resolve":
        if (bulk) await resolveMany(ctx, bulk, resolution!, bulkOpts!);
        else await resolve(ctx, target, resolution!);
        break;
      case "settle":
        await settle(ctx, target, settlement!);
        break;
      case "send":
        await send(ctx, target, { message: v.message, messageId: v["message-id"], wait: v.wait, end: v.end });
        break;
      case "signal":
        await signal(ctx, target, signalName!, { payload, signalId: v.id });
        break;
      case "cancel":
        await cancel(ctx, target);
        break;
      case "reopen":
        await reopen(ctx, target);
        break;
      case "approve":
      case "deny": {
        const row = await asCommand(() =>
          command === "approve"
            ? ctx.client.operators.approve(target, { by: ctx.actor })
            : ctx.client.operators.deny(target, { by: ctx.actor, reason: v.reason })
        );
        printer(ctx)(
          `${row.status}  key=${row.idempotency_key}  tool=${row.tool}  args=${formatValue(row.args)}  by=${
            formatValue(ctx.actor)
          }  run=${row.run_id}  run_status=${row.run_status}`,
        );
        break;
      }
      case "prune":
        await prune(ctx, cutoff!, { dryRun: v["dry-run"] === true, batchSize });
        break;
      case "move":
        await move(ctx, { agent: v["agent-name"]!, to: v.to!, from: v.from, runId: v.run });
        break;
    }
    return 0;
  } catch (err) {
    if (err instanceof CommandError) {
      console.error(displayText(`${err.code}: ${err.message}`));
      return err.exitCode;
    }
    // Anything else (the database gone mid-command, a statement refused): one line, never a stack trace.
    console.error(displayText(`${command} failed: ${describeError(err).split("\n")[0]}`));
    return 1;
  } finally {
    await client.close().catch(() => {}); // a connection already lost: the line above said why
  }
}

/** The client's refusal of a command's run id, tool call key, `--by`, message id or filter, if it has one. */
function refusedInput(
  command: string,
  target: string | undefined,
  v: { by?: string; "message-id"?: string; "agent-name"?: string; search?: string },
  bulk: FlaggedFilter | undefined,
): ClientError | undefined {
  try {
    if (target !== undefined && ["resolve", "approve", "deny", "settle"].includes(command)) checkKey(target);
    if (
      target !== undefined && ["inspect", "watch", "cancel", "reopen", "send", "signal"].includes(command)
    ) {
      checkRunId(target);
    }
    if (bulk) checkFlaggedFilter(bulk);
    if (v.by !== undefined) checkBy(v.by);
    if (command === "send" && v["message-id"] !== undefined) {
      checkId("message id", v["message-id"], "MESSAGE_INVALID");
    }
    if (command === "runs") checkListFilter({ agent: v["agent-name"], search: v.search });
    return undefined;
  } catch (err) {
    if (err instanceof ClientError) return err;
    throw err;
  }
}

/** `--labels`: `k=v,k2=v2` or a JSON object, checked as a run's labels; a problem as a string. */
function parseLabels(raw: string): Record<string, string> | string {
  let value: unknown;
  if (raw.trim().startsWith("{")) {
    try {
      value = JSON.parse(raw);
    } catch {
      return `--labels must be k=v,k2=v2 or a JSON object: current value is ${
        JSON.stringify(raw.slice(0, 80))
      }`;
    }
  } else {
    const pairs = raw.split(",").map((p) => p.split("="));
    if (pairs.some((p) => p.length !== 2)) {
      return `--labels must be k=v,k2=v2 or a JSON object: current value is ${
        JSON.stringify(raw.slice(0, 80))
      }`;
    }
    value = Object.fromEntries(pairs.map(([k, v]) => [k.trim(), v.trim()]));
  }
  try {
    return { ...checkLabels(value, "--labels") };
  } catch (err) {
    return (err as Error).message;
  }
}

function safeUser(): string {
  try {
    return userInfo().username;
  } catch {
    return "unknown";
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
