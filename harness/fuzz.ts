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
 *
 * A failing schedule is shrunk to the fewest faults that still fail and
 * printed with its seed, its faults and the command that replays it:
 *
 * ```sh
 * deno task fuzz --schedules 10000 --seed 7
 * deno task fuzz --replay '7/kill@stmt#17:after,cloud#2:drop'
 * ```
 *
 * @module
 */

import { DEMO_GOAL } from "../examples/provision/agent.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { type Agent, defineAgent } from "../runtime/agent.ts";
import { commandFlags } from "../runtime/config.ts";
import { DEFAULT_RETRY } from "../runtime/context.ts";
import type { PlantedDefects } from "../runtime/defects.ts";
import { Client, ClientError } from "../runtime/client.ts";
import { ownCode, RuntimeError } from "../runtime/errors.ts";
import { SimulatedKill } from "../runtime/crashpoints.ts";
import { argsHash } from "../runtime/executor.ts";
import type { FetchLike } from "../runtime/planner.ts";
import type {
  ApprovalRow,
  QueryOptions,
  RunStatus,
  SideEffectRow,
  SqlClient,
} from "../runtime/store/store.ts";
import { defineTool, type Json, type Tool, ToolRegistry } from "../runtime/tools.ts";
import type { ModelFaultMode } from "../mock/model.ts";
import { FakeRemote } from "./fake_remote.ts";
import { spendOf } from "../runtime/budget.ts";
import { checkModelSpend, checkShape, type ModelSpend } from "./invariants.ts";
import {
  type ProcessHooks,
  type RunSnapshot,
  seededRandom,
  SIM_CLOUD_URL,
  SimDb,
  type SimExit,
  type SimProcess,
  SimWorld,
} from "./sim.ts";

/** How a tool request is broken. */
export type CloudFault = "5xx" | "timeout" | "drop" | "garbage";
/** How a model answer is broken: the mock model's broken answers, a 5xx, or no answer in time. */
export type ModelFault = "5xx" | "timeout" | ModelFaultMode;

/** Every {@link CloudFault}. */
export const CLOUD_FAULTS: readonly CloudFault[] = ["5xx", "timeout", "drop", "garbage"];
/** Every {@link ModelFault}. */
export const MODEL_FAULTS: readonly ModelFault[] = [
  "5xx",
  "timeout",
  "garbage",
  "no_choices",
  "unknown_tool",
  "bad_args",
  "bad_json_args",
  "multi_tool",
];

/** How an answer's usage report is wrong: missing, a negative total, or far past the request's cap. */
export type UsageFault = "none" | "negative" | "oversized";
/** Every {@link UsageFault}. */
export const USAGE_FAULTS: readonly UsageFault[] = ["none", "negative", "oversized"];
/** What a person does to a run: answers its approval request, cancels it, or reopens it. */
export type PersonAct = "approve" | "deny" | "cancel" | "reopen";
/** Every {@link PersonAct}. */
export const PERSON_ACTS: readonly PersonAct[] = ["approve", "deny", "cancel", "reopen"];

/** One fault of a schedule, aimed at a position counted across all its processes (from 1). */
export type Fault =
  | { kind: "kill"; at: "stmt" | "model" | "cloud"; n: number; when: "before" | "after" }
  | { kind: "stall"; n: number; wake: number }
  | { kind: "cloud"; n: number; fault: CloudFault }
  | { kind: "model"; n: number; fault: ModelFault }
  | { kind: "usage"; n: number; fault: UsageFault }
  /** Before the n-th statement, or (`wait`) instead of approving at the n-th time the run waits. */
  | { kind: "person"; act: PersonAct; at: "stmt" | "wait"; n: number };

/**
 * The families of faults a fuzz may draw from (`budget`: a ceiling on the run,
 * and usage faults; `approval`: a person's acts, for an agent with a tool that
 * needs approval).
 */
export type FaultFamily = "kill" | "stall" | "cloud" | "model" | "budget" | "approval";
/** Every {@link FaultFamily}. */
export const FAULT_FAMILIES: readonly FaultFamily[] = [
  "kill",
  "stall",
  "cloud",
  "model",
  "budget",
  "approval",
];

/** A schedule's budget: a token ceiling with each answer's cap, and maybe a ceiling on model requests. */
export interface ScheduleBudget {
  tokens: number;
  maxOutputTokens: number;
  modelCalls?: number;
}

/** A schedule: a seed (the processes' jitter), the faults, and a budget on the run. */
export interface Schedule {
  seed: number;
  faults: Fault[];
  budget?: ScheduleBudget;
}

/** A fuzzer input was wrong (`FUZZ_OPTION_INVALID`, `FUZZ_REPLAY_INVALID`, `FUZZ_TARGET_INVALID`). */
export class FuzzError extends RuntimeError {
  /** Creates a fuzzer error. */
  constructor(code: "FUZZ_OPTION_INVALID" | "FUZZ_REPLAY_INVALID" | "FUZZ_TARGET_INVALID", message: string) {
    super(ownCode(code), message);
    this.name = "FuzzError";
  }
}

/** One fault in the compact form `kill@stmt#17:before`, `stall@stmt#12+3`, `cloud#2:drop`, `model#3:garbage`. */
export function encodeFault(f: Fault): string {
  switch (f.kind) {
    case "kill":
      return `kill@${f.at}#${f.n}:${f.when}`;
    case "stall":
      return `stall@stmt#${f.n}+${f.wake}`;
    case "person":
      return `${f.act}@${f.at}#${f.n}`;
    default:
      return `${f.kind}#${f.n}:${f.fault}`;
  }
}

/** A schedule in the compact form `<seed>/<fault>,<fault>` that `--replay` reads (a budget first). */
export function encodeSchedule(s: Schedule): string {
  return `${s.seed}/${[...encodeBudget(s.budget), ...s.faults.map(encodeFault)].join(",")}`;
}

