/**
 * Running one schedule: a fresh world on the shared database, the processes
 * the schedule needs (a new one each time the last ended with the run still
 * open, a thief when one is frozen past its lease), every fault fired at its
 * position as the processes cross it (a store statement, a model or tool
 * request, a wait for a person), and the checks once the run has ended.
 *
 * @module
 */

import type { Agent, AgentContext } from "../../runtime/agent/agent.ts";
import { callsOf } from "../../runtime/run/calls.ts";
import { takeKey } from "../../runtime/agent/version.ts";
import { DEFAULT_RETRY } from "../../runtime/run/context.ts";
import { SimulatedKill } from "../../runtime/base/crashpoints.ts";
import type { FetchLike } from "../../runtime/model/planner.ts";
import type { QueryOptions, SqlClient } from "../../runtime/store/driver.ts";
import type { Tool, ToolRegistry } from "../../runtime/agent/tools.ts";
import { askModelUncounted, type PlantedDefects, plantInClient, type ToolPlantOptions } from "../defects.ts";
import { FakeRemote } from "../fake_remote.ts";
import { checkModelSpend, checkShape, type ModelSpend, ownerSeq } from "../invariants.ts";
import {
  type ProcessHooks,
  type RunSnapshot,
  SIM_MODEL_URL,
  SimDb,
  type SimExit,
  type SimProcess,
  SimWorld,
} from "../sim.ts";
import {
  type BudgetAnswer,
  type CallWrites,
  checkBudget,
  checkFamily,
  checkPolls,
  type FamilySnapshot,
} from "./check.ts";
import { statementName } from "../../runtime/store/statements.ts";
import type { GroupedWrite } from "../../runtime/store/group_commit.ts";
import { type FuzzSignal, Person } from "./person.ts";
import {
  nextVersion,
  type ProcessTools,
  type VersionRename,
  versionsOf,
  versionTwoTools,
} from "./versions.ts";
import { isWrite, type Position, positionOf } from "./positions.ts";
import {
  type CleanRun,
  encodeFault,
  encodeSchedule,
  type Fault,
  type Schedule,
  SCHEDULE_LIMITS,
  type ScheduleBudget,
} from "./schedule.ts";

/** Upper bounds that keep every loop finite. */
// An outage of half an hour, ridden out with the default backoff (capped at a minute), lets the run go and
// takes it again some 35 times: each a new incarnation.
const MAX_INCARNATIONS = 100;
const MAX_TICKS = 6_000;
/** The fuzzer's timeouts: short, so a hung request costs few clock wakes. */
export const FUZZ_TIMEOUT_MS = 5_000;
/** Retry budgets the injected faults can never exhaust (exhausting one is designed behaviour, not a bug). */
export const FUZZ_ATTEMPTS = 64;
const HEARTBEAT_MS = 3_000;
const LEASE_MS = 12_000;

