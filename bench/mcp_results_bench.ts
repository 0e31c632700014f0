/**
 * `deno task bench:mcp`: what an MCP answer of each size does to a worker.
 * One {@link Client.startWorker} host in this process holds two runs: a
 * "holder" whose own tool call waits until it is released (its lease must
 * hold meanwhile), and an "exporter" whose one call asks the MCP test server
 * (`mock/mcp_servers.ts`, kind `large`) for a text of the row's size. The
 * server runs in a process of its own: over stdio the worker starts it
 * (`mock/mcp_stdio_server.ts`), over streamable HTTP it serves from
 * `mock/mcp_http_server.ts` (JSON answers, or event streams with `http-sse`),
 * so only the client's work is measured here.
 *
 * Each row prints what became of the call (answered, or refused by the
 * limit: `TOOL_RESULT_TOO_LARGE`), the time from the call's request to its
 * answer or refusal, the exporter run's time (its result journaled
 * included), the longest event-loop stall while it ran (a 10 ms timer's
 * lateness), the longest gap between two heartbeat statements around it
 * (they go out every 200 ms after the last one ends; the lease is 2 s), and
 * whether the holder's lease held: no `lease-lost`, claimed once, its call
 * sent once.
 *
 * Flags: `--sizes 1KB,1MB,...` (default 1KB,1MB,4MB,8MB,12MB,32MB,64MB; MB
 * is 10^6 bytes), `--transports stdio,http,http-sse` (default all three),
 * `--limit BYTES` (the servers' `maxResultBytes`; default the default,
 * 10 MiB), `--heartbeat-ms` and `--lease-ms` (default 200 and 2 000: a
 * lease six times shorter than the default 12 s, so a stall shows),
 * `--database-url URL` (PostgreSQL, in a schema of its own, dropped after;
 * also `TEST_DATABASE_URL`; else PGlite in memory).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { DEFAULT_MAX_RESULT_BYTES, type McpServerOptions, mcpTools } from "../runtime/mcp/mcp.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { Store } from "../runtime/store/store.ts";
import { defineTool, type Tool } from "../runtime/agent/tools.ts";
import type { ToolResultMessage } from "../runtime/model/transcript.ts";

const STDIO_SERVER = new URL("../mock/mcp_stdio_server.ts", import.meta.url).pathname;
const HTTP_SERVER = new URL("../mock/mcp_http_server.ts", import.meta.url).pathname;
const CONFIG = new URL("../deno.json", import.meta.url).pathname;
const TRANSPORTS = ["stdio", "http", "http-sse"] as const;
type Transport = typeof TRANSPORTS[number];

const args = parseArgs({
  args: Deno.args,
  options: {
    sizes: { type: "string", default: "1KB,1MB,4MB,8MB,12MB,32MB,64MB" },
    transports: { type: "string", default: TRANSPORTS.join(",") },
    limit: { type: "string" },
    "heartbeat-ms": { type: "string", default: "200" },
    "lease-ms": { type: "string", default: "2000" },
    "database-url": { type: "string" },
  },
});

/** `1KB` → 1 000, `12MB` → 12 000 000. */
function bytesOf(size: string): number {
  const m = /^(\d+(?:\.\d+)?)(B|KB|MB)$/i.exec(size.trim());
  if (!m) throw new Error(`--sizes: ${JSON.stringify(size)} is not a size like 1KB or 12MB`);
  return Math.round(Number(m[1]) * { B: 1, KB: 1e3, MB: 1e6 }[m[2].toUpperCase() as "B" | "KB" | "MB"]);
}

const sizes = args.values.sizes.split(",").map((s) => ({ label: s.trim(), bytes: bytesOf(s) }));
const transports = args.values.transports.split(",").map((t) => t.trim()) as Transport[];
for (const t of transports) {
  if (!TRANSPORTS.includes(t)) throw new Error(`--transports: ${t} is not one of ${TRANSPORTS.join(", ")}`);
}
const limitBytes = args.values.limit === undefined ? DEFAULT_MAX_RESULT_BYTES : Number(args.values.limit);
const databaseUrl = args.values["database-url"] ?? Deno.env.get("TEST_DATABASE_URL");
const HEARTBEAT_MS = Number(args.values["heartbeat-ms"]);
const LEASE_MS = Number(args.values["lease-ms"]);

