/**
 * A conversation in the page, in headless Chromium (#26, must-show 4): three
 * messages typed into the run view's chat box, each answered by a model served
 * over the chat-completions protocol on 127.0.0.1 that streams its answers; the
 * tool calls and results between the messages; the third answer visibly
 * written piece by piece (the model is held mid-answer while the page is
 * looked at, then let go); a hostile message shown as text. With
 * `UPDATE_SCREENSHOTS=1` the two screenshots (mid-answer and after) go to
 * docs/ui-chat-streaming.png and docs/ui-chat.png.
 *
 * Skipped, saying so, when no Chromium is installed (`apt-get install -y chromium`).
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Browser, Page } from "npm:puppeteer-core@25.16.0";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { OpenAIPlanner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { MockModel } from "../mock/model.ts";
import { serveMocks } from "../mock/server.ts";
import { serveUi } from "../ui/server.ts";
import { textUnits } from "../runtime/chat/chunks.ts";
import { chromiumIgnore, launchChromium, screenshotPath } from "./_chromium.ts";
import { testClient } from "./_pglite.ts";

const lookup = defineTool({
  name: "lookup",
  description: "Looks up how a service stands.",
  args: z.strictObject({ service: z.string() }),
  run: (args) => Promise.resolve({ result: { service: args.service, state: "green", checkedBy: "ci" } }),
});

const ANSWERS = {
  goal: "The build is green: every check on main passed.",
  first: "You are welcome. Anything else?",
  second: "The deploy is green too: the last release went out cleanly.",
  third: "Here is the summary, written as it comes: the build is green on main, " +
    "the deploy went out without an error, and nothing is waiting for a person. " +
    "I will keep an eye on both and tell you when either changes.",
};
const PIECES = 40;
const HOLD_AT = 20;

/** Text of the first `count` of `pieces` nearly equal pieces of `text` (as the mock cuts it). */
function firstPieces(text: string, pieces: number, count: number): string {
  const chars = Array.from(text);
  return chars.slice(0, Math.floor((count * chars.length) / pieces)).join("");
}

async function typeAndSend(page: Page, text: string): Promise<void> {
  await page.click("#chat-input");
  await page.type("#chat-input", text);
  await page.click("#chat-send");
}

async function answerOf(page: Page, message: number): Promise<string> {
  const sel = `#chat-log [data-message='${message}'] .answer`;
  await page.waitForSelector(sel, { timeout: 20_000 });
  return await page.$eval(sel, (e) => e.textContent ?? "");
}

