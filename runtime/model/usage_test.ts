import assert from "node:assert/strict";
import { addUsage } from "./usage.ts";

Deno.test("addUsage() sums the counters of two answers", () => {
  assert.deepEqual(
    addUsage(
      { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 },
      { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
    ),
    { prompt_tokens: 15, completion_tokens: 3, total_tokens: 18 },
  );
});

Deno.test("addUsage() keeps one side when the other reported nothing", () => {
  assert.deepEqual(addUsage(null, { total_tokens: 6 }), { total_tokens: 6 });
  assert.deepEqual(addUsage({ total_tokens: 6 }, undefined), { total_tokens: 6 });
  assert.equal(addUsage(null, undefined), null);
});

Deno.test("addUsage() adds nested counters and drops what is not a number", () => {
  assert.deepEqual(
    addUsage(
      { prompt_tokens_details: { cached_tokens: 3 }, model: "x", total_tokens: 1 },
      { prompt_tokens_details: { cached_tokens: 4 }, total_tokens: 2 },
    ),
    { prompt_tokens_details: { cached_tokens: 7 }, total_tokens: 3 },
  );
});

Deno.test("addUsage() keeps the left side's key order, then the right side's own keys, whatever their names", () => {
  const sum = addUsage({ b: 1, a: 2 }, { c: 3, a: 1, toString: 4, constructor: 5 });
  assert.deepEqual(Object.keys(sum as object), ["b", "a", "c", "toString", "constructor"]);
  assert.deepEqual(sum, { b: 1, a: 3, c: 3, toString: 4, constructor: 5 });
  // The same names on the left side only, where the right side's prototype has them.
  assert.deepEqual(addUsage({ toString: 4, constructor: 5, b: 1 }, { a: 1 }), {
    toString: 4,
    constructor: 5,
    b: 1,
    a: 1,
  });
});
