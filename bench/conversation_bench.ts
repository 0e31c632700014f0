/**
 * `deno task bench:conversation`: what a long conversation costs, turn by
 * turn. One run of a conversing agent is sent `--turns` messages (default
 * 500), one after the other, through `client.conversations.send`; a {@link WorkerHost}
 * (production's shape) takes the woken run, decides a tool call, runs it,
 * decides the answer, and lets the run wait for the next message. The model
 * and the tool are in this process (no HTTP), so the figures are the
 * runtime's and the database's alone.
 *
 * Printed for each store (PGlite in memory; PostgreSQL with `--database-url`
 * or `TEST_DATABASE_URL`, in a schema of its own, dropped after):
 *
 * - time per step (send to answer, divided by the turn's two steps), the
 *   median over the 10 turns around turn 10 and around the last turn;
 * - statements per turn, and rows the database returned per turn (the read of
 *   a run's history at a claim is what could grow with the conversation);
 * - rows and bytes stored per turn (`pg_column_size` of the run's rows in
 *   journal, side_effects and messages, over the number of turns);
 * - a raw-SQL reference, measured in the same run on the same driver (both
 *   after thirty turns of each, unmeasured, to warm up): the
 *   same writes a turn makes (the message, the two decisions' intent and
 *   confirm, the call's intent and confirm, the run's idle wait), by hand, no
 *   fence, no reads.
 *
 * Flags: `--turns N` (default 500), `--database-url URL`, `--history N` (the
 * agent's history hook keeps the last N transcript messages; default 0:
 * the whole history is sent), `--statements` (milliseconds by statement at
 * turn 10 and at the last turn).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import type { RunOutcome } from "../runtime/host/outcome.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import type { QueryOptions, SqlClient } from "../runtime/store/driver.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { Store } from "../runtime/store/store.ts";
import { defineTool, ToolRegistry } from "../runtime/agent/tools.ts";
import type { HistoryHook } from "../runtime/agent/conversation_options.ts";

/** Counts the rows each statement returned, beside the statements (CountingClient counts those). */
class RowCounting implements SqlClient {
  readonly #inner: SqlClient;
  rows = 0;
  /** Milliseconds by statement name since the last reset. */
  readonly ms = new Map<string, number>();
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }
  get describe(): string {
    return this.#inner.describe;
  }
  async query<T = Record<string, unknown>>(
    text: string,
    params?: unknown[],
    opts?: QueryOptions,
  ): Promise<T[]> {
    const t0 = performance.now();
    const out = await this.#inner.query<T>(text, params, opts);
    this.#time(opts, t0);
    this.rows += out.length;
    return out;
  }
  async run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number> {
    const t0 = performance.now();
    const out = await this.#inner.run(text, params, opts);
    this.#time(opts, t0);
    return out;
  }
  #time(opts: QueryOptions | undefined, t0: number): void {
    const name = opts?.name ?? "unnamed";
    this.ms.set(name, (this.ms.get(name) ?? 0) + performance.now() - t0);
  }
  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** A turn's figures. */
interface Turn {
  ms: number;
  statements: number;
  rowsRead: number;
  transcript: number;
}

/** Answers a user message with one `note` call, a tool result with the answer; counts what it was sent. */
function planner(sent: number[]): Planner {
  return {
    describe: "bench",
    decide: (req) => {
      sent.push(req.transcript.length);
      const last = req.transcript[req.transcript.length - 1];
      return Promise.resolve(
        last.role === "user"
          ? { kind: "tool_calls", calls: [{ name: "note", args: { text: last.text.slice(0, 40) } }] }
          : { kind: "done", text: `Noted. This is the answer to message ${req.seq}.` },
      );
    },
  };
}

const note = defineTool({
  name: "note",
  description: "Notes a message.",
  args: z.strictObject({ text: z.string() }),
  run: (args) => Promise.resolve({ result: { noted: args.text.length } }),
});

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)];
}

