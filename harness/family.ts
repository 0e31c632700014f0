/**
 * A family of runs in the simulator: a parent agent whose two tools are
 * agents (`agentTool`), each child calling a keyed fake remote once, driven
 * by simulated processes on one PGlite and one manual clock until every run
 * of the family has ended. One incarnation runs at a time, as the one worker
 * host of a small deployment would take them: the oldest takeable run first
 * (pending, abandoned, or woken), and the clock moves to the next wake time
 * when none is takeable. A kill can be aimed at any run's crash point: the
 * first incarnation of that run to reach it is killed there, and the run is
 * taken again by the next.
 *
 * The models are scripted planners that answer from the transcript alone
 * (so a restarted run asks the same), and record every transcript they are
 * shown: what the parent's model received is checked, not only its answer.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import { type Agent, defineAgent } from "../runtime/agent/agent.ts";
import { agentTool } from "../runtime/agent/agent_tool.ts";
import type { CrashPlan, CrashPoint } from "../runtime/base/crashpoints.ts";
import type { Planner } from "../runtime/model/planner.ts";
import type { DecideRequest, PlannerDecision, ToolResultMessage } from "../runtime/model/transcript.ts";
import { defineTool, type Tool } from "../runtime/agent/tools.ts";
import type { RunRow } from "../runtime/store/store.ts";
import type { SimExit, SimWorld } from "./sim.ts";

/** The parent's run id in every family case. */
export const FAMILY_ROOT = "fam";

/** A keyed fake remote: one resource per idempotency key, and every request counted. */
export class KeyedRemote {
  /** Requests per key. */
  readonly requests = new Map<string, number>();
  /** The resource created under each key. */
  readonly created = new Map<string, string>();

  /** Answers a lookup under `key`: the resource created for it, once. */
  lookup(key: string, q: string): { result: string; remote: "created" | "already_done" } {
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
    const known = this.created.get(key);
    if (known !== undefined) return { result: known, remote: "already_done" };
    const made = `found ${q}`;
    this.created.set(key, made);
    return { result: made, remote: "created" };
  }
}

/** What each scripted model was asked, by run: the transcripts, in order. */
export type Asked = Map<string, DecideRequest["transcript"][]>;

/** The results of tool calls in a transcript, by call id. */
function results(transcript: DecideRequest["transcript"]): ToolResultMessage[] {
  return transcript.filter((m): m is ToolResultMessage => m.role === "tool");
}

function recording(asked: Asked, decide: (req: DecideRequest) => PlannerDecision): Planner {
  return {
    describe: "scripted",
    decide: (req) => {
      asked.set(req.runId, [...(asked.get(req.runId) ?? []), req.transcript]);
      return Promise.resolve(decide(req));
    },
  };
}

/** A child's model: one `lookup` of its task, then its answer, `<agent>:<what it found>`. */
export function childPlanner(asked: Asked, agent: string): Planner {
  return recording(asked, (req) => {
    const [found] = results(req.transcript);
    if (!found) {
      const goal = req.transcript.find((m) => m.role === "user");
      return {
        kind: "tool_calls",
        calls: [{ name: "lookup", args: { q: goal?.role === "user" ? goal.text : "?" } }],
        usage: { total_tokens: 10 },
      };
    }
    const text = found.failed ? `${agent} failed: ${found.error}` : `${agent}:${String(found.result)}`;
    return { kind: "done", text, usage: { total_tokens: 10 } };
  });
}

/**
 * The parent's model: both children at once in its first answer, then an
 * answer made of what each child answered, matched to its call by id.
 */
export function parentPlanner(asked: Asked): Planner {
  return recording(asked, (req) => {
    const found = results(req.transcript);
    if (found.length === 0) {
      return {
        kind: "tool_calls",
        calls: [
          { name: "researcher", args: { task: "alpha" } },
          { name: "writer", args: { task: "beta" } },
        ],
        usage: { total_tokens: 10 },
      };
    }
    const said = found.map((r) => `${r.callId}=${r.failed ? `failed(${r.error})` : String(r.result)}`);
    return { kind: "done", text: `summary: ${said.join(" | ")}`, usage: { total_tokens: 10 } };
  });
}

/** The child agents and the parent, with the tools and models the simulated processes give them. */
export interface FamilyAgents {
  /** The parent, whose tools are the two children. */
  parent: Agent;
  /** By agent name: the agent, its tools and its model. */
  byName: Map<string, { agent: Agent; tools: () => Tool[]; planner: () => Planner }>;
}

