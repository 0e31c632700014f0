/**
 * #25's third promise, with real processes: an agent whose tools come from MCP servers built with the
 * SDK's server package (mock/mcp_servers.ts), over stdio and over streamable HTTP, its worker (`deno
 * run cli/main.ts run`) SIGKILLed at `after_call` on each kind of tool. The key-honouring server sees
 * the key twice and acts once; the tool that declares nothing is flagged (`blocked`) and a person's
 * `resolve` finishes it without a second send; the read-only tool the agent trusts is re-sent; the
 * hanging server's call ends within its timeout as an unknown outcome (flagged); a tool the server
 * stops listing under a running run fails cleanly (`MCP_TOOL_VANISHED`). Each kind is its own run,
 * its chain of processes run beside the others', on PostgreSQL when `TEST_DATABASE_URL` is set (a
 * fresh schema), else on the embedded store (each run its own database, copied from one made once).
 */

import assert from "node:assert/strict";
import { type McpTestCounts, type McpTestKind, serveMcpTestServers } from "../mock/mcp_servers.ts";
import { serveMocks } from "../mock/server.ts";
import type { ScriptStep } from "../mock/model.ts";
import { parseLine, runCli } from "../harness/procs.ts";
import { freshSchema, seedDataDir, TEST_DATABASE_URL } from "./_pg.ts";

const AGENT = new URL("./testdata/mcp_agent.ts", import.meta.url).pathname;

type Transport = "stdio" | "http";

/** The log events of `out` named `event`, parsed. */
function events(out: string, event: string): Record<string, string>[] {
  return out.split("\n").map(parseLine).filter((l) => l?.event === event) as Record<string, string>[];
}

/** An embedded database with the tables made, once per file: each run's is a copy (a first start costs seconds). */
let template: Promise<string> | undefined;
function emptyDatabase(): Promise<string> {
  template ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "mcp-template-" });
    await seedDataDir(dir);
    const { code, out } = await runCli(["migrate"], { DATA_DIR: dir });
    assert.equal(code, 0, out);
    return dir;
  })();
  return template;
}

async function copyDir(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isDirectory) await copyDir(`${from}/${e.name}`, `${to}/${e.name}`);
    else await Deno.copyFile(`${from}/${e.name}`, `${to}/${e.name}`);
  }
}

/** One kind's run: its own servers (and state), its own database, and the commands of its chain. */
interface Chain {
  /** Runs the CLI with this chain's settings. */
  cli(args: string[], extra?: Record<string, string>): Promise<{ code: number; out: string }>;
  /** What the chain's server of `kind` counted. */
  counts(kind: McpTestKind): Promise<McpTestCounts>;
}

/**
 * Runs `body` for a run `runId` of the MCP agent with the servers `kinds`, its model answering
 * `script`: over stdio each server is started by the worker, its state in a file of the chain's;
 * over HTTP they serve from this process (counts read from `GET /<kind>/_counts`).
 */
async function chain(
  transport: Transport,
  opts: { runId: string; kinds: McpTestKind[]; script: ScriptStep[]; databaseUrl?: string },
  body: (c: Chain) => Promise<void>,
): Promise<void> {
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: `mcp-${opts.runId}-` });
  if (!opts.databaseUrl) await seedDataDir(`${dir}/data`);
  const http = transport === "http" ? await serveMcpTestServers() : undefined;
  try {
    mocks.model.setScript({ run: opts.runId, steps: opts.script });
    const store: Record<string, string> = opts.databaseUrl
      ? { DATABASE_URL: opts.databaseUrl }
      : { DATA_DIR: `${dir}/data` };
    if (!opts.databaseUrl) await copyDir(await emptyDatabase(), `${dir}/data`);
    const env: Record<string, string> = {
      AGENT,
      RUN_ID: opts.runId,
      GOAL: "Do what the operator asks.",
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      MCP_KINDS: opts.kinds.join(","),
      ...(http ? { MCP_URL: http.url } : { MCP_STATE_DIR: dir }),
      ...store,
    };
    await body({
      cli: (args, extra = {}) => runCli(args, { ...env, ...extra }),
      counts: async (kind) =>
        http
          ? await (await fetch(`${http.url}/${kind}/_counts`)).json()
          : JSON.parse(await Deno.readTextFile(`${dir}/${kind}.json`)),
    });
  } finally {
    await http?.close();
    await mocks.close();
    await Deno.remove(dir, { recursive: true });
  }
}

