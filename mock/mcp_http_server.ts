/**
 * The MCP test servers over streamable HTTP in a process of their own:
 * `deno run -A mock/mcp_http_server.ts [--sse] [--port N]` serves every kind of
 * `mock/mcp_servers.ts` at `<url>/<kind>/mcp` and prints `listening <url>` as its
 * first line; with `--sse` each answer is an event stream rather than a JSON body.
 * It exits when its stdin closes (the process that started it ended or closed it),
 * so a measurement of the client is not shared with the server's own work.
 *
 * @module
 */

import { serveMcpTestServers } from "./mcp_servers.ts";

if (import.meta.main) {
  const sse = Deno.args.includes("--sse");
  const at = Deno.args.indexOf("--port");
  const port = at === -1 ? 0 : Number(Deno.args[at + 1]);
  const http = await serveMcpTestServers({ sse, port });
  console.log(`listening ${http.url}`);
  // Its parent is gone (or done with it): so is it.
  for await (const _ of Deno.stdin.readable) {
    // nothing is read from stdin; it only tells when to stop
  }
  await http.close();
}
