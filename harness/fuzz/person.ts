/**
 * The person at the run (the `approval` and `signal` families of faults):
 * answers its approval requests, cancels and reopens it where the schedule
 * says, sends it the signal its target waits for (where the schedule says,
 * and whenever the run rests waiting for it), and checks the invariants of
 * approvals and signals as the run goes.
 *
 * @module
 */

import { Client } from "../../runtime/client/client.ts";
import { ClientError } from "../../runtime/base/errors.ts";
import { argsHash } from "../../runtime/step/approvals.ts";
import type { ApprovalRow, RunStatus, SideEffectRow } from "../../runtime/store/store.ts";
import type { Json, ToolRegistry } from "../../runtime/agent/tools.ts";
import type { RunRow } from "../../runtime/store/store.ts";
import type { RunSnapshot, SimWorld } from "../sim.ts";
import type { Fault, PersonAct } from "./schedule.ts";

/** The signal a fuzz target waits for: the tool that waits, the signal's name, and what every send carries. */
export interface FuzzSignal {
  /** The tool whose calls wait for it (`waitForSignal`). */
  tool: string;
  /** The signal's name. */
  name: string;
  /** The id every send uses: a send after the first is a duplicate. */
  id: string;
  /** What it carries. */
  payload: Json;
}

/** What the person needs of the schedule being run. */
export interface PersonRun {
  /** Violations found so far: the person adds those it sees. */
  readonly problems: string[];
  /** Store statements sent so far, across the schedule's processes. */
  readonly stmt: number;
  /** Fires the not-yet-fired fault matching `pick` at `where`, and returns it. */
  take(pick: (f: Fault) => boolean, where: string): Fault | undefined;
}

/**
 * The person at a run that asks for approvals. With no process alive it
 * answers a waiting run's request (approve, unless the schedule aims a
 * `deny@wait` or `cancel@wait` at this wait) and reopens a cancelled run;
 * between statements it acts where the schedule aims an act. It checks the two
 * invariants of approvals as the run goes: no run waits on a request already
 * answered (nothing would ever wake it), and a call of a tool that needs
 * approval goes out only with an approval for its exact arguments.
 */
export class Person {
  /** Times the run was found waiting for a person. */
  waits = 0;
  /** The statement count when the run first waited (where the next worker's turn begins). */
  firstWaitStmt?: number;
  readonly #run: PersonRun;
  readonly #world: SimWorld;
  readonly #client: Client;
  readonly #runId: string;
  readonly #tools: ToolRegistry;
  readonly #checkSends: boolean;
  readonly #signal?: FuzzSignal;

