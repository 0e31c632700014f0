/**
 * Sends racing each other on one conversation, on both stores: each distinct
 * message id is one message with its own seq (1, 2, ... with no gap or
 * repeat), and a retry with an id already used gets that message's seq back.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { bothStoresTest } from "./_pglite.ts";

bothStoresTest(
  "concurrent sends are numbered one after the other, and a retried id is one message",
  async (store) => {
    await store.leases.createRun(
      { runId: "race", agent: "chat", goal: "hi", conversationIdleMs: 60_000 },
      new Date(),
    );
    const client = new Client(store, new SystemClock());
    const ids = Array.from({ length: 24 }, (_, i) => `m${i % 12}`); // every id sent twice, at once
    const sent = await Promise.all(
      ids.map((id) => client.conversations.send("race", `text of ${id}`, { messageId: id })),
    );
    const byId = new Map<string, number[]>();
    for (const s of sent) byId.set(s.messageId, [...(byId.get(s.messageId) ?? []), s.seq]);
    for (const [id, seqs] of byId) assert.equal(new Set(seqs).size, 1, `${id}: one message`);
    assert.deepEqual(
      [...new Set(sent.map((s) => s.seq))].sort((a, b) => a - b),
      Array.from({ length: 12 }, (_, i) => i + 1),
    );
    assert.equal(sent.filter((s) => s.duplicate).length, 12);
    assert.equal((await client.get("race"))?.conversation?.messages, 13);
    const turns = await client.conversations.answers("race");
    assert.deepEqual(turns.map((t) => t.seq), Array.from({ length: 13 }, (_, i) => i));
  },
);
