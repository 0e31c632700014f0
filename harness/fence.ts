/**
 * The fence proof. For every guarded write, worker A is frozen just before
 * that write while holding its epoch; worker B claims the run (a newer
 * epoch); then A wakes. Each write is proved twice:
 *
 * - **closed**: B settles the run (done, blocked or waiting) before A wakes;
 * - **open**: B is frozen in turn, the run still `running` under B's epoch,
 *   with the rows A's write expects still as A left them, so the epoch alone
 *   can refuse A's write: a fence on the run's status alone would let it in.
 *
 * Each scenario asserts that:
 *
 * - A's first write after waking is the guarded one, it is refused, and A
 *   logs `fenced` naming it (and nothing else: no `intent`, no `confirmed`);
 * - A sends nothing after waking: no model request (the refused journal
 *   intent comes before the model call it would have paid for), no tool call;
 * - nobody else writes while A is awake: the rows, the approvals, the model's
 *   counter and the cloud are exactly as they were when A woke;
 * - B settles what A's epoch left, and the run looks as if one worker ran it
 *   alone (invariant 5), or, for a call that cannot be re-sent, is flagged,
 *   or, for a denied call, carries the denial.
 *
 * With {@link FenceOptions.mate}, A's process carries a second run, frozen
 * at the same point and never taken, as a worker host carries several: with
 * group commit on, A's refused write and the mate's valid one ride one group
 * statement, which must refuse A's row inside it and write the mate's (the
 * mate's run then finishes as a clean run).
 *
 * {@link dropEpochFromFence} plants the bug the open variant is there for,
 * from outside the runtime (a layer on the store's connection), so a test can
 * show the proof catches it.
 *
 * @module
 */

import { demoTools } from "../examples/provision/tools.ts";
import type { CrashPoint } from "../runtime/base/crashpoints.ts";
import type { FetchLike } from "../runtime/model/planner.ts";
import type { QueryOptions, RunWrites, SqlClient, Store } from "../runtime/store/store.ts";
import { defineTool, type Tool } from "../runtime/agent/tools.ts";
import type { GroupCommitStats } from "../runtime/store/group_commit.ts";
import { type Baseline, baselineOf, checkInvariants } from "./invariants.ts";
import {
  groupStatsSince,
  type ProcessHooks,
  SIM_CLOUD_URL,
  type SimDb,
  type SimExit,
  type SimProcess,
  SimWorld,
  untilStalledOrExit,
} from "./sim.ts";

/** A write that carries the fence. */
export type GuardedWrite =
  | "journal intent"
  | "journal reject"
  | "journal confirm"
  | "tool intent"
  | "tool confirm"
  | "tool failed"
  | "tool flagged"
  | "approval request"
  | "tool denied"
  | "finish"
  | "heartbeat";

/** Every guarded write, in the order a step makes them. */
export const GUARDED_WRITES: readonly GuardedWrite[] = [
  "journal intent",
  "journal reject",
  "journal confirm",
  "tool intent",
  "tool confirm",
  "tool failed",
  "tool flagged",
  "approval request",
  "tool denied",
  "finish",
  "heartbeat",
];

/**
 * The guarded writes a group statement carries (a fresh intent, a confirm, a
 * close: `run_writes.ts`); the others always go alone, as their single-row
 * statement.
 */
export const GROUPED_WRITES: readonly GuardedWrite[] = [
  "journal intent",
  "journal confirm",
  "tool intent",
  "tool confirm",
  "finish",
];

/** Where B is when A wakes: it has settled the run, or it is frozen with the run still open. */
export type FenceVariant = "closed" | "open";

/** The outcome of one fence scenario. */
export interface FenceResult {
  write: GuardedWrite;
  variant: FenceVariant;
  runId: string;
  problems: string[];
  transcript: string[];
  /** What A's process's group commit sent from A's wake to A's end (with grouping on). */
  group?: GroupCommitStats;
}

/** Options of {@link fenceScenario}. */
export interface FenceOptions {
  /** Where B is when A wakes. Default `closed`. */
  variant?: FenceVariant;
  /** A layer on every process's store connection (a planted bug, such as {@link dropEpochFromFence}). */
  plant?: (client: SqlClient) => SqlClient;
  /**
   * A's process carries a second run, frozen at the same point and never
   * taken (see the module's documentation). Only for {@link GROUPED_WRITES}.
   * With grouping on, the scenario fails unless A's refused write rode a
   * group statement and was refused inside it.
   */
  mate?: boolean;
}