/** Reads {@link encodeSchedule}'s form (or the JSON of a {@link Schedule}). Throws `FUZZ_REPLAY_INVALID`. */
export function decodeSchedule(text: string): Schedule {
  const bad = (why: string) =>
    new FuzzError(
      "FUZZ_REPLAY_INVALID",
      `Cannot replay ${JSON.stringify(text)}: ${why}. Expected '<seed>/<fault>,...' as the fuzzer prints it`,
    );
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) {
    let parsed: Schedule;
    try {
      parsed = JSON.parse(trimmed);
    } catch (err) {
      throw bad(`it is not JSON (${(err as Error).message})`);
    }
    return decodeSchedule(encodeSchedule(parsed));
  }
  let budget: ScheduleBudget | undefined;
  const slash = trimmed.indexOf("/");
  if (slash < 0) throw bad("there is no '/' after the seed");
  const seed = Number(trimmed.slice(0, slash));
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw bad(`the seed ${trimmed.slice(0, slash)} is not an integer`);
  }
  const faults: Fault[] = [];
  const rest = trimmed.slice(slash + 1);
  for (const part of rest === "" ? [] : rest.split(",")) {
    let m: RegExpMatchArray | null;
    if ((m = part.match(/^kill@(stmt|model|cloud)#(\d+):(before|after)$/))) {
      faults.push({
        kind: "kill",
        at: m[1] as "stmt" | "model" | "cloud",
        n: Number(m[2]),
        when: m[3] as "before" | "after",
      });
    } else if ((m = part.match(/^stall@stmt#(\d+)\+(\d+)$/))) {
      faults.push({ kind: "stall", n: Number(m[1]), wake: Number(m[2]) });
    } else if ((m = part.match(/^cloud#(\d+):(\w+)$/)) && CLOUD_FAULTS.includes(m[2] as CloudFault)) {
      faults.push({ kind: "cloud", n: Number(m[1]), fault: m[2] as CloudFault });
    } else if ((m = part.match(/^model#(\d+):(\w+)$/)) && MODEL_FAULTS.includes(m[2] as ModelFault)) {
      faults.push({ kind: "model", n: Number(m[1]), fault: m[2] as ModelFault });
    } else if ((m = part.match(/^usage#(\d+):(\w+)$/)) && USAGE_FAULTS.includes(m[2] as UsageFault)) {
      faults.push({ kind: "usage", n: Number(m[1]), fault: m[2] as UsageFault });
    } else if (budget === undefined && faults.length === 0 && (budget = decodeBudget(part)) !== undefined) {
      // The budget, first in the list.
    } else if ((m = part.match(/^(approve|deny|cancel|reopen)@(stmt|wait)#(\d+)$/))) {
      faults.push({ kind: "person", act: m[1] as PersonAct, at: m[2] as "stmt" | "wait", n: Number(m[3]) });
    } else {
      throw bad(`the fault ${JSON.stringify(part)} is not one the fuzzer knows`);
    }
  }
  return budget === undefined ? { seed, faults } : { seed, faults, budget };
}

/** Builds the agent under test for one process, its tools sending through `fetch` (the fake remote). */
export type AgentFactory = (fetch: FetchLike) => Agent;

/** Options of {@link fuzz}. */
export interface FuzzOptions {
  /** Schedules to run. Default 100. */
  schedules?: number;
  /** The master seed; each schedule's seed is drawn from it. Default 1. */
  seed?: number;
  /** Fault families to draw from. Default all of {@link FAULT_FAMILIES}. */
  faults?: readonly FaultFamily[];
  /** Most faults in one schedule (at least one is drawn). Default 4. */
  maxFaults?: number;
  /**
   * Draws each schedule from its seed and the clean run instead of the
   * default draw (which uses `faults` and `maxFaults`): {@link drawApprovalRace}
   * aims every schedule at the approval race.
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
  /** What answers the tools: a fresh {@link FakeRemote} per schedule (default) or the demo's mock cloud. */
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

/** The outcome of one schedule. */
export interface ScheduleResult {
  schedule: Schedule;
  /** Violations found; empty is a pass. */
  problems: string[];
  /** Each fault as encoded, with where it landed (`undefined`: never reached). */
  fired: (string | undefined)[];
  /** Processes the schedule started. */
  incarnations: number;
  /** Every line the processes and the fuzzer logged. */
  transcript: string[];
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
  /** Every schedule's transcript, joined, when {@link FuzzOptions.transcript} is set. */
  transcript?: string[];
}

/** Upper bounds that keep every loop finite. */
const MAX_INCARNATIONS = 24;
const MAX_TICKS = 2_000;
/** The fuzzer's timeouts: short, so a hung request costs few clock wakes. */
const FUZZ_TIMEOUT_MS = 5_000;
/** Retry budgets the injected faults can never exhaust (exhausting one is designed behaviour, not a bug). */
const FUZZ_ATTEMPTS = 64;
const HEARTBEAT_MS = 3_000;
const LEASE_MS = 12_000;

/** A macrotask turn: every microtask chain (PGlite and the in-process remotes answer in them) has run. */
class Turns {
  readonly #channel = new MessageChannel();
  #waiting: (() => void)[] = [];
  constructor() {
    this.#channel.port1.onmessage = () => this.#waiting.shift()?.();
  }
  next(): Promise<void> {
    return new Promise((resolve) => {
      this.#waiting.push(resolve);
      this.#channel.port2.postMessage(0);
    });
  }
  close(): void {
    this.#channel.port1.close();
    this.#channel.port2.close();
  }
}

/** What the fuzzer is pointed at, resolved once. */
interface Target {
  agent: Agent;
  tools: (fetch: FetchLike) => Tool[];
  remote: "fake" | "mock-cloud";
  goal: string;
  defects?: PlantedDefects;
  /** The clean run: the tools in order, its statements and requests, the tokens it costs, how often it waits. */
  clean?: CleanRun & { tools: string[]; steps: number };
  /** The tool the fuzzer made need approval, if any. */
  approvalTool?: string;
  /** The tools as the fuzzer runs them, to check calls against (their schemas, whether they need approval). */
  registry: ToolRegistry;
}

/** What a clean run (no faults) of the target does: where a schedule's faults can land. */
export interface CleanRun {
  /** Store statements, across its processes. */
  stmts: number;
  /** Model requests. */
  model: number;
  /** Tool requests. */
  cloud: number;
  /** Tokens the model billed. */
  tokens: number;
  /** Times the run waited for a person (0 unless a tool needs approval). */
  waits?: number;
  /** The statement count when it first waited: the next worker's turn starts after it. */
  firstWaitStmt?: number;
}

/** A process as the fuzzer follows it. */
interface Proc {
  sim?: SimProcess;
  name: string;
  epoch?: number;
  /** Ended: exited, or killed (a killed process may never settle its promise). */
  done: boolean;
  exit?: SimExit;
  killedAt?: string;
  /** The journal intent whose answer is not yet written down. */
  open?: { sent: boolean };
  /** An answer counted lost at the process's end, which a statement still in flight may yet write down. */
  lostSent?: boolean;
  /** Set while frozen: every statement and request waits on it. */
  frozen?: Promise<void>;
}

/** Classifies a statement for positions and accounting. */
function statementLabel(text: string): string {
  const t = text.trimStart();
  if (t.startsWith("insert into journal")) return "journal-intent";
  if (t.startsWith("update journal set rejections")) return "journal-reject";
  if (t.startsWith("update journal set status = 'confirmed'")) return "journal-confirm";
  if (t.startsWith("insert into side_effects")) return "tool-intent";
  if (t.startsWith("update side_effects set status = 'confirmed'")) return "tool-confirm";
  if (t.startsWith("update side_effects set status = $4")) return "tool-settle";
  if (t.startsWith("update runs set epoch = epoch + 1")) return "claim";
  // A claim from epoch 0 writes epoch 1 and sends nothing back (Store.claimRun).
  if (t.startsWith("update runs set epoch = 1,")) return "first-claim";
  if (t.startsWith("update runs set heartbeat_at")) return "heartbeat";
  if (t.startsWith("update runs set status = $3")) return "finish";
  if (t.startsWith("with created as")) return "create-or-get";
  if (t.startsWith("select 'j' as tbl")) return "read-history";
  if (t.startsWith("select * from side_effects")) return "read-tool";
  if (t.startsWith("select * from runs")) return "read-run";
  if (t.startsWith("with run as (")) return "approval-request";
  if (t.startsWith("select * from approvals")) return "approval-read";
  return "other";
}

const WRITES = new Set([
  "journal-intent",
  "journal-reject",
  "journal-confirm",
  "tool-intent",
  "tool-confirm",
  "tool-settle",
  "heartbeat",
  "finish",
  "approval-request",
]);

/** One schedule being run. */
class ScheduleRun {
  readonly problems: string[] = [];
  readonly fired: (string | undefined)[];
  readonly procs: Proc[] = [];
  readonly spend: ModelSpend = {
    retried: 0,
    lost: 0,
    unsent: 0,
    uncounted: 0,
    transientFaults: 0,
    badAnswerFaults: 0,
    interruptions: 0,
  };
  stmt = 0;
  model = 0;
  cloud = 0;
  maxEpoch = 0;
  activity = 0;
  frozen?: { proc: Proc; release: () => void; wake: number; thief?: Proc; thiefStart: number };
  /** Every model answer of a budgeted schedule, as the budget check needs it. */
  readonly answers: BudgetAnswer[] = [];
  /** The person at the run: answers its approval requests, and acts where the schedule says. */
  person?: Person;
  readonly #world: SimWorld;
  readonly #faults: Fault[];
  readonly #budget?: ScheduleBudget;
  readonly #target: Target;
  readonly #setRemoteFaults: (spec: Record<string, number>) => void;

  constructor(
    world: SimWorld,
    schedule: Schedule,
    target: Target,
    setRemoteFaults: (spec: Record<string, number>) => void,
  ) {
    this.#world = world;
    this.#faults = schedule.faults;
    this.#budget = schedule.budget;
    this.#target = target;
    this.fired = schedule.faults.map(() => undefined);
    this.#setRemoteFaults = setRemoteFaults;
  }

  /** The index of the not-yet-fired fault matching `pick`, or -1. */
  #find(pick: (f: Fault) => boolean): number {
    return this.#faults.findIndex((f, i) => this.fired[i] === undefined && pick(f));
  }

  /** Fires the not-yet-fired fault matching `pick` at `where`, and returns it. */
  take(pick: (f: Fault) => boolean, where: string): Fault | undefined {
    const i = this.#find(pick);
    if (i < 0) return undefined;
    this.#fire(i, where);
    return this.#faults[i];
  }

  #fire(i: number, where: string): void {
    this.fired[i] = where;
    const f = this.#faults[i];
    this.#world.note(`~~~ fault ${encodeFault(f)} fired at ${where}`);
    // A cancel stops the worker as a kill does: an answer it was waiting to write down is lost.
    if (f.kind === "kill" || f.kind === "stall" || (f.kind === "person" && f.act === "cancel")) {
      this.spend.interruptions++;
    }
    if (f.kind === "model") {
      if (f.fault === "5xx" || f.fault === "timeout") this.spend.transientFaults++;
      else this.spend.badAnswerFaults++;
    }
  }

  async #kill(
    p: Proc,
    point: `${"stmt" | "model" | "cloud"}:${number}:${"before" | "after"}`,
  ): Promise<never> {
    p.killedAt = point;
    this.#end(p);
    const err = new SimulatedKill(point, -1);
    await p.sim!.kill(err);
    throw err;
  }

  /** A process is gone: an answer it was waiting to write down is lost. */
  #end(p: Proc): void {
    if (p.done) return;
    p.done = true;
    this.activity++;
    if (p.open && stoppedByBudget(p)) {
      // A request that failed (a 5xx, a timeout) and whose retry the budget refused: retried, not lost.
      this.spend.retried++;
      p.open = undefined;
    }
    if (p.open) {
      this.spend.lost++;
      if (!p.open.sent) this.spend.unsent++;
      else p.lostSent = true;
      p.open = undefined;
    }
  }

  #maybeWake(): void {
    const f = this.frozen;
    if (f?.thief && (this.stmt - f.thiefStart >= f.wake || f.thief.done)) {
      this.frozen = undefined;
      this.#world.note(`~~~ ${f.proc.name} wakes`);
      f.release();
    }
  }

  #freeze(p: Proc, wake: number): Promise<void> {
    let release!: () => void;
    p.frozen = new Promise<void>((r) => release = r);
    this.frozen = {
      proc: p,
      wake,
      thiefStart: 0,
      release: () => {
        p.frozen = undefined;
        release();
      },
    };
    return p.frozen;
  }

  hooks(p: Proc): ProcessHooks {
    return {
      defects: this.#target.defects,
      retry: { ...DEFAULT_RETRY, maxModelAttempts: FUZZ_ATTEMPTS, modelTimeoutMs: FUZZ_TIMEOUT_MS },
      wrapStore: (client, sim) => {
        p.sim = sim;
        return this.#wrapStore(p, client);
      },
      wrapFetch: (remote, fetch, sim) => {
        p.sim = sim;
        return this.#wrapFetch(p, remote, fetch);
      },
    };
  }

  #wrapStore(p: Proc, client: SqlClient): SqlClient {
    // Both ways of sending a statement go through the same faults; `written`
    // says how many rows a statement wrote (its rows, or run()'s count).
    const faulted = async <R>(
      text: string,
      send: () => Promise<R>,
      written: (r: R) => number,
    ): Promise<R> => {
      // Bounded: a frozen process waits for one release per freeze.
      while (p.frozen) await p.frozen;
      if (p.done) return await send();
      const n = ++this.stmt;
      const label = statementLabel(text);
      this.#maybeWake();
      const stall = this.#find((f) => f.kind === "stall" && f.n === n);
      if (stall >= 0 && !this.frozen) {
        this.#fire(stall, `stmt#${n} ${label} (${p.name})`);
        const f = this.#faults[stall] as Extract<Fault, { kind: "stall" }>;
        await this.#freeze(p, f.wake);
        if (p.done) return await send();
      }
      await this.person?.beforeStatement(n, `stmt#${n} ${label} (${p.name})`);
      const before = this.#find((f) =>
        f.kind === "kill" && f.at === "stmt" && f.n === n && f.when === "before"
      );
      if (before >= 0) {
        this.#fire(before, `stmt#${n} ${label} (${p.name})`);
        await this.#kill(p, `stmt:${n}:before`);
      }
      const epochAtExec = this.maxEpoch;
      this.activity++;
      const result = await send();
      this.activity++;
      this.#observe(p, label, result, written(result), epochAtExec);
      const after = this.#find((f) =>
        f.kind === "kill" && f.at === "stmt" && f.n === n && f.when === "after"
      );
      if (after >= 0) {
        this.#fire(after, `stmt#${n} ${label} (${p.name})`);
        await this.#kill(p, `stmt:${n}:after`);
      }
      return result;
    };
    return {
      describe: client.describe,
      exec: (text) => client.exec(text),
      close: () => client.close(),
      query: <T>(text: string, params?: unknown[], opts?: QueryOptions): Promise<T[]> =>
        faulted(text, () => client.query<T>(text, params, opts), (rows) => rows.length),
      run: (text: string, params?: unknown[]): Promise<number> =>
        faulted(text, () => client.run(text, params), (count) => count),
    };
  }

  #observe(p: Proc, label: string, result: unknown, written: number, epochAtExec: number): void {
    const first = Array.isArray(result) ? (result[0] as Record<string, unknown> | undefined) : undefined;
    const claimed = label === "claim" && typeof first?.epoch === "number"
      ? first.epoch
      : label === "first-claim" && written > 0
      ? 1
      : undefined;
    if (claimed !== undefined) {
      p.epoch = claimed;
      this.maxEpoch = Math.max(this.maxEpoch, claimed);
    }
    if (WRITES.has(label) && written > 0 && p.epoch !== undefined && p.epoch < epochAtExec) {
      this.problems.push(
        `stale worker ${p.name} (epoch ${p.epoch}) wrote after epoch ${epochAtExec} was claimed: ${label}`,
      );
    }
    if (label === "journal-intent" && written > 0) {
      if (p.open) this.spend.retried++;
      p.open = { sent: false };
      // In flight when its process was killed (as a statement the server received may commit after a
      // kill -9): the attempt is counted, and its request will never go out.
      if (p.done) {
        this.spend.lost++;
        this.spend.unsent++;
        p.open = undefined;
      }
    }
    if ((label === "journal-confirm" || label === "journal-reject") && written > 0) {
      p.open = undefined;
      // Committed while its process was being killed: the answer was written down after all.
      if (p.done && p.lostSent) {
        this.spend.lost--;
        p.lostSent = false;
      }
    }
  }

  #wrapFetch(p: Proc, remote: "model" | "cloud", fetch: FetchLike): FetchLike {
    return async (req) => {
      // Bounded: a frozen process waits for one release per freeze.
      while (p.frozen) await p.frozen;
      if (p.done || p.sim?.dead) return await fetch(req);
      if (remote === "cloud") await this.person?.checkSend(req, p.name);
      const n = remote === "model" ? ++this.model : ++this.cloud;
      const where = `${remote}#${n} ${remote === "cloud" ? new URL(req.url).pathname : "chat"} (${p.name})`;
      const before = this.#find((f) =>
        f.kind === "kill" && f.at === remote && f.n === n && f.when === "before"
      );
      if (before >= 0) {
        this.#fire(before, where);
        await this.#kill(p, `${remote}:${n}:before`);
      }
      if (remote === "model") {
        if (p.open) p.open.sent = true;
        else {
          this.spend.uncounted++;
          this.problems.push(`${p.name} sent model request #${n} with no journal intent counting it`);
        }
      }
      const fault = this.#find((f) => f.kind === remote && f.n === n);
      if (fault >= 0) {
        this.#fire(fault, where);
        const f = this.#faults[fault] as Extract<Fault, { kind: "cloud" | "model" }>;
        if (f.kind === "cloud") {
          this.#setRemoteFaults(
            {
              "5xx": { fail_next: 1, fail_status: 503 },
              timeout: { hang_next: 1 },
              drop: { drop_after_act_next: 1 },
              garbage: { garbage_next: 1 },
            }[f.fault],
          );
        } else {
          const model = this.#world.model;
          if (f.fault === "5xx") model.setFaults({ fail_next: 1, fail_status: 503 });
          else if (f.fault === "timeout") model.setFaults({ hang_next: 1 });
          else model.setFaults({ mode: f.fault, mode_next: 1 });
        }
      }
      const sent = remote === "model" && this.#budget ? await req.clone().text() : undefined;
      let res = await fetch(req);
      if (sent !== undefined) res = await this.#budgetAnswer(n, sent, res, where);
      const after = this.#find((f) =>
        f.kind === "kill" && f.at === remote && f.n === n && f.when === "after"
      );
      if (after >= 0) {
        this.#fire(after, where);
        await this.#kill(p, `${remote}:${n}:after`);
      }
      return res;
    };
  }

  /**
   * A budgeted schedule's model answer: its usage report rewritten when a
   * usage fault is aimed at it, and logged with what its request reserved
   * (the prompt at four characters a token plus the cap asked for, as the
   * README states it), what the server billed and what it reported.
   */
  async #budgetAnswer(n: number, sent: string, res: Response, where: string): Promise<Response> {
    const text = await res.text();
    let answer: { usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } };
    try {
      answer = JSON.parse(text);
    } catch {
      return new Response(text, { status: res.status, headers: res.headers });
    }
    const real = answer.usage;
    if (!res.ok || real === undefined) {
      return new Response(text, { status: res.status, headers: res.headers });
    }
    const body = JSON.parse(sent) as { messages: unknown[]; tools?: unknown[]; max_tokens?: number };
    const reserved =
      Math.ceil((JSON.stringify(body.messages).length + JSON.stringify(body.tools ?? []).length) / 4) +
      (body.max_tokens ?? 0);
    let billed = real.total_tokens;
    const fault = this.#find((f) => f.kind === "usage" && f.n === n);
    if (fault >= 0) {
      this.#fire(fault, where);
      const kind = (this.#faults[fault] as Extract<Fault, { kind: "usage" }>).fault;
      if (kind === "none") delete answer.usage;
      else if (kind === "negative") answer.usage = { ...real, total_tokens: -real.total_tokens };
      else {
        // A server that ignores the cap: it wrote (and billed) four times what it was allowed.
        const completion = 4 * (body.max_tokens ?? 200);
        answer.usage = {
          ...real,
          completion_tokens: completion,
          total_tokens: real.prompt_tokens + completion,
        };
        billed = real.prompt_tokens + completion;
      }
    }
    this.answers.push({ reserved, billed, reported: answer.usage });
    return Response.json(answer, { status: res.status });
  }

  /** Starts the next incarnation. */
  spawn(runId: string): Proc {
    const p: Proc = { name: `w${this.procs.length + 1}`, done: false };
    this.procs.push(p);
    const sim = this.#world.spawn({ name: p.name, runId, goal: this.#target.goal, hooks: this.hooks(p) });
    p.sim = sim;
    sim.exit.then((exit) => {
      p.exit = exit;
      this.#end(p);
      this.#maybeWake();
    });
    return p;
  }
}