/** A macrotask turn: every microtask chain (PGlite and the in-process remotes answer in them) has run. */
export class Turns {
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

/** Builds the agent under test for one process, its tools sending through `fetch` (the fake remote). */
export type AgentFactory = (fetch: FetchLike) => Agent;

/** A clean run of the target (no faults) at one parallelism: what a schedule must end as, and where it can land. */
export type TargetClean = CleanRun & {
  tools: string[];
  steps: number;
  /** A family's child runs in the clean run, by agent: their steps and tools. */
  children?: Record<string, { steps: number; tools: string[] }>;
};

/** An agent the target's tools start runs of (`agentTool`), as the fuzzer's world hosts it. */
export interface ChildAgent {
  agent: Agent;
  /** Its tools in one process, as the fuzzer runs them (built with the process's context). */
  tools: (fetch: FetchLike, plant: ToolPlantOptions, ctx: AgentContext) => Tool[] | Promise<Tool[]>;
}

/** What the fuzzer is pointed at, resolved once. */
export interface Target {
  agent: Agent;
  /**
   * The tools of one process, their requests through `fetch`, built with the
   * process's context (an MCP target's are listed there); `plant` helps a
   * planted defect find a call's step.
   */
  tools: (fetch: FetchLike, plant: ToolPlantOptions, ctx: AgentContext) => Tool[] | Promise<Tool[]>;
  remote: "fake" | "mock-cloud";
  goal: string;
  defects?: PlantedDefects;
  /**
   * The clean run at each parallelism a schedule may have (calls per answer:
   * 1, 2, 3): the tools in order, its statements and requests, the tokens it
   * costs, how often it waits. Filled in by the first schedule run at each.
   */
  clean: Map<number, TargetClean>;
  /** The tool the fuzzer made need approval, if any. */
  approvalTool?: string;
  /** The signal the agent waits for, if it does: the person sends it (the `signal` family). */
  signal?: FuzzSignal;
  /** The tools as the fuzzer runs them, to check calls against (their schemas, whether they need approval). */
  registry: ToolRegistry;
  /**
   * The agents its tools start child runs of, by name: a schedule then
   * drives every run of the family (the oldest takeable first), not the
   * root's alone, and holds the family to {@link checkFamily}.
   */
  children?: ReadonlyMap<string, ChildAgent>;
  /** The tool version 2 renames in a schedule with a deploy under the run (`version`, versions.ts). */
  rename?: VersionRename;
}

/** The outcome of one schedule. */
export interface ScheduleResult {
  /** The schedule run. */
  schedule: Schedule;
  /** Violations found; empty is a pass. */
  problems: string[];
  /** Each fault as encoded, with where it landed (`undefined`: never reached). */
  fired: (string | undefined)[];
  /** Processes the schedule started. */
  incarnations: number;
  /**
   * Under a deploy (`version`): `carried` when the run ended on version 2,
   * `refused` when version 2 handed it back and version 1 finished it,
   * `stayed` when no worker of version 2 ever drove it.
   */
  deploy?: "carried" | "refused" | "stayed";
  /** Every line the processes and the fuzzer logged. */
  transcript: string[];
}

/** A process as the fuzzer follows it. */
interface Proc {
  sim?: SimProcess;
  name: string;
  /** The run it drives, and that run's agent (a family's runs are of several). */
  runId: string;
  agent?: string;
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
  /** Its fetch to the model, as the fuzzer wraps it (a planted defect asks the model through it). */
  modelFetch?: FetchLike;
}

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
    refused: 0,
    transientFaults: 0,
    badAnswerFaults: 0,
    interruptions: 0,
  };
  stmt = 0;
  model = 0;
  cloud = 0;
  /** The highest epoch claimed of each run (a family's runs have an epoch each). */
  readonly maxEpoch = new Map<string, number>();
  activity = 0;
  frozen?: { proc: Proc; release: () => void; wake: number; thief?: Proc; thiefStart: number };
  /** Every model answer of a budgeted schedule, as the budget check needs it. */
  readonly answers: BudgetAnswer[] = [];
  /** The person at the run: answers its approval requests, and acts where the schedule says. */
  person?: Person;
  /** Per key, the intents and accepted answers the processes wrote (what {@link checkPolls} holds the rows to). */
  readonly callWrites = new Map<string, CallWrites>();
  /** Times the run was found asleep on its remotes with no process alive (a worker was started at its wake). */
  sleeps = 0;
  readonly #world: SimWorld;
  readonly #faults: Fault[];
  readonly #budget?: ScheduleBudget;
  readonly #target: Target;
  /** Versions 1 and 2 of the agent and version 2's tools, in a schedule with a deploy under the run. */
  readonly #versions?: { v1: Agent; v2: Agent; v2Tools: ProcessTools };
  readonly #setRemoteFaults: (spec: Record<string, number>) => void;
  /** How a planted defect finds a call's step: handed to the tools of every process. */
  plant: ToolPlantOptions = {};

  constructor(
    world: SimWorld,
    schedule: Schedule,
    target: Target,
    setRemoteFaults: (spec: Record<string, number>) => void,
    versions?: { v1: Agent; v2: Agent; v2Tools: ProcessTools },
  ) {
    this.#world = world;
    this.#faults = schedule.faults;
    this.#budget = schedule.budget;
    this.#target = target;
    this.#versions = versions;
    this.fired = schedule.faults.map(() => undefined);
    this.#setRemoteFaults = setRemoteFaults;
  }

  /** Until when each remote refuses connections (the world's clock, ms), once its outage fired. */
  readonly #outages = new Map<"model" | "cloud", number>();

  /** True while `remote` is down: its outage fault fires at its n-th request, and lasts its minutes. */
  #down(remote: "model" | "cloud", n: number, where: string): boolean {
    const i = this.#find((f) => f.kind === "outage" && f.at === remote && f.n === n);
    const now = this.#world.clock.now().getTime();
    if (i >= 0) {
      this.#fire(i, where);
      const f = this.#faults[i] as Extract<Fault, { kind: "outage" }>;
      this.#outages.set(remote, now + f.minutes * 60_000);
    }
    const until = this.#outages.get(remote);
    return until !== undefined && now < until;
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
    const defects = this.#target.defects ?? {};
    return {
      retry: { ...DEFAULT_RETRY, maxModelAttempts: FUZZ_ATTEMPTS, modelTimeoutMs: FUZZ_TIMEOUT_MS },
      // A planted bug sits below the fuzzer's layer: the fuzzer sees what the store sends.
      wrapStore: (client, sim) => {
        p.sim = sim;
        const planted = plantInClient(client, defects, {
          askModel: (runId, seq) => askModelUncounted(p.modelFetch!, SIM_MODEL_URL, runId, seq),
        });
        return this.#wrapStore(p, planted);
      },
      wrapFetch: (remote, fetch, sim) => {
        p.sim = sim;
        const wrapped = this.#wrapFetch(p, remote, fetch);
        if (remote === "model") p.modelFetch = wrapped;
        return wrapped;
      },
    };
  }

  #wrapStore(p: Proc, client: SqlClient): SqlClient {
    // Both ways of sending a statement go through the same faults; `written`
    // says how many rows a statement wrote (its rows, or run()'s count).
    const faulted = async <R>(
      opts: QueryOptions | undefined,
      params: unknown[] | undefined,
      send: () => Promise<R>,
      written: (r: R) => number,
    ): Promise<R> => {
      // Bounded: a frozen process waits for one release per freeze.
      while (p.frozen) await p.frozen;
      if (p.done) return await send();
      const n = ++this.stmt;
      const label = positionOf(opts);
      // A statement the fuzzer cannot place is one it cannot check a fenced worker's writes against.
      if (label === "unnamed") {
        this.problems.push(`${p.name} sent statement #${n} without one of the store's names`);
      }
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
      const epochAtExec = this.maxEpoch.get(p.runId) ?? 0;
      this.activity++;
      const result = await send();
      this.activity++;
      if (statementName(opts) === "group-write") {
        // One statement, several writes: each row it wrote is observed as the single write it stands for.
        for (const row of result as unknown as { kind: GroupedWrite["kind"]; k: string }[]) {
          this.#observe(p, GROUPED_POSITIONS[row.kind], [], 1, epochAtExec);
          if (row.kind === "effect-intent") this.#countCallWrite({ name: "effect-intent" }, [0, 0, row.k], 1);
        }
      } else {
        this.#observe(p, label, result, written(result), epochAtExec);
        this.#countCallWrite(opts, params, written(result));
      }
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
        faulted(opts, params, () => client.query<T>(text, params, opts), (rows) => rowsWritten(opts, rows)),
      run: (text: string, params?: unknown[], opts?: QueryOptions): Promise<number> =>
        faulted(opts, params, () => client.run(text, params, opts), (count) => count),
    };
  }

  /**
   * Counts, per key, the call writes that committed: each intent (an attempt
   * or a poll) and each accepted answer (`waiting`). The key is every such
   * statement's third parameter.
   */
  #countCallWrite(opts: QueryOptions | undefined, params: unknown[] | undefined, written: number): void {
    const name = statementName(opts);
    if (written === 0 || typeof params?.[2] !== "string") return;
    const key = params[2];
    const counts = this.callWrites.get(key) ?? { intents: 0, accepted: 0 };
    if (name === "effect-intent" || name === "effect-intent-upsert") counts.intents++;
    else if (name === "effect-waiting") counts.accepted++;
    else return;
    this.callWrites.set(key, counts);
  }

  #observe(p: Proc, label: Position, result: unknown, written: number, epochAtExec: number): void {
    const first = Array.isArray(result) ? (result[0] as Record<string, unknown> | undefined) : undefined;
    const claimed = label === "claim" && typeof first?.epoch === "number"
      ? first.epoch
      : label === "first-claim" && written > 0
      ? 1
      : undefined;
    if (claimed !== undefined) {
      p.epoch = claimed;
      this.maxEpoch.set(p.runId, Math.max(this.maxEpoch.get(p.runId) ?? 0, claimed));
    }
    if (isWrite(label) && written > 0 && p.epoch !== undefined && p.epoch < epochAtExec) {
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
    // A request that failed as in an outage, its failure written down: the attempt ended, and the next one
    // (in this process after a backoff, or in another once the run is taken again) is a retry.
    if (label === "journal-failure" && written > 0 && p.open) {
      this.spend.retried++;
      p.open = undefined;
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
      // A remote in an outage refuses the connection: nothing reaches it, and the request fails at once.
      if (this.#down(remote, n, where)) {
        if (remote === "model") {
          this.spend.transientFaults++;
          this.spend.refused = (this.spend.refused ?? 0) + 1;
        }
        throw new TypeError(`fuzz outage: the ${remote} refuses connections (connection refused)`);
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
  spawn(runId: string, agent?: string): Proc {
    const p: Proc = { name: `w${this.procs.length + 1}`, done: false, runId, agent };
    this.procs.push(p);
    // A child run of a family is driven by its own agent, whose tools the fuzzer wraps as the root's.
    const child = agent === undefined ? undefined : this.#target.children?.get(agent);
    const plant = this.plant;
    // A deploy under the run: workers of version 2 after the first, of version 1 when one handed it back.
    const v = this.#versions;
    const deployed = v && nextVersion(this.procs.slice(0, -1).map((q) => q.exit)) === 2
      ? { agent: v.v2, tools: v.v2Tools }
      : {};
    const sim = this.#world.spawn({
      name: p.name,
      runId,
      goal: this.#target.goal,
      hooks: this.hooks(p),
      ...(child
        ? {
          agent: child.agent,
          tools: (fetch: FetchLike, ctx: AgentContext) => child.tools(fetch, plant, ctx),
        }
        : deployed),
    });
    p.sim = sim;
    sim.exit.then((exit) => {
      p.exit = exit;
      this.#end(p);
      this.#maybeWake();
    });
    return p;
  }
}

