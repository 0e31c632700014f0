/**
 * Kill-to-resumed latency: how long a run goes without a worker after its
 * worker is killed with SIGKILL, measured to the moment the replacement
 * worker's claim is committed (its `claimed` line).
 *
 * - `parent`: the killed worker is the supervisor's own child; the supervisor
 *   sees it exit, clears its leases and starts a replacement, which takes the
 *   run at its first poll (goal: under 1 s).
 * - `lease`: the killed worker was started by hand; the supervisor only learns
 *   of the death when the heartbeat is older than `LEASE_S`, at its next poll.
 *
 * ```sh
 * TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test deno task bench:supervisor
 * ```
 *
 * Settings: `TRIALS` (default 5), `LEASE_S`, `POLL_S`, `HEARTBEAT_S` (the
 * production defaults 12, 3, 3 unless set). Each run uses a schema of its own,
 * dropped at the end.
 *
 * @module
 */

import { parseLine, type Proc, startSupervisor, startWorker } from "../harness/procs.ts";
import { serveMocks } from "../mock/server.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";

const TEST_DATABASE_URL = Deno.env.get("TEST_DATABASE_URL") || undefined;

const trials = Number(Deno.env.get("TRIALS") ?? 5);
const timing = {
  LEASE_S: Deno.env.get("LEASE_S") ?? "12",
  POLL_S: Deno.env.get("POLL_S") ?? "3",
  HEARTBEAT_S: Deno.env.get("HEARTBEAT_S") ?? "3",
};

function claimedAt(p: Proc, runId: string, epoch: number): number | undefined {
  for (const l of p.lines) {
    const e = parseLine(l);
    if (e?.event === "claimed" && e.run === runId && Number(e.epoch) === epoch) return Date.parse(e.ts);
  }
  return undefined;
}

async function waitClaim(p: Proc, runId: string, epoch: number, timeoutMs: number): Promise<number> {
  await p.waitFor(
    () => claimedAt(p, runId, epoch) !== undefined,
    `claimed ${runId} epoch=${epoch}`,
    timeoutMs,
  );
  return claimedAt(p, runId, epoch)!;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function summary(name: string, ms: number[]): string {
  const sorted = [...ms].sort((a, b) => a - b);
  const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
  return `${name.padEnd(7)} n=${ms.length}  min=${sorted[0]}ms  median=${
    sorted[Math.floor(sorted.length / 2)]
  }ms  max=${sorted.at(-1)}ms  mean=${Math.round(mean)}ms`;
}

async function main(): Promise<void> {
  if (!TEST_DATABASE_URL) {
    console.error(
      "Set TEST_DATABASE_URL (e.g. postgres://postgres@127.0.0.1:5432/test) to run this benchmark",
    );
    Deno.exit(2);
  }
  const pg = await createSandbox(TEST_DATABASE_URL, { prefix: "t", max: 4 });
  const mocks = await serveMocks();
  // A slow server request: the worker is killed while it waits for the cloud.
  mocks.cloud.setFaults({ path: "/v1/servers", delay_ms: 2000 });
  const env = {
    DATABASE_URL: pg.url,
    MODEL_URL: mocks.modelUrl,
    MODEL: "mock-planner",
    CLOUD_URL: mocks.cloudUrl,
    ...timing,
  };
  const sup = startSupervisor({ ...env, WORKERS: "2" });
  const parent: number[] = [];
  const lease: number[] = [];
  try {
    await sup.waitFor((l) => parseLine(l)?.event === "supervisor", "the supervisor to start");
    console.log(`settings: lease=${timing.LEASE_S}s poll=${timing.POLL_S}s heartbeat=${timing.HEARTBEAT_S}s`);
    for (let i = 0; i < trials; i++) {
      const runId = `parent-${i}`;
      await pg.store.leases.createRun({ runId: runId, agent: "provision", goal: "bench" }, new Date());
      // The supervisor picks it up at its next poll.
      await waitClaim(sup, runId, 1, 60_000);
      // The worker process that claimed it (worker hosts take runs themselves).
      const owner = sup.events("claimed").find((e) => e.run === runId && e.epoch === "1")!.owner;
      const pid = Number(sup.events("worker-started").find((e) => e.worker === owner)!.pid);
      await sleep(300);
      const killedAt = Date.now();
      Deno.kill(pid, "SIGKILL");
      const resumedAt = await waitClaim(sup, runId, 2, 60_000);
      parent.push(resumedAt - killedAt);
      console.log(`parent  run=${runId}  kill_to_claimed_ms=${resumedAt - killedAt}`);
    }
    for (let i = 0; i < trials; i++) {
      const runId = `lease-${i}`;
      const worker = startWorker({ ...env, RUN_ID: runId });
      try {
        await waitClaim(worker, runId, 1, 60_000);
        await sleep(300);
        const killedAt = Date.now();
        worker.kill("SIGKILL");
        await worker.status;
        const resumedAt = await waitClaim(sup, runId, 2, 120_000);
        lease.push(resumedAt - killedAt);
        console.log(`lease   run=${runId}  kill_to_claimed_ms=${resumedAt - killedAt}`);
      } finally {
        await worker.close();
      }
    }
    console.log(summary("parent", parent));
    console.log(summary("lease", lease));
  } finally {
    sup.kill("SIGTERM");
    await sup.status;
    await sup.close();
    await mocks.close();
    await pg.drop();
  }
}

if (import.meta.main) await main();
