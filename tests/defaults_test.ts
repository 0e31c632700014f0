/**
 * One default per setting (issue 35): the defaults docs/settings.md states
 * are the ones the code uses, read from the code's own settings readers and
 * `defineAgent`, not from a copy of the numbers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadSupervisorSettings } from "../cli/supervise.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { loadSettings } from "../runtime/settings/config.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";
import { DEFAULT_RETRY } from "../runtime/base/retry.ts";

const PAGE = await Deno.readTextFile(new URL("../docs/settings.md", import.meta.url));

/** Each table row of the page under `heading` as `name → default`, a row of several names split in step with its defaults. */
function documented(heading: string, nameColumn: number, defaultColumn: number): Map<string, string> {
  const at = PAGE.indexOf(heading);
  assert.ok(at >= 0, `docs/settings.md has no '${heading}'`);
  const out = new Map<string, string>();
  const lines = PAGE.slice(at).split("\n");
  let seen = false;
  for (const line of lines.slice(1)) {
    if (!line.startsWith("|")) {
      if (seen) break;
      continue;
    }
    seen = true;
    const cells = line.split("|").slice(1, -1).map((c) => c.trim());
    const names = cells[nameColumn].split(",").map((n) => n.trim().replaceAll("`", ""));
    if (!/^[A-Z_*]+$/.test(names[0])) continue; // the header and its rule
    const values = cells[defaultColumn].split(/,\s*/);
    // A row of several names states one default for each, or one for all.
    const each = names.length > 1 && names.length === values.length;
    names.forEach((n, i) => out.set(n, each ? values[i].trim() : cells[defaultColumn]));
  }
  return out;
}

/** The number a default's cell states: `12`, `2 (0: off)`, `the agent's \`maxSteps\` (12)`. */
function numberIn(cell: string | undefined, name: string): number {
  assert.ok(cell !== undefined, `${name} is not in the table`);
  const m = /\((\d[\d_ ]*)\)$/.exec(cell) ?? /^(\d[\d_ ]*)/.exec(cell);
  assert.ok(m, `${name}'s documented default '${cell}' states no number`);
  return Number(m[1].replace(/[_ ]/g, ""));
}

Deno.test("the defaults docs/settings.md states are the code's: the worker's, the supervisor's, the retry settings' and an agent's", () => {
  const worker = loadSettings([], {});
  const supervisor = loadSupervisorSettings([], { DATABASE_URL: "postgres://u@127.0.0.1:5432/d" });
  const agent = defineAgent({
    name: "defaults",
    tools: [],
    model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "" }) },
  });
  const settings = documented("## Settings", 0, 1);
  const code: Record<string, number> = {
    MAX_STEPS: agent.maxSteps,
    TOOL_CONCURRENCY: agent.toolConcurrency,
    RUNS_PER_WORKER: worker.runsPerWorker,
    POLL_S: worker.pollMs / 1000,
    CRASH_SEQ: worker.crash.crashSeq,
    STALL_MS: worker.crash.stallMs,
    HEARTBEAT_S: worker.heartbeatMs / 1000,
    LEASE_S: worker.leaseMs / 1000,
    AGENT_LOAD_S: worker.agentLoadMs / 1000,
    DATA_DIR_WAIT_S: worker.dataDirWaitMs / 1000,
    GROUP_COMMIT_MS: worker.groupCommitMs,
    RETRY_HORIZON_S: DEFAULT_RETRY.horizonMs / 1000,
    RETRY_BACKOFF_MS: DEFAULT_RETRY.backoffBaseMs,
    RETRY_BACKOFF_MAX_S: DEFAULT_RETRY.backoffMaxMs / 1000,
  };
  for (const [name, value] of Object.entries(code)) {
    assert.equal(
      numberIn(settings.get(name), name),
      value,
      `${name}: docs/settings.md against the worker's code`,
    );
  }
  assert.equal(settings.get("DATA_DIR"), "`.data`");
  assert.equal(worker.dataDir, ".data");

  const sup = documented("## The supervisor", 0, 2);
  const supCode: Record<string, number> = {
    RUNS_PER_WORKER: supervisor.runsPerWorker,
    POLL_S: supervisor.pollMs / 1000,
    LEASE_S: supervisor.leaseMs / 1000,
    HEARTBEAT_S: supervisor.heartbeatMs / 1000,
    AGENT_LOAD_S: supervisor.agentLoadMs / 1000,
  };
  for (const [name, value] of Object.entries(supCode)) {
    assert.equal(numberIn(sup.get(name), name), value, `${name}: the supervisor's table against its code`);
  }
  assert.equal(
    sup.get("RETRY_*"),
    [DEFAULT_RETRY.horizonMs / 1000, DEFAULT_RETRY.backoffBaseMs, DEFAULT_RETRY.backoffMaxMs / 1000].join(
      ", ",
    ),
  );
  const retry = documented("and passes those given to every worker it starts", 0, 2);
  assert.equal(numberIn(retry.get("RETRY_HORIZON_S"), "RETRY_HORIZON_S"), DEFAULT_RETRY.horizonMs / 1000);
  assert.equal(numberIn(retry.get("RETRY_BACKOFF_MS"), "RETRY_BACKOFF_MS"), DEFAULT_RETRY.backoffBaseMs);
  assert.equal(
    numberIn(retry.get("RETRY_BACKOFF_MAX_S"), "RETRY_BACKOFF_MAX_S"),
    DEFAULT_RETRY.backoffMaxMs / 1000,
  );

  // The one declaration the readers use.
  assert.deepEqual(
    [DEFAULTS.runsPerWorker, DEFAULTS.pollMs, DEFAULTS.heartbeatMs, DEFAULTS.leaseMs, DEFAULTS.groupCommitMs],
    [worker.runsPerWorker, worker.pollMs, worker.heartbeatMs, worker.leaseMs, worker.groupCommitMs],
  );
});
