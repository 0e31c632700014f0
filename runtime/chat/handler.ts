/**
 * A chat over the AI SDK's UI message stream: a fetch handler a user mounts
 * in `Deno.serve` or Hono, that `useChat`'s default transport (and Vercel's
 * durable `WorkflowChatTransport`) talk to. A chat is a conversation run
 * (an agent with `conversation`); its run id is derived from the chat id.
 *
 * ```text
 * POST {api}                              {id, messages, trigger, messageId}: send the last user message,
 *                                         answer with its turn's UI message stream
 * GET  {api}/{chatId}/stream[?startIndex=N]   the current turn's stream from chunk N (negative: the last N);
 *                                         204 when nothing streams and no index is given
 * POST {api}/{chatId}/approvals/{key}     {approved, reason?}: answer a call that waits for a person
 * ```
 *
 * @module
 */

import type { Agent } from "../agent/agent.ts";
import type { Client } from "../client/client.ts";
import { ClientError, hasCode, RuntimeError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { REFUSED_INPUT_CODES } from "../client/checks.ts";
import { Feeds } from "./feed.ts";
import { uiMessageStreamResponse } from "./ui_stream.ts";
import { type ChatRequest, parseChatRequest, readJsonBody } from "./request.ts";
import { afterRequests, untilAsked } from "./pause.ts";
import { answerMessageId, type UIChunk } from "./chunks.ts";

/** Options of {@link chatHandler}. */
export interface ChatHandlerOptions {
  /** The client the chats' runs are started, sent to and followed through. */
  client: Client;
  /** The conversing agent a new chat starts a run of; without it only existing runs are chatted with. */
  agent?: Agent;
  /** The path the routes hang under. Default `/api/chat`. */
  api?: string;
  /** The run id of a chat id. Default: the chat id itself. */
  runIdFor?: (chatId: string) => string;
  /** Who answers an approval, recorded with it (`by`). Default `"chat"`. */
  approver?: (req: Request) => string | undefined;
  /** The largest body read, in bytes. Default `DEFAULTS.chatBodyBytesMax` (16 MiB). */
  bodyBytesMax?: number;
  /** How long a turn nobody reads keeps being followed, in ms. Default `DEFAULTS.chatLingerMs`. */
  lingerMs?: number;
}

/** The handler: a Response for its routes, undefined for any other request; `close` stops its watchers. */
export interface ChatHandler {
  (req: Request): Promise<Response | undefined>;
  /** Stops every turn it follows and waits for their watchers to end. */
  close(): Promise<void>;
}

/** The header carrying the chat's run id (Vercel's durable transport reads `x-workflow-run-id`). */
export const RUN_ID_HEADER = "x-run-id";

/** A refusal as JSON, with the status that fits its code. */
function refusal(err: RuntimeError): Response {
  const status =
    err.code === "RUN_NOT_FOUND" || err.code === "CHAT_NOT_FOUND" || err.code === "APPROVAL_NOT_FOUND"
      ? 404
      : err.code === "CHAT_INVALID" || hasCode(err, REFUSED_INPUT_CODES)
      ? 400
      : 409;
  const field = (err as RuntimeError & { field?: string }).field;
  return Response.json({ code: err.code, message: err.message, ...(field ? { field } : {}) }, { status });
}

/**
 * Makes the chat handler (see the module's notes). Mount it as
 * `Deno.serve((req) => h(req) ?? ...)` or in Hono as
 * `app.all("/api/chat/*", async (c) => await h(c.req.raw) ?? c.notFound())`
 * (and `app.post("/api/chat", ...)`).
 *
 * @example A chat endpoint beside a worker, in one process
 * ```ts
 * import { connect, defineAgent } from "../../mod.ts";
 * import { chatHandler } from "./chat.ts"; // the package's "/chat" path
 *
 * const agent = defineAgent({
 *   name: "echo",
 *   tools: [],
 *   conversation: { idleMs: 60_000 },
 *   model: { describe: "echo", decide: () => Promise.resolve({ kind: "done", text: "hi" }) },
 * });
 * const client = await connect({ memory: true });
 * const handle = chatHandler({ client, agent });
 * const res = await handle(new Request("http://x/api/chat/nobody/stream"));
 * await handle.close();
 * await client.close();
 * if (res?.status !== 404) throw new Error(`unexpected ${res?.status}`);
 * ```
 */
export function chatHandler(opts: ChatHandlerOptions): ChatHandler {
  const api = (opts.api ?? "/api/chat").replace(/\/+$/, "");
  const feeds = new Feeds(opts.client, opts.lingerMs ?? DEFAULTS.chatLingerMs);
  const chat = new ChatRoutes(opts, feeds);
  const handle = async (req: Request): Promise<Response | undefined> => {
    const path = new URL(req.url).pathname;
    if (path !== api && !path.startsWith(`${api}/`)) return undefined;
    const rest = path.slice(api.length).split("/").filter((p) => p !== "").map(decodeURIComponent);
    try {
      if (rest.length === 0 && req.method === "POST") return await chat.post(req);
      if (rest.length === 2 && rest[1] === "stream" && req.method === "GET") {
        return await chat.resume(rest[0], new URL(req.url).searchParams.get("startIndex"), req.signal);
      }
      if (rest.length === 3 && rest[1] === "approvals" && req.method === "POST") {
        return await chat.approve(req, rest[0], rest[2]);
      }
      return undefined;
    } catch (err) {
      if (err instanceof RuntimeError) return refusal(err);
      throw err;
    }
  };
  return Object.assign(handle, { close: () => feeds.close() });
}

/** The routes' work, over one client and one set of feeds. */
class ChatRoutes {
  constructor(private readonly opts: ChatHandlerOptions, private readonly feeds: Feeds) {}

  #runId(chatId: string): string {
    return this.opts.runIdFor ? this.opts.runIdFor(chatId) : chatId;
  }

  /**
   * Streams turn `turn` of `runId` from chunk `from`, until its end or a call waiting for a person's approval
   * (pause.ts); `continued`: a `start` first, the message continued from a chunk after its own `start`.
   */
  #stream(runId: string, turn: number, from: number, signal: AbortSignal, continued = false): Response {
    const feed = this.feeds.get(runId, turn);
    const stillAsked = async (keys: string[]) =>
      (await this.opts.client.operators.approvals(runId)).some((a) =>
        a.status === "pending" && keys.includes(a.idempotency_key)
      );
    const chunks = untilAsked(feed, from, stillAsked, signal);
    return uiMessageStreamResponse(continued ? startThen(answerMessageId(runId, turn), chunks) : chunks, {
      [RUN_ID_HEADER]: runId,
      "x-workflow-run-id": runId,
      "x-chat-turn": String(turn),
    });
  }

  async post(req: Request): Promise<Response> {
    const body = await readJsonBody(req, this.opts.bodyBytesMax ?? DEFAULTS.chatBodyBytesMax);
    const chatReq = parseChatRequest(body);
    const runId = this.#runId(chatReq.chatId);
    for (const a of chatReq.approvals) {
      if (!a.approvalId.startsWith(`${runId}:`)) {
        throw new ClientError(
          "APPROVAL_NOT_FOUND",
          `Approval ${a.approvalId} is not of chat ${chatReq.chatId} (run ${runId}): answer it in its own chat`,
        );
      }
    }
    for (const a of chatReq.approvals) {
      // An answer given already (a retried POST) is the same answer: nothing to do.
      await this.#answer(req, a.approvalId, a.approved, a.reason).catch((err) => {
        if (!(err instanceof ClientError && err.code === "NOT_PENDING")) throw err;
      });
    }
    if (chatReq.message === undefined || chatReq.trigger === "regenerate-message") {
      // An answer to approvals, or a regenerate: the turn under way (a journaled answer is not asked again).
      const run = await this.opts.client.get(runId);
      if (!run) {
        throw new ClientError("CHAT_NOT_FOUND", `No chat ${chatReq.chatId}: send a user message first`);
      }
      const turn = (run.conversation?.messages ?? 1) - 1;
      if (chatReq.message === undefined && chatReq.approvals.length > 0) {
        // The answer to the approvals the last response stopped at: the same message, from the chunk after them.
        const keys = chatReq.approvals.map((a) => a.approvalId);
        const after = await afterRequests(this.feeds.get(runId, turn), keys, req.signal);
        if (after !== undefined) return this.#stream(runId, turn, after, req.signal, true);
      }
      return this.#stream(runId, turn, 0, req.signal);
    }
    const turn = await this.#send(runId, chatReq);
    return this.#stream(runId, turn, 0, req.signal);
  }

  /** Sends the message (a new chat starts its run): its turn, the same for a retried message id. */
  async #send(
    runId: string,
    chatReq: ChatRequest & { message?: { id: string; text: string } },
  ): Promise<number> {
    const { client, agent } = this.opts;
    const message = chatReq.message!;
    const existing = await client.get(runId);
    if (!existing) {
      if (!agent) {
        throw new ClientError(
          "CHAT_NOT_FOUND",
          `No chat ${chatReq.chatId} (run ${runId}), and this handler starts none: give chatHandler an agent`,
        );
      }
      try {
        const labels = LABEL_VALUE.test(message.id) ? { [FIRST_MESSAGE_LABEL]: message.id } : undefined;
        await client.start(agent, { runId, input: message.text, labels });
        return 0;
      } catch (err) {
        if (!(err instanceof ClientError && err.code === "RUN_EXISTS")) throw err;
        // Started meanwhile (a retried POST racing the first): decided below as for an existing run.
      }
    }
    const run = existing ?? await client.get(runId);
    if (run?.labels?.[FIRST_MESSAGE_LABEL] === message.id) return 0;
    const sent = await client.conversations.send(runId, message.text, { messageId: message.id });
    return sent.seq;
  }

  async resume(chatId: string, startIndex: string | null, signal: AbortSignal): Promise<Response> {
    let from = 0;
    if (startIndex !== null) {
      from = Number(startIndex);
      if (!/^-?\d{1,9}$/.test(startIndex)) {
        throw Object.assign(
          new ClientError(
            "CHAT_INVALID",
            `startIndex must be an integer (negative: the last N chunks): current value is ${
              JSON.stringify(startIndex)
            }`,
          ),
          { field: "startIndex" },
        );
      }
    }
    let runId = this.#runId(chatId);
    let run = await this.opts.client.get(runId);
    // Vercel's durable transport resumes at {api}/{runId}/stream: the id may be the run's.
    if (!run && runId !== chatId) run = await this.opts.client.get(runId = chatId);
    if (!run) throw new ClientError("CHAT_NOT_FOUND", `No chat ${chatId}: 'POST' a message to start it`);
    const turn = (run.conversation?.messages ?? 1) - 1;
    const answered = run.conversation?.idle === true || ["done", "failed", "cancelled"].includes(run.status);
    if (startIndex === null && answered) return new Response(null, { status: 204 });
    return this.#stream(runId, turn, from, signal);
  }

  async approve(req: Request, chatId: string, key: string): Promise<Response> {
    const body = await readJsonBody(req, 64 * 1024) as Record<string, unknown>;
    if (typeof body?.approved !== "boolean") {
      throw Object.assign(
        new ClientError(
          "CHAT_INVALID",
          `An answer is {"approved": true|false, "reason"?: "..."}: approved is missing`,
        ),
        { field: "approved" },
      );
    }
    const reason = typeof body.reason === "string" ? body.reason : undefined;
    const runId = this.#runId(chatId);
    if (!key.startsWith(`${runId}:`)) {
      throw new ClientError("APPROVAL_NOT_FOUND", `Call ${key} is not of chat ${chatId} (run ${runId})`);
    }
    const row = await this.#answer(req, key, body.approved, reason);
    return Response.json({ key: row.idempotency_key, status: row.status, runStatus: row.run_status });
  }

  #answer(req: Request, key: string, approved: boolean, reason?: string) {
    const by = this.opts.approver?.(req) ?? "chat";
    return approved
      ? this.opts.client.operators.approve(key, { by })
      : this.opts.client.operators.deny(key, { by, reason: reason ?? "denied in the chat" });
  }
}

/** A `start` chunk for message `messageId`, then `chunks`. */
async function* startThen(
  messageId: string,
  chunks: AsyncGenerator<UIChunk, void, undefined>,
): AsyncGenerator<UIChunk, void, undefined> {
  yield { type: "start", messageId };
  yield* chunks;
}

/** The label a chat's run carries its first message's id in (the goal has no message id of its own). */
export const FIRST_MESSAGE_LABEL = "chat.first-message";
const LABEL_VALUE = /^[A-Za-z0-9._:-]{1,64}$/;
