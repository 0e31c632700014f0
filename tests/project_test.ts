/**
 * A project of its own, outside this repository, as docs/project.md sets it
 * up: its deno.json is the page's block (the package through `links` to this
 * checkout, and two npm packages of its own, one of which this runtime never
 * uses), its agent module is the page's, its lockfile is written by
 * `deno install` there and then frozen. From its folder the page's commands
 * and the README's run as written: the demo, the project's agent, a crash
 * (the process dies by SIGKILL) and the resume, the other commands, and (on
 * PostgreSQL) the supervisor, whose workers import the agent module through
 * the project's config.
 *
 * Then the same project without `links`, the package downloaded from a
 * registry that serves the files `deno publish --dry-run` lists (Deno's
 * `JSR_URL`), as it will be once published: the package's modules are remote,
 * the page's files with them, and a supervisor's workers (and a compiled
 * entry) name the package as the project's frozen lockfile does,
 * `jsr:@agent-runtime/agent-runtime@0.1/cli`.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "../runtime/client/client.ts";
import { SETTING_NAMES } from "../runtime/settings/config.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { Store } from "../runtime/store/store.ts";
import { SUPERVISOR_SETTING_NAMES } from "../cli/supervise.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";
import { publishedFiles } from "./_published.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const PAGE = await Deno.readTextFile(join(ROOT, "docs/project.md"));
const README = await Deno.readTextFile(join(ROOT, "README.md"));
/** What the page's agent's tool returns for its span, `ms("2d")`: the project's own package at work. */
const TWO_DAYS_MS = 172800000;

/** The fenced blocks of a Markdown page: the info string (`ts ignore`) and the text. */
function fences(md: string): { info: string; text: string }[] {
  return [...md.matchAll(/^```([^\n]*)\n([\s\S]*?)^```$/gm)].map((m) => ({ info: m[1].trim(), text: m[2] }));
}

/** The one block whose info string is `info` (and, when given, whose text includes `having`). */
function fence(md: string, info: string, having = ""): string {
  const found = fences(md).filter((b) => b.info === info && b.text.includes(having));
  assert.equal(found.length, 1, `one \`\`\`${info} block${having ? ` with ${having}` : ""}`);
  return found[0].text;
}

/** The command lines of a `sh` block, as written (comments and all). */
function shLines(block: string): string[] {
  return block.split("\n").filter((l) => l.trim() !== "");
}

/** The line of `lines` that starts with `start` (there must be exactly one). */
function line(lines: string[], start: string): string {
  const found = lines.filter((l) => l.startsWith(start));
  assert.equal(found.length, 1, `one line starting ${JSON.stringify(start)} in:\n${lines.join("\n")}`);
  return found[0];
}

/**
 * This process's environment without agent-runtime's own settings (the test
 * runner's DATABASE_URL, CRASH_AT, ... must not leak into the project's
 * commands), plus `extra`.
 */
function projectEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env = Deno.env.toObject();
  const ours = [
    ...SETTING_NAMES,
    ...SUPERVISOR_SETTING_NAMES,
    "MOCK_MODEL_PARALLEL",
    "JSR_URL",
    "DENO_FUTURE",
  ];
  for (const name of ours) delete env[name];
  return { ...env, NO_COLOR: "1", ...extra };
}

interface Ran {
  code: number;
  /** stdout then stderr. */
  text: string;
}

