/**
 * Bad settings and secrets, through the real entry point: `deno run
 * cli/main.ts run` as a subprocess, its exit code and its whole output.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { openPostgres } from "../runtime/store/postgres.ts";
import { StoreError } from "../runtime/base/errors.ts";
import { CRASH_POINTS } from "../runtime/base/crashpoints.ts";
import { SCHEMA_VERSION } from "../runtime/store/migrate.ts";
import { freshSchema, pgIgnore, seedDataDir, TEST_DATABASE_URL } from "./_pg.ts";
import { closedPort } from "./_worker.ts";
import { runCliIsolated } from "../harness/procs.ts";

/** Runs the worker with only `env` (plus what Deno needs) and returns its exit code and output. */
const runMain = (env: Record<string, string>) => runCliIsolated(["run"], env);

Deno.test("bad settings exit 2 with one clear line per problem", async () => {
  const { code, out } = await runMain({
    CRASH_AT: "after_lunch",
    RUN_ID: "no spaces please",
    DATABASE_URL: "db:5432",
  });
  assert.equal(code, 2, out);
  const problems = out.split("\n").filter((l) => l.startsWith("  - "));
  assert.equal(problems.length, 3, out);
  const crash = problems.find((p) => p.includes("CRASH_AT"));
  assert.ok(crash, out);
  for (const point of CRASH_POINTS) assert.ok(crash.includes(point), `the CRASH_AT line lists ${point}`);
  assert.ok(problems.some((p) => /RUN_ID must be 1-64 characters.*"no spaces please"/.test(p)), out);
  assert.ok(problems.some((p) => /DATABASE_URL must be a URL like postgres:\/\//.test(p)), out);
  assert.match(out, /^agent-runtime: invalid settings:/);
});

Deno.test("a model URL without MODEL exits 2 naming MODEL, and malformed MODEL_HEADERS and MODEL_QUERY too", async (t) => {
  const dir = await Deno.makeTempDir();
  try {
    await t.step("MODEL_URL without MODEL", async () => {
      const { code, out } = await runMain({ MODEL_URL: "http://127.0.0.1:9/v1", DATA_DIR: dir });
      assert.equal(code, 2, out);
      assert.match(out, /MODEL is missing/);
      assert.ok(!out.includes("    at "), `no stack trace: ${out}`);
    });
    await t.step("MODEL_HEADERS and MODEL_QUERY that are neither JSON nor k=v", async () => {
      const { code, out } = await runMain({
        MODEL_URL: "http://127.0.0.1:9/v1",
        MODEL: "m",
        MODEL_HEADERS: '{"api-key": 42}',
        MODEL_QUERY: "api-version",
        DATA_DIR: dir,
      });
      assert.equal(code, 2, out);
      const problems = out.split("\n").filter((l) => l.startsWith("  - "));
      assert.ok(problems.some((p) => p.includes("MODEL_HEADERS")), out);
      assert.ok(problems.some((p) => p.includes("MODEL_QUERY")), out);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an unreachable database at the start of a run is named by host and port, never by password, and exits 7 (away), not 2", async () => {
  const port = closedPort();
  const password = "pw-Unreachable-7f3a";
  const apiKey = "sk-unreachable-91c2";
  const { code, out } = await runMain({
    DATABASE_URL: `postgres://app:${password}@127.0.0.1:${port}/app`,
    MODEL_API_KEY: apiKey,
  });
  assert.equal(code, 7, out);
  assert.match(out, /level=error event=store-unavailable code=DB_UNREACHABLE/);
  assert.match(
    out,
    /note="the database is away: nothing was started; run the same command again once it is back"/,
  );
  assert.ok(out.includes(`Cannot connect to PostgreSQL at 127.0.0.1:${port}/app`), out);
  assert.match(out, /ECONNREFUSED/);
  assert.ok(!out.includes(password) && !out.includes(apiKey), out);
});

Deno.test({
  name:
    "a database that does not exist is named with the command that creates it, exits 2, and the command works",
  ignore: pgIgnore("missing database"),
  async fn() {
    const name = `ar_missing_${crypto.randomUUID().slice(0, 8)}`;
    const url = new URL(TEST_DATABASE_URL!);
    url.password = "pw-Missing-5d1e";
    url.pathname = `/${name}`;
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const { code, out } = await runMain({ DATABASE_URL: url.href });
      assert.equal(code, 2, out);
      assert.match(out, /level=error event=store-unavailable code=DB_NOT_FOUND/);
      const target = `${url.hostname}:${url.port || "5432"}/${name}`;
      assert.ok(
        out.includes(`The database \\"${name}\\" does not exist on the PostgreSQL server at ${target}`),
        out,
      );
      assert.ok(out.includes("3D000 invalid_catalog_name"), out);
      assert.doesNotMatch(out, /server is running/, "not told to check a server that answered");
      assert.ok(!out.includes("pw-Missing-5d1e"), out);
      const command = /Create it \((createdb [^,]+), as a role/.exec(out)?.[1];
      assert.equal(
        command,
        `createdb -h ${url.hostname} -p ${url.port || "5432"} -U ${url.username} ${name}`,
      );
      // The advice works: after the command, the same URL opens.
      const made = await new Deno.Command("sh", { args: ["-c", command!], stdout: "null", stderr: "piped" })
        .output();
      assert.equal(made.code, 0, new TextDecoder().decode(made.stderr));
      const opened = await openPostgres(url.href);
      await opened.close();
    } finally {
      await admin.unsafe(`drop database if exists "${name}"`);
      await admin.end();
    }
  },
});

Deno.test("a server that accepts and never answers fails within the connect timeout, naming host and port", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn);
  })();
  try {
    const err = await openPostgres(`postgres://app:pw-silent@127.0.0.1:${port}/app`, { connectTimeoutS: 1 })
      .then(
        () => assert.fail("connected to a server that never answers"),
        (e) => e,
      );
    assert.ok(err instanceof StoreError);
    assert.equal(err.code, "DB_UNREACHABLE");
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}/app: CONNECT_TIMEOUT`));
    assert.ok(!err.message.includes("pw-silent"));
  } finally {
    listener.close();
    await accepting.catch(() => {});
    for (const conn of held) conn.close();
  }
});

Deno.test({
  name: "a database newer than the program is refused at start, naming both versions, and exits 2",
  ignore: pgIgnore("schema newer"),
  async fn() {
    const db = await freshSchema();
    try {
      await db.store.client.exec(
        `insert into schema_version (version, name) values (${SCHEMA_VERSION + 1}, 'from the future')`,
      );
      const { code, out } = await runMain({ DATABASE_URL: db.url });
      assert.equal(code, 2, out);
      assert.match(out, /level=error event=store-unavailable code=SCHEMA_NEWER/);
      assert.ok(
        out.includes(`schema version ${SCHEMA_VERSION + 1}, newer than this program's ${SCHEMA_VERSION}`),
        out,
      );
      assert.equal((await db.store.operators.listRuns({})).total, 0, "nothing was written");
    } finally {
      await db.drop();
    }
  },
});