// --- The person at the run: approvals, cancels and reopens (the `approval` family) ---

/**
 * The person at a run that asks for approvals. With no process alive it
 * answers a waiting run's request (approve, unless the schedule aims a
 * `deny@wait` or `cancel@wait` at this wait) and reopens a cancelled run;
 * between statements it acts where the schedule aims an act. It checks the two
 * invariants of approvals as the run goes: no run waits on a request already
 * answered (nothing would ever wake it), and a call of a tool that needs
 * approval goes out only with an approval for its exact arguments.
 */
class Person {
  /** Times the run was found waiting for a person. */
  waits = 0;
  /** The statement count when the run first waited (where the next worker's turn begins). */
  firstWaitStmt?: number;
  readonly #run: ScheduleRun;
  readonly #world: SimWorld;
  readonly #client: Client;
  readonly #runId: string;
  readonly #tools: ToolRegistry;
  readonly #checkSends: boolean;

  constructor(
    opts: { run: ScheduleRun; world: SimWorld; runId: string; tools: ToolRegistry; checkSends: boolean },
  ) {
    this.#run = opts.run;
    this.#world = opts.world;
    this.#client = new Client(opts.world.observer, opts.world.clock);
    this.#runId = opts.runId;
    this.#tools = opts.tools;
    this.#checkSends = opts.checkSends;
  }

