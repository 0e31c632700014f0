import assert from "node:assert/strict";
import {
  displayJson,
  displayJsonParts,
  displayParts,
  displayScript,
  displayText,
  hiddenIn,
} from "./display.ts";

const FORBIDDEN =
  // deno-lint-ignore no-control-regex
  /[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufe00-\ufe0f\u3164]/u;

/** [what, input, shown, shown with newlines kept] */
const CASES: [string, string, string, string?][] = [
  ["plain text is shown as it is", "Provisioned web-1.", "Provisioned web-1."],
  ["letters of every script and emoji are shown", "Grüße, שלום, 你好 🙂", "Grüße, שלום, 你好 🙂"],
  ["an accent on its letter is shown", "e\u0301te\u0301", "e\u0301te\u0301"],
  [
    "a right-to-left override cannot reorder an account number",
    "ACCT-\u202E9876\u202C",
    "ACCT-\\u202e9876\\u202c",
  ],
  ["bidi isolates and marks", "a\u2066b\u2069\u200e\u200f\u061c", "a\\u2066b\\u2069\\u200e\\u200f\\u061c"],
  [
    "zero-width space, joiners, word joiner, BOM",
    "1\u200b2\u200c3\u200d4\u20605\ufeff",
    "1\\u200b2\\u200c3\\u200d4\\u20605\\ufeff",
  ],
  ["the soft hyphen", "co\u00adop", "co\\u00adop"],
  ["an OSC 52 clipboard write", "ok\u001b]52;c;ZWNobw==\u0007", "ok\\u001b]52;c;ZWNobw==\\u0007"],
  ["a carriage return and erase-line", "real\r\u001b[2K  fake", "real\\r\\u001b[2K  fake"],
  ["hidden text (SGR 8)", "quota\u001b[8m hidden \u001b[0m", "quota\\u001b[8m hidden \\u001b[0m"],
  [
    "DEL and the C1 controls (CSI, OSC, NEL)",
    "a\u007fb\u009b31mc\u009d0;t\u0085",
    "a\\u007fb\\u009b31mc\\u009d0;t\\u0085",
  ],
  ["NUL, tab, backspace, form feed", "a\u0000b\tc\bd\fe", "a\\u0000b\\tc\\bd\\fe"],
  ["a newline is escaped on one line, kept on several", "one\ntwo", "one\\ntwo", "one\ntwo"],
  ["a carriage return is escaped even on several lines", "one\r\ntwo", "one\\r\\ntwo", "one\\r\ntwo"],
  ["the line and paragraph separators", "a\u2028b\u2029c", "a\\u2028b\\u2029c", "a\\u2028b\\u2029c"],
  ["variation selectors, in both planes", "A\ufe0fB\u{e0100}", "A\\ufe0fB\\udb40\\udd00"],
  ["a variation selector on an emoji", "\u2764\ufe0f", "\u2764\\ufe0f"],
  ["tag characters spelling hidden ASCII", "hi\u{e0041}\u{e0042}", "hi\\udb40\\udc41\\udb40\\udc42"],
  ["the Hangul fillers", "\u115f\u1160\u3164\uffa0x", "\\u115f\\u1160\\u3164\\uffa0x"],
  ["a combining mark at the start", "\u0301abc", "\\u0301abc"],
  ["a combining mark on a quote or a space", '"\u0336 \u20dd', '"\\u0336 \\u20dd'],
  ["a combining mark on a hidden filler", "\u3164\u0301", "\\u3164\\u0301"],
  ["a combining grapheme joiner on a letter", "a\u034fb", "a\\u034fb"],
  ["a lone surrogate", "x\ud800y\udc00", "x\\ud800y\\udc00"],
  ["interlinear annotation and other Cf", "\ufff9a\ufffa\ufffb\u180e", "\\ufff9a\\ufffa\\ufffb\\u180e"],
  ["a literal backslash-u is left as it is", String.raw`C:\u202e`, String.raw`C:\u202e`],
];

Deno.test("displayText() escapes every hidden code point and shows everything else as it is", async (t) => {
  for (const [what, input, shown, multi] of CASES) {
    await t.step(what, () => {
      assert.equal(displayText(input), shown);
      assert.equal(displayText(input, { newlines: true }), multi ?? shown);
      assert.ok(!FORBIDDEN.test(displayText(input)), "nothing hidden is left");
    });
  }
});

Deno.test("displayParts() alternates shown and escaped text, and joins back to displayText()", () => {
  assert.deepEqual(displayParts("ACCT-\u202E9876\u202C"), ["ACCT-", "\\u202e", "9876", "\\u202c", ""]);
  assert.deepEqual(displayParts("\u200b\u200bx"), ["", "\\u200b\\u200b", "x"]);
  assert.deepEqual(displayParts("plain"), ["plain"]);
  for (const [, input] of CASES) assert.equal(displayParts(input).join(""), displayText(input));
});

