/**
 * A conversation on the embedded default (PGlite under DATA_DIR), with real
 * processes: `deno task run` answers each message and exits while the run
 * waits for the next, `deno task send` sends the next one from another
 * process, and the worker answering the third message is SIGKILLed in the
 * middle of its tool call (the remote acted, its confirm not written). Every
 * answer arrives once, the model was shown exactly the messages and results
 * so far on every turn, each decided step was bought once, and the cloud
 * holds one server per message.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { connect } from "../runtime/client/client.ts";
import { runCli } from "../harness/procs.ts";
import {
  answerText,
  CHAT_AGENT_SOURCE,
  CHAT_INSTRUCTIONS,
  expectedHistory,
  historyOf,
  serveChatModel,
} from "./_chat_model.ts";
import { seedDataDir } from "./_pg.ts";

Deno.test("five messages on the embedded default, the worker SIGKILLed mid-call on the third: every answer once, the history exact, each step bought once", async () => {
  const model = serveChatModel();
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "conversation-" });
  await seedDataDir(`${dir}/data`);
  try {
    await Deno.writeTextFile(`${dir}/agent.ts`, CHAT_AGENT_SOURCE);
    const messages = ["hello", "and another", "a third one", "number four", "the last"];
    const env = {
      DATA_DIR: `${dir}/data`,
      AGENT: `${dir}/agent.ts`,
      MODEL_URL: model.url,
      MODEL: "conversing",
      CLOUD_URL: mocks.cloudUrl,
      RUN_ID: "talk",
      // The goal of a new run; a run that exists already keeps its own.
      GOAL: messages[0],
    };
    const first = await runCli(["run"], env);
    assert.equal(first.code, 4, first.out); // waiting for the next message
    for (let n = 1; n < messages.length; n++) {
      const sent = await runCli(["send", "talk", "--message", messages[n], "--message-id", `m${n}`], env);
      assert.equal(sent.code, 0, sent.out);
      assert.match(sent.out, new RegExp(`^sent {2}run=talk {2}message=${n} {2}message_id=m${n}$`, "m"));
      if (n === 1) {
        // A retried send is one message.
        const again = await runCli(["send", "talk", "--message", messages[n], "--message-id", `m${n}`], env);
        assert.equal(again.code, 0, again.out);
        assert.match(again.out, /message=1 {2}message_id=m1 {2}duplicate=true/);
      }
      if (n === 2) {
        // The third answer's tool call (seq 4): the server is created, the worker dies before the confirm.
        const killed = await runCli(["run"], { ...env, CRASH_AT: "after_call", CRASH_SEQ: "4" });
        assert.equal(killed.code, 137, killed.out);
      }
      const answered = await runCli(["run"], env);
      assert.equal(answered.code, 4, answered.out);
      assert.match(answered.out, new RegExp(`output="${answerText(n, messages[n])}"`));
    }
    const ended = await runCli(["send", "talk", "--end"], env);
    assert.equal(ended.code, 0, ended.out);
    assert.match(ended.out, /^ended {2}run=talk {2}status=done$/m);
    const inspect = await runCli(["inspect", "talk"], env);
    assert.match(inspect.out, /conversation: 5 messages/);
    assert.match(inspect.out, /message 4 {2}id=m4 {2}answered at step 9/);

    // Every answer once, in order.
    const client = await connect({ dataDir: `${dir}/data` });
    try {
      const turns = await client.conversations.answers("talk");
      assert.deepEqual(turns.map((t) => [t.seq, t.text, t.answer, t.answerSeq]), [
        ...messages.map((text, n) => [n, text, answerText(n, text), 2 * n + 1]),
      ]);
      const record = await client.reads.inspect("talk");
      assert.equal(record.run.status, "done");
      assert.equal(record.run.output, answerText(4, messages[4]));
      // Each decided step bought once: one model request per journal row, ten in all.
      assert.deepEqual(record.journal.map((j) => j.llm_attempts), Array(10).fill(1));
      assert.equal(record.effects.find((e) => e.seq === 4)?.remote, "already_done");
    } finally {
      await client.close();
    }
    assert.equal(model.requests.length, 10, "ten decisions, none asked twice");
    // The history the model saw on each turn: exactly the messages and results so far.
    model.requests.forEach((req, i) => {
      const turn = Math.floor(i / 2);
      assert.deepEqual(
        historyOf(req),
        expectedHistory(CHAT_INSTRUCTIONS, messages.slice(0, turn + 1), i % 2 === 1),
        `request ${i}`,
      );
    });
    // One server per message, the crashed call's included.
    const keys = mocks.cloud.created().map((c) => c.key).sort();
    assert.deepEqual(keys, ["talk:0", "talk:2", "talk:4", "talk:6", "talk:8"]);
  } finally {
    await model.close();
    await mocks.close();
    await Deno.remove(dir, { recursive: true });
  }
});
