/**
 * Outages on real processes: the support agent (`examples/support/`) under a
 * real supervisor on PostgreSQL, its shop's API and its model served from
 * this process over HTTP, and each of them taken down (its port closed:
 * every request refused) for a while, then served again on the same port
 * with its state kept. Nothing in the runtime is faked: the workers meet
 * refused connections, record them, and ride them out. Used by
 * `tests/outage_pg_test.ts` (short outages, a short backoff) and
 * `bench/outage_bench.ts` (minutes, the defaults of a fresh `supervise`).
 *
 * @module
 */

import { MockModel } from "../mock/model.ts";
import { MockShop, serveShop } from "../mock/shop.ts";
import { connect } from "../runtime/client/client.ts";
import support from "../examples/support/agent.ts";
import { type Proc, startSupervisor, until } from "./procs.ts";

/** One remote taken down while runs are submitted and driven. */
export interface OutagePhase {
  /** Which remote goes down: the shop (the tools' remote) or the model's server. */
  remote: "shop" | "model";
  /** How long it stays down, in milliseconds. */
  downMs: number;
  /** Runs submitted just after it went down. */
  runs: number;
}

/** What {@link rideOutages} measured of one phase. */
export interface PhaseReport {
  /** The phase. */
  phase: OutagePhase;
  /** Its runs. */
  runIds: string[];
  /**
   * The longest a run was seen holding a worker's slot (running, with a live lease) without a break during
   * the outage, sampled every 500 ms: a run woken to try again holds one for a moment, one that waited
   * the outage out in a worker would hold it throughout.
   */
  longestHoldMs: number;
  /** The most runs seen waiting (no lease, a wake time) during the outage. */
  waitingMost: number;
  /** Failures recorded on the runs' rows while the remote was down. */
  failuresRecorded: number;
  /** From the remote's return to the last of the phase's runs done, in ms. */
  backToDoneMs: number;
  /** The runs' end states. */
  statuses: Record<string, number>;
}

/** What {@link rideOutages} saw in all. */
export interface OutageReport {
  /** One per phase, in order. */
  phases: PhaseReport[];
  /** Tickets the shop opened, and its requests by key. */
  tickets: { opened: number; keys: number; requestsByKey: Record<string, number>; conflicts: number };
  /** Model requests answered, per run. */
  modelCalls: Record<string, number>;
  /** The supervisor's output lines. */
  supervisorLines: string[];
}

/** Options of {@link rideOutages}. */
export interface OutageOptions {
  /** The PostgreSQL the supervisor and its workers share (a test's schema URL). */
  databaseUrl: string;
  /** The phases, in order. */
  phases: OutagePhase[];
  /** More of the supervisor's settings (`RETRY_*`, `WORKERS`, `POLL_S`, ...), over the test settings of `startSupervisor`. */
  env?: Record<string, string>;
  /** How long, at most, the runs of a phase may take to end once their remote is back. */
  drainMs?: number;
  /** Called with a line of progress. */
  note?: (line: string) => void;
}

/**
 * Runs the phases one after the other under one supervisor, and reports what
 * it saw. Throws when a phase's runs do not end within `drainMs` of its
 * remote's return.
 */
