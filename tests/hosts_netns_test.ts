/**
 * Several hosts, one database: three network namespaces on this machine,
 * each running `cli/main.ts supervise` with its workers, all reaching one
 * PostgreSQL and the mocks over their own virtual links. Three host faults,
 * each on a fresh schema and fresh mocks:
 *
 *  a. every process of one host SIGKILLed at once, its runs in flight;
 *  b. one host's link cut for longer than the lease, its runs taken by the
 *     others, then restored;
 *  c. every process of one host frozen (SIGSTOP), its runs taken, then
 *     woken (SIGCONT) all at once; and again with its workers woken a
 *     second before its supervisor, which otherwise kills them as frozen
 *     before they write.
 *
 * After b and c', every run the host held was stopped in it, each counted
 * once from its log: given up by its own worker when the lease ended
 * unrenewed (`lease-lost`), or refused by the fence at a late write
 * (`fenced`, `heartbeat-refused`); the two add up to the runs it held. A
 * refusal by the fence is counted, not required: a cut-off worker gives its
 * runs up at the lease's end, before its link is back, so it may have no late
 * write left to refuse (only a statement already on its way over the cut link
 * meets the fence).
 *
 * After each, with the faulted host stopped and none of its sessions left on
 * the server (so a late write of it has landed or been refused before the
 * last read): every run done, shaped like a clean run, one resource per key
 * at the cloud, no confirmed row changed since the fault, no run claimed
 * twice at one epoch, each run's model requests between its decisions and
 * one more per handover, and epochs bounded (a run the faulted host did not
 * hold changed hands at most twice, one it held at most three times); the
 * spread of runs over hosts is printed. Needs root and `ip` (skipped, saying
 * so, otherwise). Run it alone with `deno task test:hosts`; `HOSTS_RUNS` sets
 * the runs per fault (100 in `deno task test`, 300 in `deno task test:proofs`).
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { createSandbox, type SchemaSandbox } from "../runtime/store/sandbox.ts";
import { type Host, HostNetwork, hostsSkipReason } from "../harness/hosts.ts";
import { checkShape, claimedTwice, sumAttempts } from "../harness/invariants.ts";
import { mapLimit } from "../harness/pg.ts";
import {
  pgBinDir,
  type PgServer,
  removeStalePgServers,
  serverForHosts,
  startPgServer,
} from "../harness/pg_server.ts";
import { TEST_DATABASE_URL } from "./_pg.ts";
import { proofSize } from "./_size.ts";
import type { Proc } from "../harness/procs.ts";
import type { RunSummary } from "../runtime/store/rows.ts";
import { readSnapshot, type RunSnapshot } from "../harness/sim.ts";
import { until } from "../harness/procs.ts";

const NAME = "hosts: three hosts in network namespaces survive a killed, a cut-off and a frozen host";
const SKIP = hostsSkipReason() ??
  (pgBinDir() ? undefined : "no PostgreSQL server binaries (/usr/lib/postgresql/<v>/bin/initdb)");
if (SKIP) console.log(`skipped (${SKIP}): ${NAME}`);

/** Runs per fault: HOSTS_RUNS, else 100 in the suite and 300 at full size (`tests/_size.ts`). */
const RUNS = Number(Deno.env.get("HOSTS_RUNS") ?? proofSize(100, 300));
const LEASE_S = 2;
/** Each host's supervisor settings: two workers, short lease and polls. */
const HOST_SETTINGS = {
  WORKERS: "2",
  RUNS_PER_WORKER: "60",
  LEASE_S: String(LEASE_S),
  HEARTBEAT_S: "0.5",
  POLL_S: "0.5",
};
/** The mocks answer slowly enough that a run is in flight for a couple of seconds. */
const MODEL_DELAY_MS = 400;
const CLOUD_DELAY_MS = 400;
/** How many of its runs the faulted host must hold in flight when the fault lands. */
const IN_FLIGHT_AT_FAULT = Math.max(1, Math.min(20, Math.floor(RUNS / 10)));

/** kill, cut and freeze as the module doc says; freeze-workers-first wakes the workers a second before their supervisor. */
type Fault = "kill" | "cut" | "freeze" | "freeze-workers-first";

interface World {
  net: HostNetwork;
  /** The server's URL at the bridge's address, as the hosts reach it. */
  serverUrl: string;
}

interface Scene {
  world: World;
  sandbox: SchemaSandbox;
  mocks: RunningMocks;
  sups: Proc[];
  runIds: string[];
}