/** The parent `lead` and its children `researcher` and `writer`, each child calling `remote` once. */
export function familyAgents(
  remote: KeyedRemote,
  asked: Asked,
  opts: { parentBudget?: Agent["budget"]; approval?: boolean } = {},
): FamilyAgents {
  const lookup = defineTool({
    name: "lookup",
    description: "Looks a question up.",
    args: z.strictObject({ q: z.string() }),
    approval: opts.approval,
    run: (args, ctx) => Promise.resolve(remote.lookup(ctx.idempotencyKey, args.q)),
  });
  const child = (name: string) =>
    defineAgent({ name, instructions: `You are the ${name}.`, tools: [lookup], maxSteps: 6 });
  const researcher = child("researcher");
  const writer = child("writer");
  const parent = defineAgent({
    name: "lead",
    instructions: "Ask the researcher and the writer at once, then sum up.",
    tools: [agentTool(researcher, { checkAfterMs: 600_000 }), agentTool(writer, { checkAfterMs: 600_000 })],
    budget: opts.parentBudget,
  });
  const byName = new Map<string, { agent: Agent; tools: () => Tool[]; planner: () => Planner }>([
    ["lead", { agent: parent, tools: () => parent.tools as Tool[], planner: () => parentPlanner(asked) }],
    ["researcher", {
      agent: researcher,
      tools: () => [lookup],
      planner: () => childPlanner(asked, "researcher"),
    }],
    ["writer", { agent: writer, tools: () => [lookup], planner: () => childPlanner(asked, "writer") }],
  ]);
  return { parent, byName };
}

/** Where a kill is aimed: a run of the family, a crash point, a step. */
export interface FamilyKill {
  /** The run whose first incarnation is killed. */
  runId: string;
  /** The crash point. */
  point: CrashPoint;
  /** The step it fires on. */
  seq: number;
}

/** How driving a family went. */
export interface FamilyDrive {
  /** Every incarnation's run and how it ended, in order. */
  exits: { runId: string; exit: SimExit }[];
  /** True when the aimed kill fired where it was aimed. */
  killed: boolean;
  /** Every run in the database at the end, by id. */
  runs: RunRow[];
}

const TAKEABLE = new Set(["pending", "running"]);

/**
 * Drives the family rooted at {@link FAMILY_ROOT} until no run of it can be
 * taken and none waits on a timer (every run ended, or waits for a person),
 * killing the first incarnation of `kill.runId` at its point. Bounded by
 * `maxIncarnations`.
 */
export async function driveFamily(
  world: SimWorld,
  agents: FamilyAgents,
  opts: { kill?: FamilyKill; maxIncarnations?: number; create?: boolean } = {},
): Promise<FamilyDrive> {
  const exits: FamilyDrive["exits"] = [];
  let killed = false;
  const aimed = opts.kill;
  const spawnFor = async (runId: string, agentName: string) => {
    const a = agents.byName.get(agentName);
    if (!a) throw new RangeError(`No agent ${agentName} in the family`);
    // Every incarnation of the aimed run carries the plan until it fires (a parent's later steps are
    // taken by a later incarnation, after it slept on its children).
    const plan: Partial<CrashPlan> | undefined = aimed?.runId === runId && !killed
      ? { crashAt: aimed.point, crashSeq: aimed.seq }
      : undefined;
    const proc = world.spawn({
      runId,
      goal: "sum up alpha and beta",
      plan,
      agent: a.agent,
      tools: a.tools,
      planner: a.planner,
    });
    const exit = await proc.exit;
    exits.push({ runId, exit });
    world.note(
      `--- ${proc.name} on ${runId}: ${exit.kind}${exit.kind === "exited" ? ` ${exit.outcome.status}` : ""}${
        exit.kind === "killed"
          ? ` at ${exit.point} seq=${exit.seq}`
          : exit.kind === "error"
          ? ` ${exit.error}`
          : ""
      }`,
    );
    if (exit.kind === "killed" && plan && exit.point === plan.crashAt && exit.seq === plan.crashSeq) {
      killed = true;
    }
    // The next incarnation comes a second later, on the same clock.
    await world.advance(1_000);
  };
  if (opts.create !== false) await spawnFor(FAMILY_ROOT, agents.parent.name);
  const max = opts.maxIncarnations ?? 60;
  for (let i = 0; i < max; i++) {
    const { runs } = await world.observer.operators.listRuns({ limit: 100 });
    const now = world.clock.now().getTime();
    const due = runs
      .filter((r) =>
        TAKEABLE.has(r.status) ||
        (r.status === "waiting" && r.wake_at && new Date(r.wake_at).getTime() <= now)
      )
      .sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || a.run_id.localeCompare(b.run_id));
    if (due.length > 0) {
      await spawnFor(due[0].run_id, due[0].agent);
      continue;
    }
    const wakes = runs.filter((r) => r.status === "waiting" && r.wake_at).map((r) =>
      new Date(r.wake_at!).getTime()
    );
    if (wakes.length === 0) break;
    await world.advance(Math.max(1, Math.min(...wakes) - now));
  }
  const { runs } = await world.observer.operators.listRuns({ limit: 100 });
  return { exits, killed, runs: runs.sort((a, b) => a.run_id.localeCompare(b.run_id)) };
}
