/**
 * The two scenarios of `bench:long` (long_bench.ts), each measured on one
 * driver: one run of many steps, and one conversation of many messages. A
 * {@link WorkerHost} (production's shape, one slot, each write alone) drives
 * them; the model and the tool are in this process and answer at once, so
 * what is measured is the runtime's and the database's work alone. A
 * watcher (`client.stream`, through a store of its own on the same driver)
 * follows each from its start. Every statement's time is taken by name.
 *
 * @module
 */

import process from "node:process";
import { setImmediate } from "node:timers";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { defineTool, ToolRegistry } from "../runtime/agent/tools.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import type { RunOutcome } from "../runtime/host/outcome.ts";
import type { Planner } from "../runtime/model/planner.ts";
import type { SqlClient } from "../runtime/store/driver.ts";
import { TapClient, UNNAMED } from "../runtime/store/counting.ts";
import { Store } from "../runtime/store/store.ts";
import { waitForSignal } from "../runtime/signals/wait_tools.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";

/** A client that tells `onStatement`, once set, each statement's name, milliseconds and rows. */
export interface Timed {
  /** The client to give a store. */
  readonly client: SqlClient;
  onStatement?: (name: string, ms: number, rows: number) => void;
}

/** Times every statement sent through `inner`, by name (a {@link TapClient}). */
export function timedClient(inner: SqlClient): Timed {
  const timed: { client?: SqlClient; onStatement?: Timed["onStatement"] } = {};
  timed.client = new TapClient(inner, ({ opts }) => {
    const t0 = performance.now();
    return (rows) => timed.onStatement?.(opts?.name ?? UNNAMED, performance.now() - t0, rows ?? 0);
  });
  return timed as Timed;
}

/** A figure taken at a point of the run: its step (or the conversation's message) then, and the value. */
export interface Sample {
  at: number;
  value: number;
}

/** What one scenario measured: a step's time, the take that took the run, a watcher's poll. */
export interface Measured {
  /** Milliseconds per step, at the step (or message) it was taken at. */
  steps: Sample[];
  /** CPU milliseconds (user and system) of this process per step: the runtime's side, the watcher's with it. */
  cpu: Sample[];
  /** Milliseconds of each `take-runs` that took the run. */
  takes: Sample[];
  /** Milliseconds of each of the watcher's polls after its first read (`watch-run` and `read-history-from`). */
  reads: Sample[];
  /**
   * The rows each of those polls read: as many as the steps since the last poll wrote, so more where
   * steps are quicker, whatever the run's length.
   */
  readRows: Sample[];
  /**
   * Milliseconds of the polls made while the long run waited at a take point: the same few rows read at
   * every length.
   */
  parkedReads: Sample[];
  /** Milliseconds from the signal that woke the long run to its next decision. */
  resumes: Sample[];
  /**
   * MB of this process's JavaScript heap in use while the long run waits to be taken again (its host
   * keeps it parked), after a full collection; none unless the process runs with `--expose-gc`.
   */
  heap: Sample[];
  /** Milliseconds by statement name (the host's), each statement at the step it was sent. */
  statements: Map<string, Sample[]>;
  /** The last step (or message). */
  length: number;
}

/** MB of heap in use after a full collection, or undefined when `gc` is not exposed (`--v8-flags=--expose-gc`). */
function heapAfterGc(): number | undefined {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return undefined;
  gc();
  return Deno.memoryUsage().heapUsed / 1e6;
}

/** This process's CPU milliseconds so far. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

function newMeasured(length: number): Measured {
  return {
    steps: [],
    cpu: [],
    takes: [],
    reads: [],
    readRows: [],
    parkedReads: [],
    resumes: [],
    heap: [],
    statements: new Map(),
    length,
  };
}

/**
 * A step's work: answers once the event loop has turned, as a tool that does
 * any I/O does (on PGlite, a run whose model and tools never wait on I/O
 * would hold the loop: no timer, the watcher's polls among them, would fire
 * until it ends).
 */
const tick = defineTool({
  name: "tick",
  description: "Counts a step.",
  args: z.strictObject({ n: z.number().int() }),
  run: async (args) => {
    await new Promise((r) => setImmediate(r));
    return { result: { ticked: args.n } };
  },
});

/** The signal the long run waits for at its take points. */
const GO = "go";

/**
 * The host both scenarios run on: one slot (no take while it drives the run), each write alone. It polls at
 * production's default (`DEFAULTS.pollMs`, 3 s): every take measured is rung (`worker.wake()`), as a client
 * in the host's process rings it. (It polled every 5 ms before; an empty take then cost 4-8 ms on a 2-core VM,
 * so one was nearly always in flight when the signal came, and the wake waited behind it.)
 */
