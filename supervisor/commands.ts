/**
 * The run commands, for people operating the runtime:
 *
 * ```sh
 * deno task submit   [--run-id ID] [--goal TEXT]    # a pending run, for a supervisor to pick up
 * deno task runs                                    # a table of every run
 * deno task inspect  RUN                            # one run's timeline, step by step
 * deno task resolve  KEY (--result JSON | --retry | --fail [REASON])   # settle a flagged tool call
 * deno task cancel   RUN                            # stop a run; its worker stops at its next write
 * deno task reopen   RUN                            # a failed or cancelled run back to pending
 * ```
 *
 * They work on PostgreSQL (`DATABASE_URL`) and on the embedded database under
 * `DATA_DIR` (default `.data`); the embedded one allows one process at a time,
 * so a command refuses, naming the holder, while a worker has it open.
 *
 * Exit codes: 0 done, 1 refused (no such run, not flagged, ...), 2 bad
 * arguments or no database.
 *
 * @module
 */

import { userInfo } from "node:os";
import { parseArgs } from "node:util";
import { type Clock, SystemClock } from "../runtime/clock.ts";
import { DEFAULT_GOAL, RUN_ID_PATTERN } from "../runtime/config.ts";
import { RuntimeError, StoreError } from "../runtime/errors.ts";
import { formatValue } from "../runtime/log.ts";
import { openStore } from "../runtime/store/open.ts";
import type { JournalRow, RunRow, SideEffectRow, Store } from "../runtime/store/store.ts";
import type { Json } from "../runtime/tools.ts";

/** A command was used wrongly, or refused. `code` says which. */
export class CommandError extends RuntimeError {
  /** Exit code: 2 for bad arguments, 1 for a refusal. */
  readonly exitCode: number;
  /** Creates a command error. */
  constructor(code: string, message: string, exitCode = 1) {
    super(code, message);
    this.name = "CommandError";
    this.exitCode = exitCode;
  }
}

/** What a command needs: a store, a clock, where to print, and who is acting. */
export interface CommandContext {
  store: Store;
  clock: Clock;
  print: (line: string) => void;
  /** Recorded as `resolved_by` and in a cancelled run's error. */
  actor: string;
}

/** Creates a pending run. */
export async function submit(ctx: CommandContext, runId: string, goal: string): Promise<RunRow> {
  if (!RUN_ID_PATTERN.test(runId)) {
    throw new CommandError(
      "BAD_RUN_ID",
      `RUN_ID must be 1-64 characters of letters, digits, '.', '_' or '-': current value is ${
        JSON.stringify(runId)
      }`,
      2,
    );
  }
  const created = await ctx.store.createRun(runId, goal, ctx.clock.now());
  const run = await ctx.store.getRun(runId);
  if (!created || !run) {
    throw new CommandError(
      "RUN_EXISTS",
      `Run ${runId} exists already (status ${run?.status ?? "unknown"}); choose another RUN_ID`,
    );
  }
  ctx.print(`submitted  run=${runId}  status=pending  goal=${formatValue(goal)}`);
  return run;
}

/** Prints every run as a table. */
export async function runs(ctx: CommandContext): Promise<void> {
  const rows = await ctx.store.listRuns();
  const now = ctx.clock.now().getTime();
  const table = [["RUN", "STATUS", "EPOCH", "OWNER", "HEARTBEAT", "STEPS", "LLM_CALLS", "FLAGGED"]];
  for (const r of rows) {
    table.push([
      r.run_id,
      r.status,
      String(r.epoch),
      r.owner ?? "-",
      // A lease only means something while the run is open.
      r.heartbeat_at && (r.status === "running" || r.status === "pending")
        ? `${((now - new Date(r.heartbeat_at).getTime()) / 1000).toFixed(1)}s ago`
        : "-",
      String(r.steps),
      String(r.llm_calls),
      String(r.flagged),
    ]);
  }
  const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
  for (const row of table) ctx.print(row.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd());
  if (rows.length === 0) ctx.print("(no runs)");
}

const iso = (d: Date | null | undefined): string => d ? new Date(d).toISOString() : "-";

function tokens(usage: Json | null): string | undefined {
  if (!usage || typeof usage !== "object" || Array.isArray(usage)) return undefined;
  const u = usage as Record<string, Json>;
  return `${u.prompt_tokens ?? "?"}+${u.completion_tokens ?? "?"}`;
}

