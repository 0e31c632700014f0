/**
 * Loading the agent module every process is started with (`--agent`), and
 * building each agent's tools and model for this process. With no module the
 * demo agent is used, so `deno task run` stays the one-command demo.
 *
 * @module
 */

import { isAbsolute, resolve } from "node:path";
import { fileURLToPath as fromFileUrl, pathToFileURL } from "node:url";
import {
  type Agent,
  type AgentContext,
  agentsOf,
  prepareAgent,
  type PreparedAgent,
} from "../runtime/agent/agent.ts";
import { withChildAgents } from "../runtime/agent/agent_tool.ts";
import { type Clock, SystemClock } from "../runtime/base/clock.ts";
import { AGENT_LOAD_DEFAULT_S } from "../runtime/settings/config.ts";
import { ConfigError, describeError, hasCode, RuntimeError } from "../runtime/base/errors.ts";
import { displayText } from "../runtime/base/display.ts";
import { describeEndpoint, resolveEndpoint } from "../runtime/model/endpoint.ts";
import { OpenAIPlanner, type Planner } from "../runtime/model/planner.ts";
import { MockModel } from "../mock/model.ts";

/** The agents of a module and where they came from. */
export interface LoadedAgents {
  /** The module's agents. */
  agents: Agent[];
  /** The module, as given (for logs and for the workers a supervisor starts). */
  where: string;
}

/**
 * What `--agent` means: a path (relative to the working directory) or a URL, as a module specifier; for a
 * list of modules (`old.ts,new.ts`), each of them, comma-separated.
 */
export function agentSpecifier(path: string): string {
  if (path.includes(",")) return path.split(",").map((p) => agentSpecifier(p.trim())).join(",");
  if (/^(file|https?|npm|jsr):/.test(path)) return path;
  return pathToFileURL(isAbsolute(path) ? path : resolve(Deno.cwd(), path)).href;
}

/**
 * The agent module cannot be used: it did not import (or not within the
 * bound), or exports no agents. One problem, printed as one line.
 */
export class AgentModuleError extends ConfigError {
  /** Creates the error with its one sentence. */
  constructor(problem: string) {
    super([problem]);
    this.name = "AgentModuleError";
  }
}

/**
 * An import the config in use does not map, or a package its lockfile does
 * not hold, is most often a project's agent run under another project's
 * config: Deno takes the deno.json beside a program started by its path, not
 * the working directory's.
 */
const CONFIG_PROBLEM = /lockfile is out of date|not a dependency and not in import map/i;
const CONFIG_HINT = " The agent module resolves through the deno.json this program runs under (Deno takes " +
  "the one beside a program started by its path): run it through your project's tasks (docs/project.md), or " +
  "pass your project's deno.json to deno with --config; when that is the one, add the import or update its " +
  "lockfile (deno install)";

/** Options of {@link loadAgents}. */
export interface LoadAgentsOptions {
  /** The agents a compiled binary was built with, used when no path is given. */
  preloaded?: LoadedAgents;
  /** How long the module may take to import (its top-level code included). Default 30 s (`AGENT_LOAD_S`). */
  timeoutMs?: number;
  /** The time the bound is kept by. Default: the system clock. */
  clock?: Clock;
}

/**
 * Imports the agent module at `path`; when `path` is unset, the agents a
 * compiled binary was built with (`preloaded`), or the demo agent.
 * Throws an {@link AgentModuleError} saying what is wrong, also when
 * the import has not finished within `timeoutMs` (a top-level `await` that
 * never settles would otherwise hang the process without a word).
 */
