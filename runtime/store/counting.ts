/**
 * Driver wrappers that count or show statements, for the benchmark and for
 * tests that pin the protocol's cost (four commits a step, no reads on the
 * happy path) or check its plans. Statements are counted by the name they
 * are declared under (`statements.ts`), never by their text.
 *
 * @module
 */

import { listenThrough, type QueryOptions, type SqlClient } from "./driver.ts";

/** The name {@link CountingClient} counts a statement sent without one under. */
export const UNNAMED = "(unnamed)";

/** Counts every statement sent through it, by the name it was sent under ({@link QueryOptions.name}). */
export class CountingClient implements SqlClient {
  readonly #inner: SqlClient;
  // Names are few and fixed (each declared beside its statement): one counter
  // each, found with one lookup (#11: counting is the benchmark's own
  // apparatus, charged to the runtime rows' CPU). Past a thousand, unnamed.
  readonly #byName = new Map<string, number>();

  /** Wraps `inner`. */
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }

  /** The wrapped driver's description. */
  get describe(): string {
    return this.#inner.describe;
  }

  /** Statements by name (`journal-intent`, `finish-run`, ..., or {@link UNNAMED}) since the last reset. */
  get counts(): Map<string, number> {
    return new Map([...this.#byName].filter(([, n]) => n > 0));
  }

  /** Every statement counted so far. */
  get total(): number {
    let n = 0;
    for (const c of this.#byName.values()) n += c;
    return n;
  }

  /** Forgets the counts. */
  reset(): void {
    this.#byName.clear();
  }

  query<T = Record<string, unknown>>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    this.#count(opts);
    return this.#inner.query<T>(text, params, opts);
  }

  run(text: string, params?: unknown[], opts?: QueryOptions): Promise<number> {
    this.#count(opts);
    return this.#inner.run(text, params, opts);
  }

  #count(opts: QueryOptions | undefined): void {
    let name = opts?.name ?? UNNAMED;
    if (!this.#byName.has(name) && this.#byName.size >= 1_000) name = UNNAMED;
    this.#byName.set(name, (this.#byName.get(name) ?? 0) + 1);
  }

  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }

  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    return listenThrough(this.#inner, channel, onPayload);
  }
}

/** One statement as a {@link TapClient} saw it, before it was sent. */
export interface TappedStatement {
  /** Sent with `query` (rows wanted) rather than `run`. */
  rows: boolean;
  /** The statement's text. */
  text: string;
  /** Its parameters. */
  params: unknown[];
  /** What it was sent with: its name, above all. */
  opts?: QueryOptions;
}

/**
 * What a {@link TapClient} calls with each statement. It may return a function,
 * called once the statement has settled (answered or refused), with the rows
 * it returned (`query`) or touched (`run`) when it was answered: the
 * benchmarks time statements that way.
 */
export type Tap = (statement: TappedStatement) => void | ((rows?: number) => void);

/** `answer`, with `settled` told once it settles: the rows `count` gives of an answer, nothing of a refusal. */
function tapped<R>(
  answer: Promise<R>,
  settled: (rows?: number) => void,
  count: (r: R) => number,
): Promise<R> {
  return answer.then((r) => {
    settled(count(r));
    return r;
  }, (err) => {
    settled();
    throw err;
  });
}

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
    return settled ? tapped(answer, settled, (rows) => rows.length) : answer;
  }

  run(text: string, params: unknown[] = [], opts?: QueryOptions): Promise<number> {
    const settled = this.#tap(opts ? { rows: false, text, params, opts } : { rows: false, text, params });
    const answer = this.#inner.run(text, params, opts);
    return settled ? tapped(answer, settled, (n) => n) : answer;
  }

  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }

  listen(channel: string, onPayload: (payload: string) => void): Promise<() => Promise<void>> {
    return listenThrough(this.#inner, channel, onPayload);
  }
}
