/**
 * The demo agent with its model given as an AI SDK provider: the same name,
 * instructions and tools as `agent.ts`, and `@ai-sdk/openai-compatible` at
 * `MODEL_URL` (the mock model, `deno task mock`, or any OpenAI-compatible
 * server) for its model. `deno task crash-matrix --model ai-sdk --postgres`
 * runs its workers with it.
 *
 * ```sh
 * MODEL_URL=http://127.0.0.1:9100/v1 CLOUD_URL=http://127.0.0.1:9000 \
 *   deno task run --agent examples/provision/ai_sdk_agent.ts
 * ```
 *
 * @module
 */

import { createOpenAICompatible } from "npm:@ai-sdk/openai-compatible@3.0.92";
import { ConfigError, defineAgent } from "../../mod.ts";
import demo from "./agent.ts";

/** The demo agent on `@ai-sdk/openai-compatible` at `MODEL_URL` (model `MODEL`, default `mock-planner`). */
export default defineAgent({
  name: demo.name,
  instructions: demo.instructions,
  tools: demo.tools,
  maxSteps: demo.maxSteps,
  defaultInput: demo.defaultInput as string,
  model: (ctx) => {
    const baseURL = ctx.env.MODEL_URL;
    if (!baseURL) {
      throw new ConfigError([
        "MODEL_URL is not set: the AI SDK demo needs an OpenAI-compatible server, e.g. 'deno task mock'",
      ]);
    }
    return createOpenAICompatible({ name: "mock", baseURL })(ctx.env.MODEL || "mock-planner");
  },
});
