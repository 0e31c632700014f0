/**
 * What a person is shown of text that came from a model, a tool or a user:
 * every code point that would be invisible, or would change how the text
 * around it is drawn, is written as a visible JSON-style escape (`\u202e`,
 * `\u001b`, `\n`). One rule for everything people read: the web page (which
 * is served this very code, see {@link displayScript}), the CLI's `inspect`,
 * `runs`, `approve`, `deny`, `resolve`, `cancel` and `reopen`, and the logs.
 *
 * Escaped: control characters (`\p{Cc}`: C0, DEL, C1, so no terminal escape
 * sequence gets through), format characters (`\p{Cf}`: bidi embeddings,
 * overrides, isolates and marks, zero-width spaces and joiners, the soft
 * hyphen, the byte-order mark, tag characters), the line and paragraph
 * separators U+2028 and U+2029, every other default-ignorable code point
 * (variation selectors, the Hangul fillers U+115F, U+1160, U+3164, U+FFA0),
 * lone surrogates, and combining marks that follow no letter or digit (on
 * their own they draw over whatever precedes them: a quote, a space, a
 * label). A newline is kept only where a field is shown on several lines
 * (`newlines: true`). Everything else (letters of every script, emoji, spaces)
 * is shown as it is.
 *
 * The escapes are JSON's, so escaping JSON text leaves it valid JSON for the
 * same value: `ACCT-\u202E9876` shows as `"ACCT-\u202e9876"`, never as
 * `ACCT-6789`.
 *
 * @example
 * ```ts
 * import { displayJson, displayText, hiddenIn } from "./display.ts";
 *
 * const args = { to: "ACCT-\u202E9876\u202C" };
 * if (displayJson(args) !== String.raw`{"to":"ACCT-\u202e9876\u202c"}`) throw new Error("not escaped");
 * if (hiddenIn(args).count !== 2) throw new Error("two hidden code points");
 * if (displayText("title\u001b]0;owned\u0007") !== String.raw`title\u001b]0;owned\u0007`) throw new Error("!");
 * ```
 *
 * @module
 */

/** Options of {@link displayParts} and {@link displayText}. */
export interface DisplayOptions {
  /** Keep `\n` as a line break (a field shown on several lines). Default false: shown as `\n`. */
  newlines?: boolean;
}