/** Prints one run's timeline: each step's decision and tool call, and any gap a crash left. */
export async function inspect(ctx: CommandContext, runId: string): Promise<void> {
  const run = await ctx.store.getRun(runId);
  if (!run) {
    throw new CommandError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}; 'deno task runs' lists them`);
  }
  const { journal, effects } = await ctx.store.loadHistory(runId);
  const bySeq = new Map(effects.map((e) => [e.seq, e]));
  const p = ctx.print;
  p(`run ${run.run_id}  status=${run.status}  epoch=${run.epoch}  owner=${run.owner ?? "-"}`);
  p(`  goal: ${run.goal}`);
  p(`  created ${iso(run.created_at)}  updated ${iso(run.updated_at)}  heartbeat ${iso(run.heartbeat_at)}`);
  if (run.error) p(`  error: ${run.error}`);
  let prompt = 0;
  let completion = 0;
  const seqs = [...new Set([...journal.map((j) => j.seq), ...effects.map((e) => e.seq)])].sort((a, b) =>
    a - b
  );
  let lastEpoch: number | undefined;
  for (const seq of seqs) {
    const j = journal.find((x) => x.seq === seq);
    const e = bySeq.get(seq);
    const epoch = Math.max(j?.epoch ?? 0, e?.epoch ?? 0);
    if (lastEpoch !== undefined && epoch > lastEpoch) {
      p(`  -- epoch ${lastEpoch} -> ${epoch}: another worker took the run over`);
    }
    lastEpoch = epoch;
    p(`step ${seq}`);
    if (j) {
      for (const line of decisionLines(j)) p(`  ${line}`);
      const u = j.usage as Record<string, number> | null;
      if (u && typeof u === "object") {
        prompt += Number(u.prompt_tokens ?? 0);
        completion += Number(u.completion_tokens ?? 0);
      }
    }
    if (e) { for (const line of effectLines(e)) p(`  ${line}`); }
    for (const gap of gaps(j, e)) p(`  !! ${gap}`);
  }
  const llmCalls = journal.reduce((n, j) => n + j.llm_attempts, 0);
  p(`total  steps=${seqs.length}  llm_calls=${llmCalls}  tokens=${prompt}+${completion}`);
}

function decisionLines(j: JournalRow): string[] {
  const d = j.decision;
  const what = !d ? "(no answer recorded)" : "tool" in d ? `${d.tool} ${JSON.stringify(d.args)}` : "done";
  const lines = [
    `decision  ${j.status}  ${what}  attempts=${j.llm_attempts}  epoch=${j.epoch}  intent=${
      iso(j.intent_at)
    }  confirmed=${iso(j.confirmed_at)}${tokens(j.usage) ? `  tokens=${tokens(j.usage)}` : ""}`,
  ];
  for (const r of j.rejections ?? []) lines.push(`  rejected ${r.code}: ${r.message}`);
  return lines;
}

function effectLines(e: SideEffectRow): string[] {
  const lines = [
    `tool      ${e.status}  ${e.tool}  key=${e.idempotency_key}  attempts=${e.attempts}  epoch=${e.epoch}  intent=${
      iso(e.intent_at)
    }  confirmed=${iso(e.confirmed_at)}  remote=${e.remote ?? "-"}${
      e.result !== null ? `  result=${JSON.stringify(e.result)}` : ""
    }`,
  ];
  if (e.error) lines.push(`  error: ${e.error}`);
  if (e.resolved_by) lines.push(`  resolved by ${e.resolved_by} at ${iso(e.resolved_at)}`);
  return lines;
}

/** What a crash (or a wait for a human) left unfinished in one step. */
export function gaps(j: JournalRow | undefined, e: SideEffectRow | undefined): string[] {
  const out: string[] = [];
  if (!j && e) out.push("a tool call without a recorded decision");
  if (j?.status === "intent") {
    out.push("the model was asked and no answer was recorded: the step is decided again on resume");
  }
  if (j?.status === "confirmed" && j.decision && "tool" in j.decision && !e) {
    out.push("decided, no tool call recorded: the call is made on resume");
  }
  if (e?.status === "intent") out.push("tool call outcome unknown: re-sent under its key on resume");
  if (e?.status === "flagged") {
    out.push(`flagged: 'deno task resolve ${e.idempotency_key} --result JSON | --retry | --fail'`);
  }
  return out;
}

/** How a human settles a flagged call. */
export type Resolution = { action: "result"; result: Json } | { action: "retry" } | {
  action: "fail";
  reason?: string;
};

/** Settles a flagged tool call and, when none is left, sets its run back to `pending`. */
export async function resolve(
  ctx: CommandContext,
  key: string,
  resolution: Resolution,
): Promise<SideEffectRow> {
  const { store, clock, actor } = ctx;
  const r = resolution.action === "fail"
    ? {
      action: "fail" as const,
      error: `marked failed by ${actor}${resolution.reason ? `: ${resolution.reason}` : ""}`,
    }
    : resolution;
  const out = await store.resolveEffect(key, r, actor, clock.now());
  if (!out) {
    const e = await store.getEffect(key);
    if (!e) {
      throw new CommandError(
        "CALL_NOT_FOUND",
        `No tool call with key ${JSON.stringify(key)}; 'deno task inspect RUN' shows a run's keys`,
      );
    }
    if (e.status !== "flagged") {
      throw new CommandError(
        "NOT_FLAGGED",
        `Tool call ${key} is ${e.status}, not flagged: nothing to resolve`,
      );
    }
    const run = await store.getRun(e.run_id);
    throw new CommandError(
      "RUN_NOT_BLOCKED",
      `Tool call ${key} is flagged but run ${e.run_id} is ${run?.status}, not blocked: ` +
        `wait until a worker has blocked it ('deno task runs'), then resolve`,
    );
  }
  ctx.print(
    `resolved  key=${key}  status=${out.effect.status}  remote=${out.effect.remote ?? "-"}  by=${
      formatValue(actor)
    }  run=${out.effect.run_id}  run_status=${out.unblocked ? "pending" : "blocked"}`,
  );
  return out.effect;
}

