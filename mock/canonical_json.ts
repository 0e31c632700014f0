/**
 * Canonical JSON: the same value always serialises to the same string, whatever
 * order its object keys were written in. Used to decide whether two payloads
 * sent under one idempotency key are "the same request".
 *
 * @module
 */

/**
 * Serialises `value` as JSON with object keys sorted recursively.
 *
 * @example
 * ```ts
 * canonicalJson({ b: 1, a: { d: 2, c: 3 } }); // '{"a":{"c":3,"d":2},"b":1}'
 * ```
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value !== null && typeof value === "object") {
    const source = value as Record<string, unknown>;
    return Object.fromEntries(Object.keys(source).sort().map((key) => [key, sortKeys(source[key])]));
  }
  return value;
}
