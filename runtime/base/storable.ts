/**
 * What the database can store: the one check every JSON value passes before
 * it is written (a run's input, a model's answer and the arguments in it, a
 * tool's result, a usage report, a refusal's text). A value is stored as the
 * text `JSON.stringify` writes for it, read by PostgreSQL's `jsonb` (PGlite's
 * too), so a value is refused, or written out, here when either of them
 * would refuse it or change it:
 *
 * - `JSON.stringify` throws (a cycle, a BigInt) or writes nothing (a function
 *   or a symbol as the whole value): `not_json`;
 * - it writes `null` for a number that is not finite (NaN, Infinity, and
 *   `1e400` parsed from a model's JSON) or `{}` for a Map or a Set:
 *   `changed`;
 * - `jsonb` refuses a lone UTF-16 surrogate (`"\ud800"`, 22P02) and the NUL
 *   character (`\u0000`, 22P05): `lone_surrogate`, `nul`. With
 *   `writeOut: true` both are written out instead, as the six characters of
 *   their escape (`\ud800`), a change anyone reading the value can see;
 * - `jsonb` refuses nesting deeper than its stack allows, and a value larger
 *   than it (or PGlite's memory) can hold: `too_deep` (more than
 *   {@link MAX_JSON_DEPTH} levels), `too_large` (more than
 *   {@link MAX_JSON_BYTES} bytes of JSON).
 *
 * What JSON writes by the value's own rules is kept as written, the same
 * value live and on replay: a Date (or anything with `toJSON`) as what
 * `toJSON` returns, `undefined`, functions and symbols left out of objects
 * (`null` in arrays), `-0` as `0`. `jsonb` keeps the last of duplicate keys
 * (as `JSON.parse` does) and sorts an object's keys: order is not kept.
 *
 * @module
 */

import { RuntimeError } from "./errors.ts";
import type { Json } from "./values.ts";

/**
 * The deepest nesting stored. PostgreSQL 15 with the default
 * `max_stack_depth` (2 MB) refuses beyond 13,092 levels of objects (54001),
 * fewer once a statement wraps the value, and fewer again with a smaller
 * `max_stack_depth`; the runtime's own recursive code (the approval hash of
 * a call's arguments) manages about 2,500. A thousand levels leave room for
 * all of them, and no real answer or result comes near it.
 */
export const MAX_JSON_DEPTH = 1_000;

/**
 * The largest JSON text stored, in UTF-8 bytes (64 MiB). PostgreSQL refuses a
 * `jsonb` string of 256 MiB or more (54000); PGlite 0.5 in memory fails
 * writing one of about 150 MB ("Program terminated with exit(100)").
 */
export const MAX_JSON_BYTES = 64 * 1024 * 1024;

/** Why a value cannot be stored as it is. */
export type UnstorableKind = "not_json" | "changed" | "lone_surrogate" | "nul" | "too_deep" | "too_large";

/** A value as it is stored: its JSON text, and the value that text reads back as. */
export interface StorableValue {
  /** It can be stored. */
  ok: true;
  /** The text written (a `jsonb` parameter). */
  json: string;
  /** `JSON.parse(json)`: what the database gives back, and what the runtime goes on with. */
  value: Json;
}

/** A value that cannot be stored, and why. */
export interface UnstorableValue {
  /** It cannot be stored. */
  ok: false;
  /** Which rule it breaks. */
  kind: UnstorableKind;
  /** What was found, in words, e.g. `a lone surrogate (\\ud800)` or `the number NaN (at key "n")`. */
  reason: string;
}

/** Options of {@link toStorable}. */
export interface StorableOptions {
  /**
   * Write NUL characters and lone surrogates out as the text of their escape
   * (`\u0000`, `\ud800`) instead of refusing the value. Default false.
   */
  writeOut?: boolean;
}

/** A value the store was asked to write could not be stored (see {@link toStorable}). */
export class ValueUnstorableError extends RuntimeError {
  /** Which rule the value breaks. */
  readonly kind: UnstorableKind;
  /** Creates the error for a value written as `what` (`tool result`, `run input`, ...). */
  constructor(what: string, found: UnstorableValue) {
    super(
      "VALUE_UNSTORABLE",
      `The ${what} cannot be stored: it holds ${found.reason}. Nothing was written; ` +
        `store JSON (strings without lone surrogates or NUL, finite numbers, at most ${MAX_JSON_DEPTH} levels)`,
    );
    this.name = "ValueUnstorableError";
    this.kind = found.kind;
  }
}

/**
 * The JSON a value is stored as, or why it cannot be. The value given back
 * (`JSON.parse` of the text) is the one to go on with: it equals what a
 * later read of the row gives.
 *
 * @example
 * ```ts
 * import { toStorable } from "./storable.ts";
 * toStorable({ when: new Date(0), n: 1 }); // ok, value { when: "1970-01-01T00:00:00.000Z", n: 1 }
 * toStorable({ to: "ACCT-\ud800" }).ok; // false: a lone surrogate
 * toStorable({ n: 1e400 }).ok; // false: Infinity would be stored as null
 * ```
 */
export function toStorable(value: unknown, opts: StorableOptions = {}): StorableValue | UnstorableValue {
  const checked = storableText(value, opts);
  return checked.ok ? { ok: true, json: checked.json, value: JSON.parse(checked.json) } : checked;
}

/**
 * The JSON text a value is stored as (see {@link toStorable}), or throws
 * {@link ValueUnstorableError} naming it `what`: what the store sends, with
 * no value read back (#11: one parse less a write).
 */
