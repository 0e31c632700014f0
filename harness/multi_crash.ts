/**
 * Multi-crash: one run killed at a different crash point on each of several
 * consecutive incarnations, the list drawn from a seed, then restarted until
 * done. Crash points also fire inside recovery's re-send of a stranded call,
 * so a restart can die while it is settling what the last one left. The
 * finished run must pass invariant 5, counting every row confirmed at any
 * crash and one extra model call per lost answer.
 *
 * ```sh
 * deno run -A harness/multi_crash.ts --seed 42 [--crashes 5]   # replays one seed and prints its log
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { CRASH_POINTS, type CrashPoint } from "../runtime/base/crashpoints.ts";
import { type Baseline, checkInvariants } from "./invariants.ts";
import { type RunSnapshot, seededRandom, SimDb, SimWorld } from "./sim.ts";
import { measureBaseline } from "./fence.ts";

/** One planned crash, and whether it fired. */
export interface PlannedCrash {
  point: CrashPoint;
  seq: number;
  fired: boolean;
}

/** The outcome of one multi-crash run. */
export interface MultiCrashResult {
  seed: number;
  runId: string;
  crashes: PlannedCrash[];
  problems: string[];
  transcript: string[];
}

/**
 * Crashes `crashes` consecutive incarnations of one run, each at a different
 * point drawn from `seed` on a step at or after the one the run was working
 * on, then restarts it until done (a bounded number of times).
 */
export async function multiCrash(
  db: SimDb,
  baseline: Baseline,
  opts: { seed: number; crashes?: number },
): Promise<MultiCrashResult> {
  const { seed } = opts;
  const random = seededRandom(seed);
  const runId = `multi-${seed}`;
  const world = await SimWorld.open(db, { seed });
  const count = Math.min(opts.crashes ?? 4, CRASH_POINTS.length);
  // A different point on each restart: a seeded shuffle of the seven.
  const points = [...CRASH_POINTS];
  for (let i = points.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [points[i], points[j]] = [points[j], points[i]];
  }
  world.note(`=== multi-crash seed=${seed} run=${runId}`);
  const crashes: PlannedCrash[] = [];
  const earlier: RunSnapshot[] = [];
  const problems: string[] = [];
  let lostAnswers = 0;
  let done = false;
  for (const point of points.slice(0, count)) {
    // Aim at a step still ahead: the one the run is on or later, or a call a crash left stranded.
    const now = await world.snapshot(runId);
    const frontier = now.journal.filter((j) => j.status === "confirmed").length;
    const candidates = [
      ...now.effects.filter((e) => e.status === "intent").map((e) => e.seq),
      ...Array.from({ length: Math.max(0, baseline.steps - frontier) }, (_, i) => frontier + i),
    ];
    const seq = candidates[Math.floor(random() * candidates.length)] ?? baseline.steps - 1;
    const exit = await world.spawn({ runId, plan: { crashAt: point, crashSeq: seq } }).exit;
    const fired = exit.kind === "killed";
    crashes.push({ point, seq, fired });
    world.note(`--- planned ${point} seq=${seq}: ${fired ? "killed" : "not reached"}`);
    if (fired && point === "after_decide_before_journal") lostAnswers++;
    if (exit.kind === "error") problems.push(`an incarnation failed: ${exit.error}`);
    earlier.push(await world.snapshot(runId));
    await world.advance(1_000);
    if (exit.kind === "exited") {
      done = exit.outcome.status === "done";
      if (!done) problems.push(`an incarnation ended ${exit.outcome.status}`);
      break;
    }
  }
  // Bounded: a clean incarnation finishes the run, so one is enough; two would mean a bug.
  for (let restarts = 0; !done && restarts < 2; restarts++) {
    const exit = await world.spawn({ runId }).exit;
    done = exit.kind === "exited" && exit.outcome.status === "done";
    if (!done) {
      problems.push(`a clean restart ended ${exit.kind === "exited" ? exit.outcome.status : exit.kind}`);
    }
  }
  const final = await world.snapshot(runId);
  problems.push(...checkInvariants(final, { runId, baseline, lostAnswers, earlier }));
  world.note(
    `--- seed=${seed} crashes=${
      crashes.map((c) => `${c.point}@${c.seq}${c.fired ? "" : "(not reached)"}`).join(",")
    } ${problems.length === 0 ? "passed" : "failed"}`,
  );
  for (const p of problems) world.note(`    problem: ${p}`);
  return { seed, runId, crashes, problems, transcript: world.transcript };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { seed: { type: "string", default: "1" }, crashes: { type: "string", default: "4" } },
  });
  const seed = Number(values.seed);
  const crashes = Number(values.crashes);
  if (!Number.isSafeInteger(seed) || !Number.isInteger(crashes) || crashes < 1) {
    console.error(
      `multi-crash: --seed and --crashes must be integers: current values ${values.seed}, ${values.crashes}`,
    );
    Deno.exit(2);
  }
  const db = await SimDb.open();
  try {
    await db.freshSchema();
    const result = await multiCrash(db, await measureBaseline(db), { seed, crashes });
    console.log(result.transcript.join("\n"));
    Deno.exitCode = result.problems.length > 0 ? 1 : 0;
  } finally {
    await db.close();
  }
}
