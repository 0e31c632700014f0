/**
 * Answers that stream (#26, must-show 3): a model that writes its answer in
 * 50 chunks; a watcher (`client.stream`) receives the text in order as it is
 * written, the journaled answer equals the text since the step's last reset,
 * and a model call asked again (a retry in-process on PGlite; a worker
 * SIGKILLed mid-stream on PostgreSQL, watched from another process) shows a
 * reset, then the second attempt's text, never a mix of both.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import type { StreamEvent } from "../runtime/run/stream.ts";
import { MockModel } from "../mock/model.ts";
import { DEFAULT_RETRY } from "../runtime/run/deps.ts";
import { serveMocks } from "../mock/server.ts";
import { spawnWorker, type WorkerChild } from "../harness/pg.ts";
import demoAgent from "../examples/provision/agent.ts";
import { pgTest } from "./_pg.ts";
import { createUiApp } from "../ui/server.ts";
import { CountingClient, Store } from "../store.ts";
import { watchCommand } from "../cli/watch.ts";
import { COMMAND_USAGE } from "../cli/commands.ts";
import { SseParser } from "../runtime/model/sse.ts";
import { testClient } from "./_pglite.ts";

/** The answer of call n: distinct per call, so a mix of two attempts would show. */
const ANSWER = "Attempt {n} writes this answer piece by piece, " +
  "and every piece belongs to it. ".repeat(4);

const lookup = defineTool({
  name: "lookup",
  description: "Looks a word up.",
  args: z.strictObject({ q: z.string() }),
  run: (args) => Promise.resolve({ result: { meaning: `of ${args.q}` } }),
});

/** The text each step's deltas add up to since its last reset. */
function textSinceReset(events: StreamEvent[], seq: number): string {
  let text = "";
  for (const e of events) {
    if (e.type === "reset" && e.seq === seq) text = "";
    if (e.type === "delta" && e.seq === seq) text += e.text;
  }
  return text;
}

