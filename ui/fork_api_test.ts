/**
 * The page's forks and evaluations (docs/fork.md): "fork from here" is a POST
 * that calls client.fork and answers the fork, refusing what it must with a
 * 400 naming the field; a fork's run JSON says of which run and step it is;
 * an evaluation's case runs come back by variant, each linkable.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { createUiApp } from "./server.ts";
import { testClient } from "../tests/_pglite.ts";

const agent = defineAgent({
  name: "two-step",
  tools: [defineTool({
    name: "note",
    description: "Writes a note.",
    args: z.strictObject({ text: z.string() }),
    run: (args) => Promise.resolve({ result: args.text }),
    stub: (args) => `stub ${args.text}`,
  })],
  model: {
    describe: "script",
    decide: (req) =>
      Promise.resolve(
        req.transcript.some((m) => m.role === "tool")
          ? { kind: "done", text: `done by ${req.params?.model ?? "default"}` }
          : { kind: "tool_calls", calls: [{ name: "note", args: { text: "<b>hi</b>" } }] },
      ),
  },
});

const post = (body: unknown) => ({
  method: "POST",
  headers: { "content-type": "application/json", host: "127.0.0.1" },
  body: JSON.stringify(body),
});
const local = { headers: { host: "127.0.0.1:8787" } };

Deno.test("fork from here: a POST forks the run; the fork's JSON names its original; an eval lists its case runs", async () => {
  const client = await testClient();
  const worker = await client.startWorker([agent], { pollMs: 20 });
  try {
    await client.start(agent, { runId: "r1", input: "go" });
    await client.wait("r1", { timeoutMs: 20_000, pollMs: 10 });
    const app = await createUiApp({ client });

    const bad = await app.request("/api/runs/r1/fork", post({ atSeq: "1" }));
    assert.equal(bad.status, 400);
    assert.match((await bad.json()).message, /atSeq must be an integer/);
    const notStep = await app.request("/api/runs/r1/fork", post({ atSeq: 7 }));
    assert.equal((await notStep.json()).code, "FORK_INVALID");
    const ro = await createUiApp({ client, readOnly: true });
    assert.equal((await ro.request("/api/runs/r1/fork", post({ atSeq: 1 }))).status, 403);

    const res = await app.request("/api/runs/r1/fork", post({ atSeq: 1, model: "m2", runId: "r1-f" }));
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {
      runId: "r1-f",
      forkedFrom: "r1",
      atSeq: 1,
      dryRun: true,
      copied: { steps: 1, calls: 1, messages: 0 },
    });
    assert.equal((await client.wait("r1-f", { timeoutMs: 20_000, pollMs: 10 })).output, "done by m2");
    const shown = await (await app.request("/api/runs/r1-f", local)).json();
    assert.deepEqual(shown.fork, { from: "r1", atSeq: 1, dryRun: true, evalId: null });

    // Two case runs of evaluation ev, as runEval names them.
    await client.fork("r1", { atSeq: 0, runId: "ev-a-1", evalId: "ev" });
    await client.fork("r1", { atSeq: 0, runId: "ev-b-1", evalId: "ev", model: "m3" });
    await client.wait("ev-a-1", { timeoutMs: 20_000, pollMs: 10 });
    await client.wait("ev-b-1", { timeoutMs: 20_000, pollMs: 10 });
    const ev = await (await app.request("/api/evals/ev", local)).json();
    assert.deepEqual(ev.variants.map((v: { variant: string; done: number }) => [v.variant, v.done]), [[
      "a",
      1,
    ], [
      "b",
      1,
    ]]);
    assert.deepEqual(
      ev.cases.map((
        c: { runId: string; forkedFrom: string; output: string },
      ) => [c.runId, c.forkedFrom, c.output]),
      [["ev-a-1", "r1", "done by default"], ["ev-b-1", "r1", "done by m3"]],
    );
    assert.equal((await app.request("/api/evals/none", local)).status, 404);
    assert.equal(
      (await app.request("/evals/ev", local)).status,
      200,
      "the page serves the evaluation's view",
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});
