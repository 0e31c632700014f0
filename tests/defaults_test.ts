/**
 * One default per setting (issue 35): the defaults the docs state
 * (docs/settings.md's tables, the settings table at the head of
 * `runtime/settings/config.ts`, and the sentences of the README, the other
 * pages and the library's own docs that name one) are the ones the code uses,
 * read from the code's own settings readers, `defineAgent` and the worker
 * host `client.startWorker` builds, not from a copy of the numbers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { loadSupervisorSettings } from "../cli/supervise.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { loadSettings } from "../runtime/settings/config.ts";
import { DEFAULTS } from "../runtime/base/defaults.ts";
import { DEFAULT_RETRY } from "../runtime/base/retry.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { testClient } from "./_pglite.ts";

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

/** The first whole number in `text` (`the agent's, 4` is 4), or undefined. */
function firstNumber(text: string): number | undefined {
  const m = /\d[\d_]*/.exec(text);
  return m ? Number(m[0].replaceAll("_", "")) : undefined;
}

/**
 * The settings table at the head of config.ts, `| env | flag | default |`, as
 * `name → default`: the default cell up to its first colon (what follows is
 * what the setting means), a row of several names split in step with its
 * defaults.
 */
async function configTable(): Promise<Map<string, string>> {
  const src = await Deno.readTextFile(new URL("../runtime/settings/config.ts", import.meta.url));
  const out = new Map<string, string>();
  for (const line of src.slice(0, src.indexOf("*/")).split("\n")) {
    const row = line.replace(/^\s*\*\s?/, "");
    if (!row.startsWith("|")) continue;
    const cells = row.split("|").slice(1, -1).map((c) => c.trim());
    const names = cells[0].split(",").map((n) => n.trim().replaceAll("`", ""));
    if (!/^[A-Z_]+$/.test(names[0])) continue; // the header and its rule
    const stated = cells[2].split(":")[0];
    const values = stated.split(/,\s*/);
    names.forEach((n, i) => out.set(n, names.length === values.length ? values[i].trim() : stated));
  }
  return out;
}

Deno.test("the settings table at the head of config.ts states the defaults the code declares", async () => {
  const table = await configTable();
  const code: Record<string, number> = {
    RUNS_PER_WORKER: DEFAULTS.runsPerWorker,
    POLL_S: DEFAULTS.pollMs / 1000,
    MAX_STEPS: DEFAULTS.maxSteps,
    TOOL_CONCURRENCY: DEFAULTS.toolConcurrency,
    STALL_MS: DEFAULTS.stallMs,
    HEARTBEAT_S: DEFAULTS.heartbeatMs / 1000,
    LEASE_S: DEFAULTS.leaseMs / 1000,
    AGENT_LOAD_S: DEFAULTS.agentLoadS,
    DATA_DIR_WAIT_S: DEFAULTS.dataDirWaitS,
    GROUP_COMMIT_MS: DEFAULTS.groupCommitMs,
    RETRY_HORIZON_S: DEFAULT_RETRY.horizonMs / 1000,
    RETRY_BACKOFF_MS: DEFAULT_RETRY.backoffBaseMs,
    RETRY_BACKOFF_MAX_S: DEFAULT_RETRY.backoffMaxMs / 1000,
  };
  for (const [name, value] of Object.entries(code)) {
    const cell = table.get(name);
    assert.ok(cell !== undefined, `${name} is not in config.ts's table`);
    assert.equal(firstNumber(cell), value, `${name}: config.ts's table says '${cell}'`);
  }
  assert.equal(table.get("DATA_DIR"), `\`${DEFAULTS.dataDir}\``);
});

/**
 * Sentences that state a default, each with the value it must state: every
 * pattern must match its file exactly once, so a sentence rewritten without
 * its number fails here rather than dropping out of the check.
 */
