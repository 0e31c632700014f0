import assert from "node:assert/strict";
import { z } from "zod";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/server/mcp"
import { McpServer } from "npm:@modelcontextprotocol/sdk@1.32.2/server/mcp.js";
import { Server } from "npm:@modelcontextprotocol/sdk@1.32.2/server";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/types"
import {
  CallToolRequestSchema,
  ErrorCode,
  ListToolsRequestSchema,
  McpError,
} from "npm:@modelcontextprotocol/sdk@1.32.2/types.js";
// @ts-types="npm:@modelcontextprotocol/sdk@1.32.2/inMemory"
import { InMemoryTransport } from "npm:@modelcontextprotocol/sdk@1.32.2/inMemory.js";
import { McpTestServer, serveMcpTestServers } from "../../mock/mcp_servers.ts";
import { defineAgent } from "../agent/agent.ts";
import type { Client } from "../client/client.ts";
import { SystemClock } from "../base/clock.ts";
import { DEFAULT_RETRY } from "../run/deps.ts";
import { hasCode } from "../base/errors.ts";
import { arraySink, Logger } from "../base/log.ts";
import { IDEMPOTENCY_KEY_META, type McpTools, mcpTools } from "./mcp.ts";
import type { Tool } from "../agent/tools.ts";
import { scripted } from "../testdata/scripted.ts";
import type { PlannerDecision } from "../model/transcript.ts";
import { testClient } from "../../tests/_pglite.ts";

// MCP tools driven by a worker in this process (the embedded database in memory, a scripted model),
// against the test servers in-process or over HTTP on 127.0.0.1.

const client: Client = await testClient();

interface Logged {
  event: string;
  [field: string]: unknown;
}

/** Runs `runId` of an agent with `tools` and `answers` to its end; returns how it ended, its rows, its log. */
async function runToEnd(
  runId: string,
  tools: McpTools | ((ctx: Parameters<McpTools>[0]) => Promise<Tool[]>),
  answers: PlannerDecision[],
  opts: {
    backoffMs?: number;
    horizonMs?: number;
    whileRunning?: (events: () => Logged[]) => Promise<void>;
  } = {},
) {
  const lines: string[] = [];
  const log = new Logger({ clock: new SystemClock(), sink: arraySink(lines), format: "json" });
  const events = () => lines.map((l) => JSON.parse(l) as Logged);
  const { model, asked } = scripted(answers);
  const agent = defineAgent({ name: `mcp-${runId}`, tools, model });
  const backoff = opts.backoffMs ?? 2;
  const worker = await client.startWorker([agent], {
    pollMs: 10,
    log,
    retry: { ...DEFAULT_RETRY, backoffBaseMs: backoff, backoffMaxMs: backoff, horizonMs: opts.horizonMs },
  });
  try {
    await client.start(agent, { runId, input: "Do as the operator asks." });
    const running = opts.whileRunning?.(events);
    const end = await client.wait(runId, { timeoutMs: 30_000, pollMs: 10 });
    await running;
    return { end, record: await client.reads.inspect(runId), events, asked };
  } finally {
    await worker.stop();
  }
}

const call = (name: string, args: Record<string, unknown>) => ({ name, args });

Deno.test("mcpTools checks its options up front and names every problem at once", () => {
  const bad = {
    command: "",
    url: "ftp://example.test",
    prefix: "no spaces",
    timeoutMs: 0,
    trustHints: "yes",
    safeToResend: "create_ticket",
    maxResultBytes: 128 * 1024 * 1024,
  } as unknown as Parameters<typeof mcpTools>[0];
  assert.throws(() => mcpTools(bad), (err: Error) => {
    assert.ok(hasCode(err, "MCP_INVALID"), err.message);
    for (
      const part of [
        "give exactly one of 'command' (stdio), 'url' (streamable HTTP) or 'transport'",
        "'command' must be a non-empty string",
        "'url' must be an http or https URL",
        "'prefix' must be up to 63 letters",
        "'safeToResend' must be an array of tool names or a function of a tool",
        "'trustHints' must be true or false: current value is \"yes\"",
        "'timeoutMs' must be a positive integer: current value is 0",
        "'maxResultBytes' must be an integer from 1 to 67108864 (67,108,864 bytes (64.0 MiB), the most the " +
        "store keeps in one value): current value is 134217728",
      ]
    ) assert.ok(err.message.includes(part), `${part}\nin: ${err.message}`);
    return true;
  });
});