/** The runtime: `turns` messages to one conversation on `inner`, each answered before the next is sent. */
async function runtimeTurns(
  inner: SqlClient,
  turns: number,
  keep: number,
  showStatements = false,
): Promise<{ turns: Turn[]; stored: Stored }> {
  const rows = new RowCounting(inner);
  const counting = new CountingClient(rows);
  const store = new Store(counting);
  const clock = new SystemClock();
  const client = new Client(store, clock);
  const sent: number[] = [];
  const history: HistoryHook | undefined = keep > 0 ? (t) => [t[0], ...t.slice(1).slice(-keep)] : undefined;
  const agent = defineAgent({
    name: "bench-chat",
    instructions: "Note each message, then answer it.",
    tools: [note],
    maxSteps: 4,
    conversation: { idleMs: 3_600_000, ...(history ? { history } : {}) },
  });
  let answered: ((o: RunOutcome) => void) | undefined;
  const host = new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: discardSink }),
    owner: "bench",
    heartbeatMs: 60_000,
    leaseMs: 600_000,
    pollMs: 5,
    // Each write alone: the statements a message costs are counted by name.
    groupCommitMs: 0,
    agents: [{ agent, planner: planner(sent), tools: new ToolRegistry([note]) } as never],
    onOutcome: (o) => answered?.(o),
  }).start();
  const out: Turn[] = [];
  try {
    const runId = `chat-${crypto.randomUUID().slice(0, 8)}`;
    for (let n = 0; n < turns; n++) {
      counting.reset();
      rows.rows = 0;
      rows.ms.clear();
      const done = new Promise<RunOutcome>((r) => answered = r);
      const t0 = performance.now();
      if (n === 0) await client.start(agent, { runId, input: `message 0 of the bench conversation` });
      else {await client.conversations.send(runId, `message ${n} of the bench conversation`, {
          messageId: `m${n}`,
        });}
      host.wake();
      const outcome = await done;
      const ms = performance.now() - t0;
      if (outcome.status !== "waiting") {
        throw new Error(`turn ${n} ended ${outcome.status}: ${outcome.error}`);
      }
      out.push({ ms, statements: counting.total, rowsRead: rows.rows, transcript: sent[sent.length - 1] });
      if (showStatements && (n === 9 || n === turns - 1)) {
        console.log(
          `  turn ${n + 1}: ${ms.toFixed(1)} ms, by statement:`,
          [...rows.ms].map(([k, v]) => `${k}=${v.toFixed(2)}`).join(" "),
        );
      }
    }
    return { turns: out, stored: await storedBytes(inner, runId, turns) };
  } finally {
    await host.stop();
  }
}

/** Rows and bytes a conversation stored. */
interface Stored {
  rows: number;
  bytes: number;
}

async function storedBytes(client: SqlClient, runId: string, turns: number): Promise<Stored> {
  const [r] = await client.query<{ rows: number; bytes: number }>(
    `select (select count(*) from journal where run_id = $1)::int
          + (select count(*) from side_effects where run_id = $1)::int
          + (select count(*) from messages where run_id = $1)::int as rows,
            (select coalesce(sum(pg_column_size(j.*)), 0) from journal j where run_id = $1)::float8
          + (select coalesce(sum(pg_column_size(e.*)), 0) from side_effects e where run_id = $1)::float8
          + (select coalesce(sum(pg_column_size(m.*)), 0) from messages m where run_id = $1)::float8 as bytes`,
    [runId],
  );
  return { rows: r.rows / turns, bytes: r.bytes / turns };
}

/** The floor: the same writes a turn makes, plain, by hand. */
async function rawTurns(client: SqlClient, turns: number): Promise<Turn[]> {
  const runId = `raw-${crypto.randomUUID().slice(0, 8)}`;
  const now = () => new Date().toISOString();
  await client.run(
    `insert into runs (run_id, agent, goal, status, epoch, created_at, updated_at, conversation_idle_ms, message_count)
     values ($1, 'raw', 'raw', 'running', 1, $2::timestamptz, $2::timestamptz, 3600000, 1)`,
    [runId, now()],
  );
  const out: Turn[] = [];
  let seq = 0;
  for (let n = 0; n < turns; n++) {
    const t0 = performance.now();
    if (n > 0) {
      await client.run(
        `insert into messages (run_id, seq, message_id, text, created_at) values ($1, $2, $3, $4, $5::timestamptz)`,
        [runId, n, `m${n}`, `message ${n} of the bench conversation`, now()],
      );
    }
    for (const decision of [{ tool: "note", args: { text: "x" } }, { done: true, message: "Noted." }]) {
      await client.run(
        `insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at) values ($1, $2, 'intent', 1, 1, $3::timestamptz)`,
        [runId, seq, now()],
      );
      await client.run(
        `update journal set status = 'confirmed', decision = $3::jsonb, confirmed_at = $4::timestamptz
          where run_id = $1 and seq = $2`,
        [runId, seq, JSON.stringify(decision), now()],
      );
      if ("tool" in decision) {
        await client.run(
          `insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
           values ($1, $2, $3, 'note', '{"text":"x"}', 'intent', 1, 1, $4::timestamptz)`,
          [`${runId}:${seq}`, runId, seq, now()],
        );
        await client.run(
          `update side_effects set status = 'confirmed', result = '{"noted":1}', remote = 'created',
                  confirmed_at = $2::timestamptz where idempotency_key = $1`,
          [`${runId}:${seq}`, now()],
        );
      }
      seq++;
    }
    await client.run(
      `update runs set status = 'waiting', output = 'Noted.', idle_since = $2::timestamptz, updated_at = $2::timestamptz
        where run_id = $1`,
      [runId, now()],
    );
    out.push({ ms: performance.now() - t0, statements: n > 0 ? 8 : 7, rowsRead: 0, transcript: 0 });
  }
  return out;
}

