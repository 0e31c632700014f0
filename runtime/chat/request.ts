/**
 * What a chat POST carries (the default transport's body: `{ id, messages,
 * trigger, messageId, ... }`), read and checked: the chat id, the last user
 * message (its id and its text parts joined), the trigger, and the approvals
 * answered in the last assistant message (`addToolApprovalResponse`).
 *
 * @module
 */

import { ClientError } from "../base/errors.ts";

/** A chat POST, checked. */
export interface ChatRequest {
  /** The chat's id. */
  chatId: string;
  /** `submit-message` or `regenerate-message`. */
  trigger: "submit-message" | "regenerate-message";
  /** The last message when it is the user's: its id and text. */
  message?: { id: string; text: string };
  /** Approvals answered in the last message when it is the assistant's. */
  approvals: { approvalId: string; approved: boolean; reason?: string }[];
}

/** A refusal naming the field that was wrong. */
function invalid(field: string, message: string): ClientError {
  return Object.assign(new ClientError("CHAT_INVALID", message), { field });
}

/** The body read as JSON, at most `maxBytes` bytes, UTF-8 only. */
export async function readJsonBody(req: Request, maxBytes: number): Promise<unknown> {
  const reader = req.body?.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  // Bounded by maxBytes: reading stops past it.
  while (reader) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > maxBytes) {
      await reader.cancel();
      throw invalid("body", `The body is larger than ${maxBytes} bytes`);
    }
    parts.push(value);
  }
  const bytes = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw invalid("body", "The body is not UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalid("body", "The body is not JSON");
  }
}

/** The text of a message's text parts, joined. */
function textOf(parts: unknown[]): string {
  return parts
    .filter((p): p is { type: "text"; text: string } =>
      typeof p === "object" && p !== null && (p as { type?: unknown }).type === "text" &&
      typeof (p as { text?: unknown }).text === "string"
    )
    .map((p) => p.text)
    .join("");
}

/** The approvals answered in an assistant message's tool parts. */
function approvalsOf(parts: unknown[]): ChatRequest["approvals"] {
  const out: ChatRequest["approvals"] = [];
  for (const p of parts) {
    if (typeof p !== "object" || p === null) continue;
    const part = p as { type?: unknown; state?: unknown; approval?: Record<string, unknown> };
    const isTool = typeof part.type === "string" &&
      (part.type.startsWith("tool-") || part.type === "dynamic-tool");
    const a = part.approval;
    if (!isTool || part.state !== "approval-responded" || !a) continue;
    if (typeof a.id !== "string" || typeof a.approved !== "boolean") continue;
    out.push({
      approvalId: a.id,
      approved: a.approved,
      ...(typeof a.reason === "string" ? { reason: a.reason } : {}),
    });
  }
  return out;
}

/** Checks a chat POST's body; `CHAT_INVALID` naming the field otherwise. */
export function parseChatRequest(body: unknown): ChatRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw invalid("body", `A chat request is {"id", "messages", "trigger"}: the body is not an object`);
  }
  const b = body as Record<string, unknown>;
  if (typeof b.id !== "string" || b.id === "") {
    throw invalid(
      "id",
      `'id' (the chat's id) must be a non-empty string: current value is ${JSON.stringify(b.id)}`,
    );
  }
  const trigger = b.trigger ?? "submit-message";
  if (trigger !== "submit-message" && trigger !== "regenerate-message") {
    throw invalid(
      "trigger",
      `'trigger' must be submit-message or regenerate-message: current value is ${JSON.stringify(trigger)}`,
    );
  }
  if (!Array.isArray(b.messages) || b.messages.length === 0) {
    throw invalid("messages", "'messages' must be a non-empty array of UI messages");
  }
  const last = b.messages[b.messages.length - 1] as Record<string, unknown> | null;
  const parts = last && Array.isArray(last.parts) ? last.parts : undefined;
  if (!last || typeof last !== "object" || !parts) {
    throw invalid("messages", "the last message must be a UI message with 'parts'");
  }
  const out: ChatRequest = { chatId: b.id, trigger, approvals: [] };
  if (last.role === "assistant") {
    out.approvals = approvalsOf(parts);
    return out;
  }
  if (last.role !== "user") {
    throw invalid(
      "messages",
      `the last message's role must be user or assistant: current value is ${JSON.stringify(last.role)}`,
    );
  }
  if (typeof last.id !== "string" || last.id === "") {
    throw invalid(
      "messages",
      "the last message's 'id' must be a non-empty string (it is the message's id: a retry is one message)",
    );
  }
  const text = textOf(parts);
  if (text.trim() === "") throw invalid("messages", "the last message has no text part");
  out.message = { id: last.id, text };
  return out;
}
