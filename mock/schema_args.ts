/**
 * `argsFromSchema`: a deterministic value that validates against a JSON Schema,
 * so the mock model can call any tool with plausible arguments. Aimed at the
 * schemas zod 4 writes with `z.toJSONSchema(schema, { io: "input" })`.
 *
 * @module
 */

/** Options of {@linkcode argsFromSchema}. */
export interface ArgsFromSchemaOptions {
  /** Number written into generated strings, e.g. the run's call count (`name-<n>`). */
  n: number;
  /** Name for strings that are not an object property (e.g. the tool's name); default `value`. */
  name?: string;
}

type Schema = Record<string, unknown>;

interface Context {
  /** The schema `$ref`s are resolved against. */
  root: unknown;
  n: number;
  depth: number;
  /** `$ref`s being expanded, to stop optional recursion. */
  refs: readonly string[];
}

/** Beyond this depth optional properties are left out, so recursive schemas end. */
const SOFT_DEPTH = 8;
/** Beyond this depth generation gives up with `null`. */
const HARD_DEPTH = 64;

/** Characters tried, in order, when a regex atom needs one. */
const PREFERRED_CHARS = [..."abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-_.@:/+ ", "🙂"];

/**
 * Generates a value that validates against `schema`: every property listed in
 * `properties` (only those when `additionalProperties` is `false`), strings
 * `<property>-<n>` fitted to formats, patterns and lengths, numbers 1 when
 * allowed (else the nearest allowed: usually the minimum), `true`, `minItems` array items, the
 * first `enum`/`const`/`anyOf`/`oneOf` option, and `default` when given.
 * Deterministic: the same inputs give the same output. Never throws; a part it
 * cannot satisfy gets a best-effort value.
 *
 * @example
 * ```ts
 * argsFromSchema(
 *   { type: "object", properties: { name: { type: "string" }, size: { type: "integer", minimum: 5 } } },
 *   { n: 3 },
 * ); // { name: "name-3", size: 5 }
 * ```
 */
export function argsFromSchema(schema: unknown, opts: ArgsFromSchemaOptions): unknown {
  return generate(schema, { root: schema, n: opts.n, depth: 0, refs: [] }, opts.name ?? "value");
}

function generate(input: unknown, ctx: Context, name: string): unknown {
  if (ctx.depth > HARD_DEPTH) return null;
  if (input === false) return null; // nothing validates; null is as good as anything
  if (!isObject(input)) return `${name}-${ctx.n}`; // `true` or junk: anything goes
  let schema = input;
  if (typeof schema.$ref === "string") {
    const { $ref, ...siblings } = schema;
    const target = resolveRef(ctx.root, $ref);
    ctx = { ...ctx, refs: [...ctx.refs, $ref] };
    schema = isObject(target) ? { ...target, ...siblings } : siblings;
  }
  if (Array.isArray(schema.allOf) && schema.allOf.some((part) => !isPatternOnly(part))) {
    schema = flattenAllOf(schema, ctx.root);
  }
  if (schema.const !== undefined) return structuredClone(schema.const);
  if (schema.default !== undefined) return structuredClone(schema.default);
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return structuredClone(schema.enum[0]);
  const options = Array.isArray(schema.anyOf) && schema.anyOf.length > 0
    ? schema.anyOf
    : Array.isArray(schema.oneOf) && schema.oneOf.length > 0
    ? schema.oneOf
    : undefined;
  if (options !== undefined) {
    // Keywords next to the options (e.g. a `type`) still apply to the chosen one.
    const { anyOf: _anyOf, oneOf: _oneOf, ...rest } = schema;
    const first = options[0];
    return generate(
      isObject(first) && typeof first.$ref !== "string" ? { ...rest, ...first } : first,
      ctx,
      name,
    );
  }
  const inner = { ...ctx, depth: ctx.depth + 1 };
  switch (typeOf(schema)) {
    case "object":
      return objectValue(schema, inner);
    case "array":
      return arrayValue(schema, inner, name);
    case "integer":
      return numberValue(schema, true);
    case "number":
      return numberValue(schema, false);
    case "boolean":
      return true;
    case "null":
      return null;
    default:
      return stringValue(schema, name, ctx.n);
  }
}

