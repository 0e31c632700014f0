/**
 * An agent whose tools come from the MCP test servers (mock/mcp_servers.ts), one server per kind, as
 * a user's agent module would give them: `MCP_URL` set, each over streamable HTTP at
 * `<MCP_URL>/<kind>/mcp`; unset, each a stdio server started by this process (`mock/mcp_stdio_server.ts`),
 * its state in `<MCP_STATE_DIR>/<kind>.json`. `MCP_KINDS` (comma-separated) picks the servers, all four
 * by default. The agent declares the keyed server's tools safe to re-send by name, trusts the
 * read-only server's hints, declares nothing of the others, and gives the hanging one 400 ms.
 */

import { defineAgent } from "../../mod.ts";
import { type McpServerOptions, mcpTools } from "../../runtime/mcp/mcp.ts";

const STDIO_SERVER = new URL("../../mock/mcp_stdio_server.ts", import.meta.url).pathname;
const CONFIG = new URL("../../deno.json", import.meta.url).pathname;

type Kind = "keyed" | "readonly" | "undeclared" | "hanging";

function server(kind: Kind, env: Record<string, string | undefined>): McpServerOptions {
  if (env.MCP_URL) return { url: `${env.MCP_URL}/${kind}/mcp` };
  return {
    command: Deno.execPath(),
    args: ["run", "-A", "--config", CONFIG, STDIO_SERVER, kind, `${env.MCP_STATE_DIR}/${kind}.json`],
  };
}

const servers: Record<Kind, ReturnType<typeof mcpTools>> = {
  keyed: mcpTools((ctx) => ({ ...server("keyed", ctx.env), safeToResend: ["create_ticket", "retire_tool"] })),
  readonly: mcpTools((ctx) => ({ ...server("readonly", ctx.env), trustHints: true })),
  undeclared: mcpTools((ctx) => server("undeclared", ctx.env)),
  hanging: mcpTools((ctx) => ({ ...server("hanging", ctx.env), timeoutMs: 400 })),
};

export default defineAgent({
  name: "mcp-kinds",
  instructions: "Do what the goal asks with the tools you have.",
  tools: async (ctx) => {
    const kinds = (ctx.env.MCP_KINDS ?? "keyed,readonly,undeclared,hanging").split(",") as Kind[];
    return (await Promise.all(kinds.map((k) => servers[k](ctx)))).flat();
  },
  maxSteps: 6,
});