/** Thirty turns of each, not measured: the code compiled and the statements prepared before the clock starts. */
async function warmUp(client: SqlClient, keep: number): Promise<void> {
  await rawTurns(client, 30);
  await runtimeTurns(client, 30, keep);
}

/** The median of a figure over the 10 turns ending at turn `at` (1-based). */
function around(turns: Turn[], at: number, f: (t: Turn) => number): number {
  return median(turns.slice(Math.max(0, at - 10), at).map(f));
}

function report(store: string, runtime: Turn[], raw: Turn[], stored: Stored): void {
  const last = runtime.length;
  const first = Math.min(10, last);
  const fmt = (n: number, d = 2) => n.toFixed(d);
  console.log(`\n${store}: a conversation of ${last} turns (2 steps a turn: a tool call, then the answer)`);
  console.log(
    `  ${"".padEnd(34)}${`turn ${first}`.padStart(12)}${`turn ${last}`.padStart(12)}${"ratio".padStart(8)}`,
  );
  const row = (label: string, f: (t: Turn) => number, turns: Turn[], d = 2) => {
    const a = around(turns, first, f);
    const b = around(turns, last, f);
    console.log(
      `  ${label.padEnd(34)}${fmt(a, d).padStart(12)}${fmt(b, d).padStart(12)}${fmt(b / a, 2).padStart(8)}`,
    );
  };
  row("runtime ms per step", (t) => t.ms / 2, runtime);
  row("raw SQL ms per step", (t) => t.ms / 2, raw);
  row("runtime statements per turn", (t) => t.statements, runtime, 0);
  row("raw SQL statements per turn", (t) => t.statements, raw, 0);
  row("rows read per turn", (t) => t.rowsRead, runtime, 0);
  row("messages in the model request", (t) => t.transcript, runtime, 0);
  console.log(`  stored per turn: ${fmt(stored.rows, 1)} rows, ${fmt(stored.bytes, 0)} bytes`);
}

/** Runs the bench; returns the exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      turns: { type: "string" },
      "database-url": { type: "string" },
      history: { type: "string" },
      statements: { type: "boolean" },
    },
  });
  const turns = Number(values.turns ?? 500);
  const keep = Number(values.history ?? 0);
  if (!Number.isInteger(turns) || turns < 10 || turns > 100_000) {
    console.error(`--turns must be an integer from 10 to 100000: current value is ${values.turns}`);
    return 2;
  }
  if (!Number.isInteger(keep) || keep < 0) {
    console.error(`--history must be an integer 0 or more: current value is ${values.history}`);
    return 2;
  }
  console.log(
    `bench:conversation  turns=${turns}  history=${keep === 0 ? "whole" : `last ${keep} messages`}`,
  );
  {
    const pglite = await openPglite();
    try {
      await new Store(pglite).applySchema();
      await warmUp(pglite, keep);
      const raw = await rawTurns(pglite, turns);
      const { turns: runtime, stored } = await runtimeTurns(pglite, turns, keep, values.statements);
      report("pglite (in memory)", runtime, raw, stored);
    } finally {
      await pglite.close();
    }
  }
  const url = values["database-url"] ?? env.TEST_DATABASE_URL ?? env.DATABASE_URL;
  if (!url) {
    console.log("\npostgres: skipped (give --database-url, or set TEST_DATABASE_URL)");
    return 0;
  }
  const sandbox = await createSandbox(url, { prefix: "bench_conv", max: 4 });
  try {
    await warmUp(sandbox.store.client, keep);
    const raw = await rawTurns(sandbox.store.client, turns);
    const { turns: runtime, stored } = await runtimeTurns(
      sandbox.store.client,
      turns,
      keep,
      values.statements,
    );
    report("postgres", runtime, raw, stored);
  } finally {
    await sandbox.drop();
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args, Deno.env.toObject()));
