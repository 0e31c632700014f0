/**
 * `deno task bench:ui`: what a run's web page costs while it stays open, in
 * headless Chromium (Debian's `chromium`) against the page served from this
 * checkout. Three runs, written through the store:
 *
 * - `steps-done`: a finished run of `--steps` tool steps (default 3,000);
 * - `steps-open`: the same, still running (its last call's outcome pending);
 * - `answer`: a finished run whose answer, and so its output, is
 *   `--answer-mb` MB (default 50).
 *
 * For each it opens the run's page, waits for the first render, and then
 * watches it for `--seconds` (default 15), reporting: the API requests made
 * and the MB they brought (bytes on the wire, from the DevTools protocol),
 * both for the first answer and for each later one (a poll); the browser's
 * main-thread busy seconds (`TaskDuration`) over the window; the CPU seconds
 * this process (the page's server and, on the embedded database, the
 * database) used over the window; and the page's DOM nodes.
 *
 * ```sh
 * deno task bench:ui                                   # embedded database in a temporary folder
 * deno task bench:ui --steps 300 --answer-mb 5 --seconds 5
 * deno task bench:ui --database-url postgres://postgres@127.0.0.1:5432/test   # a fresh schema, dropped after
 * ```
 *
 * To measure another commit, run this same file in an export of it (it uses
 * only the store, `serveUi` and the page's `data-loaded` counter):
 *
 * ```sh
 * git archive 4791dac | tar -x -C /tmp/before && cp -r node_modules /tmp/before/ &&
 *   cp bench/ui_bench.ts /tmp/before/bench/ && (cd /tmp/before && deno task bench:ui)
 * ```
 *
 * Exit codes: 0 measured, 1 a page never rendered, 2 bad flags or no Chromium.
 *
 * @module
 */

import process from "node:process";
import puppeteer from "npm:puppeteer-core@25.16.0";
import { Client, connect } from "../runtime/client/client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { commandFlags } from "../runtime/settings/config.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import type { Store } from "../runtime/store/store.ts";
import { serveUi } from "../ui/server.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";

const USAGE = `usage: deno task bench:ui [--steps N] [--answer-mb N] [--seconds N] [--database-url URL]
  Opens three runs' pages in headless Chromium and measures what each costs while it stays open:
  requests, MB per request, the browser's busy seconds and this server's CPU seconds.
  --steps N          tool steps of the long runs (default 3000)
  --answer-mb N      size of the large answer in MB (default 50)
  --seconds N        how long each page is watched after its first render (default 15)
  --database-url URL PostgreSQL (a fresh schema, dropped after); default: embedded, in a temporary folder
  --chromium PATH    the browser (default /usr/bin/chromium, or CHROMIUM_PATH)`;

/** One scenario's figures. */
interface Figures {
  run: string;
  firstRenderS: number;
  requests: number;
  firstMB: number;
  mbPerPoll: number;
  polls: number;
  browserBusyS: number;
  serverCpuS: number;
  domNodes: number;
}

/** Writes `steps` confirmed tool steps of run `runId`; closes it as done with `answer`, or leaves a call open. */
async function writeRun(
  store: Store,
  opts: { runId: string; steps: number; answer?: string; open?: boolean },
): Promise<void> {
  const clock = new SystemClock();
  await store.leases.createRun({ runId: opts.runId, agent: "bench", goal: "go" }, clock.now());
  const epoch = (await claim(store, opts.runId, 0, "bench", clock.now()))!;
  const f = { runId: opts.runId, epoch };
  const usage = { prompt_tokens: 120, completion_tokens: 20 };
  for (let seq = 0; seq < opts.steps; seq++) {
    const args = { name: `server-${seq}`, size: "small" };
    const key = `${opts.runId}:${seq}`;
    await writeDecision(store, f, seq, { decision: { tool: "create_server", args }, usage }, clock.now());
    const call = await store.writes.effectIntentRow(
      f,
      { key, seq, tool: "create_server", args },
      clock.now(),
    );
    if (opts.open && seq === opts.steps - 1) return; // the last call's outcome is not known yet
    await store.writes.effectConfirm(
      f,
      call,
      { result: { id: `i-${seq}`, ip: "10.0.0.1" }, remote: "created" },
      clock.now(),
    );
  }
  const answer = opts.answer ?? "All servers are up.";
  await writeDecision(
    store,
    f,
    opts.steps,
    { decision: { done: true, message: answer }, usage },
    clock.now(),
  );
  await store.writes.finishRun(f, "done", null, clock.now(), answer);
}

