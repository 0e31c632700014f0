/**
 * Settings: read once at start-up from the environment and the same names as
 * command-line flags (flags win), validated together, so a person sees every
 * problem at once with what was expected.
 *
 * | env | flag | default |
 * | --- | --- | --- |
 * | `AGENT` | `--agent` | the demo agent (`examples/provision/agent.ts`) |
 * | `RUN_ID` | `--run-id` | a new run, `<agent>-<8 hex>` |
 * | `GOAL`, `INPUT` | `--goal`, `--input` | the agent's default input |
 * | `RUNS_PER_WORKER`, `POLL_S` | `--runs-per-worker`, `--poll-s` | 100, 3 (worker processes) |
 * | `TAKE_SHARE` | `--take-share` | `fair`: a poll takes no more than its share among live workers; `all`: every free slot |
 * | `DATABASE_URL` | `--database-url` | unset: embedded PGlite under `DATA_DIR` |
 * | `DATA_DIR` | `--data-dir` | `.data` |
 * | `MODEL_URL`, `MODEL`, `MODEL_API_KEY` | `--model-url`, `--model`, `--model-api-key` | unset: in-process mock model (`MODEL` is required with a URL) |
 * | `MODEL_HEADERS`, `MODEL_QUERY` | `--model-headers`, `--model-query` | none: JSON object or `k=v,k2=v2` |
 * | `MODEL_MAX_TOKENS_FIELD` | `--model-max-tokens-field` | `max_tokens` (or `max_completion_tokens`): caps a budgeted request's answer |
 * | `MODEL_PARAMS` | `--model-params` | none: a new run's own request parameters, a JSON object (`{"temperature":0.2}`) |
 * | `CLOUD_URL` | `--cloud-url` | unset: in-process mock cloud |
 * | `MAX_STEPS` | `--max-steps` | 12 |
 * | `TOOL_CONCURRENCY` | `--tool-concurrency` | the agent's, 4: calls of one step in flight at once |
 * | `WORKER` | `--worker` | `<hostname>:<pid>` |
 * | `CRASH_AT`, `CRASH_SEQ`, `STALL_AT`, `STALL_MS` | `--crash-at`, ... | none, 0, none, 5000 |
 * | `HEARTBEAT_S`, `LEASE_S` | `--heartbeat-s`, `--lease-s` | 3, 12 |
 * | `LOG_FORMAT` | `--log-format` | `text` |
 * | `AGENT_LOAD_S` | `--agent-load-s` | 30: how long the agent module may take to import |
 * | `DATA_DIR_WAIT_S` | `--data-dir-wait-s` | 60: how long to wait for an embedded database another process holds |
 * | `STREAM_DELTAS` | `--stream-deltas` | 0: 1 streams model answers and notifies watchers of their text |
 * | `GROUP_COMMIT_MS` | `--group-commit-ms` | 2: the longest a write waits to share a statement with other runs' (0: off) |
 * | `RETRY_HORIZON_S` | `--retry-horizon-s` | 3600: how long requests failing as in an outage are asked again (an agent's or tool's `retry` wins) |
 * | `RETRY_BACKOFF_MS`, `RETRY_BACKOFF_MAX_S` | `--retry-backoff-ms`, `--retry-backoff-max-s` | 500, 60: the first wait between them, doubled each time up to the cap |
 *
 * @module
 */

import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { CRASH_POINTS, type CrashPlan, isCrashPoint } from "../base/crashpoints.ts";
import { ConfigError } from "../base/errors.ts";
import { RUN_ID_PATTERN, RUN_ID_SHAPE } from "../base/ids.ts";
import { parseKeyValues } from "../base/http.ts";
import type { LogFormat } from "../base/log.ts";
import { TAKE_SHARES, type TakeShare } from "../base/take_share.ts";
import { parseModelParams } from "../model/params.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { RetryPolicy } from "../base/retry.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { parseHostsUrl, redactUrl } from "../base/urls.ts";

/** A run id: a letter or digit, then up to 63 letters, digits, `.`, `_` or `-` (declared in ids.ts). */
export { RUN_ID_PATTERN };

