/**
 * One event per line, designed to be read by people, asserted on by tests
 * and parsed by log tools: strict logfmt,
 *
 * ```
 * ts=2026-01-01T00:00:00.000Z level=info event=decided run=demo seq=0 tool=create_server llm_calls=1
 * ```
 *
 * (a value with a space, a quote, `=`, a backslash or anything
 * {@link displayText} escapes is double-quoted with JSON escapes; an object or
 * array is compact JSON, quoted), or, with `LOG_FORMAT=json`, one JSON object
 * per line with the same names. Either way a line holds no control, bidi or
 * other invisible character: the rule of `display.ts` escapes them, so a value
 * cannot move the terminal's cursor, set its title or reorder the line.
 * Timestamps come from the {@link Clock}, so a simulated run's transcript is
 * deterministic. Known secrets (a database password, a model API key) are
 * masked in every line.
 *
 * @module
 */

import { type Clock, isoTimestamp } from "./clock.ts";
import { displayText } from "./display.ts";

/** Severity of an event. */
export type LogLevel = "DEBUG" | "INFO" | "WARN" | "ERROR";
/** Fields of an event; `undefined` values are left out. */
export type LogFields = Record<string, unknown>;
/** Where finished lines go. A sink must write synchronously. */
export type LogSink = (line: string) => void;
/** `text`: logfmt, `ts=… level=info event=… k=v`; `json`: one JSON object per line. */
export type LogFormat = "text" | "json";

/** Options of a {@link Logger}. */
export interface LoggerOptions {
  /** Supplies timestamps. */
  clock: Clock;
  /** Receives each finished line (without a trailing newline). */
  sink?: LogSink;
  /** Text (default) or JSON lines. */
  format?: LogFormat;
  /** Strings masked as `***` wherever they appear. Empty strings are ignored. */
  secrets?: string[];
  /** The least severe level written; events below it are dropped before they are formatted. Default DEBUG. */
  level?: LogLevel;
  /**
   * Writes out what `sink` holds, for a sink that gathers lines ({@link StdoutLines}): called after every
   * WARN and ERROR line and by {@link Logger.flush}. Unset: the sink writes each line as it gets it.
   */
  flush?: () => void;
}

const SEVERITY: Record<LogLevel, number> = { DEBUG: 0, INFO: 1, WARN: 2, ERROR: 3 };

const encoder = new TextEncoder();

/** A sink that writes each line to stdout synchronously, so it survives `kill -9` right after. */
export function stdoutSink(line: string): void {
  writeStdout(encoder.encode(line + "\n"));
}

/** The most bytes a write to a pipe puts in it at once, never mixed with other writers' (POSIX, Linux). */
const PIPE_BUF = 4096;
const NEWLINE = 10;

/** Writes all of `bytes` to stdout synchronously. */
function writeStdout(bytes: Uint8Array): void {
  let written = 0;
  // Bounded by the length: each write moves at least one byte.
  while (written < bytes.length) written += Deno.stdout.writeSync(bytes.subarray(written));
}

/**
 * Lines to stdout, gathered: the lines logged by one stretch of JavaScript
 * (a task and the microtasks queued before the end of its line's) go out in
 * one write, queued as a microtask by the first of them, instead of one write
 * each. A worker hosting a thousand runs logs some five lines a step; each
 * write to a pipe wakes its reader, and cost 30 us of the worker's CPU (10%
 * of it, measured at 1,000 runs in flight, bench/README.md). A line is out
 * before the process does anything that is not JavaScript of the same
 * stretch: no I/O, no timer, runs in between. Each write is at most
 * {@link PIPE_BUF} bytes, cut after a line, so workers sharing a pipe never
 * cut into each other's lines. {@link flush} writes what is
 * held at once: a logger given it calls it after every WARN and ERROR line,
 * so those are out before its next statement (a crash point's `kill -9`, an
 * exit); {@link listen} makes an exit or an uncaught error flush too.
 */
export class StdoutLines {
  #lines: string[] = [];

