/**
 * `deno task fork RUN --at-seq N [--model M] [--live] [--run-id ID]`: forks
 * a run at one of its steps (`client.fork`, docs/fork.md). The fork is a
 * pending run: a worker hosting its agent takes it, or `RUN_ID=<fork> deno
 * task run [--agent PATH]` drives it in this process.
 *
 * Exit codes: 0 forked, 1 the fork was refused (a seq that is not a step, a
 * run not found, an id taken), 2 bad arguments or no database.
 *
 * @module
 */

import type { Agent } from "../runtime/agent/agent.ts";
import { commandFlags, integerIn } from "../runtime/settings/config.ts";
import { ClientError, ConfigError, describeError, RuntimeError, StoreError } from "../runtime/base/errors.ts";
import { displayText } from "../runtime/base/display.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";
import { Client } from "../runtime/client/client.ts";
import { parseModelParams } from "../runtime/model/params.ts";
import { loadAgents } from "./agents.ts";

/** The usage text of `fork`. */
export const FORK_USAGE =
  `agent-runtime fork: a new run whose steps before a seq are another run's, deciding anew from it.

usage: deno task fork RUN --at-seq N [--model NAME] [--model-params JSON] [--agent PATH [--agent-name NAME]]
                          [--input JSON | --goal TEXT] [--live] [--run-id ID] [--database-url URL | --data-dir DIR]

  --at-seq N          the first step the fork decides itself (0: all); the steps before it are copied
  --model NAME        the model's name from there on (its endpoint's other settings kept)
  --model-params JSON request parameters over the original's ({"temperature":0})
  --agent PATH        another agent module decides from there on (--agent-name picks one of its agents)
  --input JSON        another input (a fork at step 0 only); --goal TEXT for a text agent
  --live              send its calls as any run does; without it, a dry run: no call of a tool that acts on
                      the world is sent, each answered from the original's record, the tool's stub, or flagged
  --run-id ID         the fork's id (default <RUN>-fork-<random>)

The fork is pending: a worker hosting its agent takes it, or 'RUN_ID=<fork> deno task run' drives it here.
'deno task inspect <fork>' shows its copied steps (remote=original) and how each new call was answered.

exit codes: 0 forked, 1 refused (no such run or step, an id taken), 2 bad arguments or no database`;

/** Forks; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
): Promise<number> {
  const runId = args[0] !== undefined && !args[0].startsWith("-") ? args[0] : undefined;
  const flags = commandFlags("fork", FORK_USAGE, runId === undefined ? args : args.slice(1), {
    "at-seq": { type: "string" },
    model: { type: "string" },
    "model-params": { type: "string" },
    agent: { type: "string" },
    "agent-name": { type: "string" },
    input: { type: "string" },
    goal: { type: "string" },
    live: { type: "boolean" },
    "run-id": { type: "string" },
    "database-url": { type: "string" },
    "data-dir": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const fail = (problem: string, code = 2) => {
    console.error(displayText(`fork: ${problem}`));
    return code;
  };
  if (runId === undefined) return fail("RUN is needed: the run to fork (deno task fork RUN --at-seq N)");
  if (values["at-seq"] === undefined) return fail("--at-seq N is needed: the first step the fork decides");
  const atSeq = integerIn("--at-seq", values["at-seq"], 0, 1_000_000);
  if (typeof atSeq === "string") return fail(atSeq);
  const databaseUrl = values["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = values["data-dir"] ?? (env.DATA_DIR || ".data");
  let store: Store | undefined;
  try {
    const modelParams = values["model-params"] === undefined
      ? undefined
      : parseModelParams(values["model-params"], "--model-params");
    const input = values.input !== undefined ? JSON.parse(values.input) : values.goal;
    const agent = values.agent === undefined
      ? undefined
      : await chosenAgent(values.agent, values["agent-name"]);
    store = await openStore({ databaseUrl, dataDir });
    const client = new Client(store);
    const f = await client.fork(runId, {
      atSeq,
      ...(values.model !== undefined ? { model: values.model } : {}),
      ...(modelParams ? { modelParams } : {}),
      ...(agent ? { agent } : {}),
      ...(input !== undefined ? { input } : {}),
      live: values.live === true,
      ...(values["run-id"] !== undefined ? { runId: values["run-id"] } : {}),
    });
    print(displayText(
      `forked  run=${f.runId}  of=${f.forkedFrom}  at_seq=${f.atSeq}  ${f.dryRun ? "dry_run" : "live"}  ` +
        `copied: steps=${f.copied.steps} calls=${f.copied.calls} messages=${f.copied.messages}`,
    ));
    print(displayText(
      `  pending: a worker hosting its agent takes it, or: RUN_ID=${f.runId} deno task run${
        values.agent ? ` --agent ${values.agent}` : ""
      }`,
    ));
    return 0;
  } catch (err) {
    if (err instanceof ClientError) return fail(`${err.code}: ${err.message}`, 1);
    if (err instanceof RuntimeError) return fail(`${err.code}: ${err.message}`);
    if (err instanceof ConfigError) return fail(err.problems.join("; "));
    if (err instanceof StoreError) return fail(`${err.code}: ${err.message}`);
    if (err instanceof SyntaxError) return fail(`--input must be JSON: ${err.message}`);
    return fail(describeError(err).split("\n")[0]);
  } finally {
    await store?.client.close().catch(() => {});
  }
}

/** The module's agent named `name`, or its only one. */
async function chosenAgent(path: string, name: string | undefined): Promise<Agent> {
  const { agents } = await loadAgents(path);
  const chosen = agents.filter((a) => name === undefined || a.name === name);
  if (chosen.length !== 1) {
    throw new ConfigError([
      name === undefined
        ? `the module ${path} holds ${chosen.length} agents: name one with --agent-name`
        : `the module ${path} has no agent named ${JSON.stringify(name)}`,
    ]);
  }
  return chosen[0];
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
