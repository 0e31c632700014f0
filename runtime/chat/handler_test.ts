import assert from "node:assert/strict";
import { chatHandler } from "./handler.ts";
import { testClient } from "../../tests/_pglite.ts";

Deno.test("a POST answering an approval of another chat's run is refused, and nothing is answered", async () => {
  const client = await testClient();
  const handle = chatHandler({ client });
  try {
    const res = await handle(
      new Request("http://x/api/chat", {
        method: "POST",
        body: JSON.stringify({
          id: "mine",
          trigger: "submit-message",
          messages: [{
            id: "a1",
            role: "assistant",
            parts: [{
              type: "tool-ship",
              toolCallId: "theirs:3",
              state: "approval-responded",
              input: {},
              approval: { id: "theirs:3", approved: true },
            }],
          }],
        }),
      }),
    );
    assert.equal(res?.status, 404);
    const body = await res!.json();
    assert.equal(body.code, "APPROVAL_NOT_FOUND");
    assert.match(body.message, /theirs:3 is not of chat mine/);
  } finally {
    await handle.close();
    await client.close();
  }
});
