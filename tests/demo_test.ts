/**
 * The README's promises, with real processes killed by SIGKILL: on the
 * embedded default (PGlite + in-process mocks persisted under DATA_DIR), and
 * on PostgreSQL with the mocks as HTTP servers.
 */
import assert from "node:assert/strict";
import { MockCloud } from "../mock/cloud.ts";
import { serveMocks } from "../mock/server.ts";
import { freshSchema, pgIgnore, seedDataDir } from "./_pg.ts";
import { parseLine, runCli, runWorkerToEnd } from "../harness/procs.ts";

type Ended = { code: number; lines: string[] };

/** The lines of a worker's output whose event is `event`. */
function events(r: Ended, event: string): string[] {
  return r.lines.filter((l) => parseLine(l)?.event === event);
}

function assertKilled(r: Ended, point: string): void {
  assert.equal(r.code, 137, `expected a kill -9 at ${point}:\n${r.lines.join("\n")}`);
  assert.ok(
    r.lines.some((l) => l.includes(` level=warn event=crash point=${point} seq=0 action="kill -9"`)),
    r.lines.join("\n"),
  );
}

function assertDone(r: Ended, run: string): void {
  assert.equal(r.code, 0, r.lines.join("\n"));
  assert.match(
    r.lines.filter((l) => l.trim() !== "").at(-1) ?? "",
    new RegExp(
      ` level=info event=done run=${run} tool_calls=3 llm_calls=4 output="Provisioned a server, a database and a DNS record."$`,
    ),
  );
}

/** after_decide: the restart replays the decision (no model call) and runs the tool once. */
async function proveAfterDecide(env: Record<string, string>, run: string, created: () => Promise<number>) {
  assertKilled(await runWorkerToEnd({ ...env, RUN_ID: run, CRASH_AT: "after_decide" }), "after_decide");
  const second = await runWorkerToEnd({ ...env, RUN_ID: run });
  assertDone(second, run);
  const replayed = events(second, "replayed").find((l) => l.includes("seq=0"));
  assert.ok(replayed, second.lines.join("\n"));
  assert.match(replayed, /tool=create_server args=/);
  assert.equal(JSON.parse(parseLine(replayed)?.args ?? "null").name, "srv-1");
  assert.match(replayed, /llm_calls=1$/);
  assert.equal(
    events(second, "deciding").some((l) => l.includes("seq=0")),
    false,
    "seq 0 is not decided again",
  );
  const confirmed0 = events(second, "confirmed").find((l) => l.includes("seq=0"));
  assert.match(confirmed0 ?? "", /remote=created/);
  assert.equal(await created(), 3);
}

/** after_call: the restart re-sends under the same key and the remote answers already_done. */
async function proveAfterCall(env: Record<string, string>, run: string, created: () => Promise<number>) {
  assertKilled(await runWorkerToEnd({ ...env, RUN_ID: run, CRASH_AT: "after_call" }), "after_call");
  assert.equal(await created(), 1, "the remote acted before the kill");
  const second = await runWorkerToEnd({ ...env, RUN_ID: run });
  assertDone(second, run);
  const confirmed0 = events(second, "confirmed").find((l) => l.includes("seq=0"));
  assert.match(confirmed0 ?? "", new RegExp(`key=${run}:0 result=i-\\d+ remote=already_done`));
  assert.match(events(second, "resent")[0] ?? "", /key=\S+:0 outcome=already_done/);
  assert.equal(await created(), 3, "one resource per key");
}

