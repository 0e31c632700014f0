/**
 * One MCP test server over stdio: `deno run -A mock/mcp_stdio_server.ts <kind> [<state.json>]`,
 * a kind of `mock/mcp_servers.ts` (`keyed`, `readonly`, `undeclared`, `hanging`, `large`). With a state file
 * its counts and stored answers survive it (written before each answer), so the server a restarted
 * worker starts carries on where the killed worker's left off. It exits when its stdin closes: its
 * client closed it, or the process that started it died.
 *
 * @module
 */

// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/stdio"
import { StdioServerTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/server/stdio.js";
import process from "node:process";
import { MCP_TEST_KINDS, type McpTestKind, McpTestServer } from "./mcp_servers.ts";

if (import.meta.main) {
  const [kind, statePath] = Deno.args;
  if (!MCP_TEST_KINDS.includes(kind as McpTestKind)) {
    console.error(`usage: mcp_stdio_server.ts <${MCP_TEST_KINDS.join("|")}> [state.json]: kind is ${kind}`);
    Deno.exit(2);
  }
  const server = await McpTestServer.open(kind as McpTestKind, { statePath });
  const transport = new StdioServerTransport();
  await server.server().connect(transport);
  // Its client is gone (closed, or killed with the worker that started it): so is it.
  process.stdin.on("end", () => Deno.exit(0));
  process.stdin.on("close", () => Deno.exit(0));
}
