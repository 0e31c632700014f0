/**
 * The public MCP conformance suite (`npm:@modelcontextprotocol/conformance@0.1.16`, pinned in deno.lock)
 * run against the server's streamable-HTTP handler, served by Deno.serve on port 0 over an in-memory
 * database: each scenario that applies to what the server offers is spawned as the suite's own CLI and
 * must pass every check it runs. The scenarios that do not apply (tools, resources and prompts of the
 * suite's own test server by name, logging, completion, sampling) are listed in docs/mcp-server.md.
 */

import assert from "node:assert/strict";
import { defineAgent } from "../runtime/agent/agent.ts";
import { mcpHandler } from "../runtime/mcp_server/mcp_server.ts";
import { testClient } from "./_pglite.ts";

const SUITE = "npm:@modelcontextprotocol/conformance@0.1.16";
/** The scenarios of the suite that apply to this server (`conformance list`). */
const SCENARIOS = [
  "server-initialize",
  "ping",
  "tools-list",
  "dns-rebinding-protection",
  "server-sse-multiple-streams",
] as const;

Deno.test("the MCP conformance suite's scenarios that apply pass against the HTTP handler", async (t) => {
  const client = await testClient();
  const agent = defineAgent({
    name: "notes",
    instructions: "Write the note asked for.",
    tools: [],
    model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "noted" }) },
  });
  const handler = mcpHandler({ client, agents: [agent] });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
  try {
    for (const scenario of SCENARIOS) {
      await t.step(scenario, async () => {
        const out = await new Deno.Command(Deno.execPath(), {
          args: [
            "run",
            "-A",
            SUITE,
            "server",
            "--url",
            `http://127.0.0.1:${server.addr.port}/mcp`,
            "--scenario",
            scenario,
          ],
          cwd: new URL("../", import.meta.url),
          stdout: "piped",
          stderr: "piped",
        }).output();
        const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
        const m = /Passed: (\d+)\/(\d+), (\d+) failed/.exec(text);
        assert.ok(m, `no result line from the suite:\n${text.slice(-2000)}`);
        const [passed, total, failed] = [Number(m[1]), Number(m[2]), Number(m[3])];
        assert.ok(
          total > 0 && passed === total && failed === 0,
          `${scenario}: ${m[0]}\n${text.slice(-2000)}`,
        );
      });
    }
  } finally {
    await handler.close();
    await server.shutdown();
    await client.close();
  }
});
