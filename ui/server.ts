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
 * GET  /api/runs/:id              the timeline as JSON
 * POST /api/runs/:id/cancel       POST /api/runs/:id/reopen
 * POST /api/calls/:key/resolve    {"action":"result","result":...} | {"action":"retry"} | {"action":"fail","reason":"..."}
 * ```
 *
 * @module
 */

import { Hono } from "hono";
import type { Context, Next } from "hono";
import { type Client, ClientError, type Resolution } from "../runtime/client.ts";
import { RuntimeError } from "../runtime/errors.ts";
import { OPEN_RUN_STATUSES, type RunStatus } from "../runtime/store/store.ts";
import type { Json } from "../runtime/tools.ts";
import { buildTimeline } from "./timeline.ts";

/** The page refused a request or a setting; `code` says which. */
export class UiError extends RuntimeError {
  /** The HTTP status it answers with. */
  readonly status: number;
  /** Creates a refusal. */
  constructor(code: string, message: string, status = 400) {
    super(code, message);
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
}

const STATUSES: readonly RunStatus[] = [
  "pending",
  "running",
  "waiting",
  "blocked",
  "done",
  "failed",
  "cancelled",
];
const STATIC: Record<string, string> = {
  "app.js": "text/javascript; charset=utf-8",
  "style.css": "text/css; charset=utf-8",
  "index.html": "text/html; charset=utf-8",
};
const COOKIE = "agent_runtime_token";

/** True for loopback host names and addresses. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** Compares two strings in time independent of where they differ. */
function sameSecret(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

async function loadStatic(): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  for (const name of Object.keys(STATIC)) {
    files.set(name, await Deno.readTextFile(new URL(`./static/${name}`, import.meta.url)));
  }
  return files;
}

function refuse(c: Context, err: UiError): Response {
  return c.json({ code: err.code, message: err.message }, err.status as 400);
}

/** Builds the app (the static files are read once, here). */
export async function createUiApp(opts: UiOptions): Promise<Hono> {
  const { client } = opts;
  const actor = opts.actor ?? "ui";
  const files = await loadStatic();
  const app = new Hono();

  app.onError((err, c) => {
    if (err instanceof UiError) return refuse(c, err);
    if (err instanceof ClientError) {
      const status = err.code === "RUN_NOT_FOUND" || err.code === "CALL_NOT_FOUND" ? 404 : 409;
      return refuse(c, new UiError(err.code, err.message, status));
    }
    console.error("ui: request failed:", err);
    return c.json({ code: "UI_INTERNAL", message: (err as Error).message }, 500);
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

  const page = (c: Context) => {
    c.header("cache-control", "no-store");
    c.header("content-security-policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    return c.html(files.get("index.html")!);
  };
  app.get("/", page);
  app.get("/runs/:id", page);
  app.get("/static/:file", (c) => {
    const name = c.req.param("file");
    const type = STATIC[name];
    if (!type || name === "index.html") return c.text("not found", 404);
    c.header("content-type", type);
    c.header("cache-control", "no-cache");
    return c.body(files.get(name)!);
  });

  app.get("/api/runs", async (c) => {
    const q = c.req.query();
    const status = q.status || undefined;
    if (status !== undefined && !STATUSES.includes(status as RunStatus)) {
      throw new UiError(
        "UI_BAD_REQUEST",
        `status must be one of ${STATUSES.join(", ")}: current value is ${status}`,
      );
    }
    const limit = boundedInt(q.limit, "limit", 25, 200);
    const page = boundedInt(q.page, "page", 1, 100_000);
    const filter = {
      status: status as RunStatus | undefined,
      agent: q.agent || undefined,
      search: q.search || undefined,
    };
    const { runs, total } = await client.list({ ...filter, limit, offset: (page - 1) * limit });
    const { counts, agents, tokens } = await client.overview({
      agent: filter.agent,
      search: filter.search,
      runIds: runs.map((r) => r.run_id),
    });
    const now = client.clock.now().getTime();
    return c.json({
      now: new Date(now).toISOString(),
      readOnly: opts.readOnly === true,
      total,
      page,
      pages: Math.max(1, Math.ceil(total / limit)),
      counts,
      agents,
      runs: runs.map((r) => ({
        runId: r.run_id,
        agent: r.agent,
        status: r.status,
        epoch: r.epoch,
        owner: r.owner,
        steps: r.steps,
        llmCalls: r.llm_calls,
        flagged: r.flagged,
        inputTokens: tokens.get(r.run_id)?.input ?? 0,
        outputTokens: tokens.get(r.run_id)?.output ?? 0,
        createdAt: new Date(r.created_at).toISOString(),
        ageMs: now - new Date(r.created_at).getTime(),
        heartbeatAgeMs: r.heartbeat_at && (r.status === "running" || r.status === "pending")
          ? now - new Date(r.heartbeat_at).getTime()
          : null,
      })),
    });
  });

  app.get("/api/runs/:id", async (c) => {
    const record = await client.inspect(c.req.param("id"));
    const timeline = buildTimeline(record);
    // Calls waiting for a person's yes or no (approvals bound to their exact arguments), offered only
    // while the run is open: a closed run's calls are not answered (RUN_CLOSED) until it is reopened.
    const open = OPEN_RUN_STATUSES.includes(record.run.status);
    const approvals = (open ? await client.approvals(c.req.param("id")) : []).filter((a) =>
      a.status === "pending"
    )
      .map((a) => ({ key: a.idempotency_key, seq: a.seq, tool: a.tool, args: a.args }));
    return c.json({
      readOnly: opts.readOnly === true,
      now: client.clock.now().toISOString(),
      ...timeline,
      approvals,
    });
  });

  app.post("/api/runs/:id/cancel", async (c) => {
    const body = await jsonBody(c);
    const reason = typeof body.reason === "string" ? body.reason : undefined;
    return c.json(await client.cancel(c.req.param("id"), { by: actor, reason }));
  });

  app.post("/api/runs/:id/reopen", async (c) => c.json(await client.reopen(c.req.param("id"))));

  app.post("/api/calls/:key/approve", async (c) => {
    const row = await client.approve(c.req.param("key"), { by: actor });
    return c.json({ key: row.idempotency_key, status: row.status });
  });

  app.post("/api/calls/:key/deny", async (c) => {
    const body = await jsonBody(c);
    const reason = typeof body.reason === "string" && body.reason.trim() !== ""
      ? body.reason
      : "denied in the web page";
    const row = await client.deny(c.req.param("key"), { by: actor, reason });
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
    const out = await client.resolve(c.req.param("key"), resolution, { by: actor });
    return c.json({ key: out.effect.idempotency_key, status: out.effect.status, unblocked: out.unblocked });
  });

  app.notFound((c) => c.json({ code: "UI_NOT_FOUND", message: `No page ${c.req.path}` }, 404));
  return app;
}

function boundedInt(raw: string | undefined, name: string, fallback: number, max: number): number {
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n < 1 || n > max) {
    throw new UiError(
      "UI_BAD_REQUEST",
      `${name} must be an integer from 1 to ${max}: current value is ${raw}`,
    );
  }
  return n;
}

async function jsonBody(c: Context): Promise<Record<string, unknown>> {
  const text = await c.req.text();
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

/** Serves the page; refuses (`UI_TOKEN_REQUIRED`) to bind beyond loopback without a token. */
export async function serveUi(opts: ServeUiOptions): Promise<RunningUi> {
  const host = opts.host ?? "127.0.0.1";
  if (!isLoopback(host) && !opts.token) {
    throw new UiError(
      "UI_TOKEN_REQUIRED",
      `Bound to ${host}, beyond loopback, the page needs a token: give --token (or UI_TOKEN), or bind 127.0.0.1`,
    );
  }
  const app = await createUiApp(opts);
  const server = Deno.serve(
    { hostname: host, port: opts.port ?? 8787, signal: opts.signal, onListen() {} },
    app.fetch,
  );
  const urlHost = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return {
    url: `http://${urlHost}:${server.addr.port}`,
    port: server.addr.port,
    close: () => server.shutdown(),
  };
}
