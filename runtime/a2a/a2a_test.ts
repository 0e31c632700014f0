import assert from "node:assert/strict";
import { defineAgent } from "../agent/agent.ts";
import { a2aHandler, agentCard, runIdFor } from "./a2a.ts";
import { testClient } from "../../tests/_pglite.ts";

const echo = defineAgent({
  name: "echo",
  tools: [],
  model: { describe: "echo", decide: () => Promise.resolve({ kind: "done", text: "hello" }) },
});
const parked = defineAgent({ name: "parked", tools: [] }); // no worker: its runs stay pending

/** A handler over an in-memory database, a worker hosting `echo`, and a way to post JSON-RPC to it. */
async function served(fn: (rpc: Rpc, base: string) => Promise<void>): Promise<void> {
  const client = await testClient();
  const worker = await client.startWorker([echo], { log: undefined });
  const handlers = {
    echo: a2aHandler({ client, agent: echo, basePath: "/a/echo" }),
    parked: a2aHandler({ client, agent: parked, basePath: "/a/parked", sendWaitMs: 50 }),
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
    const name = new URL(req.url).pathname.split("/")[2] as keyof typeof handlers;
    return (handlers[name] ?? handlers.echo)(req);
  });
  const base = `http://127.0.0.1:${server.addr.port}/a`;
  const rpc: Rpc = async (
    agent,
    body,
    headers = { "A2A-Version": "1.0", "content-type": "application/json" },
  ) => {
    const res = await fetch(`${base}/${agent}`, {
      method: "POST",
      headers,
      body: typeof body === "string" ? body : JSON.stringify({ jsonrpc: "2.0", id: 7, ...body }),
    });
    return { status: res.status, body: await res.json() };
  };
  try {
    await fn(rpc, base);
  } finally {
    await server.shutdown();
    await worker.stop();
    await client.close();
  }
}

type Rpc = (
  agent: string,
  body: Record<string, unknown> | string,
  headers?: Record<string, string>,
) => Promise<
  {
    status: number;
    body: {
      id: unknown;
      result?: Record<string, unknown>;
      error?: {
        code: number;
        message: string;
        data: { reason?: string; fieldViolations?: { field: string }[] }[];
      };
    };
  }
>;

const message = (messageId: string, extra: Record<string, unknown> = {}) => ({
  message: { messageId, role: "ROLE_USER", parts: [{ text: "hi" }], ...extra },
});

const refusals = (t: Deno.TestContext, rpc: Rpc) =>
  t.step(
    "the handler refuses each bad request with the protocol's code, its HTTP status and what to do",
    async (t) => {
      await (async () => {
        const cases: [string, Parameters<Rpc>, number, number, string | undefined][] = [
          [
            "no A2A-Version: read as 0.3",
            ["echo", { method: "GetTask", params: { id: "x" } }, { "content-type": "application/json" }],
            400,
            -32009,
            undefined,
          ],
          ["a body that is no JSON", ["echo", "{not json"], 400, -32700, undefined],
          ["a batch", ["echo", "[]"], 400, -32600, undefined],
          [
            "a form body",
            ["echo", "a=1", { "A2A-Version": "1.0", "content-type": "application/x-www-form-urlencoded" }],
            400,
            -32005,
            undefined,
          ],
          ["an unknown method", ["echo", { method: "message/send", params: {} }], 404, -32601, undefined],
          [
            "a message without parts",
            ["echo", {
              method: "SendMessage",
              params: { message: { messageId: "m", role: "ROLE_USER", parts: [] } },
            }],
            400,
            -32602,
            "message.parts",
          ],
          [
            "an unknown task",
            ["echo", { method: "GetTask", params: { id: "nope" } }],
            404,
            -32001,
            undefined,
          ],
          [
            "push notifications",
            ["echo", { method: "CreateTaskPushNotificationConfig", params: {} }],
            400,
            -32003,
            undefined,
          ],
          [
            "a contextId sent to an agent that does not converse",
            ["echo", { method: "SendMessage", params: message("m9", { contextId: "nope" }) }],
            404,
            -32001,
            undefined,
          ],
        ];
        for (const [name, args, status, code, field] of cases) {
          await t.step(name, async () => {
            const res = await rpc(...args);
            assert.equal(res.status, status, JSON.stringify(res.body));
            assert.equal(res.body.error?.code, code, JSON.stringify(res.body));
            assert.ok((res.body.error?.message.length ?? 0) > 20);
            if (field) assert.equal(res.body.error?.data[1].fieldViolations?.[0].field, field);
          });
        }
      })();
    },
  );