  /** Before statement `n`: the act the schedule aims there, if any. */
  async beforeStatement(n: number, where: string): Promise<void> {
    const f = this.#run.take((f) => f.kind === "person" && f.at === "stmt" && f.n === n, where);
    if (f?.kind === "person") this.#world.note(`~~~ person: ${await this.#act(f.act)}`);
  }

  /**
   * With no process alive: reopens a cancelled run, answers a waiting one.
   * Returns whether it acted (a worker may take the run up again).
   */
  async atRest(status: RunStatus | undefined): Promise<boolean> {
    if (status === "cancelled") {
      this.#world.note(`~~~ person: ${await this.#act("reopen")}`);
      return true;
    }
    if (status !== "waiting") return false;
    const requests = await this.#world.observer.listApprovals(this.#runId);
    if (!requests.some((r) => r.status === "pending")) {
      this.#run.problems.push(
        `run ${this.#runId} waits, yet its approval requests are all answered (${
          requests.map((r) => `${r.idempotency_key} ${r.status}`).join(", ")
        }): nothing will ever wake it`,
      );
      return false;
    }
    const n = ++this.waits;
    this.firstWaitStmt ??= this.#run.stmt;
    const aimed = this.#run.take((f) => f.kind === "person" && f.at === "wait" && f.n === n, `wait#${n}`);
    this.#world.note(`~~~ person: ${await this.#act(aimed?.kind === "person" ? aimed.act : "approve")}`);
    return true;
  }

  /** Does `act` through the client, as a person would, and says what came of it. */
  async #act(act: PersonAct): Promise<string> {
    const runId = this.#runId;
    try {
      if (act === "cancel") {
        return `cancel: run ${(await this.#client.cancel(runId, { by: "person" })).status}`;
      }
      if (act === "reopen") return `reopen: run ${(await this.#client.reopen(runId)).status}`;
      const requests = await this.#world.observer.listApprovals(runId);
      const request = requests.find((r) => r.status === "pending") ?? requests.at(-1);
      if (!request) return `${act}: no request yet`;
      const key = request.idempotency_key;
      const answered = act === "approve"
        ? await this.#client.approve(key, { by: "person" })
        : await this.#client.deny(key, { by: "person", reason: "the schedule says no" });
      return `${act} ${key}: ${answered.status}, run ${answered.run_status}`;
    } catch (err) {
      if (err instanceof ClientError) return `${act}: ${err.code}`;
      throw err;
    }
  }

  #needsApproval(e: { tool: string; args: Json }): boolean {
    const checked = this.#tools.check(e.tool, e.args);
    return checked.ok && checked.tool.needsApproval(checked.args);
  }

  /** What the run's requests say of a call: `approved`, `denied`, `pending`, or that none is for its arguments. */
  async #answerFor(e: SideEffectRow, requests?: ApprovalRow[]): Promise<string> {
    const request = requests
      ? requests.find((r) => r.idempotency_key === e.idempotency_key)
      : await this.#world.observer.getApproval(e.idempotency_key);
    if (!request) return "no request";
    return request.args_hash === await argsHash(e.args) ? request.status : "a request for other arguments";
  }

  /** As a tool request goes out: if its call needs approval, it must hold one for its exact arguments. */
  async checkSend(req: Request, proc: string): Promise<void> {
    if (!this.#checkSends) return;
    const key = req.headers.get("idempotency-key");
    const effect = key === null ? undefined : await this.#world.observer.getEffect(key);
    if (!effect || !this.#needsApproval(effect)) return;
    const answer = await this.#answerFor(effect);
    if (answer !== "approved") {
      this.#run.problems.push(
        `${proc} sent ${key} (${effect.tool}) with ${answer}, not an approval of its arguments`,
      );
    }
  }

  /**
   * After the run: every call that needs approval was sent only if approved
   * for its exact arguments, and refused unsent only if denied. Returns the
   * keys a person denied (their calls end `failed`, never sent).
   */
  async afterRun(final: RunSnapshot): Promise<Set<string>> {
    const requests = await this.#world.observer.listApprovals(this.#runId);
    const denied = new Set<string>();
    for (const e of final.effects.filter((e) => this.#needsApproval(e))) {
      const answer = await this.#answerFor(e, requests);
      if (e.attempts > 0 && answer !== "approved") {
        this.#run.problems.push(
          `tool call ${e.idempotency_key} (${e.tool}) was sent ${e.attempts} time(s) with ${answer}, ` +
            `not an approval of its arguments`,
        );
      }
      if (e.attempts === 0 && e.status === "failed") {
        if (answer === "denied") denied.add(e.idempotency_key);
        else this.#run.problems.push(`tool call ${e.idempotency_key} was refused unsent with ${answer}`);
      }
    }
    return denied;
  }
}

