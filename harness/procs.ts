/**
 * Real processes for the tests and the benchmarks: start a supervisor or a
 * worker with `Deno.execPath()`, collect its output lines as they arrive,
 * wait for a line, and parse the log's logfmt fields.
 *
 * @module
 */

import { SUPERVISOR_SETTING_NAMES } from "../cli/supervise.ts";
import { SETTING_NAMES } from "../runtime/settings/config.ts";

const ROOT = new URL("../", import.meta.url);
const path = (rel: string) => decodeURIComponent(new URL(rel, ROOT).pathname);

/**
 * Every setting a process of ours reads (the run command's and the worker's,
 * the supervisor's), as its environment variable name: none is inherited
 * from the shell that runs the tests, so a developer's `DATABASE_URL` cannot
 * turn an embedded test into a PostgreSQL one, nor their `LEASE_S` change a
 * test's timing. Derived from the settings' own lists, so a new setting is
 * cleared the day it is added.
 */
export const CLEARED_SETTINGS: ReadonlySet<string> = new Set([...SETTING_NAMES, ...SUPERVISOR_SETTING_NAMES]);

/**
 * The environment a child starts with: `parent` (this process's) without
 * any of {@link CLEARED_SETTINGS}, then `env` on top (where an empty value
 * counts as unset).
 */
export function childEnv(
  parent: Record<string, string>,
  env: Record<string, string>,
): Record<string, string> {
  return {
    ...Object.fromEntries(Object.entries(parent).filter(([k]) => !CLEARED_SETTINGS.has(k))),
    ...env,
  };
}

/**
 * True for a line Deno itself prints before the program starts while another
 * Deno process holds the project's `node_modules` lock (test files running
 * side by side do): not the program's output, so the collectors drop it.
 */
export function isDenoLockNotice(line: string): boolean {
  // deno-lint-ignore no-control-regex -- the colour codes Deno wraps the notice in
  return /^(?:\x1b\[[0-9;]*m)*Blocking(?:\x1b\[[0-9;]*m)* waiting for file lock/.test(line);
}

/** A running child process whose stdout and stderr lines (but Deno's lock notices) are collected. */
export class Proc {
  /** Every line so far, stdout and stderr interleaved as they arrived. */
  readonly lines: string[] = [];
  readonly #child: Deno.ChildProcess;
  readonly #readers: Promise<void>;
  /** Resolves with the exit code. */
  readonly status: Promise<number>;

  /**
   * Starts `deno run -A <script> [args]` with `env` added to this process's
   * environment. With `prefix`, the command is `prefix... deno run ...`
   * instead: a wrapper that ends by exec'ing deno (`ip netns exec NAME`), so
   * the pid is still deno's.
   */
  constructor(
    script: string,
    env: Record<string, string>,
    opts: { stdin?: "piped" | "null"; args?: string[]; cwd?: string; prefix?: readonly string[] } = {},
  ) {
    const prefix = opts.prefix ?? [];
    this.#child = new Deno.Command(prefix[0] ?? Deno.execPath(), {
      args: [
        ...prefix.slice(1),
        ...(prefix.length > 0 ? [Deno.execPath()] : []),
        "run",
        "-A",
        "--unstable-no-legacy-abort",
        "--config",
        path("deno.json"),
        path(script),
        ...(opts.args ?? []),
      ],
      cwd: opts.cwd,
      clearEnv: true,
      env: childEnv(Deno.env.toObject(), env),
      stdin: opts.stdin ?? "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#readers = Promise.all([this.#collect(this.#child.stdout), this.#collect(this.#child.stderr)])
      .then(() => {});
    this.status = this.#child.status.then(async (s) => {
      await this.#readers;
      return s.code;
    });
  }

  /** The process id. */
  get pid(): number {
    return this.#child.pid;
  }

  async #collect(stream: ReadableStream<Uint8Array>): Promise<void> {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop() ?? "";
      this.lines.push(...parts.filter((l) => !isDenoLockNotice(l)));
    }
    if (rest && !isDenoLockNotice(rest)) this.lines.push(rest);
  }

  /** Lines whose event (the word after the level) is `event`. */
  events(event: string): Record<string, string>[] {
    return this.lines.map(parseLine).filter((l): l is Record<string, string> => l?.event === event);
  }

  /** Waits until `pred` holds for some line; throws with the last lines after `timeoutMs`. */
  async waitFor(pred: (line: string) => boolean, what: string, timeoutMs = 60_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    // Bounded by the deadline.
    while (Date.now() < deadline) {
      const hit = this.lines.find(pred);
      if (hit !== undefined) return hit;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`Timed out waiting for ${what}; last lines:\n${this.lines.slice(-30).join("\n")}`);
  }

  /**
   * Closes the child's stdin (it must have been started with `stdin: "piped"`):
   * what the death of a supervisor does to its workers' stdin.
   */
  async closeStdin(): Promise<void> {
    await this.#child.stdin.close();
  }

  /** Sends a signal, ignoring a process that is already gone. */
  kill(signal: Deno.Signal): void {
    try {
      this.#child.kill(signal);
    } catch {
      // already exited
    }
  }

  /** Kills the process if it still runs and waits for its output to end. */
  async close(): Promise<number> {
    this.kill("SIGKILL");
    return await this.status;
  }
}

