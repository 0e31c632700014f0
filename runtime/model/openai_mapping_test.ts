import assert from "node:assert/strict";
import { z } from "zod";
import { buildTranscript } from "../step/history.ts";
import type { Planner } from "./planner.ts";
import { effectRow, journalRow } from "../testdata/rows.ts";
import { defineTool, type Json, ToolRegistry } from "../agent/tools.ts";
import type { TranscriptMessage } from "./transcript.ts";
import { chatMessages, OpenAIPlanner, openAITools, parseCompletion } from "./openai.ts";

const ok = () => Promise.resolve({ result: "x" });
const REGISTRY = new ToolRegistry([
  defineTool({
    name: "create_server",
    description: "Create a server.",
    args: z.strictObject({ name: z.string(), spec: z.enum(["small", "large"]) }),
    run: ok,
  }),
  defineTool({
    name: "create_database",
    description: 'Create a database \u2014 "managed".',
    args: z.strictObject({
      name: z.string(),
      engine: z.literal("postgres"),
      size_gb: z.int().min(1).max(100),
    }),
    run: ok,
  }),
  defineTool({
    name: "create_dns_record",
    description: "Point a hostname at a target.",
    args: z.strictObject({
      hostname: z.string(),
      record_type: z.enum(["A", "CNAME"]),
      target: z.string().optional(),
    }),
    run: ok,
  }),
]);

const INSTRUCTIONS = "You provision infrastructure.\nCall one tool per step.";

/**
 * Six decided steps and a seventh being decided: a result, a failed call, a
 * denied call, a flagged call a person resolved, a flagged call still
 * unknown, a decision never acted on, and two refused answers.
 */
function wireState() {
  const run = "wire-1";
  const calls: Array<{ tool: string; args: Json }> = [
    { tool: "create_server", args: { name: "srv-1", spec: "small" } },
    { tool: "create_database", args: { name: "db-2", engine: "postgres", size_gb: 10 } },
    { tool: "create_server", args: { name: "srv-3", spec: "large" } },
    {
      tool: "create_dns_record",
      args: { hostname: "app-4.example.test", record_type: "CNAME", target: "srv-1" },
    },
    { tool: "create_database", args: { name: "db-5", engine: "postgres", size_gb: 1 } },
    { tool: "create_server", args: { name: 'srv-\u00e9\u2028"6"', spec: "small" } },
  ];
  const journal = new Map(calls.map((call, seq) => [seq, journalRow(run, seq, call)]));
  journal.set(
    6,
    journalRow(run, 6, null, [
      {
        code: "UNKNOWN_TOOL",
        message:
          'Unknown tool "delete_everything". Available tools: create_server, create_database, create_dns_record',
      },
      {
        code: "MODEL_MULTIPLE_TOOLS",
        message: "The model asked for 2 tool calls at once; exactly one per step is allowed",
      },
    ]),
  );
  const effects = new Map([
    effectRow(run, 0, calls[0], { result: "srv-1", remote: "created" }),
    effectRow(run, 1, calls[1], {
      status: "failed",
      error: "TOOL_PERMANENT: POST /databases answered HTTP 422: quota exceeded",
      attempts: 2,
    }),
    effectRow(run, 2, calls[2], { status: "failed", error: "denied by alice: too expensive", attempts: 0 }),
    effectRow(run, 3, calls[3], {
      result: { id: "dns-9", note: "made by hand \u2713 </script>" },
      remote: "resolved",
      resolved_by: "bob",
      error: "flagged: unknown outcome",
    }),
    effectRow(run, 4, calls[4], {
      status: "flagged",
      error: "the remote takes no idempotency key",
      confirmed_at: null,
    }),
  ].map((e) => [e.seq, e]));
  return {
    goal: "Provision a server, a database and a DNS record for \u201capp\u201d \u{1F680}",
    journal,
    effects,
  };
}

/** A planner whose server records each request body as sent and answers "ok". */
function recording() {
  const bodies: string[] = [];
  const planner = new OpenAIPlanner({
    url: "http://model.test/v1",
    model: "gpt-4o-mini",
    fetch: async (req) => {
      bodies.push(await req.text());
      return Response.json({ choices: [{ message: { role: "assistant", content: "ok" } }] });
    },
  });
  return { planner, bodies };
}

