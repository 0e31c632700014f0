/**
 * The demo agent: provisions a web server, a Postgres database and a DNS
 * record pointing at the server, against a cloud provider's HTTP API. It is
 * what `deno task run` runs when no `--agent` is given, and an agent module
 * like any a user writes: it default-exports `defineAgent(...)`.
 *
 * Its cloud is `CLOUD_URL` (`deno task mock` serves one). Without it, on the
 * embedded default, an in-process mock cloud keeps its state under
 * `DATA_DIR`, so a crash and a restart meet the same remote, as they would
 * with a server. Under a supervisor, many worker processes must share one
 * cloud, so `CLOUD_URL` is required there.
 *
 * @module
 */

import { type AgentContext, ConfigError, defineAgent } from "../../mod.ts";
import type { FetchLike } from "../../tools.ts";
import { MockCloud } from "../../mock/cloud.ts";
import { demoTools } from "./tools.ts";

/** The demo's goal, used when a run is started without one. */
export const DEMO_GOAL =
  "Provision a web server, a Postgres database, and a DNS record pointing at the server.";

/**
 * The cloud the demo's tools talk to: `CLOUD_URL`, or on the embedded default
 * an in-process mock cloud whose state lives under `DATA_DIR`.
 */
export async function demoCloud(ctx: AgentContext): Promise<{ url: string; fetch?: FetchLike }> {
  const url = ctx.env.CLOUD_URL;
  if (url) return { url };
  if (!ctx.embedded) {
    throw new ConfigError([
      "CLOUD_URL is not set. The workers of a supervisor must share one cloud (an in-process mock would keep " +
      "its own state in each process): start the mocks with 'deno task mock' and set CLOUD_URL=http://127.0.0.1:9000",
    ]);
  }
  await Deno.mkdir(ctx.dataDir, { recursive: true });
  const mock = await MockCloud.open({ statePath: `${ctx.dataDir}/mock-cloud.json` });
  return { url: "http://mock-cloud.in-process", fetch: mock.handler };
}

/** The provisioning agent. */
export default defineAgent({
  name: "provision",
  instructions:
    "You are an agent that completes the user's goal by calling tools; call several at once when " +
    "they do not depend on each other's results. When the goal is complete, answer with a short summary and no " +
    "tool call.",
  tools: async (ctx: AgentContext) => {
    const { url, fetch } = await demoCloud(ctx);
    return demoTools({ cloudUrl: url, fetch });
  },
  maxSteps: 12,
  defaultInput: DEMO_GOAL,
});