/** A planner that calls `call` once, then ends with the outcome it saw. */
function oneCall(call: () => { name: string; args: Record<string, unknown> }): Planner {
  return {
    describe: "one call",
    decide: (req) => {
      const seen = req.transcript.filter((m): m is ToolResultMessage => m.role === "tool").at(-1);
      if (!seen) return Promise.resolve({ kind: "tool_calls", calls: [call()] });
      return Promise.resolve({ kind: "done", text: seen.failed ? `failed: ${seen.error}` : "answered" });
    },
  };
}

/** `store` with the start of each heartbeat statement noted in `beats`: a wrapper from outside. */
function watchingBeats(store: Store, beats: number[]): Store {
  const leases = new Proxy(store.leases, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      if (prop !== "heartbeatMany") return value.bind(target);
      return (...a: unknown[]) => {
        beats.push(performance.now());
        return value.apply(target, a);
      };
    },
  });
  return store.withAudiences({ leases });
}

/** The HTTP test servers in a process of their own; its URL, and how to stop it. */
async function httpServer(sse: boolean): Promise<{ url: string; stop: () => Promise<void> }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--config", CONFIG, HTTP_SERVER, ...(sse ? ["--sse"] : [])],
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await lines.read();
    if (done) throw new Error("the MCP HTTP server ended before it listened");
    text += value;
  }
  const url = /^listening (\S+)/.exec(text)?.[1];
  if (!url) throw new Error(`the MCP HTTP server said ${JSON.stringify(text)}`);
  return {
    url,
    stop: async () => {
      await child.stdin.close();
      await lines.cancel();
      await child.status;
    },
  };
}

interface Row {
  transport: Transport;
  size: string;
  outcome: string;
  receiveMs: number;
  runMs: number;
  stallMs: number;
  beatGapMs: number;
  leasesHeld: boolean;
}

async function measure(store: Store, transport: Transport): Promise<Row[]> {
  const beats: number[] = [];
  const client = new Client(watchingBeats(store, beats));
  const lines: string[] = [];
  const log = new Logger({ clock: new SystemClock(), sink: arraySink(lines), format: "json" });
  // Only the lines of the event are parsed: a confirmed call's line holds its whole result.
  const events = (from: number, name: string) =>
    lines.slice(from).filter((l) => l.includes(`"event":"${name}"`)).map((l) =>
      JSON.parse(l) as Record<string, unknown>
    ).filter((l) => l.event === name);
  const http = transport === "stdio" ? undefined : await httpServer(transport === "http-sse");
  const dir = await Deno.makeTempDir({ prefix: "bench-mcp-" });
  const server: McpServerOptions = http ? { url: `${http.url}/large/mcp` } : {
    command: Deno.execPath(),
    args: ["run", "-A", "--config", CONFIG, STDIO_SERVER, "large", `${dir}/large.json`],
    stderr: "ignore",
  };
  const mcp = mcpTools({ ...server, maxResultBytes: limitBytes, timeoutMs: 300_000 });
  const receiveMs = new Map<string, number>();
  // Each MCP tool timed from its request to its answer (a wrapper from outside).
  const timed = async (ctx: Parameters<typeof mcp>[0]): Promise<Tool[]> =>
    (await mcp(ctx)).map((t) => ({
      ...t,
      run: async (a, c) => {
        const t0 = performance.now();
        try {
          return await t.run(a, c);
        } finally {
          receiveMs.set(c.idempotencyKey, performance.now() - t0);
        }
      },
    }));
  let size = 0;
  const exporter = defineAgent({
    name: "exporter",
    tools: timed,
    model: oneCall(() => ({ name: "export_logs", args: { bytes: size } })),
  });
  let holderSends = 0;
  let release = () => {};
  const hold = defineTool({
    name: "hold",
    description: "Hold until released.",
    args: z.strictObject({}),
    run: async (_a, ctx) => {
      holderSends++;
      await new Promise<void>((resolve, reject) => {
        release = resolve;
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason), { once: true });
      });
      return { result: "released" };
    },
  });
  const holder = defineAgent({
    name: "holder",
    tools: [hold],
    model: oneCall(() => ({ name: "hold", args: {} })),
  });
  const worker = await client.startWorker([holder, exporter], {
    pollMs: 10,
    log,
    heartbeatMs: HEARTBEAT_MS,
    leaseMs: LEASE_MS,
    takeShare: "all",
  });
  const rows: Row[] = [];
  try {
    // One call unmeasured first: the first of a process pays for compiling the code on its path.
    size = 1_000;
    await client.start(exporter, { runId: `warm-${transport}`, input: "Export the logs." });
    await client.wait(`warm-${transport}`, { timeoutMs: 60_000, pollMs: 10 });
    for (const [i, s] of sizes.entries()) {
      size = s.bytes;
      const fromLine = lines.length;
      holderSends = 0;
      const holderId = `holder-${transport}-${i}`;
      const exporterId = `exporter-${transport}-${i}`;
      await client.start(holder, { runId: holderId, input: "Hold." });
      while (holderSends === 0) await new Promise((r) => setTimeout(r, 5));
      const fromBeat = beats.length;
      let stallMs = 0;
      let last = performance.now();
      const probe = setInterval(() => {
        const now = performance.now();
        stallMs = Math.max(stallMs, now - last - 10);
        last = now;
      }, 10);
      const t0 = performance.now();
      await client.start(exporter, { runId: exporterId, input: "Export the logs." });
      const end = await client.wait(exporterId, { timeoutMs: 600_000, pollMs: 10 });
      const runMs = performance.now() - t0;
      clearInterval(probe);
      // One beat after the run, so the gap across it is seen.
      const seen = beats.length;
      while (beats.length === seen) await new Promise((r) => setTimeout(r, 20));
      const around = beats.slice(Math.max(0, fromBeat - 1));
      const beatGapMs = Math.max(...around.slice(1).map((t, j) => t - around[j]));
      release();
      const held = await client.wait(holderId, { timeoutMs: 60_000, pollMs: 10 });
      const effect = (await client.reads.inspect(exporterId)).effects[0];
      const code = events(fromLine, "tool-failed")[0]?.code;
      const ownLeaseLost = events(fromLine, "lease-lost").some((l) => l.run === exporterId);
      const outcome = effect?.status === "confirmed"
        ? `answered (${String(effect.result).length.toLocaleString("en-US")} chars kept)`
        : code === "TOOL_RESULT_TOO_LARGE"
        ? "refused by the limit (TOOL_RESULT_TOO_LARGE)"
        : `run ${end.status}, call ${effect?.status}${code ? ` (${code})` : ""}${
          ownLeaseLost ? ": its own lease was lost" : ""
        }`;
      const leasesHeld = events(fromLine, "lease-lost").length === 0 && held.status === "done" &&
        holderSends === 1 && events(fromLine, "claimed").filter((l) => l.run === holderId).length === 1;
      const row: Row = {
        transport,
        size: s.label,
        outcome,
        receiveMs: receiveMs.get(`${exporterId}:0`) ?? NaN,
        runMs,
        stallMs,
        beatGapMs,
        leasesHeld,
      };
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  } finally {
    release();
    await worker.stop();
    await mcp.close();
    await http?.stop();
    await Deno.remove(dir, { recursive: true });
  }
  return rows;
}