export function storableJson(value: unknown, what: string, opts: StorableOptions = {}): string {
  const checked = storableText(value, opts);
  if (!checked.ok) throw new ValueUnstorableError(what, checked);
  return checked.json;
}

/** {@link toStorable} without the value read back. */
function storableText(value: unknown, opts: StorableOptions): { ok: true; json: string } | UnstorableValue {
  let json: string | undefined;
  try {
    json = JSON.stringify(value === undefined ? null : value);
  } catch (err) {
    // A cycle or a BigInt (TypeError), or nesting beyond the JavaScript stack (RangeError).
    return err instanceof RangeError
      ? { ok: false, kind: "too_deep", reason: `nesting deeper than JSON can be written (${err.message})` }
      : {
        ok: false,
        kind: "not_json",
        reason: `a value JSON cannot write (${(err as Error).message.replace(/\s+/g, " ")})`,
      };
  }
  if (json === undefined) {
    return { ok: false, kind: "not_json", reason: `a ${typeof value}, which JSON cannot write` };
  }
  // A non-finite number is written `null`, a Map or a Set `{}`: only then is the value walked (#11).
  if (json.includes("null") || json.includes("{}")) {
    const changed = findChanged(value);
    if (changed) return { ok: false, kind: "changed", reason: changed };
  }
  // `JSON.stringify` writes a NUL as `\u0000` and a lone surrogate as its escape
  // (a pair as the character itself); an escape after an odd number of
  // backslashes is text, not an escape, which `(?<!\\)((?:\\\\)*)` skips.
  // Most values hold neither: a plain search first (#11).
  if (json.includes("\\u0000")) {
    const nul = /(?<!\\)((?:\\\\)*)\\u0000/g;
    if (nul.test(json)) {
      if (!opts.writeOut) {
        return { ok: false, kind: "nul", reason: `a NUL character (\\u0000)${at(json, "\\u0000")}` };
      }
      json = json.replace(nul, "$1\\\\u0000");
    }
  }
  if (json.includes("\\ud")) {
    const surrogate = /(?<!\\)((?:\\\\)*)\\(u[dD][89a-fA-F][0-9a-fA-F]{2})/g;
    const lone = surrogate.exec(json);
    if (lone) {
      if (!opts.writeOut) {
        return {
          ok: false,
          kind: "lone_surrogate",
          reason: `a lone surrogate (\\${lone[2]})${at(json, lone[0])}`,
        };
      }
      json = json.replace(surrogate, "$1\\\\$2");
    }
  }
  // Nesting needs at least two characters a level: a short text cannot be too deep.
  if (json.length > 2 * MAX_JSON_DEPTH && deeperThan(json, MAX_JSON_DEPTH)) {
    return { ok: false, kind: "too_deep", reason: `nesting deeper than ${MAX_JSON_DEPTH} levels` };
  }
  // A UTF-16 unit is at most three UTF-8 bytes: count them only when it could matter.
  if (json.length * 3 > MAX_JSON_BYTES) {
    const bytes = utf8Length(json);
    if (bytes > MAX_JSON_BYTES) {
      return {
        ok: false,
        kind: "too_large",
        reason: `${bytes} bytes of JSON (the most is ${MAX_JSON_BYTES})`,
      };
    }
  }
  return { ok: true, json };
}

/** Where in a JSON text `needle` first appears, for a message: ` near ...` with a little context. */
function at(json: string, needle: string): string {
  const i = json.indexOf(needle);
  if (i < 0 || json.length <= 80) return "";
  return ` near ${JSON.stringify(json.slice(Math.max(0, i - 30), i + needle.length + 10))}`;
}

/**
 * What `JSON.stringify` would write as something else: a number that is not
 * finite (written `null`), a Map or a Set (written `{}`). The replacer sees
 * each value after its `toJSON`, as the text was written.
 */
function findChanged(value: unknown): string | undefined {
  let found: string | undefined;
  JSON.stringify(value, function (key, v) {
    if (found) return undefined;
    if (typeof v === "number" && !Number.isFinite(v)) {
      found = `the number ${v}${
        key === "" ? "" : ` (at key ${JSON.stringify(key)})`
      }, which JSON writes as null`;
    } else if (v instanceof Map || v instanceof Set) {
      found = `a ${v instanceof Map ? "Map" : "Set"}${
        key === "" ? "" : ` (at key ${JSON.stringify(key)})`
      }, which JSON writes as {}`;
    }
    return found ? undefined : v;
  });
  return found;
}

/** True when the JSON text nests deeper than `limit` (brackets inside strings do not count). */
function deeperThan(json: string, limit: number): boolean {
  const token = /[[\]{}"]/g;
  let depth = 0;
  // Bounded: each pass moves `lastIndex` forward.
  for (let m = token.exec(json); m !== null; m = token.exec(json)) {
    const c = m[0];
    if (c === '"') {
      token.lastIndex = stringEnd(json, token.lastIndex);
    } else if (c === "[" || c === "{") {
      if (++depth > limit) return true;
    } else {
      depth--;
    }
  }
  return false;
}

/** The index just past the quote closing a JSON string whose body starts at `from`. */
function stringEnd(json: string, from: number): number {
  // Bounded: each pass moves `from` past a quote.
  for (;;) {
    const q = json.indexOf('"', from);
    if (q < 0) return json.length;
    let backslashes = 0;
    while (json.charCodeAt(q - 1 - backslashes) === 92) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** The UTF-8 length of a string without lone surrogates. */
function utf8Length(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}
