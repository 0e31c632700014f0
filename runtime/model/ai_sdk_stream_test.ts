import assert from "node:assert/strict";
import type { LanguageModelV3Content, LanguageModelV3StreamPart } from "npm:@ai-sdk/provider@4.0.38";
import { MockLanguageModelV3 } from "npm:ai@7.0.173/test";
import { ModelError } from "../base/errors.ts";
import type { DecideRequest } from "./transcript.ts";
import { aiSdkPlanner } from "./ai_sdk.ts";

const USAGE = {
  inputTokens: { total: 120, noCache: 20, cacheRead: 100, cacheWrite: 0 },
  outputTokens: { total: 30, text: 10, reasoning: 20 },
};

const request = (onDelta?: (t: string) => void): DecideRequest => ({
  runId: "r-1",
  seq: 0,
  agent: "a",
  transcript: [{ role: "system", text: "Be brief." }, { role: "user", text: "Make a server." }],
  tools: [{
    name: "create_server",
    description: "Create one.",
    parameters: { type: "object", properties: {} },
  }],
  ...(onDelta ? { onDelta } : {}),
});

/** The stream parts a provider would send for `content`: text and reasoning in pieces, calls whole. */
function streamOf(
  content: LanguageModelV3Content[],
  finish: "stop" | "tool-calls",
): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [{ type: "stream-start", warnings: [] }];
  for (const [i, c] of content.entries()) {
    const id = `p${i}`;
    if (c.type === "text" || c.type === "reasoning") {
      parts.push({ type: `${c.type}-start`, id } as LanguageModelV3StreamPart);
      for (const piece of c.text.match(/.{1,4}/gs) ?? []) {
        parts.push({ type: `${c.type}-delta`, id, delta: piece } as LanguageModelV3StreamPart);
      }
      parts.push({
        type: `${c.type}-end`,
        id,
        ...(c.providerMetadata ? { providerMetadata: c.providerMetadata } : {}),
      } as LanguageModelV3StreamPart);
    } else if (c.type === "tool-call") {
      parts.push({ type: "tool-input-start", id: c.toolCallId, toolName: c.toolName });
      parts.push({ type: "tool-input-delta", id: c.toolCallId, delta: c.input });
      parts.push({ type: "tool-input-end", id: c.toolCallId });
      parts.push(c);
    }
  }
  parts.push({ type: "finish", usage: USAGE, finishReason: { unified: finish, raw: finish } });
  return parts;
}

Deno.test("an AI SDK model's streamed answer (doStream) is the decision doGenerate's gives, text passed on as it comes", async (t) => {
  const cases: [string, LanguageModelV3Content[], "stop" | "tool-calls"][] = [
    ["text", [{ type: "text", text: "All done: the server is up and named srv-1." }], "stop"],
    [
      "reasoning, text and a call",
      [
        {
          type: "reasoning",
          text: "It needs a server.",
          providerMetadata: { anthropic: { signature: "sig" } },
        },
        { type: "text", text: "Making one." },
        { type: "tool-call", toolCallId: "c1", toolName: "create_server", input: '{"name":"srv-1"}' },
      ],
      "tool-calls",
    ],
  ];
  for (const [name, content, finish] of cases) {
    await t.step(name, async () => {
      const model = new MockLanguageModelV3({
        doGenerate: { content, finishReason: { unified: finish, raw: finish }, usage: USAGE, warnings: [] },
        doStream: () => Promise.resolve({ stream: ReadableStream.from(streamOf(content, finish)) }),
      });
      const planner = aiSdkPlanner(model);
      const plain = await planner.decide(request());
      const deltas: string[] = [];
      const streamed = await planner.decide(request((d) => deltas.push(d)));
      assert.deepEqual(streamed, plain);
      assert.equal(model.doGenerateCalls.length, 1);
      assert.equal(model.doStreamCalls.length, 1);
      const text = content.filter((c) => c.type === "text").map((c) => c.type === "text" ? c.text : "").join(
        "",
      );
      assert.equal(deltas.join(""), text, "only the answer's text, not the reasoning, is passed on");
      assert.ok(deltas.length > 1);
    });
  }
});

Deno.test("an AI SDK stream that ends without its finish is a transient MODEL_UNREACHABLE", async () => {
  const model = new MockLanguageModelV3({
    doStream: () =>
      Promise.resolve({
        stream: ReadableStream.from<LanguageModelV3StreamPart>([
          { type: "text-start", id: "t" },
          { type: "text-delta", id: "t", delta: "Half" },
        ]),
      }),
  });
  await assert.rejects(aiSdkPlanner(model).decide(request(() => {})), (e) => {
    assert.ok(e instanceof ModelError);
    assert.equal(e.code, "MODEL_UNREACHABLE");
    assert.equal(e.transient, true);
    return true;
  });
});
