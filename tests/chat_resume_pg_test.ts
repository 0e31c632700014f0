/**
 * Issue 37: resuming from a chunk index after the page server restarted
 * counts exactly the chunks the first server sent, on PostgreSQL, through real
 * HTTP. The turn shows what a journal replay cannot give back: a call waiting
 * on its remote (a `data-wait`, a passing state), and a worker (a real
 * `deno run` process) SIGKILLed mid-answer (a `reset-step`). The handler's
 * server is closed and a new handler started (nothing in memory): each
 * `?startIndex=N` past those chunks returns the first server's chunks from N
 * on, from the chat chunk log, and the message they assemble is the
 * journaled answer, once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from "npm:ai@7.0.173";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { MockModel } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { chatHandler, type UIChunk } from "../runtime/chat/chat.ts";
import { spawnWorker, type WorkerChild } from "../harness/pg.ts";
import { pgTest } from "./_pg.ts";
import resumer from "./_chat_resume_agent.ts";

const AGENT_TS = new URL("./_chat_resume_agent.ts", import.meta.url).pathname;
const CHAT = "chat-resume";
const ANSWER = "Attempt {n} says: the job is done, its report is filed, and nothing else waits on it now.";

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

/** The chunks of a response's SSE body (ended `[DONE]`). */
async function sse(res: Response): Promise<UIChunk[]> {
  assert.equal(res.status, 200);
  const events = (await res.text()).split("\n\n").filter((e) => e !== "");
  assert.equal(events.at(-1), "data: [DONE]");
  return events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
}

/** The message the `ai` package's reader assembles from `chunks`. */
async function assemble(chunks: UIChunk[]): Promise<UIMessage> {
  const stream = new ReadableStream<UIMessageChunk>({
    start(c) {
      for (const chunk of chunks) c.enqueue(chunk as UIMessageChunk);
      c.close();
    },
  });
  let last: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream, terminateOnError: true })) last = m;
  assert.ok(last);
  return last;
}

const textOf = (m: UIMessage) =>
  m.parts.filter((p) => p.type === "text").map((p) => (p as { text: string }).text);

pgTest(
  "issue 37: ?startIndex=N after a restart gives the first server's chunks from N, past a data-wait and a reset-step",
  async (pg) => {
    let doomed: WorkerChild | undefined;
    const model = await MockModel.open({
      stream: {
        chunks: 30,
        chunkMs: 15,
        onChunk: async (c) => {
          // Call 2 is the answer after the job: its worker dies by SIGKILL half-way through.
          if (c.n === 2 && c.index === 15 && doomed) {
            doomed.kill();
            await doomed.result;
            throw new Error("the worker is gone");
          }
        },
      },
    });
    model.setScript({
      agent: "resumer",
      steps: [{ tool: "job", args: { name: "report" } }, { answer: ANSWER }],
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
    let served = serve(chatHandler({ client, agent: resumer }));
    let second: WorkerChild | undefined;
    try {
      doomed = spawnWorker(env, "worker");
      const res = fetch(`${served.url}/api/chat`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          id: CHAT,
          messages: [{ id: "r0", role: "user", parts: [{ type: "text", text: "Run the report job." }] }],
          trigger: "submit-message",
        }),
      }).then(sse);
      const killed = await doomed.result;
      assert.equal(killed.signal, "SIGKILL");
      second = spawnWorker(env, "worker");
      const live = await res; // the first server's response, through the takeover to the answer
      const journaled = (await client.conversations.answers(CHAT)).find((t) => t.seq === 0)?.answer;
      assert.equal(journaled, ANSWER.replace("{n}", "3"));
      const types = live.map((c) => c.type);
      const wait = types.indexOf("data-wait");
      const reset = types.indexOf("reset-step");
      assert.ok(wait > 0 && reset > wait, `a wait, then a reset, sent live: ${types.join(",")}`);
      assert.deepEqual(textOf(await assemble(live)), [journaled], "shown once live");

      // A new handler on a new server: nothing in memory; the resumes come from the chunk log.
      await served.close();
      served = serve(chatHandler({ client, agent: resumer }));
      for (const n of [0, wait + 1, reset, reset + 1, live.length - 3]) {
        const resumed = await sse(await fetch(`${served.url}/api/chat/${CHAT}/stream?startIndex=${n}`));
        assert.deepEqual(resumed, live.slice(n), `resumed from ${n}`);
      }
      const whole = await sse(await fetch(`${served.url}/api/chat/${CHAT}/stream?startIndex=0`));
      assert.deepEqual(textOf(await assemble(whole)), [journaled], "the resumed message is the answer, once");
    } finally {
      doomed?.kill();
      second?.kill();
      await second?.result;
      await served.close();
      await mocks.close();
    }
  },
);
