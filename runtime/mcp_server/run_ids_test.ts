import assert from "node:assert/strict";
import { RUN_ID_PATTERN } from "../base/ids.ts";
import { IDEMPOTENCY_KEY_META, keyedRunId, keyOf, windowRunIds } from "./run_ids.ts";

Deno.test("keyOf() reads the runtime's _meta field first, then idempotencyKey, and none is undefined", () => {
  assert.equal(keyOf({ [IDEMPOTENCY_KEY_META]: "k-1", idempotencyKey: "k-2" }), "k-1");
  assert.equal(keyOf({ idempotencyKey: "k-2" }), "k-2");
  assert.equal(keyOf({ progressToken: 3 }), undefined);
  assert.equal(keyOf(undefined), undefined);
});

Deno.test("keyOf() refuses a key that is no text by the id rule, naming the field", async (t) => {
  for (
    const [name, value] of [["a number", 42], ["empty", ""], ["a NUL", "a\u0000b"], [
      "too long",
      "k".repeat(201),
    ]] as const
  ) {
    await t.step(name, () => {
      assert.throws(() => keyOf({ idempotencyKey: value }), (err: Error & { code?: string }) => {
        assert.equal(err.code, "IDEMPOTENCY_KEY_INVALID");
        assert.match(err.message, /_meta\["idempotencyKey"\]/);
        return true;
      });
    });
  }
});

Deno.test("keyedRunId() is one valid run id per agent and key, whatever the key holds", () => {
  const long = "a".repeat(64);
  for (const [agent, key] of [["notes", "k-1"], [long, "x:y/z é ✓"], ["a.b", "k".repeat(200)]]) {
    const id = keyedRunId(agent, key);
    assert.match(id, RUN_ID_PATTERN);
    assert.equal(keyedRunId(agent, key), id, "the same agent and key give the same run");
  }
  assert.notEqual(keyedRunId("notes", "k-1"), keyedRunId("notes", "k-2"));
  assert.notEqual(keyedRunId("notes", "k-1"), keyedRunId("other", "k-1"));
});

Deno.test("windowRunIds() gives one run per client, agent and arguments in a window, and the window before's as previous", () => {
  const call = { client: "claude-ai", agent: "notes", args: { goal: "hi", n: 1 } };
  const a = windowRunIds(call, 60_000 * 10 + 5, 60_000);
  const b = windowRunIds({ ...call, args: { n: 1, goal: "hi" } }, 60_000 * 11 - 1, 60_000);
  assert.deepEqual(a, b, "key order does not matter; the same window is the same run");
  const next = windowRunIds(call, 60_000 * 11, 60_000);
  assert.equal(next.previous, a.current);
  assert.notEqual(next.current, a.current);
  assert.notEqual(windowRunIds({ ...call, client: "other" }, 600_005, 60_000).current, a.current);
  assert.notEqual(windowRunIds({ ...call, args: { goal: "hi", n: 2 } }, 600_005, 60_000).current, a.current);
  assert.match(a.current, RUN_ID_PATTERN);
});
