/**
 * Runs the real worker (`deno run -A runtime/main.ts`) as a subprocess, for
 * tests that kill processes for real.
 *
 * @module
 */

/** What a finished worker process left behind. */
export interface ProcResult {
  code: number;
  signal: Deno.Signal | null;
  stdout: string;
  stderr: string;
}

const MAIN = new URL("../runtime/main.ts", import.meta.url).pathname;

/** Settings a test must not inherit from the shell that runs it. */
const SCRUBBED = [
  "DATABASE_URL",
  "MODEL_URL",
  "MODEL_API_KEY",
  "CLOUD_URL",
  "RUN_ID",
  "GOAL",
  "CRASH_AT",
  "CRASH_SEQ",
  "STALL_AT",
  "STALL_MS",
  "DATA_DIR",
  "LOG_FORMAT",
];

/** The environment of a child: this process's, minus the runtime's settings, plus `env`. */
export function childEnv(env: Record<string, string>): Record<string, string> {
  const base = Deno.env.toObject();
  for (const name of SCRUBBED) delete base[name];
  return { ...base, ...env };
}

/** Runs one worker process to its end (or its kill) with the given settings. */
export async function runWorkerProcess(
  env: Record<string, string>,
  args: string[] = [],
): Promise<ProcResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--unstable-no-legacy-abort", MAIN, ...args],
    env: childEnv(env),
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return {
    code: out.code,
    signal: out.signal,
    stdout: dec.decode(out.stdout),
    stderr: dec.decode(out.stderr),
  };
}

/** The lines of `text` whose event (third column) is `event`. */
export function events(text: string, event: string): string[] {
  return text.split("\n").filter((l) => l.split(/\s+/)[2] === event);
}
