/**
 * Model request parameters end to end, through the real chat-completions
 * client over HTTP to the mock model: the agent's parameters under the run's
 * reach the wire in its names, each step's journal row records what its
 * request was sent with, and a server that refuses a parameter fails the run
 * with one request and a message naming it. On PGlite, and on PostgreSQL
 * when TEST_DATABASE_URL is set.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { type Client, connect } from "../runtime/client/client.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { MockModel } from "../mock/model.ts";
import { pgTest } from "./_pg.ts";
import { inspect } from "../cli/commands.ts";
import { testClient } from "./_pglite.ts";

/** The mock model over HTTP, keeping every request body it was sent. */
async function servedModel(refuseParams: string[] = []) {
  const mock = await MockModel.open({
    refuseParams,
    scripts: {
      byAgent: {
        tuned: [
          { tool: "note", args: { text: "first" } },
          { tool: "note", args: { text: "second" } },
          { answer: "Wrote two notes." },
        ],
      },
    },
  });
  const bodies: Record<string, unknown>[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const text = await req.text();
    bodies.push(JSON.parse(text));
    return await mock.handler(new Request(req.url, { method: "POST", headers: req.headers, body: text }));
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, bodies, close: () => server.shutdown() };
}

function tunedAgent(url: string) {
  return defineAgent({
    name: "tuned",
    instructions: "Write the notes asked for.",
    tools: [defineTool({
      name: "note",
      description: "Writes a note.",
      args: z.strictObject({ text: z.string() }),
      run: (args) => Promise.resolve({ result: { wrote: args.text } }),
    })],
    model: new OpenAIPlanner({ url, model: "mock" }),
    modelParams: { temperature: 0.7, seed: 7, stop: ["END"], extra: { parallel_tool_calls: false } },
  });
}

async function parametersReachTheWire(client: Client) {
  const model = await servedModel();
  try {
    const agent = tunedAgent(model.url);
    const worker = await client.startWorker([agent]);
    try {
      const run = await client.start(agent, {
        runId: "tuned-1",
        input: "two notes",
        modelParams: { temperature: 0, maxOutputTokens: 300, extra: { user: "u-1" } },
      });
      const done = await client.wait(run.runId, { timeoutMs: 30_000 });
      assert.equal(done.status, "done", JSON.stringify(done));
    } finally {
      await worker.stop();
    }
    assert.equal(model.bodies.length, 3, "one request per step");
    for (const body of model.bodies) {
      // The run's temperature over the agent's; the agent's seed and stop; both extras; the run's cap.
      assert.equal(body.temperature, 0);
      assert.equal(body.seed, 7);
      assert.deepEqual(body.stop, ["END"]);
      assert.equal(body.parallel_tool_calls, false);
      assert.equal(body.user, "u-1");
      assert.equal(body.max_tokens, 300);
      assert.equal(body.top_p, undefined, "a parameter nobody set is not sent");
    }
    const { journal } = await client.store.reads.loadHistory("tuned-1");
    assert.equal(journal.length, 3);
    for (const row of journal) {
      assert.deepEqual(row.params, {
        temperature: 0,
        seed: 7,
        stop: ["END"],
        extra: { parallel_tool_calls: false, user: "u-1" },
        maxOutputTokens: 300,
      }, `step ${row.seq} records what its request was sent with`);
    }
    // And `inspect` shows it under each decision.
    const lines: string[] = [];
    await inspect({ client, print: (l) => lines.push(l), actor: "test" }, "tuned-1");
    const shown = lines.filter((l) => l.includes("params: "));
    assert.equal(shown.length, 3, lines.join("\n"));
    assert.match(shown[0], /"temperature":0,.*"maxOutputTokens":300/);
  } finally {
    await model.close();
  }
}

async function aRefusedParameterFailsTheRun(client: Client) {
  const model = await servedModel(["seed"]);
  try {
    const agent = tunedAgent(model.url);
    const worker = await client.startWorker([agent]);
    try {
      const run = await client.start(agent, { runId: "tuned-2", input: "two notes" });
      const done = await client.wait(run.runId, { timeoutMs: 30_000 });
      assert.equal(done.status, "failed");
      assert.match(done.error ?? "", /MODEL_PARAMS_REFUSED/);
      assert.match(done.error ?? "", /seed=7/, "the message names the parameter and the value sent");
      assert.match(done.error ?? "", /modelParams/, "and says where to change it");
    } finally {
      await worker.stop();
    }
    assert.equal(model.bodies.length, 1, "a refusal is permanent: asked once, not retried");
  } finally {
    await model.close();
  }
}

/** Runs `body` with a client on an in-memory PGlite, closed after. */
async function onPglite(body: (client: Client) => Promise<void>): Promise<void> {
  const client = await testClient();
  try {
    await body(client);
  } finally {
    await client.close();
  }
}

Deno.test("request parameters: the agent's under the run's reach the wire and the journal (PGlite)", () =>
  onPglite(parametersReachTheWire));

Deno.test("request parameters: a parameter the server refuses fails the run once, named (PGlite)", () =>
  onPglite(aRefusedParameterFailsTheRun));

pgTest(
  "request parameters reach the wire and the journal, and a refused one fails the run (PostgreSQL)",
  async (pg) => {
    const client = await connect({ databaseUrl: pg.url });
    try {
      await parametersReachTheWire(client);
      await aRefusedParameterFailsTheRun(client);
    } finally {
      await client.close();
    }
  },
);

Deno.test("client.start() refuses wrong request parameters, naming each, and creates no run", async () => {
  const client = await testClient();
  try {
    const agent = tunedAgent("http://127.0.0.1:9/v1");
    await assert.rejects(
      client.start(agent, {
        runId: "tuned-3",
        input: "notes",
        modelParams: { temperature: 5, stop: [], extra: { model: "other" } } as never,
      }),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "MODEL_PARAMS_INVALID");
        assert.match(err.message, /'temperature' must be a number from 0 to 2: current value is 5/);
        assert.match(err.message, /'stop' must be 1 to 16 non-empty strings/);
        assert.match(err.message, /'extra' may not set model/);
        return true;
      },
    );
    assert.equal(await client.store.reads.getRun("tuned-3"), undefined);
  } finally {
    await client.close();
  }
});

Deno.test("a run asking for eight answers per request (extra.n) is refused before any request is billed", async () => {
  const model = await servedModel();
  const client = await testClient();
  try {
    const agent = tunedAgent(model.url);
    await assert.rejects(
      client.start(agent, { runId: "tuned-n8", input: "notes", modelParams: { extra: { n: 8 } } }),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, "MODEL_PARAMS_INVALID");
        assert.match(err.message, /'extra' may not set n to 8: it asks for several answers/);
        return true;
      },
    );
    assert.equal(await client.store.reads.getRun("tuned-n8"), undefined, "no run");
    assert.throws(
      () => defineAgent({ name: "many", tools: [], modelParams: { extra: { n: 8 } } }),
      /Cannot define agent "many": .*'extra' may not set n to 8/,
    );
    // One answer asked for, explicitly, is still fine: it reaches the wire as given.
    const worker = await client.startWorker([agent], { pollMs: 10 });
    try {
      await client.start(agent, { runId: "tuned-n1", input: "notes", modelParams: { extra: { n: 1 } } });
      assert.equal((await client.wait("tuned-n1", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    } finally {
      await worker.stop();
    }
    assert.ok(model.bodies.length > 0 && model.bodies.every((b) => b.n === 1), JSON.stringify(model.bodies));
  } finally {
    await client.close();
    await model.close();
  }
});
