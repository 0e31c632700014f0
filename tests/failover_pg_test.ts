/**
 * The primary database dies under load and pg_auto_failover promotes its
 * synchronous standby: 200 runs of the demo in flight through a supervisor
 * (real `deno run` processes, the mocks over HTTP), connected through a URL
 * naming both nodes with `target_session_attrs=read-write`. Every run must
 * finish, the cloud must hold one resource per key, and no intent, confirm,
 * decision or claim a worker reported committed may be missing afterwards.
 *
 * Needs root and pg_auto_failover (harness/failover.ts); says it was skipped
 * otherwise. It builds its own servers, so it needs no TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import { FailoverCluster, failoverSkipReason } from "../harness/failover.ts";
import { parseLine, type Proc, startSupervisor, until } from "../harness/procs.ts";
import { serveMocks } from "../mock/server.ts";
import { openStore } from "../runtime/store/open.ts";
import type { Store } from "../runtime/store/store.ts";

const RUNS = 200;
const TOOL_CALLS_PER_RUN = 3;

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

Deno.test({
  name: "200 runs in flight carry on when the primary is SIGKILLed and its synchronous standby promoted",
  ignore: failoverIgnore("failover under load"),
  async fn() {
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
        assert.ok(await store.createRun({ runId: id, agent: "provision", goal: "failover" }, new Date()));
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
      // Every intent and confirm a worker reported committed (its log line follows the commit) is there.
      const intents = events(sup, "intent");
      const confirms = events(sup, "confirmed");
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
      const decided = events(sup, "decided");
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
          `decisions, ${claims.length} claims reported committed; ${created.length} resources, one per key; ` +
          `worker exits [${exits.join(",")}], worker-error ${events(sup, "worker-error").length}, ` +
          `supervisor poll-failed ${events(sup, "poll-failed").length}`,
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
