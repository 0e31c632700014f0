import assert from "node:assert/strict";
import { ManualClock } from "./clock.ts";
import { arraySink, formatValue, LOG_VALUE_CHARS_MAX, Logger, secretForms } from "./log.ts";

const T0 = Date.UTC(2026, 10, 29, 12, 0, 0);

Deno.test("Logger writes strict logfmt: `ts=… level=… event=… key=value`", () => {
  const lines: string[] = [];
  const log = new Logger({ clock: new ManualClock(T0), sink: arraySink(lines) });
  log.info("done", { run: "run1", tool_calls: 3, llm_calls: 4 });
  log.warn("fenced", { run: "r", skipped: undefined });
  assert.deepEqual(lines, [
    "ts=2026-11-29T12:00:00.000Z level=info event=done run=run1 tool_calls=3 llm_calls=4",
    "ts=2026-11-29T12:00:00.000Z level=warn event=fenced run=r",
  ]);
});

Deno.test("formatValue() leaves plain tokens bare and quotes everything else, objects as JSON", async (t) => {
  const cases: [unknown, string][] = [
    ["srv-1", "srv-1"],
    ["has space", '"has space"'],
    ['quo"te', '"quo\\"te"'],
    ["a=b", '"a=b"'],
    ["back\\slash", '"back\\\\slash"'],
    ["two\nlines", '"two\\nlines"'],
    ["", '""'],
    [42, "42"],
    [true, "true"],
    [null, "null"],
    [{ name: "srv-1", spec: "small" }, '"{\\"name\\":\\"srv-1\\",\\"spec\\":\\"small\\"}"'],
    [[1, 2], "[1,2]"],
    [new Date(T0), "2026-11-29T12:00:00.000Z"],
  ];
  for (const [value, expected] of cases) {
    await t.step(`${JSON.stringify(value)} -> ${expected}`, () => assert.equal(formatValue(value), expected));
  }
});

Deno.test("a log line holds no DEL, C1, bidi or invisible character, in text and in json format", () => {
  const hostile = "ok\u007f\u009b2J\u202e1234\u200b\u{e0041}";
  assert.equal(formatValue(hostile), String.raw`"ok\u007f\u009b2J\u202e1234\u200b\udb40\udc41"`);
  assert.equal(formatValue("\u202e"), String.raw`"\u202e"`, "never bare");
  assert.equal(formatValue({ to: "\u202e" }), String.raw`"{\"to\":\"\\u202e\"}"`);
  for (const format of ["text", "json"] as const) {
    const lines: string[] = [];
    const log = new Logger({
      clock: new ManualClock(T0),
      sink: arraySink(lines),
      format,
      secrets: ["k\u202ey"],
    });
    log.info("decided", { args: { to: hostile }, key: "k\u202ey" });
    assert.doesNotMatch(lines[0], /[\u007f-\u009f\u202e\u200b\u{e0041}]/u, format);
    assert.doesNotMatch(lines[0], /k\\u202ey/, `the secret's escaped form is masked too (${format})`);
    if (format === "json") assert.deepEqual(JSON.parse(lines[0]).args, { to: hostile });
  }
});

Deno.test("Logger in json format writes one parseable object per line", () => {
  const lines: string[] = [];
  const log = new Logger({ clock: new ManualClock(T0), sink: arraySink(lines), format: "json" });
  log.info("decided", { run: "demo", seq: 0, args: { name: "srv-1" } });
  assert.deepEqual(JSON.parse(lines[0]), {
    ts: "2026-11-29T12:00:00.000Z",
    level: "INFO",
    event: "decided",
    run: "demo",
    seq: 0,
    args: { name: "srv-1" },
  });
});

Deno.test("Logger masks every known secret, in fields and in raw lines", () => {
  const lines: string[] = [];
  const log = new Logger({ clock: new ManualClock(T0), sink: arraySink(lines), secrets: ["hunter2", ""] });
  log.error("store-unavailable", { error: "auth failed for postgres://u:hunter2@db/x" });
  log.raw("key hunter2");
  assert.equal(lines.some((l) => l.includes("hunter2")), false);
  assert.match(lines[0], /u:\*\*\*@db/);
  assert.equal(lines[1], 'ts=2026-11-29T12:00:00.000Z level=warn event=notice message="key ***"');
});

