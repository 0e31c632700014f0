/**
 * A rolling deploy under load (issue 36, "What it must show" 1), with real
 * `deno run` workers on PostgreSQL and the mock model and cloud over HTTP:
 * runs of the demo in flight on version 1 (half of an agent whose runs stay
 * on their version, half of one whose runs may move); version 2 renames
 * create_dns_record to create_record, saying it replaces it, and gives it an
 * argument with a default. Workers of version 2 start; workers of version 1
 * stop one by one, one of them SIGKILLed mid-call. Every run ends done, each
 * call one resource at the cloud under its key; the runs that stay are
 * finished by version 1's workers, the runs that may move go on on version 2
 * at their next decision. The replay check lists the renamed tool while the
 * rename is not declared, and is quiet once it is.
 *
 * `VERSIONS_RUNS` sets how many runs (default 36); the figures are printed.
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { Proc, runCli, until } from "../harness/procs.ts";
import { freshSchema, pgIgnore, type PgSchema } from "./_pg.ts";
import { DEMO_GOAL } from "../examples/provision/agent.ts";
import type { JournalRow } from "../runtime/store/store.ts";
import type { Agent } from "../mod.ts";
import { replayCheck } from "../testing.ts";

const RUNS = Number(Deno.env.get("VERSIONS_RUNS") ?? 36);
const MODULES = "tests/testdata/versions";
const V1_TOOLS = ["create_server", "create_database", "create_dns_record"];
const V2_TOOLS = ["create_server", "create_database", "create_record"];

interface World {
  pg: PgSchema;
  mocks: RunningMocks;
  env: Record<string, string>;
}

/** A worker process of `module` named `name`, with short lease timings. */
function worker(w: World, module: string, name: string): Proc {
  return new Proc("cli/main.ts", {
    ...w.env,
    AGENT: `${MODULES}/${module}`,
    WORKER: name,
    HEARTBEAT_S: "0.5",
    LEASE_S: "3",
    POLL_S: "0.3",
    RUNS_PER_WORKER: String(RUNS),
  }, { args: ["worker"] });
}

/** The versions the workers of `procs` host, from their `worker` lines: `agent@version`. */
async function versionsOf(procs: Proc[]): Promise<string[]> {
  for (const p of procs) await p.waitFor((l) => /event=worker /.test(l), "the worker line", 120_000);
  return [...new Set(procs.flatMap((p) => p.events("worker")[0].versions.split(",")))].sort();
}

/** `agent`'s version in `versions` (`agent@version` keys). */
function versionOf(versions: string[], agent: string): string {
  return versions.find((v) => v.startsWith(`${agent}@`))!.split("@")[1];
}

/** The replay check of `module` against the database, through the command: its exit code and lines. */
async function replayCheckCommand(w: World, module: string): Promise<{ code: number; lines: string[] }> {
  const out = await runCli(
    ["replay-check", "--agent", `${MODULES}/${module}`, "--finished", String(RUNS)],
    w.env,
  );
  return {
    code: out.code,
    lines: out.lines.filter((l) => l.startsWith("replay-check") || l.startsWith("  ")),
  };
}

/** The tool of each decided call of a run, and when it was decided. */
function decisions(journal: JournalRow[]): { tool: string; at: Date }[] {
  return journal.flatMap((j) =>
    j.status === "confirmed" && j.decision && "tool" in j.decision
      ? [{ tool: j.decision.tool, at: new Date(j.confirmed_at!) }]
      : []
  );
}

