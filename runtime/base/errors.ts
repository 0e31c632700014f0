/**
 * Error classes, and every code they carry ({@link ERROR_CODES}). Each kind
 * has a stable string `code` that callers and tests can branch on; messages
 * say what was wrong, the value seen, and what to do. A leaf: it imports
 * nothing, so every module may import it.
 *
 * @module
 */

/**
 * Every code the runtime's own errors carry, by the class that carries it,
 * declared once: the `code` types derive from it, so a code misspelt where
 * an error is thrown, or where a branch tests one, does not compile. A
 * {@link ToolError} or {@link ModelError} may also carry a code of the tool's
 * or planner's own (an agent's tools name their failures: `TICKETS_HTTP`);
 * the lists hold the runtime's.
 */
export const ERROR_CODES = {
  /** Thrown as `RuntimeError` itself: a definition, an input or a state the runtime refuses. */
  RuntimeError: [
    "AGENT_INVALID",
    "AGENT_MISMATCH",
    "AGENT_MODULE_INVALID",
    "APPROVAL_INCONSISTENT",
    "BUDGET_INVALID",
    "DECISION_INVALID",
    "HOST_INVALID",
    "INPUT_INVALID",
    "LABELS_INVALID",
    "LIMITS_INVALID",
    "MCP_INVALID",
    "MCP_SERVER_INVALID",
    "MCP_UNREACHABLE",
    "MODEL_MISSING",
    "MODEL_PARAMS_INVALID",
    "MODEL_SETTINGS_INVALID",
    "SCHEDULE_INVALID",
    "TOOL_INVALID",
    "VERSION_MISMATCH",
    "WATCH_INVALID",
  ],
  ConfigError: ["CONFIG_INVALID"],
  StoreError: [
    "DATA_DIR_INVALID",
    "DATA_DIR_LOCKED",
    "DB_AUTH_FAILED",
    "DB_NOT_FOUND",
    "DB_READ_ONLY",
    "DB_UNREACHABLE",
    "DB_URL_INVALID",
    "MIGRATION_FAILED",
    "RUN_MISSING",
    "SCHEMA_MISSING",
    "SCHEMA_NEWER",
    "SCHEMA_OUTDATED",
    "SCHEMA_UNSET",
    "STORE_CLOSED",
    "STREAM_UNSUPPORTED",
  ],
  FencedError: ["FENCED", "STALLED", "RUN_CLOSED"],
  /** The planner's and the journal's; a refused answer's code is kept as its rejection's. */
  ModelError: [
    "MODEL_ARGS_NOT_JSON",
    "MODEL_BAD_TOOL_CALL",
    "MODEL_CALL_INVALID",
    "MODEL_EMPTY",
    "MODEL_FILTERED",
    "MODEL_GAVE_UP",
    "MODEL_HTTP",
    "MODEL_TOO_MANY_CALLS",
    "MODEL_NOT_JSON",
    "MODEL_NO_CHOICES",
    "MODEL_NO_MESSAGE",
    "MODEL_PARAMS_REFUSED",
    "MODEL_REFUSED",
    "MODEL_TIMEOUT",
    "MODEL_TRUNCATED",
    "MODEL_UNREACHABLE",
  ],
  ToolError: [
    "AGENT_CHILD_CONFLICT",
    "AGENT_CHILD_FAILED",
    "AGENT_CHILD_ID_TOO_LONG",
    "AGENT_TOOL_OUTSIDE_RUNTIME",
    "MCP_CONNECTION_LOST",
    "MCP_HTTP",
    "MCP_REFUSED",
    "MCP_SERVER_ERROR",
    "MCP_TIMEOUT",
    "MCP_TOOL_ERROR",
    "MCP_TOOL_VANISHED",
    "MCP_UNREACHABLE",
    "SIGNAL_WAIT_INVALID",
    "SIGNAL_WAIT_TIMED_OUT",
    "SLEEP_INVALID",
    "TOOL_ACCEPTED_INVALID",
    "TOOL_GAVE_UP",
    "TOOL_RESULT_TOO_LARGE",
    "TOOL_RESULT_UNSTORABLE",
    "TOOL_THREW",
    "TOOL_TIMEOUT",
    "TOOL_UNAVAILABLE",
    "TOOL_WAIT_EXPIRED",
    "WAIT_OUTSIDE_RUNTIME",
  ],
  AbortedError: ["ABORTED"],
  SimulatedKill: ["SIMULATED_KILL"],
  BudgetError: ["BUDGET_EXCEEDED"],
  WorkerError: ["WORKER_ERROR"],
  ValueUnstorableError: ["VALUE_UNSTORABLE"],
  ParentClosedError: ["PARENT_CLOSED"],
  InvariantError: ["INVARIANT_BROKEN"],
  ClientError: [
    "APPROVAL_NOT_FOUND",
    "BAD_RUN_ID",
    "CALL_NOT_FOUND",
    "CHAT_INVALID",
    "CHAT_NOT_FOUND",
    "COUNT_CHANGED",
    "CONVERSATION_ENDED",
    "COUNT_INVALID",
    "EVAL_INVALID",
    "FILTER_INVALID",
    "FILTER_REQUIRED",
    "IDEMPOTENCY_KEY_INVALID",
    "IDEMPOTENCY_KEY_REUSED",
    "FORK_INVALID",
    "ID_INVALID",
    "LIMIT_INVALID",
    "MESSAGE_INVALID",
    "MOVE_INVALID",
    "NOT_A_CONVERSATION",
    "NOT_FLAGGED",
    "NOT_PENDING",
    "NOT_REOPENABLE",
    "NOT_WAITING",
    "PRUNE_FAILED",
    "RUN_CLOSED",
    "RUN_EXISTS",
    "RUN_NOT_BLOCKED",
    "RUN_NOT_FOUND",
    "SCHEDULE_NOT_FOUND",
    "SETTLEMENT_INVALID",
    "SIGNAL_INVALID",
    "WAIT_TIMEOUT",
  ],
  /** Why an answer was refused without a thrown error (a step's `rejections`), beside the ModelError codes. */
  Rejection: ["BAD_ARGS", "MODEL_UNSTORABLE", "UNKNOWN_TOOL"],
} as const;