Deno.test("on PGlite, a watcher in the worker's process sees the answer streamed, then journaled; a retried call resets", async () => {
  const model = await MockModel.open({ now: () => new Date(0) });
  let failed = false;
  model.setStream({
    chunks: 50,
    chunkMs: 2,
    // The first streamed answer breaks off after 20 pieces: the call is asked again (attempt 2).
    onChunk: (c) => {
      if (c.n === 2 && c.index === 20 && !failed) {
        failed = true;
        throw new Error("connection reset by the mock");
      }
    },
  });
  const agent = defineAgent({
    name: "streamer",
    instructions: "Look the word up, then explain.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({ agent: "streamer", steps: [{ tool: "lookup", args: { q: "tea" } }, { answer: ANSWER }] });
  const client = await testClient();
  const worker = await client.startWorker([agent], {
    pollMs: 20,
    streamDeltas: true,
    retry: { ...DEFAULT_RETRY, backoffBaseMs: 1, backoffMaxMs: 5 },
  });
  try {
    await client.start(agent, { runId: "stream-1", input: "tea" });
    const events: StreamEvent[] = [];
    for await (const e of client.stream("stream-1", { pollMs: 20 })) events.push(e);
    const kinds = events.map((e) => e.type);
    assert.equal(kinds.at(-1), "status");
    assert.deepEqual(events.at(-1), { type: "status", status: "done", epoch: 1, error: null, idle: false });
    // The step at seq 1 was answered by call 3 after call 2 broke off: one reset, then call 3's text.
    const resets = events.filter((e) => e.type === "reset");
    assert.equal(resets.length, 1, JSON.stringify(resets));
    assert.deepEqual({ ...resets[0], dropped: 0 }, {
      type: "reset",
      seq: 1,
      epoch: 1,
      attempt: 2,
      reason: "retry",
      dropped: 0,
    });
    const answer = events.find((e) => e.type === "answer");
    assert.ok(answer && answer.type === "answer");
    assert.equal(answer.text, ANSWER.replace("{n}", "3"));
    assert.equal(textSinceReset(events, 1), answer.text, "the journaled answer is the text since the reset");
    // What was dropped was call 2's, and none of it came after the reset.
    const afterReset = events.slice(events.indexOf(resets[0]));
    assert.ok(afterReset.every((e) => e.type !== "delta" || e.attempt === 2));
    assert.match(textSinceReset(events.slice(0, events.indexOf(resets[0])), 1), /^Attempt 2 writes/);
    // The order a reader expects: the call decided, its result, then the answer's text, then the answer.
    const first = (t: StreamEvent["type"]) => kinds.indexOf(t);
    assert.ok(first("tool_calls") < first("tool_result"));
    assert.ok(first("tool_result") < first("delta"));
    assert.ok(kinds.lastIndexOf("delta") < first("answer"));
    const record = await client.reads.inspect("stream-1");
    assert.equal(record.journal[1].llm_attempts, 2, "the broken answer was paid for and asked again once");
  } finally {
    await worker.stop();
    await client.close();
  }
});

Deno.test("a watcher that connects after the run ended gets its history from the journal, then the end", async () => {
  const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 5 } });
  const agent = defineAgent({
    name: "late",
    instructions: "Answer.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({ agent: "late", steps: [{ tool: "lookup", args: { q: "x" } }, { answer: "fine" }] });
  const client = await testClient();
  const worker = await client.startWorker([agent], { pollMs: 20, streamDeltas: true });
  try {
    await client.start(agent, { runId: "late-1", input: "x" });
    await client.wait("late-1", { pollMs: 10 });
    const events: StreamEvent[] = [];
    for await (const e of client.stream("late-1")) events.push(e);
    assert.deepEqual(events.map((e) => e.type), ["tool_calls", "tool_result", "answer", "status"]);
    assert.deepEqual(events[0], {
      type: "tool_calls",
      seq: 0,
      calls: [{ seq: 0, tool: "lookup", args: { q: "x" } }],
    });
    await assert.rejects(
      (async () => {
        for await (const _ of client.stream("no-such-run")) break;
      })(),
      /RUN_NOT_FOUND|no-such-run/,
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});

/** A `deno run` child printing JSON lines: its lines so far, and a wait for one that matches. */
function spawnWatcher(databaseUrl: string, runId: string) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./_stream_watcher.ts", import.meta.url).pathname, databaseUrl, runId],
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines: { at: number; event: StreamEvent }[] = [];
  let wake: (() => void) | undefined;
  const done = (async () => {
    let buf = "";
    const decoder = new TextDecoder();
    for await (const chunk of child.stdout) {
      buf += decoder.decode(chunk, { stream: true });
      let nl = buf.indexOf("\n");
      // Bounded by the chunk: each pass takes one line.
      while (nl >= 0) {
        lines.push(JSON.parse(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
        nl = buf.indexOf("\n");
      }
      wake?.();
    }
    return await child.status;
  })();
  return {
    lines,
    done,
    /** Resolves once a line satisfies `pred`. */
    async until(pred: (e: StreamEvent) => boolean): Promise<void> {
      // Bounded by the child: it ends, and `done` settles.
      while (!lines.some((l) => pred(l.event))) {
        const more = new Promise<void>((r) => wake = r);
        if ((await Promise.race([more.then(() => "more"), done.then(() => "ended")])) === "ended") break;
      }
    },
    kill: () => {
      try {
        child.kill("SIGKILL");
      } catch (err) {
        // Already ended: nothing to kill.
        if (!(err instanceof TypeError)) throw err;
      }
    },
  };
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

pgTest(
  "on PostgreSQL, a watcher in another process sees 50 chunks as written; a worker killed mid-stream shows a reset, then the second attempt",
  async (pg) => {
    // When each piece of each call was written by the mock, and where it ends in the call's text.
    const written = new Map<number, { at: number; end: number }[]>();
    let first: WorkerChild | undefined;
    const model = await MockModel.open({
      stream: {
        chunks: 50,
        chunkMs: 40,
        onChunk: async (c) => {
          const pieces = written.get(c.n) ?? [];
          pieces.push({ at: Date.now(), end: (pieces.at(-1)?.end ?? 0) + c.text.length });
          written.set(c.n, pieces);
          // The first worker dies by SIGKILL in the middle of its answer (call 2: call 1 chose the tool).
          if (c.n === 2 && c.index === 20 && first) {
            first.kill();
            await first.result;
            throw new Error("the worker is gone");
          }
        },
      },
    });
    const mocks = await serveMocks({ model });
    const runId = `stream-pg-${crypto.randomUUID().slice(0, 8)}`;
    model.setScript({
      run: runId,
      steps: [{ tool: "create_server", args: { name: "srv-{n}", spec: "small" } }, { answer: ANSWER }],
    });
    const client = new Client(pg.store);
    await client.start(demoAgent, { runId });
    const watcher = spawnWatcher(pg.url, runId);
    try {
      await watcher.until((e) => e.type === "status");
      const env = {
        DATABASE_URL: pg.url,
        RUN_ID: runId,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock",
        CLOUD_URL: mocks.cloudUrl,
        STREAM_DELTAS: "1",
        LOG_FORMAT: "json",
      };
      first = spawnWorker(env);
      const killed = await first.result;
      assert.equal(killed.signal, "SIGKILL");
      // A worker started by hand on the run takes it over (a new epoch) and asks again: call 3.
      const second = spawnWorker(env);
      const ended = await second.result;
      assert.equal(ended.code, 0, ended.lines.join("\n"));
      const status = await watcher.done;
      assert.equal(status.code, 0);

      const events = watcher.lines.map((l) => l.event);
      const run = await client.get(runId);
      assert.equal(run?.status, "done");
      assert.equal(run?.output, ANSWER.replace("{n}", "3"));
      const resets = events.filter((e) => e.type === "reset");
      assert.equal(resets.length, 1, JSON.stringify(resets));
      const reset = resets[0];
      assert.ok(
        reset.type === "reset" && reset.seq === 1 && reset.reason === "takeover" && reset.epoch === 2,
      );
      const at = events.indexOf(reset);
      const before = events.slice(0, at);
      const after = events.slice(at + 1);
      // Before the reset: the first attempt's text, up to where it was cut; after it: only the second's.
      const cut = textSinceReset(before, 1);
      assert.ok(cut.length > 0 && ANSWER.replace("{n}", "2").startsWith(cut), cut);
      assert.ok(after.every((e) => e.type !== "delta" || (e.epoch === 2 && e.attempt === 2)));
      const deltas = after.filter((e) => e.type === "delta");
      // In order as written: each piece starts where the one before it ended.
      let end = 0;
      for (const d of deltas) {
        assert.ok(d.type === "delta");
        assert.equal(d.offset, end);
        end += d.text.length;
      }
      const answer = after.find((e) => e.type === "answer");
      assert.ok(answer?.type === "answer");
      assert.equal(answer.text, run?.output);
      assert.equal(
        textSinceReset(events, 1),
        answer.text,
        "the journaled answer is the deltas' concatenation",
      );
      assert.equal(events.at(-1)?.type, "status");

      // The delay from each piece the mock wrote (call 3) to the watcher's receipt of the text that holds it.
      const received = watcher.lines.filter((l) => l.event.type === "delta" && l.event.attempt === 2);
      const delays = (written.get(3) ?? []).map((p) => {
        const got = received.find((l) =>
          l.event.type === "delta" && l.event.offset + l.event.text.length >= p.end
        );
        assert.ok(got, `piece ending at ${p.end} was received`);
        return got.at - p.at;
      }).sort((a, b) => a - b);
      assert.equal(delays.length, 50);

      // `deno task watch` on the finished run: its history from the journal, in a terminal's words.
      const watched = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          new URL("../cli/main.ts", import.meta.url).pathname,
          "watch",
          runId,
          "--database-url",
          pg.url,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const printed = new TextDecoder().decode(watched.stdout);
      assert.equal(watched.code, 0, new TextDecoder().decode(watched.stderr));
      assert.match(printed, /^decided {2}seq=0 {2}create_server /m);
      assert.match(printed, /^result {2}seq=0 {2}confirmed /m);
      assert.match(printed, new RegExp(`^answer  seq=1  "Attempt 3 writes`, "m"));
      assert.match(printed, /^status {2}done {2}epoch=2$/m);
      console.log(
        `stream delay, model chunk to watcher in another process (PostgreSQL, ${delays.length} chunks, ` +
          `${received.length} notifications): median ${quantile(delays, 0.5)} ms, p90 ${
            quantile(delays, 0.9)
          } ms, max ${delays.at(-1)} ms`,
      );
    } finally {
      watcher.kill();
      await watcher.done.catch(() => {});
      await mocks.close();
    }
  },
);

Deno.test("the page's GET /api/runs/:id/stream sends the run's events as server-sent events, under the token rule", async () => {
  const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 10, chunkMs: 5 } });
  const agent = defineAgent({
    name: "paged",
    instructions: "Answer.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({ agent: "paged", steps: [{ answer: ANSWER }] });
  const client = await testClient();
  const app = await createUiApp({ client, token: "tok" });
  const auth = { headers: { authorization: "Bearer tok" } };
  try {
    assert.equal((await app.request("/api/runs/none/stream")).status, 401);
    const missing = await app.request("/api/runs/none/stream", auth);
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).code, "RUN_NOT_FOUND");
    await client.start(agent, { runId: "paged-1", input: "x" });
    const res = await app.request("/api/runs/paged-1/stream", auth);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/event-stream");
    const worker = await client.startWorker([agent], { pollMs: 20, streamDeltas: true });
    const events: { event: string; data: Record<string, unknown> }[] = [];
    try {
      const parser = new SseParser();
      const decoder = new TextDecoder();
      for await (const piece of res.body!) {
        for (const e of parser.push(decoder.decode(piece, { stream: true }))) {
          events.push({ event: e.event, data: JSON.parse(e.data) });
        }
      }
    } finally {
      await worker.stop();
    }
    const names = events.map((e) => e.event);
    assert.equal(names[0], "status");
    assert.deepEqual(names.slice(-3), ["answer", "status", "end"]);
    const text = events.filter((e) => e.event === "delta").map((e) => e.data.text).join("");
    assert.equal(text, ANSWER.replace("{n}", "1"));
    assert.equal(events.find((e) => e.event === "answer")?.data.text, text);
  } finally {
    await client.close();
  }
});

Deno.test("a page that goes away mid-stream ends its watcher: nothing is left listening", async () => {
  const client = await testClient();
  const app = await createUiApp({ client });
  try {
    const agent = defineAgent({
      name: "idle",
      instructions: "-",
      tools: [],
      model: { describe: "none", decide: () => Promise.reject(new Error("never")) },
    });
    await client.start(agent, { runId: "idle-1", input: "x" });
    const res = await app.request("/api/runs/idle-1/stream", { headers: { host: "127.0.0.1" } });
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    assert.match(first, /^event: status\ndata: \{"type":"status","status":"pending"/);
    // The sanitizers fail this test if the subscription or its timer outlives the cancel.
    await reader.cancel();
  } finally {
    await client.close();
  }
});

Deno.test("the cost: with STREAM_DELTAS off a run sends no statement more; on, one notification per piece sent and nothing else", async () => {
  const counts: Record<string, Map<string, number>> = {};
  for (const streamDeltas of [false, true]) {
    const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 50 } });
    const agent = defineAgent({
      name: "counted",
      instructions: "Look up, then answer.",
      tools: [lookup],
      model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
    });
    model.setScript({ agent: "counted", steps: [{ tool: "lookup", args: { q: "x" } }, { answer: ANSWER }] });
    const base = await testClient();
    const counting = new CountingClient(base.store.client);
    const client = new Client(new Store(counting));
    await client.start(agent, { runId: "counted-1", input: "x" });
    counting.reset();
    const worker = await client.startWorker([agent], { pollMs: 5_000, streamDeltas });
    try {
      assert.equal((await client.wait("counted-1", { pollMs: 10 })).status, "done");
    } finally {
      await worker.stop();
    }
    // The waits and the host's own statements vary with timing: the run's protocol does not.
    const protocol = [...counting.counts].filter(([name]) =>
      /^(journal|effect|finish|claim|first-claim|notify|stream)/.test(name)
    );
    counts[String(streamDeltas)] = new Map(protocol);
    await base.close();
  }
  const off = counts["false"];
  const on = counts["true"];
  assert.equal(off.get("notify-stream"), undefined);
  assert.equal(off.get("stream-channel"), undefined);
  const notified = on.get("notify-stream") ?? 0;
  // Pieces written at once are gathered: at least one payload, at most one per piece.
  assert.ok(notified >= 1 && notified <= 50, `${notified} notifications`);
  assert.equal(on.get("stream-channel"), 1, "the channel's name is read once per store");
  on.delete("notify-stream");
  on.delete("stream-channel");
  assert.deepEqual(on, off, "the journal's writes are the same, streamed or not");
});

