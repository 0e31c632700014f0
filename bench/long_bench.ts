/**
 * `deno task bench:long`: what a step, a take and a watcher's read cost at a
 * run's start and at its end (issue 39, "flat at any length"). Two
 * scenarios, each on PGlite (in memory) and on PostgreSQL (`--database-url`
 * or `TEST_DATABASE_URL`, in a schema of its own, dropped after):
 *
 * - **a long run**: one run of `--steps` steps (default 10,000), each a call
 *   of an in-process tool the model (in process, answering at once) asks
 *   for. At `--takes` steps near its start (default 10: 5 to 14) and at its
 *   last as many it calls `wait_for_go` instead: the run sleeps, a signal
 *   wakes it, and the host takes it again, so the take of a run of that
 *   length is measured (the median of those takes at each end);
 * - **a long conversation**: `--messages` messages (default 1,000), each a
 *   tool call and an answer, each message taken by the host's take.
 *
 * For each: milliseconds per step (decision to decision; for the
 * conversation, send to answer over its two steps), of the `take-runs`
 * statement that took the run, and of a watcher's poll (`client.stream`,
 * polling every 10 ms: `watch-run` and `read-history-from`), as the median
 * over a window at the start (the w steps after the first waits; messages 10 to 10 + w) and
 * one at the end (the last w steps before the final waits; the last w
 * messages), w a hundredth of the steps (at least 10) or a fortieth of the
 * messages (at least 10); then end / start. Before them, unmeasured, a run
 * of 40 steps and a conversation of 30 messages warm the code and the
 * statements up. `--statements` adds each of the host's statements the same
 * way, and CPU per step (this process's user and system time, the watcher's
 * included) is given beside the wall clock, which a busy machine blurs. Run
 * with `--v8-flags=--expose-gc` (as the task is), it also gives the heap in
 * use, after a full collection, while the long run waits at its take points:
 * what the run holds in its worker's memory.
 * `--history-steps N` gives both agents `historySteps: N` (the model shown
 * its last N steps; without it, every step).
 *
 * ```sh
 * deno task bench:long --database-url postgres://postgres@127.0.0.1:5432/test
 * deno task bench:long --steps 2000 --messages 200      # a quick look
 * ```
 *
 * Exit codes: 0 measured, 2 bad flags.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { checkHistorySteps, HISTORY_STEPS_MAX } from "../runtime/agent/agent.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { Store } from "../runtime/store/store.ts";
import type { SqlClient } from "../runtime/store/driver.ts";
import { longConversation, longRun, type Measured, medianIn } from "./long_measure.ts";

/** The figures of one scenario: each start, end and end / start. */
export interface Flatness {
  label: string;
  rows: { name: string; start: number; end: number; ratio: number }[];
}

/** Where the start and end windows of a scenario lie. */
interface Windows {
  start: [number, number];
  end: [number, number];
}

/** The steps the long run waits at to be taken again: `n` near its start (5 to 4 + n), its last `n`. */
export function takePoints(steps: number, n = 10): Set<number> {
  const each = Array.from({ length: n }, (_, i) => i);
  return new Set([...each.map((i) => 5 + i), ...each.map((i) => steps - 1 - n + i)]);
}

/** A long run's step windows, past its take points at each end. */
function runWindows(steps: number, n: number): Windows {
  const w = Math.max(10, Math.floor(steps / 100));
  return { start: [5 + n, 5 + n + w], end: [steps - 1 - n - w, steps - 1 - n] };
}

function chatWindows(messages: number): Windows {
  const w = Math.max(10, Math.floor(messages / 40));
  return { start: [10, 10 + w], end: [messages - w, messages] };
}

/** The takes near the start are those before the start window; the last ones at the end. */
function flatness(label: string, m: Measured, win: Windows, takes: Windows, statements: boolean): Flatness {
  const row = (name: string, samples: Measured["steps"], w: Windows) => {
    const start = medianIn(samples, ...w.start);
    const end = medianIn(samples, ...w.end);
    return { name, start, end, ratio: end / start };
  };
  const rows = [
    row("ms per step", m.steps, win),
    row("CPU ms per step (this process)", m.cpu, win),
    row("take-runs ms (the run's take)", m.takes, takes),
    row("watcher poll ms", m.reads, win),
    row("  rows a poll read", m.readRows, win),
  ];
  if (m.parkedReads.length > 0) rows.push(row("watcher poll ms, the run parked", m.parkedReads, takes));
  if (m.resumes.length > 0) rows.push(row("signal to next decision ms", m.resumes, takes));
  if (m.heap.length > 0) rows.push(row("heap MB, the run parked", m.heap, takes));
  if (statements) {
    for (const [name, samples] of [...m.statements].sort(([a], [b]) => a.localeCompare(b))) {
      const r = row(`  ${name}`, samples, win);
      if (name !== "take-runs" && !Number.isNaN(r.ratio)) rows.push(r);
    }
  }
  return { label, rows };
}