const SENTENCES: { file: string; says: RegExp; value: number }[] = [
  {
    file: "README.md",
    says: /they run at once \(`TOOL_CONCURRENCY`, (\d+)\)/g,
    value: DEFAULTS.toolConcurrency,
  },
  {
    file: "README.md",
    says: /share statements and commits \(`GROUP_COMMIT_MS=(\d+)`\)/g,
    value: DEFAULTS.groupCommitMs,
  },
  {
    file: "docs/operating.md",
    says: /# on by default: GROUP_COMMIT_MS=(\d+)/g,
    value: DEFAULTS.groupCommitMs,
  },
  { file: "docs/agents.md", says: /`maxCallsPerStep` \(default (\d+)/g, value: DEFAULTS.maxCallsPerStep },
  { file: "docs/agents.md", says: /`toolConcurrency` \(default (\d+)/g, value: DEFAULTS.toolConcurrency },
  { file: "docs/operating.md", says: /\(0 to 100, default (\d+);/g, value: DEFAULTS.groupCommitMs },
  { file: "docs/operating.md", says: /`LEASE_S` \(the default (\d+) s/g, value: DEFAULTS.leaseMs / 1000 },
  {
    file: "docs/operating.md",
    says: /`DATA_DIR_WAIT_S` seconds \(default (\d+);/g,
    value: DEFAULTS.dataDirWaitS,
  },
  { file: "docs/internals.md", says: /`AGENT_LOAD_S` \(default (\d+) s/g, value: DEFAULTS.agentLoadS },
  { file: "ARCHITECTURE.md", says: /\(`GROUP_COMMIT_MS`, default (\d+)\)/g, value: DEFAULTS.groupCommitMs },
  { file: "runtime/agent/agent.ts", says: /fails as `guard`\. Default (\d+)\./g, value: DEFAULTS.maxSteps },
  {
    file: "runtime/agent/agent.ts",
    says: /is refused and asked again\)\. Default (\d+)\./g,
    value: DEFAULTS.maxCallsPerStep,
  },
  {
    file: "runtime/agent/agent.ts",
    says: /`TOOL_CONCURRENCY` overrides it\. Default (\d+)\./g,
    value: DEFAULTS.toolConcurrency,
  },
  { file: "runtime/host/host.ts", says: /\(`POLL_S`, (\d+) s\)/g, value: DEFAULTS.pollMs / 1000 },
  {
    file: "docs/signals.md",
    says: /`deadlineMs` \(default (\d+) ms, a day\)/g,
    value: DEFAULTS.signalWaitDeadlineMs,
  },
  { file: "docs/signals.md", says: /`maxMs`, default (\d+) ms,/g, value: DEFAULTS.sleepMaxMs },
  {
    file: "runtime/host/host.ts",
    says: /`groupCommitMs` \((\d+)\), as the commands'/g,
    value: DEFAULTS.groupCommitMs,
  },
];

Deno.test("the sentences of the README, the pages and the library's docs that state a default state the code's", async () => {
  const problems: string[] = [];
  for (const { file, says, value } of SENTENCES) {
    const text = await Deno.readTextFile(new URL(`../${file}`, import.meta.url));
    const found = [...text.matchAll(says)];
    if (found.length !== 1) problems.push(`${file}: ${says} matches ${found.length} times, not once`);
    else if (Number(found[0][1]) !== value) {
      problems.push(`${file}: '${found[0][0]}' states ${found[0][1]}, not ${value}`);
    }
  }
  assert.deepEqual(problems, []);
});

Deno.test("client.startWorker's host says the worker command's defaults: its poll, lease timings, slots and group commit", async () => {
  const worker = loadSettings([], {});
  const client = await testClient();
  const lines: string[] = [];
  const agent = defineAgent({
    name: "defaults",
    tools: [],
    model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "" }) },
  });
  const host = await client.startWorker([agent], {
    log: new Logger({ clock: client.clock, sink: arraySink(lines) }),
  });
  await host.stop();
  await client.close();
  const said = lines.find((l) => l.includes("event=worker "));
  assert.ok(said, `the host said nothing of itself: ${lines.join("\n")}`);
  const field = (name: string) => Number(new RegExp(`\\b${name}=(\\d+)`).exec(said)?.[1]);
  assert.deepEqual(
    {
      runsPerWorker: field("runs_per_worker"),
      pollMs: field("poll_ms"),
      heartbeatMs: field("heartbeat_ms"),
      groupCommitMs: field("group_commit_ms"),
    },
    {
      runsPerWorker: worker.runsPerWorker,
      pollMs: worker.pollMs,
      heartbeatMs: worker.heartbeatMs,
      groupCommitMs: worker.groupCommitMs,
    },
  );
  // An agent's own limits, declared once for defineAgent and the commands alike.
  assert.deepEqual(
    [agent.maxSteps, agent.maxCallsPerStep, agent.toolConcurrency],
    [DEFAULTS.maxSteps, DEFAULTS.maxCallsPerStep, DEFAULTS.toolConcurrency],
  );
});
