import assert from "node:assert/strict";
import { ID_CHARS_MAX, idProblem, isKey, isRunId, isSignalName } from "./ids.ts";

Deno.test("the identifier rule takes well-formed text of any script as it is", async (t) => {
  const taken: [string, string][] = [
    ["a UUID", crypto.randomUUID()],
    ["spaces inside and around", " a b "],
    ["an emoji (a surrogate pair)", "msg-\u{1F600}"],
    ["the last code point", "x\u{10FFFF}"],
    ["a noncharacter", "x\uFFFF"],
    ["a composed accent", "caf\u00e9"],
    ["a combining accent", "cafe\u0301"],
    ["a right-to-left override (shown escaped, not refused)", "ACCT-\u202e9876"],
    ["a zero-width joiner", "\u{1F469}\u200d\u{1F4BB}"],
    [`${ID_CHARS_MAX} characters`, "a".repeat(ID_CHARS_MAX)],
  ];
  for (const [what, value] of taken) {
    await t.step(what, () => assert.equal(idProblem(value), undefined));
  }
});

Deno.test("the identifier rule refuses what the database refuses or changes, controls, and U+FFFD, saying where", async (t) => {
  const refused: [string, unknown, RegExp][] = [
    ["a number", 5, /^it is a number, not a text$/],
    ["null", null, /^it is null, not a text$/],
    ["an array", ["a"], /^it is an array, not a text$/],
    ["empty", "", /^it is empty$/],
    ["one character too long", "a".repeat(ID_CHARS_MAX + 1), /^it is 201 characters long, more than 200$/],
    [
      "a lone high surrogate",
      "id-\ud800",
      /lone surrogate \(\\ud800\) at index 3, which the database stores as U\+FFFD/,
    ],
    ["another lone high surrogate", "id-\udbff", /lone surrogate \(\\udbff\) at index 3/],
    ["a lone low surrogate after a pair", "\u{1F600}\udc00", /lone surrogate \(\\udc00\) at index 2/],
    ["a pair in the wrong order", "\udc00\ud800", /lone surrogate \(\\udc00\) at index 0/],
    ["a NUL", "a\u0000b", /^it holds a NUL character \(\\u0000\) at index 1$/],
    ["a newline", "a\nb", /control character \(\\u000a\) at index 1/],
    ["an escape", "\u001b]0;x", /control character \(\\u001b\) at index 0/],
    ["DEL", "a\u007f", /control character \(\\u007f\)/],
    ["a C1 control", "a\u009b31m", /control character \(\\u009b\)/],
    ["U+FFFD", "id-\ufffd", /U\+FFFD at index 3, the mark a decoding leaves for bytes that were not UTF-8/],
  ];
  for (const [what, value, reason] of refused) {
    await t.step(what, () => assert.match(idProblem(value) ?? "(taken)", reason));
  }
});

Deno.test("run ids, keys and signal names have their narrower shapes, which the rule implies", async (t) => {
  await t.step("run ids", () => {
    for (const id of ["a", "demo-1", "A.b_c-9", "nightly@20261206T090000Z", "x".repeat(64)]) {
      assert.ok(isRunId(id), id);
    }
    for (const id of ["", "-a", "@a", "a b", "x".repeat(65), "a\u0000b", "id-\ud800", "a:0", 5]) {
      assert.ok(!isRunId(id), JSON.stringify(id));
    }
  });
  await t.step("keys", () => {
    for (const key of ["demo:0", "demo.3:12", "nightly@20261206T090000Z:1", `${"x".repeat(64)}:2147483647`]) {
      assert.ok(isKey(key), key);
    }
    for (
      const key of ["demo", "demo:", "demo:01", "demo:-1", ":0", "a b:0", "a\u0000:0", "a:0\u202e", "a:0:1"]
    ) {
      assert.ok(!isKey(key), JSON.stringify(key));
    }
  });
  await t.step("signal names", () => {
    for (const name of ["paid", "payment-received", "ci.finished", "Order:42_done", "x".repeat(128)]) {
      assert.ok(isSignalName(name), name);
    }
    for (const name of ["", "-paid", "paid now", "x".repeat(129), "a\u0000b", "pay\u00e9", "a/b", 7]) {
      assert.ok(!isSignalName(name), JSON.stringify(name));
    }
  });
  await t.step("anything a shape takes passes the rule", () => {
    for (const id of ["demo-1", "x".repeat(64), `${"x".repeat(64)}:2147483647`, "ci.finished:x".repeat(9)]) {
      assert.equal(idProblem(id), undefined);
    }
  });
});
