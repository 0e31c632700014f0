/**
 * The crash fuzzer: runs an agent on the simulator (simulated processes on
 * one PGlite, a manual clock, in-process remotes) under many schedules, each
 * drawn from a seed, and checks invariant 5 after every one. A schedule is a
 * list of faults, each aimed at a position counted across every process of
 * the schedule:
 *
 * - `kill@stmt#17:before` / `:after`: `kill -9` just before (or after) the
 *   17th store statement; the same at the n-th model or cloud request
 *   (`kill@model#3:after` loses an answer the model was paid for);
 * - `stall@stmt#12+3`: the process freezes before statement 12 (heartbeats
 *   included), the lease runs out, a second worker steals the run, and the
 *   stale worker wakes after the thief's third statement (or when it ends);
 * - `cloud#2:5xx|timeout|drop|garbage`: the 2nd tool request fails, hangs
 *   until the tool times out, acts but loses its answer, or answers garbage;
 * - `model#3:5xx|timeout|garbage|no_choices|unknown_tool|bad_args|...`: the
 *   3rd model answer is broken that way;
 * - `budget=1800:6` (first in the list): the run has a ceiling of 1,800
 *   tokens (and 6 model requests), each answer capped at 200 tokens; and
 *   `usage#2:none|negative|oversized`: the 2nd answer reports no usage, a
 *   negative total, or far more than its request's cap (a server that
 *   ignores it). Every budgeted schedule is checked against the budget's
 *   promise (see {@link checkBudget}).
 * - `approve@stmt#9`, `deny@stmt#9`, `cancel@stmt#9`, `reopen@stmt#9`: a
 *   person answers the run's approval request, cancels or reopens the run
 *   just before the 9th statement; `deny@wait#1`, `cancel@wait#1`: the first
 *   time the run waits for approval, the person denies or cancels instead of
 *   approving (for an agent with a tool that needs approval).
 * - `signal@stmt#9`: a person sends the run the signal its agent waits for
 *   just before the 9th statement (before the wait, while a call looks, or
 *   after it), every send of a schedule under one id (a second is a
 *   duplicate); with no process alive, a run resting on a call that waits for
 *   a signal never sent is sent it (for an agent that waits for one: the
 *   `signals` target), and one that sleeps past a signal sent and untaken is
 *   a lost wake-up.
 * - `parallel=3` (first in the list): the mock model answers up to three
 *   calls at once, so the demo is one step of three calls sent concurrently
 *   and the faults above land inside it (a kill with one call confirmed and
 *   another in flight, a dropped answer to the second call). Each schedule
 *   draws its parallelism (1, 2 or 3) from its seed; its faults are aimed
 *   within the clean run of that parallelism.
 *
 * A failing schedule is shrunk to the fewest faults that still fail and
 * printed with its seed, its faults and the command that replays it
 * (`cli/fuzz.ts` is the command):
 *
 * ```sh
 * deno task fuzz --schedules 10000 --seed 7
 * deno task fuzz --replay '7/kill@stmt#17:after,cloud#2:drop'
 * ```
 *
 * The library lives in `harness/fuzz/`: drawing and writing schedules
 * (`schedule.ts`), running one (`run.ts`, with the person at the run in
 * `person.ts` and the positions statements are known by in `positions.ts`),
 * and the fuzzer's own checks (`check.ts`); the demo as a target is
 * `demo_target.ts`. This module runs many schedules, shrinks failures and
 * reports.
 *
 * @module
 */

import type { Agent, AgentContext } from "../runtime/agent/agent.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import { childAgentOf } from "../runtime/agent/agent_tool.ts";
import type { FetchLike } from "../runtime/model/planner.ts";
import { defineTool, type Tool, ToolRegistry } from "../runtime/agent/tools.ts";
import { type PlantedDefects, plantInToolContext, type ToolPlantOptions } from "./defects.ts";
import { SimDb } from "./sim.ts";
import type { FuzzSignal } from "./fuzz/person.ts";
import { renameOf } from "./fuzz/versions.ts";

