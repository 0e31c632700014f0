/**
 * Chat over the UI message stream on PostgreSQL, through real HTTP
 * (`Deno.serve` on port 0) and the `ai` package's own client
 * (`DefaultChatTransport`, `readUIMessageStream`, the chunk schema): a
 * conversation's turns with a tool call, a retried POST that is one message,
 * a resume by chunk index after the handler's server was closed and started
 * again, and a worker (a real `deno run` process) SIGKILLed in the middle of
 * an answer: a `reset-step`, and the answer shown once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import {
  asSchema,
  DefaultChatTransport,
  readUIMessageStream,
  type UIMessage,
  type UIMessageChunk,
  uiMessageChunkSchema,
} from "npm:ai@7.0.173";
import { defineAgent } from "../runtime/agent/agent.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import { MockModel } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { chatHandler, type UIChunk } from "../runtime/chat/chat.ts";
import { spawnWorker, type WorkerChild } from "../harness/pg.ts";
import { pgTest } from "./_pg.ts";

const lookup = defineTool({
  name: "lookup",
  description: "Looks up how a service stands.",
  args: z.strictObject({ service: z.string() }),
  run: (args) => Promise.resolve({ result: { service: args.service, state: "green" } }),
});

/** The handler served on a free port: its URL, and how to close both. */
function serve(handler: ReturnType<typeof chatHandler>) {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req) => await handler(req) ?? new Response("not found", { status: 404 }),
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    close: async () => {
      await handler.close();
      await server.shutdown();
    },
  };
}

function userMessage(id: string, text: string): UIMessage {
  return { id, role: "user", parts: [{ type: "text", text }] };
}

/** The raw SSE of a response: its chunks, each checked against the `ai` package's schema, and whether it ended `[DONE]`. */
async function rawChunks(res: Response): Promise<{ chunks: UIChunk[]; done: boolean; bytes: number }> {
  assert.equal(res.headers.get("x-vercel-ai-ui-message-stream"), "v1");
  assert.equal(res.headers.get("content-type"), "text/event-stream");
  const text = await res.text();
  const events = text.split("\n\n").filter((e) => e !== "");
  const done = events.at(-1) === "data: [DONE]";
  const chunks: UIChunk[] = [];
  for (const e of events.slice(0, done ? -1 : undefined)) {
    assert.ok(e.startsWith("data: "), e);
    const chunk = JSON.parse(e.slice(6));
    const v = await asSchema(uiMessageChunkSchema).validate!(chunk);
    assert.ok(v.success, `${e}: ${!v.success && v.error}`);
    chunks.push(chunk);
  }
  return { chunks, done, bytes: new TextEncoder().encode(text).length };
}

/** The message a stream of chunks assembles to (the `ai` package's own reader). */
async function assemble(stream: ReadableStream<UIMessageChunk>): Promise<UIMessage> {
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, terminateOnError: true })) last = m;
  assert.ok(last, "a message");
  return last;
}

function textOf(m: UIMessage): string[] {
  return m.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);
}

function post(url: string, chatId: string, messages: UIMessage[]): Promise<Response> {
  return fetch(`${url}/api/chat`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ id: chatId, messages, trigger: "submit-message" }),
  });
}

const ANSWERS = {
  goal: "The build is green: every check on main passed.",
  second: "The deploy is green too: the last release went out cleanly, and nothing waits for a person now.",
};

