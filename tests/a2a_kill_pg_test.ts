/**
 * A worker SIGKILLed in the middle of an answer streamed over A2A: the A2A
 * project's own client (`npm:@a2a-js/sdk@1.3.0`, `sendMessageStream`, and
 * `resubscribeTask` when the server ends a stream before the task is
 * finished) against the handler served by `Deno.serve` on port 0 over
 * PostgreSQL; the run driven by a real `deno run` worker process that the
 * mock model's stream kills halfway through its answer, then by a second
 * worker process that takes the run over and asks the model again. The
 * answer artifact, assembled as a client does (append, or start again),
 * equals the journaled answer, once; a client that subscribes after the kill
 * ends with it too.
 *
 * @module
 */

import assert from "node:assert/strict";
import { ClientFactory } from "npm:@a2a-js/sdk@1.3.0/client";
import { type StreamResponse, TaskState } from "npm:@a2a-js/sdk@1.3.0";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { a2aHandler, runIdFor } from "../runtime/a2a/a2a.ts";
import { MockModel } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { spawnWorker, type WorkerChild } from "../harness/pg.ts";
import { pgTest } from "./_pg.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;
const ANSWER = "Attempt {n} reports: the build is green on main, the deploy went out cleanly, nothing waits.";
const KILL_AT_CHUNK = 15;

type A2aClient = Awaited<ReturnType<ClientFactory["createFromUrl"]>>;
type Update = Extract<NonNullable<StreamResponse["payload"]>, { $case: "artifactUpdate" }>["value"];

const userMessage = (messageId: string, text: string) => ({
  tenant: "",
  message: {
    messageId,
    contextId: "",
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
  },
  configuration: undefined,
  metadata: undefined,
});

const textOf = (parts: { content?: { $case: string; value: unknown } }[]) =>
  parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

/** What a client holds: each artifact by id, its text appended to or started again per update. */
function assemble(updates: readonly Update[]): Map<string, string> {
  const held = new Map<string, string>();
  for (const u of updates) {
    const id = u.artifact!.artifactId;
    held.set(id, (u.append ? held.get(id) ?? "" : "") + textOf(u.artifact!.parts));
  }
  return held;
}

/** A client's reading of a task: the stream it began, then resubscriptions while the server ends one early. */
async function follow(
  a2a: A2aClient,
  first: AsyncGenerator<StreamResponse, void, undefined>,
  signal: AbortSignal,
  onEvent: (e: StreamResponse) => void,
): Promise<{ events: StreamResponse[]; streams: number }> {
  const events: StreamResponse[] = [];
  let taskId = "";
  let streams = 0;
  let stream: AsyncGenerator<StreamResponse, void, undefined> = first;
  for (;;) {
    streams += 1;
    let finished = false;
    for await (const e of stream) {
      events.push(e);
      onEvent(e);
      const p = e.payload;
      if (p?.$case === "task") taskId = p.value.id;
      const state = p?.$case === "task"
        ? p.value.status?.state
        : p?.$case === "statusUpdate"
        ? p.value.status?.state
        : undefined;
      finished = state === TaskState.TASK_STATE_COMPLETED || state === TaskState.TASK_STATE_FAILED;
    }
    if (finished) return { events, streams };
    assert.ok(taskId !== "" && streams < 5, `the stream ended ${streams} times before the task finished`);
    stream = a2a.resubscribeTask({ tenant: "", id: taskId }, { signal });
  }
}

const updatesOf = (events: readonly StreamResponse[]) =>
  events.flatMap((e) => e.payload?.$case === "artifactUpdate" ? [e.payload.value] : []);

