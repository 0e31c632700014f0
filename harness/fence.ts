/**
 * The fence proof. For every guarded write, worker A is frozen just before
 * that write while holding epoch 1; worker B claims the run (epoch 2) and
 * settles it; then A wakes. Each scenario asserts that:
 *
 * - A's first write after waking is the guarded one, it is refused, and A
 *   logs `fenced` naming it (and nothing else: no `intent`, no `confirmed`);
 * - A sends nothing after waking: no model request (the refused journal
 *   intent comes before the model call it would have paid for), no tool call;
 * - nobody else writes: the rows, the model's counter and the cloud are
 *   exactly as B left them;
 * - B settled what A's epoch left, and the run looks as if one worker ran it
 *   alone (invariant 5), or, for a call that cannot be re-sent, is flagged.
 *
 * @module
 */

import { demoTools } from "../examples/provision/tools.ts";
import type { CrashPoint } from "../runtime/crashpoints.ts";
import { defineTool } from "../runtime/tools.ts";
import { type Baseline, baselineOf, checkInvariants } from "./invariants.ts";
import { SIM_CLOUD_URL, type SimDb, type SimExit, SimWorld, untilStalledOrExit } from "./sim.ts";

/** A write that carries the fence. */
export type GuardedWrite =
  | "journal intent"
  | "journal reject"
  | "journal confirm"
  | "tool intent"
  | "tool confirm"
  | "tool failed"
  | "tool flagged"
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
  "finish",
  "heartbeat",
];

/** The outcome of one fence scenario. */
export interface FenceResult {
  write: GuardedWrite;
  runId: string;
  problems: string[];
  transcript: string[];
}

/** How A is frozen just before the write, and how the world is set up for it. */
interface Scenario {
  /** A stalls at this point... */
  stall?: { point: CrashPoint; seq: number };
  /** ...or A's request to this remote is held in flight. */
  hold?: { remote: "model" | "cloud"; when: (req: Request, n: number) => boolean };
  /** Faults installed before A starts. */
  setup?: (world: SimWorld) => void;
  /** Model answers lost to A's freeze, which B pays for again. */
  lostAnswers: number;
  /** What the run ends as once B settles it. */
  runEnds: "done" | "blocked";
  /** The label of the refused write in A's `fenced` line. */
  refused: (runId: string) => string;
  /** The world's tools (default: the demo's). */
  nonIdempotentDatabase?: boolean;
}

const SCENARIOS: Record<GuardedWrite, Scenario> = {
  "journal intent": {
    stall: { point: "before_decide", seq: 1 },
    lostAnswers: 0,
    runEnds: "done",
    refused: () => "journal intent seq=1",
  },
  "journal reject": {
    // A's first answer names an unknown tool; A freezes before recording the refusal.
    setup: (w) => w.model.setFaults({ mode: "unknown_tool", mode_next: 1 }),
    stall: { point: "after_decide_before_journal", seq: 0 },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "journal reject seq=0",
  },
  "journal confirm": {
    stall: { point: "after_decide_before_journal", seq: 1 },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "journal confirm seq=1",
  },
  "tool intent": {
    stall: { point: "before_intent", seq: 1 },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool intent key=${runId}:1`,
  },
  "tool confirm": {
    stall: { point: "after_call", seq: 1 },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool confirm key=${runId}:1`,
  },
  "tool failed": {
    // A's database request is refused for good (400) but A freezes before recording it;
    // B re-sends under the same key, which now succeeds.
    setup: (w) => w.cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 400 }),
    hold: { remote: "cloud", when: (req) => new URL(req.url).pathname === "/v1/databases" },
    lostAnswers: 0,
    runEnds: "done",
    refused: (runId) => `tool failed key=${runId}:1`,
  },
  "tool flagged": {
    // create_database takes no idempotency key here: B flags the stranded call, and so would A.
    setup: (w) => w.cloud.setFaults({ path: "/v1/databases", fail_next: 1, fail_status: 503 }),
    hold: { remote: "cloud", when: (req) => new URL(req.url).pathname === "/v1/databases" },
    nonIdempotentDatabase: true,
    lostAnswers: 0,
    runEnds: "blocked",
    refused: (runId) => `tool flagged key=${runId}:1`,
  },
  "finish": {
    stall: { point: "after_decide", seq: 3 },
    lostAnswers: 0,
    runEnds: "done",
    refused: () => "finish done",
  },
  "heartbeat": {
    // A is cut off with its second model request in flight; its next heartbeat is refused.
    hold: { remote: "model", when: (_req, n) => n === 2 },
    lostAnswers: 1,
    runEnds: "done",
    refused: () => "heartbeat",
  },
};

