/**
 * The streamable-HTTP handler under the MCP SDK's own client, over real HTTP (Deno.serve on port 0), on
 * an in-memory database with a worker host in this process: the DNS-rebinding guard, unknown sessions,
 * an approval asked through elicitation, a run as a task, and progress while a call waits.
 */

import assert from "node:assert/strict";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/index"
import { Client as McpClient } from "npm:@modelcontextprotocol/sdk@1.32.2/client/index.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import { StreamableHTTPClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import { CreateTaskResultSchema, ElicitRequestSchema } from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
import { z } from "npm:zod@4.6.7";
import { defineAgent } from "../agent/agent.ts";
import { defineTool } from "../agent/tools.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";
import { waitForSignal } from "../signals/wait_tools.ts";
import { arraySink, Logger } from "../base/log.ts";
import { mcpHandler } from "./mcp_http.ts";
import { testClient } from "../../tests/_pglite.ts";

/** Calls the agent's first tool once, then answers with what the tool said. */
const planner = {
  describe: "scripted",
  decide: (req: DecideRequest): Promise<PlannerDecision> => {
    const result = req.transcript.find((m) => m.role === "tool");
    if (result || req.tools.length === 0) {
      return Promise.resolve({ kind: "done", text: `done: ${JSON.stringify(result ?? null).slice(0, 200)}` });
    }
    return Promise.resolve({ kind: "tool_calls", calls: [{ name: req.tools[0].name, args: {} }] });
  },
};
const guarded = defineAgent({
  name: "guarded",
  model: planner,
  tools: [defineTool({
    name: "launch",
    description: "Launches.",
    args: z.strictObject({}),
    approval: true,
    run: () => Promise.resolve({ result: "launched" }),
  })],
});
const quick = defineAgent({ name: "quick", model: planner, tools: [] });
const patient = defineAgent({ name: "patient", model: planner, tools: [waitForSignal("go")] });

// One database, worker and server for the file (a database takes seconds to start).
const shared = await fixture();
Deno.test.afterAll(() => shared[Symbol.asyncDispose]());

async function fixture() {
  const client = await testClient();
  const lines: string[] = [];
  const host = await client.startWorker([guarded, quick, patient], {
    log: new Logger({ clock: client.clock, sink: arraySink(lines) }),
  });
  const handler = mcpHandler({
    client,
    agents: [guarded, quick, patient],
    answerWaitMs: 20_000,
    progressMs: 100,
  });
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
  const url = new URL(`http://127.0.0.1:${server.addr.port}/mcp`);
  return {
    client,
    url,
    port: server.addr.port,
    /**
     * An MCP client connected to the handler, with the capabilities given; disposed, it closes and so do
     * the handler's sessions (each test leaves no stream open).
     */
    connect: async (name: string, capabilities: Record<string, unknown> = {}) => {
      const mcp = new McpClient({ name, version: "1.0.0" }, { capabilities });
      await mcp.connect(new StreamableHTTPClientTransport(url));
      return Object.assign(mcp, {
        [Symbol.asyncDispose]: async () => {
          await mcp.close();
          await handler.close();
        },
      });
    },
    [Symbol.asyncDispose]: async () => {
      await handler.close();
      await server.shutdown();
      await host.stop();
      await client.close();
    },
  };
}

/** The status line of a raw HTTP request with the given headers (fetch would not send our Host). */
async function rawStatus(port: number, headers: Record<string, string>): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  const head = Object.entries({
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "content-length": String(body.length),
    connection: "close",
    ...headers,
  }).map(([k, v]) => `${k}: ${v}\r\n`).join("");
  await conn.write(new TextEncoder().encode(`POST /mcp HTTP/1.1\r\n${head}\r\n${body}`));
  const buf = new Uint8Array(512);
  const n = await conn.read(buf);
  conn.close();
  return Number(new TextDecoder().decode(buf.subarray(0, n ?? 0)).split(" ")[1]);
}