export type { FuzzSignal };
import {
  type AgentFactory,
  type ChildAgent,
  FUZZ_ATTEMPTS,
  FUZZ_TIMEOUT_MS,
  runSchedule,
  type ScheduleResult,
  type Target,
  type TargetClean,
  Turns,
} from "./fuzz/run.ts";
import {
  type CleanRun,
  decodeSchedule,
  drawBudget,
  drawLimits,
  drawOutage,
  drawParallel,
  drawSchedule,
  drawVersion,
  encodeFault,
  encodeSchedule,
  type Fault,
  FAULT_FAMILIES,
  type FaultFamily,
  FuzzError,
  MAX_PARALLEL,
  PARALLELS,
  type Schedule,
  scheduleSeed,
} from "./fuzz/schedule.ts";

export * from "./fuzz/schedule.ts";
export { checkBudget } from "./fuzz/check.ts";
export type { AgentFactory, ScheduleResult } from "./fuzz/run.ts";
export { DEMO_APPROVAL_TOOL, demoAgent } from "./fuzz/demo_target.ts";
export { JOB_TARGET_DURATIONS_MS, jobsAgent } from "./fuzz/jobs_target.ts";
export { teamAgent } from "./fuzz/team_target.ts";
export { SIGNALS_TARGET_SIGNAL, signalsAgent } from "./fuzz/signals_target.ts";
export { mcpAgent } from "./fuzz/mcp_target.ts";

/** Options of {@link fuzz}. */
export interface FuzzOptions {
  /** Schedules to run. Default 100. */
  schedules?: number;
  /**
   * Group commit in every simulated process (`GROUP_COMMIT_MS`: the bound on
   * a write's wait), when the fuzzer opens its own database. Default 0: off.
   */
  groupCommitMs?: number;
  /** The master seed; each schedule's seed is drawn from it. Default 1. */
  seed?: number;
  /** Fault families to draw from. Default all of {@link FAULT_FAMILIES}. */
  faults?: readonly FaultFamily[];
  /** Most faults in one schedule (at least one is drawn). Default 4. */
  maxFaults?: number;
  /**
   * Calls per answer the schedules draw from, one each (the mock model's
   * `parallel`): 2 and 3 make steps of several calls. Default
   * {@link PARALLELS}, `[1, 2, 3]`; `[1]` is one call a step throughout.
   */
  parallel?: readonly number[];
  /**
   * Draws each schedule from its seed and the clean run instead of the
   * default draw (which uses `faults` and `maxFaults`): {@link drawApprovalRace}
   * aims every schedule at the approval race. The schedule runs at the
   * parallelism drawn for it (the clean run given is that one's) unless it
   * sets its own.
   */
  draw?: (seed: number, clean: CleanRun) => Schedule;
  /** Runs exactly this schedule (the `--replay` form, or a {@link Schedule}) instead of drawing any. */
  replay?: string | Schedule;
  /**
   * A tool of the agent whose every call needs a person's approval (the
   * fuzzer makes it so), to put approvals in the schedules. An agent whose
   * own tools need approval has them there anyway: a clean run that waits
   * for a person adds the `approval` family to the default draw.
   */
  approvalTool?: string;
  /**
   * The signal the agent waits for (a `waitForSignal` tool of it): a person
   * sends it whenever the run rests waiting for it, and the `signal` family
   * sends it between statements (before the wait, during it, after it), every
   * send under one id.
   */
  signal?: FuzzSignal;
  /** What answers the tools: a fresh `FakeRemote` (fake_remote.ts) per schedule (default) or the demo's mock cloud. */
  remote?: "fake" | "mock-cloud";
  /** Goal of each run. Default: the agent's default input, else a generic goal. */
  goal?: string;
  /** Keep going after the first failure (each still shrunk). Default false. */
  keepGoing?: boolean;
  /** Shrink failures. Default true. */
  shrink?: boolean;
  /** Keep every schedule's transcript in the report. Default false (only failures keep theirs). */
  transcript?: boolean;
  /** Bugs planted in every process (the fuzzer's own tests). */
  defects?: PlantedDefects;
  /** Prefix of the printed replay command. Default `deno task fuzz --replay`. */
  replayCommand?: string;
  /** A database to reuse (one PGlite per test file); opened and closed by the fuzzer when omitted. */
  db?: SimDb;
  /** Called after each schedule (progress). */
  onSchedule?: (result: ScheduleResult, index: number) => void;
}

