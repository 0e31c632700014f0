/**
 * The checks every client call makes on what it is given, before any
 * statement is sent (ids by the rule of ids.ts, filters, settlements), and
 * a run row as the client shows it.
 *
 * @module
 */

import { ClientError, describeValue, type ErrorCode } from "../base/errors.ts";
import {
  ID_RULE,
  idProblem,
  isKey,
  isRunId,
  isSignalName,
  KEY_SHAPE,
  RUN_ID_SHAPE,
  SIGNAL_NAME_SHAPE,
} from "../base/ids.ts";
import { toStorable } from "../base/storable.ts";
import {
  type CallSettlement,
  type EffectResolution,
  type FlaggedFilter,
  type RunFilter,
  type RunRow,
} from "../store/store.ts";
import { isRunStatus, RUN_STATUSES } from "../store/store.ts";
import type { Json } from "../agent/tools.ts";
import { NAME_PATTERN } from "../agent/agent.ts";
import { VERSION_PATTERN } from "../agent/version.ts";
import type { Resolution, RunInfo, Settlement } from "./shapes.ts";
import { LIST_LIMIT_MAX, SIGNAL_PAYLOAD_BYTES_MAX } from "./shapes.ts";

export function readEnv(): Record<string, string | undefined> {
  try {
    return Deno.env.toObject();
  } catch {
    return {}; // no env permission: the agent's own settings must do
  }
}

/** A settlement checked, as the store writes it: a failure carries who reported it. */
export function checkSettlement(settlement: Settlement, by: string): CallSettlement {
  const s = settlement as { result?: unknown; error?: unknown };
  const hasResult = s !== null && typeof s === "object" && "result" in s && s.result !== undefined;
  const hasError = s !== null && typeof s === "object" && "error" in s && s.error !== undefined;
  if (hasResult === hasError) {
    throw new ClientError(
      "SETTLEMENT_INVALID",
      `A settlement is { result } (what the remote answered) or { error } (why the job failed), exactly one: ` +
        `current value is ${describeValue(settlement)}`,
    );
  }
  if (hasResult) return { result: s.result as Json };
  if (typeof s.error !== "string" || s.error.trim() === "") {
    throw new ClientError(
      "SETTLEMENT_INVALID",
      `A settlement's 'error' must be a non-empty text saying why the job failed: current value is ${
        describeValue(s.error)
      }`,
    );
  }
  return { error: `reported failed by ${by}: ${s.error}` };
}

/** A resolution as the store writes it: a failure carries who marked it failed, and why. */
export function storedResolution(resolution: Resolution, by: string): EffectResolution {
  return resolution.action === "fail"
    ? { action: "fail", error: `marked failed by ${by}${resolution.reason ? `: ${resolution.reason}` : ""}` }
    : resolution;
}

/** Refuses a bulk filter that names nothing (every flagged call at once is never what is meant). */
export function checkFlaggedFilter(filter: FlaggedFilter): void {
  if (filter.tool === undefined && filter.runId === undefined) {
    throw new ClientError(
      "FILTER_REQUIRED",
      "Name the flagged calls to take: a tool ('tool'), a run ('runId'), or both",
    );
  }
  if (filter.runId !== undefined) checkRunId(filter.runId);
  if (filter.tool !== undefined) checkId("tool name to filter by", filter.tool, "FILTER_INVALID");
}

export function describeFilter(filter: FlaggedFilter): string {
  return [
    filter.tool === undefined ? "" : `tool ${JSON.stringify(filter.tool)}`,
    filter.runId === undefined ? "" : `run ${filter.runId}`,
  ].filter(Boolean).join(" and ");
}

/** The filter of {@link ReadClient.list}, checked; throws `FILTER_INVALID` naming the field and the value seen. */
export function checkListFilter(filter: RunFilter): RunFilter {
  const problem = (what: string, value: unknown) =>
    new ClientError("FILTER_INVALID", `A run list's ${what}: current value is ${describeValue(value)}`);
  const { limit, offset, status } = filter;
  if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 1 && limit <= LIST_LIMIT_MAX)) {
    throw problem(`'limit' (runs per page) must be an integer from 1 to ${LIST_LIMIT_MAX}`, limit);
  }
  if (offset !== undefined && !(Number.isSafeInteger(offset) && offset >= 0)) {
    throw problem("'offset' (runs to skip) must be an integer 0 or more", offset);
  }
  if (status !== undefined && !isRunStatus(status)) {
    throw problem(`'status' must be one of ${RUN_STATUSES.join(", ")}`, status);
  }
  for (const key of ["agent", "search"] as const) {
    const value = filter[key];
    if (value !== undefined && typeof value !== "string") throw problem(`'${key}' must be a string`, value);
    const reason = value === undefined ? undefined : idProblem(value);
    if (reason !== undefined) {
      throw problem(`'${key}' is refused, as ${reason} (a filter is ${ID_RULE})`, value);
    }
  }
  return filter;
}

/**
 * Refusals of what a caller gave (an id, a message, a filter, an input, a
 * settlement), not of a run's state: the commands exit 2 on them, the page
 * answers 400.
 */
export const REFUSED_INPUT_CODES: readonly ErrorCode[] = [
  "BAD_RUN_ID",
  "ID_INVALID",
  "MESSAGE_INVALID",
  "FILTER_INVALID",
  "SETTLEMENT_INVALID",
  "INPUT_INVALID",
  "BUDGET_INVALID",
  "SCHEDULE_INVALID",
  "LABELS_INVALID",
];

/**
 * Refuses (`BAD_RUN_ID`) what is not a run id, wherever one is given: no run
 * has another shape (every way a run is made checks it), so nothing else is
 * looked up, and no text the database refuses or changes reaches a statement.
 */
