/**
 * Which server an agent's model requests go to, and with what: an agent's
 * endpoint (`model: { url, model, ... }`) and the `MODEL_*` settings
 * combined by one rule.
 *
 * The settings describe one server, the process's default model: `MODEL_URL`
 * with its `MODEL`, `MODEL_API_KEY`, `MODEL_HEADERS`, `MODEL_QUERY` and
 * `MODEL_MAX_TOKENS_FIELD`.
 *
 * - What an agent names itself is used as named; a setting never replaces it
 *   (its `url`, `model`, `maxTokensField`, a header or query parameter of the
 *   same name). A setting fills only what the agent leaves unset.
 * - Except across servers: when an agent names its own `url` and `MODEL_URL`
 *   names a server of another origin, the settings are that other server's,
 *   and none of them reaches the agent's (no model name meant for another
 *   server, no key, header or query parameter sent where it was not given
 *   for). The agent's endpoint must then be whole, its key read only from the
 *   variable its `apiKeyEnv` names.
 *
 * So a module may mix agents with endpoints of their own and agents that
 * leave the choice to the deployment (`MODEL_URL`), and each agent's requests
 * go where its module says.
 *
 * @module
 */

import { redactUrl } from "../base/urls.ts";
import { RuntimeError } from "../base/errors.ts";
import { parseKeyValues } from "../base/http.ts";
import {
  MAX_TOKENS_FIELDS,
  type MaxTokensField,
  OpenAIPlanner,
  type OpenAIPlannerOptions,
  type Planner,
} from "./planner.ts";

/**
 * An OpenAI-compatible chat-completions endpoint. What it names is used as
 * named; the `MODEL_*` settings fill only what it leaves unset, and none of
 * them when its `url` is on another server than `MODEL_URL`'s (they are that
 * server's: {@link resolveEndpoint}).
 */
export interface ModelEndpoint {
  /** Base URL, e.g. `https://api.openai.com/v1`; a URL with no path gets `/v1`. */
  url?: string;
  /** The model name sent with each request. */
  model?: string;
  /**
   * The environment variable holding the API key; the key itself never lives
   * in code. Unset: `MODEL_API_KEY`, unless `MODEL_URL` names another server
   * (then no key is sent).
   */
  apiKeyEnv?: string;
  /** Extra headers on every request (OpenRouter's `HTTP-Referer`, say). Keep secrets in the environment. */
  headers?: Record<string, string>;
  /** Extra query parameters on every request (Azure's `api-version`). */
  query?: Record<string, string>;
  /**
   * The field that caps a budgeted request's answer: `max_tokens` (default)
   * or `max_completion_tokens` (OpenAI's reasoning models); unset,
   * `MODEL_MAX_TOKENS_FIELD` may set it.
   */
  maxTokensField?: "max_tokens" | "max_completion_tokens";
}

/** An agent's endpoint with the settings applied: what its planner is built with. */
export interface ResolvedEndpoint {
  /** The planner's options (the key is in `apiKey`, never shown). */
  options: OpenAIPlannerOptions;
  /** The variable the key was read from, when a key is sent. */
  keyFrom?: string;
  /** Whether the `MODEL_*` settings applied (false: another server's, left out). */
  settingsApplied: boolean;
}

/** The origin of a URL, or undefined when it does not parse (the URL check reports it). */
function originOf(url: string): string | undefined {
  return URL.canParse(url) ? new URL(url).origin : undefined;
}

/**
 * The endpoint an agent's requests use: its own fields, the settings
 * (`env`) filling the rest unless they name another server (the module's
 * rule). Throws `MODEL_MISSING` when there is no URL or no model name,
 * `MODEL_SETTINGS_INVALID` for a URL that is not http(s), malformed
 * `MODEL_HEADERS` or `MODEL_QUERY`, or a max-tokens field other than
 * `max_tokens` or `max_completion_tokens`.
 */
