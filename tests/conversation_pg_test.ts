/**
 * A conversation on PostgreSQL under the supervisor: messages sent with
 * `deno task send` from other processes (one of them retried with its id),
 * the worker SIGKILLed in the middle of the third answer's tool call (the
 * supervisor starts another, which takes the run over), a message sent while
 * the run works (queued, then answered after the current answer), and the
 * same checks as on the embedded default: every answer once, the history
 * exact on every turn, each decided step bought once, one server per message.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { parseLine, Proc, runCli, startSupervisor, until } from "../harness/procs.ts";
import {
  answerText,
  CHAT_AGENT_SOURCE,
  CHAT_INSTRUCTIONS,
  expectedHistory,
  historyOf,
  serveChatModel,
} from "./_chat_model.ts";
import { pgTest } from "./_pg.ts";

pgTest(
  "a conversation under the supervisor: sends from other processes, a retried send, a kill mid-call, a queued message",
  async (pg) => {
    const model = serveChatModel();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "conversation-pg-" });
    const client = new Client(pg.store, new SystemClock());
    let sup: Proc | undefined;
    try {
      await Deno.writeTextFile(`${dir}/agent.ts`, CHAT_AGENT_SOURCE);
      const env = {
        DATABASE_URL: pg.url,
        AGENT: `${dir}/agent.ts`,
        MODEL_URL: model.url,
        MODEL: "conversing",
        CLOUD_URL: mocks.cloudUrl,
      };
      sup = startSupervisor({ ...env, WORKERS: "1" });
      const messages = ["hello", "and another", "a third one", "sent while it works", "the last"];
      await pg.store.leases.createRun(
        { runId: "talk", agent: "chat", goal: messages[0], conversationIdleMs: 600_000 },
        new Date(),
      );
      assert.equal((await client.wait("talk", { timeoutMs: 60_000 })).output, answerText(0, messages[0]));

      // Message 1 from another process, which waits for its answer; then the same send retried.
      const one = await runCli(
        ["send", "talk", "--message", messages[1], "--message-id", "m1", "--wait"],
        env,
      );
      assert.equal(one.code, 0, one.out);
      assert.match(one.out, /^sent {2}run=talk {2}message=1 {2}message_id=m1$/m);
      assert.match(one.out, new RegExp(`^ {2}answer: ${answerText(1, messages[1])}$`, "m"));
      const retried = await runCli(["send", "talk", "--message", messages[1], "--message-id", "m1"], env);
      assert.equal(retried.code, 0, retried.out);
      assert.match(retried.out, /message=1 {2}message_id=m1 {2}duplicate=true/);

      // Message 2: its server request is slow, and the worker is SIGKILLed while it is in flight.
      mocks.cloud.setFaults({ path: "/v1/servers", delay_ms: 1500 });
      const two = await runCli(["send", "talk", "--message", messages[2], "--message-id", "m2"], env);
      assert.equal(two.code, 0, two.out);
      await sup.waitFor((l) => {
        const e = parseLine(l);
        return e?.event === "calling" && e.key === "talk:4";
      }, "the third answer's tool call");
      const pid = Number(sup.events("worker-started").at(-1)!.pid);
      Deno.kill(pid, "SIGKILL");
      // Message 3 while the run works on message 2 (its worker dead, its call not confirmed): queued.
      const busy = await client.get("talk");
      assert.notEqual(busy?.conversation?.idle, true, "the run is at work on message 2");
      const three = await runCli(["send", "talk", "--message", messages[3], "--message-id", "m3"], env);
      assert.equal(three.code, 0, three.out);
      assert.match(three.out, /message=3/);
      // wait() returns the answer to the latest message: message 3, answered after message 2.
      const after = await client.wait("talk", { timeoutMs: 60_000 });
      assert.equal(after.output, answerText(3, messages[3]));
      mocks.cloud.setFaults({ path: "/v1/servers", delay_ms: 0 });

      // Message 4 through the client in this process.
      assert.equal((await client.conversations.send("talk", messages[4], { messageId: "m4" })).seq, 4);
      await until(async () => (await client.get("talk"))?.conversation?.messages === 5, "message 4 counted");
      assert.equal((await client.wait("talk", { timeoutMs: 60_000 })).output, answerText(4, messages[4]));
      const ended = await runCli(["send", "talk", "--end"], env);
      assert.equal(ended.code, 0, ended.out);

      const turns = await client.conversations.answers("talk");
      assert.deepEqual(
        turns.map((t) => [t.seq, t.text, t.answer, t.answerSeq]),
        messages.map((text, n) => [n, text, answerText(n, text), 2 * n + 1]),
      );
      const record = await client.reads.inspect("talk");
      assert.equal(record.run.status, "done");
      assert.deepEqual(record.journal.map((j) => j.llm_attempts), Array(10).fill(1), "each step bought once");
      assert.equal(model.requests.length, 10);
      model.requests.forEach((req, i) => {
        const turn = Math.floor(i / 2);
        assert.deepEqual(
          historyOf(req),
          expectedHistory(CHAT_INSTRUCTIONS, messages.slice(0, turn + 1), i % 2 === 1),
          `request ${i}`,
        );
      });
      assert.deepEqual(mocks.cloud.created().map((c) => c.key).sort(), [
        "talk:0",
        "talk:2",
        "talk:4",
        "talk:6",
        "talk:8",
      ]);
      // The supervisor saw its worker die and the run resumed by the next one.
      assert.ok(sup.events("worker-exited").length >= 1, sup.lines.slice(-40).join("\n"));
      const taken = sup.events("message-taken").map((e) => e.message);
      assert.ok(taken.includes("3"), "message 3 taken after message 2's answer, in the same worker turn");
    } finally {
      await sup?.close();
      await model.close();
      await mocks.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