/** The demo's tool that `deno task fuzz` makes need a person's approval. */
export const DEMO_APPROVAL_TOOL = "create_database";

/** The demo agent as a fuzz target: its three cloud tools against the given fetch. */
export const demoAgent: AgentFactory = (fetch) =>
  defineAgent({
    name: "provision",
    instructions: "You are an agent that completes the user's goal by calling tools, one call per answer. " +
      "When the goal is complete, answer with a short summary and no tool call.",
    tools: demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }),
    maxSteps: 12,
    defaultInput: DEMO_GOAL,
  });

function resolveTarget(factory: AgentFactory, opts: FuzzOptions): Target {
  const probe = factory(() => Promise.reject(new Error("probe")));
  const toolsOf = (agent: Agent): Tool[] => {
    if (Array.isArray(agent.tools)) return agent.tools;
    const built = (agent.tools as (ctx: unknown) => Tool[] | Promise<Tool[]>)({
      env: {},
      dataDir: ".",
      embedded: true,
    });
    if (built instanceof Promise) {
      throw new FuzzError(
        "FUZZ_TARGET_INVALID",
        `Cannot fuzz agent ${agent.name} as its tools are built asynchronously: give the factory's agent a tools array`,
      );
    }
    return built;
  };
  toolsOf(probe);
  // Retry budgets the faults cannot exhaust, and short timeouts (each hung request costs clock wakes).
  const tools = (fetch: FetchLike) =>
    toolsOf(factory(fetch)).map((t) =>
      defineTool({
        name: t.name,
        description: t.description,
        args: t.args,
        idempotent: t.idempotent,
        timeoutMs: Math.min(t.timeoutMs, FUZZ_TIMEOUT_MS),
        maxAttempts: FUZZ_ATTEMPTS,
        approval: (args) => t.name === opts.approvalTool || t.needsApproval(args),
        run: (args, ctx) => t.run(args, ctx),
        reconcile: t.reconcile,
        reconcileTimeoutMs: Math.min(t.reconcileTimeoutMs, FUZZ_TIMEOUT_MS),
      })
    );
  const names = toolsOf(probe).map((t) => t.name);
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
    registry: new ToolRegistry(tools(() => Promise.reject(new Error("probe")))),
  };
}

