/**
 * Schedules: what a fuzz run throws at a run, and how it is written down. A
 * schedule is a seed (the processes' jitter) and a list of faults, each aimed
 * at a position counted across every process of the schedule (the n-th store
 * statement, model request, tool request, wait for a person), maybe with a
 * budget on the run. This file draws schedules from seeds (within a clean
 * run's statements and requests, and a little past) and reads and writes
 * their compact form (`7/kill@stmt#17:after,cloud#2:drop`), which `--replay`
 * takes back. A schedule may have the mock model answer several calls at once
 * (`7/parallel=3,...`: the demo as one step of three calls), so its faults
 * land inside steps whose calls are in flight together.
 *
 * @module
 */

import { MODEL_FAULT_MODES, type ModelFaultMode } from "../../mock/model.ts";
import { ownCode, RuntimeError } from "../../runtime/base/errors.ts";
import { seededRandom } from "../sim.ts";

/** How a tool request is broken. */
export type CloudFault = "5xx" | "timeout" | "drop" | "garbage";
/** How a model answer is broken: the mock model's broken answers, a 5xx, or no answer in time. */
export type ModelFault = "5xx" | "timeout" | ModelFaultMode;

/** Every {@link CloudFault}. */
export const CLOUD_FAULTS: readonly CloudFault[] = ["5xx", "timeout", "drop", "garbage"];
/** Every {@link ModelFault}. */
export const MODEL_FAULTS: readonly ModelFault[] = ["5xx", "timeout", ...MODEL_FAULT_MODES];

/** How an answer's usage report is wrong: missing, a negative total, or far past the request's cap. */
export type UsageFault = "none" | "negative" | "oversized";
/** Every {@link UsageFault}. */
export const USAGE_FAULTS: readonly UsageFault[] = ["none", "negative", "oversized"];
/**
 * What a person does to a run: answers its approval request, cancels it, reopens it, or (`signal`)
 * sends it the signal its target waits for, under the one id every send of a schedule uses.
 */
export type PersonAct = "approve" | "deny" | "cancel" | "reopen" | "signal";
/** Every {@link PersonAct} of the `approval` family (a signal is the `signal` family's). */
export const PERSON_ACTS: readonly PersonAct[] = ["approve", "deny", "cancel", "reopen"];

/** One fault of a schedule, aimed at a position counted across all its processes (from 1). */
export type Fault =
  | { kind: "kill"; at: "stmt" | "model" | "cloud"; n: number; when: "before" | "after" }
  | { kind: "stall"; n: number; wake: number }
  | { kind: "cloud"; n: number; fault: CloudFault }
  | { kind: "model"; n: number; fault: ModelFault }
  | { kind: "usage"; n: number; fault: UsageFault }
  /** Before the n-th statement, or (`wait`) instead of approving at the n-th time the run waits. */
  | { kind: "person"; act: PersonAct; at: "stmt" | "wait"; n: number }
  /**
   * From the n-th request to the model or the cloud on, that remote refuses every connection for `minutes`
   * of the world's clock: an outage the run must ride out (retried under its key, the run let go between).
   */
  | { kind: "outage"; at: "model" | "cloud"; n: number; minutes: number };

/**
 * The families of faults a fuzz may draw from (`budget`: a ceiling on the run,
 * and usage faults; `approval`: a person's acts, for an agent with a tool that
 * needs approval; `signal`: the signal sent between two statements, before,
 * during or after the wait, for an agent that waits for one; `limits`: the
 * run held to limits shared by the fleet, {@link SCHEDULE_LIMITS}, so kills
 * land while a worker holds reservations; `version`: a deploy under the run,
 * every incarnation after the first a worker of version 2, see
 * `versions.ts`).
 */
export type FaultFamily =
  | "kill"
  | "stall"
  | "cloud"
  | "model"
  | "budget"
  | "approval"
  | "outage"
  | "signal"
  | "limits"
  | "version";