/** Runs one command line as written, with `sh -c`, in the project's folder. */
async function sh(dir: string, commandLine: string, env: Record<string, string> = {}): Promise<Ran> {
  const out = await new Deno.Command("sh", {
    args: ["-c", commandLine],
    cwd: dir,
    clearEnv: true,
    env: projectEnv(env),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: out.code,
    text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
  };
}

/** A long-running command of the project's (the page, the supervisor), read as it prints. */
interface Running {
  /** Waits (at most `withinMs`) for stdout to match `re`; fails the test if it ends or times out first. */
  until(re: RegExp, withinMs?: number): Promise<RegExpExecArray>;
  /** SIGTERM (unless it has exited), then everything it printed and its exit status. */
  stop(): Promise<{ code: number; out: string; err: string }>;
}

/** Starts `deno <args>` (a task, as the page writes it) in the project's folder. */
function start(dir: string, args: string[], env: Record<string, string> = {}): Running {
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd: dir,
    clearEnv: true,
    env: projectEnv(env),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const err = new Response(child.stderr).text();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  return {
    async until(re, withinMs = 60_000) {
      // A bound on the wait, so a line that never comes fails the test (whose finally stops the child).
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<"late">((resolve) => timer = setTimeout(() => resolve("late"), withinMs));
      try {
        for (;;) {
          const m = re.exec(out);
          if (m) return m;
          const read = await Promise.race([reader.read(), late]);
          if (read === "late") assert.fail(`no line matching ${re} within ${withinMs} ms:\n${out}`);
          if (read.done) assert.fail(`deno ${args.join(" ")} ended before ${re}:\n${out}${await err}`);
          out += read.value;
        }
      } finally {
        clearTimeout(timer);
      }
    },
    async stop() {
      try {
        child.kill("SIGTERM");
      } catch (e) {
        if (!(e instanceof TypeError)) throw e; // it has exited already: its output says why
      }
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        out += value;
      }
      return { code: (await child.status).code, out, err: await err };
    },
  };
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/**
 * Builds the project of docs/project.md in a new temporary folder: the page's
 * deno.json with `links` pointing at this checkout (or, `published`, without
 * `links`, as once the package is on JSR), the page's agent module,
 * `deno install` (the page's first command) writing its lockfile, then the
 * lockfile frozen. Returns the folder and the lockfile's text.
 */
async function makeProject(
  opts: { published?: boolean; env?: Record<string, string> } = {},
): Promise<{ dir: string; lock: string }> {
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-project-" });
  assert.ok(!dir.startsWith(ROOT + "/"), `${dir} is outside ${ROOT}`);
  const config = JSON.parse(fence(PAGE, "json", '"tasks"'));
  assert.deepEqual(config.links, ["../agent-runtime"], "the page links a checkout beside the project");
  if (opts.published) delete config.links;
  else config.links = [ROOT];
  await Deno.writeTextFile(join(dir, "deno.json"), JSON.stringify(config, null, 2) + "\n");
  await Deno.writeTextFile(join(dir, "agent.ts"), fence(PAGE, "ts ignore", "defineAgent"));
  const install = await sh(dir, line(shLines(fence(PAGE, "sh", "deno install")), "deno install"), opts.env);
  assert.equal(install.code, 0, install.text);
  const installed = await Deno.readTextFile(join(dir, "deno.lock"));
  assert.match(installed, /"npm:ms@2\.1\.3"/, "the project's own package is in its own lockfile");
  if (!opts.published) {
    // From a checkout: what the library needs, and nothing of the tests', the benches' or the integrations'.
    // (From a registry, `deno install` takes every export path's packages: the commands' and the kit's too.)
    const npm = Object.keys(JSON.parse(installed).npm ?? {}).map((p) => p.replace(/@[^@]*$/, ""));
    for (const heavy of ["puppeteer-core", "@modelcontextprotocol/sdk", "hono", "ai", "openai"]) {
      assert.ok(
        !npm.includes(heavy),
        `deno install put ${heavy} in the project's lockfile: ${npm.join(", ")}`,
      );
    }
    assert.ok(npm.length <= 5, `the library's npm packages and the project's: ${npm.join(", ")}`);
  }
  // The commands' own packages, with their first use, before the lockfile is frozen.
  const first = line(shLines(fence(PAGE, "sh", "deno install")), "deno task run --help");
  const commands = await sh(dir, first, opts.env);
  assert.equal(commands.code, 0, commands.text);
  const lock = await Deno.readTextFile(join(dir, "deno.lock"));
  config.lock = { frozen: true };
  await Deno.writeTextFile(join(dir, "deno.json"), JSON.stringify(config, null, 2) + "\n");
  return { dir, lock };
}

/** `deno task ui --port 0`: the page's own files, fetched from it, are this checkout's. */
async function assertPageFiles(dir: string, env: Record<string, string> = {}): Promise<void> {
  const ui = start(dir, ["task", "ui", "--port", "0"], env);
  let stopped;
  try {
    const [, url] = await ui.until(/ui {2}url=(http:\/\/127\.0\.0\.1:\d+)\//);
    for (const name of ["index.html", "app.js", "style.css"]) {
      const res = await fetch(`${url}/${name === "index.html" ? "" : `static/${name}`}`);
      assert.equal(res.status, 200, name);
      assert.equal(await res.text(), await Deno.readTextFile(join(ROOT, "ui", "static", name)), name);
    }
  } finally {
    stopped = await ui.stop();
  }
  assert.equal(stopped.code, 0, stopped.out + stopped.err);
}

/**
 * The page's supervisor line on `databaseUrl`: its worker's command line names
 * `cli` and the project's config, and a run submitted with the page's line is
 * done by that worker, its tool's result the project's own package's answer.
 */
async function assertSupervised(
  dir: string,
  databaseUrl: string,
  cli: string,
  env: Record<string, string> = {},
): Promise<void> {
  const commands = shLines(fence(PAGE, "sh", "deno task supervise"));
  const withDb = { ...env, DATABASE_URL: databaseUrl };
  const client = new Client(new Store(await openPostgres(databaseUrl)));
  const sup = start(dir, line(commands, "deno task supervise").split(/\s+/).slice(1), {
    ...withDb,
    WORKERS: "1",
    POLL_S: "0.5",
  });
  let stopped;
  try {
    const [, pid] = await sup.until(/event=worker-started worker=\S+ pid=(\d+)/);
    if (Deno.build.os === "linux") {
      // Read until the kernel shows it: empty while the process is still being set up, or once it is gone.
      let argv: string[] = [];
      for (let i = 0; i < 40 && argv.length === 0; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 50));
        argv = (await Deno.readTextFile(`/proc/${pid}/cmdline`).catch(() => "")).split("\0").slice(0, -1);
      }
      assert.ok(argv.length > 0, `worker ${pid}'s command line never showed (it exited?)`);
      const at = argv.indexOf("--config");
      assert.deepEqual(argv.slice(at, at + 2), ["--config", join(dir, "deno.json")], argv.join(" "));
      assert.deepEqual(argv.slice(-2), [cli, "worker"], argv.join(" "));
    }
    await sup.until(/event=worker owner=\S+ agents=reminders /);
    const submit = await sh(dir, line(commands, "deno task submit --agent ./agent.ts --run-id s1"), withDb);
    assert.equal(submit.code, 0, submit.text);
    const done = await client.wait("s1", { timeoutMs: 60_000 });
    assert.equal(done.status, "done");
    assert.equal(done.output, "Saved the reminder.");
    const { effects } = await client.reads.inspect("s1");
    assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.result]), [
      ["s1:0", "confirmed", TWO_DAYS_MS],
    ]);
    const inspect = await sh(dir, line(commands, "deno task inspect s1"), withDb);
    assert.equal(inspect.code, 0, inspect.text);
    assert.match(inspect.text, /s1:0/);
  } finally {
    stopped = await sup.stop();
    await client.close();
  }
  assert.equal(stopped.code, 0, `SIGTERM stops the supervisor and its workers, exit 0:\n${stopped.out}`);
  assert.match(
    stopped.out,
    new RegExp(`event=confirmed run=s1 seq=0 key=s1:0 result=${TWO_DAYS_MS} remote=created`),
  );
}