Deno.test("displayJson() is valid JSON for the same value, with nothing hidden", () => {
  const values = [
    { to: "ACCT-\u202E9876\u202C", cents: 100 },
    { ["k\u200b\u0301"]: ["\u001b]0;t\u0007", "\u009b", "\ud800", "\u{e0041}"] },
    "x\u2028y",
    [1, null, true, "\ufe0f"],
  ];
  for (const v of values) {
    const shown = displayJson(v);
    assert.deepEqual(JSON.parse(shown), v);
    assert.ok(!FORBIDDEN.test(shown), shown);
  }
  assert.equal(displayJson({ to: "ACCT-\u202E9876\u202C" }), String.raw`{"to":"ACCT-\u202e9876\u202c"}`);
  assert.equal(displayJson(undefined), "null");
});

Deno.test("hiddenIn() counts the hidden code points in a value's strings and keys, and names each kind once", () => {
  assert.deepEqual(hiddenIn({ to: "ACCT-6789", cents: 100 }), { count: 0, escapes: [] });
  assert.deepEqual(hiddenIn({ to: "ACCT-\u202E9876\u202C" }), { count: 2, escapes: ["\\u202e", "\\u202c"] });
  assert.deepEqual(hiddenIn({ ["a\u200b"]: ["\u001b", { b: "x\ny\nz" }] }), {
    count: 4,
    escapes: ["\\u200b", "\\u001b", "\\n"],
  });
  assert.deepEqual(hiddenIn("\u{e0041}\u{e0042}").count, 2, "one per code point, not per UTF-16 unit");
  let deep: unknown = "\u202e";
  for (let i = 0; i < 100_000; i++) deep = [deep];
  assert.equal(hiddenIn(deep).count, 1, "a deeply nested value does not exhaust the stack");
});

Deno.test("the page's script is the same rule: it gives the same output on every case", () => {
  const scope: { agentDisplay?: Record<string, (...a: unknown[]) => unknown> } = {};
  new Function("globalThis", displayScript())(scope);
  const page = scope.agentDisplay!;
  for (const [, input] of CASES) {
    assert.deepEqual(page.displayParts(input), displayParts(input));
    assert.equal(page.displayText(input, { newlines: true }), displayText(input, { newlines: true }));
    assert.deepEqual(page.hiddenIn({ [input]: input }), hiddenIn({ [input]: input }));
  }
  assert.equal(page.displayJson({ to: "ACCT-\u202E9876" }), displayJson({ to: "ACCT-\u202E9876" }));
  for (const [, input] of CASES) {
    assert.deepEqual(page.displayJsonParts({ [input]: input }), displayJsonParts({ [input]: input }));
  }
});

Deno.test("random mixes of hostile code points never leave one unescaped, and JSON stays the same value", () => {
  const pool = [
    "a",
    "Z",
    "7",
    " ",
    "\n",
    "\u0301",
    "\u202e",
    "\u2066",
    "\u200b",
    "\u001b",
    "\u0007",
    "\u009b",
    "\u007f",
    "\ufe0f",
    "\u{e0041}",
    "\u3164",
    "\u2028",
    "\ud800",
    "\\",
    '"',
    "é",
    "🙂",
  ];
  let seed = 0x2545f491;
  const next = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
  for (let i = 0; i < 2_000; i++) {
    let s = "";
    for (let n = next() % 12; n > 0; n--) s += pool[next() % pool.length];
    const shown = displayText(s);
    assert.ok(!FORBIDDEN.test(shown), `seed step ${i}: ${JSON.stringify(s)} -> ${JSON.stringify(shown)}`);
    assert.ok(!/^\p{M}/u.test(shown), `a mark cannot start the output: ${JSON.stringify(s)}`);
    assert.deepEqual(JSON.parse(displayJson(s)), s);
  }
});

Deno.test("displayJsonParts() marks JSON's own escapes of controls as hidden too, and joins to displayJson()", () => {
  const v = { a: "x\u001by\n\u202e", ["b\\u001b"]: 'q"\\' };
  const parts = displayJsonParts(v);
  assert.equal(parts.join(""), displayJson(v));
  assert.deepEqual(parts.filter((_, i) => i % 2 === 1), ["\\u001b", "\\n\\u202e"]);
  assert.ok(
    parts.filter((_, i) => i % 2 === 0).join("").includes('"b\\\\u001b"'),
    "a literal backslash-u is plain",
  );
  assert.deepEqual(displayJsonParts("\ud800"), ['"', "\\ud800", '"']);
});