/** A call of a process's fenced writes (its store's `writes`), by method, and (optionally) which of its calls. */
interface StoreCall {
  method: keyof RunWrites & string;
  when?: (args: unknown[]) => boolean;
}

/** The step a journal write is for: its second argument. */
const journalSeq = (seq: number): StoreCall["when"] => (args) => args[1] === seq;
/** The step a tool-call write is for: the `seq` of its second argument. */
const callSeq = (seq: number): StoreCall["when"] => (args) => (args[1] as { seq?: number })?.seq === seq;

/** How A is frozen just before the write, how B is frozen for the open variant, and how the run ends. */
interface Scenario {
  /** A stalls at this point... */
  stall?: { point: CrashPoint; seq: number };
  /** ...or A's request to this remote is held in flight... */
  hold?: { remote: "model" | "cloud"; when: (req: Request, n: number) => boolean };
  /** ...or A is held just before this call of its store. */
  before?: StoreCall;
  /** The call of B's store B is held before in the open variant: the run is open, its rows as A left them. */
  openAt: StoreCall;
  /** Faults installed before A starts. */
  setup?: (world: SimWorld) => void;
  /** Brings the run to where A takes it up (before A starts). */
  prepare?: (world: SimWorld, runId: string) => Promise<string | undefined>;
  /** Model answers lost to A's freeze, which B pays for again. */
  lostAnswers: number;
  /**
   * What B leaves once it settles the run: `done`, `blocked` (a flagged call),
   * `waiting` (an approval asked for: approved, then finished by a third
   * worker), or `denied` (done, the call at seq 1 denied).
   */
  runEnds: "done" | "blocked" | "waiting" | "denied";
  /** The label of the refused write in A's `fenced` line. */
  refused: (runId: string) => string;
  /** The variant of the demo's create_database the world's tools use. */
  database?: "no key" | "approval";
}

