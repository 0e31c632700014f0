/**
 * The provisioning demo's three tools, against the (mock) cloud's HTTP API. Each sends the
 * runtime's idempotency key as the `Idempotency-Key` header (the IETF draft's quoted string), so a
 * re-sent request returns what the cloud stored the first time (`already_done`). A 409 (a request
 * with this key is still in progress), 429 or 5xx is re-sent after the cloud's `Retry-After`, or
 * the runtime's backoff.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import {
  defineTool,
  type Json,
  type Tool,
  type ToolContext,
  ToolError,
  type ToolOutcome,
} from "../../mod.ts";
import {
  type FetchLike,
  idempotencyKeyHeader,
  isTransientStatus,
  parseRetryAfter,
  serverErrorMessage,
} from "../../tools.ts";

/** Options of {@link demoTools}. */
export interface DemoToolsOptions {
  /** The cloud's base URL, e.g. `http://127.0.0.1:9000`. */
  cloudUrl: string;
  /** Defaults to the global `fetch`; the embedded default passes the mock's in-process handler. */
  fetch?: FetchLike;
  /** Per-request timeout of each tool. Default 30 000. */
  timeoutMs?: number;
}

const NAME = z.string().regex(/^[a-z0-9][a-z0-9-]{0,62}$/, "lowercase letters, digits and '-', at most 63");

/** Sends one create request and turns the cloud's answer into an outcome or a classified error. */
export async function cloudCreate(
  opts: DemoToolsOptions,
  path: string,
  args: unknown,
  ctx: ToolContext,
): Promise<ToolOutcome> {
  const { res, body } = await cloudJson(opts, {
    method: "POST",
    path,
    headers: { "idempotency-key": idempotencyKeyHeader(ctx.idempotencyKey) },
    body: args,
    ctx,
  });
  const id = (body as { id?: unknown } | null)?.id;
  if (typeof id !== "string") {
    throw new ToolError("TOOL_GARBAGE", `POST ${path} answered without a resource id`, { transient: true });
  }
  const replayed = res.headers.get("idempotent-replayed") === "true";
  return { result: id, remote: replayed ? "already_done" : "created" };
}

/** One request to the cloud, as {@link cloudJson} takes it. */
export interface CloudRequest {
  /** `POST` or `GET`. */
  method: string;
  /** The path, with any query, e.g. `/v1/charges?reference=r`. */
  path: string;
  /** Extra headers. */
  headers?: Record<string, string>;
  /** The JSON body, if any. */
  body?: unknown;
  /** The signal and trace context of the call (a tool's or a reconcile's context). */
  ctx: Pick<ToolContext, "signal" | "traceHeaders">;
}

/**
 * Sends one request to the cloud and returns its 2xx answer parsed as JSON;
 * throws a {@link ToolError} saying whether a re-send may help: no answer, a
 * body that is not JSON, a 408, 409, 429 or 5xx are transient, any other
 * status is not.
 */
export async function cloudJson(
  opts: DemoToolsOptions,
  req: CloudRequest,
): Promise<{ res: Response; body: Json }> {
  const url = opts.cloudUrl.replace(/\/+$/, "") + req.path;
  const what = `${req.method} ${req.path.replace(/\?.*$/, "")}`;
  let res: Response;
  let text: string;
  try {
    const init = {
      method: req.method,
      headers: {
        ...(req.body === undefined ? {} : { "content-type": "application/json" }),
        ...req.headers,
        // Deno's fetch sends the trace context itself (OTEL_DENO); an in-process handler needs it here.
        ...(opts.fetch ? req.ctx.traceHeaders() : {}),
      },
      body: req.body === undefined ? undefined : JSON.stringify(req.body),
      signal: req.ctx.signal,
    };
    // The global fetch takes the URL and init as they are: a Request built first would be copied again.
    res = await (opts.fetch ? opts.fetch(new Request(url, init)) : fetch(url, init));
    // Success is only known once the whole body has arrived.
    text = await res.text();
  } catch (err) {
    throw new ToolError("TOOL_NETWORK", `${what} got no answer: ${(err as Error).message}`, {
      transient: true,
      cause: err,
    });
  }
  if (res.status < 200 || res.status >= 300) {
    // 409 is the Idempotency-Key draft's "still in progress": transient, like 5xx.
    const transient = isTransientStatus(res.status);
    const said = serverErrorMessage(text) ?? text.slice(0, 200);
    throw new ToolError("TOOL_HTTP", `${what} answered HTTP ${res.status}: ${said}`, {
      transient,
      retryAfterMs: transient ? parseRetryAfter(res.headers.get("retry-after")) : undefined,
    });
  }
  try {
    return { res, body: JSON.parse(text) };
  } catch {
    // The remote may have acted; asking again under the same key is safe.
    throw new ToolError(
      "TOOL_GARBAGE",
      `${what} answered something that is not JSON: ${JSON.stringify(text.slice(0, 80))}`,
      { transient: true },
    );
  }
}

/** `create_server`, `create_database` and `create_dns_record` against `opts.cloudUrl`. */
export function demoTools(opts: DemoToolsOptions): Tool[] {
  const timeoutMs = opts.timeoutMs;
  return [
    defineTool({
      name: "create_server",
      description: "Create a virtual server. Returns its id.",
      args: z.strictObject({ name: NAME, spec: z.enum(["small", "medium", "large"]) }),
      timeoutMs,
      run: (args, ctx) => cloudCreate(opts, "/v1/servers", args, ctx),
      // In a fork (docs/fork.md): a made-up id, the cloud never asked.
      stub: (args) => `stub-srv-${args.name}`,
    }),
    defineTool({
      name: "create_database",
      description: "Create a managed database. Returns its id.",
      args: z.strictObject({
        name: NAME,
        engine: z.enum(["postgres", "mysql"]),
        size_gb: z.number().int().min(1).max(16_384),
      }),
      timeoutMs,
      run: (args, ctx) => cloudCreate(opts, "/v1/databases", args, ctx),
      stub: (args) => `stub-db-${args.name}`,
    }),
    defineTool({
      name: "create_dns_record",
      description: "Create a DNS record. For a CNAME, target is the name of a server. Returns its id.",
      args: z.strictObject({
        hostname: z.string().min(1).max(253),
        record_type: z.enum(["A", "AAAA", "CNAME"]),
        target: z.string().min(1).max(253),
      }),
      timeoutMs,
      run: (args, ctx) => cloudCreate(opts, "/v1/dns_records", args, ctx),
      stub: (args) => `stub-dns-${args.hostname}`,
    }),
  ];
}
