/**
 * The requests' parameters, checked before anything is read or written: a
 * message (its id by the runtime's id rule, its role, its parts), a task id,
 * and a list's filter and page. Each refusal is an `InvalidParamsError`
 * naming the field (or `ContentTypeNotSupportedError` for a part this server
 * cannot read), with what was seen and what to send instead.
 *
 * @module
 */

import { describeValue } from "../base/errors.ts";
import { idProblem } from "../base/ids.ts";
import type { Agent } from "../agent/agent.ts";
import type { Json } from "../agent/tools.ts";
import { A2aError, type Part, TASK_STATES, type TaskState } from "./wire.ts";

/** A message as sent, checked. */
export interface InboundMessage {
  /** Its id. */
  messageId: string;
  /** The task it continues, if any. */
  taskId?: string;
  /** The context (conversation) it continues, if any. */
  contextId?: string;
  /** Its parts. */
  parts: Part[];
}

/** The most tasks one page of a list holds (§3.1.4), and how many when the client does not say. */
export const PAGE_SIZE_MAX = 100;
/** The page size when the client does not give one. */
export const PAGE_SIZE_DEFAULT = 50;

function invalid(field: string, message: string): A2aError {
  return new A2aError("InvalidParamsError", message, { field });
}

/** `params` as an object, or the refusal. */
export function paramsObject(params: unknown): Record<string, unknown> {
  if (params === undefined || params === null) return {};
  if (typeof params !== "object" || Array.isArray(params)) {
    throw invalid("params", `'params' must be an object: current value is ${describeValue(params, 80)}`);
  }
  return params as Record<string, unknown>;
}

function optionalId(m: Record<string, unknown>, field: "taskId" | "contextId"): string | undefined {
  const v = m[field];
  if (v === undefined || v === null || v === "") return undefined;
  if (typeof v !== "string") {
    throw invalid(
      `message.${field}`,
      `'message.${field}' must be a string: current value is ${describeValue(v)}`,
    );
  }
  return v;
}

/** The message of a send request (`params.message`), checked. */
export function checkMessage(params: Record<string, unknown>): InboundMessage {
  const m = params.message;
  if (typeof m !== "object" || m === null || Array.isArray(m)) {
    throw invalid("message", `'message' must be a Message object: current value is ${describeValue(m, 80)}`);
  }
  const msg = m as Record<string, unknown>;
  const problem = idProblem(msg.messageId);
  if (problem !== undefined) {
    throw invalid(
      "message.messageId",
      `'message.messageId' is refused: ${problem}; give each message a unique id (a UUID)`,
    );
  }
  if (msg.role !== "ROLE_USER") {
    throw invalid(
      "message.role",
      `'message.role' must be "ROLE_USER" for a message a client sends: current value is ${
        describeValue(msg.role)
      }`,
    );
  }
  if (!Array.isArray(msg.parts) || msg.parts.length === 0) {
    throw invalid("message.parts", "'message.parts' must hold at least one part");
  }
  msg.parts.forEach((p, i) => {
    if (typeof p !== "object" || p === null || Array.isArray(p)) {
      throw invalid(`message.parts[${i}]`, `'message.parts[${i}]' must be a Part object`);
    }
  });
  return {
    messageId: msg.messageId as string,
    taskId: optionalId(msg, "taskId"),
    contextId: optionalId(msg, "contextId"),
    parts: msg.parts as Part[],
  };
}

/**
 * What a message gives the agent: for an agent with an input schema, the
 * one data part (or a text part holding JSON); for any other, its text parts
 * joined by a line break (a data part as its JSON text). A file part is
 * refused: this server reads text and data only.
 */
export function inputOf(agent: Agent, parts: readonly Part[], asText = false): Json {
  parts.forEach((p, i) => {
    if (p.url !== undefined || p.raw !== undefined) {
      throw new A2aError(
        "ContentTypeNotSupportedError",
        `'message.parts[${i}]' is a file (${
          p.mediaType ?? "no media type"
        }): agent ${agent.name} takes text ` +
          `and data parts only`,
        { field: `message.parts[${i}]` },
      );
    }
  });
  if (agent.input && !asText && parts.length === 1 && parts[0].data !== undefined) {
    return parts[0].data as Json;
  }
  const texts = parts.map((p, i) => {
    if (typeof p.text === "string") return p.text;
    if (p.data !== undefined) return JSON.stringify(p.data);
    throw invalid(`message.parts[${i}]`, `'message.parts[${i}]' holds no text, data, url or raw content`);
  });
  const text = texts.join("\n");
  if (agent.input && !asText) {
    try {
      return JSON.parse(text) as Json;
    } catch {
      return text; // the agent's schema says what is wrong with it
    }
  }
  return text;
}

