import assert from "node:assert/strict";
import {
  MAX_JSON_BYTES,
  MAX_JSON_DEPTH,
  storableJson,
  toStorable,
  ValueUnstorableError,
} from "./storable.ts";

const nested = (levels: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
};

Deno.test("toStorable() refuses each kind of value jsonb would refuse or change, saying what it found", async (t) => {
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  const cases: [string, unknown, string, RegExp][] = [
    ["a cycle", cycle, "not_json", /circular/],
    ["a BigInt", { n: 1n }, "not_json", /BigInt/],
    ["a function alone", () => 1, "not_json", /a function/],
    ["NaN", { n: NaN }, "changed", /the number NaN \(at key "n"\), which JSON writes as null/],
    ["Infinity from toJSON", { toJSON: () => [Infinity] }, "changed", /Infinity/],
    ["a Map", { m: new Map() }, "changed", /a Map .* as \{\}/],
    ["a lone surrogate", { to: "ACCT-\ud800" }, "lone_surrogate", /\\ud800/],
    ["a lone surrogate in a key", { ["k\udc00"]: 1 }, "lone_surrogate", /\\udc00/],
    ["a NUL", "a\u0000b", "nul", /NUL/],
    ["nesting one level too deep", nested(MAX_JSON_DEPTH + 1), "too_deep", /deeper than 1000/],
    ["one byte too many", "x".repeat(MAX_JSON_BYTES - 1), "too_large", /67108865 bytes/],
  ];
  for (const [name, value, kind, reason] of cases) {
    await t.step(name, () => {
      const r = toStorable(value);
      assert.equal(r.ok, false);
      if (r.ok) return;
      assert.equal(r.kind, kind);
      assert.match(r.reason, reason);
    });
  }
});

Deno.test("toStorable() keeps what JSON writes by the value's own rules, and gives back the value as read back", () => {
  const r = toStorable({ at: new Date(0), u: undefined, z: -0, s: "😀 מרחב", list: [1, null] });
  assert.ok(r.ok);
  assert.deepEqual(r.value, { at: "1970-01-01T00:00:00.000Z", z: 0, s: "😀 מרחב", list: [1, null] });
  assert.ok(Object.is((r.value as { z: number }).z, 0));
  assert.equal(r.json, JSON.stringify(r.value));
  assert.ok(toStorable(nested(MAX_JSON_DEPTH)).ok, "the deepest nesting allowed is stored");
  assert.ok(toStorable(undefined).ok, "undefined is stored as null");
});

Deno.test("toStorable() writes NUL and lone surrogates out as their escapes when asked, and only real ones", () => {
  const r = toStorable({ a: "x\u0000y", ["k\ud800"]: "\udfff", pair: "😀" }, { writeOut: true });
  assert.ok(r.ok);
  assert.deepEqual(r.value, { a: "x\\u0000y", ["k\\ud800"]: "\\udfff", pair: "😀" });
  // Text that only looks like an escape (a backslash before it) is text, stored as it is.
  const text = toStorable({ t: "\\u0000 and \\ud800 and \\\\\u0000" }, { writeOut: true });
  assert.ok(text.ok);
  assert.deepEqual(text.value, { t: "\\u0000 and \\ud800 and \\\\\\u0000" });
  assert.equal(toStorable({ t: "\\u0000 and \\ud800" }).ok, true, "not refused either");
});

Deno.test("toStorable() counts nesting outside strings only", () => {
  const brackets = "[".repeat(MAX_JSON_DEPTH * 3);
  assert.ok(toStorable({ s: brackets, q: 'a "quoted" \\ end' }).ok);
});

Deno.test("storableJson() names the value and what it holds", () => {
  assert.throws(
    () => storableJson({ n: NaN }, "tool result"),
    (e: ValueUnstorableError) =>
      e.code === "VALUE_UNSTORABLE" && e.kind === "changed" &&
      /^The tool result cannot be stored: it holds the number NaN/.test(e.message),
  );
});
