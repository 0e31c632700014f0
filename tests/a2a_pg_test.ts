/**
 * The A2A server on PostgreSQL and real HTTP (Deno.serve on port 0), driven
 * by the A2A project's own client (`npm:@a2a-js/sdk@1.3.0`, its JSON-RPC
 * transport, A2A 1.0) and by raw fetch where the wire itself is the point:
 * the card; a message sent and its task completed with the answer as an
 * artifact; the same message id sent twice is one run (rows counted); a
 * streamed answer whose model call is cut off and asked again, read as
 * server-sent events to the final status, the artifact restarted at the
 * reset; get, list, cancel (twice); a conversation of two messages in one
 * context, one run with two turns; a run waiting for a person's approval is
 * input-required. A worker hosted in this process (`STREAM_DELTAS` on)
 * drives the runs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { ClientFactory } from "npm:@a2a-js/sdk@1.3.0/client";
import { type StreamResponse, TaskState } from "npm:@a2a-js/sdk@1.3.0";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { type Agent, defineAgent } from "../runtime/agent/agent.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { ModelError } from "../runtime/base/errors.ts";
import type { DecideRequest, TranscriptMessage } from "../runtime/model/transcript.ts";
import { a2aHandler } from "../runtime/a2a/a2a.ts";
import { serveUi } from "../ui/server.ts";
import { pgTest } from "./_pg.ts";

const REPORT = "The build is green on main, the deploy went out cleanly, and nothing waits for a person.";

function lastUser(transcript: TranscriptMessage[]): string {
  const last = transcript.filter((m) => m.role === "user").at(-1);
  return last?.role === "user" ? last.text : "";
}

/** Writes its answer in ten pieces 20 ms apart; the first model call of a goal holding "flaky" is cut off after four. */
function writer(cutOff: Set<string>): Agent {
  return defineAgent({
    name: "writer",
    tools: [],
    retry: { backoffBaseMs: 10, backoffMaxMs: 20 },
    model: {
      describe: "writer",
      decide: async (req: DecideRequest) => {
        const goal = lastUser(req.transcript);
        const pieces = REPORT.match(/.{1,9}/g)!;
        for (const [i, piece] of pieces.entries()) {
          if (i === 4 && goal.includes("flaky") && !cutOff.has(req.runId)) {
            cutOff.add(req.runId);
            throw new ModelError("MODEL_UNREACHABLE", "the answer was cut off", { transient: true });
          }
          req.onDelta?.(piece);
          await new Promise((r) => setTimeout(r, 20));
        }
        return { kind: "done", text: REPORT };
      },
    },
  });
}

const chat = defineAgent({
  name: "chat",
  tools: [],
  conversation: { idleMs: 600_000 },
  model: {
    describe: "chat",
    decide: (req) => Promise.resolve({ kind: "done", text: `you said: ${lastUser(req.transcript)}` }),
  },
});

const guarded = defineAgent({
  name: "refunds",
  tools: [defineTool({
    name: "refund",
    description: "Refunds an order.",
    args: z.strictObject({ order: z.number() }),
    approval: true,
    run: () => Promise.resolve({ result: "refunded" }),
  })],
  model: {
    describe: "refunds",
    decide: (req) =>
      Promise.resolve(
        req.transcript.some((m) => m.role === "tool")
          ? { kind: "done", text: "Refunded." }
          : { kind: "tool_calls", calls: [{ name: "refund", args: { order: 7 } }] },
      ),
  },
});

const userMessage = (messageId: string, text: string, contextId = "") => ({
  messageId,
  contextId,
  taskId: "",
  role: 1, // ROLE_USER
  parts: [{
    content: { $case: "text" as const, value: text },
    metadata: undefined,
    filename: "",
    mediaType: "",
  }],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});

const sendParams = (message: ReturnType<typeof userMessage>) => ({
  tenant: "",
  message,
  configuration: undefined,
  metadata: undefined,
});

const textOf = (parts: { content?: { $case: string; value: unknown } }[]) =>
  parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