export function resolveEndpoint(
  agent: { name: string },
  endpoint: ModelEndpoint,
  env: Record<string, string | undefined>,
): ResolvedEndpoint {
  const settingsUrl = env.MODEL_URL || undefined;
  const ownUrl = endpoint.url || undefined;
  const otherServer = ownUrl !== undefined && settingsUrl !== undefined &&
    originOf(ownUrl) !== originOf(settingsUrl);
  // The settings of another server are not this agent's: read them only when they describe its server.
  const setting = (name: string): string | undefined => otherServer ? undefined : env[name] || undefined;
  const url = ownUrl ?? settingsUrl;
  const model = endpoint.model || setting("MODEL");
  if (!url || !model) {
    throw new RuntimeError(
      "MODEL_MISSING",
      `Agent ${agent.name} has no model: ${missingModel(agent.name, { ownUrl, settingsUrl, otherServer })}`,
    );
  }
  if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) {
    throw new RuntimeError(
      "MODEL_SETTINGS_INVALID",
      `The model URL of agent ${agent.name} (${
        ownUrl ? "its own 'url'" : "MODEL_URL"
      }) must be an http(s) URL ` +
        `like http://127.0.0.1:9100/v1: current value is ${JSON.stringify(redactUrl(url))}`,
    );
  }
  const extra = (name: "MODEL_HEADERS" | "MODEL_QUERY", kind: "headers" | "query") => {
    const raw = setting(name);
    if (!raw) return {};
    try {
      return parseKeyValues(raw, kind);
    } catch (err) {
      throw new RuntimeError(
        "MODEL_SETTINGS_INVALID",
        `${name} must be a JSON object of strings or name=value pairs separated by commas: ${
          (err as Error).message
        }`,
      );
    }
  };
  const maxTokensField = endpoint.maxTokensField ?? setting("MODEL_MAX_TOKENS_FIELD");
  if (maxTokensField !== undefined && !MAX_TOKENS_FIELDS.includes(maxTokensField as MaxTokensField)) {
    throw new RuntimeError(
      "MODEL_SETTINGS_INVALID",
      `The max-tokens field of agent ${agent.name} (${
        endpoint.maxTokensField ? "its own 'maxTokensField'" : "MODEL_MAX_TOKENS_FIELD"
      }) must be one of ${MAX_TOKENS_FIELDS.join(", ")}: current value is ${JSON.stringify(maxTokensField)}`,
    );
  }
  // A key named by the agent is its own; the default variable is the settings' server's.
  const keyFrom = endpoint.apiKeyEnv ?? (otherServer ? undefined : "MODEL_API_KEY");
  const apiKey = keyFrom === undefined ? undefined : env[keyFrom] || undefined;
  return {
    options: {
      url,
      model,
      maxTokensField: maxTokensField as MaxTokensField | undefined,
      apiKey,
      headers: ownFirst(endpoint.headers, extra("MODEL_HEADERS", "headers"), (k) => k.toLowerCase()),
      query: ownFirst(endpoint.query, extra("MODEL_QUERY", "query"), (k) => k),
    },
    keyFrom: apiKey === undefined ? undefined : keyFrom,
    settingsApplied: !otherServer,
  };
}

/** The agent's own entries, and the settings' entries whose names it does not use (`same` says when two names are one). */
function ownFirst(
  own: Record<string, string> | undefined,
  fromSettings: Record<string, string>,
  same: (name: string) => string,
): Record<string, string> {
  const named = new Set(Object.keys(own ?? {}).map(same));
  return {
    ...Object.fromEntries(Object.entries(fromSettings).filter(([k]) => !named.has(same(k)))),
    ...own,
  };
}

/** What to do about an endpoint with no URL or no model name. */
function missingModel(
  name: string,
  seen: { ownUrl?: string; settingsUrl?: string; otherServer: boolean },
): string {
  const url = seen.ownUrl ?? seen.settingsUrl;
  if (!url) {
    return `give 'model' in defineAgent({ model: { url, model } }) or set MODEL_URL and MODEL (now MODEL_URL is missing)`;
  }
  if (seen.otherServer) {
    return `it names its own url ${redactUrl(url)} but no model name, and MODEL is the model of MODEL_URL ` +
      `(${redactUrl(seen.settingsUrl!)}), another server: give the model in agent ${name}'s ` +
      `defineAgent({ model: { url, model } })`;
  }
  return `give 'model' in defineAgent({ model: { url, model } }) or set MODEL (now MODEL is missing; ` +
    `${redactUrl(url)} needs a model name such as MODEL=gpt-4o-mini)`;
}

/**
 * An OpenAI-compatible client for an agent's endpoint and the `MODEL_*`
 * settings, by {@link resolveEndpoint}'s rule.
 */
export function endpointPlanner(
  agent: { name: string },
  endpoint: ModelEndpoint,
  env: Record<string, string | undefined>,
): Planner {
  return new OpenAIPlanner(resolveEndpoint(agent, endpoint, env).options);
}

/**
 * What the `backends` log line says of an endpoint: the URL and model as
 * the planner shows them (secrets masked), and the variable the key came
 * from (never the key), or `key=none`.
 */
export function describeEndpoint(planner: Planner, resolved: ResolvedEndpoint): string {
  return `${planner.describe} key=${resolved.keyFrom ?? "none"}`;
}