/** A failing schedule, shrunk. */
export interface FuzzFailure {
  /** The schedule as drawn. */
  original: ScheduleResult;
  /** The fewest faults that still fail. */
  shrunk: ScheduleResult;
  /** Schedules run while shrinking. */
  shrinkRuns: number;
  /** The report, as printed: seed, faults, problems, replay command. */
  text: string;
}

/** What a fuzz found and covered. */
export interface FuzzReport {
  /** The master seed. */
  seed: number;
  /** Schedules run (not counting shrinking). */
  schedules: number;
  /** Failures, shrunk. */
  failures: FuzzFailure[];
  /** Wall time of the schedules (not of opening the database). */
  elapsedMs: number;
  /** Faults that fired, by kind (`kill@stmt:before`, `cloud:drop`, ...). */
  kinds: Record<string, number>;
  /** Distinct positions hit: fault kind x what it hit (`kill@stmt:after journal-confirm`, ...). */
  positions: number;
  /** Faults drawn that never fired (aimed past the run's end). */
  notReached: number;
  /** Schedules run at each parallelism (calls per answer). */
  parallel: Record<number, number>;
  /** Schedules run under limits shared by the fleet (`limits`). */
  limited: number;
  /**
   * Schedules with a deploy under the run (`version`), by how it went: the run
   * carried on by version 2, handed back by it and finished by version 1, or
   * never driven by version 2 (it ended before the first restart).
   */
  deployed: { carried: number; refused: number; stayed: number };
  /** Every schedule's transcript, joined, when {@link FuzzOptions.transcript} is set. */
  transcript?: string[];
}

/** `value`, or what it resolves to, given to `then`: at once when it is no promise (no turn added). */
function andThen<T, R>(value: T | Promise<T>, then: (v: T) => R | Promise<R>): R | Promise<R> {
  return value instanceof Promise ? value.then(then) : then(value);
}