function host(store: Store, agent: unknown, onOutcome: (o: RunOutcome) => void): WorkerHost {
  const clock = new SystemClock();
  return new WorkerHost({
    store,
    clock,
    log: new Logger({ clock, sink: discardSink }),
    owner: `bench-long-${crypto.randomUUID().slice(0, 6)}`,
    heartbeatMs: 60_000,
    leaseMs: 600_000,
    pollMs: DEFAULTS.pollMs,
    runsPerWorker: 1,
    groupCommitMs: 0,
    agents: [agent as never],
    onOutcome,
  }).start();
}

/**
 * Follows `runId` with `client.stream` from a store of its own on `inner`
 * until `stop` aborts, telling `onPoll` the milliseconds of each poll after
 * its first read (the run's row and the rows at or after the follower's mark)
 * and the rows it read.
 */
function watch(
  inner: SqlClient,
  runId: string,
  stop: AbortSignal,
  onPoll: (ms: number, rows: number) => void,
) {
  const timed = timedClient(inner);
  let poll = 0;
  timed.onStatement = (name, ms, rows) => {
    if (name === "watch-run") poll = ms;
    if (name === "read-history-from") onPoll(poll + ms, rows);
  };
  const client = new Client(new Store(timed.client), new SystemClock());
  return (async () => {
    for await (const _ of client.stream(runId, { pollMs: 10, idlePollMs: 10, signal: stop })) {
      // Events are not the measure: the polls are.
    }
  })();
}

/** Records the host's statements at the point `at()` names; a take that took a run among the takes. */
function recordHost(timed: Timed, m: Measured, at: () => number): void {
  timed.onStatement = (name, ms, rows) => {
    const list = m.statements.get(name) ?? [];
    list.push({ at: at(), value: ms });
    m.statements.set(name, list);
    if (name === "take-runs" && rows > 0) m.takes.push({ at: at(), value: ms });
  };
}

/**
 * One run of `steps` steps (a `tick` call each, then the answer), taken again
 * at `takeAt` steps: there the model calls `wait_for_go`, the run sleeps, and
 * the signal wakes it for the host's next take. `historySteps` is the agent's
 * (the model shown the last that many steps; undefined: all).
 */
export async function longRun(
  inner: SqlClient,
  steps: number,
  takeAt: ReadonlySet<number>,
  historySteps?: number,
): Promise<Measured> {
  const m = newMeasured(steps);
  const timed = timedClient(inner);
  const store = new Store(timed.client);
  const client = new Client(store, new SystemClock());
  let step = 0;
  let last = 0;
  let lastCpu = 0;
  let signalled = 0;
  // Running: the watcher's polls are the run's; parked: they are counted from `parkedSince` on (a poll
  // begun before, a collection inside it, is not counted at all).
  let phase: "running" | "parked" = "running";
  let parkedSince = Infinity;
  recordHost(timed, m, () => step);
  const planner: Planner = {
    describe: "bench",
    decide: (req) => {
      const now = performance.now();
      const cpu = cpuMs();
      // A step's time: from its decision to the next; a step that waited for a take is not one.
      if (req.seq > 0 && !takeAt.has(req.seq - 1)) {
        m.steps.push({ at: req.seq - 1, value: now - last });
        m.cpu.push({ at: req.seq - 1, value: cpu - lastCpu });
      }
      lastCpu = cpu;
      if (takeAt.has(req.seq - 1)) m.resumes.push({ at: req.seq - 1, value: now - signalled });
      last = now;
      step = req.seq;
      if (req.seq >= steps - 1) return Promise.resolve({ kind: "done", text: `ticked ${steps} steps` });
      const name = takeAt.has(req.seq) ? `wait_for_${GO}` : "tick";
      return Promise.resolve({
        kind: "tool_calls",
        calls: [{ name, args: name === "tick" ? { n: req.seq } : {} }],
      });
    },
  };
  const tools = [tick, waitForSignal(GO)];
  const agent = defineAgent({ name: "bench-long", tools, maxSteps: 10_000, model: planner, historySteps });
  let ended: ((o: RunOutcome) => void) | undefined;
  const worker = host(store, { agent, planner, tools: new ToolRegistry(tools) }, (o) => ended?.(o));
  const stop = new AbortController();
  const runId = `long-${crypto.randomUUID().slice(0, 8)}`;
  let watcher: Promise<void> | undefined;
  try {
    for (let turn = 0;; turn++) {
      const outcome = new Promise<RunOutcome>((r) => ended = r);
      if (turn === 0) {
        await client.start(agent, { runId, input: "tick until told" });
        watcher = watch(inner, runId, stop.signal, (ms, rows) => {
          if (phase === "running") {
            m.reads.push({ at: step, value: ms });
            m.readRows.push({ at: step, value: rows });
          } else if (performance.now() - ms >= parkedSince) m.parkedReads.push({ at: step, value: ms });
        });
      } else {
        // The host looks for work once when a run's turn ends (a slot freed): its empty take goes first,
        // so the signal's wake is measured alone.
        await new Promise((r) => setTimeout(r, 25));
        // Parked, as the host keeps it: what a long run holds in a worker's memory.
        const heap = heapAfterGc();
        if (heap !== undefined) {
          m.heap.push({ at: step, value: heap });
          // The collection's sweeping goes on after it: done before the signal, not inside the wake it measures.
          await new Promise((r) => setTimeout(r, 25));
        }
        // The watcher's polls of the parked run: nothing new to read, the same few rows at every length.
        parkedSince = performance.now();
        await new Promise((r) => setTimeout(r, 50));
        phase = "running";
        parkedSince = Infinity;
        signalled = performance.now();
        await client.signal(runId, GO, null, { signalId: `go-${turn}` });
      }
      worker.wake();
      const o = await outcome;
      if (o.status === "done") break;
      if (o.status !== "waiting") throw new Error(`the long run ended ${o.status}: ${o.error}`);
      phase = "parked";
    }
    return m;
  } finally {
    stop.abort();
    await worker.stop();
    await watcher;
  }
}

