/**
 * How the step bench measures: a row of runs timed (wall time, this
 * process's CPU, a local PostgreSQL's CPU), runs fanned out at a
 * concurrency, the statements of a row timed by name, and measurements of
 * one row pooled.
 *
 * @module
 */

import process from "node:process";
import { TapClient, UNNAMED } from "../runtime/store/counting.ts";
import type { SqlClient } from "../runtime/store/driver.ts";

/** Steps a run: three tool steps and the done step. */
export const STEPS_PER_RUN = 4;

/** One measured row. */
export interface Row {
  label: string;
  runs: number;
  concurrency: number;
  seconds: number;
  cpuMs: number;
  /** CPU time of the local PostgreSQL server's processes during the row; undefined when not visible. */
  serverCpuMs?: number;
  statements: number;
}

/** Runs each row warms up on, uncounted: enough for the JIT, and for every pooled connection to prepare. */
export const warmRuns = (concurrency: number): number => Math.max(20, 2 * concurrency);

/** A full collection between rows (with `--v8-flags=--expose-gc`), so no row pays for another's garbage. */
export function collectGarbage(): void {
  const gc = (globalThis as { gc?: () => void }).gc;
  for (let i = 0; i < 2; i++) gc?.();
}

/** Steps a row ran. */
export const stepsOf = (r: Row): number => r.runs * STEPS_PER_RUN;
/** A row's steps per second. */
export const stepsPerS = (r: Row): number => stepsOf(r) / r.seconds;
/** A row's client CPU milliseconds per step. */
export const cpuPerStep = (r: Row): number => r.cpuMs / stepsOf(r);

/**
 * CPU milliseconds spent so far by the processes named `postgres` on this
 * machine (a local server's backends, its helpers, and, through the
 * postmaster's children's time, backends that already exited), from
 * `/proc/<pid>/stat`; undefined when there are none or `/proc` is unreadable
 * (a remote server, another OS). At 100 ticks a second, it is good to 10 ms.
 */
function serverCpuMs(): number | undefined {
  let ticks = 0;
  let seen = false;
  try {
    for (const entry of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      try {
        const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
        const close = stat.lastIndexOf(")");
        if (!stat.slice(stat.indexOf("(") + 1, close).startsWith("postgres")) continue;
        // Fields after the name: state is field 3; utime, stime, cutime, cstime are 14 to 17.
        const f = stat.slice(close + 2).split(" ");
        ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
        seen = true;
      } catch {
        // The process exited while being read.
      }
    }
  } catch {
    return undefined;
  }
  return seen ? ticks * 10 : undefined;
}

/** Runs `body` and returns its wall time, this process's CPU time, and a local PostgreSQL's. */
export async function timed(
  body: () => Promise<void>,
  server = false,
): Promise<{ seconds: number; cpuMs: number; serverCpuMs?: number }> {
  const server0 = server ? serverCpuMs() : undefined;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await body();
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const server1 = server0 === undefined ? undefined : serverCpuMs();
  return {
    seconds,
    cpuMs: (cpu.user + cpu.system) / 1000,
    serverCpuMs: server0 === undefined || server1 === undefined ? undefined : server1 - server0,
  };
}

/** Runs `each(i)` for i in [0, runs) with `concurrency` at a time. */
export async function fanOut(
  runs: number,
  concurrency: number,
  each: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      // Bounded: each lane takes the next run number until `runs` are taken.
      while (next < runs) await each(next++);
    }),
  );
}

/**
 * Latency per statement, by the name it is declared under (`QueryOptions.name`
 * for the runtime's, the raw rows' own declarations for theirs), over the
 * measured runs of the rows that report to it (warm-up runs are left out).
 */
export class StatementTimes {
  readonly #byName = new Map<string, { n: number; ms: number }>();
  #on = false;
  runs = 0;

  /**
   * Starts timing the statement `name` while a row is being measured: the
   * returned function records it when the statement has settled.
   */
  timer(name: string): (() => void) | undefined {
    if (!this.#on) return undefined;
    const t0 = performance.now();
    return () => {
      const ms = performance.now() - t0;
      const e = this.#byName.get(name);
      if (e) {
        e.n++;
        e.ms += ms;
      } else this.#byName.set(name, { n: 1, ms });
    };
  }

  /** Sends the statement `name` with `send`, timed by {@link timer}. */
  time<R>(name: string, send: () => Promise<R>): Promise<R> {
    const settled = this.timer(name);
    return settled ? send().finally(settled) : send();
  }

  /** `client`, each statement timed (the runtime rows' store). */
  tap(client: SqlClient): SqlClient {
    return new TapClient(client, ({ opts }) => this.timer(opts?.name ?? UNNAMED));
  }

  /** Counts from now on (the row's clock starts). */
  start(): void {
    this.#on = true;
  }

  /** Stops counting: `runs` more runs were measured. */
  stop(runs: number): void {
    this.#on = false;
    this.runs += runs;
  }

  /** Per statement: sent per run and mean latency in µs. */
  entries(): { name: string; perRun: number; us: number }[] {
    return [...this.#byName].map(([name, { n, ms }]) => ({
      name,
      perRun: n / this.runs,
      us: (ms / n) * 1000,
    }));
  }
}

/** A turn's steps/s over the steps/s of the raw halves around it. */
export const turnRatio = (row: Row, raw: Row): number => stepsPerS(row) / stepsPerS(raw);

/** One row from several measurements of it: their runs, time, CPU and statements added up. */
export function pool(turns: Row[]): Row {
  const server = turns.every((t) => t.serverCpuMs !== undefined)
    ? turns.reduce((n, t) => n + t.serverCpuMs!, 0)
    : undefined;
  return {
    label: turns[0].label,
    concurrency: turns[0].concurrency,
    runs: turns.reduce((n, t) => n + t.runs, 0),
    seconds: turns.reduce((n, t) => n + t.seconds, 0),
    cpuMs: turns.reduce((n, t) => n + t.cpuMs, 0),
    serverCpuMs: server,
    statements: turns.reduce((n, t) => n + t.statements, 0),
  };
}