Deno.test({
  name: "an empty schema gets its tables at start: the runtime migrates before it works",
  ignore: pgIgnore("schema migrated at start"),
  async fn() {
    const schema = `t_empty_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
    const admin = postgres(TEST_DATABASE_URL!, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create schema ${schema}`);
    try {
      const u = new URL(TEST_DATABASE_URL!);
      u.searchParams.set("search_path", schema);
      const dataDir = await Deno.makeTempDir();
      const { code, out } = await runMain({
        DATABASE_URL: u.toString(),
        RUN_ID: "migrated-at-start",
        DATA_DIR: dataDir,
      }).finally(() => Deno.remove(dataDir, { recursive: true }));
      assert.equal(code, 0, out);
      const rows = await admin.unsafe(`select version from ${schema}.schema_version`);
      assert.equal(rows.length, SCHEMA_VERSION);
      const runs = await admin.unsafe(`select status from ${schema}.runs where run_id = 'migrated-at-start'`);
      assert.equal(runs[0]?.status, "done");
    } finally {
      await admin.unsafe(`drop schema if exists ${schema} cascade`);
      await admin.end();
    }
  },
});

Deno.test({
  name: "a failing run never shows the database password or the model API key, in its output or its rows",
  ignore: pgIgnore("secrets"),
  async fn() {
    const password = "pw-Secret-4b8e";
    const apiKey = "sk-secret-0d5f-very-long";
    // A model that fails and echoes the request's headers (the key among them) in its error page.
    const model = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
      await req.body?.cancel();
      return new Response(`upstream error; you sent ${JSON.stringify([...req.headers])}`, { status: 503 });
    });
    const db = await freshSchema();
    try {
      const u = new URL(db.url);
      u.password = password; // the test server trusts local connections, so any password is accepted
      const { code, out } = await runMain({
        DATABASE_URL: u.toString(),
        MODEL_URL: `http://127.0.0.1:${model.addr.port}/v1`,
        MODEL: "mock-planner",
        MODEL_API_KEY: apiKey,
        RUN_ID: "secrets",
        // Asked again for a second, then given up: the failure is what this test reads.
        RETRY_HORIZON_S: "1",
      });
      assert.equal(code, 1, out);
      assert.match(
        out,
        /level=warn event=model-retry .*code=MODEL_HTTP .*HTTP 503: upstream error; you sent/,
      );
      assert.match(out, /Bearer \*\*\*/, "the echoed key is masked, not dropped");
      assert.match(out, /level=error event=failed run=secrets .*MODEL_GAVE_UP/);
      assert.ok(!out.includes(password), "the output shows the database password");
      assert.ok(!out.includes(apiKey), "the output shows the API key");
      const run = await db.store.reads.getRun("secrets");
      assert.equal(run?.status, "failed");
      const { journal } = await db.store.reads.loadHistory("secrets");
      const rows = JSON.stringify({ run, journal });
      assert.ok(!rows.includes(apiKey) && !rows.includes(password), "the rows hold a secret");
    } finally {
      await db.drop();
      await model.shutdown();
    }
  },
});