/** Log events that say a worker gave runs up on its own, its database out of reach past the lease. */
const GAVE_UP_EVENTS = ["lease-lost", "stalled"] as const;

/**
 * The writes of `proc`'s workers that the fence refused, by kind: each
 * `heartbeat-refused` line is one lease renewal refused, each `fenced` line
 * one step's write refused (its reason names it: `Write refused (tool confirm
 * key=...)`), except the `fenced` line that ends a run whose renewal was
 * refused (`Write refused (heartbeat)`), counted already.
 */
function refusedWrites(proc: Proc): Map<string, number> {
  const kinds = new Map<string, number>();
  const add = (kind: string) => kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  for (const _ of proc.events("heartbeat-refused")) add("heartbeat");
  for (const e of proc.events("fenced")) {
    const kind = /^Write refused \(([a-z ]+?)(?: key=| seq=|\))/.exec(e.reason ?? "")?.[1] ?? "claim";
    if (kind !== "heartbeat") add(kind);
  }
  return kinds;
}

function ownerHost(owner: string | null | undefined): string {
  return owner ? owner.split("/")[0] : "-";
}

/** The runs `host` holds now, with their confirmed tool calls (`steps`). */
async function openRunsOf(scene: Scene, host: Host): Promise<RunSummary[]> {
  const { runs } = await scene.sandbox.store.operators.listRuns({ status: "running", limit: 100_000 });
  return runs.filter((r) => ownerHost(r.owner) === `host-${host.index}`);
}

async function doneCount(scene: Scene): Promise<number> {
  return (await scene.sandbox.store.operators.listRuns({ status: "done", limit: 1 })).total;
}

function snapshots(scene: Scene): Promise<RunSnapshot[]> {
  const { store } = scene.sandbox;
  return mapLimit(scene.runIds, 4, (id) => readSnapshot(store, scene.mocks.model, scene.mocks.cloud, id));
}

/** The server's sessions from `host`'s address. */
async function sessionsFrom(scene: Scene, host: Host): Promise<number> {
  const [row] = await scene.sandbox.store.client.query<{ n: number }>(
    "select count(*)::int as n from pg_stat_activity where client_addr = $1::inet",
    [host.address],
  );
  return row.n;
}

/** Every held run is now owned by another host (taken) or finished. */
async function allTaken(scene: Scene, host: Host, held: string[]): Promise<boolean> {
  const { store } = scene.sandbox;
  for (const id of held) {
    const run = await store.reads.getRun(id);
    if (run?.status === "running" && ownerHost(run.owner) === `host-${host.index}`) return false;
    if (run?.status === "pending") return false;
  }
  return true;
}

/** With HOSTS_LOG_DIR set, every host's output goes to `<dir>/<fault>-host-<i>.log` (for a look after). */
async function keepLogs(sups: Proc[], fault: Fault): Promise<void> {
  const dir = Deno.env.get("HOSTS_LOG_DIR");
  if (!dir) return;
  await Deno.mkdir(dir, { recursive: true });
  for (const [i, s] of sups.entries()) {
    await Deno.writeTextFile(`${dir}/${fault}-host-${i}.log`, s.lines.join("\n"));
  }
}

async function stopAll(sups: Proc[]): Promise<void> {
  for (const s of sups) s.kill("SIGTERM");
  const timer = setTimeout(() => sups.forEach((s) => s.kill("SIGKILL")), 20_000);
  try {
    await Promise.all(sups.map((s) => s.status));
  } finally {
    clearTimeout(timer);
  }
}

async function withScene(world: World, fault: Fault, fn: (scene: Scene) => Promise<void>): Promise<void> {
  const sandbox = await createSandbox(world.serverUrl, { prefix: "h", max: 4 });
  const mocks = await serveMocks({ hostname: world.net.rootAddress });
  const sups: Proc[] = [];
  try {
    mocks.model.setFaults({ delay_ms: MODEL_DELAY_MS });
    mocks.cloud.setFaults({ delay_ms: CLOUD_DELAY_MS });
    const env = {
      DATABASE_URL: sandbox.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      ...HOST_SETTINGS,
    };
    for (const h of world.net.hosts) {
      sups.push(world.net.spawn(h, "cli/main.ts", { ...env, SUPERVISOR: `host-${h.index}` }, ["supervise"]));
    }
    const workers = Number(HOST_SETTINGS.WORKERS);
    await until(
      () => Promise.resolve(sups.every((s) => s.events("worker").length >= workers)),
      "every host's workers to start",
      60_000,
    );
    const runIds = Array.from({ length: RUNS }, (_, i) => `hosts-${i}`);
    await fn({ world, sandbox, mocks, sups, runIds });
  } finally {
    await stopAll(sups);
    await keepLogs(sups, fault);
    await mocks.close();
    await sandbox.drop();
  }
}

