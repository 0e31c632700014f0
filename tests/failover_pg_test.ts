/**
 * The primary database dies under load and pg_auto_failover promotes its
 * synchronous standby: 200 runs of the demo in flight through a supervisor
 * (real `deno run` processes, the mocks over HTTP), connected through a URL
 * naming both nodes with `target_session_attrs=read-write`.
 *
 * Just before the kill, every run's rows are read and the standby is seen
 * synchronous (`pg_stat_replication` and the monitor, then and not only at
 * set-up). Afterwards every run must be done and shaped like a clean run,
 * every row confirmed before the kill still there and unchanged (a commit
 * the failover lost and a worker made again fails here, not only a missing
 * one), no run's epoch lower than before the kill, no run claimed twice at
 * one epoch (a lost epoch bump made again), no model request the journal did
 * not count, one resource per key at the cloud, and every intent, confirm,
 * decision and claim a worker logged as committed present, each logged at
 * least as often as a clean pass makes them. A last step plants a lost
 * confirmed row and a claim made twice at one epoch, and shows the same
 * checks fail.
 *
 * Needs root and pg_auto_failover (harness/failover.ts); says it was skipped
 * otherwise. It builds its own servers, so it needs no TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import { FailoverCluster, failoverSkipReason } from "../harness/failover.ts";
import { checkShape, claimedTwice, type LoggedClaim, sumAttempts } from "../harness/invariants.ts";
import { mapLimit } from "../harness/pg.ts";
import { parseLine, type Proc, startSupervisor, until } from "../harness/procs.ts";
import { readSnapshot, type RunSnapshot } from "../harness/sim.ts";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";

const RUNS = 200;
const TOOL_CALLS_PER_RUN = 3;
/**
 * How long before the kill the failover's window opens: a row committed yet
 * unreported, stamped when its write was made (before its statement went
 * out), in a statement in flight when the primary died. The window closes
 * when the promotion is seen: until then, a commit on the node being
 * promoted may lose its answer too.
 */
const BEFORE_KILL_MS = 3_000;

function failoverIgnore(name: string): boolean {
  const reason = failoverSkipReason();
  if (reason) console.log(`skipped (${reason}): ${name}`);
  return reason !== undefined;
}

/** A query that may meet the failover: retried until it answers (bounded by `until`'s own deadline). */
async function count(store: Store, sql: string): Promise<number | undefined> {
  try {
    const [row] = await store.client.query<{ n: number }>(sql);
    return row.n;
  } catch {
    return undefined;
  }
}

/** The log lines of the supervisor and its workers (their output is the supervisor's) with `event`. */
function events(sup: Proc, event: string): Record<string, string>[] {
  return sup.lines.map(parseLine).filter((l): l is Record<string, string> => l?.event === event);
}

/** A row committed that no worker's line reports, and when its write was made (epoch ms). */
interface UnreportedRow {
  kind: "intent" | "confirmed" | "decided";
  key: string;
  ms: number;
}

/**
 * The tool calls' intents and confirms (by key) and the decisions (`run:seq`)
 * committed that are not among `reported`.
 */
async function unreportedRows(store: Store, reported: Record<UnreportedRow["kind"], string[]>) {
  const rows = await store.client.query<UnreportedRow>(
    `select 'intent' as kind, idempotency_key as key, extract(epoch from intent_at) * 1000 as ms from side_effects
     union all
     select 'confirmed', idempotency_key, extract(epoch from confirmed_at) * 1000 from side_effects
      where status = 'confirmed'
     union all
     select 'decided', run_id || ':' || seq, extract(epoch from confirmed_at) * 1000 from journal
      where status = 'confirmed'`,
  );
  const seen = {
    intent: new Set(reported.intent),
    confirmed: new Set(reported.confirmed),
    decided: new Set(reported.decided),
  };
  return rows.map((r) => ({ ...r, ms: Number(r.ms) })).filter((r) => !seen[r.kind].has(r.key));
}

/** The failover, in epoch ms: from {@link BEFORE_KILL_MS} before the kill until the promotion was seen. */
interface FailoverWindow {
  from: number;
  to: number;
}

/** Whether `row`'s write was made during the failover, where a commit's answer could be lost. */
function duringFailover(window: FailoverWindow, row: UnreportedRow): boolean {
  return row.ms >= window.from && row.ms <= window.to;
}

/** Every run's rows, and what the mocks saw of it. */
function snapshots(store: Store, mocks: RunningMocks, runIds: string[]): Promise<RunSnapshot[]> {
  return mapLimit(runIds, 8, (id) => readSnapshot(store, mocks.model, mocks.cloud, id));
}

/**
 * What the failover may not have done, found in `after` (every run done)
 * against `before` (read just before the kill) and the claims the workers
 * logged: a run not shaped like a clean one, a row confirmed before the kill
 * missing or changed, an epoch gone back, a model request the journal did not
 * count, a run claimed twice at one epoch.
 */