Deno.test("the embedded default survives kill -9 at after_decide and after_call", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-demo-" });
  await seedDataDir(dir);
  const env = { DATA_DIR: dir };
  const createdFor = (run: string) => async () => {
    const cloud = await MockCloud.open({ statePath: `${dir}/mock-cloud.json` });
    return cloud.created(`${run}:`).length;
  };
  try {
    await t.step(
      "a clean run ends done tool_calls=3 llm_calls=4, and a second start of it says it is already done",
      async () => {
        const first = await runWorkerToEnd(env);
        // No RUN_ID: a new run with a generated id (its keys cannot collide with another database's).
        const runId = /event=claimed run=(provision-[0-9a-f]{8}) /.exec(first.lines.join("\n"))?.[1];
        assert.ok(runId, first.lines.join("\n"));
        assertDone(first, runId);
        assert.match(
          events(first, "backends")[0] ?? "",
          /store=pglite:\S+ model=in-process-mock agent=provision/,
        );
        // Four steps (decisions: three calls, then the answer), three tool calls.
        const inspected = await runCli(["inspect", runId], env);
        assert.equal(inspected.code, 0, inspected.out);
        assert.match(inspected.out, /^total {2}steps=4 {2}tool_calls=3 {2}llm_calls=4 {2}tokens=\d+\+\d+$/m);
        const again = await runWorkerToEnd({ ...env, RUN_ID: runId });
        assert.equal(again.code, 0);
        assert.match(
          events(again, "already-done")[0] ?? "",
          new RegExp(`run=${runId} tool_calls=3 llm_calls=4`),
        );
        const other = await runWorkerToEnd(env);
        assert.ok(
          !other.lines.join("\n").includes(`run=${runId} `),
          "a second start without RUN_ID is a new run",
        );
      },
    );
    await t.step(
      "after_decide: replayed, not re-decided",
      () => proveAfterDecide(env, "demo", createdFor("demo")),
    );
    await t.step(
      "after_call: re-sent, already_done",
      () => proveAfterCall(env, "demo2", createdFor("demo2")),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "on PostgreSQL with the mocks over HTTP, kill -9 at after_decide and after_call loses nothing",
  ignore: pgIgnore("demo proofs on PostgreSQL"),
  fn: async (t) => {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const env = {
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
    };
    const createdFor = (run: string) => () => Promise.resolve(mocks.cloud.created(`${run}:`).length);
    try {
      await t.step("after_decide", () => proveAfterDecide(env, "pg-demo", createdFor("pg-demo")));
      await t.step("after_call", () => proveAfterCall(env, "pg-demo2", createdFor("pg-demo2")));
      assert.equal(mocks.model.calls("pg-demo"), 4);
      assert.equal(mocks.model.calls("pg-demo2"), 4);
    } finally {
      await mocks.close();
      await pg.drop();
    }
  },
});

Deno.test("the demo's parallel variant (MOCK_MODEL_PARALLEL=2): the server and the database in one answer, killed between their calls, resumed with each created once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "demo-par-" });
  await seedDataDir(dir);
  try {
    const env = { DATA_DIR: dir, MOCK_MODEL_PARALLEL: "2", RUN_ID: "par-demo" };
    // The database's call (seq 1) is killed after its request went out: the server's (seq 0) may be confirmed.
    const first = await runWorkerToEnd({ ...env, CRASH_AT: "after_call", CRASH_SEQ: "1" });
    assert.equal(first.code, 137, first.lines.join("\n"));
    const decided = events(first, "decided").find((l) => parseLine(l)?.seq === "0");
    assert.match(decided ?? "", /tools=create_server,create_database calls=2/, first.lines.join("\n"));
    const second = await runWorkerToEnd(env);
    assert.equal(second.code, 0, second.lines.join("\n"));
    assert.match(
      second.lines.filter((l) => l.trim() !== "").at(-1) ?? "",
      / event=done run=par-demo tool_calls=3 llm_calls=3 output="Provisioned a server, a database and a DNS record."$/,
    );
    // Three steps (the server and the database in one, the DNS record, the answer) over four seqs; three calls.
    const inspected = await runCli(["inspect", "par-demo"], { DATA_DIR: dir });
    assert.equal(inspected.code, 0, inspected.out);
    assert.match(inspected.out, /^total {2}steps=3 {2}tool_calls=3 {2}llm_calls=3 {2}tokens=\d+\+\d+$/m);
    assert.ok(
      events(second, "confirmed").some((l) => /key=par-demo:1 .*remote=already_done/.test(l)),
      second.lines.join("\n"),
    );
    const cloud = await MockCloud.open({ statePath: `${dir}/mock-cloud.json` });
    assert.deepEqual(cloud.created().map((r) => [r.key, r.kind]).sort(), [
      ["par-demo:0", "server"],
      ["par-demo:1", "database"],
      ["par-demo:2", "dns_record"],
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a MOCK_MODEL_PARALLEL that is not an integer from 1 to 16 stops the demo with one line and exit 2", async () => {
  const dir = await Deno.makeTempDir({ prefix: "demo-par-bad-" });
  await seedDataDir(dir);
  try {
    const r = await runWorkerToEnd({ DATA_DIR: dir, MOCK_MODEL_PARALLEL: "lots", RUN_ID: "par-bad" });
    assert.equal(r.code, 2, r.lines.join("\n"));
    assert.ok(
      r.lines.some((l) => /MOCK_MODEL_PARALLEL must be an integer from 1 to 16/.test(l)),
      r.lines.join("\n"),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
