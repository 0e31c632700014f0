/**
 * `deno task bench:watch`: what watchers of an idle conversation cost (issue
 * 34, item 5). A conversation of `--messages` messages (default 1,000; each
 * a tool call and an answer, three rows) is built through a worker, then
 * left waiting for its next message; 1 and then 4 watchers (`client.stream`,
 * what the page's stream and `deno task watch` use) follow it, and after
 * each has told the history, for `--seconds` (default 20):
 *
 * - the statements the watchers sent, per second, by name;
 * - the rows and the bytes (the rows' JSON) those statements returned, per second;
 * - the CPU seconds per second of this process (the watchers' side: the
 *   page's server, for the page) and, on PostgreSQL, of the server processes
 *   serving the watchers' connections (found by their `application_name`).
 *
 * ```sh
 * deno task bench:watch --database-url postgres://postgres@127.0.0.1:5432/test   # a fresh schema, dropped after
 * deno task bench:watch --messages 100 --seconds 5                                # embedded, in memory
 * ```
 *
 * To measure another commit, run this same file in an export of it (it uses
 * only `client.stream`, `startWorker` and the store's driver interface):
 *
 * ```sh
 * git archive 67242ec | tar -x -C /tmp/before && cp -r node_modules /tmp/before/ &&
 *   cp bench/watch_bench.ts /tmp/before/bench/ && (cd /tmp/before && deno run -A bench/watch_bench.ts ...)
 * ```
 *
 * Exit codes: 0 measured, 2 bad flags.
 *
 * @module
 */

import process from "node:process";
import { parseArgs } from "node:util";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { QueryOptions, SqlClient } from "../runtime/store/driver.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { Store } from "../runtime/store/store.ts";
import { defineTool } from "../runtime/agent/tools.ts";

const USAGE = `usage: deno task bench:watch [--messages N] [--seconds N] [--database-url URL]
  Builds an idle conversation of N messages, then measures 1 and 4 watchers of it (client.stream) for
  the given seconds: statements, rows and bytes per second, and CPU seconds per second.
  --messages N       messages in the conversation (default 1000)
  --seconds N        how long each set of watchers is measured, after the history (default 20)
  --database-url URL PostgreSQL (a fresh schema, dropped after); default: embedded, in memory`;

/** The application name the watchers' connections carry, so their server processes can be found. */
const WATCHERS_APP = "bench_watch_watchers";

/** Counts statements by name, and the rows and JSON bytes they returned. */
class Tally implements SqlClient {
  readonly #inner: SqlClient;
  readonly statements = new Map<string, number>();
  rows = 0;
  bytes = 0;
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }
  get describe(): string {
    return this.#inner.describe;
  }
  reset(): void {
    this.statements.clear();
    this.rows = 0;
    this.bytes = 0;
  }
  async query<T = Record<string, unknown>>(
    text: string,
    params?: unknown[],
    opts?: QueryOptions,
  ): Promise<T[]> {
    const name = opts?.name ?? "(unnamed)";
    this.statements.set(name, (this.statements.get(name) ?? 0) + 1);
    const rows = await this.#inner.query<T>(text, params, opts);
    this.rows += rows.length;
    this.bytes += JSON.stringify(rows).length;
    return rows;
  }
  run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number> {
    return this.#inner.run(text, params, opts);
  }
  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    return this.#inner.listen!(channel, onPayload);
  }
}

const note = defineTool({
  name: "note",
  description: "Notes a message.",
  args: z.strictObject({ t: z.string() }),
  run: (a) => Promise.resolve({ result: `noted ${a.t.length}` }),
});

/** Each message: a `note` call, then an answer (the shape of the report's 1,000-message conversation). */
const chat = defineAgent({
  name: "bench-watched",
  tools: [note],
  conversation: { idleMs: 3_600_000 },
  model: {
    describe: "bench",
    decide: (req) => {
      const last = req.transcript[req.transcript.length - 1];
      const user = [...req.transcript].reverse().find((m) => m.role === "user");
      const text = user && "text" in user ? user.text : "";
      return Promise.resolve(
        last.role === "user"
          ? { kind: "tool_calls", calls: [{ name: "note", args: { t: text.slice(0, 50) } }] }
          : { kind: "done", text: `answer to ${text.slice(0, 60)} (transcript ${req.transcript.length})` },
      );
    },
  },
});

/** A conversation of `messages` messages, answered, left waiting for the next. */
async function buildConversation(store: Store, messages: number): Promise<string> {
  const clock = new SystemClock();
  const client = new Client(store, clock);
  const worker = await client.startWorker([chat], {
    pollMs: 5,
    log: new Logger({ clock, sink: discardSink }),
  });
  const runId = `watched-${crypto.randomUUID().slice(0, 8)}`;
  try {
    await client.start(chat, { runId, input: "message 0" });
    await client.wait(runId, { timeoutMs: 60_000, pollMs: 5 });
    for (let i = 1; i < messages; i++) {
      await client.conversations.send(runId, `message ${i}: ${"x".repeat(100)}`, { messageId: `m${i}` });
      worker.wake();
      await client.wait(runId, { timeoutMs: 60_000, pollMs: 5 });
    }
  } finally {
    await worker.stop();
  }
  return runId;
}