/** Validated settings of a worker. */
export interface Settings {
  /** The agent module (`AGENT`): a path or URL; unset: the demo agent. */
  agentModule?: string;
  /** `run` only: which of the module's agents, when it exports several (`AGENT_NAME`). */
  agentName?: string;
  /**
   * The run to work (`RUN_ID`). Unset: a new run with a generated id
   * (`<agent>-<8 hex>`), so two databases that share a remote never send it
   * the same idempotency key by accident.
   */
  runId?: string;
  /** The goal (text input), used when the run is created (`GOAL`); unset: the agent's default input. */
  goal?: string;
  /** JSON input for an agent with an input schema (`INPUT`). */
  input?: string;
  /** Runs one worker process holds at once (`RUNS_PER_WORKER`). */
  runsPerWorker: number;
  /** How often an idle worker looks for runs (`POLL_S`). */
  pollMs: number;
  /** How much of the takeable work one poll takes (`TAKE_SHARE`, `fair` or `all`; default `fair`). */
  takeShare: TakeShare;
  /** Unset: the embedded PGlite store under `dataDir`. */
  databaseUrl?: string;
  /** Where the embedded database and the in-process mocks keep their state (`DATA_DIR`). */
  dataDir: string;
  /** Unset: the in-process mock model. */
  modelUrl?: string;
  /** The model name sent with each request (`MODEL`); required with a model URL, unset for the in-process mock. */
  model?: string;
  /** Bearer token for the model (`MODEL_API_KEY`); never logged. */
  modelApiKey?: string;
  /** Extra headers on every model request (`MODEL_HEADERS`), as given: a JSON object or `k=v,k2=v2`. */
  modelHeaders?: string;
  /** Extra query parameters on every model request (`MODEL_QUERY`, e.g. Azure's `api-version=2024-10-21`). */
  modelQuery?: string;
  /** The request field capping a budgeted request's answer (`MODEL_MAX_TOKENS_FIELD`); unset: `max_tokens`. */
  modelMaxTokensField?: "max_tokens" | "max_completion_tokens";
  /** Unset: the in-process mock cloud. */
  cloudUrl?: string;
  /** Decisions before `guard` stops the run (`MAX_STEPS`); unset: the agent's `maxSteps`. */
  maxSteps?: number;
  /** A new run's own model request parameters (`MODEL_PARAMS`, a JSON object), over its agent's. */
  modelParams?: ModelParams;
  /** Calls of one step in flight at once (`TOOL_CONCURRENCY`); unset: the agent's `toolConcurrency`. */
  toolConcurrency?: number;
  /** This worker's name, written to `runs.owner` (`WORKER`). */
  worker: string;
  /** Where to crash or stall (`CRASH_AT`, `CRASH_SEQ`, `STALL_AT`, `STALL_MS`). */
  crash: CrashPlan;
  /** How often the lease is refreshed (`HEARTBEAT_S`). */
  heartbeatMs: number;
  /** How old a heartbeat may get before the run counts as abandoned (`LEASE_S`). */
  leaseMs: number;
  /** `text` or `json` (`LOG_FORMAT`). */
  logFormat: LogFormat;
  /** Exit when stdin reaches EOF (set by the supervisor for its workers). */
  exitOnStdinEof: boolean;
  /** How long the agent module may take to import before the process refuses it (`AGENT_LOAD_S`). */
  agentLoadMs: number;
  /**
   * How long to wait for the embedded database while another process (the
   * page, another worker) holds it, before refusing (`DATA_DIR_WAIT_S`; 0
   * refuses at once).
   */
  dataDirWaitMs: number;
  /**
   * Stream the model's answers and send their text to watchers through the
   * database's notifications as it is written (`STREAM_DELTAS`, 1 or 0;
   * default 0). See docs/streaming.md.
   */
  streamDeltas: boolean;
  /**
   * Group commit (`GROUP_COMMIT_MS`): the longest, in milliseconds, a run's
   * write waits to share one statement and commit with other runs' writes;
   * default 2; 0 sends each alone. A write with no other in flight goes at
   * once. See docs/operating.md, "Group commit".
   */
  groupCommitMs: number;
  /**
   * The process's retry policy, the fields set (`RETRY_HORIZON_S`,
   * `RETRY_BACKOFF_MS`, `RETRY_BACKOFF_MAX_S`): over the defaults, under an
   * agent's and a tool's own `retry`. See docs/settings.md, "Outages".
   */
  retry: Partial<RetryPolicy>;
}

/** Default of `AGENT_LOAD_S`: long enough for a module that fetches its dependencies, short of a hang. */
export const AGENT_LOAD_DEFAULT_S = DEFAULTS.agentLoadS;
/** Default of `DATA_DIR_WAIT_S`. */
export const DATA_DIR_WAIT_DEFAULT_S = DEFAULTS.dataDirWaitS;