Deno.test("Logger.raw() keeps every line parseable in json format", () => {
  const lines: string[] = [];
  const log = new Logger({ clock: new ManualClock(T0), sink: arraySink(lines), format: "json" });
  log.raw("!!! CRASH_AT=after_call seq=0 -- kill -9");
  assert.deepEqual(JSON.parse(lines[0]), {
    ts: "2026-11-29T12:00:00.000Z",
    level: "WARN",
    event: "notice",
    message: "!!! CRASH_AT=after_call seq=0 -- kill -9",
  });
});

Deno.test("Logger masks a secret holding a quote or a backslash in every form it can be printed in, text and json", async (t) => {
  for (const secret of ['sk-quo"te', "sk-back\\slash", 'sk-all"\\\n\t']) {
    const escaped = JSON.stringify(secret).slice(1, -1);
    for (const format of ["text", "json"] as const) {
      await t.step(`${JSON.stringify(secret)} in ${format} lines`, () => {
        const lines: string[] = [];
        const log = new Logger({
          clock: new ManualClock(T0),
          sink: arraySink(lines),
          format,
          secrets: [secret],
        });
        log.info("as-is", { key: secret });
        // A server's JSON error body echoing the key, as a message, inside an object, and inside a body in a body.
        log.warn("echoed", { error: `HTTP 401: {"error":"bad key ${escaped}"}` });
        log.warn("in-object", { args: { key: secret, said: `bad key ${escaped}` } });
        log.warn("nested", {
          body: JSON.stringify({ error: JSON.stringify({ error: `bad key ${secret}` }) }),
        });
        log.info("in-array", { keys: [secret, { k: [secret] }] });
        log.info("as-name", { [secret]: 1 });
        log.raw(`notice ${secret} and ${escaped}`);
        assert.equal(lines.length, 7);
        for (const line of lines) {
          assert.ok(!line.includes("sk-"), `a form of the secret is printed: ${line}`);
          assert.match(line, /\*\*\*/);
          if (format === "json") JSON.parse(line);
        }
      });
    }
  }
});

Deno.test("secretForms() gives the secret as written and escaped up to three times, one form when nothing escapes", () => {
  assert.deepEqual(secretForms("sk-plain"), ["sk-plain"]);
  const forms = secretForms('a"b');
  assert.deepEqual(forms, [String.raw`a\\\\\\\"b`, String.raw`a\\\"b`, String.raw`a\"b`, 'a"b']);
  // Each is the one before it inside a JSON string.
  for (let i = forms.length - 1; i > 0; i--) assert.equal(JSON.stringify(forms[i]), `"${forms[i - 1]}"`);
});

Deno.test("a field longer than LOG_VALUE_CHARS_MAX is cut, saying how long it was, in text and in JSON", async (t) => {
  const long = "x".repeat(LOG_VALUE_CHARS_MAX * 3);
  for (const format of ["text", "json"] as const) {
    await t.step(format, () => {
      const lines: string[] = [];
      const log = new Logger({ clock: new ManualClock(), sink: arraySink(lines), format });
      log.info("confirmed", { result: long, args: { blob: long }, small: { a: 1 } });
      assert.equal(lines.length, 1);
      assert.ok(lines[0].length < LOG_VALUE_CHARS_MAX * 3, `${lines[0].length} characters`);
      assert.match(lines[0], /\.\.\. \(24576 characters in all, cut\)/);
      assert.match(lines[0], /\.\.\. \(24587 characters in all, cut\)/, "an object is cut as its JSON");
      assert.match(lines[0], format === "text" ? /small="\{\\"a\\":1\}"/ : /"small":\{"a":1\}/);
    });
  }
});

Deno.test("a logger with a flush calls it after each WARN and ERROR line and on flush(), never after INFO", () => {
  const lines: string[] = [];
  const flushed: number[] = [];
  const log = new Logger({
    clock: new ManualClock(T0),
    sink: arraySink(lines),
    flush: () => flushed.push(lines.length),
  });
  log.info("claimed", { run: "r" });
  log.info("deciding", { run: "r" });
  assert.deepEqual(flushed, []);
  log.warn("crash", { point: "after-intent" });
  log.error("failed", { run: "r" });
  log.info("done", { run: "r" });
  log.flush();
  assert.deepEqual(flushed, [3, 4, 5]);
});