Deno.test("deno task watch's report: a line per event, the answer's text written as it arrives behind '  | '", async () => {
  const model = await MockModel.open({ now: () => new Date(0), stream: { chunks: 8, chunkMs: 5 } });
  const agent = defineAgent({
    name: "watched",
    instructions: "Answer.",
    tools: [lookup],
    model: new OpenAIPlanner({ url: "http://mock/v1", model: "m", fetch: model.handler }),
  });
  model.setScript({
    agent: "watched",
    steps: [{ answer: "Two lines:\nthe second \u001b[31mred\u001b[0m." }],
  });
  const client = await testClient();
  try {
    await client.start(agent, { runId: "watched-1", input: "x" });
    const lines: string[] = [];
    let text = "";
    const out = { line: (l: string) => lines.push(l), write: (t: string) => (text += t) };
    const watching = watchCommand(client, "watched-1", out);
    const worker = await client.startWorker([agent], { pollMs: 20, streamDeltas: true });
    try {
      assert.equal(await watching, "done");
    } finally {
      await worker.stop();
    }
    assert.deepEqual(lines.filter((l) => !l.startsWith("status")), [
      "writing  seq=0  attempt=1  epoch=1",
      'answer  seq=0  "Two lines:\\nthe second \\u001b[31mred\\u001b[0m."',
    ]);
    // The text is shown by the display rule: its line break kept, indented; the terminal's escapes shown as escapes.
    assert.equal(text, "  | Two lines:\n  | the second \\u001b[31mred\\u001b[0m.\n");
  } finally {
    await client.close();
  }
});