const SCENARIOS: Record<GuardedWrite, Scenario> = {
  "journal intent": {
    stall: { point: "before_decide", seq: 1 },
    openAt: { method: "journalIntentRow", when: journalSeq(1) },
    lostAnswers: 0,
    runEnds: "done",
    refused: () => "journal intent seq=1",
  },
  "journal reject": {
    // A's first answer names an unknown tool; A freezes before recording the refusal.
    setup: (w) => w.model.setFaults({ mode: "unknown_tool", mode_next: 1 }),
    stall: { point: "after_decide_before_journal", seq: 0 },
    openAt: { method: "journalIntentRow", when: journalSeq(0) },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "journal reject seq=0",
  },
  "journal confirm": {
    stall: { point: "after_decide_before_journal", seq: 1 },
    openAt: { method: "journalIntentRow", when: journalSeq(1) },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "journal confirm seq=1",
  },
  "tool intent": {
    stall: { point: "before_intent", seq: 1 },
    openAt: { method: "effectIntentRow", when: callSeq(1) },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool intent key=${runId}:1`,
  },
  "tool confirm": {
    stall: { point: "after_call", seq: 1 },
    // B's re-send, its row still at intent.
    openAt: { method: "effectIntentRow", when: callSeq(1) },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool confirm key=${runId}:1`,
  },
  "tool failed": {
    // A's database request is refused for good (400) but A freezes before recording it;
    // B re-sends under the same key, which now succeeds.
    setup: (w) => w.cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 400 }),
    hold: { remote: "cloud", when: (req) => new URL(req.url).pathname === "/v1/databases" },
    openAt: { method: "effectIntentRow", when: callSeq(1) },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool failed key=${runId}:1`,
  },
  "tool flagged": {
    // create_database takes no idempotency key here: B flags the stranded call, and so would A.
    setup: (w) => w.cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 503 }),
    hold: { remote: "cloud", when: (req) => new URL(req.url).pathname === "/v1/databases" },
    openAt: { method: "effectSettle" },
    database: "no key",
    lostAnswers: 0,
    runEnds: "blocked",
    refused: (runId) => `tool flagged key=${runId}:1`,
  },
  "approval request": {
    // create_database needs a person's yes here: A has decided to call it, and freezes before asking.
    stall: { point: "after_decide", seq: 1 },
    openAt: { method: "requestApprovals" },
    database: "approval",
    lostAnswers: 0,
    runEnds: "waiting",
    refused: (runId) => `approval request key=${runId}:1`,
  },
  "tool denied": {
    // The call was asked about and denied before A took the run; A freezes before recording the denial.
    prepare: async (world, runId) => {
      const first = await world.spawn({ name: "W", runId }).exit;
      if (first.kind !== "exited" || first.outcome.status !== "waiting") {
        return `the first worker ended ${exitStatus(first)}, expected waiting`;
      }
      const denied = await world.observer.operators.decideApproval(
        `${runId}:1`,
        "denied",
        "alice",
        "not today",
        world.clock.now(),
      );
      return denied ? undefined : "the approval could not be denied";
    },
    before: { method: "effectDenied" },
    openAt: { method: "effectDenied" },
    database: "approval",
    lostAnswers: 0,
    runEnds: "denied",
    refused: (runId) => `tool denied key=${runId}:1`,
  },
  "finish": {
    stall: { point: "after_decide", seq: 3 },
    openAt: { method: "finishRun" },
    lostAnswers: 0,
    runEnds: "done",
    refused: () => "finish done",
  },
  "heartbeat": {
    // A is cut off with its second model request in flight; its next heartbeat is refused.
    hold: { remote: "model", when: (_req, n) => n === 2 },
    openAt: { method: "journalIntentRow", when: journalSeq(1) },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "heartbeat",
  },
};

/** Events A may log after waking: the wake-up itself and its refusal. */
const ALLOWED_AFTER_WAKE = / event=(stall-woke|fenced|heartbeat-refused)( |$)/;

/** Event-loop turns A gets to end after waking (a fenced A needs a few statements; a bound, not a timing). */
const WAKE_TURNS = 2_000;

function exitStatus(exit: SimExit): string {
  return exit.kind === "exited"
    ? exit.outcome.status
    : exit.kind === "killed"
    ? "killed"
    : `error ${exit.error}`;
}

/** The status a worker that settles the run ends with, for each way the run ends. */
const SETTLED_STATUS = { done: "done", blocked: "blocked", waiting: "waiting", denied: "done" } as const;

/**
 * A layer on a process's store whose writes hold the first call matching `call`
 * until `release`: the process frozen just before that write. `reached`
 * resolves once a call is held.
 */
function holdBefore(call: StoreCall): {
  layer: (store: Store) => Store;
  reached: Promise<void>;
  release: () => void;
} {
  let release!: () => void;
  let reach!: () => void;
  const opened = new Promise<void>((r) => release = r);
  const reached = new Promise<void>((r) => reach = r);
  let held = false;
  const layer = (store: Store): Store => {
    const writes = new Proxy(store.writes, {
      get(target, prop) {
        // Bound to the writes themselves: their methods use private fields, which a proxy does not carry.
        const value = Reflect.get(target, prop, target);
        if (typeof value !== "function") return value;
        const bound = value.bind(target);
        if (prop !== call.method) return bound;
        return async (...args: unknown[]) => {
          if (!held && (call.when?.(args) ?? true)) {
            held = true;
            reach();
            await opened;
          }
          return await bound(...args);
        };
      },
    });
    // The same store (its group commit is its writes') but for the writes, layered.
    return store.withAudiences({ writes });
  };
  return { layer, reached, release };
}

/** Runs one clean run on `db` and returns what it costs. */
export async function measureBaseline(db: SimDb): Promise<Baseline> {
  const world = await SimWorld.open(db);
  const runId = `baseline-${crypto.randomUUID().slice(0, 8)}`;
  await world.spawn({ runId }).exit;
  return baselineOf(await world.snapshot(runId));
}

/** Everything the scenario compares before and after A wakes: the run's rows, its approvals, the remotes. */
async function observe(world: SimWorld, runId: string): Promise<string> {
  const snapshot = await world.snapshot(runId);
  return JSON.stringify({ ...snapshot, approvals: await world.observer.reads.listApprovals(runId) });
}

/** Waits up to {@link WAKE_TURNS} event-loop turns for `proc` to end; its exit, or undefined. */
async function endWithin(proc: SimProcess): Promise<SimExit | undefined> {
  let exit: SimExit | undefined;
  proc.exit.then((e) => exit = e);
  for (let i = 0; i < WAKE_TURNS && exit === undefined; i++) await new Promise((r) => setTimeout(r, 0));
  return exit;
}

/** Runs the fence scenario for `write` on `db`: B settled (`closed`) or frozen (`open`) when A wakes. */
export async function fenceScenario(
  db: SimDb,
  write: GuardedWrite,
  baseline: Baseline,
  opts: FenceOptions = {},
): Promise<FenceResult> {
  const s = SCENARIOS[write];
  const variant = opts.variant ?? "closed";
  if (opts.mate && (!GROUPED_WRITES.includes(write) || !s.stall)) {
    throw new RangeError(
      `Cannot give A a mate for the ${write}: only a write a group statement carries, A frozen at a stall point`,
    );
  }
  const runId = `fence-${variant}-${write.replace(" ", "-")}`;
  const mateId = `${runId}-mate`;
  const world = await SimWorld.open(db, {
    tools: s.database ? (fetch) => demoWithDatabase(fetch, s.database!) : undefined,
  });
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  let group: GroupCommitStats | undefined;
  const result = (): FenceResult => {
    for (const p of problems) world.note(`    problem: ${p}`);
    world.note(`--- fence ${write} (${variant}): ${problems.length === 0 ? "passed" : "failed"}`);
    return { write, variant, runId, problems, transcript: world.transcript, ...(group ? { group } : {}) };
  };
  const hooks = (layer?: (store: Store) => Store): ProcessHooks => ({
    ...(opts.plant ? { wrapStore: opts.plant } : {}),
    ...(layer ? { layerStore: layer } : {}),
  });
  s.setup?.(world);
  world.note(`=== fence ${write} (${variant}) run=${runId}`);
  const unprepared = await s.prepare?.(world, runId);
  if (unprepared) {
    problems.push(unprepared);
    return result();
  }

  // A runs until it is frozen just before the write.
  const aHeld = s.before ? holdBefore(s.before) : undefined;
  const plan = s.stall ? { stallAt: s.stall.point, stallSeq: s.stall.seq, crashSeq: s.stall.seq } : {};
  const a = world.spawn({ name: "A", runId, plan, hooks: hooks(aHeld?.layer) });
  // The mate: another run of A's process, frozen where A is.
  const mate = opts.mate ? world.spawn({ name: "M", runId: mateId, plan, host: a }) : undefined;
  const hold = s.hold ? a.holdWhen(s.hold.remote, s.hold.when) : undefined;
  const reached = hold?.reached ?? aHeld?.reached;
  const frozen = reached
    ? await Promise.race([reached.then(() => true), a.exit.then(() => false)])
    : (await untilStalledOrExit(a)).stalled;
  const mateFrozen = mate === undefined || (await untilStalledOrExit(mate)).stalled;
  // Both woken in one turn, A first: their writes are ready together.
  const wakeA = () => {
    hold?.release();
    aHeld?.release();
    a.releaseStall();
    mate?.releaseStall();
  };
  if (!frozen || !mateFrozen) {
    problems.push(
      frozen
        ? `A's mate never froze: it ended ${exitStatus(await mate!.exit)}`
        : `A never froze: it ended ${exitStatus(await a.exit)}`,
    );
    wakeA();
    await a.kill();
    return result();
  }

  // B takes the run (a newer epoch) and settles it, or is frozen with it open.
  const settledStatus = SETTLED_STATUS[s.runEnds];
  let bHeld: ReturnType<typeof holdBefore> | undefined;
  let bExit: Promise<SimExit>;
  if (variant === "closed") {
    bExit = world.spawn({ name: "B", runId, hooks: hooks() }).exit;
    const ended = await bExit;
    expect(
      ended.kind === "exited" && ended.outcome.status === settledStatus,
      `B ended ${exitStatus(ended)}, expected ${settledStatus}`,
    );
  } else {
    // A's heartbeat is due 3 s after its claim: B claims 2 s in, so A's comes first.
    if (write === "heartbeat") await world.advance(2_000);
    bHeld = holdBefore(s.openAt);
    bExit = world.spawn({ name: "B", runId, hooks: hooks(bHeld.layer) }).exit;
    const bFrozen = await Promise.race([bHeld.reached.then(() => true), bExit.then(() => false)]);
    if (!bFrozen) {
      problems.push(
        `B never reached ${s.openAt.method} with the run open: it ended ${exitStatus(await bExit)}`,
      );
      wakeA();
      await a.exit;
      return result();
    }
  }
  const beforeWake = await observe(world, runId);
  const sentBefore = { ...a.sent };
  const wakeAt = world.transcript.length;
  const groupAtWake = a.groupStats;

  // A wakes.
  if (write === "heartbeat") await world.advance(variant === "closed" ? 3_000 : 1_000);
  else wakeA();
  const aExit = await endWithin(a);
  const groupAtEnd = a.groupStats;
  const afterA = await observe(world, runId);
  if (aExit === undefined) {
    problems.push(`A did not end after waking: it went on as if it held the run`);
    wakeA();
    await a.kill();
  } else {
    expect(
      aExit.kind === "exited" && aExit.outcome.status === "fenced",
      `A ended ${exitStatus(aExit)}, expected fenced`,
    );
  }
  hold?.release();
  const aLines = world.transcript.slice(wakeAt).filter((l) => l.startsWith("A | ")).map((l) => l.slice(4));
  const fencedLine = aLines.find((l) => l.includes(" level=warn event=fenced "));
  expect(fencedLine !== undefined, `A did not log fenced`);
  expect(
    !!fencedLine?.includes(`Write refused (${s.refused(runId)})`),
    `A's fenced line does not name the refused write "${s.refused(runId)}": ${fencedLine}`,
  );
  for (const line of aLines.filter((l) => !ALLOWED_AFTER_WAKE.test(l))) {
    problems.push(`A acted after waking: ${line}`);
  }
  expect(
    a.sent.model === sentBefore.model,
    `A sent ${a.sent.model - sentBefore.model} model requests after waking`,
  );
  expect(
    a.sent.cloud === sentBefore.cloud,
    `A sent ${a.sent.cloud - sentBefore.cloud} cloud requests after waking`,
  );
  expect(
    afterA === beforeWake,
    `the run changed while A was awake:\n  before ${beforeWake}\n  after  ${afterA}`,
  );

  if (groupAtWake && groupAtEnd) group = groupStatsSince(groupAtWake, groupAtEnd);
  if (mate) {
    // A's one write after waking is the refused one; its mate's are all written (it finishes clean below).
    expect(
      group === undefined || (group.refused === 1 && group.grouped >= 2),
      `A's refused write did not ride a group statement with its mate's: from A's wake to its end, ` +
        `its process's group commit sent ${JSON.stringify(group)}`,
    );
    const ended = await mate.exit;
    expect(
      ended.kind === "exited" && ended.outcome.status === "done",
      `A's mate ended ${exitStatus(ended)}, expected done`,
    );
    problems.push(
      ...checkInvariants(await world.snapshot(mateId), { runId: mateId, baseline, lostAnswers: 0 })
        .map((p) => `A's mate: ${p}`),
    );
  }

  // B (frozen in the open variant) settles the run.
  if (bHeld) {
    bHeld.release();
    const ended = await bExit;
    expect(
      ended.kind === "exited" && ended.outcome.status === settledStatus,
      `B ended ${exitStatus(ended)}, expected ${settledStatus}`,
    );
  }
  problems.push(...await checkSettled(world, s, runId, baseline));
  return result();
}

