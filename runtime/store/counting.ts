/**
 * A driver wrapper that counts statements, for the benchmark and for tests
 * that pin the protocol's cost (four commits a step, no reads on the happy
 * path).
 *
 * @module
 */

import type { QueryOptions, SqlClient } from "./store.ts";

/** Counts every statement sent through it, by its first word. */
export class CountingClient implements SqlClient {
  readonly #inner: SqlClient;
  /** Statements by kind: `insert`, `update`, `select`, ... */
  readonly counts: Map<string, number> = new Map();

  /** Wraps `inner`. */
  constructor(inner: SqlClient) {
    this.#inner = inner;
  }

  /** The wrapped driver's description. */
  get describe(): string {
    return this.#inner.describe;
  }

  /** Every statement counted so far. */
  get total(): number {
    let n = 0;
    for (const c of this.counts.values()) n += c;
    return n;
  }

  /** Forgets the counts. */
  reset(): void {
    this.counts.clear();
  }

  // Statement texts are few and fixed: their first word is worked out once
  // each, so counting costs the benchmark's runtime rows next to nothing.
  readonly #kinds = new Map<string, string>();

  query<T = Record<string, unknown>>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> {
    this.#count(text);
    return this.#inner.query<T>(text, params, opts);
  }

  run(text: string, params?: unknown[]): Promise<number> {
    this.#count(text);
    return this.#inner.run(text, params);
  }

  #count(text: string): void {
    let kind = this.#kinds.get(text);
    if (kind === undefined) {
      kind = text.trimStart().split(/\s+/, 1)[0].toLowerCase();
      if (this.#kinds.size < 1_000) this.#kinds.set(text, kind);
    }
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + 1);
  }

  exec(text: string): Promise<void> {
    return this.#inner.exec(text);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
