/**
 * Forks of the two shapes that carry more than a journal: a conversation
 * forked at its third message (the messages before the fork step copied,
 * the third answered anew, the fork then a conversation of its own), and a
 * parent run with children forked between them (the child answer before the
 * fork step reused, no child run made for it; the child started after it a
 * new run, itself a dry fork of the original's child of the same call). Real
 * client, worker host and embedded PostgreSQL (PGlite).
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { agentTool, defineAgent, defineTool } from "../mod.ts";
import type { DecideRequest, Planner } from "../runtime/model/planner.ts";
import { until } from "../harness/procs.ts";
import { testClient } from "./_pglite.ts";

/** Every request of the remote, by key. */
const sent: string[] = [];
/** Writes a note at the remote; `stub` answers a fork's note the original did not make. */
const noteTool = (stub: boolean) =>
  defineTool({
    name: "note",
    description: "Writes a note.",
    args: z.strictObject({ text: z.string() }),
    run: (args, ctx) => {
      sent.push(`${ctx.idempotencyKey} ${args.text}`);
      return Promise.resolve({ result: `noted ${args.text}` });
    },
    ...(stub ? { stub: (args: { text: string }) => `stub noted ${args.text}` } : {}),
  });

/** The user's last message in the transcript. */
const lastUser = (req: DecideRequest) => {
  const m = req.transcript.filter((t) => t.role === "user").at(-1);
  return m?.role === "user" ? m.text : "";
};

/** Notes each message, then answers it; named by the model it is asked as (`modelParams.model`). */
const chatModel: Planner = {
  describe: "chat",
  decide: (req) => {
    const last = req.transcript.at(-1);
    const who = req.params?.model ?? "A";
    return Promise.resolve(
      last?.role === "user"
        ? { kind: "tool_calls", calls: [{ name: "note", args: { text: lastUser(req) } }] }
        : { kind: "done", text: `${who} heard: ${lastUser(req)}` },
    );
  },
};
const chat = defineAgent({
  name: "chat",
  tools: [noteTool(true)],
  model: chatModel,
  conversation: { idleMs: 600_000 },
});

Deno.test("a conversation forked at its third message answers it anew, its first two copied", async () => {
  const client = await testClient();
  const worker = await client.startWorker([chat], { pollMs: 20 });
  try {
    await client.start(chat, { runId: "c", input: "one" });
    await client.wait("c", { timeoutMs: 20_000, pollMs: 10 });
    for (const [i, text] of ["two", "three"].entries()) {
      await client.conversations.send("c", text, { messageId: `m${i + 1}` });
      await client.wait("c", { timeoutMs: 20_000, pollMs: 10 });
    }
    const turns = await client.conversations.answers("c");
    assert.deepEqual(turns.map((t) => t.answer), ["A heard: one", "A heard: two", "A heard: three"]);
    // The third message's turn begins at the step after the second's answer.
    const atSeq = turns[1].answerSeq! + 1;
    assert.equal(atSeq, 4);
    const f = await client.fork("c", { atSeq, model: "B", runId: "cf" });
    assert.deepEqual(f.copied, { steps: 4, calls: 2, messages: 3 });
    const answered = await client.wait("cf", { timeoutMs: 20_000, pollMs: 10 });
    assert.equal(answered.output, "B heard: three");
    const forked = await client.conversations.answers("cf");
    assert.deepEqual(forked.map((t) => [t.text, t.answer]), [
      ["one", "A heard: one"],
      ["two", "A heard: two"],
      ["three", "B heard: three"],
    ]);
    // Its note of "three" is the original's call with the same arguments: answered from the record.
    const third = (await client.reads.inspect("cf")).effects.find((e) => e.seq === 4);
    assert.equal(third?.remote, "original");
    assert.deepEqual(sent, ["c:0 one", "c:2 two", "c:4 three"], "the fork sent nothing");
    // The fork is a conversation of its own: it takes a fourth message; the original is untouched.
    await client.conversations.send("cf", "four", { messageId: "m3" });
    assert.equal((await client.wait("cf", { timeoutMs: 20_000, pollMs: 10 })).output, "B heard: four");
    const fourth = (await client.reads.inspect("cf")).effects.find((e) => e.seq === 6);
    assert.deepEqual([fourth?.remote, fourth?.result], ["stub", "stub noted four"]);
    assert.deepEqual(
      (await client.conversations.answers("c")).map((t) => t.answer),
      ["A heard: one", "A heard: two", "A heard: three"],
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});

/** The child: notes its task, then answers with it. */
const helper = defineAgent({
  name: "helper",
  tools: [noteTool(false)],
  model: {
    describe: "helper",
    decide: (req) =>
      Promise.resolve(
        req.transcript.some((m) => m.role === "tool")
          ? { kind: "done", text: `did ${lastUser(req)}` }
          : { kind: "tool_calls", calls: [{ name: "note", args: { text: lastUser(req) } }] },
      ),
  },
});
/** The parent: hands two tasks to the helper, one after the other (the second's task named by its model). */
const lead = defineAgent({
  name: "lead",
  tools: [agentTool(helper, { checkAfterMs: 50 })],
  model: {
    describe: "lead",
    decide: (req) => {
      const done = req.transcript.filter((m) => m.role === "tool").length;
      const second = req.params?.model === "B" ? "beta" : "b";
      return Promise.resolve(
        done < 2
          ? { kind: "tool_calls", calls: [{ name: "helper", args: { task: done === 0 ? "a" : second } }] }
          : { kind: "done", text: "both done" },
      );
    },
  },
});

Deno.test("a parent forked between its children reuses the first child's answer and starts the second anew", async () => {
  sent.length = 0;
  const client = await testClient();
  const worker = await client.startWorker([lead, helper], { pollMs: 20 });
  try {
    await client.start(lead, { runId: "p", input: "go" });
    assert.equal((await client.wait("p", { timeoutMs: 30_000, pollMs: 10 })).status, "done");
    assert.deepEqual(sent.sort(), ["p.0:0 a", "p.1:0 b"]);

    // The same decisions from step 1: the child's call matches the original child's, answered from its record.
    await client.fork("p", { atSeq: 1, runId: "pf" });
    assert.equal((await client.wait("pf", { timeoutMs: 30_000, pollMs: 10 })).status, "done");
    // Another model from step 1: its child's call is new, and its tool offers no stub: flagged, not sent.
    await client.fork("p", { atSeq: 1, model: "B", runId: "pg" });
    await until(async () => (await client.get("pg.1")) !== undefined, "the fork's child pg.1 to start");
    await client.wait("pg.1", { timeoutMs: 30_000, pollMs: 10 });

    const children = (id: string) => client.reads.children(id);
    assert.deepEqual(
      (await children("pf")).map((c) => c.runId),
      ["pf.1"],
      "no child made for the copied step",
    );
    const child = await client.reads.inspect("pf.1");
    assert.equal(child.run.forked_from, "p.1");
    assert.equal(child.run.dry_run, true);
    assert.equal(child.effects[0].remote, "original");
    assert.equal(
      (await client.reads.inspect("pf")).effects[0].result,
      "did a",
      "the first child's answer copied",
    );

    const other = await client.reads.inspect("pg.1");
    assert.equal(other.run.forked_from, "p.1");
    assert.equal(other.run.status, "blocked", "note offers no stub, and p.1 never noted 'beta'");
    assert.match(other.effects[0].error ?? "", /the original run p\.1 made no such call/);
    assert.deepEqual(sent.sort(), ["p.0:0 a", "p.1:0 b"], "no fork, and no fork's child, sent anything");
  } finally {
    await worker.stop();
    await client.close();
  }
});