/** Every {@link FaultFamily}. */
export const FAULT_FAMILIES: readonly FaultFamily[] = [
  "kill",
  "stall",
  "cloud",
  "model",
  "budget",
  "approval",
  "outage",
  "signal",
  "limits",
  "version",
];

/** A schedule's budget: a token ceiling with each answer's cap, and maybe a ceiling on model requests. */
export interface ScheduleBudget {
  /** The run's token ceiling. */
  tokens: number;
  /** The cap on each answer, which each request reserves against the ceiling. */
  maxOutputTokens: number;
  /** A ceiling on model requests, when drawn. */
  modelCalls?: number;
}

/** A schedule: a seed (the processes' jitter), the faults, a budget on the run, and calls per answer. */
export interface Schedule {
  /** Seeds the processes' jitter. */
  seed: number;
  /** The faults, each at its position. */
  faults: Fault[];
  /** A budget on the run, when the `budget` family is drawn. */
  budget?: ScheduleBudget;
  /**
   * Calls the mock model answers at once (its `parallel`): 2 or 3 make steps
   * of several calls, sent concurrently. Omitted: 1, one call a step.
   */
  parallel?: number;
  /**
   * The run's agent is held to {@link SCHEDULE_LIMITS} (one model request and
   * one tool call in flight at a time, a few requests a second): every
   * request takes a reservation before it goes out, so a kill between a take
   * and its release leaves one held by a dead worker.
   */
  limits?: boolean;
  /**
   * A deploy under the run: it starts on version 1 of its agent, and every
   * later incarnation is a worker of version 2, which renames a tool and
   * adds an argument with a default (`versions.ts`).
   */
  version?: boolean;
}

/**
 * The limits of a schedule with `limits`: its model and each tool one call in
 * flight at a time, the model at most five requests in any second.
 */
export const SCHEDULE_LIMITS = [
  { model: "*", inFlight: 1, requestsPerMinute: 300, windowS: 1 },
  { tool: "*", inFlight: 1 },
] as const;

/** The most calls per answer a schedule may ask of the mock model (the demo has three calls). */
export const MAX_PARALLEL = 3;

/** Every parallelism the fuzzer draws from by default: one, two or three calls per answer. */
export const PARALLELS: readonly number[] = [1, 2, 3];

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
    case "outage":
      return `outage@${f.at}#${f.n}+${f.minutes}m`;
    default:
      return `${f.kind}#${f.n}:${f.fault}`;
  }
}

/**
 * A schedule in the compact form `<seed>/<fault>,<fault>` that `--replay`
 * reads: calls per answer first (`parallel=3`, when more than one), then
 * `limits` and `v2` when drawn, then a budget, then the faults.
 */
