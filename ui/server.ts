/**
 * The web page's server: a Hono app over the same {@link Client} as the CLI,
 * serving a JSON API and the page's own static files (no build step, no
 * CDN). Bound to loopback it needs no token (a token given is still
 * required); bound anywhere else it refuses to start without one. Read-only,
 * it refuses every action.
 *
 * ```text
 * GET  /                          the runs list      GET /runs/:id     a run's timeline
 * GET  /api/runs?status=&agent=&search=&page=&limit=
 * GET  /api/runs/:id?limit=N      the run, its totals and its last N steps (default 50), long values clipped
 * GET  /api/runs/:id?from=S       the steps from S on (what changed since a page last looked)
 * GET  /api/runs/:id?before=S     the N steps before S (a page loading earlier steps)
 * GET  /api/runs/:id/value?field=F&seq=S   one clipped value whole
 * GET  /api/runs/:id/stream       server-sent events: the run's history, then its answers as they are written
 * GET  /static/display.js         the display rule of runtime/base/display.ts, for the page
 * POST /api/runs/:id/cancel       POST /api/runs/:id/reopen
 * POST /api/calls/:key/resolve    {"action":"result","result":...} | {"action":"retry"} | {"action":"fail","reason":"..."}
 * GET  /a2a/:agent/.well-known/agent-card.json    POST /a2a/:agent   an agent of `a2a` over A2A 1.0 (docs/a2a.md)
 * ```
 *
 * What a request names (a run id, a call's key, a message id, a filter) is
 * checked by the client, by the one rule of runtime/base/ids.ts: a refusal of what
 * was given answers 400 with the client's code, never 500. A body is read up
 * to {@link BODY_BYTES_MAX} bytes (413 past it, reading stopped) and must be
 * UTF-8 JSON: no byte is read as U+FFFD, so two different ids never arrive as one.
 *
 * @module
 */

import { Hono } from "npm:hono@4.13.19";
import type { Context, Next } from "npm:hono@4.13.19";
import { type Client } from "../runtime/client/client.ts";
import { ClientError } from "../runtime/base/errors.ts";
import { MESSAGE_CHARS_MAX, type Resolution, type RunTimeline } from "../runtime/client/shapes.ts";
import { checkRunId, REFUSED_INPUT_CODES } from "../runtime/client/checks.ts";
import { RUN_STATUSES, type RunSummary } from "../runtime/store/store.ts";
import { type CodeOf, hasCode, ownCode, RuntimeError } from "../runtime/base/errors.ts";
import { ID_RULE, idProblem } from "../runtime/base/ids.ts";
import { displayScript } from "../runtime/base/display.ts";
import { WHOLE_VALUE_FIELDS, type WholeValueField } from "../runtime/store/overview.ts";
import { isRunStatus, OPEN_RUN_STATUSES } from "../runtime/store/store.ts";
import type { Json } from "../runtime/agent/tools.ts";
import type { StreamEvent } from "../runtime/run/stream.ts";
import { buildTimeline } from "./timeline.ts";
import { versionWait } from "../runtime/client/version_wait.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import { a2aHandler } from "../runtime/a2a/a2a.ts";
import { chatHandler } from "../runtime/chat/chat.ts";
import type { McpHandler } from "../runtime/mcp_server/mcp_server.ts";
// Imported as text, not read from disk: the files come with the module wherever it is loaded from (a
// checkout, a package download from JSR, a compiled binary).
import APP_JS from "./static/app.js" with { type: "text" };
import INDEX_HTML from "./static/index.html" with { type: "text" };
import STYLE_CSS from "./static/style.css" with { type: "text" };

/** The page's own refusals (a refusal of the client it passes on keeps the client's code). */
export const UI_ERROR_CODES = [
  "UI_BAD_REQUEST",
  "UI_BODY_TOO_LARGE",
  "UI_HOST_REFUSED",
  "UI_INTERNAL",
  "UI_NOT_FOUND",
  "UI_READ_ONLY",
  "UI_TOKEN_REQUIRED",
] as const;

/** The page refused a request or a setting; `code` says which. */
export class UiError extends RuntimeError {
  /** One of {@link UI_ERROR_CODES}, or the client's refusal it passes on. */
  declare readonly code: typeof UI_ERROR_CODES[number] | CodeOf<"ClientError">;
  /** The HTTP status it answers with. */
  readonly status: number;
  /** Creates a refusal. */
  constructor(code: typeof UI_ERROR_CODES[number] | CodeOf<"ClientError">, message: string, status = 400) {
    super(ownCode(code), message);
    this.name = "UiError";
    this.status = status;
  }
}

