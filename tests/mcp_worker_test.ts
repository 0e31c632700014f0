/**
 * A worker whose MCP server is down when it starts waits for it instead of
 * exiting (an exit would be a restart loop under a supervisor): it logs
 * `tools-unreachable` with backoff, and once the server listens it lists the
 * tools and takes the run waiting for it. PostgreSQL (the worker and this
 * test share the database); skipped without TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import { serveMcpTestServers } from "../mock/mcp_servers.ts";
import { serveMocks } from "../mock/server.ts";
import { Proc } from "../harness/procs.ts";
import { connect } from "../runtime/client/client.ts";
import { loadAgents } from "../cli/agents.ts";
import { pgTest } from "./_pg.ts";

const AGENT = new URL("./testdata/mcp_agent.ts", import.meta.url).pathname;

/** A port nothing listens on now (bound, then let go). */
function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

pgTest("a worker whose MCP server is down at start waits for it, then takes its runs", async (pg) => {
  const mocks = await serveMocks();
  const port = freePort();
  const runId = "mcp-late-1";
  mocks.model.setScript({
    run: runId,
    steps: [{ tool: "create_ticket", args: { title: "Late" } }, { answer: "Opened." }],
  });
  const worker = new Proc("cli/main.ts", {
    AGENT,
    DATABASE_URL: pg.url,
    MODEL_URL: mocks.modelUrl,
    MODEL: "mock-planner",
    MCP_KINDS: "keyed",
    MCP_URL: `http://127.0.0.1:${port}`,
    POLL_S: "0.2",
  }, { args: ["worker"] });
  let http: Awaited<ReturnType<typeof serveMcpTestServers>> | undefined;
  const client = await connect({ databaseUrl: pg.url });
  try {
    await worker.waitFor(
      (l) => l.includes("event=tools-unreachable"),
      "the worker to say its server is down",
    );
    assert.equal(worker.events("backends").length, 0, "it takes no run while its tools are unknown");
    const { agents } = await loadAgents(AGENT);
    await client.start(agents[0], { runId, input: "Open a ticket." });
    http = await serveMcpTestServers({ port });
    const done = await client.wait(runId, { timeoutMs: 60_000 });
    assert.equal(done.status, "done", JSON.stringify(done));
    const counts = await (await fetch(`${http.url}/keyed/_counts`)).json();
    assert.equal(counts.actionsByKey[`${runId}:0`], 1);
    assert.ok(worker.events("tools-unreachable").length >= 1);
  } finally {
    await client.close();
    await worker.close();
    await http?.close();
    await mocks.close();
  }
});
