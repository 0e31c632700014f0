/**
 * Token usage, as a model reports it (`prompt_tokens`, `completion_tokens`,
 * `total_tokens`, and any nested counters such as `prompt_tokens_details`).
 * A step may pay for several answers (refused ones too), so the step's usage
 * is the sum of every answer that reported one.
 *
 * @module
 */

import type { Json } from "../base/values.ts";

type JsonObject = { [key: string]: Json };

function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * How deep a usage report's objects are kept (`prompt_tokens_details` is one
 * level down): a server's report is stored, and a deeper one would only be
 * deeper recursion here and deeper JSON there.
 */
const MAX_USAGE_DEPTH = 4;

/**
 * Adds two usage objects field by field: numbers are summed, nested objects
 * are added recursively (at most four levels down), anything else is
 * dropped. Returns `null` when neither side is a usage object.
 *
 * @example
 * ```ts
 * import { addUsage } from "./usage.ts";
 * addUsage({ prompt_tokens: 10, total_tokens: 12 }, { prompt_tokens: 5, total_tokens: 6 });
 * // { prompt_tokens: 15, total_tokens: 18 }
 * ```
 */
export function addUsage(a: unknown, b: unknown): Json {
  return addAt(a, b, 1);
}

function addAt(a: unknown, b: unknown, depth: number): Json {
  const left = isObject(a) ? a : undefined;
  const right = isObject(b) ? b : undefined;
  if (left === undefined && right === undefined) return null;
  const sum: JsonObject = {};
  // Every key of the left side, then those only the right side has (#11: without a Set of both).
  if (left !== undefined) {
    for (const key of Object.keys(left)) {
      // Own keys only: a plain object answers `toString` or `constructor` from its prototype.
      addField(
        sum,
        key,
        left[key],
        right !== undefined && Object.hasOwn(right, key) ? right[key] : undefined,
        depth,
      );
    }
  }
  if (right !== undefined) {
    for (const key of Object.keys(right)) {
      if (left === undefined || !Object.hasOwn(left, key)) addField(sum, key, undefined, right[key], depth);
    }
  }
  return sum;
}

/** Sets `sum[key]` to the sum of `x` and `y`: numbers added, objects added recursively, anything else dropped. */
function addField(
  sum: JsonObject,
  key: string,
  x: Json | undefined,
  y: Json | undefined,
  depth: number,
): void {
  if ((typeof x === "number" || x === undefined) && (typeof y === "number" || y === undefined)) {
    const total = (x ?? 0) + (y ?? 0);
    if (Number.isFinite(total)) sum[key] = total;
  } else if ((isObject(x) || isObject(y)) && depth < MAX_USAGE_DEPTH) {
    const nested = addAt(isObject(x) ? x : undefined, isObject(y) ? y : undefined, depth + 1);
    if (nested !== null) sum[key] = nested;
  }
}
