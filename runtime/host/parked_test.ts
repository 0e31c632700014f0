import assert from "node:assert/strict";
import { z } from "zod";
import { type Agent, defineAgent } from "../agent/agent.ts";
import { Client } from "../client/client.ts";
import { CountingClient } from "../store/counting.ts";
import { Store } from "../store/store.ts";
import { defineTool } from "../agent/tools.ts";
import { waitForSignal } from "../signals/wait_tools.ts";
import { arraySink, Logger } from "../base/log.ts";
import { SystemClock } from "../base/clock.ts";
import type { Planner } from "../model/planner.ts";
import { testClient } from "../../tests/_pglite.ts";

// A worker host that lets a run go to wait keeps its rows (run/parked.ts): when it takes the run again
// it reads only the rows of the step the run waited at, not its whole history.

const tick = defineTool({
  name: "tick",
  description: "Counts a step.",
  args: z.strictObject({ n: z.number() }),
  run: (args) => Promise.resolve({ result: { ticked: args.n } }),
});

/** Ticks, waits for `go` at step `waitAt`, ticks on, answers at `last`; `asked` counts its requests. */
function ticking(waitAt: number, last: number): { planner: Planner; asked: number[] } {
  const asked: number[] = [];
  return {
    asked,
    planner: {
      describe: "ticking",
      decide: (req) => {
        asked.push(req.seq);
        if (req.seq >= last) return Promise.resolve({ kind: "done", text: `ticked to ${req.seq}` });
        const name = req.seq === waitAt ? "wait_for_go" : "tick";
        return Promise.resolve({
          kind: "tool_calls",
          calls: [{ name, args: name === "tick" ? { n: req.seq } : {} }],
        });
      },
    },
  };
}

async function until(check: () => Promise<boolean>): Promise<void> {
  // Bounded: 2 000 looks, 10 ms apart.
  for (let i = 0; i < 2_000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("timed out");
}

/** An embedded store whose statements are counted, a client on it, and a worker host for `agent` logging to `lines`. */
async function hosted(agent: Agent) {
  const embedded = await testClient();
  const counting = new CountingClient(embedded.store.client);
  const client = new Client(new Store(counting));
  const lines: string[] = [];
  const worker = await client.startWorker([agent], {
    pollMs: 10,
    log: new Logger({ clock: new SystemClock(), sink: arraySink(lines) }),
  });
  const waitFor = (runId: string, status: string) =>
    until(async () => (await client.get(runId))?.status === status);
  return { counting, client, lines, worker, waitFor };
}

Deno.test("a run its host let go to wait for a signal is taken again from memory: only its waiting step's rows are read", async () => {
  const model = ticking(5, 8);
  const agent = defineAgent({ name: "ticker", tools: [tick, waitForSignal("go")], model: model.planner });
  const { counting, client, lines, worker, waitFor } = await hosted(agent);
  try {
    await client.start(agent, { runId: "p1", input: "tick" });
    await waitFor("p1", "waiting");
    counting.reset();
    await client.signal("p1", "go", { now: true });
    worker.wake();
    await waitFor("p1", "done");
    assert.equal((await client.get("p1"))?.output, "ticked to 8");
    assert.equal(counting.counts.get("read-history"), undefined, lines.join("\n"));
    assert.equal(counting.counts.get("read-history-from"), 1, "the rows of the step it waited at, once");
    assert.deepEqual(model.asked, [0, 1, 2, 3, 4, 5, 6, 7, 8], "every decision bought once");
    assert.ok(
      lines.some((l) => / event=replayed-settled run=p1 steps=5 next_seq=5$/.test(l)),
      lines.join("\n"),
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});

Deno.test("a parked run whose waiting call is settled from outside goes on with the settled row, read again at its take", async () => {
  let sent = 0;
  const render = defineTool({
    name: "render",
    description: "Renders a report; the remote takes a while.",
    args: z.strictObject({}),
    // The remote accepts the job and says to ask again in an hour: only a settle from outside ends it sooner.
    run: () => {
      sent++;
      return Promise.resolve({ result: { job: "j1" }, accepted: { checkAfterMs: 3_600_000 } });
    },
  });
  const results: unknown[] = [];
  const agent = defineAgent({
    name: "renderer",
    tools: [render],
    model: {
      describe: "render once",
      decide: (req) => {
        const last = req.transcript.at(-1);
        if (req.seq === 0) {
          return Promise.resolve({ kind: "tool_calls", calls: [{ name: "render", args: {} }] });
        }
        results.push(last?.role === "tool" && "result" in last ? last.result : last);
        return Promise.resolve({ kind: "done", text: "rendered" });
      },
    },
  });
  const { counting, client, lines, worker, waitFor } = await hosted(agent);
  try {
    await client.start(agent, { runId: "p2", input: "render" });
    await waitFor("p2", "waiting");
    await client.operators.settleCall("p2:0", { result: { url: "by-hand" } }, { by: "alice" });
    worker.wake();
    await waitFor("p2", "done");
    assert.equal(sent, 1, "the remote was not asked again");
    assert.deepEqual(results, [{ url: "by-hand" }], "the model was given the settled result");
    assert.equal(
      counting.counts.get("read-history"),
      undefined,
      "the take read only the waiting step's rows",
    );
    assert.equal(lines.filter((l) => l.includes(" event=settled-meanwhile ")).length, 0, lines.join("\n"));
  } finally {
    await worker.stop();
    await client.close();
  }
});
