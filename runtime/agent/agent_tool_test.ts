import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent, prepareAgent, type PreparedAgent } from "./agent.ts";
import { agentTool, childAgentOf, withChildAgents } from "./agent_tool.ts";
import { childRunId } from "../families/family.ts";
import { discardSink, Logger } from "../base/log.ts";
import { SystemClock } from "../base/clock.ts";
import type { Planner } from "../model/planner.ts";
import { defineTool, type ToolContext } from "./tools.ts";
import { testClient } from "../../tests/_pglite.ts";

/** A model that calls each offered tool once (all at once), then answers with what they returned. */
const callEverything: Planner = {
  describe: "test",
  decide: (req) => {
    const results = req.transcript.flatMap((m) =>
      m.role === "tool" ? [m.failed ? m.error : String(m.result)] : []
    );
    if (results.length > 0 || req.tools.length === 0) {
      return Promise.resolve({
        kind: "done",
        text: `${req.agent}: ${results.join(" + ") || "nothing to do"}`,
      });
    }
    return Promise.resolve({
      kind: "tool_calls",
      calls: req.tools.map((t) => ({
        name: t.name,
        args: t.name === "echo" ? { text: "hi" } : { task: "go" },
      })),
    });
  },
};

const echo = defineTool({
  name: "echo",
  description: "Echoes.",
  args: z.strictObject({ text: z.string() }),
  run: (args, ctx) => Promise.resolve({ result: `${args.text} from ${ctx.idempotencyKey}` }),
});
const leaf = defineAgent({ name: "leaf", tools: [echo], model: callEverything });
const middle = defineAgent({ name: "middle", tools: [agentTool(leaf)], model: callEverything });
const top = defineAgent({ name: "top", tools: [agentTool(middle), agentTool(leaf)], model: callEverything });

const ctx = { env: {}, dataDir: ".data", embedded: true };
const prepare = (a: typeof top) => prepareAgent(a, ctx, () => callEverything);

Deno.test("withChildAgents() adds every agent the agents call, each once, and refuses two under one name", async () => {
  const prepared = await withChildAgents([await prepare(top)], prepare);
  assert.deepEqual(prepared.map((p: PreparedAgent) => p.agent.name), ["top", "middle", "leaf"]);
  assert.equal(childAgentOf(prepared[0].tools.get("leaf")!), leaf);
  assert.equal(childAgentOf(echo), undefined);
  const impostor = defineAgent({ name: "leaf", tools: [], model: callEverything });
  const two = defineAgent({
    name: "two",
    tools: [agentTool(leaf), agentTool(impostor, { name: "other" })],
    model: callEverything,
  });
  await assert.rejects(
    withChildAgents([await prepare(two)], prepare),
    /Two different agents are named leaf \(one is the tool other of agent two\)/,
  );
});

Deno.test("an agent tool called outside a run says it needs the runtime", async () => {
  const tool = agentTool(leaf);
  await assert.rejects(
    tool.run(
      { task: "x" },
      { idempotencyKey: "r:0", runId: "r", seq: 0, attempt: 1 } as unknown as ToolContext,
    ),
    (e: Error & { code?: string }) => e.code === "AGENT_TOOL_OUTSIDE_RUNTIME",
  );
});

Deno.test("a child run's id is the call's key with a dot, and one past 64 characters is refused", () => {
  assert.equal(childRunId("run42", 3), "run42.3");
  assert.equal(childRunId("run42.3", 0), "run42.3.0");
  assert.throws(
    () => childRunId("r".repeat(63), 10),
    (e: Error & { code?: string }) =>
      e.code === "AGENT_CHILD_ID_TOO_LONG" && /is 66 characters, and a run id is at most 64/.test(e.message),
  );
});

Deno.test("client.startWorker() with the top agent alone drives its children and grandchildren to the answer", async () => {
  const client = await testClient();
  const host = await client.startWorker([top], {
    log: new Logger({ sink: discardSink, clock: new SystemClock() }),
    pollMs: 50,
    heartbeatMs: 1_000,
  });
  try {
    await client.start(top, { runId: "t", input: "go" });
    const done = await client.wait("t", { timeoutMs: 30_000, pollMs: 50 });
    assert.equal(done.status, "done");
    assert.equal(done.output, "top: middle: leaf: hi from t.0.0:0 + leaf: hi from t.1:0");
    const { runs } = await client.reads.list();
    assert.deepEqual(runs.map((r) => [r.run_id, r.status, r.parent_run_id]).sort(), [
      ["t", "done", null],
      ["t.0", "done", "t"],
      ["t.0.0", "done", "t.0"],
      ["t.1", "done", "t"],
    ]);
  } finally {
    await host.stop();
    await client.close();
  }
});