pgTest(
  "A2A 1.0 over PostgreSQL: card, send, retry, stream with a reset, get, list, cancel, a conversation, an approval",
  async (pg, t) => {
    const client = new Client(pg.store, new SystemClock());
    const cutOff = new Set<string>();
    const agents = [writer(cutOff), chat, guarded];
    const worker = await client.startWorker(agents, { streamDeltas: true, log: undefined });
    const parked = defineAgent({ name: "parked", tools: [] }); // no worker hosts it: its runs stay pending
    const handlers = new Map(
      [...agents, parked].map((a) => [a.name, a2aHandler({ client, agent: a, basePath: `/a2a/${a.name}` })]),
    );
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, (req) => {
      const name = new URL(req.url).pathname.split("/")[2];
      return handlers.get(name)?.(req) ?? Promise.resolve(new Response("no agent", { status: 404 }));
    });
    const base = `http://127.0.0.1:${server.addr.port}/a2a`;
    const factory = new ClientFactory();
    const runsOf = async (agent: string) =>
      (await pg.store.client.query<{ n: number }>("select count(*)::int as n from runs where agent = $1", [
        agent,
      ]))[0].n;
    try {
      const a2a = await factory.createFromUrl(`${base}/writer/`);

      await t.step(
        "the card: its JSON-RPC interface, streaming, and the one-message-per-id extension",
        async () => {
          const card = await (await fetch(`${base}/writer/.well-known/agent-card.json`)).json();
          assert.deepEqual(card.supportedInterfaces, [{
            url: `${base}/writer`,
            protocolBinding: "JSONRPC",
            protocolVersion: "1.0",
          }]);
          assert.equal(card.capabilities.streaming, true);
          assert.match(card.capabilities.extensions[0].description, /A message id sent twice is one message/);
          assert.equal((await a2a.getAgentCard()).name, "writer");
        },
      );

      let taskId = "";
      await t.step(
        "a message sent is a completed task with the answer as its artifact; sent again, the same task and one run",
        async () => {
          const first = await a2a.sendMessage(sendParams(userMessage("msg-1", "write the report")));
          assert.ok("status" in first, "a task");
          assert.equal(first.status?.state, TaskState.TASK_STATE_COMPLETED);
          assert.equal(textOf(first.artifacts[0].parts), REPORT);
          taskId = first.id;
          const again = await a2a.sendMessage(sendParams(userMessage("msg-1", "write the report")));
          assert.ok("status" in again);
          assert.equal(again.id, taskId);
          assert.equal(await runsOf("writer"), 1, "one run for one message id");
        },
      );

      await t.step(
        "a streamed message: the task, the answer piece by piece restarted at the reset, the final status",
        async () => {
          const events: StreamResponse[] = [];
          for await (const e of a2a.sendMessageStream(sendParams(userMessage("msg-2", "a flaky report")))) {
            events.push(e);
          }
          const kinds = events.map((e) => e.payload?.$case);
          assert.equal(kinds[0], "task");
          assert.equal(kinds.at(-1), "statusUpdate");
          const last = events.at(-1)!.payload!;
          assert.equal(
            last.$case === "statusUpdate" && last.value.status?.state,
            TaskState.TASK_STATE_COMPLETED,
          );
          const updates = events.flatMap((e) =>
            e.payload?.$case === "artifactUpdate" ? [e.payload.value] : []
          );
          // Rebuild the artifact as a client does: append, or start again.
          let shown = "";
          for (const u of updates) shown = (u.append ? shown : "") + textOf(u.artifact!.parts);
          assert.equal(shown, REPORT, "what the client holds is the journaled answer");
          assert.ok(
            updates.filter((u) => !u.append).length >= 2,
            "the cut-off text was restarted, not appended to",
          );
          assert.ok(updates.at(-1)!.lastChunk);
          assert.ok(cutOff.size === 1, "the first model call was cut off");
          const streamedTask = (await client.reads.list({ agent: "writer" })).runs.find((r) =>
            r.run_id !== taskId
          )!;
          assert.equal(streamedTask.status, "done");
        },
      );

      await t.step(
        "get, list and cancel: a finished task cannot be cancelled, a cancelled one cancels again",
        async () => {
          const got = await a2a.getTask({ tenant: "", id: taskId, historyLength: 1 });
          assert.equal(got.status?.state, TaskState.TASK_STATE_COMPLETED);
          assert.equal(got.history.length, 1);
          const listed = await a2a.listTasks({
            tenant: "",
            contextId: "",
            status: 0,
            pageSize: 1,
            pageToken: "",
            historyLength: undefined,
            statusTimestampAfter: undefined,
            includeArtifacts: true,
          });
          assert.equal(listed.totalSize, 2);
          assert.equal(listed.tasks.length, 1);
          assert.notEqual(listed.nextPageToken, "");
          await assert.rejects(
            a2a.cancelTask({ tenant: "", id: taskId, metadata: undefined }),
            (err: Error) => (assert.match(err.message, /TASK_STATE_COMPLETED already/), true),
          );
          // A task still going on: one of an agent no worker hosts stays submitted until cancelled, twice.
          const parked = await factory.createFromUrl(`${base}/parked/`);
          const waiting = await parked.sendMessage({
            ...sendParams(userMessage("p-1", "never taken")),
            configuration: {
              acceptedOutputModes: [],
              taskPushNotificationConfig: undefined,
              historyLength: undefined,
              returnImmediately: true,
            },
          });
          assert.ok("status" in waiting);
          assert.equal(waiting.status?.state, TaskState.TASK_STATE_SUBMITTED);
          const cancelled = await parked.cancelTask({ tenant: "", id: waiting.id, metadata: undefined });
          assert.equal(cancelled.status?.state, TaskState.TASK_STATE_CANCELED);
          const twice = await parked.cancelTask({ tenant: "", id: waiting.id, metadata: undefined });
          assert.equal(twice.status?.state, TaskState.TASK_STATE_CANCELED);
          await assert.rejects(
            a2a.getTask({ tenant: "", id: "no-such-task", historyLength: undefined }),
            /No task/,
          );
        },
      );

      await t.step(
        "a conversation: two messages in one context are one run with two turns, input-required after each",
        async () => {
          const talk = await factory.createFromUrl(`${base}/chat/`);
          const one = await talk.sendMessage(sendParams(userMessage("c-1", "hello")));
          assert.ok("status" in one);
          assert.equal(one.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED);
          assert.equal(textOf(one.status!.message!.parts), "you said: hello");
          const two = await talk.sendMessage(sendParams(userMessage("c-2", "and again", one.contextId)));
          assert.ok("status" in two);
          assert.equal(two.id, one.id);
          assert.equal(two.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED);
          await talk.sendMessage(sendParams(userMessage("c-2", "and again", one.contextId))); // a retry
          assert.equal(await runsOf("chat"), 1);
          const turns = await client.conversations.answers(one.id);
          assert.deepEqual(turns.map((x) => [x.messageId, x.text, x.answer]), [
            [null, "hello", "you said: hello"],
            ["c-2", "and again", "you said: and again"],
          ]);
          assert.deepEqual(two.artifacts.map((a) => a.artifactId), ["answer-0", "answer-1"]);
        },
      );

      await t.step("a run waiting for a person's approval is input-required, saying which call", async () => {
        const refunds = await factory.createFromUrl(`${base}/refunds/`);
        const task = await refunds.sendMessage(sendParams(userMessage("r-1", "refund order 7")));
        assert.ok("status" in task);
        assert.equal(task.status?.state, TaskState.TASK_STATE_INPUT_REQUIRED);
        assert.match(textOf(task.status!.message!.parts), /approve refund \{"order":7\} \(key .*:0\)/);
        await client.operators.approve(`${task.id}:0`, { by: "alice" });
        const done = await client.wait(task.id, { timeoutMs: 20_000 });
        assert.equal(done.output, "Refunded.");
      });

      await t.step(
        "the page serves an agent over A2A at /a2a/<name>, behind its token, which its card declares",
        async () => {
          const ui = await serveUi({ client, port: 0, token: "sesame", a2a: [chat] });
          try {
            const cardUrl = `${ui.url}/a2a/chat/.well-known/agent-card.json`;
            const refused = await fetch(cardUrl);
            assert.equal(refused.status, 401);
            await refused.body?.cancel();
            const auth = { authorization: "Bearer sesame" };
            const card = await (await fetch(cardUrl, { headers: auth })).json();
            assert.deepEqual(card.securityRequirements, [{ schemes: { pageToken: { list: [] } } }]);
            const res = await fetch(`${ui.url}/a2a/chat`, {
              method: "POST",
              headers: { ...auth, "content-type": "application/json", "A2A-Version": "1.0" },
              body: JSON.stringify({
                jsonrpc: "2.0",
                id: "u1",
                method: "SendMessage",
                params: {
                  message: { messageId: "ui-1", role: "ROLE_USER", parts: [{ text: "through the page" }] },
                },
              }),
            });
            const body = await res.json();
            assert.equal(body.result.task.status.state, "TASK_STATE_INPUT_REQUIRED", JSON.stringify(body));
            assert.equal(body.result.task.artifacts[0].parts[0].text, "you said: through the page");
          } finally {
            await ui.close();
          }
        },
      );
    } finally {
      await server.shutdown();
      await worker.stop();
    }
  },
);
