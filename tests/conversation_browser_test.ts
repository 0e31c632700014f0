/**
 * A conversation in the page, in headless Chromium (Debian's `chromium`): the
 * run's card lists the messages with their answers, a message typed into its
 * box and sent is answered, and a hostile message is shown as text. The
 * screenshot goes to docs/ui-conversation.png. Skipped, saying so, when no
 * Chromium is installed.
 */

import assert from "node:assert/strict";
import puppeteer, { type Browser } from "puppeteer-core";
import { defineAgent } from "../runtime/agent.ts";
import { connect } from "../runtime/client.ts";
import type { TranscriptMessage } from "../runtime/transcript.ts";
import { serveUi } from "../ui/server.ts";

const CHROMIUM = [Deno.env.get("CHROMIUM_PATH"), "/usr/bin/chromium", "/usr/bin/chromium-browser"]
  .find((p) => {
    if (!p) return false;
    try {
      return Deno.statSync(p).isFile;
    } catch {
      return false;
    }
  });

const chat = defineAgent({
  name: "chat",
  instructions: "-",
  tools: [],
  conversation: { idleMs: 600_000 },
  model: {
    describe: "echo",
    decide: (req) => {
      const users = req.transcript.filter((m): m is TranscriptMessage & { role: "user" } =>
        m.role === "user"
      );
      return Promise.resolve({ kind: "done", text: `You said: ${users[users.length - 1].text}` });
    },
  },
});

Deno.test({
  name: "the page shows a conversation and sends the message typed into its box",
  ignore: !CHROMIUM,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const client = await connect({ memory: true });
    const worker = await client.startWorker([chat], { pollMs: 50 });
    const ui = await serveUi({ client, port: 0 });
    let browser: Browser | undefined;
    try {
      await client.start(chat, { runId: "talk", input: "Hello, is the server up?" });
      await client.wait("talk", { timeoutMs: 20_000 });
      await client.send("talk", "<img src=x onerror=alert(1)> and the database?", { messageId: "m1" });
      await client.wait("talk", { timeoutMs: 20_000 });
      browser = await puppeteer.launch({
        executablePath: CHROMIUM,
        headless: true,
        args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
      });
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 900 });
      await page.goto(`${ui.url}/runs/talk`);
      await page.waitForSelector("#run-conversation [data-message='1']");
      assert.equal(await page.$("#run-conversation img"), null, "a message is text, never markup");
      await page.type("#run-conversation textarea", "Open a ticket for it, please.");
      await page.click("#run-conversation [data-action=send]");
      await page.waitForSelector("#run-conversation [data-message='2'] .answer", { timeout: 20_000 });
      const answer = await page.$eval("#run-conversation [data-message='2'] .answer", (e) => e.textContent);
      assert.equal(answer, "You said: Open a ticket for it, please.");
      await page.screenshot({ path: new URL("../docs/ui-conversation.png", import.meta.url).pathname });
    } finally {
      await browser?.close();
      await ui.close();
      await worker.stop();
      await client.close();
    }
  },
});