async function resolveTarget(factory: AgentFactory, opts: FuzzOptions): Promise<Target> {
  const probe = factory(() => Promise.reject(new Error("probe")));
  // Built in each simulated process with that process's context (an MCP server's tools are listed
  // there, and closed when it dies); the probe's are built once here, then let go.
  const toolsOf = (agent: Agent, ctx: AgentContext): Tool[] | Promise<Tool[]> =>
    Array.isArray(agent.tools) ? agent.tools : agent.tools(ctx);
  const probeStop = new AbortController();
  const probeCtx: AgentContext = {
    env: {},
    dataDir: ".",
    embedded: true,
    log: new Logger({ clock: new ManualClock(0), sink: discardSink }),
    signal: probeStop.signal,
  };
  let probeTools: Tool[];
  try {
    probeTools = await toolsOf(probe, probeCtx);
  } finally {
    probeStop.abort();
  }
  // Retry budgets the faults cannot exhaust, and short timeouts (each hung request costs clock wakes).
  const wrap = (built: Tool[], plant: ToolPlantOptions) =>
    built.map((t) =>
      defineTool({
        name: t.name,
        description: t.description,
        args: t.args,
        parameters: t.parameters,
        idempotent: t.idempotent,
        timeoutMs: Math.min(t.timeoutMs, FUZZ_TIMEOUT_MS),
        maxAttempts: FUZZ_ATTEMPTS,
        approval: (args) => t.name === opts.approvalTool || t.needsApproval(args),
        // A planted bug in the request's key (the fuzzer's own tests) is planted here, outside the runtime.
        run: (args, ctx) => {
          // Synchronous unless a defect must read the journal: an unplanted run interleaves as it would bare.
          const planted = plantInToolContext(ctx, opts.defects ?? {}, plant);
          return planted instanceof Promise ? planted.then((c) => t.run(args, c)) : t.run(args, planted);
        },
        reconcile: t.reconcile,
        reconcileTimeoutMs: Math.min(t.reconcileTimeoutMs, FUZZ_TIMEOUT_MS),
        waitDeadlineMs: t.waitDeadlineMs,
      })
    );
  const tools = (fetch: FetchLike, plant: ToolPlantOptions, ctx: AgentContext) =>
    andThen(toolsOf(factory(fetch), ctx), (built) => wrap(built, plant));
  // The agents the target's tools start runs of (agentTool): the fuzzer's world hosts them too.
  const childOf = (agent: Agent, name: string, ctx: AgentContext) =>
    andThen(toolsOf(agent, ctx), (built) => built.map(childAgentOf).find((c) => c?.name === name)!);
  const children = new Map<string, ChildAgent>();
  for (const child of probeTools.map(childAgentOf)) {
    if (!child || children.has(child.name)) continue;
    children.set(child.name, {
      agent: child,
      tools: (fetch, plant, ctx) =>
        andThen(
          childOf(factory(fetch), child.name, ctx),
          (c) => andThen(toolsOf(c, ctx), (t) => wrap(t, plant)),
        ),
    });
  }
  const names = probeTools.map((t) => t.name);
  if (opts.approvalTool !== undefined && !names.includes(opts.approvalTool)) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'approvalTool' must name a tool of agent ${probe.name} (${names.join(", ")}): ` +
        `current value is ${opts.approvalTool}`,
    );
  }
  const goal = opts.goal ??
    (typeof probe.defaultInput === "string"
      ? probe.defaultInput
      : "Use each of your tools once, then finish.");
  return {
    agent: probe,
    tools,
    remote: opts.remote ?? "fake",
    goal,
    defects: opts.defects,
    approvalTool: opts.approvalTool,
    ...(opts.signal ? { signal: opts.signal } : {}),
    registry: new ToolRegistry(wrap(probeTools, {})),
    rename: renameOf(names, [opts.signal?.tool, opts.approvalTool]),
    clean: new Map(),
    ...(children.size > 0 ? { children } : {}),
  };
}

/**
 * The families to draw from: those asked for, else all of them, the
 * `approval` family only when the run asks for approval (a tool made to need
 * it, or a clean run that waited). Throws `FUZZ_OPTION_INVALID` when asked
 * for it on a run that never asks.
 */
function approvalFamilies(
  target: Target,
  requested: readonly FaultFamily[] | undefined,
): readonly FaultFamily[] {
  const asks = target.approvalTool !== undefined ||
    [...target.clean.values()].some((c) => (c.waits ?? 0) > 0);
  if (requested?.includes("approval") && !asks) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz with the 'approval' family as agent ${target.agent.name} never asks for approval: ` +
        `give a tool 'approval', or name one in 'approvalTool'`,
    );
  }
  if (requested?.includes("version") && target.children !== undefined) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz with the 'version' family as agent ${target.agent.name} starts child runs: a deploy ` +
        `under a family is the version-switch matrix's (harness/version_switch_test.ts)`,
    );
  }
  if (requested?.includes("signal") && !target.signal) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz with the 'signal' family as agent ${target.agent.name} waits for no signal: give 'signal'`,
    );
  }
  return requested ??
    FAULT_FAMILIES.filter((f) =>
      (f !== "approval" || asks) && (f !== "signal" || target.signal !== undefined) &&
      (f !== "version" || target.children === undefined)
    );
}

/**
 * Reduces a failing schedule to the fewest faults that still fail: drops
 * faults one at a time while the schedule keeps failing, until no single
 * fault can go (at most n^2 runs for n faults); then tries it without its
 * budget and with fewer calls per answer (down to 1), keeping each change
 * that still fails. The seed, the budget and the parallelism stay as they
 * are while faults are dropped.
 */
async function shrink(
  failing: ScheduleResult,
  runOne: (s: Schedule) => Promise<ScheduleResult>,
): Promise<{ result: ScheduleResult; runs: number }> {
  let best = failing;
  let runs = 0;
  const attempt = async (s: Schedule): Promise<boolean> => {
    const r = await runOne(s);
    runs++;
    if (r.problems.length === 0) return false;
    best = r;
    return true;
  };
  // Never-fired faults change nothing: drop them first.
  const firedOnly = best.schedule.faults.filter((_, i) => best.fired[i] !== undefined);
  if (firedOnly.length < best.schedule.faults.length) await attempt({ ...best.schedule, faults: firedOnly });
  let progress = true;
  // Bounded: each round removes a fault or ends.
  while (progress && best.schedule.faults.length > 0) {
    progress = false;
    for (let i = 0; i < best.schedule.faults.length; i++) {
      const faults = best.schedule.faults.filter((_, j) => j !== i);
      if (await attempt({ ...best.schedule, faults })) {
        progress = true;
        break;
      }
    }
  }
  if (best.schedule.budget !== undefined) {
    const { budget: _, ...unbudgeted } = best.schedule;
    await attempt(unbudgeted);
  }
  if (best.schedule.limits) {
    const { limits: _, ...unlimited } = best.schedule;
    await attempt(unlimited);
  }
  // Bounded by MAX_PARALLEL: each pass lowers the parallelism by one, or ends.
  for (let p = (best.schedule.parallel ?? 1) - 1; p >= 1; p--) {
    const { parallel: _, ...rest } = best.schedule;
    if (!await attempt(p === 1 ? rest : { ...rest, parallel: p })) break;
  }
  return { result: best, runs };
}

function describeFailure(
  index: number,
  original: ScheduleResult,
  shrunk: ScheduleResult,
  replayCommand: string,
): string {
  return [
    `seed=${shrunk.schedule.seed} schedule=${index} FAILED`,
    `  drawn:  ${
      [
        ...((original.schedule.parallel ?? 1) > 1 ? [`parallel=${original.schedule.parallel}`] : []),
        ...(original.schedule.limits ? ["limits"] : []),
        ...original.schedule.faults.map(encodeFault),
      ].join(", ") || "(no faults)"
    }`,
    `  shrunk: ${shrunk.schedule.faults.length} fault(s): ${
      shrunk.schedule.faults.map((f, i) => `${encodeFault(f)} -> ${shrunk.fired[i] ?? "not reached"}`).join(
        ", ",
      ) ||
      "(no faults)"
    }${(shrunk.schedule.parallel ?? 1) > 1 ? ` (${shrunk.schedule.parallel} calls per answer)` : ""}${
      shrunk.schedule.limits ? " (under limits)" : ""
    }`,
    ...shrunk.problems.map((p) => `  problem: ${p}`),
    `  replay: ${replayCommand} '${encodeSchedule(shrunk.schedule)}'`,
  ].join("\n");
}

function kindOf(f: Fault): string {
  return f.kind === "kill"
    ? `kill@${f.at}:${f.when}`
    : f.kind === "stall"
    ? "stall"
    : f.kind === "person"
    ? `${f.act}@${f.at}`
    : f.kind === "outage"
    ? `outage@${f.at}`
    : `${f.kind}:${f.fault}`;
}

/**
 * Fuzzes an agent: runs `schedules` schedules drawn from `seed` on the
 * simulator, each a list of kills, stalls and remote faults, and checks after
 * every one that the run looks as if one worker ran it alone (invariant 5,
 * the model's spend, no write by a fenced worker). Failures are shrunk to the
 * fewest faults that still fail. `agent` builds the agent for one process
 * from the fetch its tools must use: a `FakeRemote` (fake_remote.ts) by default.
 *
 * @example
 * ```ts
 * import { demoAgent, fuzz } from "./fuzz.ts";
 * const report = await fuzz(demoAgent, { schedules: 5, seed: 42, remote: "mock-cloud" });
 * console.log(report.failures.length); // 0
 * ```
 */
export async function fuzz(agent: AgentFactory, opts: FuzzOptions = {}): Promise<FuzzReport> {
  const schedules = opts.schedules ?? 100;
  const seed = opts.seed ?? 1;
  const maxFaults = opts.maxFaults ?? 4;
  const requested = opts.faults;
  if (!Number.isInteger(schedules) || schedules < 0) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'schedules' must be a non-negative integer: current value is ${schedules}`,
    );
  }
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'seed' must be a non-negative integer: current value is ${seed}`,
    );
  }
  if (!Number.isInteger(maxFaults) || maxFaults < 1) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'maxFaults' must be a positive integer: current value is ${maxFaults}`,
    );
  }
  if (requested && (requested.length === 0 || requested.some((f) => !FAULT_FAMILIES.includes(f)))) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'faults' must name some of ${FAULT_FAMILIES.join(", ")}: current value is ${
        requested.join(",")
      }`,
    );
  }
  const levels = opts.parallel ?? PARALLELS;
  if (
    levels.length === 0 || levels.some((p) => !Number.isInteger(p) || p < 1 || p > MAX_PARALLEL)
  ) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz as 'parallel' must list calls per answer from 1 to ${MAX_PARALLEL}: current value is ${
        levels.join(",")
      }`,
    );
  }
  const replay = typeof opts.replay === "string" ? decodeSchedule(opts.replay) : opts.replay;
  const target = await resolveTarget(agent, opts);
  const db = opts.db ?? await SimDb.open({ groupCommitMs: opts.groupCommitMs });
  const turns = new Turns();
  const replayCommand = opts.replayCommand ?? "deno task fuzz --replay";
  try {
    const counter = { runs: 0 };
    const runOne = (s: Schedule) => runSchedule(db, target, s, turns, `fz-${s.seed}`, counter);
    // The clean run at each parallelism: what every schedule must end as, and where its faults can land.
    const measured = [...new Set([...levels, replay?.parallel ?? 1])].sort((a, b) => a - b);
    for (const parallel of measured) {
      const clean = await runOne(parallel === 1 ? { seed, faults: [] } : { seed, faults: [], parallel });
      if (clean.problems.length > 0) {
        throw new FuzzError(
          "FUZZ_TARGET_INVALID",
          `The agent does not pass a run without faults${
            parallel === 1 ? "" : ` at ${parallel} calls per answer`
          }:\n  ${clean.problems.join("\n  ")}\n${clean.transcript.join("\n")}`,
        );
      }
    }
    const cleanAt = (parallel: number): TargetClean => target.clean.get(parallel)!;
    const families = approvalFamilies(target, requested);
    const started = performance.now();
    const report: FuzzReport = {
      seed,
      schedules: 0,
      failures: [],
      elapsedMs: 0,
      kinds: {},
      positions: 0,
      notReached: 0,
      parallel: {},
      limited: 0,
      deployed: { carried: 0, refused: 0, stayed: 0 },
      transcript: opts.transcript ? [] : undefined,
    };
    const positions = new Set<string>();
    const plan: Schedule[] = replay !== undefined ? [replay] : Array.from(
      { length: schedules },
      (_, i) => {
        const s = scheduleSeed(seed, i);
        const parallel = drawParallel(s, levels);
        const at = (drawn: Schedule): Schedule => parallel === 1 ? drawn : { parallel, ...drawn };
        if (opts.draw) return at(opts.draw(s, cleanAt(parallel)));
        const drawn = drawSchedule(s, cleanAt(parallel), families, maxFaults);
        const budgeted = families.includes("budget") ? drawBudget(drawn, cleanAt(parallel)) : drawn;
        const limited = families.includes("limits") ? drawLimits(budgeted) : budgeted;
        const deployed = families.includes("version") ? drawVersion(limited) : limited;
        return at(families.includes("outage") ? drawOutage(deployed, cleanAt(parallel)) : deployed);
      },
    );
    for (let i = 0; i < plan.length; i++) {
      const result = await runOne(plan[i]);
      report.schedules++;
      const parallel = result.schedule.parallel ?? 1;
      report.parallel[parallel] = (report.parallel[parallel] ?? 0) + 1;
      if (result.schedule.limits) report.limited++;
      if (result.deploy) report.deployed[result.deploy]++;
      report.transcript?.push(...result.transcript);
      result.schedule.faults.forEach((f, j) => {
        const where = result.fired[j];
        if (where === undefined) {
          report.notReached++;
          return;
        }
        report.kinds[kindOf(f)] = (report.kinds[kindOf(f)] ?? 0) + 1;
        // The position: the kind and what it hit (statement kind, or remote and path), not the process.
        // A fault inside a step of several calls is another position than the same fault in a one-call step.
        positions.add(
          `${kindOf(f)} ${where.replace(/^\S+ /, "").replace(/ \(w\d+\)$/, "")}${
            parallel > 1 ? ` parallel=${parallel}` : ""
          }`,
        );
      });
      opts.onSchedule?.(result, i);
      if (result.problems.length > 0) {
        const { result: shrunk, runs } = opts.shrink === false || replay !== undefined
          ? { result, runs: 0 }
          : await shrink(result, runOne);
        report.failures.push({
          original: result,
          shrunk,
          shrinkRuns: runs,
          text: describeFailure(i, result, shrunk, replayCommand),
        });
        if (!opts.keepGoing) break;
      }
    }
    report.positions = positions.size;
    report.elapsedMs = performance.now() - started;
    return report;
  } finally {
    turns.close();
    if (!opts.db) await db.close();
  }
}