/**
 * A registry holding one version of this package, as JSR serves it to Deno:
 * the package's versions, the version's manifest (each file's checksum) and
 * exports, and the files, exactly `files`. Served under a path of its own
 * (`http://127.0.0.1:PORT/<random>/`): Deno keeps what it downloads by URL
 * in a cache every checkout on the machine shares, and a port is used again
 * sooner or later, so without the path a run could be given the files an
 * earlier run (another checkout, another commit) served at that port.
 */
async function serveRegistry(files: string[]): Promise<{ url: string; close(): Promise<void> }> {
  const config = JSON.parse(await Deno.readTextFile(join(ROOT, "deno.json")));
  const [scope, name] = (config.name as string).slice(1).split("/");
  const version = config.version as string;
  const manifest: Record<string, { size: number; checksum: string }> = {};
  const bodies = new Map<string, Uint8Array<ArrayBuffer>>();
  for (const file of files) {
    const bytes = await Deno.readFile(join(ROOT, file));
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
    const hex = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
    manifest[`/${file}`] = { size: bytes.length, checksum: `sha256-${hex}` };
    bodies.set(file, bytes);
  }
  const root = `/${crypto.randomUUID()}/`;
  const base = `${root}@${scope}/${name}/`;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const path = new URL(req.url).pathname;
    if (path === `${base}meta.json`) {
      return Response.json({ scope, name, latest: version, versions: { [version]: {} } });
    }
    if (path === `${base}${version}_meta.json`) return Response.json({ manifest, exports: config.exports });
    const body = path.startsWith(`${base}${version}/`)
      ? bodies.get(path.slice(base.length + version.length + 1))
      : undefined;
    return body ? new Response(body) : new Response("not found", { status: 404 });
  });
  return { url: `http://127.0.0.1:${server.addr.port}${root}`, close: () => server.shutdown() };
}