/** Runs one schedule in a fresh world on `db` and checks it. */
export async function runSchedule(
  db: SimDb,
  target: Target,
  schedule: Schedule,
  turns: Turns,
  runId: string,
  counter: { runs: number },
): Promise<ScheduleResult> {
  // Deleting is ten times cheaper than truncating (0.6 ms against 5.6 ms on PGlite), but leaves dead
  // rows that slow every statement down; a truncate every 64 schedules keeps the tables small.
  await db.exec(
    ++counter.runs % 64 === 0
      ? "truncate runs, journal, side_effects, workers, approvals, messages, memos, signals, limit_keys, " +
        "limit_reservations, limit_waiters, limit_groups, agent_versions, chat_chunks"
      : "delete from approvals; delete from side_effects; delete from journal; delete from messages; " +
        "delete from memos; delete from signals; delete from runs; delete from workers; delete from limit_keys; " +
        "delete from limit_reservations; delete from limit_waiters; delete from limit_groups; delete from agent_versions; delete from chat_chunks",
  );
  const fake = target.remote === "fake" ? new FakeRemote() : undefined;
  const parallel = schedule.parallel ?? 1;
  const clean = target.clean.get(parallel);
  // A planted keyFromStep finds a call's step in the journal, through the harness's own handle (uncounted).
  const plant: ToolPlantOptions = {
    firstCallOf: async (id, seq) => ownerSeq((await world.observer.reads.loadHistory(id)).journal, seq),
  };
  const agent = limited(budgeted(target.agent, schedule.budget), schedule.limits);
  const rename = schedule.version ? target.rename : undefined;
  const versions = rename ? versionsOf(agent) : undefined;
  const world: SimWorld = await SimWorld.open(db, {
    seed: schedule.seed,
    agent: versions?.v1 ?? agent,
    tools: (fetch, ctx) => target.tools(fetch, plant, ctx),
    remote: fake?.fetch,
    heartbeatMs: HEARTBEAT_MS,
    leaseMs: LEASE_MS,
    modelParallel: parallel,
  });
  const run = new ScheduleRun(
    world,
    schedule,
    target,
    (spec) => fake ? fake.setFaults(spec) : world.cloud.setFaults(spec),
    versions && rename && {
      ...versions,
      v2Tools: (fetch, ctx) => {
        const built = target.tools(fetch, plant, ctx);
        return built instanceof Promise
          ? built.then((t) => versionTwoTools(t, rename))
          : versionTwoTools(built, rename);
      },
    },
  );
  run.plant = plant;
  if (versions) {
    // Each version is registered as its worker hosts would be when they start: version 1's before the run,
    // version 2's at the deploy. A worker of version 1 frozen before its first statement is still the older.
    await world.observer.versions.register([takeKey(agent.name, "1")], world.clock.now());
    await world.observer.versions.register([takeKey(agent.name, "2")], world.clock.now());
  }
  run.person = new Person({
    run,
    world,
    runId,
    tools: target.registry,
    // Tool requests are checked as they go out once the run is known to ask for approval.
    checkSends: target.approvalTool !== undefined ||
      [...target.clean.values()].some((c) => (c.waits ?? 0) > 0),
    signal: target.signal,
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
      frozen.thief = run.spawn(frozen.proc.runId, frozen.proc.agent);
      continue;
    }
    const live = run.procs.filter((p) => !p.done);
    if (live.length === 0) {
      earlier.push(await snapshot(world, runId, fake));
      const row = earlier.at(-1)!.run;
      const status = row?.status;
      if (target.children) {
        const next = await nextOfFamily(world, run, runId, settle);
        if (next === "closed") closed = true;
        if (next === "again") continue;
        break;
      }
      // A run asleep on its remotes (a call waiting on a job) is not at rest: the clock moves to when its
      // first call is due, and a new worker takes it up, as a worker host's take would. A person's
      // request pending beside it is answered first.
      if (status === "waiting" && row?.wake_at && !(await run.person.asks())) {
        await run.person.checkWoken(row);
        const dueInMs = new Date(row.wake_at).getTime() - world.clock.now().getTime();
        if (run.procs.length >= MAX_INCARNATIONS) {
          run.problems.push(
            `the run was still asleep after ${MAX_INCARNATIONS} incarnations${
              row.error ? `: ${row.error}` : ""
            }`,
          );
          break;
        }
        world.note(`~~~ the run sleeps until ${new Date(row.wake_at).toISOString()}: a worker takes it then`);
        run.sleeps++;
        await world.advance(Math.max(0, dueInMs) + 1_000, { settle });
        run.spawn(runId);
        continue;
      }
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
    if (p.exit?.kind !== "error" || p.killedAt) continue;
    // Under a deploy, a worker of the other version declines the run (as a host's take would pass it by).
    if (versions && p.exit.error.startsWith("VERSION_MISMATCH: ")) continue;
    run.problems.push(`${p.name} failed: ${p.exit.error}`);
  }
  const final = earlier.at(-1) ?? await snapshot(world, runId, fake);
  const denied = await run.person.afterRun(final);
  const family = target.children ? await familySnapshot(world, runId, fake) : undefined;
  if (family) {
    // Every run of the family at once: the spend and the polls were counted across all its processes.
    const members = [family.root, ...family.children.values()];
    const whole: RunSnapshot = {
      ...family.root,
      journal: members.flatMap((m) => m.journal),
      effects: members.flatMap((m) => m.effects),
      modelCalls: members.reduce((n, m) => n + m.modelCalls, 0),
    };
    run.problems.push(
      ...checkFamily(family, {
        runId,
        steps: clean?.steps ?? final.journal.length,
        tools: clean?.tools,
        earlier,
        children: clean?.children,
        resultIsId: target.remote === "mock-cloud",
      }),
      ...checkModelSpend(whole, run.spend),
      ...checkPolls(whole, run.callWrites),
    );
  } else {
    run.problems.push(
      ...checkShape(final, {
        runId,
        steps: clean?.steps ?? final.journal.length,
        earlier,
        resultIsId: target.remote === "mock-cloud",
        tools: clean?.tools,
        ...(rename ? { renamed: new Map([[rename.to, rename.from]]) } : {}),
        budgetStop: schedule.budget !== undefined,
        denied,
        local: target.signal ? new Set([target.signal.tool]) : undefined,
      }),
      ...checkModelSpend(final, run.spend),
      ...checkBudget(final, schedule.budget, run.answers),
      ...checkPolls(final, run.callWrites),
      ...(schedule.limits ? await leftHeld(world, final) : []),
    );
  }
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
    target.clean.set(parallel, {
      tools: final.journal.flatMap((j) => j.decision ? callsOf(j.decision, j.seq).map((c) => c.tool) : []),
      steps: final.journal.length,
      stmts: run.stmt,
      model: run.model,
      cloud: run.cloud,
      tokens: world.model.tokens(runId),
      waits: run.person.waits,
      firstWaitStmt: run.person.firstWaitStmt,
      ...(family
        ? {
          children: Object.fromEntries(
            [...family.children.values()].map((c) => [c.run?.agent ?? "?", {
              steps: c.journal.length,
              tools: c.journal.flatMap((j) =>
                j.decision ? callsOf(j.decision, j.seq).map((x) => x.tool) : []
              ),
            }]),
          ),
        }
        : {}),
    });
  }
  return {
    schedule,
    problems: run.problems,
    fired,
    incarnations: run.procs.length,
    ...(versions ? { deploy: deployOf(final, run.procs.map((p) => p.exit)) } : {}),
    transcript: world.transcript,
  };
}

