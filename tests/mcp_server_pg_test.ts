/**
 * The MCP server on PostgreSQL, under the MCP SDK's own client, with a worker driving the runs (this
 * process's worker host, the mock model over HTTP): over streamable HTTP (the handler in Deno.serve on
 * port 0) and over stdio (`cli/main.ts mcp` spawned as a real subprocess, through the SDK's
 * StdioClientTransport). Runs are counted in the database. Skipped without TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/index"
import { Client as McpClient } from "npm:@modelcontextprotocol/sdk@1.32.2/client/index.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp"
import { StreamableHTTPClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/streamableHttp.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/client/stdio"
import { StdioClientTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/client/stdio.js";
import { serveMocks } from "../mock/server.ts";
import { connect } from "../runtime/client/client.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { IDEMPOTENCY_KEY_META, mcpHandler } from "../runtime/mcp_server/mcp_server.ts";
import { patient, quick } from "./testdata/mcp_server_agents.ts";
import { pgTest } from "./_pg.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const AGENTS = new URL("./testdata/mcp_server_agents.ts", import.meta.url).pathname;

type Answer = { runId: string; status: string; answer: string | null; started?: boolean };
const answerOf = (r: unknown) => (r as { structuredContent: Answer }).structuredContent;
const textOf = (r: unknown) => (r as { content: { text: string }[] }).content[0].text;

/** A worker on `url` hosting the two agents, the mock model scripted for `quick`, and a way to count runs. */
async function world(url: string) {
  const mocks = await serveMocks();
  mocks.model.setScript({ agent: "quick", steps: [{ answer: "The sky is blue." }] });
  const client = await connect({ databaseUrl: url });
  const lines: string[] = [];
  const host = await client.startWorker([quick, patient], {
    log: new Logger({ clock: client.clock, sink: arraySink(lines), format: "json" }),
    context: { env: { MODEL_URL: mocks.modelUrl, MODEL: "mock-planner" }, embedded: false },
  });
  return {
    client,
    runs: async () => (await client.reads.list({})).total,
    [Symbol.asyncDispose]: async () => {
      await host.stop();
      await client.close();
      await mocks.close();
    },
  };
}

/** The status of a raw HTTP POST with the given Host (fetch sends its own). */
async function statusWithHost(port: number, host: string): Promise<number> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" });
  await conn.write(new TextEncoder().encode(
    `POST /mcp HTTP/1.1\r\nhost: ${host}\r\ncontent-type: application/json\r\n` +
      `accept: application/json, text/event-stream\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n${body}`,
  ));
  const buf = new Uint8Array(256);
  const n = await conn.read(buf);
  conn.close();
  return Number(new TextDecoder().decode(buf.subarray(0, n ?? 0)).split(" ")[1]);
}

