/**
 * The web page in a real browser: headless Chromium (Debian's `chromium`)
 * driven by puppeteer-core. A run crashed at `after_call` by a real SIGKILL
 * and resumed; a run blocked on a flagged call, resolved from the page; a run
 * in progress, watched without a reload (asking only for what changed); a
 * spoofed approval shown escaped with a warning, and approved from the page;
 * a finished run that stops asking; a long timeline paged with a long value
 * clipped; the waiting badge; a phone's narrow screen; and the token beyond
 * loopback.
 * Takes the README's screenshots (`UPDATE_SCREENSHOTS=1` writes docs/ui-runs.png, docs/ui-run.png).
 *
 * Skipped, saying so, when no Chromium is installed (`apt-get install -y chromium`).
 */
import assert from "node:assert/strict";
import type { Browser, Page } from "npm:puppeteer-core@25.16.0";
import { chromiumIgnore, launchChromium, screenshotPath } from "./_chromium.ts";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { connect } from "../runtime/client/client.ts";
import { ToolError } from "../runtime/base/errors.ts";
import type { Planner } from "../runtime/model/planner.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { serveUi } from "../ui/server.ts";
import { BIG, RAW_HIDDEN, writeHostileRuns, writeLongRun } from "./_display_runs.ts";
import { runWorkerToEnd } from "../harness/procs.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";
import { seedDataDir } from "./_pg.ts";

/** A model that calls `tool` at step 0 and is done at step 1. */
function oneToolPlanner(tool: string, args: Record<string, unknown>, done: string): Planner {
  return {
    describe: `script: ${tool} then done`,
    decide: (req) =>
      Promise.resolve(
        req.seq === 0
          ? {
            kind: "tool_calls",
            calls: [{ name: tool, args: args }],
            usage: { prompt_tokens: 120, completion_tokens: 18 },
          }
          : { kind: "done", text: done, usage: { prompt_tokens: 160, completion_tokens: 9 } },
      ),
  };
}

// A payment whose remote takes no idempotency key: an unknown outcome is flagged for a person.
const charge = defineAgent({
  name: "billing",
  instructions: "Charge the card once.",
  model: oneToolPlanner("charge_card", { amount_cents: 1299 }, "Charged the card."),
  tools: [
    defineTool({
      name: "charge_card",
      description: "Charge the customer's card.",
      idempotent: false,
      args: z.strictObject({ amount_cents: z.number().int() }),
      run: () => {
        throw new ToolError("TOOL_NETWORK", "the connection dropped after the request was sent", {
          transient: true,
        });
      },
    }),
  ],
});

function gate() {
  let open!: () => void;
  let entered!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const reached = new Promise<void>((r) => (entered = r));
  return { open, opened, entered, reached };
}

async function text(page: Page, selector: string): Promise<string> {
  return await page.$eval(selector, (el) => el.textContent ?? "");
}

