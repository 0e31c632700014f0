/**
 * The parts of acting on a decision that are rules of their own: the hash an
 * approval is bound to, which calls are asleep until their time, and whose
 * retry policy a call follows. How a step's calls are sent, settled, waited
 * on and given up on is proven end to end in harness/ and tests/.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { isAsleep } from "./act.ts";
import { argsHash } from "./approvals.ts";
import { toolPolicy } from "./settle.ts";
import { DEFAULT_RETRY } from "../base/retry.ts";
import { defineTool } from "../agent/tools.ts";
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

Deno.test("toolPolicy() takes the tool's own retry fields over its agent's, and only those it sets", () => {
  const tool = defineTool({
    name: "pay",
    description: "Pays.",
    args: z.strictObject({}),
    run: () => Promise.resolve({ result: "ok" }),
    retry: { horizonMs: 60_000 },
  });
  const agentPolicy = { ...DEFAULT_RETRY, horizonMs: 3_600_000, backoffBaseMs: 250 };
  const policy = toolPolicy({ retry: agentPolicy }, tool);
  assert.equal(policy.horizonMs, 60_000);
  assert.equal(policy.backoffBaseMs, 250, "what the tool leaves unset is its agent's");
});