pgTest(
  "A2A: a worker SIGKILLed mid-stream, another takes over; the client's answer artifact is the journaled answer, once",
  async (pg) => {
    let first: WorkerChild | undefined;
    let second: WorkerChild | undefined;
    const model = await MockModel.open({
      stream: {
        chunks: 30,
        chunkMs: 20,
        onChunk: async (c) => {
          // The first worker dies by SIGKILL in the middle of its answer (model call 1).
          if (c.n === 1 && c.index === KILL_AT_CHUNK && first) {
            first.kill();
            await first.result;
            throw new Error("the worker is gone");
          }
        },
      },
    });
    const mocks = await serveMocks({ model });
    const dir = await Deno.makeTempDir({ prefix: "a2a-kill-" });
    await Deno.writeTextFile(
      `${dir}/agent.ts`,
      `import { defineAgent } from "${MOD_TS}";
export default defineAgent({ name: "reporter", instructions: "Report how things stand.", tools: [] });
`,
    );
    model.setScript({ agent: "reporter", steps: [{ answer: ANSWER }] });
    // The same agent as the workers' module: the handler only starts and reads its runs.
    const reporter = defineAgent({ name: "reporter", instructions: "Report how things stand.", tools: [] });
    const client = new Client(pg.store, new SystemClock());
    const handler = a2aHandler({ client, agent: reporter, basePath: "/a2a/reporter" });
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
    const base = `http://127.0.0.1:${server.addr.port}/a2a/reporter/`;
    const runId = await runIdFor("reporter", "kill-1");
    const env = {
      DATABASE_URL: pg.url,
      AGENT: `${dir}/agent.ts`,
      RUN_ID: runId,
      GOAL: "How do things stand?", // the command asks for one; the run, started by the send, keeps its own
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock",
      STREAM_DELTAS: "1",
      LOG_FORMAT: "json",
    };
    // Ends the clients' streams if the test fails before they end (the server's shutdown waits for them).
    const abort = new AbortController();
    try {
      const a2a = await new ClientFactory().createFromUrl(base);
      // The task is sent (its run started, pending) before any worker runs: the first worker starts on it.
      let started!: () => void;
      const sent = new Promise<void>((resolve) => started = resolve);
      const reading = follow(
        a2a,
        a2a.sendMessageStream(userMessage("kill-1", "How do things stand?"), { signal: abort.signal }),
        abort.signal,
        (e) => e.payload?.$case === "task" && started(),
      );
      reading.catch(() => {}); // awaited below
      await Promise.race([sent, reading]);
      first = spawnWorker(env);
      const killed = await first.result;
      assert.equal(killed.signal, "SIGKILL", killed.lines.join("\n"));
      // A second client subscribes to the task now, between the two workers.
      const other = await new ClientFactory().createFromUrl(base);
      const late = follow(
        other,
        other.resubscribeTask({ tenant: "", id: runId }, { signal: abort.signal }),
        abort.signal,
        () => {},
      );
      late.catch(() => {}); // awaited below
      second = spawnWorker(env);
      const { events, streams } = await reading;
      const ended = await second.result;
      assert.equal(ended.code, 0, ended.lines.join("\n"));

      const journaled = (await client.get(runId))?.output;
      assert.equal(journaled, ANSWER.replace("{n}", "2"), "the second worker's model call is the answer");
      assert.equal(model.calls(), 2, "the answer was asked for twice: once per worker");
      const runs = await pg.store.client.query<{ n: number }>("select count(*)::int as n from runs");
      assert.equal(runs[0].n, 1, "one task, one run");

      const p0 = events[0].payload;
      assert.equal(p0?.$case, "task");
      assert.equal(p0?.$case === "task" && p0.value.id, runId);
      const last = events.at(-1)!.payload!;
      assert.equal(last.$case === "statusUpdate" && last.value.status?.state, TaskState.TASK_STATE_COMPLETED);

      const updates = updatesOf(events);
      const shown = assemble(updates);
      assert.deepEqual([...shown.keys()], ["answer-0"], "one answer artifact");
      assert.equal(shown.get("answer-0"), journaled, "what the client holds is the journaled answer");
      // The first attempt's text did reach the client, and was replaced, not appended to.
      const attempt1 = ANSWER.replace("{n}", "1");
      const restartAt = updates.findIndex((u, i) => i > 0 && !u.append);
      assert.ok(
        restartAt > 0,
        `the artifact was started again: ${JSON.stringify(updates.map((u) => u.append))}`,
      );
      const before = assemble(updates.slice(0, restartAt)).get("answer-0") ?? "";
      assert.ok(before.length > 0 && attempt1.startsWith(before), `before the restart: ${before}`);
      assert.ok(updates.at(-1)!.lastChunk, "the journaled answer closes the artifact");
      assert.equal(updates.filter((u) => u.lastChunk).length, 1);
      const all = updates.map((u) => textOf(u.artifact!.parts)).join("");
      assert.ok(!all.includes(journaled + journaled), "the answer was not sent twice over");

      const lateRead = await late;
      const lateUpdates = updatesOf(lateRead.events);
      assert.equal(
        assemble(lateUpdates).get("answer-0"),
        journaled,
        "a subscriber that joined after the kill too",
      );
      assert.ok(lateUpdates.at(-1)!.lastChunk);
      const lateEnd = lateRead.events.at(-1)!.payload!;
      assert.equal(
        lateEnd.$case === "statusUpdate" && lateEnd.value.status?.state,
        TaskState.TASK_STATE_COMPLETED,
      );
      // What the client was sent around the kill, and at the end: each update's append flag and text.
      const shownUpdate = (u: Update) =>
        `${u.append ? "append " : "replace"}${u.lastChunk ? " last" : ""} ${
          JSON.stringify(textOf(u.artifact!.parts))
        }`;
      console.log(
        [
          `streams: ${streams} (late subscriber: ${lateRead.streams}); artifact updates: ${updates.length}; ` +
          `model calls: ${model.calls()}; runs: ${runs[0].n}`,
          ...updates.slice(restartAt - 2, restartAt + 2).map((u, i) =>
            `  #${restartAt - 2 + i} ${shownUpdate(u)}`
          ),
          "  ...",
          ...updates.slice(-2).map((u, i) => `  #${updates.length - 2 + i} ${shownUpdate(u)}`),
          `  then ${last.$case} ${last.$case === "statusUpdate" && TaskState[last.value.status!.state]}`,
          `held: ${JSON.stringify(shown.get("answer-0"))}`,
          `journaled: ${JSON.stringify(journaled)}`,
        ].join("\n"),
      );
    } finally {
      abort.abort();
      first?.kill();
      second?.kill();
      await first?.result;
      await second?.result;
      await server.shutdown();
      await mocks.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