async function main(args: string[]): Promise<number> {
  const parsed = commandFlags("bench:ui", USAGE, args, {
    steps: { type: "string" },
    "answer-mb": { type: "string" },
    seconds: { type: "string" },
    "database-url": { type: "string" },
    chromium: { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in parsed) return parsed.exit;
  const v = parsed.values;
  const num = (raw: string | undefined, name: string, fallback: number) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < 1) {
      throw new Error(`--${name} must be a positive integer: current value is ${raw}`);
    }
    return n;
  };
  let steps: number, answerMb: number, seconds: number;
  try {
    steps = num(v.steps, "steps", 3_000);
    answerMb = num(v["answer-mb"], "answer-mb", 50);
    seconds = num(v.seconds, "seconds", 15);
  } catch (err) {
    console.error(`bench:ui: ${(err as Error).message}`);
    return 2;
  }
  const chromium = v.chromium ?? Deno.env.get("CHROMIUM_PATH") ?? "/usr/bin/chromium";
  try {
    Deno.statSync(chromium);
  } catch {
    console.error(
      `bench:ui: no browser at ${chromium}: apt-get install -y chromium, or give --chromium PATH`,
    );
    return 2;
  }

  const dir = v["database-url"] ? undefined : await Deno.makeTempDir({ prefix: "ui-bench-" });
  const sandbox = v["database-url"]
    ? await createSandbox(v["database-url"], { prefix: "uibench" })
    : undefined;
  const client: Client = sandbox ? new Client(sandbox.store) : await connect({ dataDir: dir });
  const ui = await serveUi({ client, port: 0 });
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  let code = 0;
  try {
    const word = "lorem ipsum ";
    const answer = word.repeat(Math.ceil((answerMb * 1_000_000) / word.length)).slice(
      0,
      answerMb * 1_000_000,
    );
    console.log(
      `writing runs: ${steps} steps twice, and a ${answerMb} MB answer (${client.store.client.describe})`,
    );
    await writeRun(client.store, { runId: "steps-done", steps });
    await writeRun(client.store, { runId: "steps-open", steps, open: true });
    await writeRun(client.store, { runId: "answer", steps: 1, answer });
    const all: Figures[] = [];
    for (const run of ["steps-done", "steps-open", "answer"]) {
      const page = await browser.newPage();
      const cdp = await page.createCDPSession();
      await cdp.send("Network.enable");
      const urls = new Map<string, string>();
      const sizes: number[] = [];
      cdp.on("Network.requestWillBeSent", (e) => urls.set(e.requestId, e.request.url));
      cdp.on("Network.loadingFinished", (e) => {
        if (urls.get(e.requestId)?.includes(`/api/runs/${run}`)) sizes.push(e.encodedDataLength);
      });
      const t0 = performance.now();
      await page.goto(`${ui.url}/runs/${run}`, { waitUntil: "domcontentloaded" });
      try {
        await page.waitForFunction("Number(document.body.dataset.loaded ?? 0) >= 1", { timeout: 300_000 });
      } catch {
        console.error(`bench:ui: the page of ${run} did not render within 300 s`);
        code = 1;
        await page.close();
        continue;
      }
      const firstRenderS = (performance.now() - t0) / 1000;
      const before = await page.metrics();
      const cpu0 = process.cpuUsage();
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const cpu = process.cpuUsage(cpu0);
      const after = await page.metrics();
      const polls = sizes.slice(1);
      all.push({
        run,
        firstRenderS: Number(firstRenderS.toFixed(2)),
        requests: sizes.length,
        firstMB: Number(((sizes[0] ?? 0) / 1e6).toFixed(3)),
        mbPerPoll: Number((polls.reduce((a, b) => a + b, 0) / Math.max(1, polls.length) / 1e6).toFixed(4)),
        polls: polls.length,
        browserBusyS: Number(((after.TaskDuration ?? 0) - (before.TaskDuration ?? 0)).toFixed(2)),
        serverCpuS: Number(((cpu.user + cpu.system) / 1e6).toFixed(2)),
        domNodes: after.Nodes ?? 0,
      });
      console.log(JSON.stringify({ ...all.at(-1), watchedS: seconds }));
      await page.close();
    }
    console.table(all);
  } finally {
    await browser.close();
    await ui.close();
    if (sandbox) await sandbox.drop();
    else await client.close();
    if (dir) await Deno.remove(dir, { recursive: true });
  }
  return code;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
