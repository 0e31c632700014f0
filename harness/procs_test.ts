import assert from "node:assert/strict";
import { SUPERVISOR_SETTING_NAMES } from "../cli/supervise.ts";
import { SETTING_NAMES } from "../runtime/settings/config.ts";
import { childEnv, CLEARED_SETTINGS, isDenoLockNotice, Proc } from "./procs.ts";

Deno.test("every setting of the run command, the worker and the supervisor is cleared", () => {
  for (const name of [...SETTING_NAMES, ...SUPERVISOR_SETTING_NAMES]) {
    assert.ok(CLEARED_SETTINGS.has(name), name);
  }
  for (
    const name of ["LEASE_S", "HEARTBEAT_S", "POLL_S", "MAX_STEPS", "WORKER", "EXIT_ON_STDIN_EOF", "WORKERS"]
  ) {
    assert.ok(CLEARED_SETTINGS.has(name), name);
  }
  assert.deepEqual(childEnv({ LEASE_S: "99", HOME: "/home/dev" }, { POLL_S: "0.2" }), {
    HOME: "/home/dev",
    POLL_S: "0.2",
  });
});

// Regression (#23): the list to clear was spelled by hand and lacked HEARTBEAT_S, LEASE_S, POLL_S, MAX_STEPS,
// WORKER and EXIT_ON_STDIN_EOF, so a developer's own LEASE_S reached the tests' processes.
Deno.test("a developer's own settings never reach a test's process", async () => {
  const names = [...CLEARED_SETTINGS];
  const saved = new Map(names.map((n) => [n, Deno.env.get(n)]));
  try {
    for (const name of names) Deno.env.set(name, "from-the-developer's-shell");
    Deno.env.set("AGENT_RUNTIME_TEST_KEPT", "1");
    const proc = new Proc("harness/testdata/print_env.ts", { GOAL: "given by the test" });
    assert.equal(await proc.status, 0, proc.lines.join("\n"));
    const seen: string[] = JSON.parse(proc.lines.find((l) => l.startsWith("[")) ?? "null");
    assert.deepEqual(seen.filter((n) => CLEARED_SETTINGS.has(n)), ["GOAL"]);
    assert.ok(seen.includes("AGENT_RUNTIME_TEST_KEPT"), "the rest of the environment is inherited");
  } finally {
    for (const [name, value] of saved) {
      value === undefined ? Deno.env.delete(name) : Deno.env.set(name, value);
    }
    Deno.env.delete("AGENT_RUNTIME_TEST_KEPT");
  }
});

Deno.test("Deno's own wait for the node_modules lock is told apart from a program's output", () => {
  // As CI printed it, colours and all, when two test files started Deno at once.
  assert.ok(
    isDenoLockNotice("\x1b[0m\x1b[36mBlocking\x1b[0m waiting for file lock on node_modules directory"),
  );
  assert.ok(isDenoLockNotice("Blocking waiting for file lock on node_modules directory"));
  for (
    const line of [
      'level=info event=worker msg="Blocking waiting for file lock"',
      'APPROVAL_NOT_FOUND: No approval request for "Blocking waiting for file lock"',
      "",
    ]
  ) assert.equal(isDenoLockNotice(line), false, line);
});