function failoverProblems(before: RunSnapshot[], after: RunSnapshot[], claims: LoggedClaim[]): string[] {
  const problems = after.flatMap((final, i) => {
    const runId = before[i].run!.run_id;
    const found = checkShape(final, { runId, steps: TOOL_CALLS_PER_RUN + 1, earlier: [before[i]] });
    if ((final.run?.epoch ?? 0) < before[i].run!.epoch) {
      found.push(`its epoch went back from ${before[i].run!.epoch} to ${final.run?.epoch}`);
    }
    if (final.modelCalls > sumAttempts(final)) {
      found.push(`${final.modelCalls} model requests, ${sumAttempts(final)} counted in its journal`);
    }
    return found.map((p) => `${runId}: ${p}`);
  });
  return [...problems, ...claimedTwice(claims).map((at) => `${at} was claimed twice at one epoch`)];
}

Deno.test({
  name: "200 runs in flight carry on when the primary is SIGKILLed and its synchronous standby promoted",
  ignore: failoverIgnore("failover under load"),
  async fn(t) {
    const t0 = Date.now();
    const cluster = await FailoverCluster.start();
    const readyMs = Date.now() - t0;
    const mocks = await serveMocks();
    let store: Store | undefined;
    let sup: Proc | undefined;
    try {
      const [first, second] = cluster.nodes;
      assert.equal((await cluster.primary())?.name, first.name);
      // The safety precondition: the primary waits for its standby at every commit.
      const sync = await cluster.syncSettings(first);
      assert.match(sync.standbys, /pgautofailover_standby/, "the standby is synchronous");
      assert.equal(sync.commit, "on");

      store = await openStore({ databaseUrl: cluster.url, dataDir: "" }, { max: 2 });
      const runIds = Array.from({ length: RUNS }, (_, i) => `fo-${String(i).padStart(3, "0")}`);
      for (const id of runIds) {
        assert.ok(
          await store.leases.createRun({ runId: id, agent: "provision", goal: "failover" }, new Date()),
        );
      }
      // Slow enough remotes that every run is in the middle of its steps when the primary dies.
      mocks.model.setFaults({ delay_ms: 600 });
      mocks.cloud.setFaults({ delay_ms: 200 });
      sup = startSupervisor({
        DATABASE_URL: cluster.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        WORKERS: "2",
        RUNS_PER_WORKER: String(RUNS / 2),
        POLL_S: "0.2",
        HEARTBEAT_S: "0.5",
        LEASE_S: "3",
      });
      const s = store;
      // Kill once a third of the tool calls are confirmed: all 200 runs are then mid-flight.
      await until(
        async () =>
          (await count(s, "select count(*)::int as n from side_effects where status = 'confirmed'") ??
            0) >= RUNS * TOOL_CALLS_PER_RUN / 3,
        "a third of the tool calls to be confirmed",
        120_000,
        50,
      );
      // Just before the kill: every run's rows (what is confirmed now must be there, unchanged, at the end)...
      const before = await snapshots(store, mocks, runIds);
      const confirmedBefore = before.reduce(
        (n, b) => n + b.effects.filter((e) => e.status === "confirmed").length,
        0,
      );
      assert.ok(confirmedBefore >= RUNS * TOOL_CALLS_PER_RUN / 3, `${confirmedBefore} tool calls confirmed`);
      // ...and the standby synchronous now, as the primary and the monitor see it, not only at set-up
      // (pg_auto_failover names it `ANY 1 (...)`, which pg_stat_replication shows as `quorum`; it clears
      // the setting when it lets the primary go on without its standby).
      const [replication, syncNow, states] = await Promise.all([
        cluster.replication(first),
        cluster.syncSettings(first),
        cluster.states(),
      ]);
      assert.ok(
        replication.some((r) => ["sync", "quorum"].includes(r.syncState)) &&
          /pgautofailover_standby/.test(syncNow.standbys) && syncNow.commit === "on",
        `no synchronous standby just before the kill: ${JSON.stringify({ replication, syncNow })}`,
      );
      assert.deepEqual(
        states.map((n) => [n.name, n.reported]),
        [[first.name, "primary"], [second.name, "secondary"]],
        "the monitor's view just before the kill",
      );
      const running = await count(store, "select count(*)::int as n from runs where status = 'running'");
      const kill = cluster.killNode(first);
      console.log(
        `failover: cluster ready in ${readyMs} ms; killed ${first.name} (postmaster ${kill.postmasterPid} ` +
          `and ${kill.pids.length - 1} more processes) with ${running} runs running`,
      );

      await until(
        async () => (await cluster.primary().catch(() => undefined))?.name === second.name,
        `${second.name} to be promoted`,
        60_000,
        100,
      );
      const promotedMs = Date.now() - kill.killedAtMs;
      await until(
        async () => (await count(s, "select count(*)::int as n from runs where status = 'done'")) === RUNS,
        `all ${RUNS} runs to finish after the failover`,
        180_000,
        200,
      );
      const drainedMs = Date.now() - kill.killedAtMs;
      const supervisorAlive = sup.lines.length > 0 && await Promise.race([
        sup.status.then(() => false),
        new Promise<boolean>((r) => setTimeout(() => r(true), 100)),
      ]);
      assert.ok(supervisorAlive, `the supervisor died:\n${sup.lines.slice(-30).join("\n")}`);
      sup.kill("SIGTERM");
      assert.equal(await sup.status, 0, sup.lines.slice(-30).join("\n"));
      // The outage is not a frozen worker: nobody was killed for heartbeats the database could not take.
      assert.deepEqual(events(sup, "replacing"), [], "a worker was killed as frozen during the failover");

      // One resource per key at the cloud, each recorded confirmed with what the cloud made.
      const created = mocks.cloud.created();
      const keys = created.map((c) => c.key);
      assert.equal(new Set(keys).size, keys.length, "a key created two resources");
      assert.equal(created.length, RUNS * TOOL_CALLS_PER_RUN);
      const effects = new Map(
        (await store.client.query<{ idempotency_key: string; status: string; result: unknown }>(
          "select idempotency_key, status, result from side_effects",
        )).map((r) => [r.idempotency_key, r]),
      );
      for (const c of created) {
        const row = effects.get(c.key);
        assert.equal(row?.status, "confirmed", `${c.key}: the cloud made ${c.id}, the row is ${row?.status}`);
        assert.equal(row.result, c.id, `${c.key} recorded the resource the cloud made`);
      }
      // Every run done, shaped like a clean run; nothing confirmed before the kill lost or changed; no
      // epoch gone back; every model request counted; no run claimed twice at one epoch.
      const claimed = events(sup, "claimed").map((e) => ({ run: e.run, epoch: Number(e.epoch) }));
      const problems = failoverProblems(before, await snapshots(store, mocks, runIds), claimed);
      assert.deepEqual(problems.slice(0, 20), [], `${problems.length} problems`);

      // Every row a worker reported committed (its line follows the commit) is there, and every row committed
      // was reported, or was written during the failover: committed by the old primary and kept by its
      // standby, its answer lost with the primary (one grouped statement can carry dozens), or by the node
      // being promoted before it was seen promoted. So each kind is reported at least as often as one pass
      // of every run makes it, less those: a check over no lines passes nothing.
      const intents = events(sup, "intent");
      const confirms = events(sup, "confirmed");
      const decided = events(sup, "decided");
      const reported = {
        intent: intents.map((e) => e.key),
        confirmed: confirms.map((e) => e.key),
        decided: decided.map((e) => `${e.run}:${e.seq}`),
      };
      const unreported = await unreportedRows(store, reported);
      const failover = { from: kill.killedAtMs - BEFORE_KILL_MS, to: kill.killedAtMs + promotedMs };
      const unexplained = unreported.filter((r) => !duringFailover(failover, r));
      assert.deepEqual(
        unexplained.slice(0, 20),
        [],
        `${unexplained.length} rows committed, unreported, and not written during the failover`,
      );
      const lost = (kind: string) => unreported.filter((r) => r.kind === kind).length;
      const logged = {
        intent: [intents.length + lost("intent"), RUNS * TOOL_CALLS_PER_RUN],
        confirmed: [confirms.length + lost("confirmed"), RUNS * TOOL_CALLS_PER_RUN],
        decided: [decided.length + lost("decided"), RUNS * (TOOL_CALLS_PER_RUN + 1)],
        claimed: [claimed.length, RUNS],
      };
      for (const [event, [n, least]] of Object.entries(logged)) {
        assert.ok(
          n >= least,
          `${n} ${event} lines logged or written during the failover, at least ${least} expected`,
        );
      }
      for (const e of intents) assert.ok(effects.has(e.key), `the intent of ${e.key} was lost`);
      for (const e of confirms) {
        const row = effects.get(e.key);
        assert.equal(row?.status, "confirmed", `the confirm of ${e.key} was lost`);
        assert.equal(String(row.result), e.result, `${e.key}'s confirmed result changed`);
      }
      // Every decision and every claim (an epoch bump) reported committed is there.
      const decisions = new Set(
        (await store.client.query<{ k: string }>(
          "select run_id || ':' || seq as k from journal where status = 'confirmed'",
        )).map((r) => r.k),
      );
      for (const e of decided) {
        assert.ok(decisions.has(`${e.run}:${e.seq}`), `decision ${e.run}:${e.seq} lost`);
      }
      const epochs = new Map(
        (await store.client.query<{ run_id: string; epoch: number }>("select run_id, epoch from runs"))
          .map((r) => [r.run_id, r.epoch]),
      );
      const claims = events(sup, "claimed");
      for (const e of claims) {
        assert.ok(
          (epochs.get(e.run) ?? 0) >= Number(e.epoch),
          `${e.run}'s claim at epoch ${e.epoch} was lost`,
        );
      }
      // Steps committed before the kill must predate it: anything later is on the new primary.
      const [after] = await store.client.query<{ first_write: string | null; first_confirm: string | null }>(
        `select (select min(t) from (select intent_at as t from journal union all select confirmed_at from journal
                   union all select intent_at from side_effects union all select confirmed_at from side_effects) w
                  where t > $1::timestamptz)::text as first_write,
                (select min(t) from (select confirmed_at as t from journal union all
                   select confirmed_at from side_effects) c where t > $1::timestamptz)::text as first_confirm`,
        [new Date(kill.killedAtMs).toISOString()],
      );
      assert.ok(after.first_confirm, "no step was committed after the kill");
      const since = (t: string) => new Date(t).getTime() - kill.killedAtMs;
      const exits = events(sup, "worker-exited").map((e) => e.code);
      console.log(
        `failover: ${second.name} promoted ${promotedMs} ms after the kill; first write on it ` +
          `${since(after.first_write!)} ms, first step confirmed ${since(after.first_confirm)} ms; ` +
          `all ${RUNS} runs done ${drainedMs} ms after the kill`,
      );
      console.log(
        `failover: checked ${intents.length} intents, ${confirms.length} confirms, ${decided.length} ` +
          `decisions, ${claims.length} claims reported committed; ${confirmedBefore} tool calls confirmed ` +
          `before the kill kept; the standby ${JSON.stringify(replication)} just before the kill; ` +
          `${unreported.length} rows committed during the failover and never reported ` +
          `${JSON.stringify(unreported.map((r) => `${r.kind} ${r.key}`).slice(0, 10))}; ` +
          `${created.length} resources, one per key; worker exits [${exits.join(",")}], worker-error ` +
          `${events(sup, "worker-error").length}, supervisor poll-failed ${
            events(sup, "poll-failed").length
          }`,
      );

      await t.step(
        "the checks fail when a confirmed row from before the kill is missing or a run was claimed twice at one epoch (planted)",
        async () => {
          // What a failover that lost commits would leave: one tool call confirmed before the kill gone,
          // and one run's last epoch bump lost, then made again by a claim at the same epoch.
          const i = before.findIndex((b) => b.effects.some((e) => e.status === "confirmed"));
          const lost = before[i].effects.find((e) => e.status === "confirmed")!.idempotency_key;
          await store!.client.run("delete from side_effects where idempotency_key = $1", [lost]);
          const rewound = runIds[(i + 1) % RUNS];
          const [{ epoch }] = await store!.client.query<{ epoch: number }>(
            "update runs set epoch = epoch - 1, status = 'running' where run_id = $1 returning epoch",
            [rewound],
          );
          const again = await store!.leases.claimRun(rewound, epoch, "planted", new Date());
          assert.ok(again, `the planted claim of ${rewound} was refused`);
          const found = failoverProblems(
            before,
            await snapshots(store!, mocks, runIds),
            [...claimed, { run: rewound, epoch: again.epoch }],
          );
          assert.ok(
            found.includes(`${runIds[i]}: confirmed tool call ${lost} is missing`),
            `the lost row went unseen:\n${found.join("\n")}`,
          );
          assert.ok(
            found.includes(`${rewound}@${again.epoch} was claimed twice at one epoch`),
            `the claim made twice went unseen:\n${found.join("\n")}`,
          );
          // A decision never reported (its line dropped here) and committed well after the failover (the last
          // of all) is not taken for one whose answer the failover lost.
          const [{ k: first }] = await store!.client.query<{ k: string }>(
            "select run_id || ':' || seq as k from journal where status = 'confirmed' order by confirmed_at desc limit 1",
          );
          const silent = (await unreportedRows(store!, {
            ...reported,
            decided: reported.decided.filter((k) => k !== first),
          })).find((r) => r.kind === "decided" && r.key === first);
          assert.ok(silent && !duringFailover(failover, silent), `${first} unreported went unseen`);
        },
      );
    } finally {
      // FAILOVER_LOG=path keeps the supervisor's and its workers' log for a look afterwards.
      const logPath = Deno.env.get("FAILOVER_LOG");
      if (logPath && sup) await Deno.writeTextFile(logPath, sup.lines.join("\n") + "\n");
      await sup?.close();
      await store?.client.close().catch(() => {});
      await mocks.close();
      await cluster.stop();
    }
  },
});