/** Options of {@link createUiApp}. */
export interface UiOptions {
  /** The client every read and action goes through. */
  client: Client;
  /** Required on every request when set (`Authorization: Bearer`, `?token=`, or the cookie it sets). */
  token?: string;
  /** Refuse cancel, reopen and resolve. */
  readOnly?: boolean;
  /** Recorded as who resolved or cancelled. Default `ui`. */
  actor?: string;
  /** Host names accepted in the `Host` header when no token is set (DNS-rebinding guard). */
  allowedHosts?: string[];
  /** Agents served over A2A 1.0 at `/a2a/<name>` (docs/a2a.md), under the page's token; not on a read-only page. */
  a2a?: Agent[];
  /**
   * An MCP server to serve at `/mcp` (`mcpHandler` of the `./mcp-server` path), behind the page's token and
   * host check; closed with the page by {@link serveUi}.
   */
  mcp?: McpHandler;
  /**
   * A conversing agent (one with `conversation`) a person may start a new chat with from the page: the chat
   * route (`POST /api/chat`) starts a run of it for a chat id it does not know, and the runs list offers a
   * "new chat" box. Without it the page chats only with runs that exist. Not on a read-only page.
   */
  chatAgent?: Agent;
}

// A Map, not an object literal: a name such as `constructor` or `toString` is then no file.
const STATIC: ReadonlyMap<string, string> = new Map([
  ["app.js", "text/javascript; charset=utf-8"],
  ["display.js", "text/javascript; charset=utf-8"],
  ["style.css", "text/css; charset=utf-8"],
  ["index.html", "text/html; charset=utf-8"],
]);
const COOKIE = "agent_runtime_token";
/** Values longer than this many characters reach the page clipped, with a way to see them whole. */
export const CLIP_CHARS = 2_000;

/** The messages of a conversation a run's JSON carries: its last ones (`/api/runs/:id/messages?from=N` pages). */
export const CONVERSATION_TURNS = 50;
/** Steps a run's page gets at first, and per "earlier steps". */
export const STEPS_PER_PAGE = 50;
/**
 * The most bytes of a request body the page reads (413 `UI_BODY_TOO_LARGE`
 * past it): the longest message ({@link MESSAGE_CHARS_MAX} characters), each
 * written as a six-byte JSON escape, with 64 KiB for the rest of the body.
 */
export const BODY_BYTES_MAX = 6 * MESSAGE_CHARS_MAX + 64 * 1024;

/** A host without the brackets an IPv6 address has in a URL (`[::1]` is `::1`). */
function bareHost(host: string): string {
  return host.replace(/^\[(.*)\]$/, "$1");
}

