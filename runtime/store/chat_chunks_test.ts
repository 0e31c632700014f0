/**
 * The chat chunk log (chat_chunks.ts) on PGlite: batches appended in order
 * and read from an index; a batch that reaches an index written already is
 * refused whole (the first writer wins, nothing of the second lands); the
 * log goes with its run when the run is deleted.
 */

import assert from "node:assert/strict";
import { Store } from "./store.ts";
import { ManualClock } from "../base/clock.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

const store = new Store(await openTestPglite());
await store.applySchema();
const clock = new ManualClock();
Deno.test.afterAll(() => store.client.close());

Deno.test("chat chunks: appended in batches, read from an index, the first writer of an index wins whole", async () => {
  await store.leases.createRun({ runId: "c1", agent: "a", goal: "g" }, clock.now());
  const log = store.chatChunks;
  assert.equal(await log.append("c1", 0, 0, [{ type: "start" }, { type: "start-step" }]), true);
  assert.equal(await log.append("c1", 0, 2, [{ type: "text-start", id: "t" }]), true);
  assert.equal(await log.append("c1", 0, 3, []), true, "an empty batch writes nothing and is not refused");
  // A second writer that followed the turn itself: its batch overlaps index 2, so none of it is written.
  assert.equal(await log.append("c1", 0, 2, [{ type: "x" }, { type: "y" }, { type: "z" }]), false);
  assert.deepEqual(await log.read("c1", 0), [{ type: "start" }, { type: "start-step" }, {
    type: "text-start",
    id: "t",
  }]);
  assert.deepEqual(await log.read("c1", 0, 2), [{ type: "text-start", id: "t" }]);
  assert.deepEqual(await log.read("c1", 0, 9), []);
  assert.deepEqual(await log.read("c1", 1), [], "another turn's log is its own");
  // A chunk's text comes back as written, quotes and a surrogate pair included.
  assert.equal(await log.append("c1", 1, 0, [{ type: "text-delta", id: "t", delta: 'a"b\u{1F600}' }]), true);
  assert.deepEqual(await log.read("c1", 1), [{ type: "text-delta", id: "t", delta: 'a"b\u{1F600}' }]);
  await store.client.query("delete from runs where run_id = 'c1'", []);
  assert.deepEqual(await log.read("c1", 0), [], "the log goes with its run");
});
