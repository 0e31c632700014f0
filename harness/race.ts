/**
 * The race proof: two live workers on one run.
 *
 * - **Claim race.** Two workers started together: exactly one wins the claim
 *   (one `claimed` line); the other logs `fenced` with `lost_claim` and sends
 *   nothing to any remote.
 * - **Stall and steal.** Worker A stalls at `after_decide` holding epoch 1 and
 *   stops heartbeating; the clock moves past the lease; worker B claims epoch
 *   2 and finishes; A wakes and is fenced on its first write, sending nothing.
 *
 * Either way the finished run passes invariant 5: it looks as if one worker
 * ran it alone. With `mate`, A's process carries a second run stalled at the
 * same point and never taken: with group commit on, A's refused write rides
 * a group statement with the mate's valid one, and must be refused inside it
 * (the claim race's refusal is the claim itself, which no group statement
 * carries). In-process here, with the manual clock; the same story with
 * real processes (`STALL_AT`, `STALL_MS`) is in `tests/race_pg_test.ts`.
 *
 * @module
 */

import type { CrashPoint } from "../runtime/base/crashpoints.ts";
import type { GroupCommitStats } from "../runtime/store/group_commit.ts";
import { type Baseline, checkInvariants } from "./invariants.ts";
import { groupStatsSince, type SimDb, type SimExit, SimWorld, untilStalledOrExit } from "./sim.ts";

/** The outcome of one race scenario. */
export interface RaceResult {
  runId: string;
  problems: string[];
  transcript: string[];
  /** What A's process's group commit sent from A's wake to A's end (with grouping on). */
  group?: GroupCommitStats;
}

function status(exit: SimExit): string {
  return exit.kind === "exited"
    ? exit.outcome.status
    : exit.kind === "killed"
    ? "killed"
    : `error ${exit.error}`;
}

/** Two workers started at the same moment on a new run. */
export async function claimRace(db: SimDb, baseline: Baseline, runId = "race-claim"): Promise<RaceResult> {
  const world = await SimWorld.open(db);
  world.note(`=== claim race run=${runId}`);
  const a = world.spawn({ name: "A", runId });
  const b = world.spawn({ name: "B", runId });
  const exits = await Promise.all([a.exit, b.exit]);
  const problems: string[] = [];
  const statuses = exits.map(status).sort();
  if (statuses.join(",") !== "done,lost_claim") {
    problems.push(`the workers ended ${statuses.join(" and ")}, expected one done and one lost_claim`);
  }
  const claims = world.transcript.filter((l) => l.includes(" level=info event=claimed "));
  if (claims.length !== 1) problems.push(`${claims.length} workers claimed the run, expected exactly 1`);
  const loser = exits[0].kind === "exited" && exits[0].outcome.status === "lost_claim" ? a : b;
  if (
    !world.transcript.some((l) => l.startsWith(`${loser.name} | `) && l.includes(" level=warn event=fenced "))
  ) {
    problems.push(`the loser ${loser.name} did not log fenced`);
  }
  if (loser.sent.model + loser.sent.cloud !== 0) {
    problems.push(`the loser sent ${loser.sent.model} model and ${loser.sent.cloud} cloud requests`);
  }
  const final = await world.snapshot(runId);
  if (final.run?.epoch !== 1) {
    problems.push(`the run is at epoch ${final.run?.epoch}, expected 1 (one claim)`);
  }
  problems.push(...checkInvariants(final, { runId, baseline, lostAnswers: 0 }));
  for (const p of problems) world.note(`    problem: ${p}`);
  return { runId, problems, transcript: world.transcript };
}

