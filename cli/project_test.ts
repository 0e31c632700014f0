import assert from "node:assert/strict";
import { join } from "node:path";
import { cliEntry, findProjectConfig, lockedSpecifiers, packageExport } from "./project.ts";
import { loadSupervisorSettings, workerCommand } from "./supervise.ts";

const REGISTRY = "https://jsr.io/";
const IN_JSR = "https://jsr.io/@agent-runtime/agent-runtime/0.1.0/cli/project.ts";

Deno.test("packageExport names a JSR download as the package, as the lockfile does, else at its version", () => {
  const at = (locked?: Record<string, string>) =>
    packageExport(IN_JSR, "./cli", "./main.ts", { registry: REGISTRY, locked });
  assert.equal(at(), "jsr:@agent-runtime/agent-runtime@0.1.0/cli");
  // `^0.1.0` in the project's imports is locked as `@0.1`: a frozen lockfile takes that name, not a new one.
  assert.equal(
    at({ "jsr:@agent-runtime/agent-runtime@0.1": "0.1.0" }),
    "jsr:@agent-runtime/agent-runtime@0.1/cli",
  );
  // Another version, or another package whose name starts the same, is not this one.
  assert.equal(
    at({
      "jsr:@agent-runtime/agent-runtime@0.2": "0.2.0",
      "jsr:@agent-runtime/agent-runtime-x@0.1": "0.1.0",
    }),
    "jsr:@agent-runtime/agent-runtime@0.1.0/cli",
  );
  assert.equal(
    packageExport(IN_JSR, ".", "../mod.ts", { registry: REGISTRY }),
    "jsr:@agent-runtime/agent-runtime@0.1.0",
  );
  // A registry of its own (JSR_URL), and files: the file's URL.
  assert.equal(
    packageExport("http://127.0.0.1:4507/@a/b/1.2.3/cli/project.ts", "./cli", "./main.ts", {
      registry: "http://127.0.0.1:4507/",
    }),
    "jsr:@a/b@1.2.3/cli",
  );
  assert.equal(
    packageExport("file:///src/agent-runtime/cli/project.ts", "./cli", "./main.ts", { registry: REGISTRY }),
    "file:///src/agent-runtime/cli/main.ts",
  );
  assert.equal(cliEntry(undefined), new URL("./main.ts", import.meta.url).href);
});

Deno.test("findProjectConfig takes the first deno.json or deno.jsonc from a folder up", async () => {
  const dir = await Deno.makeTempDir({ prefix: "project_config_" });
  try {
    await Deno.mkdir(join(dir, "app", "src"), { recursive: true });
    await Deno.writeTextFile(join(dir, "deno.jsonc"), "{}");
    assert.equal(findProjectConfig(join(dir, "app", "src")), join(dir, "deno.jsonc"));
    await Deno.writeTextFile(join(dir, "app", "deno.json"), "{}");
    assert.equal(findProjectConfig(join(dir, "app", "src")), join(dir, "app", "deno.json"));
    assert.equal(findProjectConfig(join(dir, "app")), join(dir, "app", "deno.json"));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockedSpecifiers reads the lockfile beside the config, or the one it names, or none", async () => {
  const dir = await Deno.makeTempDir({ prefix: "project_lock_" });
  try {
    const config = join(dir, "deno.json");
    await Deno.writeTextFile(config, "{}");
    assert.deepEqual(lockedSpecifiers(config), {}, "no lockfile yet");
    await Deno.writeTextFile(
      join(dir, "deno.lock"),
      JSON.stringify({ version: "5", specifiers: { "jsr:@a/b@1": "1.0.0" } }),
    );
    assert.deepEqual(lockedSpecifiers(config), { "jsr:@a/b@1": "1.0.0" });
    await Deno.writeTextFile(
      join(dir, "other.lock"),
      JSON.stringify({ specifiers: { "jsr:@a/b@2": "2.0.0" } }),
    );
    await Deno.writeTextFile(config, JSON.stringify({ lock: { path: "other.lock", frozen: true } }));
    assert.deepEqual(lockedSpecifiers(config), { "jsr:@a/b@2": "2.0.0" });
    await Deno.writeTextFile(config, JSON.stringify({ lock: "other.lock" }));
    assert.deepEqual(lockedSpecifiers(config), { "jsr:@a/b@2": "2.0.0" });
    await Deno.writeTextFile(config, JSON.stringify({ lock: false }));
    assert.deepEqual(lockedSpecifiers(config), {});
    assert.deepEqual(lockedSpecifiers(undefined), {});
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a supervisor's worker runs under the project's config; WORKER_CONFIG names another, or is refused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "worker_config_" });
  try {
    const config = join(dir, "deno.json");
    await Deno.writeTextFile(config, "{}");
    const cmd = workerCommand(false, config);
    assert.deepEqual(cmd.slice(1, 7), [
      "run",
      "-A",
      "--no-prompt",
      "--unstable-no-legacy-abort",
      "--config",
      config,
    ]);
    assert.deepEqual(cmd.slice(-2), [new URL("./main.ts", import.meta.url).href, "worker"]);
    assert.ok(!workerCommand(false, undefined).includes("--config"), "no config found: Deno looks as it did");
    assert.deepEqual(workerCommand(true, config).slice(1), ["worker"], "a binary runs itself");
    const env = { DATABASE_URL: "postgres://u@h/db" };
    assert.equal(loadSupervisorSettings(["--worker-config", config], env).workerConfig, config);
    assert.throws(
      () => loadSupervisorSettings([], { ...env, WORKER_CONFIG: join(dir, "missing.json") }),
      /WORKER_CONFIG names no file: current value is ".*missing\.json"/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the supervisor reads TAKE_SHARE for its workers and refuses a value it does not know", () => {
  const env = { DATABASE_URL: "postgres://u@localhost:5432/db" };
  assert.equal(loadSupervisorSettings([], env).takeShare, "fair");
  assert.equal(loadSupervisorSettings(["--take-share", "all"], env).takeShare, "all");
  assert.throws(
    () => loadSupervisorSettings([], { ...env, TAKE_SHARE: "greedy" }),
    /TAKE_SHARE must be "fair" .* or "all" \(every free slot\): current value is "greedy"/,
  );
});