// The classes escaped wherever they stand, as one character-class body.
const HIDDEN_CLASS = String.raw`\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Cs}`;
// A run of combining marks, or one hidden code point. Marks come first, so a
// mark that is also default-ignorable (a variation selector) is judged in its run.
const SCAN = new RegExp(String.raw`\p{M}+|[${HIDDEN_CLASS}]`, "gu");
// True when a text holds anything the scan would look at (most text holds none).
const SUSPECT = new RegExp(String.raw`[\p{M}${HIDDEN_CLASS}]`, "u");
const HIDDEN_ONE = new RegExp(String.raw`^[${HIDDEN_CLASS}]$`, "u");
// A code point a combining mark may sit on: a letter or a digit that is shown.
const BASE = new RegExp(String.raw`^(?![${HIDDEN_CLASS}])[\p{L}\p{N}]$`, "u");
// An escape in JSON text. JSON.stringify writes `\uXXXX` only for a control
// character or a lone surrogate, and its short escapes other than `\\` and
// `\"` stand for controls: each is something hidden. Matched left to right, an
// escaped backslash is consumed whole, so it never starts a false match.
const JSON_ESCAPE = /\\(?:[\\"/]|[bfnrt]|u[0-9a-fA-F]{4})/g;
// JSON's short escapes.
const SHORT: Readonly<Record<string, string>> = {
  "\b": "\\b",
  "\t": "\\t",
  "\n": "\\n",
  "\f": "\\f",
  "\r": "\\r",
};

/** The escape of one code point: JSON's short forms for five controls, `\uXXXX` per UTF-16 unit otherwise. */
export function escapeCodePoint(char: string): string {
  if (Object.hasOwn(SHORT, char)) return SHORT[char];
  let out = "";
  for (let i = 0; i < char.length; i++) out += `\\u${char.charCodeAt(i).toString(16).padStart(4, "0")}`;
  return out;
}

/** The code point that ends just before UTF-16 index `end`, or "" at the start. */
function charBefore(text: string, end: number): string {
  if (end <= 0) return "";
  const low = text.charCodeAt(end - 1);
  if (end >= 2 && low >= 0xdc00 && low <= 0xdfff) {
    const high = text.charCodeAt(end - 2);
    if (high >= 0xd800 && high <= 0xdbff) return text.slice(end - 2, end);
  }
  return text.slice(end - 1, end);
}

/**
 * Walks `text` in order, handing `shown` each stretch shown as it is and
 * `hidden` each code point to escape. The one place the rule is applied.
 */
function scan(
  text: string,
  opts: DisplayOptions,
  shown: (s: string) => void,
  hidden: (c: string) => void,
): void {
  let at = 0;
  for (const m of text.matchAll(SCAN)) {
    if (m.index > at) shown(text.slice(at, m.index));
    at = m.index + m[0].length;
    const run = m[0];
    if (run === "\n" && opts.newlines) shown(run);
    else if (HIDDEN_ONE.test(run)) hidden(run);
    else if (BASE.test(charBefore(text, m.index))) {
      // Marks on a letter or digit: shown, except those invisible themselves.
      for (const c of run) HIDDEN_ONE.test(c) ? hidden(c) : shown(c);
    } else for (const c of run) hidden(c);
  }
  if (at < text.length) shown(text.slice(at));
}

/**
 * The text cut into what is shown as it is and what is escaped, alternately:
 * `[plain, escaped, plain, ..., plain]` (even indexes plain, odd indexes the
 * escapes of adjacent hidden code points), so a page can mark the escapes.
 * A text with nothing hidden is `[text]`.
 */
export function displayParts(text: string, opts: DisplayOptions = {}): string[] {
  if (!SUSPECT.test(text)) return [text];
  const parts = [""];
  scan(text, opts, (s) => {
    if (parts.length % 2 === 0) parts.push("");
    parts[parts.length - 1] += s;
  }, (c) => {
    if (parts.length % 2 === 1) parts.push("");
    parts[parts.length - 1] += escapeCodePoint(c);
  });
  if (parts.length % 2 === 0) parts.push("");
  return parts;
}

/** The text as a person is shown it: every hidden code point escaped (see the module's rule). */
export function displayText(text: string, opts: DisplayOptions = {}): string {
  return displayParts(text, opts).join("");
}

/**
 * A JSON value as one line of JSON text, with every hidden code point
 * escaped; still valid JSON for the same value. `undefined` shows as `null`.
 */
export function displayJson(value: unknown): string {
  return displayText(JSON.stringify(value) ?? "null");
}

/**
 * A JSON value as one line of JSON text, cut like {@link displayParts}: the
 * escaped parts hold both what the rule escapes and what JSON escaped itself
 * (controls, lone surrogates), so a page can mark every one. Joined, it is
 * {@link displayJson}.
 */
export function displayJsonParts(value: unknown): string[] {
  const parts = displayParts(JSON.stringify(value) ?? "null");
  const out = [""];
  const add = (s: string, hidden: boolean) => {
    if (s === "") return;
    if ((out.length % 2 === 0) !== hidden) out.push("");
    out[out.length - 1] += s;
  };
  parts.forEach((part, i) => {
    if (i % 2 === 1) return add(part, true);
    let at = 0;
    for (const m of part.matchAll(JSON_ESCAPE)) {
      add(part.slice(at, m.index), false);
      add(m[0], m[0] !== "\\\\" && m[0] !== '\\"' && m[0] !== "\\/");
      at = m.index + m[0].length;
    }
    add(part.slice(at), false);
  });
  if (out.length % 2 === 0) out.push("");
  return out;
}

/** What a value hides, from {@link hiddenIn}. */
export interface Hidden {
  /** How many code points of its strings and keys the rule escapes (controls, newlines included). */
  count: number;
  /** Their escapes, each once, in the order they first appear (`\\u202e`, `\\n`). */
  escapes: string[];
}

/**
 * What the strings and keys of a JSON value hide: what an approval box warns
 * about, naming each kind.
 */
export function hiddenIn(value: unknown): Hidden {
  let count = 0;
  const escapes = new Set<string>();
  const look = (s: string) => {
    if (!SUSPECT.test(s)) return;
    scan(s, {}, () => {}, (c) => {
      count++;
      escapes.add(escapeCodePoint(c));
    });
  };
  // Iterative, so a deeply nested value cannot exhaust the stack; children are
  // pushed last first, so they are looked at in order.
  const todo: unknown[] = [value];
  while (todo.length > 0) {
    const v = todo.pop();
    if (typeof v === "string") look(v);
    else if (Array.isArray(v)) { for (let i = v.length - 1; i >= 0; i--) todo.push(v[i]); }
    else if (v !== null && typeof v === "object") {
      const entries = Object.entries(v);
      for (let i = entries.length - 1; i >= 0; i--) todo.push(entries[i][1], entries[i][0]);
    }
  }
  return { count, escapes: [...escapes] };
}

/**
 * The rule as a classic script for a web page: it defines
 * `globalThis.agentDisplay` with {@link displayParts}, {@link displayText},
 * {@link displayJson}, {@link displayJsonParts} and {@link hiddenIn}, built from this module's own
 * functions, so the page and the CLI cannot disagree.
 */
export function displayScript(): string {
  const regexes = { SCAN, SUSPECT, HIDDEN_ONE, BASE, JSON_ESCAPE };
  const fns = [
    escapeCodePoint,
    charBefore,
    scan,
    displayParts,
    displayText,
    displayJson,
    displayJsonParts,
    hiddenIn,
  ];
  return [
    "// Served from runtime/base/display.ts: the rule the CLI and the logs use.",
    '"use strict";',
    "globalThis.agentDisplay = (() => {",
    ...Object.entries(regexes).map(([name, re]) =>
      `const ${name} = new RegExp(${JSON.stringify(re.source)}, ${JSON.stringify(re.flags)});`
    ),
    `const SHORT = ${JSON.stringify(SHORT)};`,
    ...fns.map((f) => f.toString()),
    "return Object.freeze({ displayParts, displayText, displayJson, displayJsonParts, hiddenIn });",
    "})();",
    "",
  ].join("\n");
}