const ms = (n: number) => Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "-";

let store: Store;
let drop = async () => {};
if (databaseUrl) {
  const sandbox = await createSandbox(databaseUrl, { prefix: "bench_mcp", max: 4 });
  store = sandbox.store;
  drop = () => sandbox.drop();
} else {
  store = new Store(await openPglite());
  await store.applySchema();
  drop = () => store.client.close();
}
const rows: Row[] = [];
try {
  for (const t of transports) rows.push(...await measure(store, t));
} finally {
  await drop();
}
console.log(
  `MCP answers by size (maxResultBytes ${limitBytes.toLocaleString("en-US")}; ${
    databaseUrl ? "PostgreSQL" : "PGlite in memory"
  }; heartbeat every ${HEARTBEAT_MS} ms, lease ${LEASE_MS} ms)\n`,
);
const table = [
  [
    "transport",
    "size",
    "what happened",
    "receive ms",
    "run ms",
    "longest stall ms",
    "longest heartbeat gap ms",
    "other run's lease held",
  ],
  ...rows.map((r) => [
    r.transport,
    r.size,
    r.outcome,
    ms(r.receiveMs),
    ms(r.runMs),
    ms(r.stallMs),
    ms(r.beatGapMs),
    r.leasesHeld ? "yes" : "NO",
  ]),
];
const widths = table[0].map((_, c) => Math.max(...table.map((row) => row[c].length)));
const line = (row: string[]) => `| ${row.map((cell, c) => cell.padEnd(widths[c])).join(" | ")} |`;
console.log(line(table[0]));
console.log(`| ${widths.map((w) => "-".repeat(w)).join(" | ")} |`);
for (const row of table.slice(1)) console.log(line(row));
