/**
 * How a part of a step ended (deciding, acting, sending one tool call): with
 * its value or with the error it threw, and either way with the step's rows
 * as its writes returned them. The loop's telemetry reads a span's outcome
 * from here, the error path's included, instead of from the run's state; the
 * loop throws the error once the spans have it.
 *
 * @module
 */

import type { JournalRow, SideEffectRow } from "../store/rows.ts";

/** A step's rows as a part of it left them: the last each of its writes returned, or the row it started from. */
export interface StepRows {
  /** The step's journal row. */
  journal?: JournalRow;
  /** The step's tool call, for a step with one. */
  effect?: SideEffectRow;
  /** Every tool call of the step (one or several), in seq order. */
  effects?: SideEffectRow[];
}

/** A part of a step that returned `value`. */
export interface Finished<T> {
  /** It returned. */
  ok: true;
  /** What it returned. */
  value: T;
  /** The step's rows as it left them. */
  rows: StepRows;
}

/** A part of a step that threw `error`. */
export interface Failed {
  /** It threw. */
  ok: false;
  /** What it threw, as thrown. */
  error: unknown;
  /** The step's rows as it left them. */
  rows: StepRows;
}

/** How a part of a step ended. */
export type Ended<T> = Finished<T> | Failed;

/** A part that returned `value`, leaving `rows`. */
export function finished<T>(value: T, rows: StepRows): Finished<T> {
  return { ok: true, value, rows };
}

/** A part that threw `error`, leaving `rows`. */
export function failed(error: unknown, rows: StepRows): Failed {
  return { ok: false, error, rows };
}

/** The value a part returned; throws what it threw. */
export function valueOf<T>(ended: Ended<T>): T {
  if (!ended.ok) throw ended.error;
  return ended.value;
}
