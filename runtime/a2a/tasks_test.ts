import assert from "node:assert/strict";
import { artifactsOf, historyOf, stateOf, statusText } from "./tasks.ts";
import type { RunInfo } from "../client/shapes.ts";
import type { ApprovalRow } from "../store/store.ts";

const at = new Date("2026-01-01T00:00:00.000Z");

Deno.test("stateOf() maps each run status to its task state, a waiting run by what it waits for", async (t) => {
  const conv = (idle: boolean) => ({ messages: 2, idle, idleMs: 1000, ended: false });
  const cases: [string, Pick<RunInfo, "status" | "wakeAt" | "conversation">, string][] = [
    ["pending", { status: "pending", wakeAt: null }, "TASK_STATE_SUBMITTED"],
    ["running", { status: "running", wakeAt: null }, "TASK_STATE_WORKING"],
    ["waiting on its remotes", { status: "waiting", wakeAt: at }, "TASK_STATE_WORKING"],
    ["waiting for a person's approval", { status: "waiting", wakeAt: null }, "TASK_STATE_INPUT_REQUIRED"],
    ["a conversation waiting for its next message", {
      status: "waiting",
      wakeAt: at,
      conversation: conv(true),
    }, "TASK_STATE_INPUT_REQUIRED"],
    ["a conversation woken by a message", {
      status: "waiting",
      wakeAt: at,
      conversation: conv(false),
    }, "TASK_STATE_WORKING"],
    ["blocked on a flagged call", { status: "blocked", wakeAt: null }, "TASK_STATE_INPUT_REQUIRED"],
    ["done", { status: "done", wakeAt: null }, "TASK_STATE_COMPLETED"],
    ["failed", { status: "failed", wakeAt: null }, "TASK_STATE_FAILED"],
    ["cancelled", { status: "cancelled", wakeAt: null }, "TASK_STATE_CANCELED"],
  ];
  for (const [name, run, state] of cases) {
    await t.step(name, () => assert.equal(stateOf(run), state));
  }
});

Deno.test("statusText() says which call waits for a person and how to answer it", () => {
  const run = { status: "waiting", wakeAt: null, output: null, error: null } as unknown as RunInfo;
  const ask = { tool: "refund", args: { order: 7 }, idempotency_key: "r1:2" } as unknown as ApprovalRow;
  assert.equal(
    statusText(run, [ask]),
    `Waiting for a person to approve refund {"order":7} (key r1:2): 'deno task approve KEY' or the page answers it`,
  );
  assert.equal(statusText({ ...run, status: "failed", error: "MODEL_GAVE_UP: x" }, []), "MODEL_GAVE_UP: x");
  assert.equal(statusText({ ...run, status: "running" }, []), undefined);
});

Deno.test("a conversation's history is each message then its answer; its artifacts one per answered message", () => {
  const turns = [
    { seq: 0, messageId: null, text: "hi", sentAt: at, answer: "hello", answerSeq: 1, answeredAt: at },
    { seq: 1, messageId: "m2", text: "more", sentAt: at, answer: null, answerSeq: null, answeredAt: null },
  ];
  assert.deepEqual(historyOf("c", turns).map((m) => [m.messageId, m.role, m.parts[0].text]), [
    ["c/message-0", "ROLE_USER", "hi"],
    ["c/answer-0", "ROLE_AGENT", "hello"],
    ["m2", "ROLE_USER", "more"],
  ]);
  assert.deepEqual(artifactsOf(turns), [{
    artifactId: "answer-0",
    name: "answer",
    parts: [{ text: "hello" }],
  }]);
});
