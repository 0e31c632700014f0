/**
 * `deno task dev` as a person uses it (#37, must-show 4): the command as a
 * real process on a fresh data directory (the embedded database, no
 * PostgreSQL, no MODEL_URL: the mock model in the process), a new chat
 * started from the page's runs list in headless Chromium, its answer shown,
 * a second message typed into the chat and answered; then the process
 * stopped by SIGTERM (exit 0) and the embedded database read again: one run,
 * two messages, each answered once, the note its tool saved on disk.
 *
 * Skipped, saying so, when no Chromium is installed (`apt-get install -y chromium`).
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Browser, Page } from "npm:puppeteer-core@25.16.0";
import { connect } from "../runtime/client/client.ts";
import { chromiumIgnore, launchChromium } from "./_chromium.ts";

const ROOT = decodeURIComponent(new URL("..", import.meta.url).pathname);

/** The process's environment without the settings that would take it off the embedded default. */
function devEnv(): Record<string, string> {
  const env = Deno.env.toObject();
  for (const k of Object.keys(env)) {
    if (/^(DATABASE_URL|MODEL|DATA_DIR|UI_|CLOUD_URL|NOTES_DIR)/.test(k)) delete env[k];
  }
  return env;
}

/** Reads the process's stdout until its `dev  url=` line; returns the URL and keeps the rest flowing. */
async function urlOf(stdout: ReadableStream<Uint8Array>, seen: string[]): Promise<string> {
  const lines = stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { done, value } = await lines.read();
    if (done) throw new Error(`dev exited before it served the page:\n${seen.join("\n")}`);
    buf += value;
    const parts = buf.split("\n");
    buf = parts.pop() ?? "";
    seen.push(...parts);
    const line = parts.find((l) => l.startsWith("dev  url="));
    if (line) {
      // The rest of its output is drained, so the process never blocks on a full pipe.
      (async () => {
        for (let r = await lines.read(); !r.done; r = await lines.read()) seen.push(r.value);
      })().catch(() => {});
      return /url=(\S+?)\/?\s/.exec(line)![1];
    }
  }
}

async function answerOf(page: Page, message: number): Promise<string> {
  const sel = `#chat-log [data-message='${message}'] .answer`;
  await page.waitForSelector(sel, { timeout: 30_000 });
  return await page.$eval(sel, (e) => e.textContent ?? "");
}

Deno.test({
  name: "'deno task dev' serves the page and a chat from the browser is answered on the embedded store",
  ignore: chromiumIgnore("deno task dev in a browser"),
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "agent-runtime-dev-" });
    const proc = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--unstable-no-legacy-abort",
        "cli/main.ts",
        "dev",
        "--port",
        "0",
        "--data-dir",
        dir,
      ],
      cwd: ROOT,
      clearEnv: true,
      env: devEnv(),
      stdin: "null",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const seen: string[] = [];
    let browser: Browser | undefined;
    let exited = false;
    try {
      const url = await urlOf(proc.stdout, seen);
      assert.match(seen.join("\n"), /store=pglite:.*chat=chat\s+model=in-process-mock/);
      browser = await launchChromium();
      const page = await browser.newPage();
      await page.setViewport({ width: 390, height: 800 });
      await page.goto(url, { waitUntil: "domcontentloaded" });
      // The runs list offers a new chat with the module's conversing agent.
      await page.waitForSelector("#new-chat-input");
      assert.match(await page.$eval("#new-chat label", (e) => e.textContent ?? ""), /New chat with chat/);
      await page.type("#new-chat-input", "Hello! Keep a note: water the plants on Friday.");
      await Promise.all([page.waitForNavigation({ timeout: 30_000 }), page.click("#new-chat-send")]);
      const runId = decodeURIComponent(new URL(page.url()).pathname.replace(/^\/runs\//, ""));
      assert.match(runId, /^chat-[0-9a-f]{8}$/);
      // The mock model calls the agent's one tool, then answers; the call shows under the message.
      assert.equal(await answerOf(page, 0), "Called save_note.");
      await page.waitForSelector(`#chat-log [data-message='0'] [data-call='${runId}:0']`);
      await page.waitForFunction(
        `/waiting for the next/.test(document.querySelector("#chat-state")?.textContent ?? "")`,
        { timeout: 30_000 },
      );
      await page.type("#chat-input", "Thanks. Anything else?");
      await page.click("#chat-send");
      assert.equal(await answerOf(page, 1), "Called save_note.");
      assert.equal(
        await page.$eval("#chat-log [data-message='1'] .message", (e) => e.textContent),
        "Thanks. Anything else?",
      );

      await browser.close();
      browser = undefined;
      proc.kill("SIGTERM");
      const status = await proc.status;
      exited = true;
      assert.equal(status.code, 0, seen.join("\n"));

      // What the page showed is what the embedded database holds, read by another process now that it is free.
      const client = await connect({ dataDir: dir });
      try {
        const turns = await client.conversations.answers(runId);
        assert.deepEqual(turns.map((t) => [t.text, t.answer]), [
          ["Hello! Keep a note: water the plants on Friday.", "Called save_note."],
          ["Thanks. Anything else?", "Called save_note."],
        ]);
        assert.equal((await client.reads.list({})).total, 1, "one run: the chat");
      } finally {
        await client.close();
      }
      const notes = [...Deno.readDirSync(`${dir}/notes`)].map((e) => e.name);
      assert.deepEqual(notes, [`${runId}_0.md`]);
    } finally {
      await browser?.close();
      if (!exited) {
        proc.kill("SIGKILL");
        await proc.status;
      }
      await Deno.remove(dir, { recursive: true });
    }
  },
});
