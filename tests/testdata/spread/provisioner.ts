// The demo's provisioning agent under another name: each of spread_pg_test.ts's modules hosts some of
// these, so two hosts can host different agents doing the same work against the mock cloud.
import { type Agent, defineAgent } from "../../../mod.ts";
import { demoCloud } from "../../../examples/provision/agent.ts";
import { demoTools } from "../../../examples/provision/tools.ts";

/** The demo agent, named `name`. */
export function provisioner(name: string): Agent {
  return defineAgent({
    name,
    tools: async (ctx) => {
      const { url, fetch } = await demoCloud(ctx);
      return demoTools({ cloudUrl: url, fetch });
    },
    maxSteps: 12,
  });
}