/**
 * The most incarnations one schedule of a family starts: a few per run, and, for a run riding out an outage
 * of up to half an hour (the `outage` family), one per wake-up, some 35 a run.
 */
const MAX_FAMILY_INCARNATIONS = 200;

/** Statuses a worker may take a run in (a `running` one's worker may have died). */
const TAKEABLE: ReadonlySet<string> = new Set(["pending", "running"]);

/**
 * With no process alive, what a family's schedule does next, as the one
 * worker host of a small deployment would: take the oldest takeable run
 * (pending, abandoned, or asleep past its wake), else move the clock to the
 * first wake, else the family is at rest: `closed` when its root has ended.
 */
async function nextOfFamily(
  world: SimWorld,
  run: ScheduleRun,
  runId: string,
  settle: () => Promise<void>,
): Promise<"again" | "closed" | "stop"> {
  const runs = (await world.observer.operators.listRuns({ limit: 100 })).runs.filter((r) =>
    r.run_id === runId || r.run_id.startsWith(`${runId}.`)
  );
  const root = runs.find((r) => r.run_id === runId);
  if (root?.status === "cancelled" && await run.person?.atRest("cancelled")) return "again";
  const now = world.clock.now().getTime();
  const due = runs
    .filter((r) =>
      TAKEABLE.has(r.status) || (r.status === "waiting" && r.wake_at && new Date(r.wake_at).getTime() <= now)
    )
    .sort((a, b) => a.created_at.getTime() - b.created_at.getTime() || a.run_id.localeCompare(b.run_id));
  const wakes = runs.filter((r) => r.status === "waiting" && r.wake_at).map((r) =>
    new Date(r.wake_at!).getTime()
  );
  if (!root || due.length > 0 || wakes.length > 0) {
    if (run.procs.length >= MAX_FAMILY_INCARNATIONS) {
      run.problems.push(
        `the family was still open after ${MAX_FAMILY_INCARNATIONS} incarnations: ${
          runs.map((r) => `${r.run_id} ${r.status}`).join(", ")
        }`,
      );
      return "stop";
    }
  }
  if (!root || due.length > 0) {
    await world.advance(1_000, { settle });
    const next = root ? due[0] : undefined;
    run.spawn(next?.run_id ?? runId, next && next.run_id !== runId ? next.agent : undefined);
    return "again";
  }
  if (wakes.length > 0) {
    const first = Math.min(...wakes);
    world.note(`~~~ the family sleeps until ${new Date(first).toISOString()}: a worker takes it then`);
    run.sleeps++;
    await world.advance(Math.max(0, first - now) + 1_000, { settle });
    return "again";
  }
  const open = runs.filter((r) => !["done", "failed", "cancelled"].includes(r.status));
  if (open.length > 0) {
    run.problems.push(
      `the family waits for something that never comes: ${
        open.map((r) => `${r.run_id} ${r.status}`).join(", ")
      }`,
    );
    return "stop";
  }
  return "closed";
}