/** A task id (`params.id`): a string, or the refusal. */
export function checkTaskId(params: Record<string, unknown>): string {
  const id = params.id;
  if (typeof id !== "string" || id === "") {
    throw invalid("id", `'id' must be a task's id (a string): current value is ${describeValue(id)}`);
  }
  return id;
}

/** `historyLength`: unset, or an integer 0 or more. */
export function checkHistoryLength(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  const n = typeof v === "string" && /^\d+$/.test(v) ? Number(v) : v;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
    throw invalid(
      "historyLength",
      `'historyLength' must be an integer 0 or more: current value is ${describeValue(v)}`,
    );
  }
  return n;
}

/** A list's checked parameters. */
export interface ListParams {
  /** Only this context's tasks. */
  contextId?: string;
  /** Only tasks in this state. */
  status?: TaskState;
  /** Tasks per page. */
  pageSize: number;
  /** Where the page begins among the matching tasks. */
  offset: number;
  /** Messages of history per task (none when unset). */
  historyLength?: number;
  /** Only tasks whose status changed at or after this time. */
  after?: Date;
  /** Whether each task carries its artifacts. */
  includeArtifacts: boolean;
}

/** The page token of the page that begins at `offset`. */
export function pageToken(offset: number): string {
  return btoa(`o:${offset}`);
}

function checkPage(p: Record<string, unknown>, problems: A2aError[]): { pageSize: number; offset: number } {
  const raw = p.pageSize ?? PAGE_SIZE_DEFAULT;
  const pageSize = typeof raw === "string" && /^\d+$/.test(raw) ? Number(raw) : raw;
  const sizeOk = typeof pageSize === "number" && Number.isSafeInteger(pageSize) && pageSize >= 1 &&
    pageSize <= PAGE_SIZE_MAX;
  if (!sizeOk) {
    problems.push(
      invalid(
        "pageSize",
        `'pageSize' must be from 1 to ${PAGE_SIZE_MAX}: current value is ${describeValue(raw)}`,
      ),
    );
  }
  let offset = 0;
  if (p.pageToken !== undefined && p.pageToken !== "") {
    let decoded = "";
    try {
      decoded = typeof p.pageToken === "string" ? atob(p.pageToken) : "";
    } catch { /* not base64: refused below */ }
    const m = /^o:(\d{1,9})$/.exec(decoded);
    if (m) offset = Number(m[1]);
    else {problems.push(
        invalid("pageToken", "'pageToken' is not one this server gave: pass a nextPageToken back as it came"),
      );}
  }
  return { pageSize: sizeOk ? pageSize as number : PAGE_SIZE_DEFAULT, offset };
}

/** The parameters of a list (`ListTasksRequest`), every problem reported at once. */
export function checkListParams(p: Record<string, unknown>): ListParams {
  const problems: A2aError[] = [];
  const { pageSize, offset } = checkPage(p, problems);
  const status = p.status === undefined || p.status === "" || p.status === "TASK_STATE_UNSPECIFIED"
    ? undefined
    : p.status;
  if (status !== undefined && !(TASK_STATES as readonly unknown[]).includes(status)) {
    problems.push(
      invalid("status", `'status' ${describeValue(status)} is no state: one of ${TASK_STATES.join(", ")}`),
    );
  }
  let historyLength: number | undefined;
  try {
    historyLength = checkHistoryLength(p.historyLength);
  } catch (err) {
    problems.push(err as A2aError);
  }
  const afterRaw = p.statusTimestampAfter;
  const after = typeof afterRaw === "string" && afterRaw !== "" ? new Date(afterRaw) : undefined;
  if (
    (afterRaw !== undefined && afterRaw !== "" && typeof afterRaw !== "string") ||
    Number.isNaN(after?.getTime())
  ) {
    problems.push(
      invalid(
        "statusTimestampAfter",
        `'statusTimestampAfter' must be an ISO 8601 time: current value is ${describeValue(afterRaw)}`,
      ),
    );
  }
  const inc = p.includeArtifacts;
  if (inc !== undefined && typeof inc !== "boolean" && inc !== "true" && inc !== "false") {
    problems.push(
      invalid(
        "includeArtifacts",
        `'includeArtifacts' must be true or false: current value is ${describeValue(inc)}`,
      ),
    );
  }
  const contextId = typeof p.contextId === "string" && p.contextId !== "" ? p.contextId : undefined;
  if (problems.length > 0) {
    if (problems.length === 1) throw problems[0];
    throw new A2aError("InvalidParamsError", problems.map((e) => e.message).join("; "), {
      field: problems.map((e) => e.field).join(","),
    });
  }
  return {
    contextId,
    status: status as TaskState | undefined,
    pageSize,
    offset,
    historyLength,
    after,
    includeArtifacts: inc === true || inc === "true",
  };
}
