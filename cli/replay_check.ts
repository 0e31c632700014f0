/**
 * `deno task replay-check --agent PATH`: before a deploy (and in CI), reads
 * the journals of the module's agents' runs against the module, calling no
 * model and no tool, and lists each decided step the module's version could
 * not carry (`runtime/client/replay_check.ts`): a tool it has neither by name
 * nor by `replaces`, or arguments its schema refuses.
 *
 * Exit codes: 0 every step can be carried, 1 some cannot (listed), 2 bad
 * arguments, an agent module that cannot be used, or no database.
 *
 * @module
 */

import type { AgentContext } from "../runtime/agent/agent.ts";
import { commandFlags, integerIn } from "../runtime/settings/config.ts";
import { ConfigError, describeError, StoreError } from "../runtime/base/errors.ts";
import { displayText } from "../runtime/base/display.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";
import { replayCheck, type ReplayReport } from "../runtime/client/replay_check.ts";
import { loadAgents } from "./agents.ts";

/** The usage text of `replay-check`. */
export const REPLAY_CHECK_USAGE =
  `agent-runtime replay-check: which decided steps of the runs in the database a new agent module could not carry.

usage: deno task replay-check --agent PATH [--agent-name NAME] [--finished N] [--database-url URL | --data-dir DIR]

  --agent PATH        the new agent module (env AGENT)
  --agent-name NAME   only this agent of the module (default: each)
  --finished N        also read the N runs finished most recently (default 0: open runs only)
  --database-url URL  PostgreSQL (env DATABASE_URL); unset: embedded PGlite under --data-dir (env DATA_DIR, .data)

Reads each run's journal and checks every decided tool call against the module's tools: by name, or by a
tool that says it replaces the name, and its arguments against that tool's schema. Calls nothing. A step
'to carry out' (decided, its calls not all settled, in an open run) would stop that run from moving to
this version; a settled one is history, but says this version could not have carried such a step.
The tools are built as a worker would build them (the module's tools function, with this environment).

exit codes: 0 every step can be carried, 1 some cannot (listed), 2 bad arguments, a module or database that
cannot be used`;

/** Checks; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
): Promise<number> {
  const flags = commandFlags("replay-check", REPLAY_CHECK_USAGE, args, {
    agent: { type: "string" },
    "agent-name": { type: "string" },
    finished: { type: "string" },
    "database-url": { type: "string" },
    "data-dir": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const path = values.agent ?? (env.AGENT || undefined);
  const fail = (problem: string) => {
    console.error(displayText(`replay-check: ${problem}`));
    return 2;
  };
  if (path === undefined) return fail("--agent PATH is needed: the module to check");
  const finished = values.finished === undefined ? 0 : integerIn("--finished", values.finished, 0, 100_000);
  if (typeof finished === "string") return fail(finished);
  const databaseUrl = values["database-url"] ?? (env.DATABASE_URL || undefined);
  const dataDir = values["data-dir"] ?? (env.DATA_DIR || ".data");
  let store: Store | undefined;
  try {
    const { agents } = await loadAgents(path);
    const chosen = agents.filter((a) =>
      values["agent-name"] === undefined || a.name === values["agent-name"]
    );
    if (chosen.length === 0) {
      return fail(`the module has no agent named ${JSON.stringify(values["agent-name"])}`);
    }
    const ctx: AgentContext = { env, dataDir, embedded: !databaseUrl };
    store = await openStore({ databaseUrl, dataDir });
    let problems = 0;
    for (const agent of chosen) {
      const report = await replayCheck(store, agent, { finished, context: ctx });
      problems += report.problems.length;
      for (const line of reportLines(report)) print(displayText(line));
    }
    return problems === 0 ? 0 : 1;
  } catch (err) {
    if (err instanceof ConfigError) return fail(err.problems.join("; "));
    if (err instanceof StoreError) return fail(`${err.code}: ${err.message}`);
    return fail(describeError(err).split("\n")[0]);
  } finally {
    await store?.client.close().catch(() => {});
  }
}

/** The report as printed: a summary line, then one line per step that cannot be carried. */
export function reportLines(report: ReplayReport): string[] {
  const { agent, version, runs, calls, problems } = report;
  const lines = [
    `replay-check  agent=${agent}  version=${version}  runs=${
      runs.open + runs.finished
    } (open ${runs.open}, ` +
    `finished ${runs.finished})  calls=${calls}  cannot_carry=${problems.length}`,
  ];
  for (const p of problems) {
    lines.push(
      `  run=${p.runId}  seq=${p.seq}  tool=${p.tool}  ${p.settled ? "settled" : "to carry out"}  ` +
        `run_version=${p.runVersion ?? "-"}  ${p.problem}`,
    );
  }
  if (problems.length === 0) lines.push(`  every decided step can be carried by ${agent}@${version}`);
  return lines;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