const CRASH = { CRASH_AT: "after_call", CRASH_SEQ: "0" };

/** The chain's run killed at `after_call` (exit 137), then run again to its end (exit 0). */
async function killedThenResumed(c: Chain): Promise<{ code: number; out: string }> {
  const killed = await c.cli(["run"], CRASH);
  assert.equal(killed.code, 137, killed.out);
  const resumed = await c.cli(["run"]);
  assert.equal(resumed.code, 0, resumed.out);
  return resumed;
}

/** The key-honouring server: killed after the call, the re-send under the key finds the first answer. */
function keyed(transport: Transport, runId: string, databaseUrl?: string) {
  return chain(transport, {
    runId,
    kinds: ["keyed"],
    script: [{ tool: "create_ticket", args: { title: "Printer jam" } }, { answer: "Opened." }],
    databaseUrl,
  }, async (c) => {
    const resumed = await killedThenResumed(c);
    const confirmed = events(resumed.out, "confirmed");
    assert.deepEqual(confirmed.map((e) => [e.key, e.remote]), [[`${runId}:0`, "already_done"]]);
    assert.equal(JSON.parse(confirmed[0].result).id, "T-000001");
    const counts = await c.counts("keyed");
    assert.equal(counts.byKey[`${runId}:0`], 2, "the server saw the key twice");
    assert.equal(counts.actionsByKey[`${runId}:0`], 1, "and acted once");
    assert.equal(counts.actions, 1);
  });
}

/** The tool that declares nothing: flagged, the run blocked, a person's resolve finishes it unsent. */
function undeclared(transport: Transport, runId: string, databaseUrl?: string) {
  return chain(transport, {
    runId,
    kinds: ["undeclared"],
    script: [{ tool: "send_email", args: { to: "ada@example.test", subject: "Hello" } }, { answer: "Sent." }],
    databaseUrl,
  }, async (c) => {
    const killed = await c.cli(["run"], CRASH);
    assert.equal(killed.code, 137, killed.out);
    const blocked = await c.cli(["run"]);
    assert.equal(blocked.code, 4, `exit 4 is blocked:\n${blocked.out}`);
    const [flag] = events(blocked.out, "flagged");
    assert.equal(flag?.key, `${runId}:0`, blocked.out);
    assert.match(flag.reason, /its outcome is unknown and send_email takes no idempotency key/);
    assert.match(flag.reason, /MCP has no way to ask mcp-test-undeclared whether it acted/);
    assert.equal((await c.counts("undeclared")).byKey[`${runId}:0`], 1, "not sent again");

    const resolved = await c.cli(["resolve", `${runId}:0`, "--result", '{"sent":true}', "--by", "ops"]);
    assert.equal(resolved.code, 0, resolved.out);
    const done = await c.cli(["run"]);
    assert.equal(done.code, 0, done.out);
    assert.equal(events(done.out, "done")[0]?.output, "Sent.");
    const counts = await c.counts("undeclared");
    assert.equal(counts.byKey[`${runId}:0`], 1, "one email, sent once");
    assert.equal(counts.actions, 1);
  });
}

