import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { defineTool } from "../agent/tools.ts";
import type { ClientError } from "../base/errors.ts";
import type { DecideRequest, Planner } from "../model/planner.ts";
import { testClient } from "../../tests/_pglite.ts";

/** Every request each model was asked, by run, and every call the remote saw. */
const asked: { run: string; seq: number; model: string }[] = [];
const sent: string[] = [];

/** A model that orders `sku` at step 0 and `extra` at step 1, then answers; `model` names it in the output. */
const scripted = (name: string, skus: string[]): Planner => ({
  describe: name,
  decide: (req: DecideRequest) => {
    const model = req.params?.model ?? name;
    asked.push({ run: req.runId, seq: req.seq, model });
    const made = req.transcript.filter((m) => m.role === "tool").length;
    return Promise.resolve(
      made < skus.length
        ? { kind: "tool_calls", calls: [{ name: "order", args: { sku: skus[made] } }] }
        : { kind: "done", text: `${model}: ordered ${skus.join(", ")}` },
    );
  },
});

const order = (stub: boolean) =>
  defineTool({
    name: "order",
    description: "Orders an item.",
    args: z.strictObject({ sku: z.string() }),
    run: (args, ctx) => {
      sent.push(`${ctx.idempotencyKey} ${args.sku}`);
      return Promise.resolve({ result: `order-${args.sku}-${ctx.idempotencyKey}` });
    },
    ...(stub ? { stub: (args: { sku: string }) => `stub-${args.sku}` } : {}),
  });
const price = defineTool({
  name: "price",
  description: "Reads a price.",
  args: z.strictObject({ sku: z.string() }),
  effect: "read",
  run: (args, ctx) => {
    sent.push(`${ctx.idempotencyKey} price ${args.sku}`);
    return Promise.resolve({ result: 3 });
  },
});

const shop = defineAgent({
  name: "shop",
  tools: [order(true), price],
  model: scripted("a", ["tea", "milk"]),
});
const shopB = defineAgent({
  name: "shop-b",
  tools: [order(true), price],
  model: scripted("b", ["tea", "jam"]),
});
const bare = defineAgent({ name: "shop-bare", tools: [order(false)], model: scripted("c", ["tea", "rum"]) });

