import assert from "node:assert/strict";
import { defineAgent } from "../runtime/agent/agent.ts";
import type { TranscriptMessage } from "../runtime/model/transcript.ts";
import { createUiApp } from "./server.ts";
import { testClient } from "../tests/_pglite.ts";

/** Answers each user message at once, quoting it. */
const chat = defineAgent({
  name: "chat",
  instructions: "-",
  tools: [],
  conversation: { idleMs: 600_000 },
  model: {
    describe: "echo",
    decide: (req) => {
      const users = req.transcript.filter((m): m is TranscriptMessage & { role: "user" } =>
        m.role === "user"
      );
      return Promise.resolve({ kind: "done", text: `re: ${users[users.length - 1].text}` });
    },
  },
});

const post = (body: unknown, headers: Record<string, string> = {}) => ({
  method: "POST",
  headers: { "content-type": "application/json", host: "127.0.0.1", ...headers },
  body: JSON.stringify(body),
});
const local = { headers: { host: "127.0.0.1:8787" } };

Deno.test("the page posts a conversation's next message and the run's JSON carries its messages and answers", async (t) => {
  const client = await testClient();
  const worker = await client.startWorker([chat], { pollMs: 20 });
  try {
    await client.start(chat, { runId: "talk", input: "hello" });
    await client.wait("talk", { timeoutMs: 20_000 });
    const app = await createUiApp({ client });
    await t.step("a message posted is sent once per messageId, and answered", async () => {
      const hostile = "<img src=x onerror=alert(1)>";
      const res = await app.request("/api/runs/talk/messages", post({ text: hostile, messageId: "web-1" }));
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { runId: "talk", seq: 1, messageId: "web-1", duplicate: false });
      const again = await app.request("/api/runs/talk/messages", post({ text: hostile, messageId: "web-1" }));
      assert.equal((await again.json()).duplicate, true);
      worker.wake();
      const answered = await client.wait("talk", { timeoutMs: 20_000 });
      assert.equal(answered.output, `re: ${hostile}`);
      const run = await (await app.request("/api/runs/talk", local)).json();
      assert.equal(run.conversation.messages, 2);
      assert.equal(run.conversation.idle, true);
      // The text as it was sent: the page escapes it when it shows it (app.js), the API does not change it.
      assert.deepEqual(
        run.conversation.turns.map((
          m: { seq: number; text: string; answer: string },
        ) => [m.seq, m.text, m.answer]),
        [[0, "hello", "re: hello"], [1, hostile, `re: ${hostile}`]],
      );
      const page = await (await app.request("/api/runs/talk/messages?from=1", local)).json();
      assert.deepEqual(page.turns.map((m: { seq: number }) => m.seq), [1]);
    });
    await t.step(
      "bad messages, runs that do not converse, read-only pages and missing tokens are refused",
      async () => {
        const empty = await app.request("/api/runs/talk/messages", post({ text: " " }));
        assert.equal(empty.status, 400);
        assert.equal((await empty.json()).code, "MESSAGE_INVALID");
        const noText = await app.request("/api/runs/talk/messages", post({ messageId: "x" }));
        assert.equal((await noText.json()).code, "UI_BAD_REQUEST");
        const plain = defineAgent({ name: "plain", tools: [] });
        await client.start(plain, { runId: "p1", input: "x" });
        const notConv = await app.request("/api/runs/p1/messages", post({ text: "hi" }));
        assert.equal(notConv.status, 409);
        assert.equal((await notConv.json()).code, "NOT_A_CONVERSATION");
        const ro = await createUiApp({ client, readOnly: true });
        const refused = await ro.request("/api/runs/talk/messages", post({ text: "hi" }));
        assert.equal(refused.status, 403);
        assert.equal((await refused.json()).code, "UI_READ_ONLY");
        const locked = await createUiApp({ client, token: "s3cret" });
        const noToken = await locked.request("/api/runs/talk/messages", post({ text: "hi" }));
        assert.equal(noToken.status, 401);
        await noToken.body?.cancel();
        const withToken = await locked.request(
          "/api/runs/talk/messages",
          post({ text: "with the token", messageId: "web-2" }, { authorization: "Bearer s3cret" }),
        );
        assert.equal(withToken.status, 200);
        assert.equal((await withToken.json()).seq, 2);
      },
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});