export async function rideOutages(opts: OutageOptions): Promise<OutageReport> {
  const note = opts.note ?? (() => {});
  const shop = new MockShop();
  const model = await MockModel.open();
  let shopServer = serveShop(shop);
  const shopPort = shopServer.port;
  const serveModel = (port: number) =>
    Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, model.handler);
  let modelServer = serveModel(0);
  const modelPort = modelServer.addr.port;
  const client = await connect({ databaseUrl: opts.databaseUrl });
  let sup: Proc | undefined;
  const down = { shop: false, model: false };
  try {
    sup = startSupervisor({
      DATABASE_URL: opts.databaseUrl,
      AGENT: new URL("../examples/support/agent.ts", import.meta.url).pathname,
      MODEL_URL: `http://127.0.0.1:${modelPort}/v1`,
      MODEL: "mock-planner",
      SHOP_URL: shopServer.url,
      ...opts.env,
    });
    await until(
      () => Promise.resolve(sup!.events("worker-started").length > 0),
      "the supervisor's first worker",
      60_000,
    );
    const phases: PhaseReport[] = [];
    for (const [i, phase] of opts.phases.entries()) {
      if (phase.remote === "shop") await shopServer.close();
      else await modelServer.shutdown();
      down[phase.remote] = true;
      const downAt = Date.now();
      note(
        `phase ${i + 1}: the ${phase.remote} is down for ${
          phase.downMs / 1000
        } s; ${phase.runs} runs submitted`,
      );
      const runIds = Array.from({ length: phase.runs }, (_, k) => `out${i + 1}-${k}`);
      for (const runId of runIds) await client.start(support, { runId });
      let longestHoldMs = 0;
      let waitingMost = 0;
      // Since when each run has been seen holding a slot (and under which epoch: a new claim is a new hold).
      const holding = new Map<string, { since: number; epoch: number }>();
      // Bounded by the outage's length.
      while (Date.now() - downAt < phase.downMs) {
        const rows = (await client.reads.list({ limit: 1000 })).runs.filter((r) => runIds.includes(r.run_id));
        const now = Date.now();
        for (const r of rows) {
          const held = r.status === "running" && r.heartbeat_at !== null;
          const was = holding.get(r.run_id);
          if (!held) holding.delete(r.run_id);
          else if (!was || was.epoch !== r.epoch) holding.set(r.run_id, { since: now, epoch: r.epoch });
          else longestHoldMs = Math.max(longestHoldMs, now - was.since);
        }
        waitingMost = Math.max(
          waitingMost,
          rows.filter((r) => r.status === "waiting" && r.wake_at !== null).length,
        );
        await new Promise((r) => setTimeout(r, 500));
      }
      let failuresRecorded = 0;
      for (const runId of runIds) {
        const { journal, effects } = await client.reads.inspect(runId);
        failuresRecorded += [...journal, ...effects].reduce((n, r) => n + r.failures, 0);
      }
      if (phase.remote === "shop") shopServer = serveShop(shop, shopPort);
      else modelServer = serveModel(modelPort);
      down[phase.remote] = false;
      const backAt = Date.now();
      note(`phase ${i + 1}: the ${phase.remote} is back`);
      await until(
        async () => {
          const rows = (await client.reads.list({ limit: 1000 })).runs.filter((r) =>
            runIds.includes(r.run_id)
          );
          return rows.length === runIds.length &&
            rows.every((r) => ["done", "failed", "cancelled"].includes(r.status));
        },
        `phase ${i + 1}'s runs to end once the ${phase.remote} was back`,
        opts.drainMs ?? 120_000,
        250,
      );
      const backToDoneMs = Date.now() - backAt;
      const statuses: Record<string, number> = {};
      for (const runId of runIds) {
        const s = (await client.get(runId))?.status ?? "missing";
        statuses[s] = (statuses[s] ?? 0) + 1;
      }
      note(
        `phase ${i + 1}: ${JSON.stringify(statuses)} ${backToDoneMs} ms after the ${phase.remote} was back`,
      );
      phases.push({ phase, runIds, longestHoldMs, waitingMost, failuresRecorded, backToDoneMs, statuses });
    }
    const requestsByKey = shop.requestsByKey();
    const modelCalls: Record<string, number> = {};
    for (const p of phases) for (const id of p.runIds) modelCalls[id] = model.calls(id);
    return {
      phases,
      tickets: {
        opened: shop.tickets().length,
        keys: new Set(shop.tickets().map((t) => t.key)).size,
        requestsByKey,
        conflicts: shop.conflicts,
      },
      modelCalls,
      supervisorLines: sup.lines,
    };
  } finally {
    if (sup) {
      sup.kill("SIGTERM");
      await sup.status;
    }
    await client.close();
    if (!down.shop) await shopServer.close();
    if (!down.model) await modelServer.shutdown();
  }
}