Deno.test({
  name:
    `a rolling deploy: ${RUNS} runs in flight on version 1, workers of version 2 start, version 1's stop ` +
    "one by one (one SIGKILLed mid-call): every run done, one resource per key, each on the version it may be on",
  ignore: pgIgnore("versions_pg_test.ts"),
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const w: World = {
      pg,
      mocks,
      env: {
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
      },
    };
    const procs: Proc[] = [];
    const started = Date.now();
    const t = () => `${((Date.now() - started) / 1000).toFixed(1)}s`;
    try {
      // Each call takes a while at the cloud, a DNS record longer, so every run is in flight when the deploy
      // begins: the first batch creating its DNS record, the second further back.
      mocks.cloud.setFaults({ delay_ms: 2_000 });
      mocks.cloud.setFaults({ path: "/v1/dns_records", delay_ms: 12_000 });
      const old = ["v1-a", "v1-b", "v1-c"].map((name) => worker(w, "v1.ts", name));
      procs.push(...old);
      const v1 = await versionsOf(old);
      // Two batches, half of each of the two agents: the first has decided its DNS record (the tool version 2
      // renames) when the deploy begins, the second has just started.
      const ids = Array.from({ length: RUNS }, (_, i) => i % 2 === 0 ? `stay-${i}` : `move-${i}`);
      const submit = async (batch: string[]) => {
        for (const id of batch) {
          await pg.store.leases.createRun(
            { runId: id, agent: id.startsWith("stay") ? "deploy" : "deploy-rolling", goal: DEMO_GOAL },
            new Date(),
          );
        }
      };
      const count = async (sql: string) => (await pg.store.client.query<{ n: number }>(sql))[0].n;
      const inFlight = () =>
        count(`select count(*)::int as n from runs where agent_version is not null and status <> 'done'`);
      await submit(ids.slice(0, RUNS / 2));
      await until(
        async () =>
          (await count(
            `select count(*)::int as n from journal where decision->>'tool' = 'create_dns_record'`,
          )) ===
            RUNS / 2,
        "the first batch's DNS records decided",
        180_000,
        200,
      );
      await submit(ids.slice(RUNS / 2));
      await until(
        async () =>
          (await count(`select count(*)::int as n from runs where agent_version is not null`)) === RUNS,
        "every run taken by version 1",
        120_000,
        200,
      );
      // The deploy: version 2's workers start beside version 1's.
      const fresh = ["v2-a", "v2-b"].map((name) => worker(w, "v2.ts", name));
      procs.push(...fresh);
      const v2 = await versionsOf(fresh);
      const deployedAt = new Date();
      const inFlightAtDeploy = await inFlight();
      // Before the rename is declared, the replay check (in this process: no module to start) lists the
      // steps of the renamed tool among the runs in flight; once it is, it is quiet.
      const context = { env: w.env, embedded: false };
      const unreplaced = (await import(`./testdata/versions/v2_unreplaced.ts`)).default as Agent[];
      const replaced = (await import(`./testdata/versions/v2.ts`)).default as Agent[];
      const openBefore = await replayCheck(pg.store, unreplaced[1], { context });
      const openAfter = await replayCheck(pg.store, replaced[1], { context });
      console.log(
        `${t()} replay check of the open runs: ${openBefore.problems.length} steps the unreplaced module cannot ` +
          `carry, ${openAfter.problems.length} once replaces is declared`,
      );
      assert.ok(openBefore.problems.length > 0, "the first batch's DNS records");
      assert.ok(openBefore.problems.every((p) => p.tool === "create_dns_record"), "only the renamed tool");
      assert.deepEqual(openAfter.problems, []);
      console.log(
        `${t()} version 2 up (${v2.join(", ")}); ${inFlightAtDeploy} of ${RUNS} runs were in flight`,
      );
      // Version 1's workers stop one by one: the first asked to, the second killed mid-call.
      old[0].kill("SIGTERM");
      assert.equal(await old[0].status, 0);
      const calls = old[1].lines.length;
      await old[1].waitFor(
        (l) => old[1].lines.indexOf(l) >= calls && /event=calling /.test(l),
        "a call of v1-b",
        60_000,
      );
      old[1].kill("SIGKILL");
      const killedMidCall = old[1].events("calling").at(-1)!.key;
      assert.equal(await old[1].status, 137);
      console.log(`${t()} v1-a stopped; v1-b SIGKILLed while calling ${killedMidCall}`);
      mocks.cloud.setFaults({ delay_ms: 1_000 });
      mocks.cloud.setFaults({ path: "/v1/dns_records", delay_ms: 1_000 });
      // The last of version 1 finishes the runs that stay (and the killed worker's), and settles the calls it
      // sent of the runs that move; it stops once no open run is on version 1, as an operator reads in `runs`.
      const onV1 = () =>
        count(
          `select count(*)::int as n from runs where status <> 'done' and agent_version in ('${
            versionOf(v1, "deploy")
          }', '${versionOf(v1, "deploy-rolling")}')`,
        );
      await until(async () => (await onV1()) === 0, "no open run on version 1", 180_000, 250);
      old[2].kill("SIGTERM");
      assert.equal(await old[2].status, 0);
      console.log(`${t()} every run that stays is done, no open run on version 1; v1-c stopped`);
      await until(
        async () => (await pg.store.operators.listRuns({ status: "done", limit: 1 })).total === RUNS,
        "every run done",
        180_000,
        250,
      );
      console.log(`${t()} every run done`);
      // The replay check through the command, reading the finished runs: the steps of the renamed tool are
      // listed before the rename is declared; once it is, it is quiet.
      const before = await replayCheckCommand(w, "v2_unreplaced.ts");
      const after = await replayCheckCommand(w, "v2.ts");
      console.log(
        `${t()} replay check before the rename is declared:\n${before.lines.slice(0, 3).join("\n")}`,
      );
      console.log(`${t()} replay check once it is:\n${after.lines.join("\n")}`);
      assert.equal(before.code, 1);
      assert.ok(
        before.lines.some((l) => /tool=create_dns_record .*Unknown tool "create_dns_record"/.test(l)),
      );
      assert.equal(after.code, 0, after.lines.join("\n"));
      assert.match(after.lines[0], /cannot_carry=0/);

      // One resource per key at the cloud, each the one its call recorded; no run failed.
      const created = mocks.cloud.created();
      assert.equal(new Set(created.map((c) => c.key)).size, created.length, "a key created two resources");
      assert.equal(created.length, RUNS * 3, "three resources a run");
      const stats = { moved: 0, stayedOnV1: 0, v1DecisionsAfterDeploy: 0, maxV1DecisionsAfterDeploy: 0 };
      const v1Stay = versionOf(v1, "deploy");
      const v1Move = versionOf(v1, "deploy-rolling");
      const v2Move = versionOf(v2, "deploy-rolling");
      for (const id of ids) {
        const run = (await pg.store.reads.getRun(id))!;
        const { journal, effects } = await pg.store.reads.loadHistory(id);
        assert.equal(run.status, "done", id);
        assert.deepEqual(effects.map((e) => e.status), ["confirmed", "confirmed", "confirmed"], id);
        for (const e of effects) {
          assert.equal(created.find((c) => c.key === e.idempotency_key)?.id, e.result, e.idempotency_key);
        }
        const decided = decisions(journal);
        if (id.startsWith("stay")) {
          // Finished by version 1's workers: its version, its tools, its last owner.
          assert.deepEqual([run.agent_version, run.moved_from], [v1Stay, null], id);
          assert.deepEqual(decided.map((d) => d.tool), V1_TOOLS, id);
          assert.match(run.owner!, /^v1-/, id);
          continue;
        }
        if (run.agent_version === v1Move) {
          // Done on version 1 before version 2 could take it: every decision before the deploy's end.
          // (a decision under way when version 2 came, or made before its holder heard of it at a heartbeat).
          stats.stayedOnV1++;
          assert.deepEqual(decided.map((d) => d.tool), V1_TOOLS, id);
          const last = journal.at(-1)!;
          assert.ok(
            new Date(last.confirmed_at!).getTime() < deployedAt.getTime() + 3_000,
            `${id} done late on v1`,
          );
          continue;
        }
        // Moved to version 2 at a decision: every decision after the move is version 2's.
        stats.moved++;
        assert.deepEqual([run.agent_version, run.moved_from], [v2Move, v1Move], id);
        const movedAt = new Date(run.moved_at!);
        for (const d of decided.filter((d) => d.at > movedAt)) {
          assert.ok(V2_TOOLS.includes(d.tool), `${id}: ${d.tool}`);
        }
        const lateV1 = decided.filter((d) => d.at > deployedAt && d.at < movedAt).length;
        stats.v1DecisionsAfterDeploy += lateV1;
        stats.maxV1DecisionsAfterDeploy = Math.max(stats.maxV1DecisionsAfterDeploy, lateV1);
      }
      // The call the killed worker left at intent was sent again under its key by a worker of version 1.
      const resent = procs.flatMap((p) => p.events("resent")).filter((e) => e.key === killedMidCall);
      assert.ok(resent.length >= 1, `${killedMidCall} was sent again`);
      assert.ok(stats.moved > 0, "runs moved to version 2");
      console.log(
        `${t()} runs=${RUNS} in_flight_at_deploy=${inFlightAtDeploy} moved_to_v2=${stats.moved} ` +
          `rolling_done_on_v1=${stats.stayedOnV1} stayed_on_v1=${RUNS / 2} resources=${created.length} ` +
          `v1_decisions_after_deploy_before_move=${stats.v1DecisionsAfterDeploy} ` +
          `(most in one run: ${stats.maxV1DecisionsAfterDeploy}) killed_mid_call=${killedMidCall} ` +
          `resent_outcome=${resent[0].outcome}`,
      );
      // What the workers said of the moves: one line of each kind.
      for (const event of ["moves-marked", "moving", "moved"]) {
        const line = procs.flatMap((p) => p.lines).find((l) => l.includes(` event=${event} `));
        console.log(line?.replace(/^ts=\S+ /, "") ?? `(no ${event} line)`);
      }
      for (const p of fresh) p.kill("SIGTERM");
      for (const p of fresh) assert.equal(await p.status, 0);
    } finally {
      for (const p of procs) await p.close();
      await mocks.close();
      await pg.drop();
    }
  },
});