/**
 * Parses one strict logfmt line (`k=v k="quoted \\"value\\""`, single spaces,
 * JSON escapes inside quotes) into its fields; undefined for anything else.
 */
export function parseLogfmt(line: string): Record<string, string> | undefined {
  const out: Record<string, string> = {};
  // deno-lint-ignore no-control-regex
  const pair = /([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\\x00-\x1f]|\\.)*"|[^\s"=\\]*)(?: |$)/y;
  let at = 0;
  // Bounded by the line: each match consumes at least `k=`.
  while (at < line.length) {
    pair.lastIndex = at;
    const m = pair.exec(line);
    if (!m || m[1] in out) return undefined;
    if (m[2].startsWith('"')) {
      try {
        out[m[1]] = JSON.parse(m[2]);
      } catch {
        return undefined;
      }
    } else out[m[1]] = m[2];
    at = pair.lastIndex;
  }
  return at > 0 && !line.endsWith(" ") ? out : undefined;
}

/** Parses a log line (`ts=… level=… event=… k=v`) into its fields; undefined for other lines. */
export function parseLine(line: string): Record<string, string> | undefined {
  if (!line.startsWith("ts=")) return undefined;
  const fields = parseLogfmt(line);
  if (!fields || fields.level === undefined || fields.event === undefined) return undefined;
  return fields;
}

/** Starts a supervisor with short test settings (override any in `env`). */
export function startSupervisor(env: { DATABASE_URL: string } & Record<string, string>): Proc {
  return new Proc("cli/main.ts", {
    POLL_S: "0.2",
    LEASE_S: "1",
    HEARTBEAT_S: "0.2",
    WORKERS: "2",
    ...env,
  }, { args: ["supervise"] });
}

/** Runs one worker with `env` to its end (or its kill); resolves with its exit code and output lines. */
export async function runWorkerToEnd(
  env: Record<string, string>,
): Promise<{ code: number; lines: string[] }> {
  const proc = new Proc("cli/main.ts", env, { args: ["run"] });
  const code = await proc.status;
  return { code, lines: proc.lines };
}

/** Starts one worker on `runId` by hand (no supervisor), e.g. with `CRASH_AT`. */
export function startWorker(
  env:
    & { DATABASE_URL: string; MODEL_URL: string; CLOUD_URL: string; RUN_ID: string }
    & Record<string, string>,
): Proc {
  return new Proc("cli/main.ts", { HEARTBEAT_S: "0.2", LEASE_S: "1", ...env }, { args: ["run"] });
}

/** True while a process with this pid exists (Linux: `/proc/<pid>`), and it is not a zombie. */
export function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

/**
 * Runs `cli/main.ts ARGS` with `env` added to this process's environment, to
 * its end: its exit code, and its output lines (stdout and stderr
 * interleaved as they arrived), also joined as one text.
 */
export async function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; out: string; lines: string[] }> {
  const proc = new Proc("cli/main.ts", env, { args });
  const code = await proc.status;
  return { code, out: proc.lines.join("\n"), lines: proc.lines };
}

/** Polls `check` every `everyMs` until it returns true; throws `what` after `timeoutMs`. */
export async function until(
  check: () => Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
  everyMs = 100,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  // Bounded by the deadline.
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`Timed out waiting for ${what}`);
}

/**
 * Runs `cli/main.ts ARGS` with only `env` (plus what Deno needs: HOME, PATH and
 * the caches), so nothing of the developer's shell leaks in; returns its exit
 * code and its whole output, stdout then stderr.
 */
export async function runCliIsolated(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; out: string }> {
  const base: Record<string, string> = {};
  for (const name of ["HOME", "PATH", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) base[name] = value;
  }
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", path("cli/main.ts"), ...args],
    cwd: path("."),
    clearEnv: true,
    env: { ...base, ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) =>
    new TextDecoder().decode(b).split("\n").filter((l) => !isDenoLockNotice(l)).join("\n");
  return { code, out: decode(stdout) + decode(stderr) };
}
