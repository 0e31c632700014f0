import assert from "node:assert/strict";
import { MockCloud } from "../../mock/cloud.ts";
import demoAgent from "../../examples/provision/agent.ts";
import { demoTools } from "../../examples/provision/tools.ts";
import { MockModel } from "../../mock/model.ts";
import { until } from "../../harness/procs.ts";
import { pgTest } from "../../tests/_pg.ts";
import { SystemClock } from "../base/clock.ts";
import { type RunDeps, runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { StoreError } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive } from "./run_driver.ts";
import { OpenAIPlanner } from "../model/planner.ts";
import { type Fence, Store } from "../store/store.ts";
import { RunWrites } from "../store/run_writes.ts";
import { ToolRegistry } from "../agent/tools.ts";

/** A run's writes whose heartbeats can be made to fail, as if the database were gone. */
class FlakyHeartbeatWrites extends RunWrites {
  heartbeatDown = false;
  override heartbeat(f: Fence, now: Date): Promise<boolean> {
    if (this.heartbeatDown) {
      return Promise.reject(new StoreError("DB_UNREACHABLE", "Cannot reach the database (simulated)"));
    }
    return super.heartbeat(f, now);
  }
}

/**
 * A worker on `store` whose first tool call hangs. Its lease is `leaseMs`: short where the test is about the
 * lease going, long enough elsewhere that a busy machine's pauses cannot take it.
 */
async function deps(
  store: Store,
  lines: string[],
  leaseMs: number,
): Promise<{ deps: RunDeps; cloud: MockCloud }> {
  const clock = new SystemClock();
  const log = new Logger({ clock, sink: arraySink(lines) });
  const model = await MockModel.open({});
  const cloud = await MockCloud.open({});
  // The first server request hangs (until aborted): the worker is mid-call while its lease goes.
  cloud.setFaults({ path: "/v1/servers", delay_ms: 60_000 });
  return {
    cloud,
    deps: runDepsFor(
      processDeps({ store, clock, log, owner: "w1", heartbeatMs: 20, leaseMs, random: () => 0.5 }),
      agentDeps({
        agent: demoAgent,
        planner: new OpenAIPlanner({ url: "http://mock.in-process/v1", model: "m", fetch: model.handler }),
        tools: new ToolRegistry(demoTools({ cloudUrl: "http://cloud.in-process", fetch: cloud.handler })),
      }),
    ),
  };
}

pgTest("a worker whose run is cancelled stops at its next heartbeat, mid tool call", async (pg) => {
  const lines: string[] = [];
  const { deps: d, cloud } = await deps(pg.store, lines, 30_000);
  const worker = claimAndDrive(d, "hb-cancel", "goal");
  // Bounded: the worker reaches the hanging call within a few round trips.
  await until(
    () => Promise.resolve(lines.some((l) => l.includes("calling"))),
    "the worker's tool call",
    60_000,
    10,
  );
  assert.ok(await pg.store.families.cancel("hb-cancel", "cancelled by test", new Date()));
  const outcome = await worker;
  cloud.releaseHung();
  assert.equal(outcome.status, "cancelled");
  assert.ok(lines.some((l) => / level=warn event=heartbeat-refused run=hb-cancel/.test(l)), lines.join("\n"));
  assert.ok(lines.some((l) => / level=warn event=stopped run=hb-cancel/.test(l)), lines.join("\n"));
  const { effects } = await pg.store.reads.loadHistory("hb-cancel");
  assert.equal(effects[0].status, "intent", "nothing was confirmed after the cancel");
  assert.equal((await pg.store.reads.getRun("hb-cancel"))?.status, "cancelled");
});

pgTest("a worker that cannot heartbeat for longer than the lease stops acting on the run", async (pg) => {
  const writes = new FlakyHeartbeatWrites(pg.store.client);
  const store = new Store(pg.store.client, { writes });
  const lines: string[] = [];
  const { deps: d, cloud } = await deps(store, lines, 200);
  const worker = claimAndDrive(d, "hb-lost", "goal");
  await until(
    () => Promise.resolve(lines.some((l) => l.includes("calling"))),
    "the worker's tool call",
    60_000,
    10,
  );
  writes.heartbeatDown = true;
  const outcome = await worker;
  cloud.releaseHung();
  assert.equal(outcome.status, "stalled");
  assert.ok(lines.some((l) => / level=error event=lease-lost run=hb-lost/.test(l)), lines.join("\n"));
  const { journal, effects } = await pg.store.reads.loadHistory("hb-lost");
  assert.equal(effects[0].status, "intent");
  assert.equal(journal.length, 1, "no further step was started");
});
