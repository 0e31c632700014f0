/**
 * `deno task eval`: an evaluation (`runEval`, harness/eval.ts; docs/fork.md)
 * from the command line: cases from a JSON file of inputs or from recorded
 * runs of an agent, times variants named by their model or agent module,
 * every case run a dry run, scored, printed as a table. Run again with the
 * same id after a crash, it makes no case run twice and prints the same table.
 *
 * Exit codes: 0 the table was printed, 2 bad arguments, a module or database that cannot be used.
 *
 * @module
 */

import type { Agent } from "../runtime/agent/agent.ts";
import { commandFlags, integerIn } from "../runtime/settings/config.ts";
import { ConfigError, describeError, RuntimeError, StoreError } from "../runtime/base/errors.ts";
import { displayText } from "../runtime/base/display.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";
import { Client } from "../runtime/client/client.ts";
import { loadAgents } from "./agents.ts";
import { MockModel } from "../mock/model.ts";
import { OpenAIPlanner } from "../runtime/model/openai.ts";
import {
  type EvalCase,
  type EvalVariant,
  recordedCases,
  runEval,
  type Scorer,
  scorers,
  spendLine,
  tableLines,
} from "../harness/eval.ts";

/** The usage text of `eval`. */
export const EVAL_USAGE = `agent-runtime eval: cases times variants, each a dry run, scored, as a table.

usage: deno task eval --id ID [--agent PATH [--agent-name NAME]] (--inputs FILE | --recorded AGENT [--since ISO]
                      [--until ISO] [--at-seq N] [--limit N]) --variant NAME[=MODEL | :MODULE] ...
                      [--scorer exact | contains=TEXT | steps=N | tokens=N ...] [--budget-tokens N]
                      [--database-url URL | --data-dir DIR]

  --id ID             the evaluation's id; its case runs are ID-<variant>-<n>, so a second start resumes it
  --agent PATH        the agent module (default the demo); its first agent unless --agent-name
  --inputs FILE       a JSON array of cases: inputs, or {"input": ..., "expected": "..."}
  --recorded AGENT    the done runs of AGENT (created since/until), each forked at --at-seq (default 0)
  --variant NAME=MODEL    a variant asking the agent's endpoint for MODEL; NAME:MODULE another agent module;
                      NAME alone the agent as it is
  --scorer S          exact (the expected answer, or the recorded run's), contains=TEXT, steps=N, tokens=N;
                      default exact
  --budget-tokens N   a cap on the whole evaluation's tokens, split among its case runs as their ceilings

Every case run is a dry run: no call of a tool that acts on the world is sent (docs/fork.md).

exit codes: 0 the table was printed, 2 bad arguments, a module or database that cannot be used`;

/** Runs the evaluation; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
): Promise<number> {
  const flags = commandFlags("eval", EVAL_USAGE, args, {
    id: { type: "string" },
    agent: { type: "string" },
    "agent-name": { type: "string" },
    inputs: { type: "string" },
    recorded: { type: "string" },
    since: { type: "string" },
    until: { type: "string" },
    "at-seq": { type: "string" },
    limit: { type: "string" },
    variant: { type: "string", multiple: true },
    scorer: { type: "string", multiple: true },
    "budget-tokens": { type: "string" },
    "database-url": { type: "string" },
    "data-dir": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const fail = (problem: string) => {
    console.error(displayText(`eval: ${problem}`));
    return 2;
  };
  if (!values.id) return fail("--id ID is needed: the evaluation's id (its case runs are named after it)");
  if ((values.inputs === undefined) === (values.recorded === undefined)) {
    return fail("give --inputs FILE or --recorded AGENT: where the cases come from");
  }
  if (!values.variant?.length) return fail("give at least one --variant NAME[=MODEL | :MODULE]");
  const databaseUrl = values["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = values["data-dir"] ?? (env.DATA_DIR || ".data");
  let store: Store | undefined;
  try {
    const ctx = { env, dataDir, embedded: !databaseUrl };
    const path = values.agent ?? new URL("../examples/provision/agent.ts", import.meta.url).pathname;
    const agent = await withEmbeddedModel(ctx, await chosenAgent(path, values["agent-name"]));
    const variants = await Promise.all(values.variant.map(async (text) => {
      const v = await variantOf(text);
      return v.agent ? { ...v, agent: await withEmbeddedModel(ctx, v.agent) } : v;
    }));
    const scorerList = (values.scorer?.length ? values.scorer : ["exact"]).map(scorerOf);
    const budgetTokens = numberFlag("--budget-tokens", values["budget-tokens"]);
    store = await openStore({ databaseUrl, dataDir });
    const client = new Client(store);
    const cases = values.inputs !== undefined
      ? await inputCases(values.inputs)
      : await recordedCases(client, {
        agent: values.recorded!,
        ...(values.since ? { since: new Date(values.since) } : {}),
        ...(values.until ? { until: new Date(values.until) } : {}),
        atSeq: numberFlag("--at-seq", values["at-seq"]) ?? 0,
        ...(values.limit ? { limit: numberFlag("--limit", values.limit) } : {}),
      });
    const started = performance.now();
    const report = await runEval(client, {
      id: values.id,
      agent,
      cases,
      variants,
      scorers: scorerList,
      ...(budgetTokens !== undefined ? { budget: { tokens: budgetTokens } } : {}),
      context: ctx,
    });
    for (const line of tableLines(report)) print(displayText(line));
    print(spendLine(report));
    print(
      `time: ${report.variants.map((v) => `${v.variant} ${(v.timeMs / 1000).toFixed(1)}s`).join(", ")} ` +
        `(the case runs' own, created to last change); this command ${
          ((performance.now() - started) / 1000).toFixed(1)
        }s`,
    );
    return 0;
  } catch (err) {
    if (err instanceof ConfigError) return fail(err.problems.join("; "));
    if (err instanceof RuntimeError || err instanceof StoreError) return fail(`${err.code}: ${err.message}`);
    return fail(describeError(err).split("\n")[0]);
  } finally {
    await store?.client.close().catch(() => {});
  }
}

/** `NAME`, `NAME=MODEL` or `NAME:MODULE`. */
async function variantOf(text: string): Promise<EvalVariant> {
  const model = /^([A-Za-z0-9_]+)=(.+)$/.exec(text);
  if (model) return { name: model[1], model: model[2] };
  const module = /^([A-Za-z0-9_]+):(.+)$/.exec(text);
  if (module) return { name: module[1], agent: await chosenAgent(module[2], undefined) };
  return { name: text };
}