  constructor(
    opts: {
      run: PersonRun;
      world: SimWorld;
      runId: string;
      tools: ToolRegistry;
      checkSends: boolean;
      signal?: FuzzSignal;
    },
  ) {
    this.#run = opts.run;
    this.#signal = opts.signal;
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

  /** True when the run has an approval request nobody has answered, or a call waits for a signal never sent. */
  async asks(): Promise<boolean> {
    if (this.#signal && (await this.#signalState()).unsent) return true;
    return (await this.#world.observer.reads.listApprovals(this.#runId)).some((r) => r.status === "pending");
  }

  /** Whether a call of the run waits for the target's signal, and whether it was ever sent (and is untaken). */
  async #signalState(): Promise<{ unsent: boolean; untaken: boolean }> {
    const signal = this.#signal!;
    const { effects } = await this.#world.observer.reads.loadHistory(this.#runId);
    const waits = effects.some((e) => e.status === "waiting" && e.wait_signal === signal.name);
    const sent = await this.#world.observer.signals.get(this.#runId, signal.id);
    return { unsent: waits && !sent, untaken: waits && sent !== undefined && sent.consumed_by === null };
  }

  /**
   * Before the run is let sleep until `row.wake_at`: a call that waits for a
   * signal that is there and taken by none must not sleep past now (it would
   * wait for a send that came already: a lost wake-up).
   */
  async checkWoken(row: RunRow): Promise<void> {
    if (!this.#signal || !row.wake_at || new Date(row.wake_at) <= this.#world.clock.now()) return;
    const { untaken } = await this.#signalState();
    if (untaken) {
      this.#run.problems.push(
        `run ${this.#runId} sleeps until ${
          new Date(row.wake_at).toISOString()
        } with a call waiting for signal ` +
          `${this.#signal.name}, which was sent and is taken by none: a lost wake-up`,
      );
    }
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
    // A call waits for the signal, and none was ever sent: the person sends it (the wait's `during`).
    if (this.#signal && (await this.#signalState()).unsent) {
      this.#world.note(`~~~ person: ${await this.#act("signal")}`);
      return true;
    }
    const requests = await this.#world.observer.reads.listApprovals(this.#runId);
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
        return `cancel: run ${(await this.#client.operators.cancel(runId, { by: "person" })).status}`;
      }
      if (act === "reopen") return `reopen: run ${(await this.#client.operators.reopen(runId)).status}`;
      if (act === "signal") {
        const s = this.#signal;
        if (!s) return "signal: the target waits for none";
        const sent = await this.#client.signal(runId, s.name, s.payload, { signalId: s.id });
        return `signal ${s.name} ${s.id}: seq=${sent.seq}${sent.duplicate ? " duplicate" : ""}${
          sent.woken ? " woken" : ""
        }`;
      }
      const requests = await this.#world.observer.reads.listApprovals(runId);
      const request = requests.find((r) => r.status === "pending") ?? requests.at(-1);
      if (!request) return `${act}: no request yet`;
      const key = request.idempotency_key;
      const answered = act === "approve"
        ? await this.#client.operators.approve(key, { by: "person" })
        : await this.#client.operators.deny(key, { by: "person", reason: "the schedule says no" });
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
      : await this.#world.observer.reads.getApproval(e.idempotency_key);
    if (!request) return "no request";
    return request.args_hash === await argsHash(e.args) ? request.status : "a request for other arguments";
  }

  /**
   * After the run: one signal (every send under one id), taken at most by one
   * call of the waiting tool; a call that answered with a signal holds that
   * one, under its own key, with what it carried.
   */
  async #checkSignals(final: RunSnapshot): Promise<void> {
    const s = this.#signal!;
    const signals = await this.#world.observer.signals.list(this.#runId);
    const problem = (what: string) =>
      this.#run.problems.push(`signal ${s.id} of run ${this.#runId}: ${what}`);
    if (signals.length > 1) problem(`${signals.length} signals stored for one id`);
    const taken = signals[0]?.consumed_by ?? null;
    const waits = final.effects.filter((e) => e.tool === s.tool);
    if (taken !== null && !waits.some((e) => e.idempotency_key === taken)) {
      problem(`taken by ${taken}, which is no call of ${s.tool}`);
    }
    for (const e of waits.filter((e) => e.status === "confirmed")) {
      const got = e.result as { signal_id?: unknown; payload?: unknown; timed_out?: unknown } | null;
      if (got?.timed_out === true) continue;
      if (got?.signal_id !== s.id || JSON.stringify(got.payload) !== JSON.stringify(s.payload)) {
        problem(`call ${e.idempotency_key} answered ${JSON.stringify(e.result)}`);
      } else if (taken !== e.idempotency_key) {
        problem(`call ${e.idempotency_key} answered with it, but it is taken by ${taken ?? "none"}`);
      }
    }
  }

  /** As a tool request goes out: if its call needs approval, it must hold one for its exact arguments. */
  async checkSend(req: Request, proc: string): Promise<void> {
    if (!this.#checkSends) return;
    const key = req.headers.get("idempotency-key");
    const effect = key === null ? undefined : await this.#world.observer.reads.getEffect(key);
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
    if (this.#signal) await this.#checkSignals(final);
    const requests = await this.#world.observer.reads.listApprovals(this.#runId);
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