export function encodeSchedule(s: Schedule): string {
  const parallel = (s.parallel ?? 1) > 1 ? [`parallel=${s.parallel}`] : [];
  const limits = s.limits ? ["limits"] : [];
  const version = s.version ? ["v2"] : [];
  return `${s.seed}/${
    [...parallel, ...limits, ...version, ...encodeBudget(s.budget), ...s.faults.map(encodeFault)].join(",")
  }`;
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
  let parallel: number | undefined;
  let limits = false;
  let version = false;
  const slash = trimmed.indexOf("/");
  if (slash < 0) throw bad("there is no '/' after the seed");
  const seed = Number(trimmed.slice(0, slash));
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw bad(`the seed ${trimmed.slice(0, slash)} is not an integer`);
  }
  const faults: Fault[] = [];
  const rest = trimmed.slice(slash + 1);
  const parts = rest === "" ? [] : rest.split(",");
  for (const [i, part] of parts.entries()) {
    let m: RegExpMatchArray | null;
    if (i === 0 && (m = part.match(/^parallel=(\d+)$/))) {
      parallel = Number(m[1]);
      if (parallel < 1 || parallel > MAX_PARALLEL) {
        throw bad(`parallel=${m[1]} is not a number of calls per answer from 1 to ${MAX_PARALLEL}`);
      }
    } else if (part === "limits" && !limits && faults.length === 0 && budget === undefined) {
      limits = true;
    } else if (part === "v2" && !version && faults.length === 0 && budget === undefined) {
      version = true;
    } else if ((m = part.match(/^kill@(stmt|model|cloud)#(\d+):(before|after)$/))) {
      faults.push({
        kind: "kill",
        at: m[1] as "stmt" | "model" | "cloud",
        n: Number(m[2]),
        when: m[3] as "before" | "after",
      });
    } else if ((m = part.match(/^outage@(model|cloud)#(\d+)\+(\d+)m$/))) {
      faults.push({ kind: "outage", at: m[1] as "model" | "cloud", n: Number(m[2]), minutes: Number(m[3]) });
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
    } else if ((m = part.match(/^(approve|deny|cancel|reopen|signal)@(stmt|wait)#(\d+)$/))) {
      faults.push({ kind: "person", act: m[1] as PersonAct, at: m[2] as "stmt" | "wait", n: Number(m[3]) });
    } else {
      throw bad(`the fault ${JSON.stringify(part)} is not one the fuzzer knows`);
    }
  }
  return {
    seed,
    faults,
    ...(budget === undefined ? {} : { budget }),
    ...(parallel === undefined || parallel === 1 ? {} : { parallel }),
    ...(limits ? { limits } : {}),
    ...(version ? { version } : {}),
  };
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
  // A budget and an outage are drawn on their own (drawBudget, drawOutage), not as one of these faults.
  const drawn = families.filter((f) => f !== "budget" && f !== "outage");
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
    } else if (family === "signal") {
      f = { kind: "person", act: "signal", at: "stmt", n: upTo(Math.ceil(clean.stmts * 1.5)) };
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

/**
 * Gives about a third of the schedules an outage drawn from their seed (from a stream of its own, so the
 * other faults are drawn as before): the model or the cloud refusing every connection for 1 to 30 minutes
 * from one of its requests in a clean run (or a little past).
 */
export function drawOutage(schedule: Schedule, clean: { model: number; cloud: number }): Schedule {
  const random = seededRandom(schedule.seed ^ 0x1b873593);
  if (random() >= 1 / 3) return schedule;
  const at = random() < 0.5 ? "model" : "cloud";
  const n = 1 +
    Math.floor(random() * Math.max(1, Math.ceil((at === "model" ? clean.model : clean.cloud) * 1.2)));
  const minutes = 1 + Math.floor(random() * 30);
  return { ...schedule, faults: [...schedule.faults, { kind: "outage", at, n, minutes }] };
}

/**
 * Holds about a third of the schedules to {@link SCHEDULE_LIMITS}, drawn from
 * their seed (from a stream of its own, so the other faults are drawn as
 * before).
 */
export function drawLimits(schedule: Schedule): Schedule {
  const random = seededRandom(schedule.seed ^ 0x68e31da4);
  return random() < 1 / 3 ? { ...schedule, limits: true } : schedule;
}

/**
 * Gives about a third of the schedules a deploy under the run (`version`),
 * drawn from their seed (from a stream of its own, so the other faults are
 * drawn as before).
 */
export function drawVersion(schedule: Schedule): Schedule {
  const random = seededRandom(schedule.seed ^ 0x2545f491);
  return random() < 1 / 3 ? { ...schedule, version: true } : schedule;
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
 * The calls per answer of the schedule drawn from `seed`, one of `levels`,
 * from a stream of its own (so the faults are drawn as they would be
 * without it).
 */
export function drawParallel(seed: number, levels: readonly number[]): number {
  const random = seededRandom(seed ^ 0x27d4eb2f);
  return levels[Math.floor(random() * levels.length)];
}

/** Each schedule's seed, from the master seed and its index. */
export function scheduleSeed(master: number, index: number): number {
  return (Math.imul(master ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
}
