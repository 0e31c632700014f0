/**
 * Issue 37's first proof as one test: the `ai` package's own
 * `DefaultChatTransport` and `readUIMessageStream` drive a chat of three
 * messages with tool calls against `deno run` worker processes on
 * PostgreSQL, through the chat handler served by `Deno.serve` on port 0.
 * In the middle of the second answer the worker is SIGKILLed and the
 * handler's server is closed and started again (a new handler, nothing in
 * memory); the transport's resume (`reconnectToStream`) reassembles a
 * message whose text is the journaled answer, shown once, after a second
 * worker took the run over. A POST retried with the same message id is one
 * message (counted in the database). The third message's tool needs a
 * person: its `tool-approval-request` is answered through the protocol (the
 * assistant message `addToolApprovalResponse` produces, POSTed back) and
 * the run goes on to its answer.
 *
 * @module
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import {
  AbstractChat,
  asSchema,
  type ChatState,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  type UIMessage,
  type UIMessageChunk,
  uiMessageChunkSchema,
} from "npm:ai@7.0.173";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { MockModel } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { chatHandler } from "../runtime/chat/chat.ts";
import { spawnWorker, type WorkerChild } from "../harness/pg.ts";
import { pgTest } from "./_pg.ts";
import proof from "./_chat_proof_agent.ts";

const AGENT_TS = new URL("./_chat_proof_agent.ts", import.meta.url).pathname;
const CHAT = "chat-proof";
const ANSWERS = {
  build: "The build is green: every check on main passed.",
  deploy: "Attempt {n} says: the deploy is green, the last release went out cleanly, and nothing waits now.",
  ship: "Release v1.4 is shipped, with your approval.",
};
/** The page's one URL; the fetch behind it goes to whichever handler's server is up. */
const API = "http://chat.test/api/chat";

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

function textOf(m: UIMessage): string[] {
  return m.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);
}

/** The text the chunks carry, deltas joined in order. */
function deltas(chunks: UIMessageChunk[]): string {
  return chunks.filter((c) => c.type === "text-delta").map((c) => (c as { delta: string }).delta).join("");
}

/** A stream's chunks and the message the `ai` package's reader assembles from them (undefined: no chunk). */
async function follow(
  stream: ReadableStream<UIMessageChunk>,
  onMessage?: (m: UIMessage) => void,
): Promise<{ chunks: UIMessageChunk[]; message?: UIMessage; error?: unknown }> {
  const [forMessage, forChunks] = stream.tee();
  const chunks: UIMessageChunk[] = [];
  const collected = (async () => {
    for await (const c of forChunks) chunks.push(c);
  })().catch(() => {});
  let message: UIMessage | undefined;
  let error: unknown;
  try {
    for await (const m of readUIMessageStream({ stream: forMessage, terminateOnError: true })) {
      message = m;
      onMessage?.(structuredClone(m));
    }
  } catch (err) {
    error = err; // a response cut when its server closed
  }
  await collected;
  for (const c of chunks) {
    const v = await asSchema(uiMessageChunkSchema).validate!(c);
    assert.ok(v.success, `${JSON.stringify(c)}: ${!v.success && v.error}`);
  }
  return { chunks, message, error };
}

/** The chat state `useChat` keeps in React, kept here in a plain object. */
function chatState(messages: UIMessage[]): ChatState<UIMessage> {
  return {
    status: "ready",
    error: undefined,
    messages,
    pushMessage(m) {
      this.messages = [...this.messages, m];
    },
    popMessage() {
      this.messages = this.messages.slice(0, -1);
    },
    replaceMessage(i, m) {
      this.messages = this.messages.map((x, j) => j === i ? m : x);
    },
    snapshot: (thing) => structuredClone(thing),
  };
}

/** The `ai` package's chat (what `useChat` wraps), on a plain state. */
class PlainChat extends AbstractChat<UIMessage> {}