pgTest(
  "over streamable HTTP: an answer within the bound, a handle past it finished through get_run, one run per key and per retried call, 403 for a foreign Host",
  async (pg) => {
    await using w = await world(pg.url);
    const handler = mcpHandler({ client: w.client, agents: [quick, patient], answerWaitMs: 2_000 });
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
    const mcp = new McpClient({ name: "pg-test", version: "1.0.0" });
    try {
      await mcp.connect(
        new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${server.addr.port}/mcp`)),
      );
      const names = (await mcp.listTools()).tools.map((t) => t.name);
      assert.deepEqual(names, [
        "quick",
        "patient",
        "get_run",
        "send_message",
        "cancel_run",
        "approve_call",
        "deny_call",
      ]);

      // Finishes within the bound: the answer is the run's journaled output.
      const done = await mcp.callTool({ name: "quick", arguments: { goal: "What colour is the sky?" } });
      assert.equal(answerOf(done).status, "done", JSON.stringify(done));
      assert.equal(textOf(done), "The sky is blue.");
      assert.equal((await w.client.get(answerOf(done).runId))?.output, "The sky is blue.");

      // No key, the same arguments again within the window: the same run, none started.
      const before = await w.runs();
      const again = await mcp.callTool({ name: "quick", arguments: { goal: "What colour is the sky?" } });
      assert.equal(answerOf(again).runId, answerOf(done).runId);
      assert.equal(answerOf(again).started, false);
      assert.equal(await w.runs(), before);

      // One key twice: one run.
      const meta = { [IDEMPOTENCY_KEY_META]: "pg-key-1" };
      const k1 = await mcp.callTool({ name: "quick", arguments: { goal: "Say hi." }, _meta: meta });
      const k2 = await mcp.callTool({ name: "quick", arguments: { goal: "Say hi." }, _meta: meta });
      assert.equal(answerOf(k1).runId, answerOf(k2).runId);
      assert.deepEqual([answerOf(k1).started, answerOf(k2).started], [true, false]);
      assert.equal(await w.runs(), before + 1);

      // Outlives the client's own timeout: the retry under its key is the same run, answered with its handle.
      const slowMeta = { idempotencyKey: "pg-slow-1" };
      await assert.rejects(
        mcp.callTool({ name: "patient", arguments: { goal: "Wait for go." }, _meta: slowMeta }, undefined, {
          timeout: 300,
        }),
        /timed out/i,
      );
      const handle = await mcp.callTool({
        name: "patient",
        arguments: { goal: "Wait for go." },
        _meta: slowMeta,
      });
      assert.equal(answerOf(handle).started, false, "the timed-out call had started it");
      assert.notEqual(answerOf(handle).status, "done");
      assert.match(textOf(handle), /call get_run with \{"runId": "mcp-patient-/);
      assert.equal(await w.runs(), before + 2);
      await w.client.signal(answerOf(handle).runId, "go");
      const finished = await mcp.callTool({
        name: "get_run",
        arguments: { runId: answerOf(handle).runId, waitMs: 30_000 },
      });
      assert.equal(answerOf(finished).status, "done", JSON.stringify(finished));

      assert.equal(await statusWithHost(server.addr.port, "attacker.example"), 403);
      assert.equal(await statusWithHost(server.addr.port, `attacker.example:${server.addr.port}`), 403);
    } finally {
      await mcp.close();
      await handler.close();
      await server.shutdown();
    }
  },
);

pgTest(
  "over stdio: 'mcp' as a subprocess lists the agents, answers within the bound, and a key sent over HTTP before is that run",
  async (pg) => {
    await using w = await world(pg.url);
    // The key's run, started over HTTP's handler first (in this process): over stdio it is found, not started.
    const handler = mcpHandler({ client: w.client, agents: [quick, patient] });
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
    const http = new McpClient({ name: "http-side", version: "1.0.0" });
    const stdio = new McpClient({ name: "stdio-side", version: "1.0.0" });
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: Deno.execPath(),
      args: ["run", "-A", "--config", `${ROOT}deno.json`, `${ROOT}cli/main.ts`, "mcp", "--agent", AGENTS],
      env: { DATABASE_URL: pg.url, PATH: Deno.env.get("PATH") ?? "", HOME: Deno.env.get("HOME") ?? "" },
      cwd: ROOT,
      stderr: "pipe",
    });
    transport.stderr?.on("data", (b: Uint8Array) => stderr.push(new TextDecoder().decode(b)));
    try {
      await http.connect(
        new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${server.addr.port}/mcp`)),
      );
      const meta = { [IDEMPOTENCY_KEY_META]: "cross-1" };
      const first = await http.callTool({
        name: "quick",
        arguments: { goal: "Name a colour." },
        _meta: meta,
      });
      assert.equal(answerOf(first).status, "done");

      await stdio.connect(transport);
      const names = (await stdio.listTools()).tools.map((t) => t.name);
      assert.ok(names.includes("quick") && names.includes("patient"), names.join(","));
      const fresh = await stdio.callTool({ name: "quick", arguments: { goal: "Name a fruit." } });
      assert.equal(answerOf(fresh).status, "done", `${JSON.stringify(fresh)}\n${stderr.join("")}`);
      assert.equal(textOf(fresh), "The sky is blue.");
      const before = await w.runs();
      const same = await stdio.callTool({
        name: "quick",
        arguments: { goal: "Name a colour." },
        _meta: meta,
      });
      assert.equal(answerOf(same).runId, answerOf(first).runId);
      assert.equal(answerOf(same).started, false);
      assert.equal(await w.runs(), before);
      assert.match(
        stderr.join(""),
        /event=mcp transport=stdio/,
        "its log goes to stderr, not into the protocol",
      );
    } finally {
      await stdio.close();
      // The SDK's StdioClientTransport.close races the child's exit against a 2 s timer it never clears
      // (client/stdio.js): outlive it, or the op sanitizer counts the SDK's timer as this test's leak.
      await new Promise((resolve) => setTimeout(resolve, 2_100));
      await http.close();
      await handler.close();
      await server.shutdown();
    }
  },
);