/** A stalls at `point` of step `seq` holding epoch 1; B steals the run once the lease expires. */
export async function stallAndSteal(
  db: SimDb,
  baseline: Baseline,
  opts: { runId?: string; point?: CrashPoint; seq?: number; mate?: boolean } = {},
): Promise<RaceResult> {
  const runId = opts.runId ?? "race-steal";
  const point = opts.point ?? "after_decide";
  const seq = opts.seq ?? 0;
  const leaseMs = 12_000;
  const world = await SimWorld.open(db, { heartbeatMs: 3_000, leaseMs });
  world.note(`=== stall and steal at ${point} seq=${seq} run=${runId}`);
  const problems: string[] = [];
  const plan = { stallAt: point, stallSeq: seq, crashSeq: seq };
  const a = world.spawn({ name: "A", runId, plan });
  const mateId = `${runId}-mate`;
  const mate = opts.mate ? world.spawn({ name: "M", runId: mateId, plan, host: a }) : undefined;
  const parked = await untilStalledOrExit(a);
  const mateParked = mate ? await untilStalledOrExit(mate) : undefined;
  if (!parked.stalled || (mateParked && !mateParked.stalled)) {
    problems.push(
      !parked.stalled
        ? `A never stalled: it ended ${status(parked.exit)}`
        : `A's mate never stalled: it ended ${status(await mate!.exit)}`,
    );
    a.releaseStall();
    mate?.releaseStall();
    await a.kill();
    return { runId, problems, transcript: world.transcript };
  }
  // A frozen worker does not heartbeat: after the lease, the run looks abandoned.
  const heartbeatBefore = (await world.snapshot(runId)).run?.heartbeat_at;
  await world.advance(leaseMs + 1_000);
  const run = (await world.snapshot(runId)).run;
  const ageMs = world.clock.now().getTime() - new Date(run?.heartbeat_at ?? 0).getTime();
  if (String(run?.heartbeat_at) !== String(heartbeatBefore)) problems.push(`A heartbeat while stalled`);
  if (ageMs <= leaseMs) problems.push(`the lease is ${ageMs}ms old, not past ${leaseMs}ms: nobody may steal`);

  const b = world.spawn({ name: "B", runId });
  const bExit = await b.exit;
  if (bExit.kind !== "exited" || bExit.outcome.status !== "done") problems.push(`B ended ${status(bExit)}`);
  const afterB = await world.snapshot(runId);
  const sent = { ...a.sent };
  const wakeAt = world.transcript.length;
  const groupAtWake = a.groupStats;
  // Both woken in one turn, A first: their writes are ready together.
  a.releaseStall();
  mate?.releaseStall();
  const aExit = await a.exit;
  const groupAtEnd = a.groupStats;
  const group = groupAtWake && groupAtEnd ? groupStatsSince(groupAtWake, groupAtEnd) : undefined;
  if (aExit.kind !== "exited" || aExit.outcome.status !== "fenced") {
    problems.push(`A ended ${status(aExit)}, expected fenced`);
  }
  const aLines = world.transcript.slice(wakeAt).filter((l) => l.startsWith("A | "));
  const first = aLines.find((l) => !/ event=stall(-woke)? /.test(l));
  if (!first?.includes(" level=warn event=fenced ")) {
    problems.push(`A's first line after waking is not fenced: ${first}`);
  }
  if (a.sent.model !== sent.model || a.sent.cloud !== sent.cloud) {
    problems.push(`A sent requests after waking`);
  }
  const final = await world.snapshot(runId);
  if (JSON.stringify(final) !== JSON.stringify(afterB)) problems.push(`the run changed after B finished`);
  if (final.run?.owner !== "B" || final.run.epoch !== 2) {
    problems.push(`the run ended owned by ${final.run?.owner} at epoch ${final.run?.epoch}, expected B at 2`);
  }
  problems.push(...checkInvariants(final, { runId, baseline, lostAnswers: 0 }));
  if (mate) {
    // A's one write after waking is the refused one; its mate's are all written (it finishes clean below).
    if (group && !(group.refused === 1 && group.grouped >= 2)) {
      problems.push(
        `A's refused write did not ride a group statement with its mate's: from A's wake to its end, ` +
          `its process's group commit sent ${JSON.stringify(group)}`,
      );
    }
    const mateExit = await mate.exit;
    if (mateExit.kind !== "exited" || mateExit.outcome.status !== "done") {
      problems.push(`A's mate ended ${status(mateExit)}, expected done`);
    }
    problems.push(
      ...checkInvariants(await world.snapshot(mateId), { runId: mateId, baseline, lostAnswers: 0 })
        .map((p) => `A's mate: ${p}`),
    );
  }
  for (const p of problems) world.note(`    problem: ${p}`);
  return { runId, problems, transcript: world.transcript, ...(group ? { group } : {}) };
}
