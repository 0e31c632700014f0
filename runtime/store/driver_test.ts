/**
 * The driver interface (`driver.ts`) is types, and one function:
 * `listenThrough`, what a wrapper's `listen` passes on to. It hands the
 * channel and callback to the driver's own `listen` and gives back that
 * driver's unsubscribe; a driver without `listen` is refused with a rejected
 * promise (never a throw) carrying `STREAM_UNSUPPORTED`, naming the driver and
 * what to use instead. Then a payload sent on the real drivers (PGlite,
 * PostgreSQL) reaches a listener through two wrappers, and stops once it
 * unsubscribes.
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import { StoreError } from "../base/errors.ts";
import { CountingClient } from "./counting.ts";
import { listenThrough, type SqlClient } from "./driver.ts";
import { guarded } from "../testdata/guarded.ts";

/** A driver that answers nothing, with or without `listen`. */
function fakeDriver(describe: string, listen?: SqlClient["listen"]): SqlClient {
  return {
    describe,
    query: () => Promise.resolve([]),
    run: () => Promise.resolve(0),
    exec: () => Promise.resolve(),
    close: () => Promise.resolve(),
    ...(listen ? { listen } : {}),
  };
}

Deno.test("listenThrough() hands the channel and callback to the driver, and returns its unsubscribe", async () => {
  const seen: [string, (p: string) => void][] = [];
  const unsubscribe = () => Promise.resolve();
  const driver = fakeDriver("fake:listens", (channel, onPayload) => {
    seen.push([channel, onPayload]);
    return Promise.resolve(unsubscribe);
  });
  const onPayload = (_: string) => {};
  assert.equal(await listenThrough(driver, "ch", onPayload), unsubscribe);
  assert.equal(await listenThrough(new CountingClient(driver), "ch2", onPayload), unsubscribe);
  assert.deepEqual(seen, [["ch", onPayload], ["ch2", onPayload]]);
});

Deno.test("listenThrough() refuses a driver without listen with a rejected promise, naming it", async () => {
  for (const client of [fakeDriver("fake:deaf"), new CountingClient(fakeDriver("fake:deaf"))]) {
    let listening: Promise<unknown> | undefined;
    assert.doesNotThrow(() => listening = listenThrough(client, "ch", () => {}), "a promise, not a throw");
    await assert.rejects(listening!, (e: unknown) => {
      assert.ok(e instanceof StoreError);
      assert.equal(e.code, "STREAM_UNSUPPORTED");
      assert.match(e.message, /^The store fake:deaf cannot listen for notifications/);
      assert.match(e.message, /use the PostgreSQL or PGlite driver \(or a wrapper that passes listen on\)$/);
      return true;
    });
  }
});

bothStoresTest("a payload reaches a listener through wrappers, until it unsubscribes", async (store) => {
  const wrapped = new CountingClient(new CountingClient(store.client));
  const got: string[] = [];
  let arrived = Promise.withResolvers<void>();
  const stop = await listenThrough(wrapped, "driver_test", (p) => {
    got.push(p);
    arrived.resolve();
  });
  const notify = (p: string) => store.client.query(`select pg_notify('driver_test', $1)`, [p]);
  await notify("one");
  await guarded(arrived.promise, "payload one");
  await stop();
  // A listener still subscribed sees what is sent after: once it has, the one that stopped would have too.
  arrived = Promise.withResolvers<void>();
  const stopWitness = await store.client.listen!("driver_test", () => arrived.resolve());
  await notify("two");
  await guarded(arrived.promise, "payload two");
  await stopWitness();
  assert.deepEqual(got, ["one"]);
});