/** What the run must look like once B has settled it (and, for an approval, a third worker finished it). */
async function checkSettled(
  world: SimWorld,
  s: Scenario,
  runId: string,
  baseline: Baseline,
): Promise<string[]> {
  const problems: string[] = [];
  if (s.runEnds === "waiting") {
    const approval = await world.observer.reads.getApproval(`${runId}:1`);
    if (approval?.status !== "pending") return [`the approval is ${approval?.status}, expected pending`];
    await world.observer.operators.decideApproval(`${runId}:1`, "approved", "alice", null, world.clock.now());
    const c = await world.spawn({ name: "C", runId }).exit;
    if (c.kind !== "exited" || c.outcome.status !== "done") {
      return [`C ended ${exitStatus(c)}, expected done`];
    }
  }
  const final = await world.snapshot(runId);
  if (s.runEnds === "done" || s.runEnds === "waiting") {
    problems.push(...checkInvariants(final, { runId, baseline, lostAnswers: s.lostAnswers }));
  } else if (s.runEnds === "blocked") {
    const flagged = final.effects.find((e) => e.seq === 1);
    if (flagged?.status !== "flagged") problems.push(`B did not flag the stranded call at seq=1`);
    if (final.run?.status !== "blocked") problems.push(`the run is ${final.run?.status}, expected blocked`);
    if (final.created.length !== 1) {
      problems.push(`the cloud holds ${final.created.length} resources, expected 1`);
    }
  } else {
    const denied = final.effects.find((e) => e.seq === 1);
    if (final.run?.status !== "done") problems.push(`the run is ${final.run?.status}, expected done`);
    if (
      denied?.status !== "failed" || denied.attempts !== 0 || !/^denied by alice/.test(denied.error ?? "")
    ) {
      problems.push(`the call at seq=1 is not the denial B recorded: ${JSON.stringify(denied)}`);
    }
    if (final.created.length !== 2) {
      problems.push(`the cloud holds ${final.created.length} resources, expected 2`);
    }
  }
  return problems;
}