Deno.test("a Host or Origin that is not loopback is refused 403; an unknown session 404", async () => {
  const f = shared;
  assert.equal(await rawStatus(f.port, { host: "evil.example" }), 403);
  assert.equal(await rawStatus(f.port, { host: `evil.example:${f.port}` }), 403);
  assert.equal(await rawStatus(f.port, { host: `127.0.0.1:${f.port}`, origin: "http://evil.example" }), 403);
  assert.notEqual(
    await rawStatus(f.port, { host: `localhost:${f.port}`, origin: `http://localhost:${f.port}` }),
    403,
  );
  const unknown = await fetch(f.url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-session-id": "nope",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
  });
  assert.equal(unknown.status, 404);
  await unknown.body?.cancel();
});

Deno.test("a client that takes elicitation is asked to approve the call the run waits for, and the run finishes", async () => {
  const f = shared;
  await using mcp = await f.connect("desk", { elicitation: { form: {} } });
  const asked: string[] = [];
  mcp.setRequestHandler(ElicitRequestSchema, (req) => {
    asked.push(req.params.message);
    return { action: "accept", content: { approve: true } };
  });
  const out = await mcp.callTool({ name: "guarded", arguments: { goal: "launch it" } });
  const answer = out.structuredContent as { runId: string; status: string };
  assert.equal(answer.status, "done", JSON.stringify(out));
  assert.match((out.content as { text: string }[])[0].text, /launched/);
  assert.equal(asked.length, 1);
  assert.match(asked[0], /asks to call launch with \{\}/);
  const [approval] = await f.client.operators.approvals(answer.runId);
  assert.equal(approval.status, "approved");
  assert.equal(approval.decided_by, "mcp:desk");
});

Deno.test("without elicitation the run's approval is the answer's, and approve_call lets it finish", async () => {
  const f = shared;
  await using mcp = await f.connect("plain");
  const out = await mcp.callTool({ name: "guarded", arguments: { goal: "launch it" } });
  const answer = out.structuredContent as { runId: string; status: string; approvals: { key: string }[] };
  assert.equal(answer.status, "waiting");
  assert.match((out.content as { text: string }[])[0].text, /waits for approval of launch \{\}/);
  const approved = await mcp.callTool({ name: "approve_call", arguments: { key: answer.approvals[0].key } });
  assert.equal((approved.structuredContent as { runId: string }).runId, answer.runId);
  const done = await mcp.callTool({ name: "get_run", arguments: { runId: answer.runId, waitMs: 20_000 } });
  assert.equal((done.structuredContent as { status: string }).status, "done", JSON.stringify(done));
});

Deno.test("an agent's tool called as a task answers with the run as the task, which tasks/get and tasks/result follow", async () => {
  const f = shared;
  await using mcp = await f.connect("tasker");
  const created = await mcp.request(
    { method: "tools/call", params: { name: "quick", arguments: { goal: "hi" }, task: { ttl: 60_000 } } },
    CreateTaskResultSchema,
  );
  const runId = created.task.taskId;
  assert.match(runId, /^mcp-quick-[0-9a-f]{24}$/);
  assert.ok((await f.client.get(runId)) !== undefined, "the task's id is the run's");
  const result = await mcp.experimental.tasks.getTaskResult(
    runId,
    z.object({ content: z.array(z.any()) }).passthrough(),
  );
  assert.match((result.content[0] as { text: string }).text, /^done: null$/);
  const task = await mcp.experimental.tasks.getTask(runId);
  assert.equal(task.status, "completed");
});

Deno.test("a call that waits sends progress to a caller that asked, and answers with the handle at its bound", async () => {
  const f = shared;
  await using mcp = await f.connect("patient-client");
  // Started as a task, so the call answers at once rather than after the server's bound.
  const started = await mcp.request(
    { method: "tools/call", params: { name: "patient", arguments: { goal: "wait" }, task: {} } },
    CreateTaskResultSchema,
  );
  const runId = started.task.taskId;
  const progress: number[] = [];
  const got = await mcp.callTool({ name: "get_run", arguments: { runId, waitMs: 600 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  assert.notEqual((got.structuredContent as { status: string }).status, "done");
  assert.ok(progress.length >= 1, "progress while it waited");
  assert.deepEqual(progress, [...progress].sort((a, b) => a - b), "progress grows");
  await f.client.signal(runId, "go");
  const done = await mcp.callTool({ name: "get_run", arguments: { runId, waitMs: 20_000 } });
  assert.equal((done.structuredContent as { status: string }).status, "done");
});