/** Events A may log after waking: the wake-up itself and its refusal. */
const ALLOWED_AFTER_WAKE = / event=(stall-woke|fenced|heartbeat-refused)( |$)/;

function exitStatus(exit: SimExit): string {
  return exit.kind === "exited"
    ? exit.outcome.status
    : exit.kind === "killed"
    ? "killed"
    : `error ${exit.error}`;
}

/** Runs one clean run on `db` and returns what it costs. */
export async function measureBaseline(db: SimDb): Promise<Baseline> {
  const world = await SimWorld.open(db);
  const runId = `baseline-${crypto.randomUUID().slice(0, 8)}`;
  await world.spawn({ runId }).exit;
  return baselineOf(await world.snapshot(runId));
}

/** Runs the fence scenario for `write` on `db`. */
export async function fenceScenario(
  db: SimDb,
  write: GuardedWrite,
  baseline: Baseline,
): Promise<FenceResult> {
  const s = SCENARIOS[write];
  const runId = `fence-${write.replace(" ", "-")}`;
  const world = await SimWorld.open(db, {
    tools: s.nonIdempotentDatabase ? (fetch) => nonIdempotentDatabase(fetch) : undefined,
  });
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => {
    if (!ok) problems.push(what);
  };
  s.setup?.(world);
  world.note(`=== fence ${write} run=${runId}`);

  // A runs until it is frozen just before the write.
  const a = world.spawn({
    name: "A",
    runId,
    plan: s.stall ? { stallAt: s.stall.point, stallSeq: s.stall.seq, crashSeq: s.stall.seq } : {},
  });
  const hold = s.hold ? a.holdWhen(s.hold.remote, s.hold.when) : undefined;
  const frozen = hold
    ? await Promise.race([hold.reached.then(() => true), a.exit.then(() => false)])
    : (await untilStalledOrExit(a)).stalled;
  if (!frozen) {
    problems.push(`A never froze: it ended ${exitStatus(await a.exit)}`);
    return { write, runId, problems, transcript: world.transcript };
  }

  // B takes the run (epoch 2) and settles it.
  const b = world.spawn({ name: "B", runId });
  const bExit = await b.exit;
  expect(
    bExit.kind === "exited" && bExit.outcome.status === s.runEnds,
    `B ended ${exitStatus(bExit)}, expected ${s.runEnds}`,
  );
  const afterB = await world.snapshot(runId);
  const sentBefore = { ...a.sent };
  const wakeAt = world.transcript.length;

  // A wakes.
  if (write === "heartbeat") {
    await world.advance(3_000);
  } else if (hold) hold.release();
  else a.releaseStall();
  const aExit = await a.exit;
  hold?.release();
  const afterA = await world.snapshot(runId);

  expect(
    aExit.kind === "exited" && aExit.outcome.status === "fenced",
    `A ended ${exitStatus(aExit)}, expected fenced`,
  );
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
    JSON.stringify(afterA) === JSON.stringify(afterB),
    `the run changed after B finished:\n  before ${JSON.stringify(afterB)}\n  after  ${
      JSON.stringify(afterA)
    }`,
  );
  if (s.runEnds === "done") {
    problems.push(...checkInvariants(afterA, { runId, baseline, lostAnswers: s.lostAnswers }));
  } else {
    const flagged = afterA.effects.find((e) => e.seq === 1);
    expect(flagged?.status === "flagged", `B did not flag the stranded call at seq=1`);
    expect(afterA.run?.status === "blocked", `the run is ${afterA.run?.status}, expected blocked`);
    expect(afterA.created.length === 1, `the cloud holds ${afterA.created.length} resources, expected 1`);
  }
  for (const p of problems) world.note(`    problem: ${p}`);
  world.note(`--- fence ${write}: ${problems.length === 0 ? "passed" : "failed"}`);
  return { write, runId, problems, transcript: world.transcript };
}

/** The demo tools, with `create_database` declared as taking no idempotency key. */
function nonIdempotentDatabase(fetch: (req: Request) => Promise<Response>) {
  return demoTools({ cloudUrl: SIM_CLOUD_URL, fetch }).map((t) =>
    t.name !== "create_database" ? t : defineTool({
      name: t.name,
      description: t.description,
      args: t.args,
      idempotent: false,
      run: (args, ctx) => t.run(args, ctx),
    })
  );
}

/** Runs every fence scenario on `db` (a fresh schema of it). */
export async function fenceProof(db: SimDb): Promise<FenceResult[]> {
  await db.freshSchema();
  const baseline = await measureBaseline(db);
  const results: FenceResult[] = [];
  for (const write of GUARDED_WRITES) results.push(await fenceScenario(db, write, baseline));
  return results;
}