Deno.test({
  name: "the web page shows crashes by epoch, resolves a flagged call, updates live, and wants its token",
  ignore: chromiumIgnore("browser tests of the web page"),
  // puppeteer keeps its DevTools socket's timers until the browser is gone; the test closes both.
  sanitizeOps: false,
  sanitizeResources: false,
  async fn(t) {
    const dir = await Deno.makeTempDir({ prefix: "agent-runtime-ui-" });
    await seedDataDir(dir);
    const shot = (name: string) => screenshotPath(name, dir);
    // A real crash first: kill -9 after the remote acted, then a second process resumes.
    const crashed = await runWorkerToEnd({ DATA_DIR: dir, RUN_ID: "crashed", CRASH_AT: "after_call" });
    assert.equal(crashed.code, 137, crashed.lines.join("\n"));
    const resumed = await runWorkerToEnd({ DATA_DIR: dir, RUN_ID: "crashed" });
    assert.equal(resumed.code, 0, resumed.lines.join("\n"));

    const client = await connect({ dataDir: dir });
    const slow = gate();
    const watched = defineAgent({
      name: "reports",
      instructions: "Build the report.",
      model: oneToolPlanner("build_report", { month: "2026-11" }, "The report is ready."),
      tools: [
        defineTool({
          name: "build_report",
          description: "Build a monthly report.",
          args: z.strictObject({ month: z.string() }),
          run: async (args, ctx) => {
            slow.entered();
            await slow.opened;
            return { result: `report-${args.month}-${ctx.idempotencyKey}` };
          },
        }),
      ],
    });
    const worker = await client.startWorker([charge, watched], { pollMs: 100 });
    const ui = await serveUi({ client, port: 0 });
    let browser: Browser | undefined;
    try {
      browser = await launchChromium();
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 760 });

      // Runs in several states for the list: blocked, running, pending (no worker hosts it), cancelled.
      await client.start(charge, { runId: "charge-42", input: "Charge order 42" });
      assert.equal((await client.wait("charge-42", { timeoutMs: 20_000 })).status, "blocked");
      await client.start(watched, { runId: "report-nov", input: "November" });
      await slow.reached;
      const idle = defineAgent({
        name: "notes",
        instructions: "-",
        tools: [],
        model: oneToolPlanner("x", {}, ""),
      });
      await client.start(idle, { runId: "note-7", input: "Water the plants" });
      await client.start(idle, { runId: "note-8", input: "Buy milk" });
      await client.operators.cancel("note-8", { by: "ui-test", reason: "not needed" });

      await t.step("the runs list shows the crashed-and-resumed run", async () => {
        await page.goto(ui.url, { waitUntil: "domcontentloaded" });
        await page.waitForSelector('tr[data-run="crashed"]');
        const row = await page.$eval(
          'tr[data-run="crashed"]',
          (tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent?.trim()),
        );
        assert.equal(row[1], "done");
        assert.equal(row[2], "provision");
        assert.match(row[3] ?? "", /^[0-9a-f]{12}$/, "the version: a digest of the agent");
        assert.equal(row[4], "3", "tool calls");
        assert.equal(row[5], "4", "model calls");
        assert.equal(row[7], "2", "epoch: two worker attempts");
        assert.match(await text(page, '[data-count="blocked"]'), /blocked 1/);
        await page.waitForSelector('tr[data-run="report-nov"] [data-status="running"]');
        await page.screenshot({ path: shot("ui-runs.png") });
        // Filter by status, then search by id.
        await page.click('[data-count="done"]');
        await page.waitForFunction('document.querySelectorAll("tr[data-run]").length === 1');
        await page.click('[data-count="cancelled"]');
        await page.waitForSelector('tr[data-run="note-8"]');
      });

      await t.step("its page shows two epochs and the already_done call", async () => {
        await page.goto(`${ui.url}/runs/crashed`, { waitUntil: "domcontentloaded" });
        await page.waitForSelector('[data-call="crashed:0"]');
        const lanes = await page.$$eval(".lane-head", (els) => els.map((e) => e.getAttribute("data-epoch")));
        assert.deepEqual(lanes, ["1", "2"]);
        assert.ok(await page.$('[data-call="crashed:0"] [data-status="already_done"]'));
        // Step 0 was decided in epoch 1 and its call settled by epoch 2 after the crash.
        const step0 = await page.$$eval(
          ".cell",
          (cells) => cells.slice(0, 2).map((c) => `${c.getAttribute("data-lane")}:${c.textContent}`),
        );
        assert.match(step0[0], /^1:decision.*decided create_server/);
        assert.match(step0[1], /^2:tool.*create_server confirmed \(already_done\), attempt 2/);
        assert.match(await text(page, "#totals"), /^3 tool calls · 4 model calls · tokens /);
        await page.setViewport({ width: 1280, height: 900 });
        await page.screenshot({
          path: shot("ui-run.png"),
          fullPage: true,
        });
      });

      await t.step("a flagged call resolved from the page lets the run finish", async () => {
        await page.goto(`${ui.url}/runs/charge-42`, { waitUntil: "domcontentloaded" });
        await page.waitForSelector('[data-flagged="charge-42:0"] textarea');
        await page.type('[data-flagged="charge-42:0"] textarea', '{"charge":"ch_0042"}');
        await page.click('[data-flagged="charge-42:0"] [data-action="resolve"]');
        await page.waitForFunction(
          `document.querySelector("#run-status")?.textContent === "done"`,
          { timeout: 20_000 },
        );
        const run = await client.reads.inspect("charge-42");
        assert.equal(run.run.status, "done");
        assert.equal(run.effects[0].status, "confirmed");
        assert.deepEqual(run.effects[0].result, { charge: "ch_0042" });
        assert.equal(run.effects[0].resolved_by, "ui");
      });

      await t.step("a run in progress updates without a reload, asking only for what changed", async () => {
        const asked: string[] = [];
        const onRequest = (r: { url(): string }) => {
          // The run itself; its answer stream (/stream) is a connection of its own.
          const url = new URL(r.url());
          if (url.pathname === "/api/runs/report-nov") asked.push(url.search);
        };
        page.on("request", onRequest);
        await page.goto(`${ui.url}/runs/report-nov`, { waitUntil: "domcontentloaded" });
        await page.waitForFunction(`document.querySelector("#run-status")?.textContent === "running"`);
        await page.evaluate(() => ((globalThis as unknown as { stayed: boolean }).stayed = true));
        slow.open();
        await page.waitForFunction(
          `document.querySelector("#run-status")?.textContent === "done"`,
          { timeout: 20_000 },
        );
        assert.equal(await page.evaluate(() => (globalThis as unknown as { stayed?: boolean }).stayed), true);
        assert.match(await text(page, "#run-output"), /The report is ready/);
        page.off("request", onRequest);
        // The whole run once, then the steps from the last one held on.
        assert.equal(asked[0], "?limit=50");
        assert.ok(asked.length >= 2 && asked.slice(1).every((q) => /^\?from=\d+$/.test(q)), asked.join(" "));
      });

      // Runs for what follows: values from a hostile model and tool, and a long run.
      await writeHostileRuns(client);
      await writeLongRun(client.store, client.clock, { runId: "long-1", steps: 120 });

      await t.step("a waiting run has a status badge of its own colour", async () => {
        await page.goto(`${ui.url}/?status=waiting`, { waitUntil: "domcontentloaded" });
        await page.waitForSelector('tr[data-run="hostile-2"] [data-status="waiting"]');
        const colour = await page.evaluate(
          `getComputedStyle(document.querySelector('tr[data-run="hostile-2"] [data-status="waiting"]')).backgroundColor`,
        );
        assert.notEqual(colour, "rgba(0, 0, 0, 0)", "a background, so its white text shows");
        const pending = await page.$eval('[data-count="pending"]', (b) => b.textContent);
        assert.match(pending ?? "", /pending \d+/);
      });

      await t.step(
        "a spoofed argument shows escaped and marked, with a warning, and is approved as shown",
        async () => {
          await page.goto(`${ui.url}/runs/hostile-2`, { waitUntil: "domcontentloaded" });
          const box = '[data-approval="hostile-2:0"]';
          await page.waitForSelector(box);
          const shown = await text(page, box);
          assert.match(shown, /transfer \{"to":"ACCT-\\u202e9876\\u202c","cents":100\}/);
          assert.ok(!shown.includes("\u202e") && !shown.includes("6789"), "the override is not applied");
          const marks = await page.$$eval(`${box} .esc`, (els) => els.map((e) => e.textContent));
          assert.deepEqual(marks, ["\\u202e", "\\u202c"]);
          assert.match(
            await text(page, `${box} [data-warning="hidden"]`),
            /These arguments hold 2 control, bidi or invisible characters \(\\u202e \\u202c\)/,
          );
          await page.click(`${box} [data-action="approve"]`);
          await page.waitForSelector('[data-approval-step="hostile-2:0"] [data-status="approved"]');
          assert.match(await text(page, '[data-approval-step="hostile-2:0"]'), /approved by ui at \d{4}-/);
          assert.match(await text(page, ".cell"), /approval.*approved by ui/);
          assert.equal((await client.store.reads.getApproval("hostile-2:0"))?.decided_by, "ui");
        },
      );

      await t.step("arguments too long to show cannot be approved until they are shown whole", async () => {
        const store = client.store;
        const now = () => client.clock.now();
        const args = { to: "ACCT-1", memo: `${"m".repeat(3_000)}\u202e` };
        await store.leases.createRun({ runId: "long-approval", agent: "payer", goal: "pay" }, now());
        const f = { runId: "long-approval", epoch: (await claim(store, "long-approval", 0, "w", now()))! };
        await writeDecision(store, f, 0, { decision: { tool: "transfer", args } }, now());
        await store.writes.requestApproval(
          f,
          { key: "long-approval:0", seq: 0, tool: "transfer", args, hash: "h" },
          now(),
        );
        await page.goto(`${ui.url}/runs/long-approval`, { waitUntil: "domcontentloaded" });
        const box = '[data-approval="long-approval:0"]';
        await page.waitForSelector(`${box} [data-warning="clipped"]`);
        assert.equal(
          await page.$eval(`${box} [data-action="approve"]`, (b) => b.hasAttribute("disabled")),
          true,
        );
        await page.click(`${box} [data-action="show-all"]`);
        await page.waitForSelector(`${box} [data-warning="hidden"]`);
        assert.equal(
          await page.$eval(`${box} [data-action="approve"]`, (b) => b.hasAttribute("disabled")),
          false,
        );
        assert.match(await text(page, box), /m{3000}\\u202e"\}/);
      });

      await t.step("no hostile value reaches the page raw: each shows as its escape", async () => {
        for (const id of ["hostile-1", "hostile-3"]) {
          await page.goto(`${ui.url}/runs/${id}`, { waitUntil: "domcontentloaded" });
          await page.waitForSelector("[data-step]");
          const body = String(await page.evaluate("document.body.innerText"));
          assert.equal(RAW_HIDDEN.exec(body), null, `${id}: ${JSON.stringify(RAW_HIDDEN.exec(body)?.[0])}`);
          assert.match(body, /\\u001b\]52;c;ZWNobyBwd25lZAo=\\u0007/);
          assert.equal(await page.title(), "agent-runtime");
        }
        // hostile-3 was denied: who, when and why, in the timeline.
        assert.match(
          await text(page, '[data-approval-step="hostile-3:0"]'),
          /denied by bob\\u001b.*reason: no \\u001b/s,
        );
      });

      await t.step("a finished run's page stops asking once it has it all", async () => {
        let asked = 0;
        const onRequest = (r: { url(): string }) => {
          if (r.url().includes("/api/runs/crashed")) asked++;
        };
        page.on("request", onRequest);
        await page.goto(`${ui.url}/runs/crashed`, { waitUntil: "domcontentloaded" });
        await page.waitForFunction("Number(document.body.dataset.loaded ?? 0) >= 1");
        // Three polling periods (1.5 s each) later, still the one request.
        await new Promise((r) => setTimeout(r, 4_500));
        page.off("request", onRequest);
        assert.equal(asked, 1);
        assert.match(await text(page, "#live"), /finished · not updating/);
      });

      await t.step(
        "a long timeline shows its last 50 steps, loads earlier ones, and clips a long value",
        async () => {
          const sizes: number[] = [];
          const onResponse = async (r: { url(): string; text(): Promise<string> }) => {
            if (r.url().includes("/api/runs/long-1?")) sizes.push((await r.text()).length);
          };
          page.on("response", onResponse);
          await page.goto(`${ui.url}/runs/long-1`, { waitUntil: "domcontentloaded" });
          await page.waitForSelector("[data-step]");
          const seqs = () =>
            page.$$eval(
              "#timeline > [data-step]",
              (els) => els.map((e) => Number(e.getAttribute("data-step"))),
            );
          assert.deepEqual(
            await seqs(),
            Array.from({ length: 50 }, (_, i) => 71 + i),
          );
          assert.match(await text(page, "#earlier"), /show 50 earlier steps 71 earlier steps not shown/);
          // The 22 KB answer arrives clipped, and whole on request.
          assert.ok(await page.$(`#run-output [data-clipped="${BIG.length}"]`));
          await page.click('#run-output [data-action="show-all"]');
          await page.waitForFunction(
            `document.querySelector("#run-output").textContent.length >= ${BIG.length}`,
          );
          assert.match(await text(page, "#run-output"), /big answer \\u202e end$/);
          await page.click('[data-action="earlier"]');
          await page.waitForFunction('document.querySelectorAll("#timeline > [data-step]").length === 100');
          await page.click('[data-action="earlier"]');
          await page.waitForFunction('document.querySelectorAll("#timeline > [data-step]").length === 121');
          assert.deepEqual(await seqs(), Array.from({ length: 121 }, (_, i) => i));
          assert.equal(await page.$('[data-action="earlier"]'), null);
          page.off("response", onResponse);
          assert.ok(
            sizes.length === 3 && sizes.every((n) => n < 60_000),
            `answers of ${sizes.join(", ")} bytes`,
          );
        },
      );

      await t.step("on a phone's narrow screen nothing runs off the right edge of the page", async () => {
        await page.setViewport({ width: 375, height: 800 });
        for (const path of ["/", "/runs/hostile-1", "/runs/long-1", "/runs/crashed", "/runs/hostile-3"]) {
          await page.goto(`${ui.url}${path}`, { waitUntil: "domcontentloaded" });
          await page.waitForFunction("Number(document.body.dataset.loaded ?? 0) >= 1");
          const [scroll, width] = await page.evaluate(
            "[document.documentElement.scrollWidth, innerWidth]",
          ) as [
            number,
            number,
          ];
          assert.ok(scroll <= width, `${path}: the page is ${scroll}px wide on a ${width}px screen`);
        }
        await page.setViewport({ width: 1280, height: 760 });
      });

      await t.step("bound beyond loopback, a request without the token is refused", async () => {
        await assert.rejects(
          serveUi({ client, host: "0.0.0.0", port: 0 }),
          /UI_TOKEN_REQUIRED|needs a token/,
        );
        const open = await serveUi({ client, host: "0.0.0.0", port: 0, token: "s3cret-token" });
        const ro = await serveUi({ client, port: 0, readOnly: true });
        try {
          // Bound on every interface, reached here only through loopback.
          const bare = await fetch(`${open.url}/api/runs`);
          assert.equal(bare.status, 401);
          assert.equal((await bare.json()).code, "UI_TOKEN_REQUIRED");
          const wrong = await fetch(`${open.url}/api/runs`, { headers: { authorization: "Bearer nope" } });
          assert.equal(wrong.status, 401);
          await wrong.body?.cancel();
          const res = await page.goto(open.url, { waitUntil: "domcontentloaded" });
          assert.equal(res?.status(), 401);
          await page.goto(`${open.url}/?token=s3cret-token`, { waitUntil: "domcontentloaded" });
          await page.waitForSelector('tr[data-run="crashed"]'); // the page's own requests carry the cookie
          const post = await fetch(`${ro.url}/api/runs/note-7/cancel`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: "{}",
          });
          assert.equal(post.status, 403);
          assert.equal((await post.json()).code, "UI_READ_ONLY");
        } finally {
          await open.close();
          await ro.close();
        }
      });
    } finally {
      slow.open();
      await browser?.close();
      await ui.close();
      await worker.stop();
      await client.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