Deno.test("the README's lines on a project of its own are the page's: the links, the import, the run task", () => {
  const config = JSON.parse(fence(PAGE, "json", '"tasks"'));
  const readme = README.replace(/\s+/g, " ");
  assert.ok(readme.includes(`"links": ${JSON.stringify(config.links)}`), "the README gives the page's links");
  assert.ok(
    readme.includes(`deno add ${config.imports["@agent-runtime/agent-runtime"].replace(/@[^@]*$/, "")}`),
  );
  assert.ok(readme.includes(`"run": "${config.tasks.run}"`), "the README gives the page's run task");
  assert.ok(readme.includes("[docs/project.md](docs/project.md)"));
  // The commands a project runs, each a task of the page's, all of one form.
  for (
    const name of ["run", "worker", "supervise", "submit", "runs", "inspect", "resolve", "ui", "migrate"]
  ) {
    assert.ok(name in config.tasks, `the page's tasks have ${name}`);
  }
  for (const name of ["fuzz", "compile", "settle", "approve", "deny", "cancel", "reopen", "prune"]) {
    assert.ok(name in config.tasks, `the page's tasks have ${name}`);
  }
  for (const [name, command] of Object.entries(config.tasks as Record<string, string>)) {
    assert.equal(command, `deno run -A --unstable-no-legacy-abort @agent-runtime/agent-runtime/cli ${name}`);
  }
});