/** True for loopback host names and addresses. */
export function isLoopback(host: string): boolean {
  const h = bareHost(host).toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** One event as server-sent text: its type as the event name, the event as JSON, long values clipped. */
export function sseEvent(e: StreamEvent): string {
  const clip = (v: Json | null): Json | null => {
    if (v === null) return null;
    const text = typeof v === "string" ? v : JSON.stringify(v);
    return text.length > CLIP_CHARS ? { clipped: text.slice(0, CLIP_CHARS), chars: text.length } : v;
  };
  let shown: unknown = e;
  if (e.type === "answer" && e.text.length > CLIP_CHARS) {
    shown = { ...e, text: e.text.slice(0, CLIP_CHARS), clipped: true, chars: e.text.length };
  } else if (e.type === "tool_result") {
    shown = { ...e, result: clip(e.result), error: e.error && e.error.slice(0, CLIP_CHARS) };
  } else if (e.type === "tool_calls") {
    shown = { ...e, calls: e.calls.map((call) => ({ ...call, args: clip(call.args) })) };
  }
  // JSON has no raw line break in it, so one data line holds the whole event.
  return `event: ${e.type}\ndata: ${JSON.stringify(shown)}\n\n`;
}

/** Compares two strings in time independent of where they differ. */
function sameSecret(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

function loadStatic(): Map<string, string> {
  return new Map([
    ["app.js", APP_JS],
    ["style.css", STYLE_CSS],
    ["index.html", INDEX_HTML],
    // The CLI's own rule, so the page shows hidden characters exactly as `inspect` does.
    ["display.js", displayScript()],
  ]);
}

function refuse(c: Context, err: UiError): Response {
  return c.json({ code: err.code, message: err.message }, err.status as 400);
}

/** Closes what an app built by {@link createUiApp} holds open (its chat watchers). */
export async function closeUiApp(app: Hono): Promise<void> {
  await (app as Hono & { closeHeld?: () => Promise<void> }).closeHeld?.();
}

/** Builds the app (its static files are the module's own, imported as text). */
export function createUiApp(opts: UiOptions): Promise<Hono> {
  const { client } = opts;
  const actor = opts.actor ?? "ui";
  // Who acts is recorded with every action: refused here, at start, not on each request.
  const actorProblem = idProblem(actor);
  if (actorProblem !== undefined) {
    return Promise.reject(
      new UiError(
        "ID_INVALID",
        `The page's actor (--by) ${JSON.stringify(actor)} is refused: ${actorProblem}. A name is ${ID_RULE}`,
      ),
    );
  }
  const files = loadStatic();
  // The agent a new chat starts a run of (none on a read-only page: a chat acts).
  const chatAgent = opts.readOnly ? undefined : opts.chatAgent;
  const app = new Hono();
  // What the app holds open (the chat's watchers), closed with the server (closeUiApp).
  const closers: (() => Promise<void>)[] = [];
  Object.assign(app, { closeHeld: () => Promise.all(closers.map((close) => close())).then(() => {}) });

  app.onError((err, c) => {
    if (err instanceof UiError) return refuse(c, err);
    if (err instanceof ClientError) {
      const status = err.code === "RUN_NOT_FOUND" || err.code === "CALL_NOT_FOUND"
        ? 404
        : hasCode(err, REFUSED_INPUT_CODES)
        ? 400
        : 409;
      return refuse(c, new UiError(err.code, err.message, status));
    }
    // The error itself goes to the log only: a database's or a driver's text is not the caller's to read.
    console.error("ui: request failed:", err);
    return c.json(
      {
        code: "UI_INTERNAL" satisfies UiError["code"],
        message: "The page failed to answer this request; its log says why",
      },
      500,
    );
  });

  // Who may ask: the token when one is set; otherwise only a loopback Host,
  // so a web page elsewhere cannot reach this one through DNS rebinding.
  app.use("*", async (c: Context, next: Next) => {
    if (opts.token) {
      const bearer = c.req.header("authorization")?.replace(/^Bearer\s+/i, "");
      const query = c.req.query("token");
      const cookie = (c.req.header("cookie") ?? "").split(/;\s*/).find((p) => p.startsWith(`${COOKIE}=`))
        ?.slice(COOKIE.length + 1);
      const given = bearer ?? query ?? (cookie ? decodeURIComponent(cookie) : undefined);
      if (!given || !sameSecret(given, opts.token)) {
        throw new UiError(
          "UI_TOKEN_REQUIRED",
          "This page needs its token: open it with ?token=TOKEN or send 'Authorization: Bearer TOKEN'",
          401,
        );
      }
      await next();
      // A token given in the address becomes a cookie, so the page's own requests carry it.
      if (query) {
        c.header(
          "set-cookie",
          `${COOKIE}=${encodeURIComponent(query)}; Path=/; HttpOnly; SameSite=Strict`,
        );
      }
      return;
    }
    const host = (c.req.header("host") ?? "").replace(/:\d+$/, "");
    if (!isLoopback(host) && !(opts.allowedHosts ?? []).includes(host)) {
      throw new UiError("UI_HOST_REFUSED", `Host ${JSON.stringify(host)} is not this page's address`, 403);
    }
    await next();
  });

  // Actions: JSON bodies only (a cross-site form cannot send one without a preflight), and never read-only.
  app.use("/api/*", async (c: Context, next: Next) => {
    if (c.req.method === "POST") {
      if (opts.readOnly) {
        throw new UiError(
          "UI_READ_ONLY",
          "This page was started with --read-only: it shows runs, nothing more",
          403,
        );
      }
      if (!(c.req.header("content-type") ?? "").startsWith("application/json")) {
        throw new UiError("UI_BAD_REQUEST", "Actions take a JSON body (content-type: application/json)", 415);
      }
    }
    await next();
  });

  // ---- A2A (issue 37): each agent of `opts.a2a` over A2A 1.0 at /a2a/<name> (runtime/a2a/, docs/a2a.md). Behind
  // the token rule above, as every route; its card says so. Not on a read-only page: a send and a cancel act.
  for (const agent of opts.readOnly ? [] : opts.a2a ?? []) {
    const serve = a2aHandler({
      client,
      agent,
      basePath: `/a2a/${agent.name}`,
      actor,
      card: opts.token
        ? {
          securitySchemes: {
            pageToken: {
              httpAuthSecurityScheme: { scheme: "Bearer", description: "The page's token (--token)" },
            },
          },
          securityRequirements: [{ schemes: { pageToken: { list: [] } } }],
        }
        : undefined,
    });
    app.all(`/a2a/${agent.name}`, (c) => serve(c.req.raw));
    app.all(`/a2a/${agent.name}/*`, (c) => serve(c.req.raw));
  }
  // ---- end of A2A ----
  // ---- MCP (issue 37): the agents as an MCP server at /mcp, when given one; the token and host check
  // above apply to it as to every route, and the handler checks Host and Origin itself as well.
  const mcp = opts.mcp;
  if (mcp) app.all("/mcp", (c) => mcp(c.req.raw));
  // ---- end of MCP

  const page = (c: Context) => {
    c.header("cache-control", "no-store");
    c.header("content-security-policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    return c.html(files.get("index.html")!);
  };
  app.get("/", page);
  app.get("/runs/:id", page);
  app.get("/evals/:id", page);
  app.get("/static/:file", (c) => {
    const name = c.req.param("file");
    const type = STATIC.get(name);
    if (!type || name === "index.html") return c.text("not found", 404);
    c.header("content-type", type);
    c.header("cache-control", "no-cache");
    return c.body(files.get(name)!);
  });

  app.get("/api/runs", async (c) => {
    const q = c.req.query();
    const status = q.status || undefined;
    if (status !== undefined && !isRunStatus(status)) {
      throw new UiError(
        "UI_BAD_REQUEST",
        `status must be one of ${RUN_STATUSES.join(", ")}: current value is ${status}`,
      );
    }
    const limit = boundedInt(q.limit, "limit", 25, 200);
    const page = boundedInt(q.page, "page", 1, 100_000);
    const filter = {
      status,
      agent: q.agent || undefined,
      search: q.search || undefined,
    };
    const { runs, total } = await client.reads.list({ ...filter, limit, offset: (page - 1) * limit });
    const { counts, agents, tokens } = await client.reads.overview({
      agent: filter.agent,
      search: filter.search,
      runIds: runs.map((r) => r.run_id),
    });
    // Which limit each run asleep on a timer waits for, and the limits' keys (none declared: one
    // statement that finds nothing).
    const waitingFor = await client.reads.waitingFor(
      runs.filter((r) => r.status === "waiting" && r.wake_at).map((r) => r.run_id),
    );
    const limits = await client.reads.limits();
    const now = client.clock.now().getTime();
    const live = await client.reads.hostedVersions();
    const staleBefore = new Date(now - DEFAULTS.leaseMs);
    return c.json({
      now: new Date(now).toISOString(),
      readOnly: opts.readOnly === true,
      // The agent a "new chat" starts a run of, when the page was given one.
      newChat: chatAgent ? { agent: chatAgent.name } : null,
      total,
      page,
      pages: Math.max(1, Math.ceil(total / limit)),
      // The filter's choices, from the one list (the page spells none of its own).
      statuses: RUN_STATUSES,
      counts,
      agents,
      runs: runs.map((r) => ({
        runId: r.run_id,
        agent: r.agent,
        version: r.agent_version ?? null,
        mayMove: r.may_move ?? false,
        moveTo: r.move_to ?? null,
        // Why no live worker takes it, when none does (a version nobody hosts).
        noWorker: versionWait(r, live, staleBefore) ?? null,
        status: r.status,
        parentRunId: r.parent_run_id ?? null,
        epoch: r.epoch,
        owner: r.owner,
        toolCalls: r.tool_calls,
        llmCalls: r.llm_calls,
        flagged: r.flagged,
        inputTokens: tokens.get(r.run_id)?.input ?? 0,
        outputTokens: tokens.get(r.run_id)?.output ?? 0,
        createdAt: new Date(r.created_at).toISOString(),
        ageMs: now - new Date(r.created_at).getTime(),
        heartbeatAgeMs: r.heartbeat_at && (r.status === "running" || r.status === "pending")
          ? now - new Date(r.heartbeat_at).getTime()
          : null,
        wakeAt: r.wake_at ? new Date(r.wake_at).toISOString() : null,
        waitingFor: waitingFor.get(r.run_id) ?? [],
      })),
      limits: limits.map((k) => ({
        key: k.key,
        limit: k.described,
        inFlight: k.in_flight,
        lastMinute: k.last_minute,
        waiting: k.waiting,
        heldUntil: k.hold_until && new Date(k.hold_until).getTime() > now
          ? new Date(k.hold_until).toISOString()
          : null,
        holds: k.holds,
      })),
    });
  });

  // The schedules, each with its next occurrence and its last runs (the list page shows them under the runs).
  app.get("/api/schedules", async (c) => {
    const lastRuns = boundedInt(c.req.query().lastRuns, "lastRuns", 5, 100);
    const schedules = await client.schedules.list({ lastRuns });
    return c.json({
      schedules: schedules.map((s) => ({
        name: s.name,
        agent: s.agent,
        cron: s.cron,
        every: s.every,
        zone: s.zone,
        overlap: s.overlap,
        catchUp: s.catchUp,
        enabled: s.enabled,
        nextAt: s.nextAt?.toISOString() ?? null,
        queuedAt: s.queuedAt?.toISOString() ?? null,
        skipped: s.skipped,
        lastRuns: s.lastRuns.map((r) => ({ ...r, scheduledAt: r.scheduledAt.toISOString() })),
      })),
    });
  });

  // A run's page: the run and a range of its steps. A page asks for its last
  // steps first, then polls for those from the last step it holds on (a step
  // before the run's last never changes: the executor finishes a step before it
  // writes the next), and loads earlier ones when asked.
  app.get("/api/runs/:id", async (c) => {
    const q = c.req.query();
    if (q.from !== undefined && q.before !== undefined) {
      throw new UiError("UI_BAD_REQUEST", "Give from or before, not both");
    }
    const limit = boundedInt(q.limit, "limit", STEPS_PER_PAGE, 500);
    const steps = q.from !== undefined
      ? { from: boundedInt(q.from, "from", 0, 1_000_000_000, 0), limit }
      : q.before !== undefined
      ? { before: boundedInt(q.before, "before", 0, 1_000_000_000, 0), limit }
      : { last: limit };
    const t = await client.reads.timeline(c.req.param("id"), { steps, maxChars: CLIP_CHARS });
    // Calls waiting for a person's yes or no, offered only while the run is open: a closed run's
    // calls are not answered (RUN_CLOSED) until it is reopened.
    const open = OPEN_RUN_STATUSES.includes(t.run.status);
    const approvals = (open ? t.steps.approvals : []).filter((a) => a.status === "pending")
      .map((a) => ({ key: a.idempotency_key, seq: a.seq, tool: a.tool, args: a.args }));
    // The runs its calls started (agentTool): linked from the run's card, as its parent is.
    const children = (await client.reads.children(t.run.run_id)).map((ch) => ({
      runId: ch.runId,
      agent: ch.agent,
      status: ch.status,
      key: ch.parentKey,
    }));
    // Its version, its moves, and why no live worker takes it when none does.
    const row = await client.store.reads.getRun(t.run.run_id);
    const version = row
      ? {
        current: row.agent_version ?? null,
        mayMove: row.may_move ?? false,
        moveTo: row.move_to ?? null,
        movedFrom: row.moved_from ?? null,
        movedAt: row.moved_at ? new Date(row.moved_at).toISOString() : null,
        moveRefused: row.move_refused ?? null,
        waitingFor: versionWait(
          row,
          await client.reads.hostedVersions(),
          new Date(client.clock.now().getTime() - DEFAULTS.leaseMs),
        ) ?? null,
      }
      : null;
    // A fork (docs/fork.md): of which run and step, whether it sends, the evaluation it is a case of.
    const fork = row && (row.forked_from || row.dry_run)
      ? {
        from: row.forked_from ?? null,
        atSeq: row.forked_at_seq ?? null,
        dryRun: row.dry_run === true,
        evalId: row.eval_id ?? null,
      }
      : null;
    return c.json({
      readOnly: opts.readOnly === true,
      now: client.clock.now().toISOString(),
      ...buildTimeline(t),
      version,
      fork,
      approvals,
      children,
      ...(await conversationOf(t.run)),
    });
  });

  // A run's events as server-sent events (client.stream): its history, then text as the model writes
  // it, until the run ends or the page goes away. Long values are clipped as the timeline clips them.
  app.get("/api/runs/:id/stream", async (c) => {
    const stop = new AbortController();
    c.req.raw.signal.addEventListener("abort", () => stop.abort(), { once: true });
    const events = client.stream(c.req.param("id"), { signal: stop.signal });
    // The first event (the run's status at least) before the answer: an unknown run is a 404, not a stream.
    let next: IteratorResult<StreamEvent, void> | undefined = await events.next();
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const got = next ?? await events.next();
        next = undefined;
        if (got.done) {
          controller.enqueue(encoder.encode("event: end\ndata: {}\n\n"));
          controller.close();
          return;
        }
        controller.enqueue(encoder.encode(sseEvent(got.value)));
      },
      async cancel() {
        stop.abort();
        await events.return(undefined);
      },
    });
    return new Response(body, {
      headers: {
        "content-type": "text/event-stream",
        "cache-control": "no-store",
        "x-accel-buffering": "no",
      },
    });
  });

  // A conversation's messages with their answers, the last CONVERSATION_TURNS of them (each text clipped):
  // a poll's cost does not grow with the conversation. `?from=N` pages back.
  const conversationOf = async (run: RunTimeline["run"], from?: number) => {
    if (run.conversation_idle_ms === null || run.conversation_idle_ms === undefined) return {};
    const count = run.message_count ?? 1;
    const fromSeq = from ?? Math.max(0, count - CONVERSATION_TURNS);
    const turns = await client.conversations.answers(run.run_id, { fromSeq, limit: CONVERSATION_TURNS });
    const clip = (text: string | null) =>
      text === null || text.length <= CLIP_CHARS ? text : `${text.slice(0, CLIP_CHARS)}…`;
    return {
      conversation: {
        messages: count,
        idle: run.status === "waiting" && run.idle_since !== null && run.idle_since !== undefined,
        ended: run.conversation_ended_at !== null && run.conversation_ended_at !== undefined,
        idleMs: run.conversation_idle_ms,
        from: fromSeq,
        turns: turns.map((t) => ({ ...t, text: clip(t.text), answer: clip(t.answer) })),
      },
    };
  };

  // ---- chat: the AI SDK's UI message stream (runtime/chat), the page's chat view's one protocol ----
  // POST /api/chat, GET /api/chat/:chatId/stream[?startIndex=N], POST /api/chat/:chatId/approvals/:key.
  // A chat id here is the run's id; a new chat starts a run of `chatAgent` when one is given (`deno task dev`),
  // else the page talks to runs that exist.
  const chat = chatHandler({ client, api: "/api/chat", approver: () => actor, agent: chatAgent });
  const chatRoute = async (c: Context) =>
    (await chat(c.req.raw)) ?? c.json({ code: "UI_NOT_FOUND", message: "No such chat route" }, 404);
  app.post("/api/chat", chatRoute);
  app.all("/api/chat/*", chatRoute);
  closers.push(() => chat.close());
  // ---- end of chat ----

  app.get("/api/runs/:id/messages", async (c) => {
    const t = await client.reads.timeline(c.req.param("id"), { steps: { last: 0 }, maxChars: CLIP_CHARS });
    const from = boundedInt(c.req.query("from"), "from", 0, 1_000_000_000, 0);
    const out = await conversationOf(t.run, from);
    if (!("conversation" in out)) {
      throw new UiError("NOT_A_CONVERSATION", `Run ${t.run.run_id} is not a conversation`, 409);
    }
    return c.json(out.conversation);
  });

  // A conversation's next message, as `client.conversations.send` takes it: {text, messageId} (messageId optional;
  // the same id sent again is one message).
  app.post("/api/runs/:id/messages", async (c) => {
    const body = await jsonBody(c);
    if (typeof body.text !== "string") {
      throw new UiError(
        "UI_BAD_REQUEST",
        `A message is {"text": "...", "messageId": "..."}: text is missing`,
      );
    }
    if (body.messageId !== undefined && typeof body.messageId !== "string") {
      throw new UiError("UI_BAD_REQUEST", "messageId must be a string");
    }
    return c.json(
      await client.conversations.send(c.req.param("id"), body.text, { messageId: body.messageId }),
    );
  });

  // One value the timeline clipped, whole, for a person who asked to see it.
  app.get("/api/runs/:id/value", async (c) => {
    const field = c.req.query("field") ?? "";
    if (!(WHOLE_VALUE_FIELDS as readonly string[]).includes(field)) {
      throw new UiError(
        "UI_BAD_REQUEST",
        `field must be one of ${WHOLE_VALUE_FIELDS.join(", ")}: current value is ${JSON.stringify(field)}`,
      );
    }
    const seq = c.req.query("seq");
    const value = await client.reads.wholeValue(
      c.req.param("id"),
      field as WholeValueField,
      seq === undefined ? undefined : boundedInt(seq, "seq", 0, 1_000_000_000, 0),
    );
    return c.json({ value });
  });

  app.post("/api/runs/:id/cancel", async (c) => {
    const body = await jsonBody(c);
    const reason = typeof body.reason === "string" ? body.reason : undefined;
    return c.json(await client.operators.cancel(c.req.param("id"), { by: actor, reason }));
  });

  app.post("/api/runs/:id/reopen", async (c) => c.json(await client.operators.reopen(c.req.param("id"))));

  // "Fork from here": {atSeq, model?, live?, runId?} as client.fork takes them; a dry run unless live.
  app.post("/api/runs/:id/fork", async (c) => {
    checkRunId(c.req.param("id")); // the id first: a hostile one is refused as such (BAD_RUN_ID)
    const body = await jsonBody(c);
    const atSeq = body.atSeq;
    if (typeof atSeq !== "number" || !Number.isSafeInteger(atSeq) || atSeq < 0) {
      throw new UiError(
        "UI_BAD_REQUEST",
        `atSeq must be an integer of at least 0: current value is ${JSON.stringify(atSeq)}`,
      );
    }
    for (const field of ["model", "runId"] as const) {
      if (body[field] !== undefined && (typeof body[field] !== "string" || body[field] === "")) {
        throw new UiError("UI_BAD_REQUEST", `${field} must be a non-empty string when given`);
      }
    }
    if (body.live !== undefined && typeof body.live !== "boolean") {
      throw new UiError("UI_BAD_REQUEST", "live must be true or false when given");
    }
    const forked = await client.fork(c.req.param("id"), {
      atSeq,
      ...(body.model ? { model: body.model as string } : {}),
      ...(body.runId ? { runId: body.runId as string } : {}),
      live: body.live === true,
    });
    return c.json(forked);
  });

  // An evaluation's case runs (runs `<id>-<variant>-<n>` of eval_id <id>), by variant, each linked from the page.
  app.get("/api/evals/:id", async (c) => {
    const id = c.req.param("id");
    checkRunId(id); // an evaluation's id is the prefix of its runs' ids, held to the same rule
    const runs = [];
    for (let offset = 0; offset < 100_000; offset += 500) {
      const page = await client.reads.list({ search: `${id}-`, limit: 500, offset });
      runs.push(...page.runs.filter((r) => r.eval_id === id));
      if (page.runs.length < 500) break;
    }
    if (runs.length === 0) {
      throw new UiError("UI_NOT_FOUND", `No evaluation ${JSON.stringify(id)} has runs`, 404);
    }
    return c.json({ id, ...evalTable(id, runs) });
  });

  app.post("/api/calls/:key/approve", async (c) => {
    const row = await client.operators.approve(c.req.param("key"), { by: actor });
    return c.json({ key: row.idempotency_key, status: row.status });
  });

  app.post("/api/calls/:key/deny", async (c) => {
    const body = await jsonBody(c);
    const reason = typeof body.reason === "string" && body.reason.trim() !== ""
      ? body.reason
      : "denied in the web page";
    const row = await client.operators.deny(c.req.param("key"), { by: actor, reason });
    return c.json({ key: row.idempotency_key, status: row.status });
  });

  app.post("/api/calls/:key/resolve", async (c) => {
    const body = await jsonBody(c);
    let resolution: Resolution;
    if (body.action === "result" && "result" in body) {
      resolution = { action: "result", result: body.result as Json };
    } else if (body.action === "retry") resolution = { action: "retry" };
    else if (body.action === "fail") {
      resolution = { action: "fail", reason: typeof body.reason === "string" ? body.reason : undefined };
    } else {
      throw new UiError(
        "UI_BAD_REQUEST",
        `A resolution is {"action":"result","result":JSON}, {"action":"retry"} or {"action":"fail"}: got ${
          JSON.stringify(body).slice(0, 120)
        }`,
      );
    }
    const out = await client.operators.resolve(c.req.param("key"), resolution, { by: actor });
    return c.json({ key: out.effect.idempotency_key, status: out.effect.status, unblocked: out.unblocked });
  });

  app.notFound((c) =>
    c.json({ code: "UI_NOT_FOUND" satisfies UiError["code"], message: `No page ${c.req.path}` }, 404)
  );
  return Promise.resolve(app);
}