export async function loadAgents(
  path: string | undefined,
  opts: LoadAgentsOptions = {},
): Promise<LoadedAgents> {
  // A compiled binary carries its agent module and passes it in.
  if (path === undefined && opts.preloaded) return opts.preloaded;
  if (path === undefined) {
    // A literal import, so a compiled binary carries the demo.
    const mod = await import("../examples/provision/agent.ts");
    return { agents: agentsOf(mod, "examples/provision/agent.ts"), where: "demo" };
  }
  // Several modules (`old.ts,new.ts`): a worker hosting the old version of an agent beside the new during a
  // rollout (docs/versions.md). One name in two modules is two versions of one agent.
  if (path.includes(",")) {
    const agents: Agent[] = [];
    for (const one of path.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
      agents.push(...(await loadAgents(one, opts)).agents);
    }
    return { agents, where: path };
  }
  const timeoutMs = opts.timeoutMs ?? AGENT_LOAD_DEFAULT_S * 1000;
  const stop = new AbortController();
  const timedOut = (opts.clock ?? new SystemClock()).sleep(timeoutMs, stop.signal).then((): never => {
    throw new AgentModuleError(
      `AGENT ${JSON.stringify(path)} did not finish loading within ${timeoutMs / 1000} s: its top-level ` +
        "code is still running (an await that never settles?). Fix the module, or allow it longer with AGENT_LOAD_S",
    );
  });
  let mod: Record<string, unknown>;
  try {
    mod = await Promise.race([import(agentSpecifier(path)), timedOut]);
  } catch (err) {
    if (err instanceof AgentModuleError) throw err;
    const problem = importProblem(err);
    throw new AgentModuleError(
      `AGENT ${JSON.stringify(path)} could not be loaded: ${problem}` +
        (CONFIG_PROBLEM.test(problem) ? (problem.endsWith(".") ? "" : ".") + CONFIG_HINT : ""),
    );
  } finally {
    stop.abort(); // the timer, once the import has settled (its rejection is the race's, handled)
  }
  try {
    return { agents: agentsOf(mod, path), where: path };
  } catch (err) {
    throw new AgentModuleError((err as Error).message);
  }
}