/** Submits the runs, lands `fault` on the first host seen with runs in flight, waits for every run, checks. */
async function faultScene(scene: Scene, fault: Fault): Promise<void> {
  const { net } = scene.world;
  const { store } = scene.sandbox;
  let target = net.hosts[0];
  const started = Date.now();
  await mapLimit(scene.runIds, 8, async (runId) => {
    assert.ok(await store.leases.createRun({ runId, agent: "provision", goal: "hosts" }, new Date()));
  });
  // In flight: a host holds runs, some part-way through (a tool call confirmed, two to go). The fault
  // lands on the first host seen so, whichever the take gave the runs to.
  await until(
    async () => {
      for (const h of net.hosts) {
        const open = await openRunsOf(scene, h);
        if (open.length >= IN_FLIGHT_AT_FAULT && open.some((r) => r.tool_calls === 1)) {
          target = h;
          return true;
        }
      }
      return false;
    },
    `a host to hold ${IN_FLIGHT_AT_FAULT} runs, some part-way through`,
    60_000,
    50,
  );
  const name = `host-${target.index}`;
  const victim = scene.sups[target.index];
  const faultAt = Date.now();
  if (fault === "kill") {
    const pids = await net.signalAll(target, "SIGKILL");
    assert.ok(pids.length >= 1 + Number(HOST_SETTINGS.WORKERS), `${name} had ${pids.length} processes`);
  } else if (fault === "cut") await net.cut(target);
  else await net.signalAll(target, "SIGSTOP");
  // Host-0 writes nothing more until it is woken or restored: what it holds now, it has lost.
  const atFault = await openRunsOf(scene, target);
  const held = atFault.map((r) => r.run_id);
  const partWay = atFault.filter((r) => r.tool_calls >= 1).length;
  assert.ok(held.length >= 1, `${name} held no run when the fault landed`);
  // Rows confirmed by now must be the same at the end.
  const earlier = [await snapshots(scene)];
  let outageMs = 0;
  if (fault !== "kill") {
    // Longer than the lease, and until the other hosts have taken every run it held.
    await new Promise((r) => setTimeout(r, LEASE_S * 1000 + 500));
    await until(() => allTaken(scene, target, held), `the other hosts to take ${name}'s runs`, 60_000, 200);
    earlier.push(await snapshots(scene));
    if (fault === "cut") await net.restore(target);
    else if (fault === "freeze") await net.signalAll(target, "SIGCONT");
    else {
      // The workers first, their supervisor a second later: the wake order that lets them write late.
      const supervisor = victim.pid;
      for (const pid of await net.pids(target)) if (pid !== supervisor) Deno.kill(pid, "SIGCONT");
      await new Promise((r) => setTimeout(r, 1_000));
      Deno.kill(supervisor, "SIGCONT");
    }
    outageMs = Date.now() - faultAt;
  }
  await until(
    async () => (await doneCount(scene)) === scene.runIds.length,
    "every run to finish",
    120_000,
    200,
  );
  const drainedMs = Date.now() - started;
  // Late writes of a woken host arrive after its runs are done elsewhere: give them a few beats.
  if (fault !== "kill") await new Promise((r) => setTimeout(r, 3_000));
  // Then the host stops, and the checks wait until the server has no session of it left: a late write it
  // still had on its way has landed or been refused before the rows are read.
  await stopAll([victim]);
  await until(
    async () => (await sessionsFrom(scene, target)) === 0,
    `${name}'s sessions to end`,
    30_000,
    100,
  );

  // Every run done, shaped like a clean run; one resource per key; no confirmed row changed since the fault.
  const finals = await snapshots(scene);
  const problems = finals.flatMap((final, i) =>
    checkShape(final, {
      runId: scene.runIds[i],
      steps: 4,
      earlier: earlier.map((snaps) => snaps[i]),
    }).map((p) => `${scene.runIds[i]}: ${p}`)
  );
  assert.deepEqual(problems.slice(0, 20), [], `${problems.length} problems`);
  // A model request is counted in the journal before it is sent; each run the faulted host lost cost at
  // most the answer it had in flight (any later request of its needs a write first, which the fence refuses).
  const uncounted = finals.filter((f) => f.modelCalls > sumAttempts(f)).map((f) => f.run?.run_id);
  assert.deepEqual(uncounted, [], "runs whose model requests outnumber their journal's count");
  // Each decision was an answer of the model, to a request that named its run (a count of 0 for every run
  // would pass the bounds above and below).
  const unasked = finals.filter((f) => f.modelCalls < f.journal.length)
    .map((f) => `${f.run?.run_id}: ${f.modelCalls} model requests for ${f.journal.length} decisions`);
  assert.deepEqual(unasked, [], "runs with fewer model requests than decisions");
  const modelCalls = finals.reduce((n, f) => n + f.modelCalls, 0);
  // A clean run asks the model once per decision, and each journal row is one. An answer is lost only with
  // the worker that asked for it: each run asked at most once more than it has decisions for each time it
  // changed hands (each claim after its first, whatever the reason: this fault, or a worker that let a run go).
  const extraCalls = modelCalls - finals.reduce((n, f) => n + f.journal.length, 0);
  const overBought = finals
    .filter((f) => f.modelCalls - f.journal.length > Math.max(0, (f.run?.epoch ?? 1) - 1))
    .map((f) =>
      `${f.run?.run_id}: ${f.modelCalls} calls, ${f.journal.length} decisions, epoch ${f.run?.epoch}`
    );
  assert.deepEqual(
    overBought,
    [],
    `model calls beyond one per decision and handover (${held.length} runs moved)`,
  );
  const keys = scene.mocks.cloud.created().map((c) => c.key);
  assert.equal(new Set(keys).size, keys.length, "a key created two resources at the cloud");
  assert.equal(keys.length, scene.runIds.length * 3, "three resources per run at the cloud");

  // No run claimed twice at one epoch, across every host's workers.
  const claims = scene.sups.flatMap((s, host) =>
    s.events("claimed").map((e) => ({ run: e.run, epoch: Number(e.epoch), host }))
  );
  assert.deepEqual(claimedTwice(claims), [], "runs claimed twice at one epoch");

  // The held runs moved: each was claimed again by another host.
  const retaken = held.filter((id) => claims.some((c) => c.run === id && c.host !== target.index));
  assert.equal(retaken.length, held.length, `${name} held ${held.length}, others took ${retaken.length}`);

  // Handovers are bounded, so the allowance above cannot grow with them. The fault explains one for each run
  // the host held; a busy machine may add one (a heartbeat late past the 2 s lease) and the woken host another
  // (its new workers take runs whose leases then ran out): a run the host did not hold changed hands at most
  // twice, one it held at most three times. A bug that hands runs over at each step goes past both.
  const wasHeld = new Set(held);
  const epochs = (ofHeld: boolean) =>
    finals.filter((f) => wasHeld.has(f.run!.run_id) === ofHeld).map((f) => f.run!.epoch);
  const bounced = finals
    .filter((f) => f.run!.epoch > (wasHeld.has(f.run!.run_id) ? 4 : 3))
    .map((f) => `${f.run!.run_id} at epoch ${f.run!.epoch}${wasHeld.has(f.run!.run_id) ? " (held)" : ""}`);
  assert.deepEqual(bounced, [], "runs that changed hands more often than the fault explains");
  const cloudRequests = finals.reduce(
    (n, f) => n + Object.values(f.requestsByKey).reduce((a, b) => a + b, 0),
    0,
  );
  const kinds = refusedWrites(victim);
  const refused = [...kinds.values()].reduce((a, b) => a + b, 0);
  const byKind = [...kinds].map(([k, n]) => `${k}=${n}`).join(" ");
  const gaveUp = GAVE_UP_EVENTS.map((e) => `${e}=${victim.events(e).length}`).join(" ");
  const spread = scene.sups.map((s, i) => {
    const workers = new Map<string, number>();
    for (const c of s.events("claimed")) workers.set(c.owner, (workers.get(c.owner) ?? 0) + 1);
    const perWorker = [...workers].map(([w, n]) => `${w.split("/")[1]}:${n}`).join(",");
    return `host-${i} claimed=${s.events("claimed").length} done=${s.events("done").length} (${perWorker})`;
  });
  const histogram = (xs: number[]) =>
    [...new Set(xs)].sort((a, b) => a - b).map((e) => `${e}:${xs.filter((x) => x === e).length}`).join(",");
  console.log(
    `hosts fault=${fault} on=${name} runs=${scene.runIds.length} held_at_fault=${held.length} part_way=${partWay} ` +
      `outage_ms=${outageMs} drained_ms=${drainedMs}\n  spread: ${spread.join("; ")}\n` +
      `  epochs (epoch:runs): of the runs ${name} held ${histogram(epochs(true))}, of the others ${
        histogram(epochs(false))
      }\n` +
      `  model calls ${modelCalls}, ${extraCalls} beyond one per decision; cloud requests ` +
      `${cloudRequests} for ${keys.length} resources\n` +
      `  ${name} writes refused by the fence: ${refused} (${
        byKind || "none"
      }); its workers gave up: ${gaveUp}`,
  );
  if (fault === "cut" || fault === "freeze-workers-first") {
    // Every run the host held was stopped in it, each counted once: given up by its own worker when its lease
    // ended unrenewed (a renewal failed or still unanswered: lease-lost), or else refused by the fence at a
    // late write. Which comes first is a race, and neither lets a late write through (the shapes and
    // snapshots above say so). Cut off, a worker gives its runs up at the lease's end, before its link is
    // back, so the fence need not refuse anything: its refusals are counted, not required.
    const lost = new Set(victim.events("lease-lost").map((e) => e.run));
    const fenced = new Set(
      [...victim.events("fenced"), ...victim.events("heartbeat-refused")].map((e) => e.run),
    );
    // On a busy machine a woken worker's write may also fail to reach the database at all (a connect timeout:
    // `worker-error`): it let go of the run without writing, which stops it as surely.
    const failed = new Set(victim.events("worker-error").map((e) => e.run));
    const byLeaseEnd = held.filter((id) => lost.has(id));
    const byFence = held.filter((id) => !lost.has(id) && fenced.has(id));
    const byFailedWrite = held.filter((id) => !lost.has(id) && !fenced.has(id) && failed.has(id));
    console.log(
      `  ${name}'s ${held.length} held runs: ${byLeaseEnd.length} given up at the lease's end, ` +
        `${byFence.length} refused by the fence, ${byFailedWrite.length} let go when a write could not connect`,
    );
    assert.equal(
      byLeaseEnd.length + byFence.length + byFailedWrite.length,
      held.length,
      `${name} held runs neither given up, fenced nor let go: ${
        held.filter((id) => !lost.has(id) && !fenced.has(id) && !failed.has(id)).join(",")
      }\n${victim.lines.slice(-40).join("\n")}`,
    );
  }
}