/** Cancels a run; a worker holding it stops at its next write. */
export async function cancel(ctx: CommandContext, runId: string): Promise<RunRow> {
  const run = await ctx.store.cancelRun(runId, `cancelled by ${ctx.actor}`, ctx.clock.now());
  if (!run) {
    const existing = await ctx.store.getRun(runId);
    throw existing
      ? new CommandError("RUN_CLOSED", `Run ${runId} is ${existing.status} already; nothing to cancel`)
      : new CommandError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}; 'deno task runs' lists them`);
  }
  ctx.print(`cancelled  run=${runId}  epoch=${run.epoch}  owner=${run.owner ?? "-"}`);
  return run;
}

/**
 * Reopens a failed or cancelled run as pending, keeping its history: a worker
 * (or the supervisor) resumes it where it stopped, re-sending any call left at
 * `intent` under its original key, so nothing done before is done again.
 */
export async function reopen(ctx: CommandContext, runId: string): Promise<RunRow> {
  const run = await ctx.store.reopenRun(runId, ctx.clock.now());
  if (!run) {
    const existing = await ctx.store.getRun(runId);
    throw existing
      ? new CommandError(
        "NOT_REOPENABLE",
        `Run ${runId} is ${existing.status}; only a failed or cancelled run can be reopened`,
      )
      : new CommandError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}; 'deno task runs' lists them`);
  }
  ctx.print(`reopened  run=${runId}  status=${run.status}  epoch=${run.epoch}  by=${formatValue(ctx.actor)}`);
  return run;
}

const USAGE = `usage:
  submit  [--run-id ID] [--goal TEXT]
  runs
  inspect RUN
  resolve KEY (--result JSON | --retry | --fail [--reason TEXT]) [--by NAME]
  cancel  RUN [--by NAME]
  reopen  RUN
settings: DATABASE_URL (PostgreSQL) or DATA_DIR (embedded, default .data)`;

/** Runs one command (`args[0]`); returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      strict: true,
      options: {
        "run-id": { type: "string" },
        goal: { type: "string" },
        result: { type: "string" },
        retry: { type: "boolean" },
        fail: { type: "boolean" },
        reason: { type: "string" },
        by: { type: "string" },
        "database-url": { type: "string" },
        "data-dir": { type: "string" },
      },
    });
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const [command, target, ...rest] = parsed.positionals;
  const v = parsed.values;
  const usage = (problem: string) => {
    console.error(`${problem}\n${USAGE}`);
    return 2;
  };
  if (!command || !["submit", "runs", "inspect", "resolve", "cancel", "reopen"].includes(command)) {
    return usage(`Unknown command ${JSON.stringify(command ?? "")}`);
  }
  if (rest.length > 0) return usage(`Unexpected argument ${JSON.stringify(rest[0])}`);
  if (["inspect", "cancel", "resolve", "reopen"].includes(command) && !target) {
    return usage(`${command} needs a ${command === "resolve" ? "tool call key, e.g. demo:0" : "run id"}`);
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
  const databaseUrl = v["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = v["data-dir"] ?? (env.DATA_DIR || ".data");
  let store: Store;
  try {
    store = await openStore({ databaseUrl, dataDir });
  } catch (err) {
    if (err instanceof StoreError) {
      console.error(`${err.code}: ${err.message}`);
      return 2;
    }
    throw err;
  }
  const ctx: CommandContext = {
    store,
    clock: new SystemClock(),
    print,
    actor: v.by ?? env.USER ?? safeUser(),
  };
  try {
    switch (command) {
      case "submit":
        await submit(ctx, v["run-id"] ?? env.RUN_ID ?? "run1", v.goal ?? env.GOAL ?? DEFAULT_GOAL);
        break;
      case "runs":
        await runs(ctx);
        break;
      case "inspect":
        await inspect(ctx, target);
        break;
      case "resolve":
        await resolve(ctx, target, resolution!);
        break;
      case "cancel":
        await cancel(ctx, target);
        break;
      case "reopen":
        await reopen(ctx, target);
        break;
    }
    return 0;
  } catch (err) {
    if (err instanceof CommandError) {
      console.error(`${err.code}: ${err.message}`);
      return err.exitCode;
    }
    throw err;
  } finally {
    await store.client.close();
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