// deno-lint-ignore no-control-regex -- the colour codes Deno may put around a place in its messages
const ANSI_COLOUR = /\x1b\[[0-9;]*m/g;
/** A place in a module, as Deno writes it: `at file:///dir/mod.ts:3:63`, or `at fn (file:///...:3:63)` in a stack. */
const PLACE = /^\s*at (?:[^(]*\()?((?:file|https?|jsr|npm):[^\s()]+):(\d+):(\d+)\)?\s*$/;
/** A line of source in Deno's message: `3 | export default ...`. */
const SOURCE_LINE = /^\s*(\d+) \| (.*)$/;

/**
 * What went wrong importing a module, on one line: the error, where (the
 * file, line and column), and the line of source when Deno shows it. A syntax
 * error's place is in its message's last lines (Deno's own form, which
 * wraps it in a `TypeError`); an error thrown by the module's top-level code
 * has it in its stack.
 */
export function importProblem(err: unknown): string {
  const message = (err instanceof Error ? err.message : String(err)).replace(ANSI_COLOUR, "");
  const lines = message.split("\n");
  // "TypeError: SyntaxError: ..." says less than the inner name alone.
  const head = lines[0].replace(/\.$/, "");
  const first = err instanceof Error && !/^[A-Z]\w*Error: /.test(head) ? `${err.name}: ${head}` : head;
  const stack = err instanceof Error ? (err.stack ?? "").replace(ANSI_COLOUR, "").split("\n") : [];
  const place = lines.map((l) => PLACE.exec(l)).find((m) => m !== null) ??
    stack.map((l) => PLACE.exec(l)).find((m) => m !== null);
  if (!place) return first;
  const [, url, line, column] = place;
  const file = url.startsWith("file:") ? fromFileUrl(url) : url;
  const source = lines.map((l) => SOURCE_LINE.exec(l)).find((m) => m !== null && m[1] === line)?.[2];
  return `${first} at ${file}:${line}:${column} (line ${line}, column ${column})` +
    (source === undefined || source.trim() === "" ? "" : `: ${displayText(clip(source, Number(column)))}`);
}

/** A line of source cut to about 120 characters around `column` (from 1). */
function clip(source: string, column: number): string {
  const text = source.trimEnd();
  if (text.length <= 120) return text.trim();
  const start = Math.max(0, Math.min(column - 60, text.length - 120));
  return `${start > 0 ? "..." : ""}${text.slice(start, start + 120)}${
    start + 120 < text.length ? "..." : ""
  }`;
}

/**
 * The embedded mock model's calls per answer (`MOCK_MODEL_PARALLEL`, as the
 * mock server's setting): 1 when unset; `deno task run:parallel` sets 2, so
 * the demo asks for the server and the database at once.
 */
function mockParallel(raw: string | undefined): number {
  if (raw === undefined || raw === "") return 1;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1 || n > 16) {
    throw new ConfigError([
      `MOCK_MODEL_PARALLEL must be an integer from 1 to 16: current value is ${JSON.stringify(raw)}`,
    ]);
  }
  return n;
}

/**
 * Builds every agent's tools and model for this process. An agent naming an
 * endpoint (or nothing) gets an OpenAI-compatible client from it and the
 * `MODEL_*` settings (runtime/model/endpoint.ts: what the agent names wins);
 * when neither gives a URL, the embedded default uses an in-process mock
 * model whose counters persist under `DATA_DIR`, and a fleet process refuses
 * with a clear message. The agents their tools start runs of (`agentTool`)
 * are prepared and returned with them, so the process hosts those too.
 * `models` says, by agent name, which model each one uses (the `backends`
 * line: endpoint and model name, secrets masked, and where its key comes from).
 */
export async function prepareAgents(
  agents: Agent[],
  ctx: AgentContext,
): Promise<{ prepared: PreparedAgent[]; models: Map<string, string> }> {
  let mock: MockModel | undefined;
  const models = new Map<string, string>();
  const prepareOne = async (agent: Agent): Promise<PreparedAgent> => {
    try {
      let described: string | undefined;
      const prepared = await prepareAgent(agent, ctx, async (endpoint): Promise<Planner> => {
        if (ctx.env.MODEL_URL || endpoint.url) {
          // A real endpoint needs a real model name: no default, or a typo'd setup would
          // send "mock-planner" to a provider and fail far from the cause.
          const resolved = resolveEndpoint(agent, endpoint, ctx.env);
          const planner = new OpenAIPlanner(resolved.options);
          described = describeEndpoint(planner, resolved);
          return planner;
        }
        if (!ctx.embedded) {
          throw new ConfigError([
            `MODEL_URL is not set and agent ${agent.name} names no model. The workers of a supervisor must share ` +
            "one model: set MODEL_URL (and MODEL) to an OpenAI-compatible endpoint, or start the mocks with " +
            "'deno task mock' and set MODEL_URL=http://127.0.0.1:9100/v1",
          ]);
        }
        if (!mock) {
          await Deno.mkdir(ctx.dataDir, { recursive: true });
          mock = await MockModel.open({
            statePath: `${ctx.dataDir}/mock-model.json`,
            parallel: mockParallel(ctx.env.MOCK_MODEL_PARALLEL),
          });
        }
        described = "in-process-mock";
        return new OpenAIPlanner({
          url: "http://mock-model.in-process/v1",
          model: "mock-planner",
          fetch: mock.handler,
        });
      });
      // A planner of the agent's own (an AI SDK model, a Planner) describes itself.
      models.set(agent.name, described ?? prepared.planner.describe);
      return prepared;
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      // A remote the tools are listed from is down (an MCP server): not a wrong setting, and it may
      // come back; the caller decides whether to wait for it (a worker does) or to say so and stop.
      if (hasCode(err, "MCP_UNREACHABLE")) throw err;
      if (err instanceof RuntimeError) throw new ConfigError([err.message]);
      throw new ConfigError([`Agent ${agent.name} could not be set up: ${describeError(err)}`]);
    }
  };
  const prepared: PreparedAgent[] = [];
  for (const agent of agents) prepared.push(await prepareOne(agent));
  // The agents these agents call (agentTool) are hosted too: a child run is driven where its parent is.
  try {
    return { prepared: await withChildAgents(prepared, prepareOne), models };
  } catch (err) {
    if (err instanceof RuntimeError && !(err instanceof ConfigError)) throw new ConfigError([err.message]);
    throw err;
  }
}

/**
 * The `models` field of the `backends` line: each agent's model, in the
 * order of `prepared`, as `name: description` separated by `; `.
 */
export function describeModels(prepared: PreparedAgent[], models: Map<string, string>): string {
  return prepared.map((p) => `${p.agent.name}: ${models.get(p.agent.name) ?? p.planner.describe}`).join("; ");
}