/** An evaluation's case runs as the page shows them: a line per variant, then every run, newest case last. */
function evalTable(id: string, runs: readonly RunSummary[]) {
  const parsed = runs.map((r) => {
    // `<id>-<variant>-<n>`: the variant is what lies between the id and the last '-'.
    const rest = r.run_id.slice(id.length + 1);
    const dash = rest.lastIndexOf("-");
    return { r, variant: rest.slice(0, dash), n: Number(rest.slice(dash + 1)) };
  }).sort((a, b) => a.variant.localeCompare(b.variant) || a.n - b.n);
  const variants = [...new Set(parsed.map((p) => p.variant))].map((variant) => {
    const mine = parsed.filter((p) => p.variant === variant).map((p) => p.r);
    const count = (status: string) => mine.filter((r) => r.status === status).length;
    return {
      variant,
      cases: mine.length,
      done: count("done"),
      failed: count("failed"),
      blocked: count("blocked"),
      open: mine.filter((r) => !["done", "failed", "blocked", "cancelled"].includes(r.status)).length,
      tokens: mine.reduce((n, r) => n + r.tokens, 0),
      llmCalls: mine.reduce((n, r) => n + r.llm_calls, 0),
    };
  });
  const cases = parsed.map(({ r, variant, n }) => ({
    runId: r.run_id,
    variant,
    n,
    status: r.status,
    forkedFrom: r.forked_from ?? null,
    output: r.output === null ? null : r.output.slice(0, CLIP_CHARS),
  }));
  return { variants, cases };
}