/** Runs one schedule in a fresh world on `db` and checks it. */
async function runSchedule(
  db: SimDb,
  target: Target,
  schedule: Schedule,
  turns: Turns,
  runId: string,
  counter: { runs: number },
): Promise<ScheduleResult> {
  // Deleting is ten times cheaper than truncating (0.6 ms against 5.6 ms on PGlite), but leaves dead
  // rows that slow every statement down; a truncate every 64 schedules keeps the tables small.
  await db.db.exec(
    ++counter.runs % 64 === 0
      ? "truncate runs, journal, side_effects, workers, approvals"
      : "delete from approvals; delete from side_effects; delete from journal; delete from runs; delete from workers",
  );
  const fake = target.remote === "fake" ? new FakeRemote() : undefined;
  const world = await SimWorld.open(db, {
    seed: schedule.seed,
    agent: budgeted(target.agent, schedule.budget),
    tools: target.tools,
    remote: fake?.fetch,
    heartbeatMs: HEARTBEAT_MS,
    leaseMs: LEASE_MS,
  });
  const run = new ScheduleRun(
    world,
    schedule,
    target,
    (spec) => fake ? fake.setFaults(spec) : world.cloud.setFaults(spec),
  );
  run.person = new Person({
    run,
    world,
    runId,
    tools: target.registry,
    // Tool requests are checked as they go out once the run is known to ask for approval.
    checkSends: target.approvalTool !== undefined || (target.clean?.waits ?? 0) > 0,
  });
  world.note(`=== schedule ${encodeSchedule(schedule)} run=${runId}`);
  const settle = () => turns.next();
  const earlier: RunSnapshot[] = [];
  let closed = false;
  for (let tick = 0; tick < MAX_TICKS; tick++) {
    await turns.next();
    const frozen = run.frozen;
    if (frozen && !frozen.thief) {
      // The frozen worker's lease runs out; a second worker steals the run.
      await world.advance(LEASE_MS + 1_000, { settle });
      world.note(`~~~ ${frozen.proc.name} is frozen past its lease: a second worker steals the run`);
      frozen.thiefStart = run.stmt;
      frozen.thief = run.spawn(runId);
      continue;
    }
    const live = run.procs.filter((p) => !p.done);
    if (live.length === 0) {
      earlier.push(await snapshot(world, runId, fake));
      const status = earlier.at(-1)!.run?.status;
      if (await run.person.atRest(status)) continue;
      if (status !== "running" && status !== "pending" && status !== undefined) {
        closed = true;
        break;
      }
      if (run.procs.length >= MAX_INCARNATIONS) {
        run.problems.push(`the run was still ${status} after ${MAX_INCARNATIONS} incarnations`);
        break;
      }
      await world.advance(1_000, { settle });
      run.spawn(runId);
      continue;
    }
    if (live.every((p) => p.frozen)) {
      if (frozen) frozen.release();
      continue;
    }
    // Every live process waits on the clock (backoff, a timeout, a heartbeat): wake the next sleeper.
    const next = world.clock.nextWakeAtMs;
    if (next === undefined) {
      run.problems.push(`${live.map((p) => p.name).join(",")} wait for something that never comes`);
      break;
    }
    await world.advance(Math.max(0, next - world.clock.now().getTime()), { settle });
  }
  if (!closed && run.problems.length === 0) {
    run.problems.push(`the schedule did not end within ${MAX_TICKS} ticks`);
  }
  for (const p of run.procs) {
    if (p.exit?.kind === "error" && !p.killedAt) run.problems.push(`${p.name} failed: ${p.exit.error}`);
  }
  const final = earlier.at(-1) ?? await snapshot(world, runId, fake);
  const clean = target.clean;
  const denied = await run.person.afterRun(final);
  run.problems.push(
    ...checkShape(final, {
      runId,
      steps: clean?.steps ?? final.journal.length,
      earlier,
      resultIsId: target.remote === "mock-cloud",
      tools: clean?.tools,
      budgetStop: schedule.budget !== undefined,
      denied,
    }),
    ...checkModelSpend(final, run.spend),
    ...checkBudget(final, schedule.budget, run.answers),
  );
  for (const p of run.procs.filter((p) => !p.done)) p.sim?.kill();
  world.model.releaseHung();
  world.cloud.releaseHung();
  const fired = run.fired;
  world.note(
    `--- ${encodeSchedule(schedule)}: ${
      run.problems.length === 0 ? "passed" : "FAILED"
    } incarnations=${run.procs.length} fired=${fired.filter((f) => f !== undefined).length}/${fired.length}`,
  );
  for (const problem of run.problems) world.note(`    problem: ${problem}`);
  if (clean === undefined) {
    target.clean = {
      tools: final.journal.flatMap((j) => j.decision && "tool" in j.decision ? [j.decision.tool] : []),
      steps: final.journal.length,
      stmts: run.stmt,
      model: run.model,
      cloud: run.cloud,
      tokens: world.model.tokens(runId),
      waits: run.person.waits,
      firstWaitStmt: run.person.firstWaitStmt,
    };
  }
  return {
    schedule,
    problems: run.problems,
    fired,
    incarnations: run.procs.length,
    transcript: world.transcript,
  };
}

async function snapshot(world: SimWorld, runId: string, fake: FakeRemote | undefined): Promise<RunSnapshot> {
  const s = await world.snapshot(runId);
  if (!fake) return s;
  const prefix = `${runId}:`;
  return {
    ...s,
    created: fake.effects().filter((e) => e.key.startsWith(prefix)).map((e) => ({
      key: e.key,
      kind: "server",
      id: e.id,
      payload: {},
      created_at: "",
    })),
    requestsByKey: Object.fromEntries(
      Object.entries(fake.requestsByKey()).filter(([key]) => key.startsWith(prefix)),
    ),
  };
}

/** Draws one schedule from `seed`, aimed within a clean run's statements and requests (and a little past). */
export function drawSchedule(
  seed: number,
  clean: CleanRun,
  families: readonly FaultFamily[],
  maxFaults: number,
): Schedule {
  const random = seededRandom(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)];
  const upTo = (n: number) => 1 + Math.floor(random() * Math.max(1, n));
  const count = 1 + Math.floor(random() * random() * maxFaults);
  const faults: Fault[] = [];
  // A budget is drawn on its own (drawBudget), not as one of these faults.
  const drawn = families.filter((f) => f !== "budget");
  if (drawn.length === 0) return { seed, faults };
  // Bounded: each pass adds a fault or skips a duplicate position.
  for (let i = 0; i < count * 4 && faults.length < count; i++) {
    const family = pick(drawn);
    let f: Fault;
    if (family === "kill") {
      const at = pick(["stmt", "stmt", "stmt", "model", "cloud"] as const);
      const n = upTo(
        Math.ceil((at === "stmt" ? clean.stmts : at === "model" ? clean.model : clean.cloud) * 1.5),
      );
      f = { kind: "kill", at, n, when: random() < 0.5 ? "before" : "after" };
    } else if (family === "stall") {
      f = { kind: "stall", n: upTo(Math.ceil(clean.stmts * 1.2)), wake: Math.floor(random() * 8) };
    } else if (family === "cloud") {
      f = { kind: "cloud", n: upTo(Math.ceil(clean.cloud * 1.5)), fault: pick(CLOUD_FAULTS) };
    } else if (family === "approval") {
      f = drawPersonAct(random, clean);
    } else {
      f = { kind: "model", n: upTo(Math.ceil(clean.model * 1.5)), fault: pick(MODEL_FAULTS) };
    }
    // A person acts at most once per position (and not where a process is killed or frozen).
    const at = (x: Fault) =>
      x.kind === "kill"
        ? `${x.at}#${x.n}`
        : x.kind === "stall"
        ? `stmt#${x.n}`
        : x.kind === "person"
        ? `${x.at}#${x.n}`
        : `${x.kind}#${x.n}`;
    if (faults.some((x) => at(x) === at(f))) continue;
    faults.push(f);
  }
  return { seed, faults };
}

// --- Budgets: a ceiling on the run, usage faults, and what the budget promises ---

/** A budgeted schedule's model answer, as the fuzzer saw it at the process's boundary. */
interface BudgetAnswer {
  /** What its request reserved: the prompt at four characters a token, plus the cap it asked for. */
  reserved: number;
  /** What the server billed for it. */
  billed: number;
  /** The usage it reported (after any usage fault). */
  reported: unknown;
}

/** The budget's part of the compact form: `budget=<tokens>` or `budget=<tokens>:<model calls>`. */
function encodeBudget(b: ScheduleBudget | undefined): string[] {
  if (!b) return [];
  return [`budget=${b.tokens}${b.modelCalls === undefined ? "" : `:${b.modelCalls}`}`];
}

/** Reads {@link encodeBudget}'s form, or undefined when `part` is not one. */
function decodeBudget(part: string): ScheduleBudget | undefined {
  const m = part.match(/^budget=(\d+)(?::(\d+))?$/);
  if (!m) return undefined;
  const budget: ScheduleBudget = { tokens: Number(m[1]), maxOutputTokens: BUDGET_ANSWER_CAP };
  return m[2] === undefined ? budget : { ...budget, modelCalls: Number(m[2]) };
}

/** The cap on each answer of a budgeted schedule: above what the mock model writes (about 40 tokens). */
const BUDGET_ANSWER_CAP = 200;

/**
 * Gives about half the schedules a budget drawn from their seed (from a
 * stream of its own, so the other faults are drawn as before): a token
 * ceiling between half and three times the clean run's bill, sometimes a
 * ceiling on model requests near the clean run's count, and up to two usage
 * faults on the run's answers.
 */
