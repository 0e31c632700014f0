/**
 * Token budgets on PostgreSQL, through the real chat-completions client over
 * HTTP to a local fake of the wire format, driven by a worker host: the
 * ceiling holds whatever usage the server reports (none, a negative total, a
 * server that would write 100,000 tokens unless told to stop), the cap goes
 * out in the field chosen, and the runs list counts what the budget counts.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { type Client, connect } from "../runtime/client/client.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { type MaxTokensField, OpenAIPlanner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { type PgSchema, pgTest } from "./_pg.ts";

const CEILING = 20_000;
const CAP = 300;

/** How the fake reports usage, and what it does with a cap. */
type Mode = "no_usage" | "negative_total" | "writes_until_stopped" | "ignores_cap" | "reasoning";

/**
 * A fake OpenAI-compatible server: a tool call per answer until the run has
 * had 60, usage reported the `mode`'s way. `billed` is what its answers really
 * cost (the prompt at four characters a token, plus what it wrote); `bodies`
 * are the requests as sent.
 */
function fakeModel(mode: Mode) {
  const seen = { billed: 0, requests: 0, bodies: [] as Record<string, unknown>[] };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const text = await req.text();
    const body = JSON.parse(text);
    seen.requests++;
    seen.bodies.push(body);
    if (mode === "reasoning" && body.max_tokens !== undefined) {
      // What OpenAI answers for its reasoning models.
      return Response.json({
        error: {
          message: "Unsupported parameter: 'max_tokens' is not supported with this model. " +
            "Use 'max_completion_tokens' instead.",
          type: "invalid_request_error",
        },
      }, { status: 400 });
    }
    const cap = (body.max_tokens ?? body.max_completion_tokens) as number | undefined;
    const done = body.messages.filter((m: { role: string }) => m.role === "tool").length;
    const prompt = Math.ceil(text.length / 4);
    // This server writes 100,000 tokens unless a cap stops it (the other modes write 20).
    const wanted = mode === "writes_until_stopped" || mode === "ignores_cap" ? 100_000 : 20;
    const completion = mode === "ignores_cap" ? wanted : Math.min(wanted, cap ?? wanted);
    seen.billed += prompt + completion;
    const usage = mode === "no_usage"
      ? undefined
      : mode === "negative_total"
      ? { prompt_tokens: prompt, completion_tokens: completion, total_tokens: -1 }
      : { prompt_tokens: prompt, completion_tokens: completion };
    const message = done < 60
      ? {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: `c${done}`,
          type: "function",
          function: { name: "note", arguments: JSON.stringify({ i: done }) },
        }],
      }
      : { role: "assistant", content: "finished" };
    return Response.json({ choices: [{ message, finish_reason: done < 60 ? "tool_calls" : "stop" }], usage });
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, seen, close: () => server.shutdown() };
}

function noteAgent(url: string, maxTokensField?: MaxTokensField) {
  return defineAgent({
    name: "noter",
    model: new OpenAIPlanner({ url, model: "m", maxTokensField }),
    maxSteps: 100,
    budget: { tokens: CEILING, maxOutputTokens: CAP },
    tools: [defineTool({
      name: "note",
      description: "Notes a number.",
      args: z.strictObject({ i: z.number() }),
      run: (args) => Promise.resolve({ result: { noted: args.i, pad: "p".repeat(400) } }),
    })],
  });
}

/** Runs one budgeted run of `agent` under a worker host on `client`, to its end. */
async function runOne(client: Client, agent: ReturnType<typeof noteAgent>, runId: string) {
  const log = new Logger({ clock: client.clock, sink: arraySink([]) });
  const worker = await client.startWorker([agent], { pollMs: 20, log });
  try {
    await client.start(agent, { runId, input: "note sixty numbers" });
    const run = await client.wait(runId, { timeoutMs: 60_000, pollMs: 20 });
    const record = await client.reads.inspect(runId);
    const listed = (await client.reads.list({ search: runId })).runs[0];
    return { run, record, listed };
  } finally {
    await worker.stop();
  }
}

/** Runs `fn` with a fake server in `mode` and a client on the test's schema, closing both after. */
async function withFake(
  pg: PgSchema,
  mode: Mode,
  fn: (fake: ReturnType<typeof fakeModel>, client: Client) => Promise<void>,
): Promise<void> {
  const fake = fakeModel(mode);
  const client = await connect({ databaseUrl: pg.url });
  try {
    await fn(fake, client);
  } finally {
    await client.close();
    await fake.close();
  }
}

const SAID: Record<"no_usage" | "negative_total" | "writes_until_stopped", string> = {
  no_usage: "reports no usage",
  negative_total: "reports a negative total_tokens",
  writes_until_stopped: "would write 100,000 tokens unless capped",
};

for (const mode of ["no_usage", "negative_total", "writes_until_stopped"] as const) {
  pgTest(
    `on PostgreSQL over HTTP, a ${CEILING}-token ceiling holds when the server ${SAID[mode]}`,
    (pg) =>
      withFake(pg, mode, async (fake, client) => {
        const { run, record, listed } = await runOne(client, noteAgent(fake.url), `budget-${mode}`);
        assert.equal(run.status, "failed", "sixty steps cost more than the ceiling");
        assert.match(run.error ?? "", /^BUDGET_EXCEEDED: budget: \d+ tokens spent or reserved/);
        assert.ok(
          fake.seen.billed <= CEILING,
          `billed ${fake.seen.billed} in ${fake.seen.requests} requests`,
        );
        assert.ok(record.spend.tokens <= CEILING, `counted ${record.spend.tokens}`);
        assert.ok(record.spend.tokens >= fake.seen.billed, `no answer counted less than it cost`);
        assert.ok(
          fake.seen.bodies.every((b) => b.max_tokens === CAP && !("max_completion_tokens" in b)),
          "every request asked for at most the cap, in max_tokens alone",
        );
        assert.equal(listed.tokens, record.spend.tokens, "the runs list counts what the budget counts");
      }),
  );
}

pgTest(
  "on PostgreSQL over HTTP, an answer past its reservation counts in full and no request follows it",
  (pg) =>
    withFake(pg, "ignores_cap", async (fake, client) => {
      const { run, record, listed } = await runOne(client, noteAgent(fake.url), "budget-ignores-cap");
      assert.equal(fake.seen.requests, 1);
      assert.equal(record.spend.tokens, fake.seen.billed, "counted as reported");
      assert.ok(record.spend.tokens > CEILING);
      assert.equal(run.status, "failed");
      assert.match(run.error ?? "", /BUDGET_EXCEEDED/);
      assert.equal(listed.tokens, record.spend.tokens);
    }),
);

pgTest(
  "a server that refuses max_tokens says so with what to set, and max_completion_tokens carries the cap",
  (pg) =>
    withFake(pg, "reasoning", async (fake, client) => {
      const refused = await runOne(client, noteAgent(fake.url), "budget-reasoning-1");
      assert.equal(refused.run.status, "failed");
      assert.match(refused.run.error ?? "", /^MODEL_HTTP: .*HTTP 400: Unsupported parameter: 'max_tokens'/);
      assert.match(refused.run.error ?? "", /set MODEL_MAX_TOKENS_FIELD=max_completion_tokens/);
      const before = fake.seen.requests;
      const capped = await runOne(client, noteAgent(fake.url, "max_completion_tokens"), "budget-reasoning-2");
      assert.match(capped.run.error ?? "", /BUDGET_EXCEEDED/);
      const bodies = fake.seen.bodies.slice(before);
      assert.ok(bodies.every((b) => b.max_completion_tokens === CAP && !("max_tokens" in b)));
    }),
);