Deno.test("each tool keeps its server's JSON Schema; arguments that do not fit are refused before any intent, never sent", async () => {
  const keyed = await McpTestServer.open("keyed");
  const tools = mcpTools({ transport: () => keyed.inMemory(), safeToResend: ["create_ticket"] });
  try {
    const { end, record, asked } = await runToEnd("schema-1", tools, [
      { kind: "tool_calls", calls: [call("create_ticket", { title: 7 })] },
      { kind: "tool_calls", calls: [call("create_ticket", { title: "Printer jam" })] },
      { kind: "done", text: "Opened." },
    ]);
    assert.equal(end.status, "done");
    const parameters = asked[0].tools.find((t) => t.name === "create_ticket")?.parameters;
    assert.deepEqual(parameters, {
      type: "object",
      properties: { title: { type: "string", minLength: 1, maxLength: 200 } },
      required: ["title"],
    });
    const rejected = record.journal[0].rejections ?? [];
    assert.equal(rejected[0]?.code, "BAD_ARGS");
    assert.match(rejected[0].message, /title must be string \(the server's inputSchema\)/);
    assert.equal(record.effects.length, 1, "one intent row: the refused call has none");
    // The call carried its key in _meta, so the server counts it under the key.
    assert.deepEqual(keyed.counts().byKey, { "schema-1:0": 1 });
    assert.deepEqual(keyed.counts().calls, { create_ticket: 1 });
  } finally {
    await tools.close();
  }
});

Deno.test("an isError answer is the tool's answer: the call fails for good, is not sent again, and the model is shown the server's words", async () => {
  const mail = await McpTestServer.open("undeclared");
  const tools = mcpTools({ transport: () => mail.inMemory() });
  try {
    const { end, record, asked, events } = await runToEnd("iserror-1", tools, [
      { kind: "tool_calls", calls: [call("send_email", { to: "nobody", subject: "Hi" })] },
      { kind: "done", text: "The address is wrong." },
    ]);
    assert.equal(end.status, "done");
    const [e] = record.effects;
    assert.deepEqual([e.status, e.attempts], ["failed", 1]);
    assert.match(
      e.error ?? "",
      /^send_email \(MCP server mcp-test-undeclared\) answered with an error: no mailbox nobody/,
    );
    assert.deepEqual(events().filter((l) => l.event === "tool-failed").map((l) => l.code), [
      "MCP_TOOL_ERROR",
    ]);
    const shown = asked[1].transcript.find((m) => m.role === "tool");
    assert.ok(shown?.role === "tool" && shown.failed && /no mailbox nobody: nothing sent/.test(shown.error));
    assert.deepEqual(mail.counts().byKey, { "iserror-1:0": 1 });
    assert.equal(mail.counts().actions, 0);
  } finally {
    await tools.close();
  }
});

Deno.test("a server's hints decide nothing unless the agent trusts them; safeToResend names a tool, or tests each", async () => {
  const forecast = await McpTestServer.open("readonly");
  const ctx = {
    env: {},
    dataDir: ".",
    embedded: true,
    log: new Logger({ clock: new SystemClock(), sink: () => {} }),
  };
  const cases: [string, Parameters<typeof mcpTools>[0], boolean][] = [
    ["hints untrusted (the default)", { transport: () => forecast.inMemory() }, false],
    ["hints trusted", { transport: () => forecast.inMemory(), trustHints: true }, true],
    ["named", { transport: () => forecast.inMemory(), safeToResend: ["get_forecast"] }, true],
    [
      "a test",
      { transport: () => forecast.inMemory(), safeToResend: (t) => t.name.startsWith("get_") },
      true,
    ],
  ];
  for (const [what, opts, safe] of cases) {
    const tools = mcpTools(opts);
    try {
      const [tool] = await tools(ctx);
      assert.equal(tool.idempotent, safe, what);
      // A tool not safe to re-send is asked before it is flagged whether its request ever left.
      assert.equal(tool.reconcile !== undefined, !safe, what);
    } finally {
      await tools.close();
    }
  }
});

Deno.test("a hanging call ends at its timeout as an unknown outcome: flagged when undeclared, re-sent until its retry horizon when declared safe", async () => {
  const slow = await McpTestServer.open("hanging");
  const flagged = mcpTools({ transport: () => slow.inMemory(), timeoutMs: 100 });
  const safe = mcpTools({
    transport: () => slow.inMemory(),
    timeoutMs: 100,
    safeToResend: ["export_report"],
    maxAttempts: 2,
  });
  try {
    const answers: PlannerDecision[] = [{ kind: "tool_calls", calls: [call("export_report", {})] }, {
      kind: "done",
      text: "Exported.",
    }];
    const one = await runToEnd("hang-flag", flagged, answers);
    assert.equal(one.end.status, "blocked");
    const [e] = one.record.effects;
    assert.equal(e.status, "flagged");
    assert.match(
      e.error ?? "",
      /unknown outcome \(export_report did not answer within 100ms\) and export_report takes no idempotency key/,
    );
    assert.equal(slow.counts().byKey["hang-flag:0"], 1, "sent once");

    // Each request times out after 100 ms; with a horizon of 50 ms from the first failure, the second
    // failure is past it.
    const two = await runToEnd("hang-safe", safe, answers, { horizonMs: 50 });
    assert.equal(two.end.status, "failed");
    assert.match(
      two.end.error ?? "",
      /^TOOL_GAVE_UP: Tool call hang-safe:0 \(export_report\) failed 2 times over \d+ m?s \(the retry horizon is 50 ms/,
    );
    assert.equal(slow.counts().byKey["hang-safe:0"], 2, "sent again under its key, until the horizon");
  } finally {
    await flagged.close();
    await safe.close();
    slow.releaseHung();
  }
});

Deno.test("a server that is down fails the call as a transient error, not the worker: a request that never left is sent again when it is back, even for a tool that declares nothing", async () => {
  const first = await serveMcpTestServers();
  const port = new URL(first.url).port;
  const tools = mcpTools({ url: first.endpoint("undeclared"), maxAttempts: 20 });
  let second: Awaited<ReturnType<typeof serveMcpTestServers>> | undefined;
  try {
    // Listed while the server is up (the process starts), then the server goes away.
    const listed = async (ctx: Parameters<McpTools>[0]) => {
      const built = await tools(ctx);
      await first.close();
      return built;
    };
    const { end, record, events } = await runToEnd("down-1", listed, [
      { kind: "tool_calls", calls: [call("send_email", { to: "ada@example.test", subject: "Back?" })] },
      { kind: "done", text: "Sent." },
    ], {
      backoffMs: 100,
      // Back once a call has found it down (its failure logged: the intent alone is written before the send).
      whileRunning: async (events) => {
        for (let i = 0; i < 1_000 && !second; i++) {
          await new Promise((r) => setTimeout(r, 10));
          if (events().some((l) => l.event === "retrying")) {
            second = await serveMcpTestServers({ port: Number(port) });
          }
        }
      },
    });
    assert.equal(end.status, "done", JSON.stringify(events().filter((l) => l.level !== "info")));
    const retried = events().filter((l) => l.event === "retrying");
    assert.ok(retried.length >= 1);
    assert.ok(retried.every((l) => l.code === "MCP_UNREACHABLE"), JSON.stringify(retried));
    assert.match(String(retried[0].error), /could not be reached .*; the request was not sent/);
    assert.ok(events().some((l) => l.event === "reconcile-answered" && l.answer === "not_happened"));
    assert.equal(events().filter((l) => l.event === "flagged").length, 0);
    assert.equal(record.effects[0].status, "confirmed");
    assert.equal(second?.servers.undeclared.counts().byKey["down-1:0"], 1, "sent once it was back, once");
  } finally {
    await tools.close();
    await first.close();
    await second?.close();
  }
});

Deno.test("a server that cannot be listed when the process starts stops it with MCP_UNREACHABLE, saying what to do", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const tools = mcpTools({ url: `http://127.0.0.1:${port}/mcp`, connectTimeoutMs: 500 });
  const log = new Logger({ clock: new SystemClock(), sink: () => {} });
  await assert.rejects(tools({ env: {}, dataDir: ".", embedded: true, log }), (err: Error) => {
    assert.ok(hasCode(err, "MCP_UNREACHABLE"), err.message);
    assert.match(
      err.message,
      new RegExp(`^Cannot list the tools of MCP server http://127.0.0.1:${port}/mcp: `),
    );
    assert.match(err.message, /start the server \(or fix its url\), then start this process again$/);
    return true;
  });
});

Deno.test("tool names: a prefix goes first, characters a model's tool name may not hold become '_', and two that meet are refused", async () => {
  const server = () => {
    const s = new McpServer({ name: "files", version: "1.0.0" });
    s.registerTool("files.read", { description: "Read a file.", inputSchema: { path: z.string() } }, () => ({
      content: [{ type: "text", text: "hello" }],
    }));
    s.registerTool("files_read", { description: "Also read a file." }, () => ({ content: [] }));
    const [c, sv] = InMemoryTransport.createLinkedPair();
    void s.connect(sv);
    return c;
  };
  const log = new Logger({ clock: new SystemClock(), sink: () => {} });
  const ctx = { env: {}, dataDir: ".", embedded: true, log };
  const one = mcpTools({ transport: server, prefix: "fs_", include: ["files.read"] });
  try {
    const [tool] = await one(ctx);
    assert.equal(tool.name, "fs_files_read");
    const answer = await tool.run({ path: "a" }, {
      idempotencyKey: "r:0",
      runId: "r",
      seq: 0,
      attempt: 1,
      signal: new AbortController().signal,
      traceHeaders: () => ({}),
    });
    assert.deepEqual(answer, { result: "hello", remote: "created" });
  } finally {
    await one.close();
  }
  const both = mcpTools({ transport: server });
  await assert.rejects(both(ctx), (err: Error) => {
    assert.ok(hasCode(err, "MCP_INVALID"), err.message);
    assert.match(err.message, /"files.read" and "files_read" both become the agent's tool files_read/);
    return true;
  });
  await both.close();
});

Deno.test("a result its server's own outputSchema refuses is what the server did: journaled as it came, not a failure", async () => {
  const server = () => {
    const s = new Server({ name: "loose", version: "1.0.0" }, { capabilities: { tools: {} } });
    s.setRequestHandler(ListToolsRequestSchema, () => ({
      tools: [{
        name: "make_thing",
        inputSchema: { type: "object" as const },
        outputSchema: { type: "object" as const, properties: { id: { type: "string" } }, required: ["id"] },
      }],
    }));
    s.setRequestHandler(CallToolRequestSchema, () => ({ content: [], structuredContent: { id: 42 } }));
    const [c, sv] = InMemoryTransport.createLinkedPair();
    void s.connect(sv);
    return c;
  };
  const tools = mcpTools({ transport: server });
  try {
    const { end, record } = await runToEnd("loose-1", tools, [
      { kind: "tool_calls", calls: [call("make_thing", {})] },
      { kind: "done", text: "Made." },
    ]);
    assert.equal(end.status, "done");
    assert.deepEqual([record.effects[0].status, record.effects[0].result], ["confirmed", { id: 42 }]);
  } finally {
    await tools.close();
  }
});

/** A server of one tool, `act`, whose call `answer` answers (each connection a server of its own). */
function oneToolServer(answer: (listed: Set<string>) => unknown): () => InMemoryTransport {
  const listed = new Set(["act"]);
  return () => {
    const s = new Server({ name: "one", version: "1.0.0" }, {
      capabilities: { tools: { listChanged: true } },
    });
    s.setRequestHandler(ListToolsRequestSchema, () => ({
      tools: [...listed].map((name) => ({ name, inputSchema: { type: "object" as const } })),
    }));
    s.setRequestHandler(CallToolRequestSchema, () => answer(listed) as never);
    const [c, sv] = InMemoryTransport.createLinkedPair();
    void s.connect(sv);
    return c;
  };
}

Deno.test("a JSON-RPC refusal's message says its code once, though the server's McpError already held it", async () => {
  const tools = mcpTools({
    transport: oneToolServer(() => {
      throw new McpError(ErrorCode.InvalidParams, "invalid params (but it acted)");
    }),
  });
  try {
    const { end, record } = await runToEnd("refused-1", tools, [
      { kind: "tool_calls", calls: [call("act", {})] },
      { kind: "done", text: "Refused." },
    ]);
    assert.equal(end.status, "done");
    assert.equal(
      record.effects[0].error,
      "act (MCP server one) refused the call: MCP error -32602: invalid params (but it acted)",
    );
  } finally {
    await tools.close();
  }
});

Deno.test("a call whose tool left the list as its server answered it with an error fails MCP_TOOL_VANISHED saying it was sent, with the server's words", async () => {
  const tools = mcpTools({
    transport: oneToolServer((listed) => {
      listed.delete("act");
      return { content: [{ type: "text", text: "act is retired" }], isError: true };
    }),
  });
  try {
    const { end, record, events } = await runToEnd("vanished-1", tools, [
      { kind: "tool_calls", calls: [call("act", {})] },
      { kind: "done", text: "Gone." },
    ]);
    assert.equal(end.status, "done");
    assert.deepEqual(events().filter((l) => l.event === "tool-failed").map((l) => l.code), [
      "MCP_TOOL_VANISHED",
    ]);
    assert.equal(
      record.effects[0].error,
      "act (MCP server one) is no longer listed by its server (its tool list changed while this run was " +
        "running): the call was sent, and the server answered it with an error: act is retired",
    );
  } finally {
    await tools.close();
  }
});

Deno.test("over streamable HTTP, an answer past maxResultBytes fails its call for good (TOOL_RESULT_TOO_LARGE), sent once, the model told; a JSON body and an event stream alike", async (t) => {
  for (const sse of [false, true]) {
    await t.step(sse ? "an event stream" : "a JSON body", async () => {
      const http = await serveMcpTestServers({ sse });
      const tools = mcpTools({
        url: http.endpoint("large"),
        safeToResend: ["export_logs"],
        maxResultBytes: 100_000,
      });
      const runId = `http-large-${sse ? "sse" : "json"}`;
      try {
        const { end, record, events, asked } = await runToEnd(runId, tools, [
          { kind: "tool_calls", calls: [call("export_logs", { bytes: 99_000 })] },
          { kind: "tool_calls", calls: [call("export_logs", { bytes: 300_000 })] },
          { kind: "tool_calls", calls: [call("count_logs", {})] },
          { kind: "done", text: "Too much to export." },
        ]);
        assert.equal(end.status, "done", JSON.stringify(end));
        const [within, past, after] = record.effects;
        assert.deepEqual([within.status, String(within.result).length], ["confirmed", 99_000]);
        assert.deepEqual([past.status, past.attempts], ["failed", 1]);
        assert.match(
          past.error ?? "",
          new RegExp(
            `^export_logs \\(MCP server mcp-test-large\\) answered with ${
              sse ? "300,\\d{3} bytes" : "more than 100,000 bytes"
            }, over this server's limit of 100,000 bytes \\(maxResultBytes\\): the answer was not kept`,
          ),
        );
        assert.equal(after.status, "confirmed", "the next call goes out and is answered");
        assert.deepEqual(events().filter((l) => l.event === "tool-failed").map((l) => l.code), [
          "TOOL_RESULT_TOO_LARGE",
        ]);
        assert.equal(events().filter((l) => l.event === "retrying" || l.event === "flagged").length, 0);
        assert.equal(events().filter((l) => l.event === "mcp-too-large").length, 1);
        const shown = asked[2].transcript.filter((m) => m.role === "tool").at(-1);
        assert.ok(shown?.role === "tool" && shown.failed && /over this server's limit/.test(shown.error));
        assert.equal(http.servers.large.counts().byKey[`${runId}:1`], 1, "sent once, never again");
      } finally {
        await tools.close();
        await http.close();
      }
    });
  }
});

Deno.test("over stdio, a 12 MB answer of a tool not declared safe to re-send fails by the default limit, is not flagged, and the connection goes on", async () => {
  const dir = await Deno.makeTempDir({ prefix: "mcp-stdio-large-" });
  const tools = mcpTools({
    command: Deno.execPath(),
    args: [
      "run",
      "-A",
      "--config",
      new URL("../../deno.json", import.meta.url).pathname,
      new URL("../../mock/mcp_stdio_server.ts", import.meta.url).pathname,
      "large",
      `${dir}/large.json`,
    ],
    stderr: "ignore",
  });
  try {
    const { end, record, events } = await runToEnd("stdio-large-1", tools, [
      { kind: "tool_calls", calls: [call("export_logs", { bytes: 12_000_000 })] },
      { kind: "tool_calls", calls: [call("count_logs", {})] },
      { kind: "done", text: "Too large." },
    ]);
    assert.equal(end.status, "done", JSON.stringify(end));
    const [big, count] = record.effects;
    assert.deepEqual([big.status, big.attempts], ["failed", 1]);
    assert.match(big.error ?? "", /answered with 12,000,0\d\d bytes \(11.4 MiB\), over this server's limit/);
    assert.equal(count.status, "confirmed");
    assert.deepEqual(events().filter((l) => l.event === "tool-failed").map((l) => l.code), [
      "TOOL_RESULT_TOO_LARGE",
    ]);
    for (const name of ["flagged", "mcp-disconnected"]) {
      assert.deepEqual(events().filter((l) => l.event === name), []);
    }
    const counts = JSON.parse(await Deno.readTextFile(`${dir}/large.json`));
    assert.deepEqual(counts.byKey, { "stdio-large-1:0": 1, "stdio-large-1:1": 1 });
  } finally {
    await tools.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the idempotency key's _meta field is namespaced as MCP asks of a field a client adds", () => {
  // A prefix of dot-separated labels and a slash, then a name; 'mcp' and 'modelcontextprotocol' are reserved.
  assert.match(
    IDEMPOTENCY_KEY_META,
    /^([a-z][a-z0-9-]*[a-z0-9]\.)*[a-z][a-z0-9-]*[a-z0-9]\/[a-z0-9][a-z0-9._-]*[a-z0-9]$/,
  );
  assert.doesNotMatch(IDEMPOTENCY_KEY_META, /^(.*\.)?(mcp|modelcontextprotocol)\//);
});

globalThis.addEventListener("unload", () => void client.close());
