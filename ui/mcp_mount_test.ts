/**
 * The page serves an MCP handler it is given at /mcp, behind its own token: the MCP SDK's client lists
 * the agents' tools there with the token, and is refused 401 without it; closing the page closes the
 * handler's sessions.
 */

import assert from "node:assert/strict";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/index"
import { Client as McpClient } from "npm:@modelcontextprotocol/sdk@1.32.2/client/index.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import { StreamableHTTPClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
import { defineAgent } from "../runtime/agent/agent.ts";
import { mcpHandler } from "../runtime/mcp_server/mcp_server.ts";
import { serveUi } from "./server.ts";
import { testClient } from "../tests/_pglite.ts";

Deno.test("the page serves the MCP handler at /mcp behind its token", async () => {
  const client = await testClient();
  const agent = defineAgent({
    name: "notes",
    tools: [],
    model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "noted" }) },
  });
  const mcp = mcpHandler({ client, agents: [agent] });
  const ui = await serveUi({ client, port: 0, token: "tok", mcp });
  const url = new URL(`${ui.url}/mcp`);
  const session = new McpClient({ name: "page-test", version: "1.0.0" });
  try {
    const refused = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    assert.equal(refused.status, 401);
    await refused.body?.cancel();
    await session.connect(
      new StreamableHTTPClientTransport(url, { requestInit: { headers: { authorization: "Bearer tok" } } }),
    );
    assert.deepEqual((await session.listTools()).tools.map((t) => t.name).slice(0, 2), ["notes", "get_run"]);
    assert.equal(mcp.sessions(), 1);
  } finally {
    await session.close();
    await ui.close();
    await client.close();
  }
  assert.equal(mcp.sessions(), 0, "closing the page closed its sessions");
});