/** Every setting, as its environment variable name, with its flag spelled in kebab case. */
export const SETTING_NAMES: readonly string[] = [
  "AGENT",
  "AGENT_NAME",
  "RUN_ID",
  "GOAL",
  "INPUT",
  "RUNS_PER_WORKER",
  "POLL_S",
  "TAKE_SHARE",
  "DATABASE_URL",
  "DATA_DIR",
  "MODEL_URL",
  "MODEL",
  "MODEL_API_KEY",
  "MODEL_HEADERS",
  "MODEL_QUERY",
  "MODEL_MAX_TOKENS_FIELD",
  "MODEL_PARAMS",
  "CLOUD_URL",
  "MAX_STEPS",
  "TOOL_CONCURRENCY",
  "WORKER",
  "CRASH_AT",
  "CRASH_SEQ",
  "STALL_AT",
  "STALL_MS",
  "HEARTBEAT_S",
  "LEASE_S",
  "LOG_FORMAT",
  "EXIT_ON_STDIN_EOF",
  "AGENT_LOAD_S",
  "DATA_DIR_WAIT_S",
  "RETRY_HORIZON_S",
  "RETRY_BACKOFF_MS",
  "RETRY_BACKOFF_MAX_S",
  "STREAM_DELTAS",
  "GROUP_COMMIT_MS",
];
const NAMES = SETTING_NAMES;

const KEEP_EMPTY = new Set(["RUN_ID"]);

/** The command-line flag of a setting: `RUN_ID` is `--run-id`. */
export function flagOf(name: string): string {
  return "--" + name.toLowerCase().replaceAll("_", "-");
}

/**
 * A command line that does not parse (an unknown flag, a flag without its
 * value): reported as one line and exit code 2, apart from the settings
 * problems a {@link ConfigError} lists.
 */
export class FlagError extends ConfigError {
  /** Creates a flag error with one sentence. */
  constructor(problem: string) {
    super([problem]);
    this.name = "FlagError";
  }
}

/**
 * The first sentence of a `node:util` `parseArgs` error, in our words:
 * `Unknown option '--x'. To specify a positional argument ...` becomes
 * `unknown flag '--x'`.
 */
export function flagProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if (unknown) return `unknown flag '${unknown[1]}'`;
  const first = message.split("\n")[0];
  const sentence = /^(.*?[^.])\.(\s|$)/.exec(first);
  return (sentence ? sentence[1] : first).replace(/^Option /, "flag ");
}

/**
 * Parses a tool command's flags (`strict`, no positionals) with `node:util`
 * `parseArgs`. A flag it does not know, or a malformed one, prints one line
 * naming it and `--help` to stderr, and `--help` (`-h`) prints `usage`: both
 * come back as `{ exit }`, the code the command returns (2 and 0).
 */
export function commandFlags<const O extends ParseArgsOptionsConfig>(
  command: string,
  usage: string,
  args: string[],
  options: O,
): { values: ReturnType<typeof parseArgs<{ args: string[]; options: O; strict: true }>>["values"] } | {
  exit: number;
} {
  let values;
  try {
    ({ values } = parseArgs({ args, options, strict: true }));
  } catch (err) {
    console.error(`${command}: ${flagProblem(err)}. 'deno task ${command} --help' lists the flags`);
    return { exit: 2 };
  }
  if ((values as Record<string, unknown>).help) {
    console.log(usage);
    return { exit: 0 };
  }
  return { values };
}

/** Reads raw values: flags first, then the environment. Unknown flags are errors. */
export function readRaw(
  args: string[],
  env: Record<string, string | undefined>,
  names: readonly string[] = NAMES,
): { values: Record<string, string | undefined>; positionals: string[] } {
  const options: Record<string, { type: "string" }> = {};
  for (const name of names) options[flagOf(name).slice(2)] = { type: "string" };
  let parsed;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
  } catch (err) {
    throw new FlagError(`${flagProblem(err)}. Known flags: ${names.map(flagOf).join(", ")}`);
  }
  const values: Record<string, string | undefined> = {};
  for (const name of names) {
    const flag = (parsed.values as Record<string, string | undefined>)[flagOf(name).slice(2)];
    const raw = flag ?? env[name];
    // An empty value counts as unset, except a run id: an empty one is a mistake
    // (a variable that was meant to hold an id), not a request for the default.
    values[name] = raw === undefined || (raw === "" && !KEEP_EMPTY.has(name)) ? undefined : raw;
  }
  return { values, positionals: parsed.positionals };
}