/** CPU seconds (user + system) of the server processes serving connections named `app`; 0 without /proc. */
async function serverCpuS(admin: SqlClient | undefined, app: string): Promise<number> {
  if (!admin) return 0;
  const pids = await admin.query<{ pid: number }>(
    `select pid from pg_stat_activity where application_name = $1`,
    [app],
  );
  let ticks = 0;
  for (const { pid } of pids) {
    try {
      const fields = (await Deno.readTextFile(`/proc/${pid}/stat`)).split(") ")[1].split(" ");
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // A server process on another machine, or gone: not counted.
      continue;
    }
  }
  return ticks / 100;
}

/** One set of watchers' figures. */
interface Figures {
  watchers: number;
  seconds: number;
  statements: Map<string, number>;
  rows: number;
  bytes: number;
  cpuS: number;
  serverCpuS: number;
}

/** `k` watchers of `runId` through `client`, measured for `seconds` once each has told the history. */
async function measure(
  client: Client,
  tally: Tally,
  admin: SqlClient | undefined,
  runId: string,
  k: number,
  seconds: number,
): Promise<Figures> {
  const stop = new AbortController();
  const told = Array.from({ length: k }, () => 0);
  const watching = told.map((_, i) =>
    (async () => {
      for await (const e of client.stream(runId, { signal: stop.signal })) if (e.type === "status") told[i]++;
    })()
  );
  // Bounded by the watchers: each tells the run's status once its first read is told.
  while (told.some((n) => n === 0)) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 2_000));
  tally.reset();
  const cpu0 = process.cpuUsage();
  const server0 = await serverCpuS(admin, WATCHERS_APP);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, seconds * 1_000));
  const elapsed = (performance.now() - t0) / 1_000;
  const cpu = process.cpuUsage(cpu0);
  const server1 = await serverCpuS(admin, WATCHERS_APP);
  const figures: Figures = {
    watchers: k,
    seconds: elapsed,
    statements: new Map(tally.statements),
    rows: tally.rows,
    bytes: tally.bytes,
    cpuS: (cpu.user + cpu.system) / 1e6,
    serverCpuS: server1 - server0,
  };
  stop.abort();
  await Promise.all(watching);
  return figures;
}

function report(f: Figures, postgres: boolean): string {
  const per = (n: number) => (n / f.seconds).toFixed(n / f.seconds < 10 ? 2 : 0);
  const by = [...f.statements].sort().map(([name, n]) => `${name} ${per(n)}`).join(", ") || "none";
  return `  ${f.watchers} watcher${f.watchers === 1 ? " " : "s"}: statements/s ${by}; rows/s ${
    per(f.rows)
  }; ` +
    `KB/s ${(f.bytes / 1_024 / f.seconds).toFixed(2)}; this process CPU s/s ${
      (f.cpuS / f.seconds).toFixed(3)
    }` +
    (postgres ? `; PostgreSQL CPU s/s ${(f.serverCpuS / f.seconds).toFixed(3)}` : "");
}

/** Runs the bench; returns the exit code. */
export async function main(args: string[]): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      options: {
        messages: { type: "string" },
        seconds: { type: "string" },
        "database-url": { type: "string" },
        help: { type: "boolean" },
      },
    }));
  } catch (err) {
    console.error(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const messages = Number(values.messages ?? 1_000);
  const seconds = Number(values.seconds ?? 20);
  if (!Number.isInteger(messages) || messages < 1 || messages > 100_000) {
    console.error(`--messages must be an integer from 1 to 100000: current value is ${values.messages}`);
    return 2;
  }
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > 3_600) {
    console.error(
      `--seconds must be a number of seconds above 0, at most 3600: current value is ${values.seconds}`,
    );
    return 2;
  }
  const url = values["database-url"];
  console.log(
    `bench:watch  messages=${messages}  seconds=${seconds}  store=${url ? "postgres" : "pglite (in memory)"}`,
  );
  if (!url) {
    const pglite = await openPglite();
    try {
      const store = new Store(pglite);
      await store.applySchema();
      const runId = await buildConversation(store, messages);
      const tally = new Tally(pglite);
      const client = new Client(new Store(tally), new SystemClock());
      for (const k of [1, 4]) {
        console.log(report(await measure(client, tally, undefined, runId, k, seconds), false));
      }
    } finally {
      await pglite.close();
    }
    return 0;
  }
  const sandbox = await createSandbox(url, { prefix: "bench_watch", max: 4 });
  try {
    const runId = await buildConversation(sandbox.store, messages);
    const history = await sandbox.store.reads.loadHistory(runId);
    console.log(
      `  the conversation: ${history.journal.length + history.effects.length} rows, ` +
        `${(JSON.stringify(history).length / 1_048_576).toFixed(2)} MB as JSON`,
    );
    const watchersUrl = new URL(sandbox.url);
    watchersUrl.searchParams.set("application_name", WATCHERS_APP);
    const tally = new Tally(await openPostgres(watchersUrl.toString(), { max: 4 }));
    const client = new Client(new Store(tally), new SystemClock());
    try {
      for (const k of [1, 4]) {
        console.log(report(await measure(client, tally, sandbox.store.client, runId, k, seconds), true));
      }
    } finally {
      await tally.close();
    }
  } finally {
    await sandbox.drop();
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
