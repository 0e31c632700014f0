/**
 * The page at a desktop's width (1280 px) and a phone's (390 px), in headless
 * Chromium (#37, must-show 4): a crashed run (two epochs, its call re-sent
 * and found `already_done`), a run woken by its child (an `agentTool`
 * parent), an approved run (the approval answered by a named person), and a
 * 30-turn conversation (its messages in order, the page still usable). Each is
 * read from the DOM's text, not from pixels: each lane says why its epoch
 * began, and at 390 px nothing runs off the right edge of the page.
 * `UPDATE_SCREENSHOTS=1` writes docs/ui-narrow-chat.png and docs/ui-wide-family.png.
 *
 * Skipped, saying so, when no Chromium is installed (`apt-get install -y chromium`).
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Browser, Page } from "npm:puppeteer-core@25.16.0";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { agentTool } from "../runtime/agent/agent_tool.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { serveUi } from "../ui/server.ts";
import { claim, effectIntent, writeDecision } from "../harness/direct_writes.ts";
import { chromiumIgnore, launchChromium, screenshotPath } from "./_chromium.ts";
import { testClient } from "./_pglite.ts";

const TURNS = 30;
const usage = { prompt_tokens: 100, completion_tokens: 10 };

/** A model that makes `call` at step 0 and answers `done` at step 1. */
function callThenDone(call: { name: string; args: Record<string, unknown> }, done: string): Planner {
  return {
    describe: `script: ${call.name} then done`,
    decide: (req) =>
      Promise.resolve(
        req.seq === 0 ? { kind: "tool_calls", calls: [call], usage } : { kind: "done", text: done, usage },
      ),
  };
}

// The remote of the crashed run: it acted on key crashed:0 before the worker died.
const shipped = new Set<string>(["crashed:0"]);
const shipper = defineAgent({
  name: "shipper",
  instructions: "Ship the order.",
  model: callThenDone({ name: "ship", args: { order: "A-1" } }, "Shipped order A-1."),
  tools: [
    defineTool({
      name: "ship",
      description: "Ships an order.",
      args: z.strictObject({ order: z.string() }),
      run: (_args, { idempotencyKey }) => {
        const done = shipped.has(idempotencyKey);
        shipped.add(idempotencyKey);
        return Promise.resolve({
          result: `shipment-${idempotencyKey}`,
          remote: done ? "already_done" : "created",
        });
      },
    }),
  ],
});

const researcher = defineAgent({
  name: "researcher",
  instructions: "Research the task.",
  tools: [],
  model: {
    describe: "script: answer",
    decide: () => Promise.resolve({ kind: "done", text: "Found 3 sources.", usage }),
  },
});
const lead = defineAgent({
  name: "lead",
  instructions: "Ask the researcher, then sum up.",
  model: callThenDone(
    { name: "researcher", args: { task: "Find sources on durable agents" } },
    "The researcher found 3 sources.",
  ),
  tools: [agentTool(researcher)],
});

const payer = defineAgent({
  name: "payer",
  instructions: "Pay the invoice once a person approves.",
  model: callThenDone({ name: "pay", args: { invoice: "INV-7", cents: 4200 } }, "Paid INV-7."),
  tools: [
    defineTool({
      name: "pay",
      description: "Pays an invoice.",
      approval: true,
      args: z.strictObject({ invoice: z.string(), cents: z.number().int() }),
      run: (args) => Promise.resolve({ result: `paid-${args.invoice}` }),
    }),
  ],
});

/** Answers message n (0 the goal) with its number and text. */
const talker = defineAgent({
  name: "talker",
  instructions: "Answer each message.",
  tools: [],
  conversation: { idleMs: 600_000 },
  model: {
    describe: "script: echo",
    decide: (req) => {
      const users = req.transcript.filter((m) => m.role === "user");
      const last = users.at(-1)?.text;
      return Promise.resolve({ kind: "done", text: `Answer ${users.length - 1}: ${String(last)}`, usage });
    },
  },
});

async function texts(page: Page, selector: string): Promise<string[]> {
  return await page.$$eval(selector, (els) => els.map((e) => (e.textContent ?? "").trim()));
}

/** Elements whose right edge is past the viewport's, outside a box that scrolls sideways by design. */
async function offRight(page: Page): Promise<string[]> {
  return await page.evaluate(`(() => {
    const out = [];
    const inScroll = (el) => el.closest(".scroll") !== null && !el.classList.contains("scroll");
    for (const el of document.querySelectorAll("body *")) {
      if (inScroll(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > innerWidth + 0.5) out.push(el.tagName + (el.id ? "#" + el.id : "") + "." + el.className + " " + Math.round(r.right));
    }
    if (document.documentElement.scrollWidth > innerWidth) out.push("page " + document.documentElement.scrollWidth);
    return out;
  })()`) as string[];
}

async function open(page: Page, url: string, ready: string): Promise<void> {
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await page.waitForSelector(ready, { timeout: 20_000 });
  await page.waitForFunction("Number(document.body.dataset.loaded ?? 0) >= 1");
}

