/**
 * Driver wrappers that count or show statements, for the benchmark and for
 * tests that pin the protocol's cost (four commits a step, no reads on the
 * happy path) or check its plans.
 *
 * @module
 */

import type { QueryOptions, SqlClient } from "./store.ts";

/** Counts every statement sent through it, by its first word. */
export class CountingClient implements SqlClient {
  readonly #inner: SqlClient;
  // Statement texts are few and fixed: each has its counter, found with one
  // lookup, and its first word is worked out once (#11: counting is the
  // benchmark's own apparatus, charged to the runtime rows' CPU, so it costs
  // one map lookup a statement). Past a thousand texts, by kind.
  readonly #byText = new Map<string, { kind: string; n: number }>();
  readonly #overflow = new Map<string, number>();

  /** Wraps `inner`. */
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }

  /** The wrapped driver's description. */
  get describe(): string {
    return this.#inner.describe;
  }

  /** Statements by kind (`insert`, `update`, `select`, ...) since the last reset. */
  get counts(): Map<string, number> {
    const out = new Map(this.#overflow);
    for (const { kind, n } of this.#byText.values()) if (n > 0) out.set(kind, (out.get(kind) ?? 0) + n);
    return out;
  }

  /** Every statement counted so far. */
  get total(): number {
    let n = 0;
    for (const c of this.counts.values()) n += c;
    return n;
  }

  /** Forgets the counts. */
  reset(): void {
    for (const c of this.#byText.values()) c.n = 0;
    this.#overflow.clear();
  }

  query<T = Record<string, unknown>>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    this.#count(text);
    return this.#inner.query<T>(text, params, opts);
  }

  run(text: string, params?: unknown[]): Promise<number> {
    this.#count(text);
    return this.#inner.run(text, params);
  }

  #count(text: string): void {
    const counter = this.#byText.get(text);
    if (counter !== undefined) {
      counter.n++;
      return;
    }
    const kind = text.trimStart().split(/\s+/, 1)[0].toLowerCase();
    if (this.#byText.size < 1_000) this.#byText.set(text, { kind, n: 1 });
    else this.#overflow.set(kind, (this.#overflow.get(kind) ?? 0) + 1);
  }

  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** One statement as a {@link TapClient} saw it, before it was sent. */
export interface TappedStatement {
  /** Sent with `query` (rows wanted) rather than `run`. */
  rows: boolean;
  text: string;
  params: unknown[];
  opts?: QueryOptions;
}

/**
 * What a {@link TapClient} calls with each statement. It may return a function,
 * called once the statement has settled (answered or refused): the benchmark
 * times statements that way.
 */
export type Tap = (statement: TappedStatement) => void | (() => void);

/** Shows every statement to `tap`, then passes it on to `inner` unchanged. */
export class TapClient implements SqlClient {
  readonly #inner: SqlClient;
  readonly #tap: Tap;

  /** Wraps `inner`; `tap` sees each statement before it is sent. */
  constructor(inner: SqlClient, tap: Tap) {
    this.#inner = inner;
    this.#tap = tap;
  }

  /** The wrapped driver's description. */
  get describe(): string {
    return this.#inner.describe;
  }

  query<T = Record<string, unknown>>(
    text: string,
    params: unknown[] = [],
    opts?: QueryOptions,
  ): Promise<T[]> {
    const settled = this.#tap({ rows: true, text, params, opts });
    const answer = this.#inner.query<T>(text, params, opts);
    return settled ? answer.finally(settled) : answer;
  }

  run(text: string, params: unknown[] = []): Promise<number> {
    const settled = this.#tap({ rows: false, text, params });
    const answer = this.#inner.run(text, params);
    return settled ? answer.finally(settled) : answer;
  }

  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
