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
 * | `LIMITS` | `--limits` | none: limits shared by the fleet, a JSON array (`[{"model":"gpt-4o","requestsPerMinute":50}]`), held beside each agent's |
 *
 * @module
 */

import { parseArgs } from "node:util";
import { CRASH_POINTS, type CrashPlan, isCrashPoint } from "../base/crashpoints.ts";
import { RUN_ID_PATTERN } from "../base/ids.ts";
import type { LogFormat } from "../base/log.ts";
import type { TakeShare } from "../base/take_share.ts";
import { parseModelParams } from "../model/params.ts";
import type { ModelParams } from "../model/transcript.ts";
import type { RetryPolicy } from "../base/retry.ts";
import { type Limit, parseLimits } from "../base/limit_spec.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { commandFlags, FlagError, flagOf, flagProblem } from "./flags.ts";
import { integerIn, SettingsReader } from "./reader.ts";

export { commandFlags, FlagError, flagOf, flagProblem, integerIn, SettingsReader };

/** A run id: a letter or digit, then up to 63 letters, digits, `.`, `_`, `-` or `@` (declared in ids.ts). */
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
  /**
   * The process's limits shared by the fleet (`LIMITS`, a JSON array of
   * limits), held beside each hosted agent's own. See docs/limits.md.
   */
  limits?: readonly Limit[];
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
  "LIMITS",
];
const NAMES = SETTING_NAMES;

const KEEP_EMPTY = new Set(["RUN_ID"]);

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

/** `LIMITS` checked (problems added to `problems`), or undefined when unset. */
function processLimits(raw: string | undefined, problems: string[]): readonly Limit[] | undefined {
  if (raw === undefined) return undefined;
  try {
    return parseLimits(raw, "LIMITS");
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
      crashSeq: r.int("CRASH_SEQ", 0, 0, 10_000),
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
    limits: processLimits(r.str("LIMITS"), r.problems),
  };
  r.done();
  return settings;
}
