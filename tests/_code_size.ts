/**
 * How long the functions of a TypeScript file are: a scanner that skips
 * strings, template literals (their `${}` parts are code), comments and
 * regular expression literals, pairs the braces of what is left, and measures
 * each function, method and arrow function assigned to a name from its first
 * line to its closing brace. It reads code as `deno fmt` writes it: a body's
 * opening brace ends its line. For `code_size_test.ts`, which keeps the
 * library's long functions and files on a ledger.
 *
 * @module
 */

/** A function over the limit: its name (`Class.method` for a method), first line and length in lines. */
export interface FunctionSize {
  name: string;
  line: number;
  lines: number;
}

/** Words after which a `/` starts a regular expression, not a division. */
const REGEX_AFTER_WORDS = new Set([
  "return",
  "typeof",
  "case",
  "do",
  "else",
  "in",
  "of",
  "new",
  "delete",
  "void",
  "throw",
]);

/**
 * The offsets of the code's braces, each opening one paired with its closing
 * one (a template's `${` pairs with the `}` that ends it). Also returns a mask
 * of which offsets are code (not in a string, comment or regex).
 */
export function pairBraces(src: string): { pairs: Map<number, number>; code: Uint8Array } {
  const pairs = new Map<number, number>();
  const code = new Uint8Array(src.length);
  // Each entry: an open brace's offset, or -1 - offset for a template's `${`.
  const stack: number[] = [];
  let lastSignificant = ""; // the last code token's text, to tell a regex from a division
  let i = 0;
  const n = src.length;
  // Scans a template literal from `i` (just after its backtick, or after the `}` closing a `${}`).
  const template = (): void => {
    while (i < n) {
      const c = src[i];
      if (c === "\\") {
        i += 2;
      } else if (c === "`") {
        i++;
        lastSignificant = "`";
        return;
      } else if (c === "$" && src[i + 1] === "{") {
        stack.push(-1 - i);
        code[i] = code[i + 1] = 1;
        i += 2;
        lastSignificant = "{";
        return;
      } else {
        i++;
      }
    }
  };
  // Bounded: every branch advances i.
  while (i < n) {
    const c = src[i];
    if (c === "/" && src[i + 1] === "/") {
      while (i < n && src[i] !== "\n") i++;
    } else if (c === "/" && src[i + 1] === "*") {
      const end = src.indexOf("*/", i + 2);
      i = end < 0 ? n : end + 2;
    } else if (c === '"' || c === "'") {
      i++;
      while (i < n && src[i] !== c && src[i] !== "\n") i += src[i] === "\\" ? 2 : 1;
      i++;
      lastSignificant = "str";
    } else if (c === "`") {
      i++;
      template();
    } else if (c === "/" && startsRegex(lastSignificant)) {
      i++;
      let inClass = false;
      while (i < n && src[i] !== "\n") {
        const r = src[i];
        if (r === "\\") {
          i += 2;
          continue;
        }
        if (r === "[") inClass = true;
        else if (r === "]") inClass = false;
        else if (r === "/" && !inClass) break;
        i++;
      }
      i++;
      while (i < n && /[a-z]/.test(src[i])) i++;
      lastSignificant = "regex";
    } else if (c === "{") {
      code[i] = 1;
      stack.push(i);
      i++;
      lastSignificant = "{";
    } else if (c === "}") {
      code[i] = 1;
      const open = stack.pop();
      if (open === undefined) throw new Error(`An unmatched '}' at offset ${i}`);
      if (open < 0) {
        pairs.set(-1 - open, i);
        i++;
        template();
      } else {
        pairs.set(open, i);
        i++;
        lastSignificant = "}";
      }
    } else if (/\s/.test(c)) {
      i++;
    } else if (/[\w$#]/.test(c)) {
      const start = i;
      while (i < n && /[\w$#]/.test(src[i])) code[i++] = 1;
      lastSignificant = src.slice(start, i);
    } else {
      code[i] = 1;
      lastSignificant = c;
      i++;
    }
  }
  if (stack.length > 0) throw new Error(`${stack.length} '{' never closed`);
  return { pairs, code };
}

function startsRegex(last: string): boolean {
  if (last === "") return true;
  if (REGEX_AFTER_WORDS.has(last)) return true;
  if (/^[\w$#]/.test(last) || last === "str" || last === "regex" || last === "`") return false;
  return !")]}".includes(last);
}

/** A line that starts a function, a method or an arrow function assigned to a name; the name in group 1. */
const HEADERS: RegExp[] = [
  /^\s*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\*?\s+([\w$]+)/,
  /^\s*(?:export\s+)?(?:const|let)\s+([\w$]+)\s*(?::[^=]+)?=\s*(?:async\s+)?(?:\([^)]*\)?|[\w$]+)\s*(?::.*)?(?:=>|$)/,
  /^\s+(?:(?:public|private|protected|static|override|readonly|async|get|set)\s+)*\*?(#?[\w$]+)\s*(?:<[^>]*>)?\(/,
];
const NOT_METHODS = new Set([
  "if",
  "for",
  "while",
  "switch",
  "catch",
  "return",
  "function",
  "await",
  "new",
  "super",
  "typeof",
]);

/**
 * Every function of `src` longer than `limit` lines (header to closing
 * brace), with its name: a method as `Class.method`.
 */
export function longFunctions(src: string, limit: number): FunctionSize[] {
  const { pairs, code } = pairBraces(src);
  const lineStarts = [0];
  for (let i = 0; i < src.length; i++) if (src[i] === "\n") lineStarts.push(i + 1);
  const lineOf = (offset: number) => {
    let lo = 0, hi = lineStarts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (lineStarts[mid] <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo + 1;
  };
  const lines = src.split("\n");
  const classes: { name: string; end: number }[] = [];
  const found: FunctionSize[] = [];
  let claimedUntil = -1; // the body of the function found last: its nested functions are counted in it
  for (let l = 0; l < lines.length; l++) {
    const start = lineStarts[l];
    if (!code[firstNonSpace(src, start)]) continue; // a line inside a string or comment
    const cls = /^\s*(?:export\s+)?(?:default\s+)?(?:abstract\s+)?class\s+([\w$]+)/.exec(lines[l]);
    if (cls) {
      const open = bodyBrace(src, code, pairs, start);
      if (open !== undefined) classes.push({ name: cls[1], end: pairs.get(open)! });
      continue;
    }
    let name: string | undefined;
    for (const h of HEADERS) {
      const m = h.exec(lines[l]);
      if (m && !NOT_METHODS.has(m[1])) {
        name = m[1];
        break;
      }
    }
    if (name === undefined || start <= claimedUntil) continue;
    const open = bodyBrace(src, code, pairs, start);
    if (open === undefined) continue;
    const close = pairs.get(open)!;
    const inClass = classes.findLast((c) => c.end > start);
    const isMethod = inClass !== undefined &&
      !/^\s*(?:export|const|let|function|async\s+function)/.test(lines[l]);
    const length = lineOf(close) - (l + 1) + 1;
    claimedUntil = close;
    if (length > limit) {
      found.push({ name: isMethod ? `${inClass.name}.${name}` : name, line: l + 1, lines: length });
    }
  }
  return found;
}

function firstNonSpace(src: string, from: number): number {
  let i = from;
  while (i < src.length && (src[i] === " " || src[i] === "\t")) i++;
  return i;
}

/**
 * The brace that opens the body of a header starting at `from`: the first
 * code `{` that ends its line, outside the header's parentheses, and not a
 * type's (after `<`, `:`, `(`, `,`, `|`, `&` or a lone `=`). Undefined when
 * a `;` or a line ending in neither `{` nor an open parenthesis comes first
 * (a declaration without a body).
 */
function bodyBrace(
  src: string,
  code: Uint8Array,
  pairs: Map<number, number>,
  from: number,
): number | undefined {
  let parens = 0;
  let prev = "";
  for (let i = from; i < src.length; i++) {
    if (!code[i]) continue;
    const c = src[i];
    if (c === "(" || c === "[") parens++;
    else if (c === ")" || c === "]") parens--;
    else if (c === ";" && parens === 0) return undefined;
    else if (c === "{") {
      const endsLine = /^[ \t]*(?:\/\/.*)?(?:\n|$)/.test(src.slice(i + 1, i + 200));
      if (parens === 0 && endsLine && !"<:(,|&=".includes(prev)) return i;
      // An object inside the header (a type, a default value, an argument): skipped whole.
      i = pairs.get(i) ?? i;
      prev = "}";
      continue;
    }
    if (!/\s/.test(c)) prev = c;
  }
  return undefined;
}
