import assert from "node:assert/strict";
import { commandFlags, loadSettings } from "./config.ts";
import { parseHostsUrl, redactUrl, urlPassword, urlPasswordForms } from "../base/urls.ts";
import { describeTarget } from "../store/postgres.ts";
import { CRASH_POINTS } from "../base/crashpoints.ts";
import { ConfigError } from "../base/errors.ts";

/** The problems `loadSettings` reports for `env` (and `args`). */
function problems(env: Record<string, string>, args: string[] = []): string[] {
  try {
    loadSettings(args, env);
  } catch (err) {
    assert.ok(err instanceof ConfigError);
    assert.equal(err.code, "CONFIG_INVALID");
    return err.problems;
  }
  assert.fail(`settings ${JSON.stringify(env)} ${args.join(" ")} were accepted`);
}

Deno.test("loadSettings() gives the documented defaults for an empty environment", () => {
  const s = loadSettings([], {}, { hostname: "box", pid: 42 });
  assert.equal(s.runId, undefined, "no RUN_ID: a new run with a generated id");
  assert.equal(s.databaseUrl, undefined);
  assert.equal(s.dataDir, ".data");
  assert.equal(s.maxSteps, undefined, "the agent's own maxSteps applies");
  assert.equal(s.worker, "box:42");
  assert.equal(s.heartbeatMs, 3_000);
  assert.equal(s.leaseMs, 12_000);
  assert.equal(s.crash.crashAt, undefined);
  assert.equal(s.logFormat, "text");
});

Deno.test("loadSettings() lets a flag win over the environment", () => {
  const s = loadSettings(["--run-id", "from-flag", "--crash-at", "after_call"], {
    RUN_ID: "from-env",
    CRASH_AT: "before_decide",
  });
  assert.equal(s.runId, "from-flag");
  assert.equal(s.crash.crashAt, "after_call");
});

Deno.test("loadSettings() accepts every crash point by name", () => {
  for (const point of CRASH_POINTS) assert.equal(loadSettings([], { CRASH_AT: point }).crash.crashAt, point);
});

Deno.test("an unknown CRASH_AT is one problem that lists every valid point", () => {
  const found = problems({ CRASH_AT: "after_lunch" });
  assert.equal(found.length, 1);
  assert.match(found[0], /^CRASH_AT must name a crash point: current value is "after_lunch"/);
  for (const point of CRASH_POINTS) assert.ok(found[0].includes(point), `lists ${point}`);
});

Deno.test("an unknown STALL_AT is refused the same way", () => {
  assert.match(
    problems({ STALL_AT: "nap" })[0],
    /^STALL_AT must name a crash point.*Valid points: before_decide/,
  );
});

Deno.test("a malformed run id says what form is expected", async (t) => {
  for (const bad of ["has space", "-leading-dash", "a/b", "x".repeat(65), "ünïcode"]) {
    await t.step(JSON.stringify(bad.slice(0, 12)), () => {
      const [problem, ...rest] = problems({ RUN_ID: bad });
      assert.deepEqual(rest, []);
      assert.match(problem, /^RUN_ID must be 1-64 characters of letters, digits, '\.', '_', '-' or '@'/);
      assert.ok(problem.includes(JSON.stringify(bad)), "names the value seen");
    });
  }
});

Deno.test("a malformed DATABASE_URL says what form is expected", async (t) => {
  for (const bad of ["localhost:5432", "mysql://u@h/db", "postgres://", "not a url"]) {
    await t.step(bad, () => {
      const [problem, ...rest] = problems({ DATABASE_URL: bad });
      assert.deepEqual(rest, []);
      assert.match(
        problem,
        /^DATABASE_URL must be a URL like postgres:\/\/user:password@localhost:5432\/dbname/,
      );
    });
  }
});

Deno.test("a malformed DATABASE_URL is shown without its password", () => {
  const [problem] = problems({ DATABASE_URL: "postgres://app:hunter2@db.internal:port/app" });
  assert.ok(!problem.includes("hunter2"), problem);
  assert.match(problem, /postgres:\/\/app:\*\*\*@db\.internal:port\/app/);
});

Deno.test("every problem is reported at once, one sentence each", () => {
  const found = problems({
    RUN_ID: "bad id",
    CRASH_AT: "nope",
    MAX_STEPS: "0",
    HEARTBEAT_S: "abc",
    LOG_FORMAT: "xml",
    MODEL_URL: "ftp://x",
  });
  assert.equal(found.length, 6, found.join("\n"));
  for (const name of ["RUN_ID", "CRASH_AT", "MAX_STEPS", "HEARTBEAT_S", "LOG_FORMAT", "MODEL_URL"]) {
    assert.equal(found.filter((p) => p.startsWith(name)).length, 1, `one problem for ${name}`);
  }
});

Deno.test("a heartbeat as long as the lease is refused", () => {
  assert.match(problems({ HEARTBEAT_S: "12", LEASE_S: "12" })[0], /HEARTBEAT_S must be shorter than LEASE_S/);
});