Deno.test("deno task watch ends when a conversation waits for its next message, saying how to send one; --follow follows it to its end", async () => {
  const chat = defineAgent({
    name: "chatty",
    instructions: "Answer.",
    tools: [],
    conversation: { idleMs: 3_600_000 },
    model: {
      describe: "echo",
      decide: (req) => {
        const last = req.transcript.at(-1);
        return Promise.resolve({ kind: "done", text: `re: ${last && "text" in last ? last.text : ""}` });
      },
    },
  });
  const client = await testClient();
  const worker = await client.startWorker([chat], { pollMs: 10 });
  try {
    await client.start(chat, { runId: "chat-1", input: "hello" });
    await client.wait("chat-1", { pollMs: 10 });
    // Without --follow: the history, then the end at the wait for the next message.
    const lines: string[] = [];
    const out = { line: (l: string) => lines.push(l), write: () => {} };
    const stop = new AbortController();
    let returned: string | undefined;
    const watching = watchCommand(client, "chat-1", out, { signal: stop.signal }).then((s) => returned = s);
    // Bounded by the watcher: it tells the run's status once it has read it.
    while (!lines.some((l) => l.startsWith("status  waiting"))) await new Promise((r) => setTimeout(r, 10));
    // Bounded: it ends by itself right after that line, or never (then Ctrl-C, below, ends it).
    const deadline = Date.now() + 30_000;
    while (returned === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const endedByItself = returned;
    stop.abort();
    await watching;
    assert.equal(endedByItself, "waiting", "the watch ended at the wait by itself, not at Ctrl-C");
    assert.deepEqual(lines, [
      'answer  seq=0  "re: hello"',
      "status  waiting  idle  epoch=1",
      "idle  the conversation waits for its next message: 'deno task send chat-1 --message TEXT' sends one; " +
      "'deno task watch chat-1 --follow' follows it across messages",
    ]);
    // With --follow: every answer, until the conversation is ended.
    const followed: string[] = [];
    const following = watchCommand(client, "chat-1", { line: (l) => followed.push(l), write: () => {} }, {
      follow: true,
    });
    await client.conversations.send("chat-1", "second", { messageId: "m2" });
    worker.wake();
    await client.wait("chat-1", { pollMs: 10 });
    await client.conversations.endConversation("chat-1");
    assert.equal(await following, "done");
    assert.deepEqual(followed.filter((l) => l.startsWith("answer")), [
      'answer  seq=0  "re: hello"',
      'answer  seq=1  "re: second"',
    ]);
    assert.ok(!followed.some((l) => l.startsWith("idle ")), "no end at the wait");
    assert.match(COMMAND_USAGE.watch, /--follow +a conversation: follow it across messages/);
    assert.match(COMMAND_USAGE.watch, /when a conversation waits for its next message/);
  } finally {
    await worker.stop();
    await client.close();
  }
});