/** The demo tools, with `create_database` taking no idempotency key, or needing a person's approval. */
function demoWithDatabase(fetch: FetchLike, database: "no key" | "approval"): Tool[] {
  return demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).map((t) =>
    t.name !== "create_database" ? t : defineTool({
      name: t.name,
      description: t.description,
      args: t.args,
      idempotent: database !== "no key",
      approval: database === "approval",
      run: (args, ctx) => t.run(args, ctx),
    })
  );
}

/**
 * A layer on a store connection that drops the epoch from the fence: every
 * "this run is `running` at epoch E" condition becomes "this run is
 * `running`". The bug the open variant of the proof catches (and the closed
 * one cannot: there the run is closed, so the status alone refuses the
 * write). `rewritten` counts the statements it changed; with `only`, only
 * the statements of that name are changed (`group-write`: the group
 * statement's fence alone). The group statement's fence lives in the
 * `group_write` function: its statements are sent to a copy of the
 * function with the fence changed, `group_write_planted`, made once on the
 * connection's schema (the function itself stays as it is).
 */
export function dropEpochFromFence(
  client: SqlClient,
  counter: { rewritten: number } = { rewritten: 0 },
  only?: string,
): SqlClient {
  const FENCED = /\((\w+)\.epoch = (.+?) and \1\.status = 'running'\) is true/g;
  const unfenced = (text: string) =>
    text.replace(
      FENCED,
      (_m, table: string, epoch: string) =>
        `((${epoch})::int is not null and ${table}.status = 'running') is true`,
    );
  let planted: Promise<void> | undefined;
  const plantFunction = () =>
    planted ??= (async () => {
      const [{ def }] = await client.query<{ def: string }>(
        "select pg_get_functiondef('group_write'::regproc) as def",
      );
      await client.exec(
        unfenced(def).replace(/(FUNCTION\s+(?:\w+\.)?)group_write\(/i, "$1group_write_planted("),
      );
    })();
  const rewrite = async (text: string, opts?: QueryOptions): Promise<string> => {
    if (only !== undefined && opts?.name !== only) return text;
    let out = unfenced(text);
    if (out.includes(" group_write(")) {
      await plantFunction();
      out = out.replace(" group_write(", " group_write_planted(");
    }
    if (out !== text) counter.rewritten++;
    return out;
  };
  return {
    get describe() {
      return client.describe;
    },
    query: async <T>(text: string, params?: unknown[], opts?: QueryOptions) =>
      client.query<T>(await rewrite(text, opts), params, opts),
    run: async (text: string, params?: unknown[], opts?: QueryOptions) =>
      client.run(await rewrite(text, opts), params, opts),
    exec: (text: string) => client.exec(text),
    close: () => client.close(),
  };
}

/** Runs every fence scenario, both variants, on `db` (a fresh schema of it). */
export async function fenceProof(db: SimDb): Promise<FenceResult[]> {
  await db.freshSchema();
  const baseline = await measureBaseline(db);
  const results: FenceResult[] = [];
  for (const variant of ["closed", "open"] as const) {
    for (const write of GUARDED_WRITES) results.push(await fenceScenario(db, write, baseline, { variant }));
  }
  return results;
}
