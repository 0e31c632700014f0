/**
 * One CLI: every command, as a subcommand of `cli/main.ts` (what the compiled
 * binary runs) and as the script its `deno task` runs, answers `--help` with
 * every flag it accepts (exit 0), and an unknown flag with one line naming it
 * (exit 2), never a stack trace.
 */

import assert from "node:assert/strict";
import { COMMAND_FLAGS } from "../cli/commands.ts";
import { flagOf, SETTING_NAMES } from "../runtime/settings/config.ts";
import { SUPERVISOR_SETTING_NAMES } from "../cli/supervise.ts";
import { isDenoLockNotice } from "../harness/procs.ts";

const ROOT = new URL("../", import.meta.url);
const path = (rel: string) => decodeURIComponent(new URL(rel, ROOT).pathname);
const COMMON_COMMAND_FLAGS = ["--database-url", "--data-dir", "--by"];

/** Every command and every flag it accepts (besides --help). */
const COMMANDS: Record<string, string[]> = {
  run: SETTING_NAMES.map(flagOf),
  worker: SETTING_NAMES.map(flagOf),
  supervise: SUPERVISOR_SETTING_NAMES.map(flagOf),
  ...Object.fromEntries(
    Object.entries(COMMAND_FLAGS).map((
      [name, flags],
    ) => [name, [...flags.map((f) => `--${f}`), ...COMMON_COMMAND_FLAGS]]),
  ),
  migrate: ["--database-url", "--data-dir", "--log-format"],
  "crash-matrix": ["--points", "--parallel", "--transcript", "--postgres", "--database-url", "--concurrency"],
  bench: ["--runs", "--concurrency"],
  fuzz: [
    "--schedules",
    "--seed",
    "--replay",
    "--faults",
    "--max-faults",
    "--parallel",
    "--target",
    "--defect",
    "--transcript",
    "--keep-going",
  ],
  compile: ["--agent", "--output", "--entry", "--config", "--entry-only"],
};

async function cli(
  script: string,
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--unstable-no-legacy-abort", "--config", path("deno.json"), path(script), ...args],
    cwd: path("."),
    env: { DATABASE_URL: "", DATA_DIR: "", AGENT: "" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: text(out.stdout), stderr: text(out.stderr) };
}

/** The script and leading arguments each deno.json task runs, read from the task's command. */
async function taskEntries(): Promise<
  Record<string, { script: string; args: string[]; description?: string }>
> {
  const config = JSON.parse(await Deno.readTextFile(path("deno.json")));
  const out: Record<string, { script: string; args: string[]; description?: string }> = {};
  for (
    const [name, task] of Object.entries(
      config.tasks as Record<string, { command: string; description?: string }>,
    )
  ) {
    const words = task.command.split(/\s+/);
    const at = words.findIndex((w) => w.endsWith(".ts"));
    if (words[1] === "run" && at > 0) {
      out[name] = { script: words[at], args: words.slice(at + 1), description: task.description };
    } else out[name] = { script: "", args: [], description: task.description };
  }
  return out;
}

function assertOneLine(
  what: string,
  r: { code: number; stdout: string; stderr: string },
  flag: string,
): void {
  assert.equal(r.code, 2, `${what}: exit code\n${r.stdout}${r.stderr}`);
  // Deno's own note when parallel processes share node_modules is not the program's output.
  const lines = r.stderr.split("\n").filter((l) => l.trim() !== "" && !isDenoLockNotice(l));
  assert.equal(lines.length, 1, `${what}: one line on stderr, got:\n${r.stderr}`);
  assert.ok(lines[0].includes(flag), `${what}: the line names ${flag}: ${lines[0]}`);
  assert.doesNotMatch(r.stderr, /^\s+at |Uncaught|Stack backtrace/m, `${what}: no stack trace`);
}

Deno.test("every task in deno.json has a description", async () => {
  for (const [name, task] of Object.entries(await taskEntries())) {
    assert.ok(task.description && task.description.length > 10, `task ${name} has a description`);
  }
});

/** Each command's forms: the binary's subcommand, and the script its task runs when that is another file. */
async function forms(): Promise<[string, string, string[]][]> {
  const entries = await taskEntries();
  return Object.keys(COMMANDS).flatMap((command) => {
    const out: [string, string, string[]][] = [[command, "cli/main.ts", [command]]];
    const task = entries[command];
    if (task?.script && task.script !== "cli/main.ts") out.push([command, task.script, task.args]);
    return out;
  });
}

