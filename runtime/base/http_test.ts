import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { ManualClock } from "./clock.ts";
import { runDepsFor } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { ModelError, ToolError } from "./errors.ts";
import { idempotencyKeyHeader, isTransientStatus, parseRetryAfter } from "./http.ts";
import { arraySink, Logger } from "./log.ts";
import { claimAndDrive } from "../host/run_driver.ts";
import { OpenAIPlanner, type Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import { defineTool, ToolRegistry } from "../agent/tools.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

Deno.test("isTransientStatus() asks again for 408, 409 (a request with this key in progress), 429 and 5xx only", async (t) => {
  const transient = [408, 409, 429, 500, 502, 503, 504, 599];
  const permanent = [200, 201, 301, 400, 401, 403, 404, 405, 410, 412, 413, 422, 425, 428, 451];
  for (const status of [...transient, ...permanent]) {
    await t.step(`${status}`, () => assert.equal(isTransientStatus(status), transient.includes(status)));
  }
});

/**
 * A user's tool, written against the library's HTTP helpers only (not the
 * demo's): posts under the idempotency key, and classifies an error status
 * with {@link isTransientStatus} and {@link parseRetryAfter}.
 */
function userTool(url: string) {
  return defineTool({
    name: "reserve",
    description: "Reserves a slot.",
    args: z.strictObject({ slot: z.string() }),
    run: async (args, ctx) => {
      const res = await fetch(url, {
        method: "POST",
        headers: { "idempotency-key": idempotencyKeyHeader(ctx.idempotencyKey) },
        body: JSON.stringify(args),
        signal: ctx.signal,
      });
      const text = await res.text();
      if (!res.ok) {
        const transient = isTransientStatus(res.status);
        throw new ToolError("RESERVE_HTTP", `HTTP ${res.status}: ${text}`, {
          transient,
          retryAfterMs: transient ? parseRetryAfter(res.headers.get("retry-after")) : undefined,
        });
      }
      return { result: text };
    },
  });
}

Deno.test("a 409 from a tool's remote is re-sent under the same key after its Retry-After, not failed", async () => {
  // The remote is still working on the first request under this key: 409 with Retry-After, then the answer.
  const keys: string[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    await req.body?.cancel();
    keys.push(req.headers.get("idempotency-key") ?? "");
    return keys.length === 1
      ? new Response("a request with this key is in progress", {
        status: 409,
        headers: { "retry-after": "7" },
      })
      : new Response("slot-1", { status: 201 });
  });
  const clock = new ManualClock();
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const planner: Planner = {
    describe: "a script",
    decide: (req) =>
      Promise.resolve(
        req.seq === 0
          ? { kind: "tool_calls", calls: [{ name: "reserve", args: { slot: "a" } }] }
          : { kind: "done", text: "ok" },
      ),
  };
  const tools = [userTool(`http://127.0.0.1:${server.addr.port}/reserve`)];
  const agent = defineAgent({ name: "reserver", tools, model: planner, maxSteps: 4 });
  const deps = runDepsFor(
    processDeps({ store, clock, log, owner: "w1", random: () => 0.5 }),
    agentDeps({ agent, planner, tools: new ToolRegistry(tools) }),
  );
  try {
    // A wait of 7 s lets the run go (it is longer than a worker sleeps holding the slot): the first turn
    // ends with the run waiting until the Retry-After is over, and the next sends it again.
    const first = await claimAndDrive(deps, "r409", "reserve a slot");
    assert.equal(first.status, "waiting", lines.join("\n"));
    const waiting = await store.reads.getRun("r409");
    assert.equal(waiting?.heartbeat_at, null);
    assert.equal(new Date(waiting!.wake_at!).getTime() - clock.now().getTime(), 7_000);
    await clock.advance(7_000);
    const running = claimAndDrive(deps, "r409", "reserve a slot");
    let ended = false;
    running.finally(() => ended = true).catch(() => {});
    // The remote answers in real time; the manual clock only moves the heartbeat along.
    for (let i = 0; i < 1_000 && !ended; i++) {
      await clock.advance(100);
      await new Promise((r) => setTimeout(r, 2));
    }
    const outcome = await running;
    assert.equal(outcome.status, "done", lines.join("\n"));
    assert.deepEqual(keys, ['"r409:0"', '"r409:0"'], "both requests under the run's key");
    const retrying = lines.find((l) => l.includes(" event=retrying "));
    assert.match(
      retrying ?? "",
      /code=RESERVE_HTTP error="HTTP 409: .*" delay_ms=7000 retry_after_ms=7000 at=\S+ gives_up_at=\S+$/,
    );
    const { effects } = await store.reads.loadHistory("r409");
    assert.equal(effects[0].status, "confirmed");
    assert.equal(effects[0].attempts, 2);
    assert.equal(effects[0].result, "slot-1");
  } finally {
    await store.client.close();
    await server.shutdown();
  }
});

Deno.test("a 409 from the model is asked again after its Retry-After, like a 429", async () => {
  const planner = new OpenAIPlanner({
    url: "http://model.test/v1",
    model: "m",
    fetch: () =>
      Promise.resolve(
        new Response('{"error":{"message":"a request is in progress"}}', {
          status: 409,
          headers: { "retry-after": "3" },
        }),
      ),
  });
  const err = await planner.decide({ runId: "r", seq: 0, transcript: [], tools: [] }).then(
    () => assert.fail("a 409 was taken for an answer"),
    (e) => e as ModelError,
  );
  assert.ok(err instanceof ModelError);
  assert.equal(err.transient, true);
  assert.equal(err.retryAfterMs, 3_000);
  assert.match(err.message, /HTTP 409: a request is in progress/);
});
