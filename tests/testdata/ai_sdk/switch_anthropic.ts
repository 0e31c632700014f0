/**
 * The provider-switch agent: `switch_anthropic.ts` and `switch_local.ts`
 * differ in their `model` line alone (tests/ai_sdk_switch_test.ts).
 *
 * @module
 */

import { defineAgent } from "../../../mod.ts";
import { demoTools } from "../../../examples/provision/tools.ts";
import { providers } from "./providers.ts";

export default defineAgent({
  name: "switch",
  tools: (ctx) => demoTools({ cloudUrl: ctx.env.CLOUD_URL ?? "http://127.0.0.1:9000" }),
  model: (ctx) => providers(ctx).anthropic("claude-sonnet-4-5"),
  defaultInput: "Provision a web server, a Postgres database, and a DNS record pointing at the server.",
});
