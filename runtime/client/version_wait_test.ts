import assert from "node:assert/strict";
import { type VersionedRun, versionWait } from "./version_wait.ts";

const run = (over: Partial<VersionedRun>): VersionedRun => ({
  run_id: "r1",
  agent: "notes",
  status: "pending",
  heartbeat_at: null,
  agent_version: "v1",
  may_move: false,
  move_to: null,
  ...over,
});

Deno.test("versionWait() says which version an open run waits for, and what would take it", () => {
  assert.equal(versionWait(run({}), ["notes@", "notes@v1"]), undefined, "a worker of v1 lives");
  const pinned = versionWait(run({}), ["notes@", "notes@v2"])!;
  assert.match(
    pinned,
    /^on notes@v1, which no live worker hosts \(live: notes@v2\): start a worker with the module/,
  );
  assert.match(pinned, /deno task move --agent-name notes --to <version> --run r1/);
  assert.match(
    versionWait(run({ may_move: true }), ["notes@v2"])!,
    /it may move, and a worker of a newer version/,
  );
  assert.match(
    versionWait(run({ move_to: "v3" }), ["notes@v1"])!,
    /^moving to notes@v3, which no live worker/,
  );
  assert.equal(versionWait(run({ move_to: "v3" }), ["notes@v3"]), undefined);
  assert.match(versionWait(run({ agent_version: null }), [])!, /no live worker hosts agent notes/);
  assert.equal(versionWait(run({ agent_version: null }), ["notes@"]), undefined);
});

Deno.test("versionWait() says nothing of a run no worker would take now", () => {
  const held = run({ status: "running", heartbeat_at: new Date(1_000) });
  assert.equal(versionWait(held, []), undefined, "its lease is live");
  assert.match(versionWait(held, [], new Date(2_000))!, /no live worker hosts/, "its lease lapsed");
  for (const status of ["waiting", "blocked", "done", "failed", "cancelled"] as const) {
    assert.equal(versionWait(run({ status }), []), undefined, status);
  }
});