Deno.test("a fork copies the steps before its seq and decides anew after; a dry one sends nothing", async () => {
  const client = await testClient();
  const worker = await client.startWorker([shop, shopB, bare], { pollMs: 20 });
  try {
    await client.start(shop, { runId: "orig", input: "shop" });
    assert.equal((await client.wait("orig", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    assert.deepEqual(sent, ["orig:0 tea", "orig:1 milk"]);

    await assert.rejects(
      client.fork("orig", { atSeq: 3 }),
      (e: ClientError) => e.code === "FORK_INVALID" && /steps are at 0, 1, 2/.test(e.message),
    );
    await assert.rejects(
      client.fork("orig", { atSeq: 1, input: "other" }),
      (e: ClientError) => e.code === "FORK_INVALID" && /fork at step 0/.test(e.message),
    );
    await assert.rejects(client.fork("nope", { atSeq: 0 }), (e: ClientError) => e.code === "RUN_NOT_FOUND");

    asked.length = 0;
    const f = await client.fork("orig", { atSeq: 1, agent: shopB, model: "b-large", runId: "f1" });
    assert.deepEqual(f.copied, { steps: 1, calls: 1, messages: 0 });
    assert.equal(f.dryRun, true);
    const done = await client.wait("f1", { timeoutMs: 20_000, pollMs: 10 });
    assert.equal(done.status, "done");
    assert.equal(done.output, "b-large: ordered tea, jam");
    // Step 0 was not asked again; steps 1 and 2 were, of the fork's model.
    assert.deepEqual(asked, [{ run: "f1", seq: 1, model: "b-large" }, {
      run: "f1",
      seq: 2,
      model: "b-large",
    }]);
    assert.deepEqual(sent, ["orig:0 tea", "orig:1 milk"], "the fork sent nothing");
    const record = await client.reads.inspect("f1");
    assert.equal(record.run.forked_from, "orig");
    assert.equal(record.run.forked_at_seq, 1);
    const effects = record.effects.map((e) => [e.idempotency_key, e.remote, e.result, e.attempts]);
    assert.deepEqual(effects, [["f1:0", "original", "order-tea-orig:0", 0], ["f1:1", "stub", "stub-jam", 0]]);
    assert.equal(record.journal[0].llm_attempts, 0, "a copied step records no model request");

    // Forked at step 0 onto the original's own agent: the same calls are answered from the original's record.
    const same = await client.fork("orig", { atSeq: 0, runId: "f2" });
    assert.equal(same.copied.steps, 0);
    assert.equal((await client.wait("f2", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    const again = (await client.reads.inspect("f2")).effects.map((e) => [e.remote, e.result]);
    assert.deepEqual(again, [["original", "order-tea-orig:0"], ["original", "order-milk-orig:1"]]);

    // A tool with no stub, a call the original did not make: flagged, never sent.
    await client.fork("orig", { atSeq: 1, agent: bare, runId: "f3" });
    const blocked = await client.wait("f3", { timeoutMs: 20_000, pollMs: 10 });
    assert.equal(blocked.status, "blocked");
    const flagged = (await client.reads.inspect("f3")).effects.find((e) => e.status === "flagged");
    assert.match(flagged?.error ?? "", /made no such call, and the tool offers no stub/);

    // A live fork sends, under its own keys.
    await client.fork("orig", { atSeq: 1, agent: shopB, live: true, runId: "f4" });
    assert.equal((await client.wait("f4", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    assert.deepEqual(sent, ["orig:0 tea", "orig:1 milk", "f4:1 jam"]);
    await assert.rejects(
      client.fork("orig", { atSeq: 1, runId: "f4" }),
      (e: ClientError) => e.code === "RUN_EXISTS" && /a fork of orig at step 1/.test(e.message),
    );
  } finally {
    await worker.stop();
    await client.close();
  }
});

Deno.test("a dry run's tool that only reads runs live; one that needs approval is answered without asking", async () => {
  sent.length = 0;
  const reader = defineAgent({
    name: "reader",
    tools: [price],
    model: {
      describe: "reads",
      decide: (req) =>
        Promise.resolve(
          req.transcript.some((m) => m.role === "tool")
            ? { kind: "done", text: "read" }
            : { kind: "tool_calls", calls: [{ name: "price", args: { sku: req.runId } }] },
        ),
    },
  });
  const gated = defineAgent({
    name: "gated",
    tools: [defineTool({
      name: "pay",
      description: "Pays.",
      args: z.strictObject({ sku: z.string() }),
      approval: true,
      run: (args, ctx) => {
        sent.push(`${ctx.idempotencyKey} ${args.sku}`);
        return Promise.resolve({ result: "paid" });
      },
    })],
    model: {
      describe: "pays",
      decide: (req) =>
        Promise.resolve(
          req.transcript.some((m) => m.role === "tool")
            ? { kind: "done", text: "paid" }
            : { kind: "tool_calls", calls: [{ name: "pay", args: { sku: "order" } }] },
        ),
    },
  });
  const client = await testClient();
  const worker = await client.startWorker([reader, gated], { pollMs: 20 });
  try {
    await client.start(reader, { runId: "r0", input: "read" });
    await client.wait("r0", { timeoutMs: 20_000, pollMs: 10 });
    await client.fork("r0", { atSeq: 0, runId: "r0f" });
    await client.wait("r0f", { timeoutMs: 20_000, pollMs: 10 });
    assert.deepEqual(sent, ["r0:0 price r0", "r0f:0 price r0f"]);
    const row = (await client.reads.inspect("r0f")).effects[0];
    assert.equal(row.remote, "created");

    // The original waited for a person; its dry fork, which sends nothing, does not.
    await client.start(gated, { runId: "g0", input: "pay" });
    assert.equal((await client.wait("g0", { timeoutMs: 20_000, pollMs: 10 })).status, "waiting");
    await client.operators.approve("g0:0", { by: "ada" });
    assert.equal((await client.wait("g0", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    await client.fork("g0", { atSeq: 0, runId: "g0f" });
    assert.equal((await client.wait("g0f", { timeoutMs: 20_000, pollMs: 10 })).status, "done");
    assert.equal((await client.reads.inspect("g0f")).effects[0].remote, "original");
    assert.deepEqual(sent.filter((s) => s.includes("order")), ["g0:0 order"]);
  } finally {
    await worker.stop();
    await client.close();
  }
});