Deno.test({
  name:
    "a model API key holding a quote and a backslash is masked in every form it is printed in, text and json",
  ignore: pgIgnore("secrets with quotes"),
  async fn(t) {
    const apiKey = 'sk-quo"te\\slash-7c1e';
    // A model whose final answer quotes the key, as written and inside a JSON body it read somewhere.
    const answer = `I saw ${apiKey} and {"error":"bad key ${JSON.stringify(apiKey).slice(1, -1)}"}`;
    const model = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
      await req.body?.cancel();
      const message = { role: "assistant", content: answer };
      return Response.json({ choices: [{ index: 0, message, finish_reason: "stop" }] });
    });
    const db = await freshSchema();
    try {
      for (const format of ["text", "json"]) {
        await t.step(`LOG_FORMAT=${format}`, async () => {
          const { code, out } = await runMain({
            DATABASE_URL: db.url,
            MODEL_URL: `http://127.0.0.1:${model.addr.port}/v1`,
            MODEL: "m",
            MODEL_API_KEY: apiKey,
            RUN_ID: `quoted-${format}`,
            LOG_FORMAT: format,
          });
          assert.equal(code, 0, out);
          const done = out.split("\n").find((l) => /event=done |"event":"done"/.test(l));
          assert.match(done ?? "", /I saw \*\*\* and .*bad key \*\*\*/, out);
          assert.ok(!out.includes("sk-quo"), `a form of the key is printed:\n${out}`);
        });
      }
    } finally {
      await db.drop();
      await model.shutdown();
    }
  },
});

Deno.test("run picks one agent of a module of several by --agent-name (AGENT_NAME), and refuses without one or with a name not there", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agent-name-" });
  await seedDataDir(dir);
  try {
    const agent = new URL("./testdata/two_agents/agents.ts", import.meta.url).pathname;
    const base = { AGENT: agent, DATA_DIR: dir, GOAL: "hello" };
    const picked = await runCliIsolated(["run", "--agent-name", "second"], base);
    assert.equal(picked.code, 0, picked.out);
    assert.match(picked.out, /answered by second/);
    assert.doesNotMatch(picked.out, /answered by first/);

    const unnamed = await runMain(base);
    assert.equal(unnamed.code, 2, unnamed.out);
    assert.match(
      unnamed.out,
      /exports 2 agents \(first, second\); 'run' drives one run of one agent: name it with --agent-name/,
    );

    const missing = await runMain({ ...base, AGENT_NAME: "third" });
    assert.equal(missing.code, 2, missing.out);
    assert.match(missing.out, /AGENT_NAME: the module has no agent named "third": it has first, second/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