const duplicates = (t: Deno.TestContext, rpc: Rpc) =>
  t.step(
    "a message id sent twice is one run; a follow-up to a task of an agent that does not converse is refused",
    async () => {
      await (async () => {
        const first = await rpc("echo", { method: "SendMessage", params: message("m1") });
        const task = first.body.result!.task as { id: string; status: { state: string } };
        assert.equal(task.id, await runIdFor("echo", "m1"));
        assert.equal(task.status.state, "TASK_STATE_COMPLETED");
        const again = await rpc("echo", {
          method: "SendMessage",
          params: message("m1", { taskId: task.id }),
        });
        assert.equal(
          (again.body.result!.task as { id: string }).id,
          task.id,
          "the task's first message again",
        );
        const more = await rpc("echo", { method: "SendMessage", params: message("m2", { taskId: task.id }) });
        assert.equal(more.body.error?.code, -32004);
        assert.match(more.body.error!.message, /does not converse/);
        const sub = await rpc("echo", { method: "SubscribeToTask", params: { id: task.id } });
        assert.equal(sub.body.error?.code, -32004, "a finished task has nothing to subscribe to");
        const list = await rpc("echo", { method: "ListTasks", params: {} });
        assert.equal((list.body.result as { totalSize: number }).totalSize, 1);
      })();
    },
  );

const blocking = (t: Deno.TestContext, rpc: Rpc) =>
  t.step(
    "a blocking send answers the task as it stands once its wait is over; return-immediately at once",
    async () => {
      await (async () => {
        const waited = await rpc("parked", { method: "SendMessage", params: message("p1") });
        assert.equal(
          (waited.body.result!.task as { status: { state: string } }).status.state,
          "TASK_STATE_SUBMITTED",
        );
        const now = await rpc("parked", {
          method: "SendMessage",
          params: { ...message("p2"), configuration: { returnImmediately: true } },
        });
        assert.equal(
          (now.body.result!.task as { status: { state: string } }).status.state,
          "TASK_STATE_SUBMITTED",
        );
      })();
    },
  );

const card = (t: Deno.TestContext, base: string) =>
  t.step(
    "the card names its interface at the public URL, and the handler answers 404 outside its base",
    async () => {
      const shown = agentCard(echo, "https://agents.example.test/a2a/echo", {
        card: { provider: { organization: "x", url: "https://x.test" } },
      });
      assert.equal(shown.supportedInterfaces[0].url, "https://agents.example.test/a2a/echo");
      assert.equal(shown.provider?.organization, "x");
      await (async () => {
        const res = await fetch(`${base}/echo/elsewhere`);
        assert.equal(res.status, 404);
        assert.equal((await res.json()).error.code, -32601);
      })();
    },
  );

Deno.test("the A2A handler over an in-memory database and real HTTP", async (t) => {
  await served(async (rpc, base) => {
    await refusals(t, rpc);
    await duplicates(t, rpc);
    await blocking(t, rpc);
    await card(t, base);
  });
});

Deno.test("the card shown in docs/a2a.md is what the handler serves for the doc's agent", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/a2a.md", import.meta.url));
  const section = doc.slice(doc.indexOf("## The card"));
  const from = section.indexOf("```json\n") + 8;
  const block = section.slice(from, section.indexOf("\n```", from));
  // The agent of the doc's "Mount it" snippet; its card does not depend on its model.
  const support = defineAgent({
    name: "support",
    instructions: "Answer questions about the shop's orders.",
    tools: [],
    conversation: { idleMs: 30 * 60_000 },
  });
  // What the handler serves at http://127.0.0.1:8799/a2a/support/.well-known/agent-card.json.
  const card = agentCard(support, "http://127.0.0.1:8799/a2a/support");
  assert.equal(JSON.stringify(card, null, 2), block, "regenerate the doc's card from this output");
});
