/**
 * Identifiers from outside: the one rule every id or name a person or a
 * program hands the runtime is checked by where it enters (the client; the
 * commands and the page go through it). A run id, a message id, a tool call's
 * key, who acts (`by`), a name or text a run list is filtered by.
 *
 * The rule ({@link idProblem}): a text of 1 to {@link ID_CHARS_MAX} UTF-16
 * code units, well-formed (no lone surrogate), with no control character
 * (`\p{Cc}`: NUL, C0, DEL, C1) and no U+FFFD. Why each:
 *
 * - the database refuses a NUL in text (PostgreSQL 22021, PGlite 08P01), and
 *   encodes a lone surrogate as U+FFFD, so two different ids (`id-\ud800`,
 *   `id-\udbff`) would be stored as one and the second taken for the first;
 * - U+FFFD is what a lossy decoding leaves for bytes that were not UTF-8 (a
 *   shell argument, a body read with replacement), so two different ids would
 *   arrive as one: an id holding it cannot be told from another;
 * - an id is one line that logs, terminals and the page show: a control
 *   character in it is never meant, and a terminal acts on some.
 *
 * Anything that passes is stored as given, character for character: no
 * trimming, no normalization (`é` and `e` with a combining accent are two
 * ids). Format characters (bidi marks, zero-width joiners) pass; the display
 * rule (display.ts) shows them as escapes. Run ids, keys and signal names
 * have a narrower shape on top ({@link RUN_ID_PATTERN}, {@link KEY_PATTERN},
 * {@link SIGNAL_NAME_PATTERN}), which the rule implies. A leaf: it imports nothing.
 *
 * @example
 * ```ts
 * import { idProblem } from "./ids.ts";
 *
 * if (idProblem("msg-1") !== undefined) throw new Error("a plain id passes");
 * if (idProblem("id-\ud800") === undefined) throw new Error("a lone surrogate is refused");
 * if (idProblem("a\u0000b") === undefined) throw new Error("a NUL is refused");
 * ```
 *
 * @module
 */

/** The longest identifier taken from outside, in UTF-16 code units: a message id, who acts, a filter. */
export const ID_CHARS_MAX = 200;

/**
 * A run id: a letter or digit, then up to 63 letters, digits, `.`, `_`, `-`
 * or `@`. A schedule's runs are named `<schedule>@<occurrence>`
 * (`nightly@20261206T090000Z`), a child run `<parent>.<seq>`.
 */
export const RUN_ID_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;

/** {@link RUN_ID_PATTERN} in words, for a refusal. */
export const RUN_ID_SHAPE =
  "1-64 characters of letters, digits, '.', '_', '-' or '@', starting with a letter or digit";

/**
 * A tool call's idempotency key (and its approval request's): `<run id>:<seq>`,
 * the seq a decimal integer without leading zeros (`demo:0`, `demo.3:12`).
 */
export const KEY_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}:(?:0|[1-9][0-9]{0,9})$/;

/** {@link KEY_PATTERN} in words, for a refusal. */
export const KEY_SHAPE = "<run id>:<seq>, such as demo:0 ('deno task inspect RUN' shows a run's keys)";

/**
 * A signal's name (`payment-received`, `ci.finished`): a letter or digit, then
 * up to 127 letters, digits, `.`, `_`, `-` or `:`. A call waits for signals
 * by name, so a name is plain text a person types the same way twice.
 */
export const SIGNAL_NAME_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/** {@link SIGNAL_NAME_PATTERN} in words, for a refusal. */
export const SIGNAL_NAME_SHAPE =
  "1-128 characters of letters, digits, '.', '_', '-' or ':', starting with a letter or digit";

/** True for a signal's name ({@link SIGNAL_NAME_PATTERN}); such a text passes {@link idProblem} too. */
export function isSignalName(value: unknown): value is string {
  return typeof value === "string" && SIGNAL_NAME_PATTERN.test(value);
}

/** {@link idProblem}'s rule in words, for a refusal. */
export const ID_RULE =
  `1 to ${ID_CHARS_MAX} characters of well-formed text (no lone surrogate), with no control character and no U+FFFD`;

// The characters the rule refuses besides lone surrogates: every control (Cc) and U+FFFD.
const REFUSED_CHAR = /[\p{Cc}\uFFFD]/u;

/**
 * Why `value` is not an identifier the runtime takes from outside, as the end
 * of a sentence (`it holds a NUL character (\u0000) at index 2`), or
 * undefined when it is one. `maxChars` narrows the length bound.
 */
export function idProblem(value: unknown, maxChars: number = ID_CHARS_MAX): string | undefined {
  if (typeof value !== "string") {
    return `it is ${
      value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`
    }, not a text`;
  }
  if (value.length === 0) return "it is empty";
  if (value.length > maxChars) return `it is ${value.length} characters long, more than ${maxChars}`;
  if (!value.isWellFormed()) {
    const i = loneSurrogateAt(value);
    return `it holds a lone surrogate (${escape(value.charCodeAt(i))}) at index ${i}, which the database ` +
      `stores as U+FFFD: another id would then be taken for this one`;
  }
  const found = REFUSED_CHAR.exec(value);
  if (found) {
    const code = found[0].charCodeAt(0);
    return code === 0xfffd
      ? `it holds U+FFFD at index ${found.index}, the mark a decoding leaves for bytes that were not UTF-8: ` +
        `another id could arrive as this one`
      : `it holds ${code === 0 ? "a NUL character" : "a control character"} (${
        escape(code)
      }) at index ${found.index}`;
  }
  return undefined;
}

/** True for a run id ({@link RUN_ID_PATTERN}); such a text passes {@link idProblem} too. */
export function isRunId(value: unknown): value is string {
  return typeof value === "string" && RUN_ID_PATTERN.test(value);
}

/** True for a tool call's key ({@link KEY_PATTERN}); such a text passes {@link idProblem} too. */
export function isKey(value: unknown): value is string {
  return typeof value === "string" && KEY_PATTERN.test(value);
}

function loneSurrogateAt(text: string): number {
  // Bounded by the text's length.
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) i++;
      else return i;
    } else if (c >= 0xdc00 && c <= 0xdfff) return i;
  }
  return -1;
}

function escape(code: number): string {
  return `\\u${code.toString(16).padStart(4, "0")}`;
}