/** Every run of the family rooted at `runId`, and every effect the remote performed for it. */
async function familySnapshot(
  world: SimWorld,
  runId: string,
  fake: FakeRemote | undefined,
): Promise<FamilySnapshot> {
  const ids = (await world.observer.operators.listRuns({ limit: 100 })).runs
    .map((r) => r.run_id)
    .filter((id) => id.startsWith(`${runId}.`))
    .sort();
  const children = new Map<string, RunSnapshot>();
  for (const id of ids) children.set(id, await snapshot(world, id, fake));
  const remoteKeys = fake ? fake.effects().map((e) => e.key) : world.cloud.created().map((r) => r.key);
  return { root: await snapshot(world, runId, fake), children, remoteKeys };
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

/**
 * Rows a query wrote: its rows, but for the writes that answer one row
 * whatever happened (`held` beside what they did): `wait-run` wrote only
 * when the run now waits, `create-child-run` when the child is new, and
 * `finish-family-run` the rows it counts as `written` (none when fenced).
 */
/** The position of each write a group statement carries (positions.ts). */
const GROUPED_POSITIONS: Readonly<Record<GroupedWrite["kind"], Position>> = {
  "journal-intent": "journal-intent",
  "journal-confirm": "journal-confirm",
  "effect-intent": "tool-intent",
  "effect-confirm": "tool-confirm",
  "run-finish": "finish",
};

function rowsWritten(opts: QueryOptions | undefined, rows: unknown[]): number {
  const first = rows[0] as
    | { waiting?: boolean; created?: boolean; written?: number; why?: string | null }
    | undefined;
  switch (statementName(opts)) {
    case "limit-take":
      // Granted or refused (a reservation, or a place in the queue) it wrote; fenced, it wrote nothing.
      return first === undefined || first.why === "fenced" ? 0 : 1;
    case "wait-run":
      return first?.waiting === true ? 1 : 0;
    case "create-child-run":
      return first?.created === true ? 1 : 0;
    case "finish-family-run":
      return first?.written ?? 0;
    default:
      return rows.length;
  }
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

/** The agent held to {@link SCHEDULE_LIMITS} when the schedule says so. */
function limited(agent: Agent, limits: boolean | undefined): Agent {
  return limits ? { ...agent, limits: [...(agent.limits ?? []), ...SCHEDULE_LIMITS] } : agent;
}

/**
 * Reservations the worker that finished the run (`done`, at its final epoch) left unreleased: a
 * request's reservation is released however the request ends, so only a worker killed (or stopped)
 * before it could leaves one, and that worker is not the one that finished.
 */
async function leftHeld(world: SimWorld, final: RunSnapshot): Promise<string[]> {
  const run = final.run;
  if (run?.status !== "done") return [];
  const rows = await world.observer.client.query<{ key: string; seq: number }>(
    `select key, seq from limit_reservations where run_id = $1 and epoch = $2 and released_at is null
      order by id`,
    [run.run_id, run.epoch],
  );
  return rows.map((r) =>
    `the worker that finished the run (epoch ${run.epoch}) left its reservation under ${r.key} for seq ${r.seq} unreleased`
  );
}

/** How a deploy under the run went (see {@link ScheduleResult.deploy}). */
function deployOf(final: RunSnapshot, exits: (SimExit | undefined)[]): "carried" | "refused" | "stayed" {
  if (
    exits.some((e) =>
      e?.kind === "exited" && e.outcome.status === "moved" && final.run?.agent_version === "1"
    )
  ) {
    return "refused";
  }
  return final.run?.agent_version === "2" ? "carried" : "stayed";
}
