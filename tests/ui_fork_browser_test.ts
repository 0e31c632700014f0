/**
 * The page's forks in headless Chromium (docs/fork.md): "fork from here" on
 * a step of a finished run asks for a model, forks, and shows the fork, whose
 * card links its original; an evaluation's page lists its case runs by
 * variant, each linked. `UPDATE_SCREENSHOTS=1` rewrites docs/ui-fork.png.
 */

import assert from "node:assert/strict";
import type { Browser } from "npm:puppeteer-core@25.16.0";
import { z } from "zod";
import { chromiumIgnore, launchChromium, screenshotPath } from "./_chromium.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { serveUi } from "../ui/server.ts";
import { testClient } from "./_pglite.ts";

const agent = defineAgent({
  name: "two-step",
  tools: [defineTool({
    name: "note",
    description: "Writes a note.",
    args: z.strictObject({ text: z.string() }),
    run: (args) => Promise.resolve({ result: args.text }),
    stub: (args) => `stub ${args.text}`,
  })],
  model: {
    describe: "script",
    decide: (req) =>
      Promise.resolve(
        req.transcript.filter((m) => m.role === "tool").length >= 2
          ? { kind: "done", text: `done by ${req.params?.model ?? "default"}` }
          : { kind: "tool_calls", calls: [{ name: "note", args: { text: `${req.params?.model ?? "x"}` } }] },
      ),
  },
});

const NAME = "fork from here forks a finished run at a step and shows the fork; an evaluation lists its runs";

Deno.test({ name: NAME, ignore: chromiumIgnore(NAME) }, async () => {
  const client = await testClient();
  const worker = await client.startWorker([agent], { pollMs: 20 });
  const ui = await serveUi({ client, port: 0 });
  const dir = await Deno.makeTempDir({ prefix: "ui-fork-" });
  let browser: Browser | undefined;
  try {
    await client.start(agent, { runId: "r1", input: "go" });
    await client.wait("r1", { timeoutMs: 20_000, pollMs: 10 });
    browser = await launchChromium();
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 800 });
    page.on("dialog", (d) => d.accept("m2"));
    await page.goto(`${ui.url}/runs/r1`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('[data-action="fork"][data-fork-seq="1"]');
    await page.click('[data-action="fork"][data-fork-seq="1"]');
    await page.waitForFunction('location.pathname.startsWith("/runs/r1-fork-")');
    const forkId = decodeURIComponent(new URL(page.url()).pathname.slice("/runs/".length));
    assert.equal((await client.wait(forkId, { timeoutMs: 20_000, pollMs: 10 })).output, "done by m2");
    await page.waitForFunction(
      'document.querySelector("#run-fork")?.textContent.includes("of r1 at step 1")',
    );
    await page.waitForFunction('document.querySelector("#run-output")?.textContent.includes("done by m2")');
    await page.screenshot({ path: screenshotPath("ui-fork.png", dir) });
    const effects = (await client.reads.inspect(forkId)).effects.map((e) => [e.seq, e.remote]);
    assert.deepEqual(effects, [[0, "original"], [1, "stub"]], "step 0 copied; step 1 answered by the stub");

    await client.fork("r1", { atSeq: 0, runId: "ev-a-1", evalId: "ev" });
    await client.fork("r1", { atSeq: 0, runId: "ev-b-1", evalId: "ev", model: "m3" });
    await client.wait("ev-b-1", { timeoutMs: 20_000, pollMs: 10 });
    await client.wait("ev-a-1", { timeoutMs: 20_000, pollMs: 10 });
    await page.goto(`${ui.url}/evals/ev`, { waitUntil: "domcontentloaded" });
    await page.waitForSelector('tr[data-case="ev-b-1"] a[href="/runs/ev-b-1"]');
    const variants = await page.$$eval("#eval-variants tbody tr", (rows) => rows.map((r) => r.textContent));
    assert.equal(variants.length, 2);
  } finally {
    await browser?.close();
    await ui.close();
    await worker.stop();
    await client.close();
    await Deno.remove(dir, { recursive: true });
  }
});