/** The codes listed for one class of {@link ERROR_CODES}. */
export type CodeOf<K extends keyof typeof ERROR_CODES> = typeof ERROR_CODES[K][number];

/** Every code of {@link ERROR_CODES}. */
export type ErrorCode = CodeOf<keyof typeof ERROR_CODES>;

/**
 * A code outside {@link ERROR_CODES}: one a program built on the runtime
 * (the commands, the web page, the harness, an agent's own error classes)
 * names its own failures with. Made with {@link ownCode}, so that a code is
 * outside the list on purpose, never by a typo.
 */
export type OwnCode = string & { readonly __ownCode: true };

/** Marks `code` as the caller's own, outside {@link ERROR_CODES}. */
export function ownCode(code: string): OwnCode {
  return code as OwnCode;
}

/** True when `err` is a {@link RuntimeError} whose code is `code` (or one of `code`); the codes are checked. */
export function hasCode(err: unknown, code: ErrorCode | readonly ErrorCode[]): err is RuntimeError {
  if (!(err instanceof RuntimeError)) return false;
  return typeof code === "string" ? err.code === code : (code as readonly string[]).includes(err.code);
}

/** Base class of every error the runtime raises on purpose. */
export class RuntimeError extends Error {
  /**
   * A stable, machine-readable code such as `CONFIG_INVALID`: one of
   * {@link ERROR_CODES}, or the own code of a tool's or planner's error (so a
   * string here; each class with a closed list narrows it).
   */
  readonly code: string;
  /** Creates an error with a stable `code`. */
  constructor(code: ErrorCode | OwnCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "RuntimeError";
    this.code = code;
  }
}

/** A client call was refused: the run does not exist, is in the wrong state, ... `code` says which. */
export class ClientError extends RuntimeError {
  /** Which refusal: `RUN_NOT_FOUND`, `RUN_CLOSED`, ... */
  declare readonly code: CodeOf<"ClientError">;
  /** Creates a client error. */
  constructor(code: CodeOf<"ClientError">, message: string, options?: ErrorOptions) {
    super(code, message, options);
    this.name = "ClientError";
  }
}