export function drawBudget(schedule: Schedule, clean: { model: number; tokens: number }): Schedule {
  const random = seededRandom(schedule.seed ^ 0x5bd1e995);
  if (random() < 0.5) return schedule;
  const tokens = Math.max(1, Math.round(clean.tokens * (0.5 + random() * 2.5)));
  const modelCalls = random() < 0.3 ? clean.model + Math.floor(random() * 3) : undefined;
  const budget: ScheduleBudget = {
    tokens,
    maxOutputTokens: BUDGET_ANSWER_CAP,
    ...(modelCalls ? { modelCalls } : {}),
  };
  const faults = [...schedule.faults];
  const usage = Math.floor(random() * 3);
  for (let i = 0; i < usage; i++) {
    const n = 1 + Math.floor(random() * Math.max(1, Math.ceil(clean.model * 1.5)));
    if (faults.some((f) => f.kind === "usage" && f.n === n)) continue;
    faults.push({ kind: "usage", n, fault: USAGE_FAULTS[Math.floor(random() * USAGE_FAULTS.length)] });
  }
  return { seed: schedule.seed, faults, budget };
}

/** True when the process ended by its run's budget (`BUDGET_EXCEEDED`), not by a kill or a fence. */
function stoppedByBudget(p: Proc): boolean {
  return p.exit?.kind === "exited" && p.exit.outcome.status === "failed" &&
    /^BUDGET_EXCEEDED: /.test(p.exit.outcome.error ?? "");
}

/** The fuzz target's agent with the schedule's budget, if it has one. */
function budgeted(agent: Agent, budget: ScheduleBudget | undefined): Agent {
  return budget ? { ...agent, budget } : agent;
}

/**
 * What the README promises of a budget, checked on a budgeted schedule's
 * end: the run either finished or stopped with `BUDGET_EXCEEDED`; the model
 * requests stay within their ceiling; and the tokens, counted by the runtime
 * and billed by the server, pass the token ceiling only by what answers
 * billed beyond their requests' reservations (a server ignoring the cap).
 * No answer counts less than it cost, lost ones included, but for what a lost
 * answer billed beyond its reservation.
 */
export function checkBudget(
  final: RunSnapshot,
  budget: ScheduleBudget | undefined,
  answers: readonly BudgetAnswer[],
): string[] {
  if (!budget) return [];
  const problems: string[] = [];
  const run = final.run;
  if (run?.status === "failed" && !/^BUDGET_EXCEEDED: /.test(run.error ?? "")) {
    problems.push(`a budgeted run failed for another reason: ${run.error}`);
  }
  if (budget.modelCalls !== undefined && final.modelCalls > budget.modelCalls) {
    problems.push(`the model was asked ${final.modelCalls} times, the ceiling is ${budget.modelCalls}`);
  }
  const counted = spendOf(final.journal, final.effects).tokens;
  const billed = answers.reduce((n, a) => n + a.billed, 0);
  const beyond = answers.reduce((n, a) => n + Math.max(0, a.billed - a.reserved), 0);
  if (billed > budget.tokens + beyond) {
    problems.push(
      `the model billed ${billed} tokens against a ceiling of ${budget.tokens}, past it by more than the ` +
        `${beyond} its answers billed beyond their reservations`,
    );
  }
  if (counted > budget.tokens + beyond) {
    problems.push(
      `the run counts ${counted} tokens against a ceiling of ${budget.tokens} (+${beyond} beyond)`,
    );
  }
  // An answer lost counts its reservation: less than it billed only by what it billed beyond it.
  if (counted < billed - beyond) {
    problems.push(
      `the run counts ${counted} tokens, the model billed ${billed} (${beyond} beyond reservations)`,
    );
  }
  return problems;
}

/** Statements after the run's first wait in which a person's act lands in the next worker's turn. */
const NEXT_TURN_STMTS = 10;

/**
 * One act of a person (the `approval` family), within a clean run's
 * statements and waits: a denial or a cancel instead of an approval at a wait,
 * or an act between two statements, half of them in the turn of the worker
 * that takes the run up after its first wait, where the worker checks the
 * request the person is answering.
 */
function drawPersonAct(random: () => number, clean: CleanRun): Fault {
  const upTo = (n: number) => 1 + Math.floor(random() * Math.max(1, n));
  if (random() < 0.3) {
    return {
      kind: "person",
      act: random() < 0.5 ? "deny" : "cancel",
      at: "wait",
      n: upTo((clean.waits ?? 0) + 1),
    };
  }
  const act = PERSON_ACTS[Math.floor(random() * PERSON_ACTS.length)];
  const next = clean.firstWaitStmt;
  const n = next !== undefined && random() < 0.5
    ? next + upTo(NEXT_TURN_STMTS)
    : upTo(Math.ceil(clean.stmts * 1.5));
  return { kind: "person", act, at: "stmt", n };
}

/**
 * The approval race as a schedule: the run waits for approval, a person
 * cancels it there (and reopens it) in most schedules, and one or two acts
 * (approve, deny, cancel, reopen) land between statements of the worker that
 * takes it up next, while that worker checks its request. For
 * {@link FuzzOptions.draw}; needs an agent with a tool that needs approval.
 */
export function drawApprovalRace(seed: number, clean: CleanRun): Schedule {
  const random = seededRandom(seed);
  const start = clean.firstWaitStmt ?? 0;
  const faults: Fault[] = random() < 0.8 ? [{ kind: "person", act: "cancel", at: "wait", n: 1 }] : [];
  const acts = 1 + Math.floor(random() * 2);
  // Bounded: one pass per act (a repeated position is skipped).
  for (let i = 0; i < acts; i++) {
    const n = start + 1 + Math.floor(random() * NEXT_TURN_STMTS);
    const act = PERSON_ACTS[Math.floor(random() * PERSON_ACTS.length)];
    if (!faults.some((f) => f.kind === "person" && f.at === "stmt" && f.n === n)) {
      faults.push({ kind: "person", act, at: "stmt", n });
    }
  }
  return { seed, faults };
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
  const asks = target.approvalTool !== undefined || (target.clean?.waits ?? 0) > 0;
  if (requested?.includes("approval") && !asks) {
    throw new FuzzError(
      "FUZZ_OPTION_INVALID",
      `Cannot fuzz with the 'approval' family as agent ${target.agent.name} never asks for approval: ` +
        `give a tool 'approval', or name one in 'approvalTool'`,
    );
  }
  return requested ?? FAULT_FAMILIES.filter((f) => f !== "approval" || asks);
}