/** The schema's type: the first non-null one of a type array, else inferred from its keywords. */
function typeOf(schema: Schema): string {
  const type = schema.type;
  if (typeof type === "string") return type;
  if (Array.isArray(type) && type.length > 0) return type.find((t) => t !== "null") ?? "null";
  const has = (...keys: string[]) => keys.some((key) => key in schema);
  if (has("properties", "additionalProperties", "required", "minProperties", "propertyNames")) {
    return "object";
  }
  if (has("items", "prefixItems", "minItems", "maxItems")) return "array";
  if (has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")) return "number";
  return "string";
}

function objectValue(schema: Schema, ctx: Context): Record<string, unknown> {
  const properties = isObject(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? schema.required.filter((r) => typeof r === "string") : [];
  const extra = schema.additionalProperties;
  const out: Record<string, unknown> = {};
  for (const [key, sub] of Object.entries(properties)) {
    if (!required.includes(key) && (ctx.depth > SOFT_DEPTH || refersToActive(sub, ctx))) continue;
    out[key] = generate(sub, ctx, key);
  }
  if (extra === false) return out;
  const extra_schema = isObject(extra) ? extra : {};
  // Required names without a property schema, e.g. a record keyed by an enum.
  for (const key of required) {
    if (!(key in out)) out[key] = generate(extra_schema, ctx, key);
  }
  const min = count(schema.minProperties) ?? 0;
  for (let i = 1; Object.keys(out).length < min && i <= min + Object.keys(out).length; i++) {
    const key = `key-${i}`;
    if (!(key in out)) out[key] = generate(extra_schema, ctx, key);
  }
  return out;
}

/** True when `schema` is a `$ref` already being expanded (an optional recursion). */
function refersToActive(schema: unknown, ctx: Context): boolean {
  return isObject(schema) && typeof schema.$ref === "string" && ctx.refs.includes(schema.$ref);
}

function arrayValue(schema: Schema, ctx: Context, name: string): unknown[] {
  const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : [];
  const min = count(schema.minItems) ?? 0;
  const unique = schema.uniqueItems === true;
  const out: unknown[] = [];
  for (let i = 0; i < min; i++) {
    const item_schema = i < prefix.length ? prefix[i] : schema.items ?? {};
    if (item_schema === false) break;
    out.push(generate(item_schema, ctx, unique ? `${name}-${i + 1}` : name));
  }
  return out;
}

function numberValue(schema: Schema, integer: boolean): number {
  const num = (value: unknown) => typeof value === "number" && Number.isFinite(value) ? value : undefined;
  // Draft 4 spells exclusive bounds as booleans next to minimum/maximum; 2020-12 as numbers.
  let lo = num(schema.minimum);
  let lo_open = false;
  if (schema.exclusiveMinimum === true) lo_open = true;
  const ex_lo = num(schema.exclusiveMinimum);
  if (ex_lo !== undefined && (lo === undefined || ex_lo >= lo)) [lo, lo_open] = [ex_lo, true];
  let hi = num(schema.maximum);
  let hi_open = false;
  if (schema.exclusiveMaximum === true) hi_open = true;
  const ex_hi = num(schema.exclusiveMaximum);
  if (ex_hi !== undefined && (hi === undefined || ex_hi <= hi)) [hi, hi_open] = [ex_hi, true];
  const step = num(schema.multipleOf) !== undefined && (schema.multipleOf as number) > 0
    ? schema.multipleOf as number
    : undefined;

  const allowed = (v: number) =>
    (lo === undefined || (lo_open ? v > lo : v >= lo)) &&
    (hi === undefined || (hi_open ? v < hi : v <= hi)) &&
    (!integer || Number.isInteger(v)) &&
    (step === undefined || isMultiple(v, step));
  if (allowed(1)) return 1;

  // Otherwise the allowed value nearest to 1: the minimum when 1 is below it, the maximum when above.
  const below_lo = lo !== undefined && (lo_open ? 1 <= lo : 1 < lo);
  const above_hi = !below_lo && hi !== undefined && (hi_open ? 1 >= hi : 1 > hi);
  const candidates: number[] = [];
  const grid = step ?? (integer ? 1 : undefined);
  if (grid === undefined) {
    // A plain number, so 1 is out of bounds; step inside an open bound, not past the other one.
    const gap = lo !== undefined && hi !== undefined ? Math.min(1, (hi - lo) / 2) : 1;
    if (below_lo) candidates.push(lo_open ? lo! + gap : lo!);
    else if (above_hi) candidates.push(hi_open ? hi! - gap : hi!);
  } else {
    // The first grid points from the bound (or from 1) on; a fractional step may need a few to hit an integer.
    const from = below_lo ? lo! : above_hi ? hi! : 1;
    const dir = above_hi ? -1 : 1;
    const first = dir > 0 ? Math.ceil(from / grid) : Math.floor(from / grid);
    for (let i = 0; i < 100; i++) candidates.push((first + dir * i) * grid);
  }
  candidates.push(0);
  return candidates.find(allowed) ?? lo ?? hi ?? 0;
}

function isMultiple(value: number, step: number): boolean {
  const ratio = value / step;
  return Math.abs(ratio - Math.round(ratio)) < 1e-9;
}

/** Values for string formats, before patterns and lengths are checked. */
const FORMATS: Record<string, (n: number) => string> = {
  email: (n) => `user-${n}@example.test`,
  "idn-email": (n) => `user-${n}@example.test`,
  uri: (n) => `https://example.test/${n}`,
  url: (n) => `https://example.test/${n}`,
  iri: (n) => `https://example.test/${n}`,
  "uri-reference": (n) => `https://example.test/${n}`,
  uuid: (n) => `00000000-0000-4000-8000-${String(Math.abs(Math.trunc(n))).padStart(12, "0").slice(-12)}`,
  guid: (n) => `00000000-0000-4000-8000-${String(Math.abs(Math.trunc(n))).padStart(12, "0").slice(-12)}`,
  "date-time": () => "2030-01-01T00:00:00Z",
  date: () => "2030-01-01",
  time: () => "00:00:00",
  duration: () => "P1D",
  ipv4: () => "192.0.2.1",
  ipv6: () => "2001:db8::1",
  cidrv4: () => "192.0.2.0/24",
  cidrv6: () => "2001:db8::/32",
  hostname: (n) => `host-${n}.example.test`,
  "idn-hostname": (n) => `host-${n}.example.test`,
  e164: () => "+15550100000",
  emoji: () => "🙂",
  base64: () => "AAAA",
  base64url: () => "AAAA",
  jwt: () => "eyJhbGciOiJub25lIn0.e30.",
};

function stringValue(schema: Schema, name: string, n: number): string {
  const min = count(schema.minLength) ?? 0;
  const max = count(schema.maxLength) ?? Infinity;
  const patterns = patternsOf(schema);
  const regexes = patterns.flatMap(compile);
  const fits = (s: string) => s.length >= min && s.length <= max && regexes.every((re) => re.test(s));
  const fit = (s: string) => s.length > max ? s.slice(0, max) : s.padEnd(min, "x");

  const base = `${name}-${n}`;
  const format = typeof schema.format === "string" ? FORMATS[schema.format]?.(n) : undefined;
  const samples = patterns.map(sampleRegex).filter((s) => s !== undefined);
  const candidates = [
    format,
    base,
    `x${n}`,
    `${name}${n}`,
    name,
    String(n),
    "x",
    ...samples,
    samples.join(""),
  ]
    .filter((s) => s !== undefined);
  for (const candidate of candidates) {
    if (fits(candidate)) return candidate;
    if (fits(fit(candidate))) return fit(candidate);
  }
  return fit(base);
}

/** Patterns the string must match: its own and those of pattern-only `allOf` parts. */
function patternsOf(schema: Schema): string[] {
  const own = typeof schema.pattern === "string" ? [schema.pattern] : [];
  const parts = Array.isArray(schema.allOf) ? schema.allOf.filter(isObject).flatMap(patternsOf) : [];
  return [...own, ...parts];
}

/** The pattern as a RegExp with and without the `u` flag, whichever compile; none when neither does. */
function compile(pattern: string): RegExp[] {
  return ["u", ""].flatMap((flags) => {
    try {
      return [new RegExp(pattern, flags)];
    } catch {
      return [];
    }
  });
}

/**
 * A short string matching the regex source `pattern` (first alternatives,
 * fewest repetitions), or `undefined` for syntax it does not handle. The
 * caller checks the result: lookarounds are skipped, not honoured.
 */
function sampleRegex(pattern: string): string | undefined {
  let pos = 0;
  const fail = (): never => {
    throw new SyntaxError("Unsupported regex syntax");
  };

  const alternation = (): string => {
    const first = sequence();
    while (pattern[pos] === "|") {
      pos++;
      sequence();
    }
    return first;
  };
  const sequence = (): string => {
    let out = "";
    while (pos < pattern.length && pattern[pos] !== "|" && pattern[pos] !== ")") {
      const atom = parseAtom();
      out += atom.repeat(quantifier());
    }
    return out;
  };
  const quantifier = (): number => {
    const c = pattern[pos];
    let reps = 1;
    if (c === "*" || c === "?") [reps, pos] = [0, pos + 1];
    else if (c === "+") [reps, pos] = [1, pos + 1];
    else if (c === "{") {
      const m = /^\{(\d+)(,\d*)?\}/.exec(pattern.slice(pos));
      if (m === null) return 1; // a literal brace, taken by the next atom
      [reps, pos] = [Number(m[1]), pos + m[0].length];
    } else return 1;
    if (pattern[pos] === "?") pos++; // lazy
    return reps;
  };
  const parseAtom = (): string => {
    const c = pattern[pos];
    if (c === "^" || c === "$") {
      pos++;
      return "";
    }
    if (c === "(") return group();
    if (c === "[") {
      const start = pos;
      pos++;
      if (pattern[pos] === "^") pos++;
      if (pattern[pos] === "]") pos++;
      while (pos < pattern.length && pattern[pos] !== "]") pos += pattern[pos] === "\\" ? 2 : 1;
      if (pos >= pattern.length) fail();
      pos++;
      return pickChar(pattern.slice(start, pos));
    }
    if (c === "\\") return escape();
    if (c === "*" || c === "+" || c === "?") fail();
    if (c === ".") {
      pos++;
      return pickChar(".");
    }
    const char = String.fromCodePoint(pattern.codePointAt(pos)!);
    pos += char.length;
    return char;
  };
  const group = (): string => {
    pos++;
    let zero_width = false;
    if (pattern.startsWith("?:", pos)) pos += 2;
    else if (/^\?<?[=!]/.test(pattern.slice(pos))) {
      zero_width = true;
      pos += pattern[pos + 1] === "<" ? 3 : 2;
    } else if (pattern[pos] === "?" && pattern[pos + 1] === "<") {
      const end = pattern.indexOf(">", pos);
      if (end < 0) fail();
      pos = end + 1;
    } else if (pattern[pos] === "?") fail();
    const inner = alternation();
    if (pattern[pos] !== ")") fail();
    pos++;
    return zero_width ? "" : inner;
  };
  const escape = (): string => {
    const c = pattern[pos + 1];
    if (c === undefined) fail();
    if (c === "b" || c === "B") {
      pos += 2;
      return "";
    }
    if (/[1-9k]/.test(c) || c === "c") fail(); // back-references and control letters
    const token = /^\\(?:[pP]\{[^}]*\}|u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)/u.exec(
      pattern.slice(pos),
    )?.[0] ?? fail();
    pos += token.length;
    return pickChar(token);
  };

  try {
    const out = alternation();
    return pos === pattern.length ? out : undefined;
  } catch {
    return undefined;
  }
}

/** The first preferred character matched by a one-character regex `token` (a class, escape or `.`). */
function pickChar(token: string): string {
  const regexes = compile(`^${token}$`);
  if (regexes.length === 0) throw new SyntaxError("Unsupported regex syntax");
  const found = PREFERRED_CHARS.find((c) => regexes.some((re) => re.test(c)));
  if (found === undefined) throw new SyntaxError("No preferred character matches");
  return found;
}

/** Merges an `allOf` into one schema: properties and requirements add up, bounds tighten. */
function flattenAllOf(schema: Schema, root: unknown): Schema {
  const merged: Schema = {};
  const patterns: string[] = [];
  const visit = (part: unknown, depth: number) => {
    if (isObject(part) && typeof part.$ref === "string" && depth < HARD_DEPTH) {
      const { $ref, ...siblings } = part;
      const target = resolveRef(root, $ref);
      part = isObject(target) ? { ...target, ...siblings } : siblings;
    }
    if (!isObject(part)) return;
    for (const [key, value] of Object.entries(part)) {
      if (key === "allOf") continue;
      if (key === "pattern") {
        if (typeof value === "string") patterns.push(value);
        continue;
      }
      merged[key] = mergeKeyword(key, merged[key], value);
    }
    if (Array.isArray(part.allOf)) { for (const sub of part.allOf) visit(sub, depth + 1); }
  };
  visit(schema, 0);
  if (patterns.length > 0) merged.allOf = patterns.map((pattern) => ({ pattern }));
  return merged;
}

function mergeKeyword(key: string, a: unknown, b: unknown): unknown {
  if (a === undefined) return b;
  if (b === undefined) return a;
  const both_numbers = typeof a === "number" && typeof b === "number";
  switch (key) {
    case "properties":
      return isObject(a) && isObject(b) ? { ...a, ...b } : b;
    case "required":
      return Array.isArray(a) && Array.isArray(b) ? [...new Set([...a, ...b])] : b;
    case "minimum":
    case "exclusiveMinimum":
    case "minLength":
    case "minItems":
    case "minProperties":
      return both_numbers ? Math.max(a, b) : b;
    case "maximum":
    case "exclusiveMaximum":
    case "maxLength":
    case "maxItems":
    case "maxProperties":
      return both_numbers ? Math.min(a, b) : b;
    case "additionalProperties":
      return a === false || b === false ? false : b;
    case "type": {
      const list = (t: unknown) => Array.isArray(t) ? t : [t];
      const common = list(a).filter((t) => list(b).includes(t));
      return common.length === 0 ? b : common.length === 1 ? common[0] : common;
    }
  }
  return b;
}

function isPatternOnly(part: unknown): boolean {
  return isObject(part) && Object.keys(part).every((key) => key === "pattern");
}

/** Follows a local `#/...` JSON pointer; `undefined` when it does not resolve. */
function resolveRef(root: unknown, ref: string): unknown {
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let node = root;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

function count(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : undefined;
}

function isObject(value: unknown): value is Schema {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}
