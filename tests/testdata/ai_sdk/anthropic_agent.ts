/**
 * An agent on `@ai-sdk/anthropic` with extended thinking, its model built
 * from the environment: `ANTHROPIC_BASE_URL` (the fake Messages API of
 * `mock/anthropic.ts`) and `ANTHROPIC_API_KEY`; the demo's tools against
 * `CLOUD_URL`. Worker processes of tests/ai_sdk_crash_test.ts load it.
 *
 * @module
 */

import { createAnthropic } from "npm:@ai-sdk/anthropic@4.0.105";
import { ConfigError, defineAgent } from "../../../mod.ts";
import { aiSdkPlanner } from "../../../runtime/model/ai_sdk.ts";
import { demoTools } from "../../../examples/provision/tools.ts";

function setting(env: Record<string, string | undefined>, name: string): string {
  const value = env[name];
  if (!value) throw new ConfigError([`${name} is not set`]);
  return value;
}

export default defineAgent({
  name: "ops",
  tools: (ctx) => demoTools({ cloudUrl: setting(ctx.env, "CLOUD_URL") }),
  model: (ctx) =>
    aiSdkPlanner(
      createAnthropic({
        baseURL: setting(ctx.env, "ANTHROPIC_BASE_URL"),
        apiKey: setting(ctx.env, "ANTHROPIC_API_KEY"),
      })("claude-sonnet-4-5"),
      {
        params: {
          maxOutputTokens: 1024,
          extra: { anthropic: { thinking: { type: "enabled", budgetTokens: 1024 } } },
        },
      },
    ),
  defaultInput: "Provision a web server, a Postgres database, and a DNS record pointing at the server.",
});