Deno.test({
  name: "the page converses: three messages typed, the calls between them, the answer streaming in",
  ignore: chromiumIgnore("the page converses"),
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "agent-runtime-chat-" });
    // The third answer is held after HOLD_AT of its PIECES pieces until the page has been looked at.
    let armed = false;
    const held = Promise.withResolvers<void>();
    const release = Promise.withResolvers<void>();
    const model = await MockModel.open({
      stream: {
        chunks: PIECES,
        chunkMs: 10,
        onChunk: async (c) => {
          if (armed && c.index === HOLD_AT) {
            armed = false;
            held.resolve();
            await release.promise;
          }
        },
      },
    });
    model.setScript({
      agent: "support",
      steps: [
        { tool: "lookup", args: { service: "build" } },
        { answer: ANSWERS.goal },
        { answer: ANSWERS.first },
        { tool: "lookup", args: { service: "deploy" } },
        { answer: ANSWERS.second },
        { answer: ANSWERS.third },
      ],
    });
    const mocks = await serveMocks({ model });
    const support = defineAgent({
      name: "support",
      instructions: "Look up what is asked about, then answer.",
      tools: [lookup],
      conversation: { idleMs: 600_000 },
      model: new OpenAIPlanner({ url: mocks.modelUrl, model: "mock" }),
    });
    const client = await testClient();
    const worker = await client.startWorker([support], { pollMs: 20, streamDeltas: true });
    const ui = await serveUi({ client, port: 0 });
    let browser: Browser | undefined;
    try {
      await client.start(support, { runId: "support-1", input: "Is the build green?" });
      assert.equal((await client.wait("support-1", { timeoutMs: 20_000 })).output, ANSWERS.goal);
      browser = await launchChromium();
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 900 });
      await page.goto(`${ui.url}/runs/support-1`);
      assert.equal(await answerOf(page, 0), ANSWERS.goal);
      // The goal's tool call sits between it and its answer.
      await page.waitForSelector("#chat-log [data-message='0'] [data-call]");
      assert.match(
        await page.$eval("#chat-log [data-message='0'] [data-call]", (e) => e.textContent ?? ""),
        /lookup\(\{"service":"build"\}\).*confirmed.*"state":"green"/,
      );

      // 1: a hostile message is text, never markup.
      await typeAndSend(page, "<img src=x onerror=alert(1)> thanks!");
      assert.equal(await answerOf(page, 1), ANSWERS.first);
      assert.equal(await page.$("#chat-log img"), null, "a message is text, never markup");
      assert.equal(
        await page.$eval("#chat-log [data-message='1'] .message", (e) => e.textContent),
        "<img src=x onerror=alert(1)> thanks!",
      );
      assert.equal(await page.$eval("#chat-input", (e) => (e as unknown as { value: string }).value), "");

      // 2: a message whose answer needs a tool call; the call shows under it.
      await typeAndSend(page, "And the deploy?");
      assert.equal(await answerOf(page, 2), ANSWERS.second);
      assert.match(
        await page.$eval("#chat-log [data-message='2'] [data-call]", (e) => e.textContent ?? ""),
        /lookup\(\{"service":"deploy"\}\)/,
      );

      // 3: the answer streams in; held mid-answer, the page shows its first pieces and no answer yet.
      armed = true;
      await typeAndSend(page, "Sum it up for me, please.");
      await held.promise;
      // The page reads the chat's UI message stream (/api/chat), whose text comes in whole units of
      // TEXT_UNIT_CHARS: what was written so far, cut back to the last whole unit.
      const written = firstPieces(ANSWERS.third, PIECES, HOLD_AT);
      const part = textUnits(written, 0, false).units.join("");
      assert.ok(part.length > 0);
      await page.waitForFunction(
        `document.querySelector("#live-answer .answer-text")?.textContent === ${JSON.stringify(part)}`,
        { timeout: 20_000 },
      );
      assert.equal(
        await page.$eval("#live-answer", (e) => (e as unknown as { hidden: boolean }).hidden),
        false,
      );
      assert.equal(await page.$("#chat-log [data-message='3'] .answer"), null, "not answered yet");
      assert.match(await page.$eval("#chat-state", (e) => e.textContent ?? ""), /working/);
      await page.screenshot({ path: screenshotPath("ui-chat-streaming.png", dir) });
      release.resolve();
      assert.equal(await answerOf(page, 3), ANSWERS.third);
      // Once in the log, the answer is not shown a second time in the live box.
      await page.waitForFunction(`document.querySelector("#live-answer").hidden`);
      await page.waitForFunction(
        `/waiting for the next/.test(document.querySelector("#chat-state")?.textContent ?? "")`,
      );
      await page.screenshot({ path: screenshotPath("ui-chat.png", dir) });

      // What the page showed is what the database holds: four messages, each answered once.
      const turns = await client.conversations.answers("support-1");
      assert.deepEqual(turns.map((m) => m.answer), [
        ANSWERS.goal,
        ANSWERS.first,
        ANSWERS.second,
        ANSWERS.third,
      ]);
      assert.equal(new Set(turns.map((m) => m.messageId)).size, 4);
      assert.equal(model.calls("support-1"), 6, "each decision bought once");
    } finally {
      release.resolve();
      await browser?.close();
      await ui.close();
      await worker.stop();
      await client.close();
      await mocks.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
