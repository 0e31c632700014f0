/**
 * `deno task bench:outage`: the support agent under a real supervisor on
 * PostgreSQL rides out its shop's API and then its model's server down for
 * minutes (`--down-s`, default 300), with the defaults of a fresh
 * `deno task supervise` (workers, lease, poll and retry settings all unset;
 * `--env K=V` sets one). Reports, per outage: the runs, the failures they
 * recorded, the most that waited without a worker at once, the longest any
 * held a slot without a break, how long after the remote came back they were
 * all done, and their end states; then the tickets opened per key and the
 * model's answers per run. Reported, not asserted (the test with short
 * outages, `tests/outage_pg_test.ts`, asserts).
 *
 * ```sh
 * TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test deno task bench:outage --down-s 300 --runs 20
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { rideOutages } from "../harness/outage.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "database-url": { type: "string" },
    "down-s": { type: "string", default: "300" },
    runs: { type: "string", default: "20" },
    env: { type: "string", multiple: true, default: [] },
  },
});
const url = values["database-url"] ?? Deno.env.get("TEST_DATABASE_URL");
if (!url) {
  console.error("bench:outage needs PostgreSQL: --database-url URL (or TEST_DATABASE_URL)");
  Deno.exit(2);
}
const downMs = Number(values["down-s"]) * 1000;
const runs = Number(values.runs);
if (!Number.isFinite(downMs) || downMs <= 0 || !Number.isInteger(runs) || runs < 1) {
  console.error("--down-s must be a positive number of seconds and --runs a positive integer");
  Deno.exit(2);
}
// A fresh supervise's defaults: none of startSupervisor's short test settings.
const env: Record<string, string> = { POLL_S: "3", LEASE_S: "12", HEARTBEAT_S: "3", WORKERS: "2" };
for (const kv of values.env) {
  const [k, ...v] = kv.split("=");
  env[k] = v.join("=");
}
const sandbox = await createSandbox(url, { prefix: "bench_outage", max: 4 });
const started = Date.now();
try {
  const report = await rideOutages({
    databaseUrl: sandbox.url,
    phases: [
      { remote: "shop", downMs, runs },
      { remote: "model", downMs, runs },
    ],
    env,
    drainMs: 10 * 60_000,
    note: (line) => console.log(`[${((Date.now() - started) / 1000).toFixed(0)} s] ${line}`),
  });
  console.log(`\nsettings: ${JSON.stringify(env)} (everything else: the defaults)\n`);
  console.log(
    "| remote down | for | runs | failures recorded | most waiting at once | longest slot held | all done after it was back | end states |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const p of report.phases) {
    console.log(
      `| ${p.phase.remote} | ${
        p.phase.downMs / 1000
      } s | ${p.phase.runs} | ${p.failuresRecorded} | ${p.waitingMost} | ${
        (p.longestHoldMs / 1000).toFixed(1)
      } s | ${(p.backToDoneMs / 1000).toFixed(1)} s | ${JSON.stringify(p.statuses)} |`,
    );
  }
  const perKey = Object.values(report.tickets.requestsByKey);
  console.log(
    `\ntickets: ${report.tickets.opened} opened under ${report.tickets.keys} keys (${
      perKey.reduce((a, b) => a + b, 0)
    } ` +
      `requests in all, ${report.tickets.conflicts} conflicts)`,
  );
  const calls = Object.values(report.modelCalls);
  console.log(`model answers per run: min ${Math.min(...calls)}, max ${Math.max(...calls)}`);
  const refused = report.supervisorLines.filter((l) => /event=worker-refused/.test(l)).length;
  console.log(`worker slots refused: ${refused}`);
} finally {
  await sandbox.drop();
}