function boundedInt(raw: string | undefined, name: string, fallback: number, max: number, min = 1): number {
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < min || n > max) {
    throw new UiError(
      "UI_BAD_REQUEST",
      `${name} must be an integer from ${min} to ${max}: current value is ${JSON.stringify(raw)}`,
    );
  }
  return n;
}

async function jsonBody(c: Context): Promise<Record<string, unknown>> {
  const text = await bodyText(c, BODY_BYTES_MAX);
  if (text.trim() === "") return {};
  try {
    const v = JSON.parse(text);
    if (v && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new UiError(
    "UI_BAD_REQUEST",
    `The body must be a JSON object: got ${JSON.stringify(text.slice(0, 80))}`,
  );
}

/**
 * A request's body as text: refused (413) past `maxBytes` (a declared length
 * over it before a byte is read; a body streamed without one as soon as it
 * goes past, reading stopped), and (400) unless it is UTF-8, so no byte is
 * read as U+FFFD and two different ids never arrive as one.
 */
async function bodyText(c: Context, maxBytes: number): Promise<string> {
  const tooLarge = (seen: string) =>
    new UiError(
      "UI_BODY_TOO_LARGE",
      `A request body is at most ${maxBytes} bytes: this one is ${seen}. A message is at most ` +
        `${MESSAGE_CHARS_MAX} characters`,
      413,
    );
  const declared = c.req.header("content-length");
  if (declared !== undefined && Number(declared) > maxBytes) throw tooLarge(`${declared} bytes`);
  const body = c.req.raw.body;
  if (body === null) return "";
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    // Bounded by maxBytes: reading stops once the body goes past it.
    for (let read = await reader.read(); !read.done; read = await reader.read()) {
      bytes += read.value.byteLength;
      if (bytes > maxBytes) {
        await reader.cancel();
        throw tooLarge(`more than that (${bytes} bytes read before the page stopped reading)`);
      }
      chunks.push(read.value);
    }
  } finally {
    reader.releaseLock();
  }
  const whole = new Uint8Array(bytes);
  let at = 0;
  for (const chunk of chunks) {
    whole.set(chunk, at);
    at += chunk.byteLength;
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(whole);
  } catch {
    throw new UiError(
      "UI_BAD_REQUEST",
      "The body is not UTF-8 text: send JSON encoded as UTF-8 (an invalid byte is refused, not read as U+FFFD)",
    );
  }
}

/** Options of {@link serveUi}. */
export interface ServeUiOptions extends UiOptions {
  /** Interface to bind. Default `127.0.0.1`. Anything but loopback needs `token`. */
  host?: string;
  /** Port; 0 picks a free one. Default 8787. */
  port?: number;
  /** Stops the server when aborted. */
  signal?: AbortSignal;
}

/** The running page. */
export interface RunningUi {
  /** Where to open it (loopback for a wildcard bind). */
  url: string;
  /** The bound port. */
  port: number;
  /** Stops the server. */
  close(): Promise<void>;
}

/**
 * The host part of the page's address for a bound interface: loopback for a
 * wildcard, an IPv6 address in brackets (once, however it was given).
 */
function urlHost(host: string): string {
  const bare = bareHost(host);
  if (bare === "0.0.0.0" || bare === "::") return "127.0.0.1";
  return bare.includes(":") ? `[${bare}]` : bare;
}

/** Serves the page; refuses (`UI_TOKEN_REQUIRED`) to bind beyond loopback without a token. */
export async function serveUi(opts: ServeUiOptions): Promise<RunningUi> {
  // `[::1]` as in a URL, or `::1`: the interface is the address without brackets.
  const host = bareHost(opts.host ?? "127.0.0.1");
  if (!isLoopback(host) && !opts.token) {
    throw new UiError(
      "UI_TOKEN_REQUIRED",
      `Bound to ${host}, beyond loopback, the page needs a token: give --token (or UI_TOKEN), or bind 127.0.0.1`,
    );
  }
  const app = await createUiApp(opts);
  opts.signal?.addEventListener("abort", () => void closeUiApp(app), { once: true });
  const server = Deno.serve(
    { hostname: host, port: opts.port ?? 8787, signal: opts.signal, onListen() {} },
    app.fetch,
  );
  return {
    url: `http://${urlHost(host)}:${server.addr.port}`,
    port: server.addr.port,
    close: async () => {
      // The chat's streams end first: the server waits for the responses it is sending.
      await closeUiApp(app);
      await opts.mcp?.close(); // its open streams first: a shutdown waits for every response to end
      await server.shutdown();
    },
  };
}
