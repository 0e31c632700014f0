/**
 * Validation of the JSON the mock servers receive.
 *
 * @module
 */

import { errorResponse, jsonResponse } from "./http_response.ts";

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

/** What a mock exposes to its fault endpoints. */
export interface FaultControls {
  /** Sets a fault spec; throws a `TypeError` for a malformed one. */
  set(spec: Record<string, unknown>): void;
  /** The faults now set. */
  get(): unknown;
  /** Clears every fault. */
  clear(): void;
}

/** Builds an error response in a mock's own error format. */
export type ErrorBuilder = (status: number, code: string, message: string) => Response;

/**
 * The routes both mocks share: `GET /health` and `GET|POST|DELETE /_faults`.
 * Returns undefined for any other route. Errors are built by `error` (each
 * mock speaks its own protocol's error format).
 */
export async function commonRoute(
  req: Request,
  path: string,
  faults: FaultControls,
  error: ErrorBuilder = errorResponse,
): Promise<Response | undefined> {
  switch (`${req.method} ${path}`) {
    case "GET /health":
      return jsonResponse(200, { ok: true });
    case "GET /_faults":
      return jsonResponse(200, faults.get());
    case "DELETE /_faults":
      faults.clear();
      return jsonResponse(200, { ok: true });
    case "POST /_faults": {
      const spec = await readJsonObject(req);
      if (spec === undefined) return error(400, "bad_json", "the body must be a JSON object");
      try {
        faults.set(spec);
      } catch (err) {
        if (err instanceof TypeError) return error(400, "bad_fault_spec", err.message);
        throw err;
      }
      return jsonResponse(200, faults.get());
    }
  }
  return undefined;
}