/** The read-only tool the agent trusts by its hint: re-sent after the kill. */
function readonly(transport: Transport, runId: string, databaseUrl?: string) {
  return chain(transport, {
    runId,
    kinds: ["readonly"],
    script: [{ tool: "get_forecast", args: { city: "Oslo" } }, { answer: "Sunny in Oslo." }],
    databaseUrl,
  }, async (c) => {
    const resumed = await killedThenResumed(c);
    assert.deepEqual(events(resumed.out, "intent").map((e) => e.attempt), ["2"], "re-sent once");
    assert.deepEqual(events(resumed.out, "confirmed").map((e) => e.remote), ["created"]);
    assert.equal(events(resumed.out, "flagged").length, 0);
    const counts = await c.counts("readonly");
    assert.equal(counts.byKey[`${runId}:0`], 2, "sent twice");
    assert.equal(counts.actions, 0, "it changes nothing");
  });
}

/** The hanging server: the call ends at its 400 ms timeout as an unknown outcome, flagged. */
function hanging(transport: Transport, runId: string, databaseUrl?: string) {
  return chain(transport, {
    runId,
    kinds: ["hanging"],
    script: [{ tool: "export_report", args: {} }, { answer: "Exported." }],
    databaseUrl,
  }, async (c) => {
    const run = await c.cli(["run"]);
    assert.equal(run.code, 4, `exit 4 is blocked:\n${run.out}`);
    const [flag] = events(run.out, "flagged");
    assert.match(
      flag?.reason ?? "",
      /it failed with an unknown outcome \(export_report did not answer within 400ms\)/,
    );
    assert.equal((await c.counts("hanging")).byKey[`${runId}:0`], 1, "sent once, never again");
  });
}

/** A tool the server stops listing while the run runs: its call fails cleanly, the run goes on. */
function vanished(transport: Transport, runId: string, databaseUrl?: string) {
  return chain(transport, {
    runId,
    databaseUrl,
    kinds: ["keyed"],
    script: [
      { tool: "retire_tool", args: { name: "create_ticket" } },
      { tool: "create_ticket", args: { title: "Too late" } },
      { answer: "The ticket tool is gone." },
    ],
  }, async (c) => {
    const run = await c.cli(["run"]);
    assert.equal(run.code, 0, run.out);
    const [changed] = events(run.out, "mcp-tools-changed");
    assert.equal(changed?.removed, "create_ticket", run.out);
    const [failed] = events(run.out, "tool-failed");
    assert.deepEqual([failed?.key, failed?.code], [`${runId}:1`, "MCP_TOOL_VANISHED"]);
    assert.match(failed.error, /is no longer listed by its server/);
    assert.equal(events(run.out, "done")[0]?.output, "The ticket tool is gone.");
    assert.equal((await c.counts("keyed")).calls.create_ticket, undefined, "never handled");
  });
}

Deno.test("MCP over stdio and over streamable HTTP, killed at after_call on each kind of tool: the keyed server acts once, the undeclared tool is flagged and resolvable, the trusted read-only one is re-sent, a hang is an unknown outcome, a vanished tool fails cleanly", async (t) => {
  // On PostgreSQL when there is one (a process starts in a third of the time), else each run on an
  // embedded database of its own.
  const pg = TEST_DATABASE_URL ? await freshSchema() : undefined;
  if (!pg) console.log("on the embedded store (TEST_DATABASE_URL is unset)");
  try {
    for (const transport of ["stdio", "http"] as const) {
      await t.step(`${transport} (${pg ? "PostgreSQL" : "embedded"})`, async () => {
        const p = transport === "stdio" ? "s" : "h";
        await Promise.all([
          keyed(transport, `${p}-keyed`, pg?.url),
          undeclared(transport, `${p}-undeclared`, pg?.url),
          readonly(transport, `${p}-readonly`, pg?.url),
          hanging(transport, `${p}-hanging`, pg?.url),
          vanished(transport, `${p}-vanished`, pg?.url),
        ]);
      });
    }
  } finally {
    await pg?.drop();
    if (template) await Deno.remove(await template, { recursive: true });
    template = undefined;
  }
});
