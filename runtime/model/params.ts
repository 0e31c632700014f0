/**
 * A model request's parameters ({@link ModelParams}): checked where they are
 * given (an agent's `modelParams`, a run's), every problem reported at once,
 * and merged field by field, the run's over the agent's.
 *
 * @module
 */

import { RuntimeError } from "../base/errors.ts";
import { storableJson } from "../base/storable.ts";
import type { ModelParams, ReasoningEffort } from "./transcript.ts";

/** Every {@link ReasoningEffort}, in order of effort. */
export const REASONING_EFFORTS: readonly ReasoningEffort[] = [
  "none",
  "minimal",
  "low",
  "medium",
  "high",
  "xhigh",
];

const FIELDS = [
  "model",
  "temperature",
  "topP",
  "maxOutputTokens",
  "stop",
  "seed",
  "reasoningEffort",
  "extra",
] as const;

/**
 * Request-body fields `extra` may not set on a chat-completions request: the
 * runtime writes them itself (the cap goes in `maxOutputTokens`). Beside
 * them, what would compete with them: `stream_options` belongs to `stream`
 * (the runtime streams when someone watches and then sends its own; sent
 * without `stream`, servers refuse it), and the legacy `functions` and
 * `function_call` would offer the model functions besides the agent's tools,
 * answered in a form the runtime does not read.
 */
export const RESERVED_BODY_FIELDS: readonly string[] = [
  "model",
  "messages",
  "tools",
  "functions",
  "function_call",
  "stream",
  "stream_options",
  "max_tokens",
  "max_completion_tokens",
];

/**
 * Fields that ask for several answers to one request: each one is generated
 * and billed (eight times the cap for `n: 8`), and the runtime reads only the
 * first. `extra` may set them only to 1, in its own fields and in an object
 * inside it (an AI SDK provider's options, which the OpenAI-compatible
 * providers spread into the body). `n`: chat completions, as OpenAI, vLLM,
 * LiteLLM, TGI and Gemini's compatible endpoint take it; `best_of`:
 * OpenAI's completions, vLLM's and TGI's sampling; `candidate_count` /
 * `candidateCount`: Gemini; `num_generations`: Cohere;
 * `num_return_sequences`: Hugging Face generation.
 */
export const ANSWER_MULTIPLYING_FIELDS: readonly string[] = [
  "n",
  "best_of",
  "candidate_count",
  "candidateCount",
  "num_generations",
  "num_return_sequences",
];

/**
 * The `tool_choice` values `extra` may set. A run ends on an answer with no
 * tool call, so `"required"` or a named function would force a call on
 * every step and run it to `maxSteps` (`guard`), billing each step; `"none"`
 * (answer in text) and `"auto"` (the default) keep that contract.
 */
export const TOOL_CHOICES: readonly string[] = ["auto", "none"];

/**
 * Checks `value` as request parameters and returns them (undefined for
 * none). Throws `MODEL_PARAMS_INVALID` naming every problem, each with the
 * value seen; `where` starts the message (`Cannot define agent "x"`).
 */
