/**
 * A rule of acting on a decision of its own: which calls are asleep until
 * their time. How one call is sent, settled and approved is proven beside
 * send.ts, settle.ts and approvals.ts, and a step's calls together end to
 * end in harness/ and tests/.
 */

import assert from "node:assert/strict";
import { isAsleep } from "./act.ts";
import { effectRow } from "../testdata/rows.ts";

Deno.test("isAsleep() is true for a call waiting on its remote or failed as in an outage, with a time to go again", () => {
  const call = { tool: "pay", args: {} };
  const at = new Date("2030-01-01T00:00:00Z");
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "waiting", check_at: at })), true);
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "intent", check_at: at })), true);
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "intent", check_at: null })), false, "stranded");
  assert.equal(isAsleep(effectRow("r", 0, call, { status: "confirmed", check_at: at })), false);
  assert.equal(isAsleep(undefined), false);
});