Deno.test("every command answers --help with each flag it accepts, and exits 0", async (t) => {
  const all = await forms();
  // Subprocesses at once, assertions one step at a time.
  const results = await Promise.all(all.map(([, script, lead]) => cli(script, [...lead, "--help"])));
  for (const [i, [command, script, lead]] of all.entries()) {
    await t.step(`${script} ${lead.join(" ")} --help`, () => {
      const r = results[i];
      assert.equal(r.code, 0, `${r.stdout}${r.stderr}`);
      for (const flag of COMMANDS[command]) assert.ok(r.stdout.includes(flag), `names ${flag}:\n${r.stdout}`);
    });
  }
});

Deno.test("every command answers an unknown flag with one line naming it, exit 2, no stack trace", async (t) => {
  const all = await forms();
  const results = await Promise.all(
    all.map(([, script, lead]) => cli(script, [...lead, "--no-such-flag", "1"])),
  );
  for (const [i, [, script, lead]] of all.entries()) {
    await t.step(`${script} ${lead.join(" ")} --no-such-flag`, () => {
      assertOneLine(`${script} ${lead.join(" ")}`, results[i], "--no-such-flag");
    });
  }
});

Deno.test("a run command refuses a flag that belongs to another command", async () => {
  assertOneLine(
    "inspect --status",
    await cli("cli/main.ts", ["inspect", "r1", "--status", "done"]),
    "--status",
  );
});

Deno.test("settle refuses both --result and --error (or neither) in one line naming them, exit 2", async () => {
  const [both, neither] = await Promise.all([
    cli("cli/main.ts", ["settle", "r1:0", "--result", "1", "--error", "failed"]),
    cli("cli/main.ts", ["settle", "r1:0"]),
  ]);
  assertOneLine("settle --result --error", both, "--error TEXT");
  assertOneLine("settle", neither, "--result JSON");
});

Deno.test("the binary's usage names every command", async () => {
  const r = await cli("cli/main.ts", ["--help"]);
  assert.equal(r.code, 0);
  for (const command of Object.keys(COMMANDS)) {
    assert.match(r.stdout, new RegExp(`^  ${command} `, "m"), command);
  }
});

Deno.test("the fuzzer answers an unknown flag with one line, exit 2, and --help with each of its flags", async () => {
  const [unknown, help, notANumber, badParallel, badTarget] = await Promise.all([
    cli("cli/fuzz.ts", ["--no-such-flag", "1"]),
    cli("cli/fuzz.ts", ["--help"]),
    cli("cli/fuzz.ts", ["--schedules", "many"]),
    cli("cli/fuzz.ts", ["--parallel", "1,two"]),
    cli("cli/fuzz.ts", ["--target", "cron"]),
  ]);
  assertOneLine("fuzz", unknown, "--no-such-flag");
  assertOneLine("fuzz --schedules many", notANumber, "--schedules");
  assertOneLine("fuzz --parallel 1,two", badParallel, "--parallel");
  assertOneLine("fuzz --target cron", badTarget, "--target");
  assert.equal(help.code, 0, help.stderr);
  const flags = [
    "--schedules",
    "--seed",
    "--replay",
    "--faults",
    "--max-faults",
    "--parallel",
    "--target",
    "--defect",
    "--transcript",
  ];
  for (const flag of [...flags, "--keep-going"]) assert.ok(help.stdout.includes(flag), `names ${flag}`);
});

Deno.test("the crash matrix refuses calls per answer outside 1 to 3 with one line, exit 2", async () => {
  const [four, word] = await Promise.all([
    cli("harness/crash_matrix.ts", ["--parallel", "4"]),
    cli("harness/crash_matrix.ts", ["--parallel", "three"]),
  ]);
  assertOneLine("crash-matrix --parallel 4", four, "--parallel");
  assertOneLine("crash-matrix --parallel three", word, "--parallel");
});

Deno.test("a message id given as bytes that are not UTF-8 is refused in one line, exit 2, never stored as U+FFFD", async () => {
  // Deno.args reads such bytes as U+FFFD, so $'id-\xff' and $'id-\xfe' would arrive as one id.
  const dir = await Deno.makeTempDir({ prefix: "cli_bytes_" });
  try {
    const out = await new Deno.Command("bash", {
      args: [
        "-c",
        `exec "$0" run -A --unstable-no-legacy-abort --config "$1" "$2" send chat-1 --message hi ` +
        `--message-id "$(printf 'id-\\377')"`,
        Deno.execPath(),
        path("deno.json"),
        path("cli/main.ts"),
      ],
      cwd: path("."),
      env: { DATABASE_URL: "", DATA_DIR: dir, AGENT: "" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const r = {
      code: out.code,
      stdout: new TextDecoder().decode(out.stdout),
      stderr: new TextDecoder().decode(out.stderr),
    };
    assertOneLine("send --message-id <0xff>", r, 'MESSAGE_INVALID: The message id "id-\ufffd" is refused');
    assert.match(r.stderr, /U\+FFFD at index 3, the mark a decoding leaves for bytes that were not UTF-8/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