export function checkRunId(runId: unknown): void {
  if (!isRunId(runId)) {
    throw new ClientError(
      "BAD_RUN_ID",
      `A run id is ${RUN_ID_SHAPE}: current value is ${describeValue(runId)}`,
    );
  }
}

/** Refuses (`ID_INVALID`) what is not a tool call's key (`<run id>:<seq>`). */
export function checkKey(key: unknown): void {
  if (!isKey(key)) {
    throw new ClientError(
      "ID_INVALID",
      `A tool call's key is ${KEY_SHAPE}: current value is ${describeValue(key)}`,
    );
  }
}

/** Refuses an identifier that breaks the rule of ids.ts, with `code`, naming it `what` and saying why. */
export function checkId(
  what: string,
  value: unknown,
  code: "ID_INVALID" | "MESSAGE_INVALID" | "FILTER_INVALID",
): void {
  const reason = idProblem(value);
  if (reason === undefined) return;
  throw new ClientError(
    code,
    `The ${what} ${describeValue(value)} is refused: ${reason}. An identifier is ${ID_RULE}`,
  );
}

/** Who acts, as recorded (default `client`), checked by the rule of ids.ts (`ID_INVALID`). */
export function checkBy(by: string | undefined): string {
  const name = by ?? "client";
  checkId("name of who acts ('by')", name, "ID_INVALID");
  return name;
}

/**
 * A signal's name, id and payload, checked (`SIGNAL_INVALID`): a name of the
 * signal names' shape, an id by the identifier rule, a payload that is JSON
 * the database stores as it is, at most {@link SIGNAL_PAYLOAD_BYTES_MAX}
 * bytes. Returns the payload as it will read back.
 */
export function checkSignal(name: unknown, signalId: unknown, payload: unknown): Json {
  if (!isSignalName(name)) {
    throw new ClientError(
      "SIGNAL_INVALID",
      `A signal's name is ${SIGNAL_NAME_SHAPE}: current value is ${describeValue(name)}`,
    );
  }
  const reason = idProblem(signalId);
  if (reason !== undefined) {
    throw new ClientError(
      "SIGNAL_INVALID",
      `The signal id ${describeValue(signalId)} is refused: ${reason}. An identifier is ${ID_RULE}`,
    );
  }
  const stored = toStorable(payload);
  if (!stored.ok) {
    throw new ClientError(
      "SIGNAL_INVALID",
      `Signal ${name}'s payload cannot be stored: it holds ${stored.reason}; send JSON (strings without ` +
        `lone surrogates or NUL, finite numbers)`,
    );
  }
  const bytes = new TextEncoder().encode(stored.json).length;
  if (bytes > SIGNAL_PAYLOAD_BYTES_MAX) {
    throw new ClientError(
      "SIGNAL_INVALID",
      `Signal ${name}'s payload is ${bytes} bytes of JSON, more than ${SIGNAL_PAYLOAD_BYTES_MAX}: send a ` +
        `reference to it (a URL, an id) instead`,
    );
  }
  return stored.value;
}

export function notFound(runId: string): ClientError {
  return new ClientError("RUN_NOT_FOUND", `No run ${JSON.stringify(runId)}; 'deno task runs' lists them`);
}

export function info(run: RunRow): RunInfo {
  return {
    runId: run.run_id,
    agent: run.agent,
    status: run.status,
    input: run.input,
    output: run.output,
    error: run.error,
    epoch: run.epoch,
    owner: run.owner,
    createdAt: new Date(run.created_at),
    updatedAt: new Date(run.updated_at),
    budget: run.budget ?? null,
    wakeAt: run.wake_at ? new Date(run.wake_at) : null,
    parentRunId: run.parent_run_id ?? null,
    parentKey: run.parent_key ?? null,
    version: {
      current: run.agent_version ?? null,
      mayMove: run.may_move ?? false,
      moveTo: run.move_to ?? null,
      movedFrom: run.moved_from ?? null,
      movedAt: run.moved_at ? new Date(run.moved_at) : null,
      moveRefused: run.move_refused ?? null,
    },
    labels: run.labels ?? null,
    ...(run.conversation_idle_ms === null || run.conversation_idle_ms === undefined ? {} : {
      conversation: {
        messages: run.message_count ?? 1,
        idle: isIdle(run),
        idleMs: run.conversation_idle_ms,
        ended: run.conversation_ended_at !== null && run.conversation_ended_at !== undefined,
      },
    }),
  };
}

/** A conversation waiting for its next message, its latest one answered. */
export function isIdle(run: RunRow): boolean {
  return run.status === "waiting" && run.idle_since !== null && run.idle_since !== undefined;
}

/** Checks an operator's move: an agent name and versions by their rules (`MOVE_INVALID` naming what is wrong). */
export function checkMove(move: { agent: unknown; to: unknown; from?: unknown }): void {
  const problems: string[] = [];
  if (typeof move.agent !== "string" || !NAME_PATTERN.test(move.agent)) {
    problems.push(`'agent' must be an agent's name: current value is ${describeValue(move.agent)}`);
  }
  for (const field of ["to", "from"] as const) {
    const v = move[field];
    if (v === undefined && field === "from") continue;
    if (typeof v !== "string" || !VERSION_PATTERN.test(v)) {
      problems.push(
        `'${field}' must be a version (1-64 letters, digits, '.', '_', '+' or '-'): current value is ${
          describeValue(v)
        }`,
      );
    }
  }
  if (problems.length > 0) throw new ClientError("MOVE_INVALID", `Cannot move runs: ${problems.join("; ")}`);
}
