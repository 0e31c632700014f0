/**
 * Signals with real processes on PostgreSQL (`examples/orders`, the mock
 * model over HTTP): a `deno run` worker with one slot lets a run that waits
 * for its payment's signal go and drives other runs meanwhile; it is
 * SIGKILLed while the run waits, the signal is sent (twice, under one id)
 * while no worker is up, and a new worker finishes the run with the signal
 * taken once. A second run's signal comes first, and its worker is killed
 * (`CRASH_AT=after_call`) between taking it and confirming the call: the
 * next worker's re-send under the key gets the same signal (`already_done`).
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { Proc, until } from "../harness/procs.ts";
import { connect } from "../runtime/client/client.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";

const root = new URL("..", import.meta.url).pathname;

Deno.test({
  name:
    "a worker waiting on a signal is SIGKILLed, the signal sent while it is down, a new worker takes it once",
  ignore: pgIgnore("signals with real processes"),
  fn: async () => {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "signals-" });
    const agentPath = `${dir}/agents.ts`;
    await Deno.writeTextFile(
      agentPath,
      `import orders from "${root}examples/orders/agent.ts";\nimport notes from "${root}examples/notes/agent.ts";\n` +
        `export default [orders, notes];\n`,
    );
    const env = {
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      AGENT: agentPath,
      NOTES_DIR: `${dir}/notes`,
      ORDERS_DIR: `${dir}/orders`,
      RUNS_PER_WORKER: "1",
      POLL_S: "0.2",
      HEARTBEAT_S: "0.5",
      LEASE_S: "4",
    };
    const client = await connect({ databaseUrl: pg.url });
    const worker = (extra: Record<string, string> = {}) =>
      new Proc("cli/main.ts", { ...env, ...extra }, { args: ["worker"] });
    const status = async (runId: string) => (await client.get(runId))?.status;
    const create = (runId: string, agent: string) =>
      pg.store.leases.createRun({ runId, agent, goal: `${agent} ${runId}` }, new Date());
    let w = worker();
    try {
      await create("ord-1", "orders");
      await until(async () => await status("ord-1") === "waiting", "ord-1 to wait for its payment", 60_000);
      const asleep = await pg.store.reads.getRun("ord-1");
      assert.equal(asleep?.heartbeat_at, null, "a run waiting for a signal holds no lease");
      assert.match(asleep?.error ?? "", /waits for signal payment-received/);
      // One slot, and it is free: other runs go through while ord-1 waits.
      for (const id of ["note-1", "note-2", "note-3"]) await create(id, "notes");
      await until(
        async () =>
          (await Promise.all(["note-1", "note-2", "note-3"].map(status))).every((s) => s === "done"),
        "the notes runs to finish in the one slot while ord-1 waits",
        60_000,
      );
      assert.equal(await status("ord-1"), "waiting");

      w.kill("SIGKILL");
      assert.equal(await w.status, 137);
      const payment = { cents: 2999, provider: "test" };
      const sent = await client.signal("ord-1", "payment-received", payment, { signalId: "evt_1" });
      const again = await client.signal("ord-1", "payment-received", payment, { signalId: "evt_1" });
      assert.deepEqual([sent.woken, sent.duplicate, again.duplicate], [true, false, true]);
      w = worker();
      await until(async () => await status("ord-1") === "done", "ord-1 to finish once paid", 60_000);
      const one = await pg.store.reads.loadHistory("ord-1");
      assert.deepEqual(one.effects.map((e) => [e.tool, e.status, e.remote, e.attempts]), [
        ["wait_for_payment", "confirmed", "created", 1],
        ["ship_order", "confirmed", "created", 1],
      ]);
      assert.deepEqual((one.effects[0].result as { payload?: unknown }).payload, payment);
      assert.ok(one.effects[0].polls >= 1, "asked again under its key once woken");
      assert.deepEqual(one.journal.map((j) => j.llm_attempts), [1, 1, 1], "each decision bought once");
      const signals = await client.reads.signals("ord-1");
      assert.deepEqual(signals.map((s) => [s.signalId, s.takenBy]), [["evt_1", "ord-1:0"]]);

      // The signal first; the worker dies between taking it and confirming the call.
      await w.close();
      await create("ord-2", "orders");
      await client.signal("ord-2", "payment-received", { cents: 10 }, { signalId: "evt_2" });
      w = worker({ CRASH_AT: "after_call", CRASH_SEQ: "0" });
      assert.equal(await w.status, 137, "killed at after_call");
      assert.ok(w.events("signal-taken").some((e) => e.run === "ord-2" && e.again === undefined));
      w = worker();
      await until(async () => await status("ord-2") === "done", "ord-2 to finish", 60_000);
      const two = await pg.store.reads.loadHistory("ord-2");
      assert.deepEqual(two.effects.map((e) => [e.tool, e.status, e.remote, e.attempts]), [
        ["wait_for_payment", "confirmed", "already_done", 2],
        ["ship_order", "confirmed", "created", 1],
      ]);
      assert.ok(w.events("signal-taken").some((e) => e.run === "ord-2" && e.again === "true"));
      assert.deepEqual((await client.reads.signals("ord-2")).map((s) => [s.signalId, s.takenBy]), [[
        "evt_2",
        "ord-2:0",
      ]]);
      const shipped = [...Deno.readDirSync(`${dir}/orders`)].map((e) => e.name).sort();
      assert.deepEqual(shipped, ["trk-ord-1-1.txt", "trk-ord-2-1.txt"], "each order shipped once");
    } finally {
      await w.close();
      await client.close();
      await mocks.close();
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