pgTest(
  "a chat through DefaultChatTransport: chunks the ai package accepts, a retried POST is one message, a resume by index after a restart",
  async (pg) => {
    const model = await MockModel.open({ stream: { chunks: 12, chunkMs: 5 } });
    model.setScript({
      agent: "support",
      steps: [
        { answer: ANSWERS.goal },
        { tool: "lookup", args: { service: "deploy" } },
        { answer: ANSWERS.second },
      ],
    });
    const mocks = await serveMocks({ model });
    const support = defineAgent({
      name: "support",
      instructions: "Look up what is asked about, then answer.",
      tools: [lookup],
      conversation: { idleMs: 600_000 },
      model: new OpenAIPlanner({ url: mocks.modelUrl, model: "mock" }),
    });
    const client = new Client(pg.store, new SystemClock());
    const worker = await client.startWorker([support], { pollMs: 20, streamDeltas: true });
    let served = serve(chatHandler({ client, agent: support }));
    try {
      const transport = new DefaultChatTransport({ api: `${served.url}/api/chat` });
      // Turn 0: a new chat starts its run; the transport's parsed chunks assemble the journaled answer.
      const first = [userMessage("m0", "Is the build green?")];
      const stream = await transport.sendMessages({
        chatId: "chat-a",
        messages: first,
        trigger: "submit-message",
        messageId: undefined,
        abortSignal: undefined,
      });
      const answer0 = await assemble(stream);
      assert.deepEqual(textOf(answer0), [ANSWERS.goal]);
      assert.equal(answer0.id, "chat-a-answer-0");
      assert.equal((await client.get("chat-a"))?.output, ANSWERS.goal);

      // The same POST again (a retry): the same turn's chunks, still one message, no second model call.
      const again = await rawChunks(await post(served.url, "chat-a", first));
      assert.ok(again.done);
      assert.equal(again.chunks.at(-1)?.type, "finish");
      assert.equal((await client.get("chat-a"))?.conversation?.messages, 1);

      // Turn 1, raw: a tool call by its key, then the answer; the run id in a header.
      const res = await post(served.url, "chat-a", [...first, answer0, userMessage("m1", "And the deploy?")]);
      assert.equal(res.headers.get("x-run-id"), "chat-a");
      const turn1 = await rawChunks(res);
      const types = turn1.chunks.map((c) => c.type);
      assert.deepEqual(types.slice(0, 5), [
        "start",
        "start-step",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
      ]);
      const input = turn1.chunks[2] as { toolCallId: string; toolName: string };
      assert.deepEqual([input.toolCallId, input.toolName], ["chat-a:1", "lookup"]);
      assert.deepEqual(types.slice(-3), ["text-end", "finish-step", "finish"]);
      const retried = await rawChunks(
        await post(served.url, "chat-a", [...first, answer0, userMessage("m1", "And the deploy?")]),
      );
      assert.deepEqual(retried.chunks, turn1.chunks, "a retried POST is the same message's stream");
      const turns = await client.conversations.answers("chat-a");
      assert.deepEqual(turns.map((t) => [t.seq, t.messageId, t.answer]), [
        [0, null, ANSWERS.goal],
        [1, "m1", ANSWERS.second],
      ]);
      assert.equal(model.calls(), 3, "one model call per step, none for the retries");

      // Nothing streams now: the default transport's resume gets 204 (null).
      assert.equal(await transport.reconnectToStream({ chatId: "chat-a" }), null);

      // The handler's server closed and started again (a new process's handler: nothing in memory).
      await served.close();
      served = serve(chatHandler({ client, agent: support }));
      for (const n of [0, 4, turn1.chunks.length - 2]) {
        const resumed = await rawChunks(await fetch(`${served.url}/api/chat/chat-a/stream?startIndex=${n}`));
        assert.deepEqual(resumed.chunks, turn1.chunks.slice(n), `resumed from ${n}`);
      }
      const tail = await rawChunks(await fetch(`${served.url}/api/chat/chat-a/stream?startIndex=-3`));
      assert.deepEqual(tail.chunks, turn1.chunks.slice(-3));
      const bad = await fetch(`${served.url}/api/chat/chat-a/stream?startIndex=x`);
      assert.equal(bad.status, 400);
      assert.equal((await bad.json()).field, "startIndex");
      const badBody = await fetch(`${served.url}/api/chat`, {
        method: "POST",
        body: JSON.stringify({ id: 5 }),
      });
      assert.equal(badBody.status, 400);
      assert.deepEqual(await badBody.json().then((b) => [b.code, b.field]), ["CHAT_INVALID", "id"]);
    } finally {
      await served.close();
      await worker.stop();
      await mocks.close();
    }
  },
);

