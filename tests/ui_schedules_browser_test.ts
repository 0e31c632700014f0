/**
 * The web page's schedules, in a real browser (headless Chromium driven by
 * puppeteer-core): under the runs, each schedule with when it fires, its
 * next occurrence (or paused), and its last runs linked to their pages. A
 * ticker on a ManualClock starts the runs, and a worker host drives them.
 * Takes docs/ui-schedules.png with `UPDATE_SCREENSHOTS=1`.
 *
 * Skipped, saying so, when no Chromium is installed (`apt-get install -y chromium`).
 */
import assert from "node:assert/strict";
import type { Browser } from "npm:puppeteer-core@25.16.0";
import { chromiumIgnore, launchChromium, screenshotPath } from "./_chromium.ts";
import { defineAgent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { Logger } from "../runtime/base/log.ts";
import { ScheduleTicker } from "../runtime/schedules/ticker.ts";
import { serveUi } from "../ui/server.ts";
import { testClient } from "./_pglite.ts";

Deno.test({
  name: "the list page shows the schedules, their next occurrence and their last runs, linked",
  ignore: chromiumIgnore("browser test of the page's schedules"),
  // puppeteer keeps its DevTools socket's timers until the browser is gone; the test closes both.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "agent-runtime-ui-schedules-" });
    const clock = new ManualClock(Date.UTC(2026, 11, 7, 7, 59, 58));
    const embedded = await testClient();
    const client = new Client(embedded.store, clock);
    const digest = defineAgent({
      name: "digest",
      tools: [],
      model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "sent" }) },
    });
    let browser: Browser | undefined;
    const ui = await serveUi({ client, port: 0 });
    try {
      await client.schedules.set(digest, {
        name: "morning-digest",
        cron: "0 9 * * MON-FRI",
        zone: "Europe/Berlin",
        input: "Send the morning digest",
      });
      await client.schedules.set(digest, {
        name: "inbox-sweep",
        every: "1s",
        overlap: "allow",
        input: "Sweep",
      });
      await client.schedules.set(digest, {
        name: "quarterly",
        cron: "0 6 1 JAN,APR,JUL,OCT *",
        input: "Close",
      });
      await client.schedules.pause("quarterly");
      const ticker = new ScheduleTicker({
        store: client.store,
        clock,
        log: new Logger({ clock, sink: () => {} }),
        agents: ["digest"],
      });
      for (let i = 0; i < 3; i++) {
        await clock.advance(1_000);
        await ticker.tick();
      }
      const worker = await client.startWorker([digest], {
        schedules: false,
        log: new Logger({ clock, sink: () => {} }),
      });
      try {
        // Polled in real time (the clock stands still), bounded: two runs of one step each.
        for (const id of ["morning-digest@20261207T080000Z", "inbox-sweep@20261207T080001Z"]) {
          for (let i = 0; i < 400 && (await client.get(id))?.status !== "done"; i++) {
            await new Promise((r) => setTimeout(r, 50));
          }
          assert.equal((await client.get(id))?.status, "done", id);
        }
      } finally {
        await worker.stop();
      }
      browser = await launchChromium();
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 560 });
      await page.goto(ui.url, { waitUntil: "domcontentloaded" });
      await page.waitForSelector('tr[data-schedule="morning-digest"] [data-status="done"]');
      const rows = await page.$$eval(
        "#schedules tbody tr",
        (trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent?.trim())),
      );
      assert.deepEqual(rows.map((r) => r.slice(0, 6)), [
        ["inbox-sweep", "digest", "every 1s", "allow / last", "2026-12-07 08:00:02.000", "0"],
        [
          "morning-digest",
          "digest",
          "0 9 * * MON-FRI (Europe/Berlin)",
          "skip / last",
          "2026-12-08 08:00:00.000",
          "0",
        ],
        ["quarterly", "digest", "0 6 1 JAN,APR,JUL,OCT *", "skip / last", "paused", "0"],
      ]);
      assert.match(rows[1][6] ?? "", /^morning-digest@20261207T080000Z done$/);
      await page.screenshot({ path: screenshotPath("ui-schedules.png", dir), fullPage: true });
      await page.click('tr[data-schedule="morning-digest"] a');
      await page.waitForFunction('location.pathname === "/runs/morning-digest%4020261207T080000Z"');
    } finally {
      await browser?.close();
      await ui.close();
      await embedded.close();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