export function checkModelParams(value: unknown, where: string): ModelParams | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new RuntimeError(
      "MODEL_PARAMS_INVALID",
      `${where}: 'modelParams' must be an object: current value is ${JSON.stringify(value)}`,
    );
  }
  const v = value as Record<string, unknown>;
  const problems: string[] = modelNameProblems(v.model);
  const seen = (x: unknown) => JSON.stringify(x) ?? String(x);
  for (const key of Object.keys(v)) {
    if (!(FIELDS as readonly string[]).includes(key)) {
      problems.push(
        `'${key}' is not a request parameter (they are ${FIELDS.join(", ")}; put others in 'extra')`,
      );
    }
  }
  const finite = (name: "temperature" | "topP", min: number, max: number) => {
    const x = v[name];
    if (x !== undefined && (typeof x !== "number" || !Number.isFinite(x) || x < min || x > max)) {
      problems.push(`'${name}' must be a number from ${min} to ${max}: current value is ${seen(x)}`);
    }
  };
  finite("temperature", 0, 2);
  finite("topP", 0, 1);
  const int = (name: "maxOutputTokens" | "seed", min: number) => {
    const x = v[name];
    if (x !== undefined && (typeof x !== "number" || !Number.isSafeInteger(x) || x < min)) {
      problems.push(`'${name}' must be an integer of at least ${min}: current value is ${seen(x)}`);
    }
  };
  int("maxOutputTokens", 1);
  int("seed", 0);
  const stop = v.stop;
  if (
    stop !== undefined &&
    (!Array.isArray(stop) || stop.length === 0 || stop.length > 16 ||
      !stop.every((s) => typeof s === "string" && s !== ""))
  ) {
    problems.push(`'stop' must be 1 to 16 non-empty strings: current value is ${seen(stop)}`);
  }
  const effort = v.reasoningEffort;
  if (effort !== undefined && !REASONING_EFFORTS.includes(effort as ReasoningEffort)) {
    problems.push(
      `'reasoningEffort' must be one of ${REASONING_EFFORTS.join(", ")}: current value is ${seen(effort)}`,
    );
  }
  const extra = v.extra;
  if (extra !== undefined) {
    if (typeof extra !== "object" || extra === null || Array.isArray(extra)) {
      problems.push(`'extra' must be an object of JSON values: current value is ${seen(extra)}`);
    } else {
      const reserved = Object.keys(extra).filter((k) => RESERVED_BODY_FIELDS.includes(k));
      if (reserved.length > 0) {
        problems.push(
          `'extra' may not set ${reserved.join(", ")} (the runtime writes ${
            reserved.length === 1 ? "it" : "them"
          }; a cap on the answer is 'maxOutputTokens')`,
        );
      }
      problems.push(
        ...multipliers(extra as Record<string, unknown>).map(({ path, value }) =>
          `'extra' may not set ${path} to ${seen(value)}: it asks for several answers to one request, each ` +
          `billed, and only the first is read (leave it out, or set it to 1)`
        ),
      );
      const choice = (extra as Record<string, unknown>).tool_choice;
      if (choice !== undefined && !TOOL_CHOICES.includes(choice as string)) {
        problems.push(
          `'extra' may set tool_choice only to ${
            TOOL_CHOICES.map((c) => `"${c}"`).join(" or ")
          }: current value ` +
            `is ${seen(choice)} (a run ends on an answer with no tool call; a forced call on every step ` +
            `would run it to maxSteps)`,
        );
      }
      try {
        storableJson(extra, "'extra'");
      } catch (err) {
        problems.push((err as Error).message);
      }
    }
  }
  if (problems.length > 0) {
    throw new RuntimeError(
      "MODEL_PARAMS_INVALID",
      `${where}: its model request parameters are wrong: ${problems.join("; ")}`,
    );
  }
  const out: ModelParams = {};
  for (const key of FIELDS) if (v[key] !== undefined) (out as Record<string, unknown>)[key] = v[key];
  return out;
}

/** What is wrong with a run's `model` (a model's name: 1-200 printable ASCII characters, no space). */
function modelNameProblems(model: unknown): string[] {
  if (model === undefined || (typeof model === "string" && /^[\x21-\x7e]{1,200}$/.test(model))) return [];
  return [
    `'model' must be a model's name, 1-200 printable characters: current value is ${JSON.stringify(model)}`,
  ];
}

/** The answer-multiplying fields of `extra` and of the objects in it that are set to anything but 1. */
function multipliers(extra: Record<string, unknown>): { path: string; value: unknown }[] {
  const found: { path: string; value: unknown }[] = [];
  const look = (obj: Record<string, unknown>, prefix: string) => {
    for (const name of ANSWER_MULTIPLYING_FIELDS) {
      if (Object.hasOwn(obj, name) && obj[name] !== 1) found.push({ path: prefix + name, value: obj[name] });
    }
  };
  look(extra, "");
  for (const [key, inner] of Object.entries(extra)) {
    if (typeof inner === "object" && inner !== null && !Array.isArray(inner)) {
      look(inner as Record<string, unknown>, `${key}.`);
    }
  }
  return found;
}

/**
 * Request parameters given as JSON text (a setting, a flag): parsed, then
 * checked as {@link checkModelParams} checks them. Throws
 * `MODEL_PARAMS_INVALID` for text that is not JSON, too.
 */
export function parseModelParams(text: string, where: string): ModelParams | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new RuntimeError(
      "MODEL_PARAMS_INVALID",
      `${where} must be a JSON object such as {"temperature":0.2,"maxOutputTokens":800}: current value is ${
        JSON.stringify(text.slice(0, 80))
      }`,
    );
  }
  return checkModelParams(value, where);
}

/**
 * The parameters a request is sent with: the run's over the agent's, field
 * by field (`extra` key by key). Undefined when neither sets any.
 */
export function mergeModelParams(
  agent: ModelParams | undefined,
  run: ModelParams | undefined | null,
): ModelParams | undefined {
  if (!agent && !run) return undefined;
  const merged: ModelParams = { ...agent, ...run };
  if (agent?.extra || run?.extra) merged.extra = { ...agent?.extra, ...run?.extra };
  return Object.keys(merged).length === 0 ? undefined : merged;
}
