/**
 * A team's model providers, set up once from the environment, so an agent
 * module names its model in one line (tests/ai_sdk_switch_test.ts):
 * Anthropic's Messages API at `ANTHROPIC_BASE_URL`, and an OpenAI-compatible
 * server at `MODEL_URL`.
 *
 * @module
 */

import { createAnthropic } from "npm:@ai-sdk/anthropic@4.0.105";
import { createOpenAICompatible } from "npm:@ai-sdk/openai-compatible@3.0.92";
import type { AgentContext } from "../../../mod.ts";

/** The providers, from the process's environment. */
export function providers(ctx: AgentContext): {
  anthropic: ReturnType<typeof createAnthropic>;
  local: ReturnType<typeof createOpenAICompatible>;
} {
  return {
    anthropic: createAnthropic({ baseURL: ctx.env.ANTHROPIC_BASE_URL, apiKey: ctx.env.ANTHROPIC_API_KEY }),
    local: createOpenAICompatible({
      name: "local",
      baseURL: ctx.env.MODEL_URL ?? "http://127.0.0.1:11434/v1",
    }),
  };
}
