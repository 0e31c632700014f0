/**
 * Logs that tools read: every line a real run prints (a crash, the restart,
 * the done) is strict logfmt with `ts`, `level` and `event` first, and the
 * same run with LOG_FORMAT=json prints one JSON object per line with the same
 * names.
 */

import assert from "node:assert/strict";
import { parseLogfmt, runWorkerToEnd } from "../harness/procs.ts";
import { seedDataDir } from "./_pg.ts";

Deno.test("parseLogfmt() is strict: single spaces, quoted values with JSON escapes, no stray text", () => {
  assert.deepEqual(parseLogfmt('ts=1 level=info event=x msg="a \\"b\\" c=d"'), {
    ts: "1",
    level: "info",
    event: "x",
    msg: 'a "b" c=d',
  });
  for (const bad of ["a=b  c=d", 'a="open', "a=b c", "a=b ", "!!! CRASH_AT=x", "a=b a=c", 'a=b"c']) {
    assert.equal(parseLogfmt(bad), undefined, bad);
  }
});

Deno.test("every line of a real run, its crash and its restart, parses as strict logfmt", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-logfmt-" });
  await seedDataDir(dir);
  try {
    const env = { DATA_DIR: dir, RUN_ID: "logfmt", GOAL: 'Provision "a=b" things\nplease' };
    const crashed = await runWorkerToEnd({ ...env, CRASH_AT: "after_call" });
    assert.equal(crashed.code, 137, crashed.lines.join("\n"));
    const done = await runWorkerToEnd(env);
    assert.equal(done.code, 0, done.lines.join("\n"));
    const lines = [...crashed.lines, ...done.lines].filter((l) => l !== "");
    const events = new Set<string>();
    for (const line of lines) {
      const fields = parseLogfmt(line);
      assert.ok(fields, `not strict logfmt: ${line}`);
      assert.deepEqual(Object.keys(fields).slice(0, 3), ["ts", "level", "event"], line);
      assert.ok(!Number.isNaN(Date.parse(fields.ts)), line);
      assert.match(fields.level, /^(debug|info|warn|error)$/, line);
      events.add(fields.event);
    }
    for (const event of ["claimed", "decided", "intent", "confirmed", "crash", "resent", "done"]) {
      assert.ok(events.has(event), `an event=${event} line: ${[...events].join(",")}`);
    }
    const crash = lines.map(parseLogfmt).find((f) => f?.event === "crash");
    assert.deepEqual(
      { point: crash?.point, seq: crash?.seq, action: crash?.action },
      { point: "after_call", seq: "0", action: "kill -9" },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("LOG_FORMAT=json prints one JSON object per line with ts, level and event", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-json-" });
  await seedDataDir(dir);
  try {
    const r = await runWorkerToEnd({ DATA_DIR: dir, RUN_ID: "json", LOG_FORMAT: "json" });
    assert.equal(r.code, 0, r.lines.join("\n"));
    for (const line of r.lines.filter((l) => l !== "")) {
      const o = JSON.parse(line);
      assert.ok(o.ts && o.level && o.event, line);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
