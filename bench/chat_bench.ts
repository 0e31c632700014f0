/**
 * `deno task bench:chat`: what a resume of a chat costs. A conversation of
 * `--messages` messages (default 100; each a tool call, its result and a
 * streamed answer of about 300 characters) is built through an in-process
 * worker, then a handler that has never seen it (a page server just
 * started) is asked for the last turn's UI message stream from chunk 0
 * (`GET /api/chat/:id/stream?startIndex=0`), `--resumes` times (default 5),
 * each by a fresh handler, over real HTTP. Printed: the time to the whole
 * answer (median, max), the bytes and chunks sent, and the rows read. The
 * messages are sent through a handler over HTTP, each turn streamed live, so
 * each turn is written to the chat chunk log: printed first, the writes a
 * turn and their time.
 *
 * ```sh
 * deno task bench:chat                                                              # embedded, in memory
 * deno task bench:chat --database-url postgres://postgres@127.0.0.1:5432/test       # a fresh schema, dropped after
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { Store } from "../runtime/store/store.ts";
import type { QueryOptions, SqlClient } from "../runtime/store/driver.ts";
import { chatHandler } from "../runtime/chat/chat.ts";
import type { PlannerDecision } from "../runtime/model/transcript.ts";

const { values: flags } = parseArgs({
  options: {
    "database-url": { type: "string" },
    messages: { type: "string", default: "100" },
    resumes: { type: "string", default: "5" },
  },
});
const MESSAGES = Number(flags.messages);
const RESUMES = Number(flags.resumes);

/** Counts the rows each statement returned, and the chunk log's appends and their time, through the store's driver. */
function counting(client: SqlClient, rows: { n: number; appends: number; appendMs: number }): SqlClient {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === "query") {
        return async (text: string, params?: unknown[], opts?: QueryOptions) => {
          const t0 = performance.now();
          const got = await target.query(text, params, opts);
          if (opts?.name === "chat-chunks-append") {
            rows.appends++;
            rows.appendMs += performance.now() - t0;
          }
          rows.n += got.length;
          return got;
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

const ANSWER = "Here is where things stand: ".padEnd(300, "the build is green and the deploy went out. ");
const lookup = defineTool({
  name: "lookup",
  description: "Looks up a service.",
  args: z.strictObject({ service: z.string() }),
  run: (args) => Promise.resolve({ result: { service: args.service, state: "green" } }),
});
const agent = defineAgent({
  name: "bench-chat",
  tools: [lookup],
  conversation: { idleMs: 3_600_000 },
  model: {
    describe: "scripted",
    decide: (req): Promise<PlannerDecision> => {
      const last = req.transcript.at(-1);
      return Promise.resolve(
        last?.role === "user"
          ? { kind: "tool_calls", calls: [{ name: "lookup", args: { service: "build" } }] }
          : { kind: "done", text: ANSWER },
      );
    },
  },
});

const sandbox = flags["database-url"]
  ? await createSandbox(flags["database-url"], { prefix: "bench", max: 4 })
  : undefined;
const store = sandbox?.store ?? new Store(await openPglite());
if (!sandbox) await store.applySchema();
const clock = new SystemClock();
const client = new Client(store, clock);
const worker = await client.startWorker([agent], {
  pollMs: 20,
  log: new Logger({ clock, sink: discardSink }),
});
const rows = { n: 0, appends: 0, appendMs: 0 };
const countedStore = new Store(counting(store.client, rows));
try {
  // Every message through a handler over HTTP, its turn streamed live to the end: each turn written to the log.
  const writer = chatHandler({ client: new Client(countedStore, clock), agent });
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => await writer(req) ?? new Response(null, { status: 404 }),
  );
  let logged = 0;
  for (let m = 0; m < MESSAGES; m++) {
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/api/chat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        id: "chat-bench",
        messages: [{ id: `m${m}`, role: "user", parts: [{ type: "text", text: `message ${m}` }] }],
        trigger: "submit-message",
      }),
    });
    logged += (await res.text()).split("\n\n").filter((e) => e.startsWith("data: {")).length;
  }
  await writer.close(); // the last batches written
  await server.shutdown();
  await worker.stop();
  console.log(
    `chunk log of a ${MESSAGES}-message chat (${
      sandbox ? "PostgreSQL" : "PGlite"
    }), each turn streamed live: ` +
      `${(logged / MESSAGES).toFixed(1)} chunks a turn in ${(rows.appends / MESSAGES).toFixed(2)} writes, ` +
      `${(rows.appendMs / MESSAGES).toFixed(2)} ms of writes a turn (${rows.appends} writes, ` +
      `${rows.appendMs.toFixed(0)} ms in all)`,
  );
  const timings: number[] = [];
  let bytes = 0;
  let chunks = 0;
  for (let r = 0; r < RESUMES; r++) {
    const handler = chatHandler({ client: new Client(countedStore, clock) });
    const server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      async (req) => await handler(req) ?? new Response(null, { status: 404 }),
    );
    rows.n = 0;
    const t0 = performance.now();
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/api/chat/chat-bench/stream?startIndex=0`);
    const text = await res.text();
    timings.push(performance.now() - t0);
    bytes = new TextEncoder().encode(text).length;
    chunks = text.split("\n\n").filter((e) => e.startsWith("data: {")).length;
    await handler.close();
    await server.shutdown();
  }
  timings.sort((a, b) => a - b);
  console.log(
    `resume of the last turn of a ${MESSAGES}-message chat (${sandbox ? "PostgreSQL" : "PGlite"}), ` +
      `a handler that never saw it, ${RESUMES} times: median ${
        timings[Math.floor(RESUMES / 2)].toFixed(1)
      } ms, ` +
      `max ${timings.at(-1)!.toFixed(1)} ms; ${bytes} bytes, ${chunks} chunks; ${rows.n} rows read`,
  );
} finally {
  await worker.stop();
  if (sandbox) await sandbox.drop();
  else await client.close();
}