const MOD_TS = new URL("../mod.ts", import.meta.url).href;
const KILL_ANSWER =
  "Attempt {n} says: the build is green on main, the deploy went out cleanly, and nothing waits.";

pgTest(
  "a worker SIGKILLed mid-answer: the chat's stream shows a reset-step, then the answer once",
  async (pg) => {
    let first: WorkerChild | undefined;
    const model = await MockModel.open({
      stream: {
        chunks: 30,
        chunkMs: 20,
        onChunk: async (c) => {
          // The first worker dies by SIGKILL in the middle of its answer (call 1).
          if (c.n === 1 && c.index === 15 && first) {
            first.kill();
            await first.result;
            throw new Error("the worker is gone");
          }
        },
      },
    });
    const mocks = await serveMocks({ model });
    const dir = await Deno.makeTempDir({ prefix: "chat-kill-" });
    await Deno.writeTextFile(
      `${dir}/agent.ts`,
      `import { defineAgent } from "${MOD_TS}";
export default defineAgent({ name: "talker", instructions: "Answer.", tools: [], conversation: { idleMs: 600000 } });
`,
    );
    model.setScript({ agent: "talker", steps: [{ answer: KILL_ANSWER }] });
    const talker = defineAgent({
      name: "talker",
      instructions: "Answer.",
      tools: [],
      conversation: { idleMs: 600_000 },
    });
    const client = new Client(pg.store, new SystemClock());
    const served = serve(chatHandler({ client, agent: talker }));
    try {
      const transport = new DefaultChatTransport({ api: `${served.url}/api/chat` });
      const stream = await transport.sendMessages({
        chatId: "chat-k",
        messages: [userMessage("k0", "How do things stand?")],
        trigger: "submit-message",
        messageId: undefined,
        abortSignal: undefined,
      });
      const [forMessage, forChunks] = stream.tee();
      const chunks: UIMessageChunk[] = [];
      const collected = (async () => {
        for await (const c of forChunks) chunks.push(c);
      })();
      const message = assemble(forMessage);
      message.catch(() => {}); // awaited below; a failure before that is reported by what failed first
      const env = {
        DATABASE_URL: pg.url,
        AGENT: `${dir}/agent.ts`,
        RUN_ID: "chat-k",
        GOAL: "How do things stand?",
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock",
        STREAM_DELTAS: "1",
        LOG_FORMAT: "json",
      };
      first = spawnWorker(env);
      const killed = await first.result;
      assert.equal(killed.signal, "SIGKILL", killed.lines.join("\n"));
      // Another worker takes the run over (a new epoch) and asks again: call 2.
      const second = spawnWorker(env);
      const shown = await message;
      await collected;
      const ended = await second.result;
      assert.equal(ended.code, 4, "a conversation's run command exits 4 once it waits for its next message");
      const journaled = (await client.get("chat-k"))?.output;
      assert.equal(journaled, KILL_ANSWER.replace("{n}", "2"));
      const types = chunks.map((c) => c.type);
      assert.equal(types.filter((t) => t === "reset-step").length, 1, types.join(","));
      const beforeReset = chunks.slice(0, types.indexOf("reset-step"))
        .filter((c) => c.type === "text-delta").map((c) => (c as { delta: string }).delta).join("");
      assert.ok(
        beforeReset.length > 0 && KILL_ANSWER.replace("{n}", "1").startsWith(beforeReset),
        beforeReset,
      );
      assert.deepEqual(textOf(shown), [journaled], "the answer shown once, the first attempt's text dropped");
    } finally {
      first?.kill();
      await served.close();
      await mocks.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