Deno.test("the request body for a history with refusals, a failure, a denial and flagged calls is byte for byte bb7ef9f's, but for the re-ask's words (#24)", async () => {
  // Captured from bb7ef9f (history.ts buildMessages, ToolRegistry.toOpenAI, OpenAIPlanner) for this state;
  // #24 changed the re-ask's sentence (steps may hold several calls), in both refusals.
  const capped = await Deno.readTextFile(
    new URL("./testdata/bb7ef9f_history_body_capped.txt", import.meta.url),
  );
  const uncapped = await Deno.readTextFile(new URL("./testdata/bb7ef9f_history_body.txt", import.meta.url));
  const { planner, bodies } = recording();
  const question = {
    runId: "wire-1",
    seq: 6,
    transcript: buildTranscript(wireState(), 6, INSTRUCTIONS),
    tools: REGISTRY.descriptions(),
  };
  await planner.decide({ ...question, agent: "provision", maxOutputTokens: 200 });
  await planner.decide(question);
  assert.equal(bodies[0], capped);
  assert.equal(bodies[1], uncapped);
  // bb7ef9f reserved from JSON.stringify(messages).length + JSON.stringify(tools).length: 3422 here,
  // less the two re-ask sentences' 12 characters each.
  assert.equal(planner.promptChars(question), 3398);
  const sent = JSON.parse(uncapped) as { messages: unknown[]; tools: unknown[] };
  assert.equal(
    planner.promptChars(question),
    JSON.stringify(sent.messages).length + JSON.stringify(sent.tools).length,
  );
});

Deno.test("OpenAIPlanner satisfies Planner, estimating its prompt as the characters of what it sends", () => {
  const { planner } = recording();
  const asPlanner: Planner = planner;
  const question = { transcript: [{ role: "user" as const, text: "go" }], tools: REGISTRY.descriptions() };
  assert.equal(
    asPlanner.promptChars?.(question),
    JSON.stringify([{ role: "user", content: "go" }]).length +
      JSON.stringify(openAITools(REGISTRY.descriptions())).length,
  );
});

Deno.test("chatMessages() maps each neutral message to its chat-completions form", () => {
  const transcript: TranscriptMessage[] = [
    { role: "system", text: "be brief" },
    { role: "user", text: "go" },
    {
      role: "assistant",
      text: "Two at once.",
      calls: [{ id: "call_0", name: "a", args: { x: 1 } }, { id: "c1", name: "b", args: null }],
    },
    { role: "tool", callId: "call_0", name: "a", failed: false, result: { ok: true } },
    { role: "tool", callId: "c1", name: "b", failed: true, error: "denied by alice" },
    { role: "assistant", text: "Only words.", calls: [] },
  ];
  assert.deepEqual(chatMessages(transcript), [
    { role: "system", content: "be brief" },
    { role: "user", content: "go" },
    {
      role: "assistant",
      content: "Two at once.",
      tool_calls: [
        { id: "call_0", type: "function", function: { name: "a", arguments: '{"x":1}' } },
        { id: "c1", type: "function", function: { name: "b", arguments: "null" } },
      ],
    },
    { role: "tool", tool_call_id: "call_0", content: '{"ok":true}' },
    { role: "tool", tool_call_id: "c1", content: '{"error":"denied by alice"}' },
    { role: "assistant", content: "Only words." },
  ]);
});

Deno.test("openAITools() wraps each neutral description as a function tool, in order", () => {
  assert.deepEqual(openAITools([{ name: "t", description: "d", parameters: { type: "object" } }]), [
    { type: "function", function: { name: "t", description: "d", parameters: { type: "object" } } },
  ]);
  assert.deepEqual(
    openAITools(REGISTRY.descriptions()).map((t) => t.function.name),
    ["create_server", "create_database", "create_dns_record"],
  );
});

Deno.test("parseCompletion() returns every tool call of an answer, with the model's ids and any text beside them", () => {
  const usage = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
  const two = {
    choices: [{
      message: {
        content: "Both at once.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "a", arguments: '{"x":1}' } },
          { type: "function", function: { name: "b" } },
        ],
      },
      finish_reason: "tool_calls",
    }],
    usage,
  };
  assert.deepEqual(parseCompletion(JSON.stringify(two)), {
    kind: "tool_calls",
    calls: [{ id: "call_a", name: "a", args: { x: 1 } }, { name: "b", args: {} }],
    text: "Both at once.",
    usage,
  });
  // Blank text beside a call is no text.
  const blank = { choices: [{ message: { content: " ", tool_calls: [{ function: { name: "a" } }] } }] };
  assert.deepEqual(parseCompletion(JSON.stringify(blank)), {
    kind: "tool_calls",
    calls: [{ name: "a", args: {} }],
    usage: undefined,
  });
});
