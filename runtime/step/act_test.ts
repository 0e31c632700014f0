/**
 * The parts of acting on a decision that are rules of their own: the hash an
 * approval is bound to, and which calls are asleep until their time. How one
 * call is sent and settled is proven beside send.ts and settle.ts, and a
 * step's calls together end to end in harness/ and tests/.
 */

import assert from "node:assert/strict";
import { isAsleep } from "./act.ts";
import { argsHash } from "./approvals.ts";
import { effectRow } from "../testdata/rows.ts";

Deno.test("argsHash() is the sha-256 of the canonical JSON: key order at any depth never changes it, a value does", async () => {
  const a = await argsHash({ to: "ada", cents: 5, meta: { b: [1, { y: 2, x: 1 }], a: null } });
  const b = await argsHash({ meta: { a: null, b: [1, { x: 1, y: 2 }] }, cents: 5, to: "ada" });
  assert.equal(a, b);
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.notEqual(await argsHash({ to: "ada", cents: 6, meta: { b: [1, { y: 2, x: 1 }], a: null } }), a);
  assert.notEqual(await argsHash([1, 2]), await argsHash([2, 1]), "an array's order is its value");
  // The canonical text of a string is JSON's: no way to make two different values collide by quoting.
  assert.notEqual(await argsHash({ a: "b,c" }), await argsHash({ a: "b", c: null } as never));
});

Deno.test("isAsleep() is true for a call waiting on its remote or failed as in an outage, with a time to go again", () => {
  const call = { tool: "pay", args: {} };
  const at = new Date("2030-01-01T00:00:00Z");
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "waiting", check_at: at })), true);
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "intent", check_at: at })), true);
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "intent", check_at: null })), false, "stranded");
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "confirmed", check_at: at })), false);
  assert.equal(isAsleep(undefined), false);
});