Deno.test({
  name: "the page at 1280 and 390 px: a crash, a child's wake, an approval and 30 turns, each read right",
  ignore: chromiumIgnore("the page at two widths"),
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const dir = await Deno.makeTempDir({ prefix: "agent-runtime-widths-" });
    const client = await testClient();
    // Epoch 1 of the crashed run, as a worker wrote it before it died: the decision and the call's intent,
    // its lease long gone. The worker below takes it over and re-sends the call under the same key.
    await client.start(shipper, { runId: "crashed", input: "Ship A-1" });
    const long = new Date(client.clock.now().getTime() - 600_000);
    const f = { runId: "crashed", epoch: (await claim(client.store, "crashed", 0, "dead-worker", long))! };
    await writeDecision(
      client.store,
      f,
      0,
      { decision: { tool: "ship", args: { order: "A-1" } }, usage },
      long,
    );
    await effectIntent(
      client.store,
      f,
      { key: "crashed:0", seq: 0, tool: "ship", args: { order: "A-1" } },
      long,
    );

    const worker = await client.startWorker([shipper, lead, payer, talker], {
      pollMs: 50,
      log: new Logger({ clock: client.clock, sink: discardSink }),
    });
    const ui = await serveUi({ client, port: 0 });
    let browser: Browser | undefined;
    try {
      assert.equal((await client.wait("crashed", { timeoutMs: 20_000 })).status, "done");
      await client.start(lead, { runId: "family", input: "Sources on durable agents" });
      assert.equal(
        (await client.wait("family", { timeoutMs: 20_000 })).output,
        "The researcher found 3 sources.",
      );
      await client.start(payer, { runId: "approved", input: "Pay INV-7" });
      assert.equal((await client.wait("approved", { timeoutMs: 20_000 })).status, "waiting");
      await client.operators.approve("approved:0", { by: "alice" });
      assert.equal((await client.wait("approved", { timeoutMs: 20_000 })).output, "Paid INV-7.");
      await client.start(talker, { runId: "talk", input: "message 0" });
      await client.wait("talk", { timeoutMs: 20_000 });
      for (let n = 1; n < TURNS; n++) {
        await client.conversations.send("talk", `message ${n}`, { messageId: `m-${n}` });
        assert.equal((await client.wait("talk", { timeoutMs: 20_000 })).output, `Answer ${n}: message ${n}`);
      }

      browser = await launchChromium();
      const page = await browser.newPage();
      for (const width of [1280, 390]) {
        await page.setViewport({ width, height: 900 });
        await t.step(
          `${width} px: the crashed run says it crashed, and its call was already done`,
          async () => {
            await open(page, `${ui.url}/runs/crashed`, '[data-call="crashed:0"]');
            const heads = await texts(page, ".lane-head");
            assert.equal(heads.length, 2, heads.join(" | "));
            assert.equal(heads[0], "epoch 1 · started");
            assert.match(heads[1], /^epoch 2 · crash or lease lost · worker:\d+$/);
            // Its call, decided in epoch 1, was re-sent by epoch 2 and found done.
            assert.match(
              await page.$eval('[data-step="0"] [data-lane="2"]', (e) => e.textContent ?? ""),
              /ship confirmed \(already_done\), attempt 2/,
            );
            assert.ok(await page.$('[data-call="crashed:0"] [data-status="already_done"]'));
            assert.deepEqual(await offRight(page), []);
          },
        );
        await t.step(`${width} px: the parent says its child woke it`, async () => {
          await open(page, `${ui.url}/runs/family`, '[data-child="family.0"]');
          const heads = await texts(page, ".lane-head");
          assert.equal(heads.length, 2, heads.join(" | "));
          assert.deepEqual(heads[0], "epoch 1 · started");
          assert.match(heads[1], /^epoch 2 · woken by its child · /);
          assert.match(
            await page.$eval('[data-child="family.0"]', (e) => e.textContent ?? ""),
            /family\.0 done researcher/,
          );
          if (width === 1280) await page.screenshot({ path: screenshotPath("ui-wide-family.png", dir) });
          assert.deepEqual(await offRight(page), []);
        });
        await t.step(`${width} px: the approved run says who approved it`, async () => {
          await open(page, `${ui.url}/runs/approved`, '[data-call="approved:0"]');
          const heads = await texts(page, ".lane-head");
          assert.equal(heads.length, 2, heads.join(" | "));
          assert.match(heads[1], /^epoch 2 · approved by alice · /);
          assert.match(await page.$eval("main", (e) => e.textContent ?? ""), /approved by alice/);
          assert.deepEqual(await offRight(page), []);
        });
        await t.step(`${width} px: 30 turns in order, one lane, the box still there`, async () => {
          await open(page, `${ui.url}/runs/talk`, `#chat-log [data-message='${TURNS - 1}'] .answer`);
          const answers = await texts(page, "#chat-log .answer");
          assert.deepEqual(answers, Array.from({ length: TURNS }, (_, n) => `Answer ${n}: message ${n}`));
          const messages = await texts(page, "#chat-log .message");
          assert.deepEqual(messages, Array.from({ length: TURNS }, (_, n) => `message ${n}`));
          // A turn is not a lane: the next message's epoch joins the lane before it.
          assert.deepEqual(
            (await texts(page, ".lane-head")).map((h) => h.replace(/ · worker:\d+$/, "")),
            [`epochs 1–${TURNS} · started · ${TURNS - 1} next messages`],
          );
          assert.equal(
            await page.$eval("#chat-form", (e) => (e as unknown as { hidden: boolean }).hidden),
            false,
          );
          assert.deepEqual(await offRight(page), []);
          if (width === 390) {
            // The last turns and the box to write the next, as a phone shows them.
            await page.$eval("#chat-form", (e) => e.scrollIntoView({ block: "end" }));
            await page.screenshot({ path: screenshotPath("ui-narrow-chat.png", dir) });
          }
        });
      }
    } finally {
      await browser?.close();
      await ui.close();
      await worker.stop();
      await client.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
