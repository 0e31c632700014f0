import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { Client } from "../client/client.ts";
import { type ClientError } from "../base/errors.ts";
import { CountingClient } from "../store/counting.ts";
import { ManualClock } from "../base/clock.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { arraySink, Logger } from "../base/log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import type { Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import { defineTool, ToolRegistry } from "../agent/tools.ts";
import type { DecideRequest, TranscriptMessage } from "../model/transcript.ts";
import type { HistoryHook } from "./turns.ts";
import { openTestPglite } from "../../tests/_pglite.ts";
import { testClient } from "../../tests/_pglite.ts";

// A conversation driven by hand, one worker turn at a time, on one in-memory PGlite and a manual clock.
// The model notes each user message with a tool, then answers it; it reads only the transcript, so what
// it was asked shows exactly the history it saw.

/** The last user text of a transcript. */
function lastUser(t: TranscriptMessage[]): string {
  for (let i = t.length - 1; i >= 0; i--) {
    const m = t[i];
    if (m.role === "user") return m.text;
  }
  return "";
}

function notingModel(): { planner: Planner; asked: DecideRequest[] } {
  const asked: DecideRequest[] = [];
  return {
    asked,
    planner: {
      describe: "noting",
      decide: (req) => {
        asked.push(req);
        const last = req.transcript[req.transcript.length - 1];
        if (last.role === "user") {
          return Promise.resolve({
            kind: "tool_calls",
            calls: [{ name: "note", args: { text: last.text } }],
          });
        }
        return Promise.resolve({ kind: "done", text: `answered: ${lastUser(req.transcript)}` });
      },
    },
  };
}

async function world(
  opts: {
    idleMs?: number;
    history?: HistoryHook;
    onNote?: (text: string) => Promise<void>;
    retry?: { horizonMs: number };
  } = {},
) {
  const clock = new ManualClock();
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const notes: string[] = [];
  const note = defineTool({
    name: "note",
    description: "Notes a message.",
    args: z.strictObject({ text: z.string() }),
    run: async (args) => {
      notes.push(args.text);
      await opts.onNote?.(args.text);
      return { result: { noted: args.text } };
    },
  });
  const agent = defineAgent({
    name: "chat",
    instructions: "Note, then answer.",
    tools: [note],
    conversation: { idleMs: opts.idleMs ?? 60_000, ...(opts.history ? { history: opts.history } : {}) },
  });
  const model = notingModel();
  const deps = (owner: string) =>
    runDepsFor(
      processDeps({ store, clock, log, owner, random: () => 0.5 }),
      agentDeps({ agent, planner: model.planner, tools: new ToolRegistry([note]) } as never, {
        retry: opts.retry,
      }),
    );
  const client = new Client(store, clock);
  return {
    clock,
    store,
    client,
    agent,
    deps,
    model,
    notes,
    lines,
    [Symbol.asyncDispose]: () => store.client.close(),
  };
}

Deno.test("a conversation answers its goal, waits for the next message without a worker, and answers each in turn", async () => {
  await using w = await world();
  const started = await w.client.start(w.agent, { runId: "c1", input: "hello" });
  assert.deepEqual(started.conversation, { messages: 1, idle: false, idleMs: 60_000, ended: false });
  const first = await claimAndDrive(w.deps("w1"), "c1");
  assert.equal(first.status, "waiting");
  assert.equal(first.output, "answered: hello");
  const idle = await w.client.get("c1");
  assert.equal(idle?.status, "waiting");
  assert.equal(idle?.owner, "w1");
  assert.equal(idle?.conversation?.idle, true);
  assert.equal((await w.client.wait("c1", { timeoutMs: 0 })).output, "answered: hello");

  const sent = await w.client.conversations.send("c1", "and the second", { messageId: "m1" });
  assert.deepEqual(sent, { runId: "c1", seq: 1, messageId: "m1", duplicate: false });
  assert.equal((await w.client.get("c1"))?.conversation?.idle, false, "a send wakes the run");
  const again = await w.client.conversations.send("c1", "and the second", { messageId: "m1" });
  assert.deepEqual(again, { ...sent, duplicate: true }, "a retried send is one message");

  const second = await claimAndDrive(w.deps("w2"), "c1");
  assert.equal(second.status, "waiting");
  assert.equal(second.output, "answered: and the second");
  assert.deepEqual(w.notes, ["hello", "and the second"]);
  // The model saw every message, call, result and answer so far, in order, and nothing else.
  const lastAsk = w.model.asked[w.model.asked.length - 1].transcript;
  assert.deepEqual(
    lastAsk.map((m) =>
      m.role === "tool" ? `tool:${m.callId}` : `${m.role}:${"text" in m ? m.text ?? "" : ""}`
    ),
    [
      "system:Note, then answer.",
      "user:hello",
      "assistant:",
      "tool:call_0",
      "assistant:answered: hello",
      "user:and the second",
      "assistant:",
      "tool:call_2",
    ],
  );
  assert.equal(w.model.asked.length, 4, "each step bought once");

  const turns = await w.client.conversations.answers("c1");
  assert.deepEqual(turns.map((t) => [t.seq, t.messageId, t.text, t.answer, t.answerSeq]), [
    [0, null, "hello", "answered: hello", 1],
    [1, "m1", "and the second", "answered: and the second", 3],
  ]);
});

Deno.test("a turn's outcome counts the run's tool calls, not its seq: the second turn's is 2, its answer at seq 3", async () => {
  await using w = await world();
  await w.client.start(w.agent, { runId: "c7", input: "one" });
  const first = await claimAndDrive(w.deps("w1"), "c7");
  assert.deepEqual([first.status, first.toolCalls, first.llmCalls], ["waiting", 1, 2]);
  await w.client.conversations.send("c7", "two", { messageId: "2" });
  const second = await claimAndDrive(w.deps("w1"), "c7");
  assert.equal(second.status, "waiting");
  // seq 0 the first note, 1 its answer, 2 the second note, 3 its answer: two calls, the answers none.
  const turns = await w.client.conversations.answers("c7");
  assert.deepEqual(turns.map((t) => t.answerSeq), [1, 3]);
  assert.deepEqual([second.toolCalls, second.llmCalls], [2, 4], "the first answer is no tool call");
  assert.equal((await w.client.reads.list({ search: "c7" })).runs[0].tool_calls, 2);
  await w.client.conversations.endConversation("c7");
  const closed = await claimAndDrive(w.deps("w1"), "c7");
  assert.deepEqual([closed.alreadyClosed, closed.toolCalls], [true, 2]);
  assert.match(w.lines.at(-1)!, /event=already-done run=c7 tool_calls=2 llm_calls=4/);
});

Deno.test("a message sent while the run works is queued, then answered after the current answer, in the same turn", async () => {
  const ref: { client?: Client } = {};
  let sentOnce = false;
  await using w = await world({
    onNote: async () => {
      if (sentOnce) return;
      sentOnce = true;
      await ref.client!.conversations.send("c2", "queued one", { messageId: "q" });
    },
  });
  ref.client = w.client;
  await w.client.start(w.agent, { runId: "c2", input: "first" });
  const out = await claimAndDrive(w.deps("w1"), "c2");
  assert.equal(out.status, "waiting");
  assert.equal(out.output, "answered: queued one");
  assert.deepEqual(w.notes, ["first", "queued one"]);
  const turns = await w.client.conversations.answers("c2");
  assert.deepEqual(turns.map((t) => t.answer), ["answered: first", "answered: queued one"]);
  assert.ok(w.lines.some((l) => l.includes("message-taken")));
});

Deno.test("a restart mid-conversation replays what the database holds and asks the model nothing twice", async () => {
  await using w = await world();
  await w.client.start(w.agent, { runId: "c3", input: "one" });
  await claimAndDrive(w.deps("w1"), "c3");
  await w.client.conversations.send("c3", "two", { messageId: "2" });
  await claimAndDrive(w.deps("w1"), "c3");
  await w.client.conversations.send("c3", "three", { messageId: "3" });
  const asked = w.model.asked.length;
  // A new worker (another process) on the woken run reads the whole history back.
  const out = await claimAndDrive(w.deps("w9"), "c3");
  assert.equal(out.output, "answered: three");
  assert.equal(w.model.asked.length, asked + 2, "only the new message's two steps are decided");
  assert.deepEqual(w.notes, ["one", "two", "three"]);
  const t = w.model.asked[w.model.asked.length - 1].transcript;
  assert.deepEqual(t.filter((m) => m.role === "user").map((m) => (m as { text: string }).text), [
    "one",
    "two",
    "three",
  ]);
});

Deno.test("a conversation idle past its limit ends done with its last answer; a closed one refuses messages", async () => {
  await using w = await world({ idleMs: 5_000 });
  await w.client.start(w.agent, { runId: "c4", input: "hi" });
  await claimAndDrive(w.deps("w1"), "c4");
  const early = await claimAndDrive(w.deps("w1"), "c4");
  assert.equal(early.alreadyClosed, true, "not taken before its idle limit");
  await w.clock.advance(5_000);
  const ended = await claimAndDrive(w.deps("w1"), "c4");
  assert.equal(ended.status, "done");
  const run = await w.client.get("c4");
  assert.equal(run?.status, "done");
  assert.equal(run?.output, "answered: hi");
  await assert.rejects(
    w.client.conversations.send("c4", "too late"),
    (e: ClientError) => e.code === "CONVERSATION_ENDED",
  );

  await w.client.start(w.agent, { runId: "c5", input: "hi" });
  await claimAndDrive(w.deps("w1"), "c5");
  const closed = await w.client.conversations.endConversation("c5");
  assert.equal(closed.status, "done");
  assert.equal(closed.output, "answered: hi");
  await assert.rejects(
    w.client.conversations.send("c5", "more"),
    (e: ClientError) => e.code === "CONVERSATION_ENDED",
  );
  await assert.rejects(
    w.client.conversations.endConversation("c5"),
    (e: ClientError) => e.code === "CONVERSATION_ENDED",
  );
});

Deno.test("a conversation closed while it works ends after its current answer", async () => {
  const ref: { client?: Client } = {};
  await using w = await world({
    onNote: async () => void await ref.client!.conversations.endConversation("c6"),
  });
  ref.client = w.client;
  await w.client.start(w.agent, { runId: "c6", input: "hi" });
  const out = await claimAndDrive(w.deps("w1"), "c6");
  assert.equal(out.status, "done");
  assert.equal((await w.client.get("c6"))?.status, "done");
});

Deno.test("send refuses a run that does not converse, an unknown run and an empty message, each by its code", async () => {
  await using w = await world();
  const plain = defineAgent({ name: "plain", tools: [] });
  await w.client.start(plain, { runId: "p1", input: "x" });
  await assert.rejects(
    w.client.conversations.send("p1", "hello"),
    (e: ClientError) => e.code === "NOT_A_CONVERSATION",
  );
  await assert.rejects(
    w.client.conversations.send("nope", "hello"),
    (e: ClientError) => e.code === "RUN_NOT_FOUND",
  );
  await w.client.start(w.agent, { runId: "c7", input: "x" });
  await assert.rejects(
    w.client.conversations.send("c7", "  "),
    (e: ClientError) => e.code === "MESSAGE_INVALID",
  );
  assert.throws(
    () => defineAgent({ name: "bad", tools: [], conversation: { idleMs: 0 } }),
    /conversation.idleMs' must be an integer/,
  );
});

Deno.test("the history hook trims what is sent; what is stored stays complete", async () => {
  const keepLast = (n: number): HistoryHook => (t) => [t[0], ...t.slice(1).slice(-n)];
  await using w = await world({ history: keepLast(2) });
  await w.client.start(w.agent, { runId: "c8", input: "one" });
  await claimAndDrive(w.deps("w1"), "c8");
  await w.client.conversations.send("c8", "two");
  await claimAndDrive(w.deps("w1"), "c8");
  for (const req of w.model.asked) assert.ok(req.transcript.length <= 3);
  const turns = await w.client.conversations.answers("c8");
  assert.deepEqual(turns.map((t) => t.text), ["one", "two"]);
  const record = await w.client.reads.inspect("c8");
  assert.equal(record.journal.length, 4);
});

Deno.test("a worker host takes its parked conversation again from memory: only the new message is read", async () => {
  const embedded = await testClient();
  const counting = new CountingClient(embedded.store.client);
  const client = new Client(new Store(counting));
  const echo = defineAgent({
    name: "echo",
    tools: [],
    conversation: { idleMs: 600_000 },
    model: {
      describe: "echo",
      decide: (req) => Promise.resolve({ kind: "done", text: `re: ${lastUser(req.transcript)}` }),
    },
  });
  const worker = await client.startWorker([echo], { pollMs: 10 });
  try {
    await client.start(echo, { runId: "e1", input: "one" });
    await client.wait("e1", { timeoutMs: 20_000, pollMs: 10 });
    for (const text of ["two", "three"]) {
      counting.reset();
      await client.conversations.send("e1", text);
      worker.wake();
      await until(async () => (await client.get("e1"))?.conversation?.idle === true);
      assert.equal((await client.get("e1"))?.output, `re: ${text}`);
      assert.equal(counting.counts.get("read-history"), undefined, "the history is not read again");
      assert.equal(counting.counts.get("read-messages"), 1, "only the messages sent since");
    }
    assert.deepEqual((await client.conversations.answers("e1")).map((t) => t.answer), [
      "re: one",
      "re: two",
      "re: three",
    ]);
  } finally {
    await worker.stop();
    await client.close();
  }
});

async function until(check: () => Promise<boolean>): Promise<void> {
  // Bounded: 2 000 looks, 10 ms apart.
  for (let i = 0; i < 2_000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("timed out");
}

Deno.test("a summary the history hook remembers is bought once: another worker replays it from the database", async () => {
  let bought = 0;
  // Everything before the latest message is replaced by a summary, each bought once under its own key:
  // the first message's, then one per later message that builds on it.
  const summarise: HistoryHook = async (t, ctx) => {
    if (ctx.messages < 2) return t;
    const first = await ctx.remember("summary-before-1", () => {
      bought++;
      return Promise.resolve("summary of the first message");
    });
    const summary = ctx.messages < 3
      ? first
      : await ctx.remember(`summary-before-${ctx.messages - 1}`, () => {
        bought++;
        return Promise.resolve(`${first}, and more`);
      });
    return [t[0], { role: "user", text: summary }, ...t.slice(t.findLastIndex((m) => m.role === "user"))];
  };
  await using w = await world({ history: summarise });
  await w.client.start(w.agent, { runId: "s1", input: "one" });
  await claimAndDrive(w.deps("w1"), "s1");
  await w.client.conversations.send("s1", "two");
  await claimAndDrive(w.deps("w1"), "s1");
  assert.equal(bought, 1, "bought once for both steps of message 1");
  // Another worker (a restart) on a new message: the summary before message 1 is not bought again, and the
  // summary before message 2 is bought once.
  await w.client.conversations.send("s1", "three");
  await claimAndDrive(w.deps("w2"), "s1");
  assert.equal(bought, 2);
  assert.ok(w.lines.some((l) => l.includes("event=memo-replayed run=s1 key=summary-before-1")), "replayed");
  const last = w.model.asked[w.model.asked.length - 1].transcript;
  assert.deepEqual(last.slice(0, 3).map((m) => m.role === "user" ? m.text : m.role), [
    "system",
    "summary of the first message, and more",
    "three",
  ]);
  const rows = await w.store.client.query<{ key: string; attempts: number; status: string }>(
    "select key, attempts, status from memos where run_id = 's1' order by key",
  );
  assert.deepEqual(rows.map((r) => [r.key, r.attempts, r.status]), [
    ["summary-before-1", 1, "confirmed"],
    ["summary-before-2", 1, "confirmed"],
  ]);
  // What is stored stays complete.
  assert.deepEqual((await w.client.conversations.answers("s1")).map((t) => t.text), ["one", "two", "three"]);
});

Deno.test("a conversation that fails keeps its history: its error and a send both say to reopen it, and a reopen goes on", async () => {
  let down = true;
  await using w = await world({
    retry: { horizonMs: 0 },
    onNote: (text) =>
      down && text === "second" ? Promise.reject(new TypeError("fetch failed")) : Promise.resolve(),
  });
  await w.client.start(w.agent, { runId: "cf", input: "first" });
  assert.equal((await claimAndDrive(w.deps("w1"), "cf")).status, "waiting");
  await w.client.conversations.send("cf", "second", { messageId: "m1" });
  const failed = await claimAndDrive(w.deps("w2"), "cf");
  assert.equal(failed.status, "failed");
  assert.match(
    failed.error ?? "",
    /^TOOL_GAVE_UP: .*\. The conversation keeps its history: 'deno task reopen cf' takes it up again$/,
  );
  await assert.rejects(
    w.client.conversations.send("cf", "third", { messageId: "m2" }),
    (err: ClientError) => {
      assert.equal(err.code, "CONVERSATION_ENDED");
      assert.match(
        err.message,
        /it is failed \(TOOL_GAVE_UP: .*\); 'deno task reopen cf' \(client\.operators\.reopen\) takes it up again with its history, then send again$/,
      );
      return true;
    },
  );
  down = false;
  await w.client.operators.reopen("cf");
  const resumed = await claimAndDrive(w.deps("w3"), "cf");
  assert.equal(resumed.status, "waiting");
  assert.equal(
    resumed.output,
    "answered: second",
    "the message being answered when it failed is answered now",
  );
  assert.deepEqual(
    w.notes,
    ["first", "second", "second"],
    "the note was sent again under its key, once more",
  );
});