  /** The sink: keeps `line`, and queues the write when it is the first held. */
  readonly sink: LogSink = (line) => {
    if (this.#lines.push(line) === 1) queueMicrotask(this.flush);
  };

  /**
   * Writes every line held, in order, in writes of at most {@link PIPE_BUF} bytes each cut after a
   * line: other processes writing to the same pipe (a supervisor's workers share its stdout) cannot
   * cut into them, as they cannot into a line written alone.
   */
  readonly flush = (): void => {
    if (this.#lines.length === 0) return;
    const bytes = encoder.encode(this.#lines.join("\n") + "\n");
    this.#lines = [];
    let start = 0;
    // Bounded by the length: each write moves past at least one line.
    while (start < bytes.length) {
      let end = bytes.length;
      if (end - start > PIPE_BUF) {
        const cut = bytes.lastIndexOf(NEWLINE, start + PIPE_BUF - 1);
        // A line longer than PIPE_BUF goes out alone, as it would have without gathering.
        end = cut >= start ? cut + 1 : bytes.indexOf(NEWLINE, start) + 1;
      }
      writeStdout(bytes.subarray(start, end));
      start = end;
    }
  };

  /** Flushes on `Deno.exit` (the unload event), and on an uncaught error or rejection before it ends the process. */
  listen(): this {
    for (const event of ["unload", "error", "unhandledrejection"]) {
      globalThis.addEventListener(event, this.flush);
    }
    return this;
  }
}

/** A sink that drops every line (benchmarks, embedders that log elsewhere). */
export function discardSink(_line: string): void {}

/** A sink that keeps lines in an array, for tests and the harness. */
export function arraySink(lines: string[]): LogSink {
  return (line) => lines.push(line);
}

// A value written bare: no space or control character, quote, `=` or backslash,
// and nothing the display rule escapes.
// deno-lint-ignore no-control-regex
const BARE = /^[^\s"=\\\x00-\x1f\x7f]+$/;
const bare = (text: string) => BARE.test(text) && displayText(text) === text;

/** The most characters of one field's value a line holds: a tool's result of megabytes is not logged whole. */
export const LOG_VALUE_CHARS_MAX = 8_192;

/**
 * `value`, or, when it (as text, or as JSON for an object) is longer than
 * {@link LOG_VALUE_CHARS_MAX}, its first characters as a string saying how
 * long it was: a line stays a line, and escaping it stays cheap, whatever a
 * tool answered.
 */
export function clipped(value: unknown): unknown {
  if (typeof value === "string") {
    return value.length <= LOG_VALUE_CHARS_MAX ? value : clipText(value);
  }
  if (value === null || typeof value !== "object" || value instanceof Date) return value;
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    return value; // a cycle or a BigInt: formatValue says what it can
  }
  return json === undefined || json.length <= LOG_VALUE_CHARS_MAX ? value : clipText(json);
}

function clipText(text: string): string {
  return `${text.slice(0, LOG_VALUE_CHARS_MAX)}... (${text.length} characters in all, cut)`;
}

/**
 * Formats one field value as a logfmt value: bare when it can be, otherwise
 * double-quoted with JSON escapes; objects and arrays as compact JSON, quoted.
 */
export function formatValue(value: unknown): string {
  if (typeof value === "string") return bare(value) ? value : displayText(JSON.stringify(value));
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") {
    return String(value);
  }
  if (value === null) return "null";
  if (value instanceof Date) return value.toISOString();
  const json = displayText(JSON.stringify(value) ?? String(value));
  return bare(json) ? json : JSON.stringify(json);
}

/**
 * Every form in which `secret` can be printed in a line, longest first: as
 * written, and JSON-escaped once, twice and three times. A line escapes a
 * value up to twice (a string quoted in logfmt or in a JSON line; an object
 * written as JSON, then quoted in logfmt), and the value may hold the secret
 * escaped already (a server's JSON error body echoing a key that holds a quote
 * or a backslash, or such a body inside another). A secret with nothing to
 * escape has one form.
 *
 * @example
 * ```ts
 * import { secretForms } from "./log.ts";
 * console.log(secretForms('k"1').join(" "));
 * // k\\\\\\\"1 k\\\"1 k\"1 k"1
 * console.log(secretForms("sk-plain"));
 * // [ "sk-plain" ]
 * ```
 */
export function secretForms(secret: string): string[] {
  const forms = [secret];
  for (let i = 0; i < 3; i++) forms.push(JSON.stringify(forms[i]).slice(1, -1));
  return [...new Set(forms)].sort((a, b) => b.length - a.length);
}

/** Writes events as lines. Immutable: {@link Logger.child} returns a new logger. */
export class Logger {
  readonly #clock: Clock;
  readonly #sink: LogSink;
  readonly #flush: (() => void) | undefined;
  readonly #format: LogFormat;
  readonly #secrets: string[];
  // #11: the least severity written. A line nobody reads is never formatted:
  // a logger on `discardSink` drops everything (a step logs 4-6 events, and
  // formatting them cost about as much CPU as the step's four statements).
  readonly #min: number;

  /** Creates a logger. */
  constructor(opts: LoggerOptions) {
    this.#clock = opts.clock;
    this.#sink = opts.sink ?? stdoutSink;
    this.#flush = opts.flush;
    this.#format = opts.format ?? "text";
    this.#min = this.#sink === discardSink ? Infinity : SEVERITY[opts.level ?? "DEBUG"];
    // A secret shows up as written, JSON-escaped up to three times (secretForms),
    // and with the display rule's escapes on top (a key holding a bidi or format
    // character): mask every form.
    this.#secrets = [
      ...new Set(
        (opts.secrets ?? []).filter((s) => s.length > 0).flatMap(secretForms).flatMap((
          f,
        ) => [f, displayText(f)]),
      ),
    ].sort((a, b) => b.length - a.length);
  }

  /** True when events at `level` are written (false for every level on {@link discardSink}). */
  enabled(level: LogLevel): boolean {
    return SEVERITY[level] >= this.#min;
  }

  /** Logs an event at INFO. */
  info(event: string, fields: LogFields = {}): void {
    this.write("INFO", event, fields);
  }

  /** Logs an event at WARN. */
  warn(event: string, fields: LogFields = {}): void {
    this.write("WARN", event, fields);
  }

  /** Logs an event at ERROR. */
  error(event: string, fields: LogFields = {}): void {
    this.write("ERROR", event, fields);
  }

  /** Writes free text as a `notice` event, so every line still parses. */
  raw(line: string): void {
    if (this.#min === Infinity) return;
    this.write("WARN", "notice", { message: line });
  }

  /** Replaces every known secret in `text` with `***`. */
  mask(text: string): string {
    let out = text;
    for (const secret of this.#secrets) out = out.replaceAll(secret, "***");
    return out;
  }

  /** Formats and writes one event. */
  write(level: LogLevel, event: string, fields: LogFields): void {
    if (SEVERITY[level] < this.#min) return;
    const ts = isoTimestamp(this.#clock.now());
    let line: string;
    // One pass over the fields, no array of entries per line (a worker hosting a thousand runs
    // writes some five lines a step).
    if (this.#format === "json") {
      // Without a prototype, a field named `__proto__` is a field like any other, as it was spread.
      const out: Record<string, unknown> = Object.create(null);
      out.ts = ts;
      out.level = level;
      out.event = event;
      for (const k of Object.keys(fields)) {
        const v = fields[k];
        if (v !== undefined) out[k] = clipped(v);
      }
      // Escaped JSON text is still JSON, for the same values.
      line = displayText(JSON.stringify(out));
    } else {
      line = `ts=${ts} level=${level.toLowerCase()} event=${formatValue(event)}`;
      for (const k of Object.keys(fields)) {
        const v = fields[k];
        if (v !== undefined) line += ` ${k}=${formatValue(clipped(v))}`;
      }
    }
    this.#sink(this.mask(line));
    if (this.#flush !== undefined && SEVERITY[level] >= SEVERITY.WARN) this.#flush();
  }

  /** Writes out the lines a gathering sink holds (see {@link LoggerOptions.flush}); nothing for other sinks. */
  flush(): void {
    this.#flush?.();
  }
}