Deno.test("an unknown flag or a stray argument is refused", () => {
  assert.match(problems({}, ["--runid", "x"])[0], /Known flags: --agent, --agent-name, --run-id/);
  assert.match(problems({}, ["demo"])[0], /Unexpected argument "demo"/);
});

// Regression: the fallback stopped at the first '@', so the tail of a password
// holding '@' was printed in the settings error.
Deno.test("redactUrl() hides a password holding '@' and ':' in a URL that does not parse", () => {
  const shown = redactUrl("postgres://u:p@ss:w@rd@127.0.0.1:x/db");
  assert.equal(shown, "postgres://u:***@127.0.0.1:x/db");
});

Deno.test("redactUrl() hides the password of a URL that parses, and leaves others alone", () => {
  assert.equal(redactUrl("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
  assert.equal(redactUrl("postgres://u@h:5432/db"), "postgres://u@h:5432/db");
});

Deno.test("urlPasswordForms() gives the password as written and decoded, for masking both", () => {
  assert.deepEqual(urlPasswordForms("postgres://u:p%40ss@h/db"), ["p%40ss", "p@ss"]);
  assert.deepEqual(urlPasswordForms("postgres://u:plain@h/db"), ["plain"]);
  assert.deepEqual(urlPasswordForms("postgres://u@h/db"), []);
  assert.deepEqual(urlPasswordForms(undefined), []);
  assert.equal(urlPassword("postgres://u:p%40ss@h/db"), "p@ss");
});

Deno.test("commandFlags: values, one line and exit 2 for a bad flag, the usage and exit 0 for --help", () => {
  const printed: string[] = [];
  const [log, error] = [console.log, console.error];
  console.log = (...a: unknown[]) => printed.push(`out: ${a.join(" ")}`);
  console.error = (...a: unknown[]) => printed.push(`err: ${a.join(" ")}`);
  const options = {
    runs: { type: "string", default: "2" },
    verbose: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  } as const;
  try {
    const ok = commandFlags("tool", "usage text", ["--verbose"], options);
    assert.ok(!("exit" in ok));
    assert.equal(ok.values.runs, "2");
    assert.equal(ok.values.verbose, true);
    assert.deepEqual(printed, []);

    assert.deepEqual(commandFlags("tool", "usage text", ["--nope"], options), { exit: 2 });
    assert.deepEqual(commandFlags("tool", "usage text", ["--runs"], options), { exit: 2 });
    assert.deepEqual(commandFlags("tool", "usage text", ["extra"], options), { exit: 2 });
    assert.deepEqual(commandFlags("tool", "usage text", ["-h"], options), { exit: 0 });
  } finally {
    [console.log, console.error] = [log, error];
  }
  assert.deepEqual(printed.slice(0, 1), [
    "err: tool: unknown flag '--nope'. 'deno task tool --help' lists the flags",
  ]);
  assert.match(printed[1], /^err: tool: .*--runs.*'deno task tool --help' lists the flags$/);
  assert.match(printed[2], /^err: tool: .*extra.*'deno task tool --help' lists the flags$/);
  assert.deepEqual(printed.slice(3), ["out: usage text"]);
});

Deno.test("TAKE_SHARE is fair by default, all on request, and anything else is refused naming both", () => {
  assert.equal(loadSettings([], {}).takeShare, "fair");
  assert.equal(loadSettings(["--take-share", "all"], {}).takeShare, "all");
  assert.equal(loadSettings([], { TAKE_SHARE: "fair" }).takeShare, "fair");
  assert.deepEqual(problems({ TAKE_SHARE: "half" }), [
    'TAKE_SHARE must be "fair" (each poll takes no more than its share among the live workers) or "all" ' +
    '(every free slot): current value is "half"',
  ]);
});

Deno.test("a database URL naming a primary and its standbys is accepted, its password hidden", () => {
  const url = "postgres://u:s%40cret@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write";
  assert.equal(loadSettings([], { DATABASE_URL: url }).databaseUrl, url);
  assert.equal(
    redactUrl(url),
    "postgres://u:***@10.0.0.1:5432,10.0.0.2:5433/db?target_session_attrs=read-write",
  );
  assert.deepEqual(urlPasswordForms(url), ["s%40cret", "s@cret"]);
  assert.deepEqual(parseHostsUrl(url).hosts, ["10.0.0.1:5432", "10.0.0.2:5433"]);
  assert.equal(describeTarget(url), "10.0.0.1:5432,10.0.0.2:5433/db");
  assert.equal(describeTarget("postgres://u@h1,h2:6000/db"), "h1:5432,h2:6000/db");
});

Deno.test("a host list with an empty or malformed host is refused, naming DATABASE_URL", () => {
  for (const url of ["postgres://u@h1:5432,/db", "postgres://u@h1,h2:port/db", "postgres://u@h1,h 2/db"]) {
    assert.match(problems({ DATABASE_URL: url })[0] ?? "", /DATABASE_URL must be a URL like/, url);
    assert.throws(() => parseHostsUrl(url), TypeError, url);
  }
});
