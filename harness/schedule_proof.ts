/**
 * Schedules across failures, with real processes: two supervisors
 * (`cli/main.ts supervise`, one worker each) on a PostgreSQL server of the
 * proof's own, the demo agent against the mock model and cloud served from
 * this process, and three one-second schedules (overlap `allow`, a second of
 * grace), one per catch-up rule. While they tick, each supervisor is
 * SIGKILLed and started again once, and the database is stopped for a while
 * (an outage no ticker can reach through), then started again. Then the
 * schedules are paused and every run they started is driven to its end.
 *
 * What it reports, per schedule, is what the test asserts: the occurrences
 * from its first to the last it handled; the runs (each id derived from its
 * occurrence, none for a time that is no occurrence, none twice); the
 * occurrences with no run, which must be exactly those counted as skipped
 * (none for catch-up `all`); the `schedule-started` lines of every
 * supervisor for each run (never two; none only for a tick a kill or the
 * server's stop cut off after its commit); and the resources the mock cloud
 * created under each run's keys (one per key).
 *
 * @module
 */

import demo from "../examples/provision/agent.ts";
import { serveMocks } from "../mock/server.ts";
import { Client } from "../runtime/client/client.ts";
import { openStore } from "../runtime/store/open.ts";
import type { CatchUpRule } from "../runtime/store/store.ts";
import { occurrenceRunId } from "../runtime/schedules/spec.ts";
import { removeStalePgServers, startPgServer } from "./pg_server.ts";
import { parseLine, type Proc, startSupervisor, until } from "./procs.ts";

/** How long the proof runs. */
export interface ScheduleProofOptions {
  /** From the schedules' creation to their pause, in ms. */
  durationMs: number;
  /** How long the database is stopped, in ms. */
  outageMs: number;
  /** Where progress lines go. */
  note?: (line: string) => void;
  /** A file to write every supervisor's lines to at the end, each prefixed with its name: for a look afterwards. */
  logPath?: string;
}

/** What the proof found for one schedule. */
export interface ScheduleFindings {
  name: string;
  catchUp: CatchUpRule;
  /** Occurrences from the first to the last the schedule handled. */
  occurrences: number;
  /** Runs it started. */
  runs: number;
  /** What the schedule counted as skipped. */
  skipped: number;
  /** Occurrences with no run. */
  missing: number;
  /** Runs whose id is not the one derived from their occurrence, or whose time is no occurrence of the window. */
  misnamed: string[];
  /** Occurrences with more than one run. */
  doubled: string[];
  /** Runs not done once every run settled. */
  notDone: string[];
  /** Runs whose `schedule-started` line appeared more than once across every supervisor's output. */
  startedTwice: string[];
  /**
   * Runs with no `schedule-started` line. A ticker's line can be lost for good: its process SIGKILLed between
   * the tick's commit and the line, or the server stopped between the commit and its answer (the ticker then
   * logs the tick as failed, and the next tick finds the schedule already moved on).
   */
  unlogged: string[];
  /** Those of `unlogged` whose tick (`created_at`) did not begin within 3 s before a kill or the server's stop. */
  unloggedUnexplained: string[];
  /** Runs whose keys did not each create exactly one resource at the mock cloud. */
  effectsNotOnce: string[];
}

/** What the proof did and found. */
export interface ScheduleProofReport {
  schedules: ScheduleFindings[];
  /** How long the database was away, in ms, as measured. */
  outageMs: number;
  /** `schedule-tick-failed` lines the supervisors wrote (the outage seen). */
  tickFailures: number;
  /** The supervisors' processes, in the order started (the killed ones first). */
  supervisors: { name: string; pid: number; code: number | null }[];
  /** From the pause to every run done, in ms. */
  drainMs: number;
}