/** Each schedule's seed, from the master seed and its index. */
export function scheduleSeed(master: number, index: number): number {
  return (Math.imul(master ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
}

/**
 * Reduces a failing schedule to the fewest faults that still fail: drops
 * faults one at a time while the schedule keeps failing, until no single
 * fault can go (at most n^2 runs for n faults).
 */
async function shrink(
  failing: ScheduleResult,
  runOne: (s: Schedule) => Promise<ScheduleResult>,
): Promise<{ result: ScheduleResult; runs: number }> {
  let best = failing;
  let runs = 0;
  // Never-fired faults change nothing: drop them first.
  const firedOnly = best.schedule.faults.filter((_, i) => best.fired[i] !== undefined);
  if (firedOnly.length < best.schedule.faults.length) {
    const r = await runOne({ seed: best.schedule.seed, faults: firedOnly });
    runs++;
    if (r.problems.length > 0) best = r;
  }
  let progress = true;
  // Bounded: each round removes a fault or ends.
  while (progress && best.schedule.faults.length > 0) {
    progress = false;
    for (let i = 0; i < best.schedule.faults.length; i++) {
      const faults = best.schedule.faults.filter((_, j) => j !== i);
      const r = await runOne({ seed: best.schedule.seed, faults });
      runs++;
      if (r.problems.length > 0) {
        best = r;
        progress = true;
        break;
      }
    }
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
    `  drawn:  ${original.schedule.faults.map(encodeFault).join(", ") || "(no faults)"}`,
    `  shrunk: ${shrunk.schedule.faults.length} fault(s): ${
      shrunk.schedule.faults.map((f, i) => `${encodeFault(f)} -> ${shrunk.fired[i] ?? "not reached"}`).join(
        ", ",
      ) ||
      "(no faults)"
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
    : `${f.kind}:${f.fault}`;
}

/**
 * Fuzzes an agent: runs `schedules` schedules drawn from `seed` on the
 * simulator, each a list of kills, stalls and remote faults, and checks after
 * every one that the run looks as if one worker ran it alone (invariant 5,
 * the model's spend, no write by a fenced worker). Failures are shrunk to the
 * fewest faults that still fail. `agent` builds the agent for one process
 * from the fetch its tools must use: a {@link FakeRemote} by default.
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
  const target = resolveTarget(agent, opts);
  const db = opts.db ?? await SimDb.open();
  const turns = new Turns();
  const replayCommand = opts.replayCommand ?? "deno task fuzz --replay";
  try {
    const counter = { runs: 0 };
    const runOne = (s: Schedule) => runSchedule(db, target, s, turns, `fz-${s.seed}`, counter);
    // The clean run: what every schedule must end as, and where its faults can land.
    const clean = await runOne({ seed, faults: [] });
    if (clean.problems.length > 0) {
      throw new FuzzError(
        "FUZZ_TARGET_INVALID",
        `The agent does not pass a run without faults:\n  ${clean.problems.join("\n  ")}\n${
          clean.transcript.join("\n")
        }`,
      );
    }
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
      transcript: opts.transcript ? [] : undefined,
    };
    const positions = new Set<string>();
    const plan: Schedule[] = opts.replay !== undefined
      ? [typeof opts.replay === "string" ? decodeSchedule(opts.replay) : opts.replay]
      : Array.from(
        { length: schedules },
        (_, i) => {
          if (opts.draw) return opts.draw(scheduleSeed(seed, i), target.clean!);
          const drawn = drawSchedule(scheduleSeed(seed, i), target.clean!, families, maxFaults);
          return families.includes("budget") ? drawBudget(drawn, target.clean!) : drawn;
        },
      );
    for (let i = 0; i < plan.length; i++) {
      const result = await runOne(plan[i]);
      report.schedules++;
      report.transcript?.push(...result.transcript);
      result.schedule.faults.forEach((f, j) => {
        const where = result.fired[j];
        if (where === undefined) {
          report.notReached++;
          return;
        }
        report.kinds[kindOf(f)] = (report.kinds[kindOf(f)] ?? 0) + 1;
        // The position: the kind and what it hit (statement kind, or remote and path), not the process.
        positions.add(`${kindOf(f)} ${where.replace(/^\S+ /, "").replace(/ \(w\d+\)$/, "")}`);
      });
      opts.onSchedule?.(result, i);
      if (result.problems.length > 0) {
        const { result: shrunk, runs } = opts.shrink === false || opts.replay !== undefined
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

/** The usage text of `deno task fuzz`. */
export const FUZZ_USAGE =
  `agent-runtime fuzz: crash-fuzz the demo agent and check every schedule against the invariants.
Its create_database needs a person's approval, so a person answers (or denies, cancels, reopens) in the
schedules too.

usage: deno task fuzz [--schedules N] [--seed S] [--replay X] [--faults kill,stall] [--max-faults N]
                      [--defect name] [--transcript FILE] [--keep-going]

  --schedules N      schedules to run (default 500)
  --seed S           the first schedule's seed (default: random, printed)
  --replay X         replay one printed schedule, with its transcript
  --faults LIST      only these fault families, comma-separated: kill, stall, cloud, model,
                     budget (a token ceiling on about half the schedules, with usage faults),
                     approval (a person's acts; the demo's create_database needs approval)
  --max-faults N     faults a schedule may hold (default 4)
  --defect NAME      plant a bug (the fuzzer's own tests; repeatable)
  --transcript FILE  write every schedule's transcript to FILE
  --keep-going       keep going after the first violation

exit codes: 0 no violation, 1 a violation found, 2 bad arguments`;

/** The command line: `deno task fuzz [--schedules N] [--seed S] [--replay X] [--faults kill,stall] [--defect name]`. */
async function main(args: string[]): Promise<number> {
  const flags = commandFlags("fuzz", FUZZ_USAGE, args, {
    schedules: { type: "string", default: "500" },
    seed: { type: "string" },
    replay: { type: "string" },
    faults: { type: "string" },
    "max-faults": { type: "string", default: "4" },
    defect: { type: "string", multiple: true },
    transcript: { type: "string" },
    "keep-going": { type: "boolean", default: false },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const counts = {
    "--schedules": values.schedules,
    "--max-faults": values["max-faults"],
    "--seed": values.seed,
  };
  for (const [flag, value] of Object.entries(counts)) {
    if (value !== undefined && !/^\d+$/.test(value)) {
      console.error(`fuzz: ${flag} must be a whole number 0 or more: current value is ${value}`);
      return 2;
    }
  }
  const seed = values.replay !== undefined
    ? decodeSchedule(values.replay).seed
    : values.seed !== undefined
    ? Number(values.seed)
    : Math.floor(Math.random() * 2 ** 31);
  const defects: PlantedDefects = {};
  const known = ["confirmSkipsFence", "heartbeatIgnoresFence", "keyFromAttempt", "replayAsksModel"] as const;
  for (const d of values.defect ?? []) {
    if (!(known as readonly string[]).includes(d)) {
      console.error(`fuzz: --defect must be one of ${known.join(", ")}: current value is ${d}`);
      return 2;
    }
    defects[d as typeof known[number]] = true;
  }
  const replay = values.replay;
  const schedules = Number(values.schedules);
  console.log(replay ? `fuzz replay ${replay}` : `fuzz seed=${seed} schedules=${schedules}`);
  let last = performance.now();
  const report = await fuzz(demoAgent, {
    schedules,
    seed,
    replay,
    remote: "mock-cloud",
    approvalTool: DEMO_APPROVAL_TOOL,
    maxFaults: Number(values["max-faults"]),
    faults: values.faults?.split(",") as FaultFamily[] | undefined,
    defects,
    keepGoing: values["keep-going"],
    transcript: values.transcript !== undefined || replay !== undefined,
    replayCommand: `deno task fuzz${(values.defect ?? []).map((d) => ` --defect ${d}`).join("")} --replay`,
    onSchedule: (_r, i) => {
      if (performance.now() - last > 5_000) {
        last = performance.now();
        console.log(`  ... ${i + 1} schedules`);
      }
    },
  });
  if (replay) console.log(report.transcript!.join("\n"));
  else if (values.transcript) {
    await Deno.writeTextFile(values.transcript, report.transcript!.join("\n") + "\n");
  }
  for (const f of report.failures) console.log(`\n${f.text}`);
  const seconds = report.elapsedMs / 1000;
  const kinds = Object.entries(report.kinds).sort(([a], [b]) => a.localeCompare(b));
  console.log(
    `\nseed=${seed} schedules=${report.schedules} violations=${report.failures.length} ` +
      `time=${seconds.toFixed(1)}s rate=${(report.schedules / Math.max(seconds, 1e-9)).toFixed(1)}/s`,
  );
  console.log(
    `fault kinds hit: ${kinds.length} (${kinds.map(([k, n]) => `${k}=${n}`).join(" ")}); ` +
      `distinct positions hit: ${report.positions}; faults aimed past the run's end: ${report.notReached}`,
  );
  return report.failures.length > 0 ? 1 : 0;
}

if (import.meta.main) {
  try {
    Deno.exitCode = await main(Deno.args);
  } catch (err) {
    if (err instanceof FuzzError) {
      console.error(`fuzz: ${err.code}: ${err.message}`);
      Deno.exitCode = 2;
    } else throw err;
  }
}
