/**
 * What a worker keeps of its run as the run goes on, so a step reads no
 * more at step 10,000 than at step 10: the transcript of its settled steps
 * ({@link SettledTranscript}), and its rows by seq, as its worker holds them ({@link RunState}'s
 * `journal` and `effects`), with the sums a step reads kept as rows are set:
 * model requests paid for, tool calls decided, tokens held against the
 * budget, tool requests sent. Read at every step (the `deciding` line, the
 * budget's check before each model request), they were sums over every row
 * of the run: a step cost more the longer the run (#39).
 *
 * They are maps: a plain one is read by summing (context.ts, budget.ts), so
 * state a test builds by hand reads the same. The sums they keep are
 * `agent/budget.ts`'s {@link JournalSums} and {@link EffectSums}.
 *
 * @module
 */

import type { JournalRow, SideEffectRow } from "../store/rows.ts";
import { callsOf } from "./calls.ts";
import type { TranscriptMessage } from "../model/transcript.ts";
import { type EffectSums, type JournalSums, rowTokens } from "../agent/budget.ts";

/** A run's decisions by seq, with their model requests, tool calls and tokens summed. */
export class JournalRows extends Map<number, JournalRow> implements JournalSums {
  #llmAttempts = 0;
  #toolCalls = 0;
  #tokens = 0;
  #last = -1;

  /** The rows of `rows`, by seq. */
  static of(rows: Iterable<JournalRow>): JournalRows {
    const out = new JournalRows();
    for (const row of rows) out.set(row.seq, row);
    return out;
  }

  /** Model requests paid for: the rows' `llm_attempts`. */
  get llmAttempts(): number {
    return this.#llmAttempts;
  }

  /** Tool calls decided: each decision's calls. */
  get toolCalls(): number {
    return this.#toolCalls;
  }

  /** Tokens spent or reserved: each row's {@link rowTokens}. */
  get tokens(): number {
    return this.#tokens;
  }

  /** No row's seq is higher (-1 when none was set): see {@link rowsFrom}. */
  get lastSeq(): number {
    return this.#last;
  }

  override set(seq: number, row: JournalRow): this {
    const before = super.get(seq);
    if (before !== undefined) this.#count(before, -1);
    this.#count(row, 1);
    this.#last = Math.max(this.#last, seq);
    return super.set(seq, row);
  }

  override delete(seq: number): boolean {
    const before = super.get(seq);
    if (before !== undefined) this.#count(before, -1);
    return super.delete(seq);
  }

  override clear(): void {
    this.#llmAttempts = this.#toolCalls = this.#tokens = 0;
    this.#last = -1;
    super.clear();
  }

  #count(row: JournalRow, sign: 1 | -1): void {
    this.#llmAttempts += sign * row.llm_attempts;
    this.#tokens += sign * rowTokens(row);
    if (row.decision) this.#toolCalls += sign * callsOf(row.decision, row.seq).length;
  }
}

/** A run's tool calls by seq, with the requests sent under their keys summed. */
export class EffectRows extends Map<number, SideEffectRow> implements EffectSums {
  #attempts = 0;
  #last = -1;

  /** The rows of `rows`, by seq. */
  static of(rows: Iterable<SideEffectRow>): EffectRows {
    const out = new EffectRows();
    for (const row of rows) out.set(row.seq, row);
    return out;
  }

  /** Tool requests sent: the rows' `attempts`. */
  get attempts(): number {
    return this.#attempts;
  }

  /** No row's seq is higher (-1 when none was set): see {@link rowsFrom}. */
  get lastSeq(): number {
    return this.#last;
  }

  override set(seq: number, row: SideEffectRow): this {
    this.#attempts += row.attempts - (super.get(seq)?.attempts ?? 0);
    this.#last = Math.max(this.#last, seq);
    return super.set(seq, row);
  }

  override delete(seq: number): boolean {
    this.#attempts -= super.get(seq)?.attempts ?? 0;
    return super.delete(seq);
  }

  override clear(): void {
    this.#attempts = 0;
    this.#last = -1;
    super.clear();
  }
}

/**
 * The rows of `rows` at seq `from` or after, in seq order. Rows a worker
 * keeps ({@link JournalRows}, {@link EffectRows}) know their highest seq, so
 * only the seqs from `from` to it are looked up: a taken run's rows past its
 * settled steps are a few, whatever its length (#39: every take walked all
 * of a run's rows, 20,000 at step 10,000). A plain map (a test's) is walked whole.
 */
export function rowsFrom<T extends { seq: number }>(rows: ReadonlyMap<number, T>, from: number): T[] {
  const out: T[] = [];
  const last = rows instanceof JournalRows || rows instanceof EffectRows ? rows.lastSeq : undefined;
  if (last !== undefined && last - from < rows.size) {
    for (let seq = Math.max(0, from); seq <= last; seq++) {
      const row = rows.get(seq);
      if (row !== undefined) out.push(row);
    }
    return out;
  }
  for (const row of rows.values()) if (row.seq >= from) out.push(row);
  return out.sort((a, b) => a.seq - b.seq);
}

/**
 * The transcript of a run's first steps, all of them settled: each decided,
 * each call confirmed or failed, each answer of a conversation followed by
 * the message taken after it. Their rows never change again, so a worker
 * keeps it (`RunState.transcript`) and each step adds its own steps
 * (`step/history.ts`; #39: rebuilt for every step, a step cost more the
 * longer the run).
 */
export interface SettledTranscript {
  /** The instructions it was built under. */
  instructions: string;
  /** Its messages: the system's, the goal, then the steps'. */
  messages: TranscriptMessage[];
  /** The first step not in it. */
  upTo: number;
  /** The final answers in it (a conversation's). */
  answers: number;
  /** Where each step that added messages begins in `messages`, in order (an agent's `historySteps` shows the last few). */
  starts: number[];
}