/**
 * An integer given as text (a setting or a flag), within [min, max] and
 * exact (a safe integer): the number, or the problem as one sentence naming
 * `name` and the value seen.
 */
export function integerIn(name: string, raw: string, min: number, max: number): number | string {
  const n = Number(raw);
  return /^-?\d+$/.test(raw.trim()) && Number.isSafeInteger(n) && n >= min && n <= max
    ? n
    : `${name} must be an integer from ${min} to ${max}: current value is ${JSON.stringify(raw)}`;
}

/** Collects problems while reading typed values. */
export class SettingsReader {
  readonly problems: string[] = [];
  constructor(readonly values: Record<string, string | undefined>) {}

  /** A string, or the default. */
  str(name: string, fallback: string): string;
  str(name: string): string | undefined;
  str(name: string, fallback?: string): string | undefined {
    return this.values[name] ?? fallback;
  }

  /** An integer within [min, max], or the default. */
  int(name: string, fallback: number, min: number, max: number): number {
    const raw = this.values[name];
    if (raw === undefined) return fallback;
    const n = integerIn(name, raw, min, max);
    if (typeof n === "string") {
      this.problems.push(n);
      return fallback;
    }
    return n;
  }

  /** A number of seconds from `min_s` (default 0.01) to 86400, returned in milliseconds. */
  seconds(name: string, fallback_s: number, min_s = 0.01): number {
    const raw = this.values[name];
    if (raw === undefined) return fallback_s * 1000;
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(n) || n < min_s || n > 86_400) {
      this.problems.push(
        `${name} must be a number of seconds from ${min_s} to 86400: current value is ${JSON.stringify(raw)}`,
      );
      return fallback_s * 1000;
    }
    return Math.round(n * 1000);
  }

  /** A URL with one of the given protocols. */
  url(name: string, protocols: string[], example: string): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    let ok = false;
    try {
      const u = parseHostsUrl(raw).url;
      ok = protocols.includes(u.protocol) && u.hostname !== "";
      try {
        for (const part of [u.username, u.password, u.pathname]) decodeURIComponent(part);
      } catch {
        this.problems.push(
          `${name} has a malformed percent-escape in its user, password or path (write '%' as '%25'): ` +
            `current value is ${JSON.stringify(redactUrl(raw))}`,
        );
        return undefined;
      }
    } catch {
      ok = false;
    }
    if (!ok) {
      this.problems.push(
        `${name} must be a URL like ${example}: current value is ${JSON.stringify(redactUrl(raw))}`,
      );
      return undefined;
    }
    return raw;
  }

  /** Extra headers or query parameters: a JSON object of strings, or `k=v,k2=v2`. Returned as given. */
  keyValues(name: string, kind: "headers" | "query"): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    try {
      parseKeyValues(raw, kind);
    } catch (err) {
      // The value is not echoed: a header may carry a key.
      this.problems.push(
        `${name} must be a JSON object of strings or name=value pairs separated by commas ` +
          `(e.g. ${kind === "query" ? "api-version=2024-10-21" : '{"api-key":"..."}'}): ${
            (err as Error).message
          }`,
      );
      return undefined;
    }
    return raw;
  }

  /** A run id matching {@link RUN_ID_PATTERN}. */
  runId(name: string): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    if (!RUN_ID_PATTERN.test(raw)) {
      this.problems.push(
        `${name} must be ${RUN_ID_SHAPE}: current value is ${JSON.stringify(raw)}`,
      );
    }
    return raw;
  }

  /** `MODEL_MAX_TOKENS_FIELD`: unset, `max_tokens` or `max_completion_tokens`. */
  maxTokensField(): Settings["modelMaxTokensField"] {
    const raw = this.str("MODEL_MAX_TOKENS_FIELD");
    if (raw === undefined || raw === "max_tokens" || raw === "max_completion_tokens") return raw;
    this.problems.push(
      `MODEL_MAX_TOKENS_FIELD must be "max_tokens" or "max_completion_tokens": current value is ${
        JSON.stringify(raw)
      }`,
    );
    return undefined;
  }

  /** `TAKE_SHARE`: `fair` (the default) or `all` (see `WorkerOptions.takeShare`). */
  takeShare(): TakeShare {
    const raw = this.str("TAKE_SHARE", "fair");
    const known = TAKE_SHARES.find((t) => t === raw);
    if (known !== undefined) return known;
    this.problems.push(
      `TAKE_SHARE must be "fair" (each poll takes no more than its share among the live workers) or "all" ` +
        `(every free slot): current value is ${JSON.stringify(raw)}`,
    );
    return "fair";
  }

  /** `LOG_FORMAT`: `text` (the default) or `json`. */
  logFormat(): LogFormat {
    const raw = this.str("LOG_FORMAT", "text");
    if (raw === "text" || raw === "json") return raw;
    this.problems.push(`LOG_FORMAT must be "text" or "json": current value is ${JSON.stringify(raw)}`);
    return "text";
  }

  /** `HEARTBEAT_S` and `LEASE_S` (3 and 12), the heartbeat shorter than the lease. */
  lease(): { heartbeatMs: number; leaseMs: number } {
    const heartbeatMs = this.seconds("HEARTBEAT_S", DEFAULTS.heartbeatMs / 1000);
    const leaseMs = this.seconds("LEASE_S", DEFAULTS.leaseMs / 1000);
    if (heartbeatMs >= leaseMs) {
      this.problems.push(
        `HEARTBEAT_S must be shorter than LEASE_S, or a live worker would look dead: current values are ${
          heartbeatMs / 1000
        } and ${leaseMs / 1000}`,
      );
    }
    return { heartbeatMs, leaseMs };
  }

  /**
   * `RETRY_HORIZON_S` (0 to a week), `RETRY_BACKOFF_MS` (1 to 600 000) and
   * `RETRY_BACKOFF_MAX_S` (0.001 to 3600, no shorter than the first wait):
   * only the ones set, in milliseconds.
   */
  retry(): Partial<RetryPolicy> {
    const out: Partial<RetryPolicy> = {};
    const number = (name: string, min: number, max: number, unit: string): number | undefined => {
      const raw = this.values[name];
      if (raw === undefined) return undefined;
      const n = Number(raw);
      if (raw.trim() === "" || !Number.isFinite(n) || n < min || n > max) {
        this.problems.push(
          `${name} must be a number of ${unit} from ${min} to ${max}: current value is ${
            JSON.stringify(raw)
          }`,
        );
        return undefined;
      }
      return n;
    };
    const horizon = number("RETRY_HORIZON_S", 0, 604_800, "seconds");
    const base = number("RETRY_BACKOFF_MS", 1, 600_000, "milliseconds");
    const cap = number("RETRY_BACKOFF_MAX_S", 0.001, 3_600, "seconds");
    if (horizon !== undefined) out.horizonMs = Math.round(horizon * 1000);
    if (base !== undefined) out.backoffBaseMs = Math.round(base);
    if (cap !== undefined) out.backoffMaxMs = Math.max(1, Math.round(cap * 1000));
    if (base !== undefined && cap !== undefined && out.backoffMaxMs! < out.backoffBaseMs!) {
      this.problems.push(
        `RETRY_BACKOFF_MAX_S must be no shorter than RETRY_BACKOFF_MS: current values are ${cap} s and ${base} ms`,
      );
    }
    return out;
  }

  /** Throws a {@link ConfigError} listing every problem, if there are any. */
  done(): void {
    if (this.problems.length > 0) throw new ConfigError(this.problems);
  }
}

