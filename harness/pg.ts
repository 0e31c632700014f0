/**
 * Real PostgreSQL and real worker processes for the harness's `--postgres`
 * mode: a schema of its own per harness run, and `deno run cli/main.ts run`
 * children with the crash settings in their environment.
 *
 * @module
 */

import { createSandbox, type SchemaSandbox } from "../runtime/store/sandbox.ts";

/** The repository root (where deno.json lives), so children resolve `node_modules`. */
export const REPO_ROOT: string = new URL("..", import.meta.url).pathname;
/** The worker entry point a child runs. */
export const MAIN_TS: string = new URL("../cli/main.ts", import.meta.url).pathname;

/** A schema of its own on a PostgreSQL server, with the tables loaded. */
export type PgSchemaHandle = SchemaSandbox;

/** Creates schema `h_<random>` on `serverUrl` and loads schema.sql into it. */
export function freshPgSchema(serverUrl: string): Promise<PgSchemaHandle> {
  return createSandbox(serverUrl, { prefix: "h" });
}

/** How a worker child ended, and everything it printed. */
export interface ChildResult {
  code: number;
  signal: Deno.Signal | null;
  /** stdout then stderr, as lines. */
  lines: string[];
}

/** A running worker child. */
export interface WorkerChild {
  /** Its pid. */
  pid: number;
  /** Resolves when it ends. */
  result: Promise<ChildResult>;
  /** Resolves with the first stdout line containing `needle` (or undefined if it ended first). */
  waitFor(needle: string): Promise<string | undefined>;
  /** Kills it with SIGKILL if it is still running. */
  kill(): void;
}

/**
 * Starts `deno run -A cli/main.ts run` (or `command`, e.g. `worker`) with
 * `env` on top of this process's environment. Crash and stall settings not
 * given are cleared, so a parent's own `CRASH_AT` never leaks into a child.
 */
export function spawnWorker(env: Record<string, string>, command: "run" | "worker" = "run"): WorkerChild {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--unstable-no-legacy-abort", MAIN_TS, command],
    cwd: REPO_ROOT,
    env: { CRASH_AT: "", CRASH_SEQ: "", STALL_AT: "", STALL_MS: "", NO_COLOR: "1", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const watchers: { needle: string; resolve: (line: string | undefined) => void }[] = [];
  const errLines: string[] = [];
  const pump = async (stream: ReadableStream<Uint8Array>, into: string[], watch: boolean) => {
    let buf = "";
    const decoder = new TextDecoder();
    for await (const chunk of stream) {
      buf += decoder.decode(chunk, { stream: true });
      let nl = buf.indexOf("\n");
      // Bounded by the chunk: each pass consumes one line.
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        into.push(line);
        if (watch) {
          for (const w of watchers.filter((w) => line.includes(w.needle))) {
            watchers.splice(watchers.indexOf(w), 1);
            w.resolve(line);
          }
        }
        nl = buf.indexOf("\n");
      }
    }
    if (buf) into.push(buf);
  };
  const pumped = Promise.all([pump(child.stdout, lines, true), pump(child.stderr, errLines, false)]);
  const result = (async () => {
    await pumped;
    const status = await child.status;
    for (const w of watchers.splice(0)) w.resolve(undefined);
    return { code: status.code, signal: status.signal, lines: [...lines, ...errLines] };
  })();
  return {
    pid: child.pid,
    result,
    waitFor: (needle) => {
      const seen = lines.find((l) => l.includes(needle));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve) => {
        watchers.push({ needle, resolve });
        result.then(() => resolve(undefined));
      });
    },
    kill: () => {
      try {
        child.kill("SIGKILL");
      } catch (err) {
        // Already gone: nothing to kill.
        if (!(err instanceof TypeError)) throw err;
      }
    },
  };
}

/** Runs `fn` over `items` with at most `limit` running at once; results in input order. */
export async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async () => {
    // Bounded by items.length: each pass takes one item.
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
  return results;
}