function print(f: Flatness, at: [string, string]): void {
  console.log(`\n${f.label}`);
  console.log(`  ${"".padEnd(34)}${at[0].padStart(14)}${at[1].padStart(14)}${"end/start".padStart(11)}`);
  for (const r of f.rows) {
    const n = (x: number) => (Number.isNaN(x) ? "-" : x.toFixed(3)).padStart(14);
    console.log(
      `  ${r.name.padEnd(34)}${n(r.start)}${n(r.end)}${
        (Number.isNaN(r.ratio) ? "-" : r.ratio.toFixed(2)).padStart(11)
      }`,
    );
  }
}

/** Both scenarios on one driver. */
export async function measure(
  client: SqlClient,
  where: string,
  opts: { steps: number; messages: number; statements: boolean; historySteps?: number; takes: number },
): Promise<Flatness[]> {
  const out: Flatness[] = [];
  // Unmeasured, a short run and a short conversation first: the code compiled, the statements prepared.
  if (opts.steps > 0) await longRun(client, 40, takePoints(40));
  if (opts.messages > 0) await longConversation(client, 30);
  if (opts.steps > 0) {
    const m = await longRun(client, opts.steps, takePoints(opts.steps, opts.takes), opts.historySteps);
    const takes: Windows = { start: [0, 5 + opts.takes], end: [opts.steps - 1 - opts.takes, opts.steps] };
    const f = flatness(
      `${where}: one run of ${opts.steps} steps`,
      m,
      runWindows(opts.steps, opts.takes),
      takes,
      opts.statements,
    );
    print(f, [`step ~10`, `step ~${opts.steps}`]);
    out.push(f);
  }
  if (opts.messages > 0) {
    const m = await longConversation(client, opts.messages, opts.historySteps);
    const win = chatWindows(opts.messages);
    const f = flatness(`${where}: a conversation of ${opts.messages} messages`, m, win, win, opts.statements);
    print(f, [`message ~10`, `message ~${opts.messages}`]);
    out.push(f);
  }
  return out;
}

/** Runs the bench; returns the exit code. `results` gets every scenario's figures. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  results: Flatness[] = [],
): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      steps: { type: "string" },
      messages: { type: "string" },
      "database-url": { type: "string" },
      "no-pglite": { type: "boolean" },
      statements: { type: "boolean" },
      "history-steps": { type: "string" },
      takes: { type: "string" },
    },
  });
  const steps = Number(values.steps ?? 10_000);
  const messages = Number(values.messages ?? 1_000);
  if (!Number.isInteger(steps) || (steps !== 0 && (steps < 40 || steps > 10_000))) {
    console.error(`--steps must be 0 or an integer from 40 to 10000: current value is ${values.steps}`);
    return 2;
  }
  if (!Number.isInteger(messages) || (messages !== 0 && (messages < 30 || messages > 100_000))) {
    console.error(
      `--messages must be 0 or an integer from 30 to 100000: current value is ${values.messages}`,
    );
    return 2;
  }
  const takes = Number(values.takes ?? 10);
  if (!Number.isInteger(takes) || takes < 1 || takes > 100 || (steps !== 0 && steps < 2 * takes + 20)) {
    console.error(
      `--takes must be an integer from 1 to 100, and --steps at least 2 x --takes + 20: current values are ` +
        `${values.takes} and ${steps}`,
    );
    return 2;
  }
  // The agent's own rule, so the bench refuses what defineAgent would.
  const given = values["history-steps"];
  let historySteps: number | undefined;
  try {
    historySteps = given === undefined ? undefined : checkHistorySteps(Number(given), () =>
      new Error(
        `--history-steps must be an integer from 1 to ${HISTORY_STEPS_MAX}: current value is ${given}`,
      ));
  } catch (err) {
    console.error((err as Error).message);
    return 2;
  }
  const opts = { steps, messages, statements: values.statements === true, historySteps, takes };
  console.log(
    `bench:long  steps=${steps}  messages=${messages}` +
      (historySteps ? `  history-steps=${historySteps}` : "") + (takes !== 10 ? `  takes=${takes}` : ""),
  );
  if (!values["no-pglite"]) {
    const pglite = await openPglite();
    try {
      await new Store(pglite).applySchema();
      results.push(...await measure(pglite, "pglite (in memory)", opts));
    } finally {
      await pglite.close();
    }
  }
  const url = values["database-url"] ?? env.TEST_DATABASE_URL;
  if (!url) {
    console.log("\npostgres: skipped (give --database-url, or set TEST_DATABASE_URL)");
    return 0;
  }
  const sandbox = await createSandbox(url, { prefix: "bench_long", max: 4 });
  try {
    results.push(...await measure(sandbox.store.client, "postgres", opts));
  } finally {
    await sandbox.drop();
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args, Deno.env.toObject()));