/** `MODEL_PARAMS` checked as request parameters (problems added to `problems`), or undefined when unset. */
function runModelParams(raw: string | undefined, problems: string[]): ModelParams | undefined {
  if (raw === undefined) return undefined;
  try {
    return parseModelParams(raw, "MODEL_PARAMS");
  } catch (err) {
    problems.push((err as Error).message);
    return undefined;
  }
}

/** Reads and validates a worker's settings. Throws a {@link ConfigError} listing every problem. */
export function loadSettings(
  args: string[],
  env: Record<string, string | undefined>,
  defaults: { hostname: string; pid: number } = { hostname: "localhost", pid: 0 },
): Settings {
  const { values, positionals } = readRaw(args, env);
  const r = new SettingsReader(values);
  if (positionals.length > 0) {
    r.problems.push(
      `Unexpected argument ${JSON.stringify(positionals[0])}: settings are flags like --run-id demo`,
    );
  }
  const crashAt = r.str("CRASH_AT");
  const stallAt = r.str("STALL_AT");
  for (const [name, value] of [["CRASH_AT", crashAt], ["STALL_AT", stallAt]] as const) {
    if (value !== undefined && !isCrashPoint(value)) {
      r.problems.push(
        `${name} must name a crash point: current value is ${JSON.stringify(value)}. Valid points: ${
          CRASH_POINTS.join(", ")
        }`,
      );
    }
  }
  const stdinEof = r.str("EXIT_ON_STDIN_EOF", "0");
  if (!["0", "1", "true", "false"].includes(stdinEof)) {
    r.problems.push(`EXIT_ON_STDIN_EOF must be 1 or 0: current value is ${JSON.stringify(stdinEof)}`);
  }
  const streamDeltas = r.str("STREAM_DELTAS", "0");
  if (!["0", "1", "true", "false"].includes(streamDeltas)) {
    r.problems.push(`STREAM_DELTAS must be 1 or 0: current value is ${JSON.stringify(streamDeltas)}`);
  }
  const groupRaw = r.str("GROUP_COMMIT_MS", String(DEFAULTS.groupCommitMs));
  const groupCommitMs = Number(groupRaw);
  if (groupRaw.trim() === "" || !Number.isFinite(groupCommitMs) || groupCommitMs < 0 || groupCommitMs > 100) {
    r.problems.push(
      `GROUP_COMMIT_MS must be a number of milliseconds from 0 (off) to 100: current value is ${
        JSON.stringify(groupRaw)
      }`,
    );
  }
  const crashSeq = r.int("CRASH_SEQ", 0, 0, 10_000);
  const apiKey = r.str("MODEL_API_KEY");
  if (apiKey !== undefined && [...apiKey].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) {
    // Never echoed: it is a secret, and a newline in it is a copy-paste slip.
    r.problems.push(
      "MODEL_API_KEY contains a newline or another control character (a copy-paste slip?); its value is not shown",
    );
  }
  const settings: Settings = {
    agentModule: r.str("AGENT"),
    agentName: r.str("AGENT_NAME"),
    runId: r.runId("RUN_ID"),
    goal: r.str("GOAL"),
    input: r.str("INPUT"),
    runsPerWorker: r.int("RUNS_PER_WORKER", DEFAULTS.runsPerWorker, 1, 100_000),
    pollMs: r.seconds("POLL_S", DEFAULTS.pollMs / 1000),
    takeShare: r.takeShare(),
    databaseUrl: r.url(
      "DATABASE_URL",
      ["postgres:", "postgresql:"],
      "postgres://user:password@localhost:5432/dbname",
    ),
    dataDir: r.str("DATA_DIR", DEFAULTS.dataDir),
    modelUrl: r.url("MODEL_URL", ["http:", "https:"], "http://127.0.0.1:9100/v1"),
    model: r.str("MODEL"),
    modelApiKey: apiKey,
    modelHeaders: r.keyValues("MODEL_HEADERS", "headers"),
    modelQuery: r.keyValues("MODEL_QUERY", "query"),
    modelMaxTokensField: r.maxTokensField(),
    modelParams: runModelParams(r.str("MODEL_PARAMS"), r.problems),
    cloudUrl: r.url("CLOUD_URL", ["http:", "https:"], "http://127.0.0.1:9000"),
    maxSteps: values.MAX_STEPS === undefined ? undefined : r.int("MAX_STEPS", DEFAULTS.maxSteps, 1, 10_000),
    toolConcurrency: values.TOOL_CONCURRENCY === undefined
      ? undefined
      : r.int("TOOL_CONCURRENCY", DEFAULTS.toolConcurrency, 1, 64),
    worker: r.str("WORKER", `${defaults.hostname}:${defaults.pid}`),
    crash: {
      crashAt: crashAt !== undefined && isCrashPoint(crashAt) ? crashAt : undefined,
      crashSeq,
      stallAt: stallAt !== undefined && isCrashPoint(stallAt) ? stallAt : undefined,
      stallMs: r.int("STALL_MS", DEFAULTS.stallMs, 0, 86_400_000),
    },
    ...r.lease(),
    logFormat: r.logFormat(),
    exitOnStdinEof: stdinEof === "1" || stdinEof === "true",
    agentLoadMs: r.seconds("AGENT_LOAD_S", AGENT_LOAD_DEFAULT_S),
    dataDirWaitMs: r.seconds("DATA_DIR_WAIT_S", DATA_DIR_WAIT_DEFAULT_S, 0),
    streamDeltas: streamDeltas === "1" || streamDeltas === "true",
    groupCommitMs: Number.isFinite(groupCommitMs) && groupCommitMs > 0 && groupCommitMs <= 100
      ? groupCommitMs
      : 0,
    retry: r.retry(),
  };
  r.done();
  return settings;
}