Deno.test({
  name: NAME,
  ignore: SKIP !== undefined,
  async fn(t) {
    if (!Number.isInteger(RUNS) || RUNS < 3) {
      throw new RangeError(`HOSTS_RUNS must be an integer >= 3: ${RUNS}`);
    }
    await removeStalePgServers();
    const net = await HostNetwork.create({ hosts: 3 });
    let pg: PgServer | undefined;
    try {
      const where = { address: net.rootAddress, subnet: net.subnet };
      const shared = TEST_DATABASE_URL === undefined
        ? { reason: "TEST_DATABASE_URL is unset" }
        : await serverForHosts(TEST_DATABASE_URL, where);
      let serverUrl: string;
      if ("url" in shared) {
        serverUrl = shared.url;
        console.log(`hosts: the server of TEST_DATABASE_URL, at ${net.rootAddress}`);
      } else {
        console.log(
          `hosts: a PostgreSQL server of the test's own on ${net.rootAddress}, trusting ${net.subnet} only: ` +
            `the one at TEST_DATABASE_URL cannot serve the hosts (${shared.reason})`,
        );
        pg = await startPgServer({ listen: net.rootAddress, trustCidr: net.subnet });
        const own = await serverForHosts(pg.url, where);
        assert.ok("url" in own, `the test's own server cannot serve the hosts: ${JSON.stringify(own)}`);
        serverUrl = own.url;
      }
      const world = { net, serverUrl };
      await t.step(
        "a. every process of one host SIGKILLed at once, runs in flight",
        () => withScene(world, "kill", (scene) => faultScene(scene, "kill")),
      );
      await t.step(
        "b. one host cut off from the database past its lease, then restored: each run it held given up or fenced",
        () => withScene(world, "cut", (scene) => faultScene(scene, "cut")),
      );
      await t.step(
        "c. one host frozen (SIGSTOP) and woken (SIGCONT) after its runs were taken",
        () => withScene(world, "freeze", (scene) => faultScene(scene, "freeze")),
      );
      await t.step(
        "c'. one host frozen, its workers woken a second before its supervisor: each run it held given up or fenced",
        () => withScene(world, "freeze-workers-first", (scene) => faultScene(scene, "freeze-workers-first")),
      );
    } finally {
      await pg?.close();
      await net.close();
    }
  },
});
