/**
 * Identifiers from outside (issue 34, item 6), through the client on both
 * stores: every id a caller hands it (a run id, a message id, a tool call's
 * key, who acts, a name a list is filtered by) is checked by the one rule of
 * runtime/base/ids.ts before any statement is sent, refused with its code, and
 * two different ids are never stored as one.
 */

import assert from "node:assert/strict";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { ClientError } from "../runtime/base/errors.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import { Store } from "../runtime/store/store.ts";
import { bothStoresTest } from "./_pglite.ts";

const model = { describe: "none", decide: () => Promise.resolve({ kind: "done" as const, text: "ok" }) };
const chat = defineAgent({ name: "chat", tools: [], conversation: { idleMs: 600_000 }, model });
const plain = defineAgent({ name: "plain", tools: [], model });

bothStoresTest(
  "two different lone-surrogate message ids are refused, so the second message is never taken for the first",
  async (store) => {
    const client = new Client(store);
    await client.start(chat, { runId: "sur-1", input: "hello" });
    // Encoded as UTF-8 both would be "id-\ufffd": the second send came back `duplicate: true`, its text dropped.
    for (
      const [messageId, text] of [["id-\ud800", "first message"], ["id-\udbff", "second, different message"]]
    ) {
      await assert.rejects(
        client.conversations.send("sur-1", text, { messageId }),
        (err: ClientError) => {
          assert.equal(err.code, "MESSAGE_INVALID", String(err));
          assert.match(
            err.message,
            /^The message id "id-\\ud[8b][0f]{2}" is refused: it holds a lone surrogate/,
          );
          return true;
        },
      );
    }
    // What they would have become is refused too: a lossy decoding upstream leaves it.
    await assert.rejects(client.conversations.send("sur-1", "third", { messageId: "id-\ufffd" }), {
      code: "MESSAGE_INVALID",
    });
    assert.deepEqual(
      (await client.conversations.answers("sur-1")).map((m) => m.seq),
      [0],
      "nothing was stored",
    );
  },
);

bothStoresTest(
  "ids that differ only in normalization, a trailing space or a code point past the BMP stay distinct messages",
  async (store) => {
    const client = new Client(store);
    await client.start(chat, { runId: "distinct-1", input: "hello" });
    const ids = ["caf\u00e9", "cafe\u0301", "m", "m ", "m\u{10FFFF}", "m\u{10FFFE}", "m\uFFFF", "m\u202e"];
    const seqs = [];
    for (const messageId of ids) {
      const sent = await client.conversations.send("distinct-1", `text of ${JSON.stringify(messageId)}`, {
        messageId,
      });
      assert.equal(sent.duplicate, false, JSON.stringify(messageId));
      seqs.push(sent.seq);
    }
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7, 8]);
    const turns = (await client.conversations.answers("distinct-1")).slice(1);
    assert.deepEqual(turns.map((m) => m.messageId), ids, "each id read back as it was sent");
    // A retry is still one message: its own seq, not another's.
    for (const [i, messageId] of ids.entries()) {
      const again = await client.conversations.send("distinct-1", "again", { messageId });
      assert.deepEqual([again.seq, again.duplicate], [i + 1, true], JSON.stringify(messageId));
    }
  },
);

