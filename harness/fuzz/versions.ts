/**
 * The `version` family: a deploy under the run. A schedule with `version`
 * starts on version 1 of the target's agent (its runs may move,
 * `onNewVersion: "move"`); every later incarnation is a worker of version 2,
 * whose last tool acting on the world is renamed (`<name>_v2`, declaring it
 * `replaces` the old name) and, where its arguments are a zod object, given
 * a `ttl` argument with a default, so version 2 sends a different request
 * for a call version 1 decided. A call version 1 sent and did not settle is
 * then refused by version 2 (the run goes back to version 1, `moved`), and
 * every later incarnation is a worker of version 1 again (version 2 does
 * not take that run back), as a rollout keeps old workers until their runs
 * are done. Each such schedule is held to the
 * same checks as any other, its renamed calls read under their old name.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import type { Agent, AgentContext } from "../../runtime/agent/agent.ts";
import { defineTool, type Tool } from "../../runtime/agent/tools.ts";
import type { FetchLike } from "../../runtime/model/planner.ts";
import type { SimExit } from "../sim.ts";

/** What version 2 renames: the old name and the new. */
export interface VersionRename {
  from: string;
  to: string;
}

/**
 * The tool version 2 renames: the last one of `names` that is neither the
 * tool waiting for a signal nor the one needing approval (the demo's
 * `create_dns_record`, the signals agent's `create_server`).
 */
export function renameOf(names: readonly string[], keep: readonly (string | undefined)[]): VersionRename {
  const from = [...names].reverse().find((n) => !keep.includes(n)) ?? names.at(-1)!;
  return { from, to: `${from}_v2` };
}

/** Versions 1 and 2 of a schedule's agent: the same agent, its own version each, its runs free to move. */
export function versionsOf(agent: Agent): { v1: Agent; v2: Agent } {
  return {
    v1: { ...agent, version: "1", onNewVersion: "move" },
    v2: { ...agent, version: "2", onNewVersion: "move" },
  };
}

/** Version 2's tools: the given ones, `rename.from` renamed, replacing it, and given a `ttl` with a default. */
export function versionTwoTools(built: readonly Tool[], rename: VersionRename): Tool[] {
  return built.map((t) => {
    if (t.name !== rename.from) return t;
    const args = t.args instanceof z.ZodObject
      ? t.args.extend({ ttl: z.number().int().min(60).default(300) })
      : t.args;
    return defineTool({
      name: rename.to,
      description: t.description,
      args,
      ...(args === t.args ? { parameters: t.parameters } : {}),
      idempotent: t.idempotent,
      timeoutMs: t.timeoutMs,
      maxAttempts: t.maxAttempts,
      approval: (a) => t.needsApproval(a),
      replaces: [rename.from],
      run: (a, ctx) => t.run(a, ctx),
      reconcile: t.reconcile,
      reconcileTimeoutMs: t.reconcileTimeoutMs,
      waitDeadlineMs: t.waitDeadlineMs,
    });
  });
}

/**
 * The version the next incarnation runs, given the exits of those before
 * it: 1 for the first, and for every one after a worker of version 2 handed
 * the run back (`moved`: it could not carry a call version 1 sent; no worker
 * of version 2 takes that run again unless an operator moves it); else 2.
 */
export function nextVersion(before: readonly (SimExit | undefined)[]): 1 | 2 {
  if (before.length === 0) return 1;
  return before.some((e) => e?.kind === "exited" && e.outcome.status === "moved") ? 1 : 2;
}

/** Tools of one process as the fuzzer builds them. */
export type ProcessTools = (fetch: FetchLike, ctx: AgentContext) => Tool[] | Promise<Tool[]>;