/** Waits until `chat` is ready again and `done` holds, looking every 20 ms (the test's own timeout bounds it). */
async function settled(chat: PlainChat, done: (c: PlainChat) => boolean, what: string): Promise<void> {
  const started = Date.now();
  while (!(chat.status === "ready" && done(chat)) && chat.status !== "error") {
    if (Date.now() - started > 15_000) {
      throw new Error(`${what}: still ${chat.status}; last message ${JSON.stringify(chat.lastMessage)}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.notEqual(chat.status, "error", `${what}: ${chat.error}`);
}

/** A copy of `stream`'s chunks into `seen`, as they pass. */
function tap(stream: ReadableStream<UIMessageChunk>, seen: UIMessageChunk[]): ReadableStream<UIMessageChunk> {
  return stream.pipeThrough(
    new TransformStream<UIMessageChunk, UIMessageChunk>({
      transform(c, ctl) {
        seen.push(c);
        ctl.enqueue(c);
      },
    }),
  );
}

/** The default transport, keeping what each response and each resume streamed. */
class WatchedTransport extends DefaultChatTransport<UIMessage> {
  /** The chunks of each response to a POST, as they came. */
  readonly sent: UIMessageChunk[][] = [];
  /** The chunks of each resume, as they came. */
  readonly resumed: UIMessageChunk[][] = [];
  #answered!: () => void;
  /** Settles once a resume was answered with a stream. */
  readonly reconnected = new Promise<void>((resolve) => this.#answered = resolve);

  override async sendMessages(
    opts: Parameters<DefaultChatTransport<UIMessage>["sendMessages"]>[0],
  ): Promise<ReadableStream<UIMessageChunk>> {
    const seen: UIMessageChunk[] = [];
    this.sent.push(seen);
    return tap(await super.sendMessages(opts), seen);
  }

  override async reconnectToStream(
    opts: Parameters<DefaultChatTransport<UIMessage>["reconnectToStream"]>[0],
  ): Promise<ReadableStream<UIMessageChunk> | null> {
    const stream = await super.reconnectToStream(opts);
    if (!stream) return stream;
    const seen: UIMessageChunk[] = [];
    this.resumed.push(seen);
    this.#answered();
    return tap(stream, seen);
  }
}

/** The tool part of `m` for `tool`. */
function toolPart(m: UIMessage | undefined, tool: string) {
  return m?.parts.find((p) => p.type === `tool-${tool}`) as
    | {
      type: string;
      toolCallId: string;
      state: string;
      input?: unknown;
      output?: unknown;
      approval?: unknown;
    }
    | undefined;
}

pgTest(
  "issue 37, proof 1: three messages with tool calls, a SIGKILL and a handler restart mid-answer, a resume shown once, a retried POST, an approval through the protocol",
  async (pg) => {
    let doomed: WorkerChild | undefined = undefined; // set once the mock model is up (its hook kills it)
    let killed!: () => void;
    const killedNow = new Promise<void>((resolve) => killed = resolve);
    const model = await MockModel.open({
      stream: {
        chunks: 30,
        chunkMs: 15,
        onChunk: async (c) => {
          // Call 4 is the second message's answer: its worker dies by SIGKILL half-way through.
          if (c.n === 4 && c.index === 15 && doomed) {
            doomed.kill();
            await doomed.result;
            killed();
            throw new Error("the worker is gone");
          }
        },
      },
    });
    model.setScript({
      agent: "proof",
      steps: [
        { tool: "lookup", args: { service: "build" } },
        { answer: ANSWERS.build },
        { tool: "lookup", args: { service: "deploy" } },
        { answer: ANSWERS.deploy },
        { tool: "ship", args: { release: "v1.4" } },
        { answer: ANSWERS.ship },
      ],
    });
    const mocks = await serveMocks({ model });
    const env = {
      DATABASE_URL: pg.url,
      AGENT: AGENT_TS,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock",
      STREAM_DELTAS: "1",
      LOG_FORMAT: "json",
      POLL_S: "0.1",
      HEARTBEAT_S: "0.5",
      LEASE_S: "2",
    };
    const client = new Client(pg.store, new SystemClock());
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    let served = serve(chatHandler({ client, agent: proof }));
    const transport = new WatchedTransport({
      api: API,
      fetch: (input, init) => fetch(String(input).replace("http://chat.test", served.url), init),
    });
    const send = async (messages: UIMessage[], messageId?: string) =>
      await transport.sendMessages({
        chatId: CHAT,
        messages,
        trigger: "submit-message",
        messageId,
        abortSignal: undefined,
      });
    doomed = spawnWorker(env, "worker");
    let second: WorkerChild | undefined;
    try {
      // Message 1: a tool call, then the answer.
      const m0 = userMessage("m0", "Is the build green?");
      const turn0 = await follow(await send([m0]));
      assert.deepEqual(textOf(turn0.message!), [ANSWERS.build]);
      assert.equal(toolPart(turn0.message, "lookup")?.state, "output-available");

      // Message 2: the worker is SIGKILLed half-way through its answer, then the handler's server closes.
      const m1 = userMessage("m1", "And the deploy?");
      const history1 = [m0, turn0.message!, m1];
      const live = follow(await send(history1));
      await killedNow;
      await served.close();
      const cut = await live;
      assert.ok(!cut.chunks.some((c) => c.type === "finish"), "the live stream was cut before its end");
      const seenLive = deltas(cut.chunks);
      assert.ok(
        seenLive.length > 0 && ANSWERS.deploy.replace("{n}", "4").startsWith(seenLive),
        `part of the killed attempt's text was shown live: ${JSON.stringify(seenLive)}`,
      );

      // A new handler on a new server (the same page URL); the chat resumes (the transport's
      // reconnectToStream, as useChat({ resume: true }) does), and a second worker takes the run over.
      served = serve(chatHandler({ client, agent: proof }));
      const chat = new PlainChat({
        id: CHAT,
        transport,
        state: chatState([...history1, cut.message!]),
        sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
      });
      const resuming = chat.resumeStream();
      await transport.reconnected;
      second = spawnWorker(env, "worker");
      await resuming;
      await settled(chat, (c) => c.lastMessage?.role === "assistant", "the resume");
      const journaled = (await client.conversations.answers(CHAT)).find((t) => t.seq === 1)?.answer;
      assert.equal(journaled, ANSWERS.deploy.replace("{n}", "5"), "the answer of call 5, after the takeover");
      assert.equal(chat.messages.length, 4, "the resumed answer replaced the cut one");
      const answer1 = chat.messages[3];
      assert.equal(answer1.id, `${CHAT}-answer-1`);
      assert.deepEqual(
        textOf(answer1),
        [journaled],
        "the resumed message is the journaled answer, shown once",
      );
      // The resume is the chunk log: what the first server sent (the cut chunks first), a reset-step where
      // this handler took the turn over from the log, then the journaled answer, each character of it once.
      const resumed = transport.resumed[0];
      assert.deepEqual(resumed.slice(0, cut.chunks.length), cut.chunks, "the first server's chunks, as sent");
      const reset = resumed.findLastIndex((c) => c.type === "reset-step");
      assert.ok(reset >= cut.chunks.length, "the killed attempt's text is dropped by a reset-step");
      assert.equal(deltas(resumed.slice(reset)), journaled, "each character of it sent once after the reset");
      assert.deepEqual(
        [toolPart(answer1, "lookup")?.state, toolPart(answer1, "lookup")?.output],
        ["output-available", { service: "deploy", state: "green" }],
      );
      const run = await client.get(CHAT);
      assert.ok((run?.epoch ?? 0) >= 2, `taken over: epoch ${run?.epoch}`);

      // The same POST again (the same message id): the same turn's stream, and still one message.
      const retried = await follow(await send(history1));
      assert.deepEqual(textOf(retried.message!), [journaled]);
      const counted =
        await sql`select count(*)::int as n, count(*) filter (where message_id = 'm1')::int as m1
        from messages where run_id = ${CHAT}`;
      assert.deepEqual([counted[0].n, counted[0].m1], [2, 1], "a retried POST is one message");

      // Message 3: its tool needs a person. The approval request comes as a chunk; the chat's
      // addToolApprovalResponse answers it (sendAutomaticallyWhen POSTs it), and the run goes on to its answer.
      const posted = transport.sent.length;
      const sending = chat.sendMessage({ text: "Ship v1.4." });
      await settled(
        chat,
        (c) => toolPart(c.lastMessage, "ship")?.state === "approval-requested",
        "the approval request",
      );
      const asked = toolPart(chat.lastMessage, "ship") as { approval: { id: string } };
      assert.equal(asked.approval.id, `${CHAT}:4`, "the approval's id is the call's key");
      await chat.addToolApprovalResponse({ id: asked.approval.id, approved: true, reason: "ship it" });
      await sending;
      await settled(chat, (c) => textOf(c.lastMessage!).length > 0, "the answer after the approval");
      const answer2 = chat.lastMessage!;
      assert.deepEqual(textOf(answer2), [ANSWERS.ship]);
      assert.deepEqual(
        [toolPart(answer2, "ship")?.state, toolPart(answer2, "ship")?.output],
        ["output-available", { release: "v1.4", shipped: true }],
      );
      assert.equal(chat.messages.length, 6);
      // Two responses: the first stops at the request (as the SDK's own server does), the second, the POST
      // carrying the answer, continues the same message after it: nothing in it twice.
      const [asking, continuing] = transport.sent.slice(posted);
      assert.equal(transport.sent.length, posted + 2, "one POST for the message, one for the approval");
      assert.deepEqual(asking.slice(-3).map((c) => c.type), [
        "tool-approval-request",
        "finish-step",
        "finish",
      ]);
      assert.deepEqual(asking.at(-1), { type: "finish", finishReason: "tool-calls" });
      assert.deepEqual(continuing[0], { type: "start", messageId: `${CHAT}-answer-2` });
      assert.ok(
        !continuing.some((c) => c.type === "tool-input-available" || c.type === "tool-approval-request"),
      );
      assert.equal(deltas(continuing), ANSWERS.ship);
      if (Deno.env.get("SHOW_CHUNKS")) {
        for (
          const [name, cs] of [["resumed", transport.resumed[0]], ["asking", asking], [
            "continuing",
            continuing,
          ]]
        ) {
          console.log(`${name}:\n${(cs as UIMessageChunk[]).map((c) => JSON.stringify(c)).join("\n")}`);
        }
      }
      const approvals = await sql`select status, decided_by from approvals where run_id = ${CHAT}`;
      assert.deepEqual(approvals.map((a) => [a.status, a.decided_by]), [["approved", "chat"]]);

      const turns = await client.conversations.answers(CHAT);
      assert.deepEqual(turns.map((t) => [t.seq, t.messageId, t.answer]), [
        [0, null, ANSWERS.build],
        [1, "m1", journaled],
        [2, chat.messages[4].id, ANSWERS.ship],
      ]);
      assert.equal(model.calls(), 7, "two calls a message, and the killed answer asked once more");
    } finally {
      doomed.kill();
      if (second) {
        Deno.kill(second.pid, "SIGTERM");
        const ended = await second.result;
        assert.equal(ended.code, 0, ended.lines.slice(-20).join("\n"));
      }
      await doomed.result;
      await served.close();
      await sql.end();
      await mocks.close();
    }
  },
);