bothStoresTest(
  "every client method refuses a NUL, a lone surrogate or U+FFFD in an id with its code, before any statement",
  async (store, t) => {
    const counted = new CountingClient(store.client);
    const client = new Client(new Store(counted));
    await client.start(plain, { runId: "r-1", input: "x" });
    for (const bad of ["a\u0000b", "a\ud800b", "a\ufffdb"]) {
      const key = `${bad}:0`;
      const calls: [string, () => Promise<unknown>, ClientError["code"]][] = [
        // A run id.
        ["get", () => client.get(bad), "BAD_RUN_ID"],
        ["wait", () => client.wait(bad), "BAD_RUN_ID"],
        ["stream", () => client.stream(bad).next(), "BAD_RUN_ID"],
        ["inspect", () => client.reads.inspect(bad), "BAD_RUN_ID"],
        ["children", () => client.reads.children(bad), "BAD_RUN_ID"],
        ["timeline", () => client.reads.timeline(bad, { steps: { last: 5 }, maxChars: 100 }), "BAD_RUN_ID"],
        ["wholeValue", () => client.reads.wholeValue(bad, "input"), "BAD_RUN_ID"],
        ["cancel", () => client.operators.cancel(bad), "BAD_RUN_ID"],
        ["reopen", () => client.operators.reopen(bad), "BAD_RUN_ID"],
        ["approvals", () => client.operators.approvals(bad), "BAD_RUN_ID"],
        ["send", () => client.conversations.send(bad, "hi"), "BAD_RUN_ID"],
        ["answers", () => client.conversations.answers(bad), "BAD_RUN_ID"],
        ["endConversation", () => client.conversations.endConversation(bad), "BAD_RUN_ID"],
        ["flagged by run", () => client.operators.flagged({ runId: bad }), "BAD_RUN_ID"],
        ["overview of runs", () => client.reads.overview({ runIds: ["r-1", bad] }), "BAD_RUN_ID"],
        // A tool call's key.
        ["resolve", () => client.operators.resolve(key, { action: "retry" }), "ID_INVALID"],
        ["settleCall", () => client.operators.settleCall(key, { result: 1 }), "ID_INVALID"],
        ["approve", () => client.operators.approve(key), "ID_INVALID"],
        ["deny", () => client.operators.deny(key), "ID_INVALID"],
        // Who acts.
        ["cancel by", () => client.operators.cancel("r-1", { by: bad }), "ID_INVALID"],
        [
          "resolve by",
          () => client.operators.resolve("r-1:0", { action: "retry" }, { by: bad }),
          "ID_INVALID",
        ],
        [
          "settleCall by",
          () => client.operators.settleCall("r-1:0", { result: 1 }, { by: bad }),
          "ID_INVALID",
        ],
        ["approve by", () => client.operators.approve("r-1:0", { by: bad }), "ID_INVALID"],
        ["deny by", () => client.operators.deny("r-1:0", { by: bad }), "ID_INVALID"],
        [
          "resolveMany by",
          () => client.operators.resolveMany({ runId: "r-1" }, { action: "retry" }, { expect: 1, by: bad }),
          "ID_INVALID",
        ],
        // A message's id.
        [
          "send's message id",
          () => client.conversations.send("r-1", "hi", { messageId: bad }),
          "MESSAGE_INVALID",
        ],
        // What a list is filtered by.
        ["list by agent", () => client.reads.list({ agent: bad }), "FILTER_INVALID"],
        ["list by search", () => client.reads.list({ search: bad }), "FILTER_INVALID"],
        ["overview by agent", () => client.reads.overview({ agent: bad }), "FILTER_INVALID"],
        ["overview by search", () => client.reads.overview({ search: bad }), "FILTER_INVALID"],
        ["flagged by tool", () => client.operators.flagged({ tool: bad }), "FILTER_INVALID"],
      ];
      for (const [what, call, code] of calls) {
        await t.step(`${what} ${JSON.stringify(bad)}`, async () => {
          counted.reset();
          await assert.rejects(call(), (err: Error) => {
            assert.ok(err instanceof ClientError, `a ClientError, not ${err}`);
            assert.equal(err.code, code, err.message);
            return true;
          });
          assert.deepEqual(counted.counts, new Map(), "refused before any statement");
        });
      }
    }
    // Nothing was cancelled, settled or sent by any of them.
    assert.equal((await client.get("r-1"))?.status, "pending");
  },
);

bothStoresTest(
  "a cancel's reason with a NUL or a lone surrogate is written out, not a database error",
  async (store) => {
    const client = new Client(store);
    await client.start(plain, { runId: "why-1", input: "x" });
    const run = await client.operators.cancel("why-1", { by: "ops", reason: "a\u0000b \ud800" });
    assert.equal(run.status, "cancelled");
    assert.equal(run.error, "cancelled by ops: a\\u0000b \ufffd");
  },
);