/** A setting is missing, malformed or out of range. Exit code 2. */
export class ConfigError extends RuntimeError {
  /** Always `CONFIG_INVALID`. */
  declare readonly code: CodeOf<"ConfigError">;
  /** Every problem found, one sentence each. */
  readonly problems: string[];
  /** Creates a settings error listing every problem found. */
  constructor(problems: string[]) {
    super("CONFIG_INVALID", problems.join("\n"));
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/**
 * The database cannot be reached, or is not set up. {@link isDatabaseAway}
 * tells an outage (waited out) from a setting to fix.
 */
export class StoreError extends RuntimeError {
  /** Which: `DB_UNREACHABLE`, `DB_NOT_FOUND`, `SCHEMA_MISSING`, `DATA_DIR_LOCKED`, ... */
  declare readonly code: CodeOf<"StoreError">;
  /** Creates a store error (`DB_UNREACHABLE`, `SCHEMA_MISSING`, `DATA_DIR_LOCKED`, ...). */
  constructor(code: CodeOf<"StoreError">, message: string, options?: ErrorOptions) {
    super(code, message, options);
    this.name = "StoreError";
  }
}

/**
 * The {@link StoreError} codes of a database that is away for now rather than
 * set up wrong: the server cannot be reached (down, restarting, failing over,
 * out of connections), or the one that answers refuses writes (a standby, or
 * a node being promoted). A process waits these out or exits 7 (the database
 * is away), never 2 (settings that cannot work): the same settings work once
 * the database is back. Every other store error at start is a setting to fix.
 */
export const DATABASE_AWAY_CODES = ["DB_READ_ONLY", "DB_UNREACHABLE"] as const satisfies readonly CodeOf<
  "StoreError"
>[];

/** True when `err` is a {@link StoreError} of a database away for now ({@link DATABASE_AWAY_CODES}). */
export function isDatabaseAway(err: unknown): err is StoreError {
  return err instanceof StoreError && (DATABASE_AWAY_CODES as readonly string[]).includes(err.code);
}

/**
 * A write matched no rows: another worker took the run (`FENCED`), the run
 * was closed or cancelled under this worker (`RUN_CLOSED`), or the row was not
 * in the state this worker left it in (`STALLED`). Either way this worker must
 * stop acting on the run.
 */
export class FencedError extends RuntimeError {
  /** `FENCED`, `STALLED` or `RUN_CLOSED`. */
  declare readonly code: CodeOf<"FencedError">;
  /** Creates a fencing refusal. */
  constructor(code: CodeOf<"FencedError">, message: string) {
    super(code, message);
    this.name = "FencedError";
  }
}

/** The model could not be asked, or answered something unusable. */
export class ModelError extends RuntimeError {
  /** True when asking again may succeed (network error, 408, 429, 5xx). */
  readonly transient: boolean;
  /** True when the answer arrived but was unusable: worth sending back to the model. */
  readonly badAnswer: boolean;
  /** Token usage the unusable answer reported: it was paid for all the same. */
  readonly usage?: Record<string, unknown>;
  /** How long the server asked to wait before asking again (its `Retry-After`), when it said. */
  readonly retryAfterMs?: number;
  /** Creates a model error: with one of the runtime's codes, or a planner's own. */
  constructor(
    code: CodeOf<"ModelError"> | (string & NonNullable<unknown>),
    message: string,
    opts: {
      transient?: boolean;
      badAnswer?: boolean;
      cause?: unknown;
      usage?: Record<string, unknown>;
      retryAfterMs?: number;
    } = {},
  ) {
    // Open to a planner's own codes: a model error is also what an agent's planner throws.
    super(ownCode(code), message, { cause: opts.cause });
    this.name = "ModelError";
    this.transient = opts.transient ?? false;
    this.badAnswer = opts.badAnswer ?? false;
    this.usage = opts.usage;
    this.retryAfterMs = opts.retryAfterMs;
  }
}

/** A tool call failed. `transient` says whether a re-send may succeed. */
export class ToolError extends RuntimeError {
  /** True for network errors, timeouts, 408, 409 (a request with this key is in progress), 429 and 5xx. */
  readonly transient: boolean;
  /**
   * How long the remote asked to wait before the re-send (its `Retry-After`):
   * used instead of the backoff, within the retry policy's cap.
   */
  readonly retryAfterMs?: number;
  /** Creates a tool error: with one of the runtime's codes, or the tool's own (`TICKETS_HTTP`). */
  constructor(
    code: CodeOf<"ToolError"> | (string & NonNullable<unknown>),
    message: string,
    opts: { transient: boolean; cause?: unknown; retryAfterMs?: number },
  ) {
    // Open to a tool's own codes: an agent's tools name their own failures.
    super(ownCode(code), message, { cause: opts.cause });
    this.name = "ToolError";
    this.transient = opts.transient;
    this.retryAfterMs = opts.retryAfterMs;
  }
}

/** A wait or a call was aborted (the worker is stopping, or a timeout fired). */
export class AbortedError extends RuntimeError {
  /** Always `ABORTED`. */
  declare readonly code: CodeOf<"AbortedError">;
  /** Creates an abort error. */
  constructor(message: string, code: CodeOf<"AbortedError"> = "ABORTED") {
    super(code, message);
    this.name = "AbortedError";
  }
}

/**
 * A value as an error message shows it: JSON where JSON says it exactly,
 * otherwise its JavaScript form (`NaN`, `Infinity`, `5n`), cut at `max`
 * characters.
 */
export function describeValue(value: unknown, max = 200): string {
  let shown: string;
  if (typeof value === "number" && !Number.isFinite(value)) shown = String(value);
  else if (typeof value === "bigint") shown = `${value}n`;
  else {
    try {
      shown = JSON.stringify(value) ?? String(value);
    } catch {
      shown = Object.prototype.toString.call(value); // a cycle
    }
  }
  return shown.length > max ? `${shown.slice(0, max)}...` : shown;
}

/** A short description of any thrown value, for logs and stored errors. */
export function describeError(err: unknown): string {
  if (err instanceof RuntimeError) return `${err.code}: ${err.message}`;
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}