const RULES: readonly CatchUpRule[] = ["all", "last", "none"];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs the proof (see the module's comment); needs root and the server binaries (`pgServerSkipReason`). */
export async function proveSchedules(opts: ScheduleProofOptions): Promise<ScheduleProofReport> {
  const note = opts.note ?? (() => {});
  await removeStalePgServers();
  const server = await startPgServer({ listen: "127.0.0.1", trustCidr: "127.0.0.1/32" });
  const mocks = await serveMocks();
  const procs: { name: string; proc: Proc }[] = [];
  const store = await openStore({ databaseUrl: server.url, dataDir: "" }, { max: 2 });
  const client = new Client(store);
  try {
    const env = {
      DATABASE_URL: server.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      WORKERS: "1",
      RUNS_PER_WORKER: "50",
      LEASE_S: "2",
      HEARTBEAT_S: "0.3",
      POLL_S: "0.3",
    };
    const start = (name: string) => {
      const proc = startSupervisor({ ...env, SUPERVISOR: name });
      procs.push({ name, proc });
      return proc;
    };
    const first: Record<string, number> = {};
    for (const catchUp of RULES) {
      const s = await client.schedules.set(demo, {
        name: `proof-${catchUp}`,
        every: "1s",
        overlap: "allow",
        catchUp,
        catchUpMax: 100,
        graceMs: 1_000,
      });
      first[s.name] = s.nextAt!.getTime();
    }
    const t0 = Date.now();
    let a = start("sup-a");
    let b = start("sup-b");
    const at = async (fraction: number) =>
      await sleep(Math.max(0, t0 + fraction * opts.durationMs - Date.now()));
    // When a ticker's line could be lost: each kill, and the server's stop.
    const interruptions: number[] = [];
    const restart = async (proc: Proc, name: string) => {
      note(`SIGKILL ${name} (pid ${proc.pid}) at ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      interruptions.push(Date.now());
      proc.kill("SIGKILL");
      await proc.status;
      await sleep(1_500);
      return start(`${name}-again`);
    };
    await at(0.25);
    a = await restart(a, "sup-a");
    await at(0.45);
    note(`database stopped at ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const down = Date.now();
    interruptions.push(down);
    await server.stop("fast");
    await sleep(Math.max(0, opts.outageMs - (Date.now() - down)));
    await server.start();
    const outageMs = Date.now() - down;
    note(`database started again after ${outageMs} ms`);
    await at(0.7);
    b = await restart(b, "sup-b");
    await at(1);
    for (const catchUp of RULES) await client.schedules.pause(`proof-${catchUp}`);
    const paused = Date.now();
    note(`schedules paused at ${((paused - t0) / 1000).toFixed(1)} s`);
    await until(
      async () => {
        const [row] = await store.client.query<{ open: number }>(
          "select count(*)::int as open from runs where schedule is not null and status <> 'done'",
        );
        return row.open === 0;
      },
      "every scheduled run done",
      240_000,
      250,
    );
    const drainMs = Date.now() - paused;
    const lines = procs.flatMap((p) => p.proc.lines);
    const schedules: ScheduleFindings[] = [];
    for (const catchUp of RULES) {
      schedules.push(
        await findings(
          client,
          `proof-${catchUp}`,
          catchUp,
          first[`proof-${catchUp}`],
          lines,
          mocks,
          interruptions,
        ),
      );
    }
    for (const p of [a, b]) p.kill("SIGTERM");
    const supervisors = [];
    for (const { name, proc } of procs) supervisors.push({ name, pid: proc.pid, code: await proc.status });
    return {
      schedules,
      outageMs,
      tickFailures: lines.filter((l) => parseLine(l)?.event === "schedule-tick-failed").length,
      supervisors,
      drainMs,
    };
  } finally {
    if (opts.logPath) {
      const text = procs.flatMap(({ name, proc }) => proc.lines.map((l) => `${name} ${l}`)).join("\n");
      await Deno.writeTextFile(opts.logPath, text + "\n");
    }
    for (const { proc } of procs) await proc.close();
    await store.client.close().catch(() => {});
    await mocks.close();
    await server.close();
  }
}

/** What one schedule left: its runs against its occurrences, its start lines, its effects. */
async function findings(
  client: Client,
  name: string,
  catchUp: CatchUpRule,
  firstMs: number,
  lines: string[],
  mocks: { cloud: { created(): { key: string }[] } },
  interruptions: number[],
): Promise<ScheduleFindings> {
  const schedule = (await client.schedules.get(name))!;
  const lastMs = schedule.lastAt!.getTime();
  const occurrences = (lastMs - firstMs) / 1_000 + 1;
  const runs = await client.store.client.query<
    { run_id: string; scheduled_at: Date; status: string; created_at: Date }
  >("select run_id, scheduled_at, status, created_at from runs where schedule = $1", [name]);
  const byTime = new Map<number, string[]>();
  for (const r of runs) {
    const t = new Date(r.scheduled_at).getTime();
    byTime.set(t, [...(byTime.get(t) ?? []), r.run_id]);
  }
  const started = new Map<string, number>();
  for (const line of lines) {
    const e = parseLine(line);
    if (e?.event === "schedule-started" && e.schedule === name) {
      started.set(e.run, (started.get(e.run) ?? 0) + 1);
    }
  }
  const created = mocks.cloud.created();
  const unlogged = runs.filter((r) => !started.has(r.run_id));
  const explained = (r: { created_at: Date }) => {
    const at = new Date(r.created_at).getTime();
    return interruptions.some((t) => at <= t && at >= t - 3_000);
  };
  return {
    name,
    catchUp,
    occurrences,
    runs: runs.length,
    skipped: schedule.skipped,
    missing:
      Array.from({ length: occurrences }, (_, i) => firstMs + i * 1_000).filter((t) => !byTime.has(t)).length,
    misnamed: runs.filter((r) => {
      const t = new Date(r.scheduled_at).getTime();
      return r.run_id !== occurrenceRunId(name, t) || t < firstMs || t > lastMs ||
        (t - firstMs) % 1_000 !== 0;
    }).map((r) => r.run_id),
    doubled: [...byTime].filter(([, ids]) => ids.length > 1).map(([t]) => new Date(t).toISOString()),
    notDone: runs.filter((r) => r.status !== "done").map((r) => r.run_id),
    startedTwice: runs.filter((r) => (started.get(r.run_id) ?? 0) > 1).map((r) => r.run_id),
    unlogged: unlogged.map((r) => r.run_id),
    unloggedUnexplained: unlogged.filter((r) => !explained(r)).map((r) => r.run_id),
    effectsNotOnce: runs.filter((r) => {
      const keys = created.filter((c) => c.key.startsWith(`${r.run_id}:`)).map((c) => c.key);
      return keys.length !== 3 || new Set(keys).size !== 3;
    }).map((r) => r.run_id),
  };
}
