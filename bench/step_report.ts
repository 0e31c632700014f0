/**
 * How the step bench prints: its table of rows (each runtime row's ratios to
 * the raw row of its store and concurrency), the runtime's rows against the
 * whole-run floor, and `--statements`' latency per statement, by name.
 *
 * @module
 */

import { cpuPerStep, type Row, type StatementTimes, stepsOf, stepsPerS } from "./step_measure.ts";

/** The rows `--statements` times, in the order of its columns. */
export const TIMED = ["replayed", "no wire", "worker host", "raw", "whole run"] as const;
export type Timed = Record<(typeof TIMED)[number], StatementTimes>;

/** Prints each timed row's statements side by side: sent per run and mean latency, then µs per run. */
export function printStatementTimes(prefix: string, times: Timed): void {
  const columns = TIMED.filter((c) => times[c].runs > 0);
  const byColumn = columns.map((c) => new Map(times[c].entries().map((e) => [e.name, e])));
  const names = [...new Set(byColumn.flatMap((m) => [...m.keys()]))];
  const width = 16;
  const cell = (e: { perRun: number; us: number } | undefined) =>
    e
      ? `${(Number.isInteger(e.perRun) ? e.perRun.toFixed(0) : e.perRun.toFixed(2)).padStart(4)} x ${
        e.us.toFixed(0).padStart(5)
      } µs`.padStart(width)
      : " ".repeat(width);
  console.log(
    `${prefix}: time per statement (--statements): sent per run x mean latency, measured runs only`,
  );
  console.log(`  ${"statement".padEnd(22)}${columns.map((c) => c.padStart(width + 1)).join("")}`);
  for (const name of names) {
    console.log(`  ${name.padEnd(22)}${byColumn.map((m) => ` ${cell(m.get(name))}`).join("")}`);
  }
  const perRun = (m: Map<string, { perRun: number; us: number }>) =>
    [...m.values()].reduce((n, e) => n + e.perRun * e.us, 0);
  console.log(
    `  ${"a run, in statements".padEnd(22)}${
      byColumn.map((m) => ` ${`${perRun(m).toFixed(0)} µs`.padStart(width)}`).join("")
    }`,
  );
}

/** Prints the table's header. */
export function header(): void {
  console.log(
    `${"row".padEnd(36)} ${"runs".padStart(5)} ${"conc".padStart(4)} ${"steps/s".padStart(8)} ` +
      `${"x raw".padStart(6)} ${"cpu ms/step".padStart(11)} ${"x raw".padStart(6)} ` +
      `${"srv ms/step".padStart(11)} ${"x raw".padStart(6)} ` +
      `${"stmts/step".padStart(10)} ${"stmts/run".padStart(9)}`,
  );
}

/** Prints one row, with its ratios to `raw` when given. */
export function print(row: Row, raw?: Row): void {
  const ratio = raw ? (stepsPerS(row) / stepsPerS(raw)).toFixed(2) : "-";
  const cpuRatio = raw ? (cpuPerStep(row) / cpuPerStep(raw)).toFixed(2) : "-";
  const server = row.serverCpuMs === undefined ? undefined : row.serverCpuMs / stepsOf(row);
  const rawServer = raw?.serverCpuMs === undefined ? undefined : raw.serverCpuMs / stepsOf(raw);
  const serverRatio = server !== undefined && rawServer ? (server / rawServer).toFixed(2) : "-";
  console.log(
    `${row.label.padEnd(36)} ${String(row.runs).padStart(5)} ${String(row.concurrency).padStart(4)} ` +
      `${stepsPerS(row).toFixed(0).padStart(8)} ${ratio.padStart(6)} ${
        cpuPerStep(row).toFixed(3).padStart(11)
      } ` +
      `${cpuRatio.padStart(6)} ${(server === undefined ? "-" : server.toFixed(3)).padStart(11)} ` +
      `${serverRatio.padStart(6)} ${(row.statements / stepsOf(row)).toFixed(2).padStart(10)} ` +
      `${(row.statements / row.runs).toFixed(1).padStart(9)}`,
  );
}

/**
 * The runtime's rows against the whole-run floor (`raw SQL, whole run`), when
 * it was measured: what the fence, the statements' conditions and the
 * runtime's code cost beyond the writes a run must make.
 */
export function printAgainstWholeRun(rows: Row[]): void {
  const floor = rows.find((r) => r.label.endsWith(" raw SQL, whole run"));
  const others = rows.filter((r) => r !== floor);
  if (!floor || others.length === 0) return;
  console.log(
    `  against ${floor.label} (steps/s ratio, CPU/step ratio): ` +
      others.map((r) =>
        `${r.label.slice(floor.label.length - "raw SQL, whole run".length)} ${
          (stepsPerS(r) / stepsPerS(floor)).toFixed(2)
        } (${(cpuPerStep(r) / cpuPerStep(floor)).toFixed(2)})`
      ).join(", "),
  );
}
