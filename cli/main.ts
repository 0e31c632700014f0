/**
 * agent-runtime's one entry point, the package's `./cli`: every process (the
 * run command, the worker, the supervisor, the run commands) is a subcommand,
 * so one compiled binary carries them all. A project runs it from its own
 * folder, through its own deno.json (README, "In your own project"):
 *
 * ```sh
 * deno run -A @agent-runtime/agent-runtime/cli run [--agent PATH] ...  # one run in this process (the demo)
 * deno run -A cli/main.ts worker [--agent PATH] ...     # one process hosting many runs
 * deno run -A cli/main.ts supervise [--agent PATH] ...  # keeps WORKERS worker processes alive
 * deno run -A cli/main.ts schedule add|list|pause|resume|remove ...
 * deno run -A cli/main.ts submit|runs|limits|inspect|resolve|settle|approve|deny|cancel|reopen|prune|send|signal ...
 * deno run -A cli/main.ts ui [--host H] [--port N] [--token T] [--read-only]   # the web page
 * deno run -A cli/main.ts dev [--agent PATH] [--port N] [--data-dir DIR]   # the page and a worker, embedded
 * deno run -A cli/main.ts mcp [--agent PATH] [--http]   # the agents as an MCP server
 * deno run -A cli/main.ts migrate|fuzz|compile|crash-matrix|bench ...
 * ```
 *
 * @module
 */

// Each command's module is imported when the command is run, not before: a process loads only what its
// command needs (`runs --help` through this file: 0.53 s of CPU with every command imported at start, against
// 0.30 s for commands.ts alone). The specifiers are literals, so `deno compile` still carries them all.
import type { LoadedAgents } from "./agents.ts";

export type { LoadedAgents } from "./agents.ts";
export { agentsOf } from "../runtime/agent/agent.ts";

/** The usage text of the binary. */
export const USAGE = `agent-runtime: durable AI agents that survive crashes.

usage: agent-runtime COMMAND [--flag value ...]      (deno task COMMAND ... here and in a project with its tasks)

  run           drive one run to its end in this process (no --agent: the demo, on the embedded database)
  worker        one process hosting many runs of the agents in --agent
  supervise     keep WORKERS worker processes alive on PostgreSQL
  submit        create a pending run
  runs          list runs, newest first
  limits        the limits shared by the fleet: use, runs waiting, a provider's hold
  inspect       one run's timeline, step by step
  watch         follow a run as it happens: its answer as the model writes it
  resolve       settle a flagged tool call, or all of one tool or run (--tool, --run)
  settle        settle a tool call that waits on its remote, as a webhook or a person reports it
  cancel        stop a run
  reopen        resume a failed or cancelled run
  approve       approve a tool call that waits for a person
  deny          deny a tool call that waits for a person
  send          send a conversation its next message (--message TEXT), or close it (--end)
  schedule      start an agent's runs on a schedule: add, list, pause, resume, remove
  move          move runs to another version of their agent at their next decision
  replay-check  which decided steps of the runs a new agent module could not carry (before a deploy, in CI)
  fork          a new run whose steps before a seq are another run's, deciding anew (--at-seq N [--model M] [--live])
  eval          cases times variants, each a dry run, scored: a table per variant (--id ID --variant NAME=MODEL ...)
  signal        send a run a named event (RUN NAME [--payload JSON]), taken by a call that waits for it
  migrate       bring the tables up to this program's schema version (every process also does it at start)
  fuzz          crash-fuzz the demo agent under many schedules, checked against the invariants
  compile       build one binary for an agent module (--agent PATH)
  crash-matrix  every crash point on every step of the demo, checked against the invariants
  bench         steps per second and statements per step
  prune         delete finished runs older than a cutoff
  ui            a web page with every run, live, on 127.0.0.1:8787
  dev           the page and a worker in one process on the embedded database: chat from the browser
  mcp           the agents as an MCP server: stdio (Claude Desktop), or --http at /mcp

'agent-runtime COMMAND --help' describes each.`;

/** Runs `args[0]` with the rest of `args`; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  const [command, ...rest] = args;
  switch (command) {
    case "run":
      return await (await import("./run.ts")).main(rest, env, preloaded);
    case "worker":
      return await (await import("./worker.ts")).main(rest, env, preloaded);
    case "supervise":
      return await (await import("./supervise.ts")).main(rest, env, preloaded);
    case "ui":
      return await (await import("../ui/main.ts")).main(rest, env);
    case "dev":
      return await (await import("../ui/dev.ts")).main(rest, env);
    case "mcp":
      return await (await import("./mcp.ts")).main(rest, env, preloaded);
    case "schedule":
      return await (await import("./schedule.ts")).main(rest, env, console.log, preloaded);
    case "migrate":
      return await (await import("./migrate.ts")).main(rest, env);
    case "replay-check":
      return await (await import("./replay_check.ts")).main(rest, env);
    case "fork":
      return await (await import("./fork.ts")).main(rest, env);
    case "eval":
      return await (await import("./eval.ts")).main(rest, env);
    case "compile":
      return await (await import("./compile.ts")).compile(rest);
    case "fuzz":
      return await (await import("./fuzz.ts")).main(rest);
    case "crash-matrix":
      return await (await import("../harness/crash_matrix.ts")).main(rest);
    case "bench":
      return await (await import("../bench/step_bench.ts")).main(rest, env);
    case undefined:
    case "help":
    case "--help":
    case "-h":
      console.log(USAGE);
      return command === undefined ? 2 : 0;
  }
  const commands = await import("./commands.ts");
  if (command in commands.COMMAND_USAGE) return await commands.main(args, env, console.log, preloaded);
  console.error(
    `agent-runtime: unknown command ${JSON.stringify(command)}. ${USAGE.split("\n").slice(-1)[0]}`,
  );
  return 2;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
