/**
 * Validation of the JSON the mock servers receive.
 *
 * @module
 */

/**
 * Reads a request body as a JSON object. Returns `undefined` when the body is
 * missing, is not JSON, or is not a plain object.
 */
export async function readJsonObject(req: Request): Promise<Record<string, unknown> | undefined> {
  let value: unknown;
  try {
    value = JSON.parse(await req.text());
  } catch {
    return undefined;
  }
  return isPlainObject(value) ? value : undefined;
}

/** True for a non-null, non-array object. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/**
 * Validates an optional non-negative integer field of a fault spec; throws a
 * `TypeError` naming the field otherwise.
 */
export function optionalCount(spec: Record<string, unknown>, field: string): number | undefined {
  const value = spec[field];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
    throw new TypeError(`${field} must be a non-negative integer, got ${JSON.stringify(value)}`);
  }
  return value;
}