/** A scorer by its flag. */
function scorerOf(text: string): Scorer {
  const [kind, arg] = text.split(/=(.*)/s, 2);
  if (kind === "exact" && arg === undefined) return scorers.exact();
  if (kind === "contains" && arg) return scorers.contains(arg);
  if (kind === "steps" && arg) {
    return scorers.within({ steps: numberFlag("--scorer steps", arg) }, `steps<=${arg}`);
  }
  if (kind === "tokens" && arg) {
    return scorers.within({ tokens: numberFlag("--scorer tokens", arg) }, `tokens<=${arg}`);
  }
  throw new ConfigError([
    `--scorer ${JSON.stringify(text)} is not one of exact, contains=TEXT, steps=N, tokens=N`,
  ]);
}

/** An integer flag, or undefined when not given; a bad one throws. */
function numberFlag(name: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  const n = integerIn(name, text, 0, 1_000_000_000);
  if (typeof n === "string") throw new ConfigError([n]);
  return n;
}

/** The cases of a JSON file: an array of inputs, or of `{ input, expected }`. */
async function inputCases(path: string): Promise<EvalCase[]> {
  const parsed: unknown = JSON.parse(await Deno.readTextFile(path));
  if (!Array.isArray(parsed)) throw new ConfigError([`${path} must hold a JSON array of cases`]);
  return parsed.map((c, i) => {
    const isCase = typeof c === "object" && c !== null && !Array.isArray(c) && "input" in c;
    return isCase
      ? {
        name: `${i + 1}`,
        input: c.input,
        ...(typeof c.expected === "string" ? { expected: c.expected } : {}),
      }
      : { name: `${i + 1}`, input: c };
  });
}

/**
 * The agent, with the embedded default's model when it names none and no
 * `MODEL_URL` is set (as `deno task run` does): the in-process mock, its
 * counters under the data directory.
 */
async function withEmbeddedModel(
  ctx: { env: Record<string, string | undefined>; dataDir: string; embedded: boolean },
  agent: Agent,
): Promise<Agent> {
  if (agent.model !== undefined || ctx.env.MODEL_URL || !ctx.embedded) return agent;
  await Deno.mkdir(ctx.dataDir, { recursive: true });
  const mock = await MockModel.open({ statePath: `${ctx.dataDir}/mock-model.json` });
  const model = new OpenAIPlanner({
    url: "http://mock-model.in-process/v1",
    model: "mock-planner",
    fetch: mock.handler,
  });
  return { ...agent, model };
}

/** The module's agent named `name`, or its first. */
async function chosenAgent(path: string, name: string | undefined): Promise<Agent> {
  const { agents } = await loadAgents(path);
  const chosen = agents.find((a) => name === undefined || a.name === name);
  if (!chosen) throw new ConfigError([`the module ${path} has no agent named ${JSON.stringify(name)}`]);
  return chosen;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
