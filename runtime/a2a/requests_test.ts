import assert from "node:assert/strict";
import { defineAgent } from "../agent/agent.ts";
import { z } from "zod";
import { checkListParams, checkMessage, inputOf, pageToken } from "./requests.ts";
import { A2aError, reasonOf, versionProblem } from "./wire.ts";

const refusal = (kind: string, field?: string) => (err: unknown) => {
  assert.ok(err instanceof A2aError, String(err));
  assert.equal(err.kind, kind);
  if (field !== undefined) assert.equal(err.field, field);
  return true;
};

Deno.test("checkMessage() refuses a message by the field that is wrong", async (t) => {
  const good = { messageId: "m1", role: "ROLE_USER", parts: [{ text: "hi" }] };
  const cases: [string, unknown, string][] = [
    ["no message", undefined, "message"],
    ["no message id", { ...good, messageId: undefined }, "message.messageId"],
    ["a message id with a NUL", { ...good, messageId: "a\u0000b" }, "message.messageId"],
    ["an agent's role", { ...good, role: "ROLE_AGENT" }, "message.role"],
    ["no parts", { ...good, parts: [] }, "message.parts"],
    ["a part that is no object", { ...good, parts: ["hi"] }, "message.parts[0]"],
    ["a task id that is no string", { ...good, taskId: 7 }, "message.taskId"],
  ];
  for (const [name, message, field] of cases) {
    await t.step(
      name,
      () => assert.throws(() => checkMessage({ message }), refusal("InvalidParamsError", field)),
    );
  }
  assert.deepEqual(checkMessage({ message: good }), {
    messageId: "m1",
    taskId: undefined,
    contextId: undefined,
    parts: [{ text: "hi" }],
  });
});

Deno.test("inputOf() joins text parts, reads a data part for an agent with an input schema, and refuses a file", () => {
  const text = defineAgent({ name: "t", tools: [] });
  const typed = defineAgent({ name: "j", tools: [], input: z.strictObject({ order: z.number() }) });
  assert.equal(inputOf(text, [{ text: "a" }, { data: { b: 1 } }]), 'a\n{"b":1}');
  assert.deepEqual(inputOf(typed, [{ data: { order: 7 } }]), { order: 7 });
  assert.deepEqual(inputOf(typed, [{ text: '{"order":7}' }]), { order: 7 });
  assert.throws(
    () => inputOf(text, [{ url: "https://x.test/a.pdf", mediaType: "application/pdf" }]),
    refusal("ContentTypeNotSupportedError", "message.parts[0]"),
  );
});

Deno.test("checkListParams() reports every bad field at once, and reads the page token it gave", () => {
  assert.throws(
    () => checkListParams({ pageSize: 150, historyLength: -5, status: "TASK_STATE_RUNNING" }),
    (err: unknown) => {
      assert.ok(err instanceof A2aError);
      assert.equal(err.field, "pageSize,status,historyLength");
      assert.match(err.message, /'pageSize' must be from 1 to 100: current value is 150/);
      assert.match(err.message, /'status' "TASK_STATE_RUNNING" is no state/);
      return true;
    },
  );
  const p = checkListParams({ pageToken: pageToken(40), pageSize: "10", status: "TASK_STATE_WORKING" });
  assert.deepEqual([p.offset, p.pageSize, p.status, p.includeArtifacts], [
    40,
    10,
    "TASK_STATE_WORKING",
    false,
  ]);
  assert.throws(() => checkListParams({ pageToken: "bogus" }), refusal("InvalidParamsError", "pageToken"));
});

Deno.test("versionProblem() takes 1.0 (a patch too) by header or query, and reads none as 0.3", () => {
  const req = (headers: Record<string, string>, q = "") => new Request(`http://h/a${q}`, { headers });
  assert.equal(versionProblem(req({ "A2A-Version": "1.0" })), undefined);
  assert.equal(versionProblem(req({ "a2a-version": "1.0.1" })), undefined);
  assert.equal(versionProblem(req({}, "?A2A-Version=1.0")), undefined);
  assert.match(versionProblem(req({}))!.message, /is none, which the protocol reads as 0\.3/);
  assert.equal(versionProblem(req({ "A2A-Version": "0.3" }))!.toJsonRpc().code, -32009);
});

Deno.test("an error's reason is its kind in UPPER_SNAKE without Error, and its JSON-RPC code the spec's", () => {
  assert.equal(reasonOf("TaskNotCancelableError"), "TASK_NOT_CANCELABLE");
  const err = new A2aError("TaskNotFoundError", "no such task");
  assert.deepEqual(err.toJsonRpc(), {
    code: -32001,
    message: "no such task",
    data: [{
      "@type": "type.googleapis.com/google.rpc.ErrorInfo",
      reason: "TASK_NOT_FOUND",
      domain: "a2a-protocol.org",
    }],
  });
  assert.equal(err.code, "A2A_TASK_NOT_FOUND");
  assert.equal(err.toRest().error.code, 404);
});