Deno.test("a project of its own runs the demo, its own agent with its own npm package, a crash and every command from its folder", async (t) => {
  const { dir, lock } = await makeProject();
  const commands = shLines(fence(PAGE, "sh", "deno install"));
  try {
    // The fuzzer holds no files of the project's: it runs beside the rest.
    const fuzz = sh(dir, "deno task fuzz --schedules 3 --seed 1");

    await t.step("the demo, its data in the project's folder", async () => {
      const r = await sh(dir, line(commands, "deno task run  "));
      assert.equal(r.code, 0, r.text);
      assert.match(r.text, /event=done run=provision-[0-9a-f]{8} tool_calls=3 /);
      assert.ok(
        await exists(join(dir, ".data", "pglite")),
        "the embedded database is in the project's .data/",
      );
      assert.ok(await exists(join(dir, ".data", "mock-cloud.json")));
    });

    await t.step("the project's agent, importing an npm package the runtime does not use", async () => {
      const r = await sh(dir, line(commands, "deno task run --agent ./agent.ts --run-id r1"));
      assert.equal(r.code, 0, r.text);
      assert.match(
        r.text,
        new RegExp(`event=confirmed run=r1 seq=0 key=r1:0 result=${TWO_DAYS_MS} remote=created`),
      );
      assert.match(r.text, /event=done run=r1 tool_calls=1 .*output="Saved the reminder."/);
    });

    await t.step(
      "killed after the call, resumed: the call is re-sent under its key, one reminder per key",
      async () => {
        const crash = await sh(
          dir,
          line(commands, "CRASH_AT=after_call deno task run --agent ./agent.ts --run-id r2"),
        );
        assert.equal(crash.code, 128 + 9, `the run's process died by SIGKILL:\n${crash.text}`);
        assert.match(crash.text, /event=crash point=after_call seq=0 action="kill -9"/);
        assert.doesNotMatch(crash.text, /event=done/);
        const resume = await sh(dir, line(commands, "deno task run --agent ./agent.ts --run-id r2 "));
        assert.equal(resume.code, 0, resume.text);
        assert.match(resume.text, new RegExp(`key=r2:0 result=${TWO_DAYS_MS} remote=already_done`));
        assert.match(resume.text, /event=done run=r2 tool_calls=1 /);
        const saved = [];
        for await (const e of Deno.readDir(join(dir, ".data", "reminders"))) saved.push(e.name);
        assert.deepEqual(saved.sort(), ["r1_0.json", "r2_0.json"]);
      },
    );

    await t.step("the README's crash commands, as written", async () => {
      // The after_call crash is the project agent's above (r2); this is the README's own pair.
      const block = shLines(fence(README, "sh", "CRASH_AT=after_decide RUN_ID=demo"));
      assert.equal(block.length, 2, block.join("\n"));
      const crash = await sh(dir, block[0]);
      assert.equal(crash.code, 128 + 9, crash.text);
      const resume = await sh(dir, block[1]);
      assert.equal(resume.code, 0, resume.text);
      assert.match(
        resume.text,
        /event=replayed run=demo seq=0 tool=create_server/,
        "the decision is replayed",
      );
      assert.match(resume.text, /key=demo:0 tool=create_server attempt=1/, "and its tool called once");
      assert.match(resume.text, /event=done run=demo tool_calls=3 /);
      const cloud = JSON.parse(await Deno.readTextFile(join(dir, ".data", "mock-cloud.json"))) as {
        resources: { key: string }[];
      };
      const keys = cloud.resources.map((r) => r.key).filter((k) => k.startsWith("demo:"));
      assert.deepEqual(keys.sort(), ["demo:0", "demo:1", "demo:2"], "one resource per key");
    });

    await t.step("runs, inspect and migrate read the project's database", async () => {
      const runs = await sh(dir, line(commands, "deno task runs"));
      assert.equal(runs.code, 0, runs.text);
      for (const id of ["r1", "r2", "demo"]) assert.match(runs.text, new RegExp(`^${id} +\\S+ +done `, "m"));
      const inspect = await sh(dir, "deno task inspect r2");
      assert.equal(inspect.code, 0, inspect.text);
      assert.match(inspect.text, /r2:0/);
      const migrate = await sh(dir, "deno task migrate");
      assert.equal(migrate.code, 0, migrate.text);
    });

    await t.step(
      "compile writes its entry in the project and builds under the project's deno.json",
      async () => {
        const r = await sh(dir, "deno task compile --agent ./agent.ts --entry-only");
        assert.equal(r.code, 0, r.text);
        const expected = `compile deno compile -A --unstable-no-legacy-abort --config ${dir}/deno.json ` +
          `--output dist/agent-runtime --include ${dir}/agent.ts ${dir}/dist/entry.ts`;
        assert.ok(r.text.includes(expected), r.text);
        // What the binary would run: its agent carried in, no --agent.
        const bin = await sh(dir, "deno run -A --unstable-no-legacy-abort dist/entry.ts run --run-id b1");
        assert.equal(bin.code, 0, bin.text);
        assert.match(bin.text, /event=backends .*agent=reminders/);
        assert.match(bin.text, /event=done run=b1 tool_calls=1 /);
      },
    );

    await t.step("the page serves its own files, from the package", () => assertPageFiles(dir));

    await t.step("a mistyped command is one line naming it, exit 2", async () => {
      const r = await sh(dir, "deno run -A --unstable-no-legacy-abort @agent-runtime/agent-runtime/cli rnu");
      assert.equal(r.code, 2, r.text);
      assert.match(r.text, /unknown command "rnu"/);
      assert.doesNotMatch(r.text, /^\s+at /m);
    });

    await t.step(
      "by path: under this repository's config it says what to do; with --config deno.json it runs",
      async () => {
        const main = join(ROOT, "cli", "main.ts");
        const bare = await sh(
          dir,
          `deno run -A --unstable-no-legacy-abort ${main} run --agent ./agent.ts --run-id p1`,
        );
        assert.equal(bare.code, 2, bare.text);
        assert.match(
          bare.text,
          /could not be loaded: .*not in import map.*\. The agent module resolves .* --config/,
        );
        const given = await sh(
          dir,
          `deno run -A --unstable-no-legacy-abort --config deno.json ${main} run --agent ./agent.ts --run-id p1`,
        );
        assert.equal(given.code, 0, given.text);
        assert.match(given.text, /event=done run=p1 tool_calls=1 /);
      },
    );

    const fuzzed = await fuzz;
    assert.equal(fuzzed.code, 0, fuzzed.text);
    assert.match(fuzzed.text, /seed=1 schedules=3 violations=0 /);
    assert.equal(await Deno.readTextFile(join(dir, "deno.lock")), lock, "the frozen lockfile is unchanged");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name:
    "a project of its own runs the supervisor on PostgreSQL: a worker imports its agent through its config",
  ignore: pgIgnore("a project's supervisor"),
  async fn() {
    const pg = await freshSchema();
    const { dir } = await makeProject();
    try {
      await assertSupervised(dir, pg.url, new URL("../cli/main.ts", import.meta.url).href);
    } finally {
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("the published package, from a registry: its entry points and the page's files come with it", async (t) => {
  const files = await publishedFiles();
  for (
    const file of [
      "cli/main.ts",
      "cli/compile.ts",
      "supervisor/supervisor.ts",
      "ui/server.ts",
      "ui/static/app.js",
    ]
  ) {
    assert.ok(files.includes(file), `${file} is published`);
  }
  assert.ok(!files.some((f) => f.endsWith("_test.ts")), "no test is published");
  const registry = await serveRegistry(files);
  const env = { JSR_URL: registry.url };
  const project = await makeProject({ published: true, env }).catch(async (err) => {
    await registry.close();
    throw err;
  });
  const { dir, lock } = project;
  try {
    assert.match(
      lock,
      /"jsr": \{\s+"@agent-runtime\/agent-runtime@0\.1\.0": \{\s+"integrity"/,
      "the package is in the project's lockfile",
    );
    await t.step("the project's agent runs, the package's modules downloaded", async () => {
      const r = await sh(dir, "deno task run --agent ./agent.ts --run-id j1", env);
      assert.equal(r.code, 0, r.text);
      assert.match(
        r.text,
        new RegExp(`event=confirmed run=j1 seq=0 key=j1:0 result=${TWO_DAYS_MS} remote=created`),
      );
      assert.match(r.text, /event=done run=j1 tool_calls=1 /);
    });
    await t.step(
      "the page's files come with the package's modules, not from a disk beside them",
      () => assertPageFiles(dir, env),
    );
    await t.step("compile's entry names the package as the lockfile does, and runs", async () => {
      const r = await sh(dir, "deno task compile --agent ./agent.ts --entry-only", env);
      assert.equal(r.code, 0, r.text);
      const entry = await Deno.readTextFile(join(dir, "dist", "entry.ts"));
      assert.match(entry, /import \{ agentsOf, main \} from "jsr:@agent-runtime\/agent-runtime@0\.1\/cli";/);
      const bin = await sh(dir, "deno run -A --unstable-no-legacy-abort dist/entry.ts run --run-id jb1", env);
      assert.equal(bin.code, 0, bin.text);
      assert.match(bin.text, /event=done run=jb1 tool_calls=1 /);
    });
    await t.step({
      name:
        "the supervisor's workers run the package's ./cli as the lockfile names it, under the project's config",
      ignore: pgIgnore("the published package's supervisor"),
      async fn() {
        const pg = await freshSchema();
        try {
          await assertSupervised(dir, pg.url, "jsr:@agent-runtime/agent-runtime@0.1/cli", env);
        } finally {
          await pg.drop();
        }
      },
    });
  } finally {
    await registry.close();
    await Deno.remove(dir, { recursive: true });
  }
});
