/**
 * The stream channel (`notify.ts`): its name is the schema's, made a plain
 * identifier of at most 63 bytes and read once; a payload reaches every
 * listener, in the order sent, until that listener stops; a payload of the
 * sender's largest size fits under the server's 8000-byte limit; and a driver
 * that cannot listen is refused with `STREAM_UNSUPPORTED`. On PGlite and
 * PostgreSQL.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { StoreError } from "../base/errors.ts";
import { CountingClient } from "./counting.ts";
import type { SqlClient } from "./driver.ts";
import { PAYLOAD_TEXT_MAX, StreamChannel } from "./notify.ts";
import { guarded } from "../testdata/guarded.ts";

/** Gathers payloads; `wait()` resolves once `done(got)` holds, failing after `guardMs` should it never. */
function collect(done: (got: string[]) => boolean, guardMs = 10_000) {
  const got: string[] = [];
  let resolve = () => {};
  const arrived = new Promise<void>((r) => resolve = r);
  const onPayload = (p: string) => {
    got.push(p);
    if (done(got)) resolve();
  };
  // Only a failure waits out the bound: on success the payload ends the wait first.
  const wait = () => guarded(arrived, () => `Expected payloads (got ${got})`, guardMs);
  return { got, onPayload, wait };
}

bothStoresTest(
  "the stream channel: named after the schema, one payload to every listener",
  async (store, t) => {
    await t.step("the name is the schema's, read once however often it is asked for", async () => {
      const counting = new CountingClient(store.client);
      const channel = new StreamChannel(counting);
      const [{ schema }] = await store.client.query<{ schema: string }>(`select current_schema() as schema`);
      assert.equal(await channel.channel(), `ar_stream_${schema}`);
      assert.equal(await channel.channel(), `ar_stream_${schema}`);
      await channel.notify("nobody listens");
      assert.deepEqual(Object.fromEntries(counting.counts), { "stream-channel": 1, "notify-stream": 1 });
    });

    await t.step("payloads arrive in the order sent, and stop at the listener that stopped", async () => {
      const stays = collect((got) => got.at(-1) === "end");
      const leaves = collect((got) => got.at(-1) === "leaves now");
      const stopStays = await store.stream.listen(stays.onPayload);
      const stopLeaves = await store.stream.listen(leaves.onPayload);
      try {
        await store.stream.notify("one");
        await store.stream.notify("two");
        await store.stream.notify("leaves now");
        await leaves.wait();
        await stopLeaves();
        await store.stream.notify("three");
        await store.stream.notify("end");
        await stays.wait();
      } finally {
        await stopStays();
      }
      assert.deepEqual(stays.got, ["one", "two", "leaves now", "three", "end"]);
      // Delivered in commit order on one connection: had it still listened, `end` would be in.
      assert.deepEqual(leaves.got, ["one", "two", "leaves now"]);
    });

    await t.step("a payload of the sender's largest size fits; one of 8000 bytes is refused", async () => {
      // Every character at its longest in JSON: six bytes (`\u0001`).
      const largest = JSON.stringify({ text: "\u0001".repeat(PAYLOAD_TEXT_MAX), seq: 999_999 });
      assert.ok(new TextEncoder().encode(largest).length > 6 * PAYLOAD_TEXT_MAX);
      const one = collect((got) => got.length === 1);
      const stop = await store.stream.listen(one.onPayload);
      try {
        await store.stream.notify(largest);
        await one.wait();
      } finally {
        await stop();
      }
      assert.equal(one.got[0], largest);
      await assert.rejects(store.stream.notify("x".repeat(8000)), /payload string too long/);
    });

    await t.step({
      name: "a schema name with capitals and punctuation is made plain and cut at 63 bytes (PGlite only)",
      // PGlite has one session, so setting its search_path changes the schema of every statement after;
      // on the PostgreSQL pool it would change one connection of several.
      ignore: !store.client.describe.startsWith("pglite"),
      fn: async () => {
        const long = "Sales-Team.EU " + "x".repeat(49);
        try {
          for (const [schema, channel] of [["Sales-Team.EU", "ar_stream_sales_team_eu"], [long, null]]) {
            await store.client.exec(`create schema "${schema}"; set search_path to "${schema}"`);
            const name = await new StreamChannel(store.client).channel();
            assert.equal(name, channel ?? `ar_stream_sales_team_eu_${"x".repeat(39)}`);
            assert.match(name, /^[a-z0-9_]{1,63}$/);
          }
        } finally {
          await store.client.exec(`set search_path to agent_runtime`);
        }
      },
    });
  },
);

Deno.test("a failed read of the channel's name is not kept, and a driver without listen is refused", async () => {
  let reads = 0;
  const client: SqlClient = {
    describe: "no-listen",
    query: <T>() =>
      ++reads === 1
        ? Promise.reject(new Error("connection reset"))
        : Promise.resolve([{ channel: "ar_stream_x" }] as T[]),
    run: () => Promise.resolve(0),
    exec: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
  const channel = new StreamChannel(client);
  await assert.rejects(channel.channel(), /connection reset/);
  assert.equal(await channel.channel(), "ar_stream_x");
  assert.equal(reads, 2);
  await assert.rejects(
    channel.listen(() => {}),
    (e: unknown) =>
      e instanceof StoreError && e.code === "STREAM_UNSUPPORTED" && e.message.includes("no-listen"),
  );
});
