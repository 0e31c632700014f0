/**
 * Test helpers for driving a worker in-process against real HTTP mocks: the
 * dependencies of a worker built from a store and mock URLs with a fast retry
 * policy, a log captured as parsed events, and a recording proxy that shows
 * what the model was sent and what it answered.
 *
 * @module
 */

import { SystemClock } from "../runtime/base/clock.ts";
import { type RunDeps, runDepsFor } from "../runtime/run/context.ts";
import { agentDeps, DEFAULT_RETRY, processDeps, type RetryPolicy } from "../runtime/run/deps.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import type { Store } from "../runtime/store/store.ts";
import { type Tool, ToolRegistry } from "../runtime/agent/tools.ts";
import demoAgent from "../examples/provision/agent.ts";
import { demoTools } from "../examples/provision/tools.ts";

/** Options of {@link testWorker}. */
export interface TestWorkerOptions {
  /** Base URL of the model, e.g. the mocks' `modelUrl` or a {@link recordingProxy}. */
  modelUrl: string;
  /** Base URL of the cloud. */
  cloudUrl: string;
  /** Per-request timeout of each tool. Default 2 000. */
  toolTimeoutMs?: number;
  /** Requests per tool call before the run fails. Default 4 (the tools' default). */
  toolMaxAttempts?: number;
  /** Tools to register as not idempotent (no safe re-send). */
  nonIdempotent?: string[];
  /** The tools, given the cloud's URL and the tool timeout; default the demo's three. */
  tools?: (opts: { cloudUrl: string; timeoutMs: number }) => Tool[];
  /** Overrides of the fast retry policy. */
  retry?: Partial<RetryPolicy>;
  /** Sent as the model's bearer token. */
  apiKey?: string;
  /** Masked by the logger. */
  secrets?: string[];
}

/** A worker's dependencies and the lines it logged (JSON lines). */
export interface TestWorker {
  deps: RunDeps;
  lines: string[];
  /** The logged events, parsed. */
  events(name?: string): LogEvent[];
}

/** One parsed JSON log line. */
export interface LogEvent {
  level: string;
  event: string;
  [field: string]: unknown;
}

/**
 * Builds a worker on `store` talking to `opts.modelUrl` and `opts.cloudUrl`,
 * with backoff of a few milliseconds and short timeouts, logging JSON lines
 * into memory.
 */
export function testWorker(store: Store, opts: TestWorkerOptions): TestWorker {
  const clock = new SystemClock();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines), format: "json", secrets: opts.secrets });
  const nonIdempotent = new Set(opts.nonIdempotent ?? []);
  const build = opts.tools ?? demoTools;
  const tools: Tool[] = build({ cloudUrl: opts.cloudUrl, timeoutMs: opts.toolTimeoutMs ?? 2_000 }).map(
    (tool) => ({
      ...tool,
      idempotent: nonIdempotent.has(tool.name) ? false : tool.idempotent,
      maxAttempts: opts.toolMaxAttempts ?? tool.maxAttempts,
    }),
  );
  const deps = runDepsFor(
    processDeps({ store, clock, log, owner: "test-worker", heartbeatMs: 60_000, leaseMs: 120_000 }),
    agentDeps({
      agent: demoAgent,
      planner: new OpenAIPlanner({ url: opts.modelUrl, model: "mock-planner", apiKey: opts.apiKey }),
      tools: new ToolRegistry(tools),
    }, {
      retry: { ...DEFAULT_RETRY, backoffBaseMs: 2, backoffMaxMs: 10, modelTimeoutMs: 2_000, ...opts.retry },
    }),
  );
  const events = (name?: string) =>
    lines.map((l) => JSON.parse(l) as LogEvent).filter((e) => name === undefined || e.event === name);
  return { deps, lines, events };
}

/** One request through a {@link recordingProxy}: what was sent and what came back. */
export interface ProxiedExchange {
  /** The parsed request body. */
  request: { messages: Array<{ role: string; content: string | null }>; [k: string]: unknown };
  /** The request's headers. */
  headers: Headers;
  /** HTTP status of the answer (0 when the upstream could not be reached or gave up). */
  status: number;
  /** The answer's body text. */
  body: string;
}

/** A proxy in front of an HTTP server that records each exchange. */
export interface RecordingProxy {
  /** The proxy's base URL, with the target's path appended (e.g. `.../v1`). */
  url: string;
  /** Every exchange so far, in order. */
  exchanges: ProxiedExchange[];
  /** Stops the proxy. */
  close(): Promise<void>;
}

/**
 * Serves a proxy on 127.0.0.1 (port 0) that forwards each request to
 * `targetUrl`'s origin and records it, so a test can read what the model was
 * told (refusals, tool results) and what it answered (usage). Given `hold`,
 * each request waits for it before it is forwarded (recorded at once).
 */
export function recordingProxy(targetUrl: string, opts: { hold?: Promise<void> } = {}): RecordingProxy {
  const target = new URL(targetUrl);
  const exchanges: ProxiedExchange[] = [];
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen() {},
    // The client gave up (a timeout): nobody is left to answer.
    onError: () => new Response(null, { status: 499 }),
  }, async (req) => {
    const url = new URL(req.url);
    const text = await req.text();
    let request = { messages: [] } as ProxiedExchange["request"];
    try {
      request = JSON.parse(text);
    } catch {
      // Not JSON: recorded with no messages.
    }
    const exchange: ProxiedExchange = { request, headers: req.headers, status: 0, body: "" };
    exchanges.push(exchange);
    await opts.hold;
    const headers = new Headers(req.headers);
    headers.delete("host");
    const res = await fetch(new URL(url.pathname + url.search, target.origin), {
      method: req.method,
      headers,
      body: text,
      signal: req.signal,
    });
    exchange.status = res.status;
    exchange.body = await res.text();
    return new Response(exchange.body, { status: res.status, headers: res.headers });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}${target.pathname.replace(/\/+$/, "")}`,
    exchanges,
    close: () => server.shutdown(),
  };
}

/** A TCP port on 127.0.0.1 that nothing listens on (bound, then released). */
export function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}