/** Each message: a `tick` call, then the answer. */
const chatPlanner = (m: { step: number }): Planner => ({
  describe: "bench",
  decide: (req) => {
    m.step = req.seq;
    const last = req.transcript[req.transcript.length - 1];
    return Promise.resolve(
      last.role === "user"
        ? { kind: "tool_calls", calls: [{ name: "tick", args: { n: req.seq } }] }
        : { kind: "done", text: `Answer ${req.seq}.` },
    );
  },
});

/**
 * One conversation of `messages` messages, each sent once the one before is
 * answered; `historySteps` is the agent's (undefined: every message shown).
 */
export async function longConversation(
  inner: SqlClient,
  messages: number,
  historySteps?: number,
): Promise<Measured> {
  const m = newMeasured(messages);
  const timed = timedClient(inner);
  const store = new Store(timed.client);
  const client = new Client(store, new SystemClock());
  let message = 0;
  recordHost(timed, m, () => message);
  const planner = chatPlanner({ step: 0 });
  const agent = defineAgent({
    name: "bench-long-chat",
    tools: [tick],
    maxSteps: 4,
    conversation: { idleMs: 3_600_000 },
    model: planner,
    historySteps,
  });
  let ended: ((o: RunOutcome) => void) | undefined;
  const worker = host(store, { agent, planner, tools: new ToolRegistry([tick]) }, (o) => ended?.(o));
  const stop = new AbortController();
  const runId = `chat-${crypto.randomUUID().slice(0, 8)}`;
  let watcher: Promise<void> | undefined;
  try {
    for (message = 0; message < messages; message++) {
      const outcome = new Promise<RunOutcome>((r) => ended = r);
      const t0 = performance.now();
      const cpu0 = cpuMs();
      if (message === 0) {
        await client.start(agent, { runId, input: "message 0" });
        watcher = watch(inner, runId, stop.signal, (ms, rows) => {
          m.reads.push({ at: message, value: ms });
          m.readRows.push({ at: message, value: rows });
        });
      } else await client.conversations.send(runId, `message ${message}`, { messageId: `m${message}` });
      worker.wake();
      const o = await outcome;
      if (o.status !== "waiting") throw new Error(`message ${message} ended ${o.status}: ${o.error}`);
      // Two steps a message: the call, then the answer.
      m.steps.push({ at: message, value: (performance.now() - t0) / 2 });
      m.cpu.push({ at: message, value: (cpuMs() - cpu0) / 2 });
    }
    return m;
  } finally {
    stop.abort();
    await worker.stop();
    await watcher;
  }
}

/** The median of the values sampled at points in [from, to). */
export function medianIn(samples: readonly Sample[], from: number, to: number): number {
  const xs = samples.filter((s) => s.at >= from && s.at < to).map((s) => s.value).sort((a, b) => a - b);
  return xs.length === 0 ? NaN : xs[Math.floor(xs.length / 2)];
}
