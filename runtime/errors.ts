/**
 * Error classes. Each kind has a stable string `code` that callers and tests
 * can branch on; messages say what was wrong, the value seen, and what to do.
 *
 * @module
 */

/** Base class of every error the runtime raises on purpose. */
export class RuntimeError extends Error {
  /** A stable, machine-readable code such as `CONFIG_INVALID`. */
  readonly code: string;
  /** Creates an error with a stable `code`. */
  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "RuntimeError";
    this.code = code;
  }
}

/** A setting is missing, malformed or out of range. Exit code 2. */
export class ConfigError extends RuntimeError {
  /** Every problem found, one sentence each. */
  readonly problems: string[];
  /** Creates a settings error listing every problem found. */
  constructor(problems: string[]) {
    super("CONFIG_INVALID", problems.join("\n"));
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/** The database cannot be reached, or is not set up. */
export class StoreError extends RuntimeError {
  /** Creates a store error (`DB_UNREACHABLE`, `SCHEMA_MISSING`, `DATA_DIR_LOCKED`, ...). */
  constructor(code: string, message: string, options?: ErrorOptions) {
    super(code, message, options);
    this.name = "StoreError";
  }
}

/**
 * A write matched no rows: another worker took the run (`FENCED`), the run
 * was closed or cancelled under this worker (`RUN_CLOSED`), or the row was not
 * in the state this worker left it in (`STALLED`). Either way this worker must
 * stop acting on the run.
 */
export class FencedError extends RuntimeError {
  /** Creates a fencing refusal. */
  constructor(code: "FENCED" | "STALLED" | "RUN_CLOSED", message: string) {
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
  /** Creates a model error. */
  constructor(
    code: string,
    message: string,
    opts: {
      transient?: boolean;
      badAnswer?: boolean;
      cause?: unknown;
      usage?: Record<string, unknown>;
      retryAfterMs?: number;
    } = {},
  ) {
    super(code, message, { cause: opts.cause });
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
  /** Creates a tool error. */
  constructor(
    code: string,
    message: string,
    opts: { transient: boolean; cause?: unknown; retryAfterMs?: number },
  ) {
    super(code, message, { cause: opts.cause });
    this.name = "ToolError";
    this.transient = opts.transient;
    this.retryAfterMs = opts.retryAfterMs;
  }
}

/** A wait or a call was aborted (the worker is stopping, or a timeout fired). */
export class AbortedError extends RuntimeError {
  /** Creates an abort error. */
  constructor(message: string, code = "ABORTED") {
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
