/**
 * `deno task bench`: what a durable step costs. Drives whole demo runs (3 tool
 * steps + the done step) through the real loop and store, with the mocks
 * in-process so the figures are the runtime's and the database's, and
 * reports steps per second and statements per step:
 *
 * - PGlite (embedded), runs one after another;
 * - PostgreSQL (`DATABASE_URL` or `TEST_DATABASE_URL`), one run at a time and
 *   many runs at once in this one process (one worker process, many runs).
 *
 * - PGlite again with telemetry on: a child process with `OTEL_DENO=true`
 *   exporting over OTLP/HTTP to a local receiver, beside the row with it off.
 *
 * Flags: `--runs N` (default 200), `--concurrency N` (default 16).
 *
 * @module
 */

import { DEFAULT_INSTRUCTIONS } from "../runtime/agent.ts";
import { parseArgs } from "node:util";
import { MockCloud } from "../mock/cloud.ts";
import { demoTools } from "../examples/provision/tools.ts";
import { MockModel } from "../mock/model.ts";
import { SystemClock } from "../runtime/clock.ts";
import { DEFAULT_RETRY, type WorkerDeps } from "../runtime/context.ts";
import { flagProblem } from "../runtime/config.ts";
import { CrashPoints } from "../runtime/crashpoints.ts";
import { Logger } from "../runtime/log.ts";
import { runWorker } from "../runtime/loop.ts";
import { OpenAIPlanner } from "../runtime/planner.ts";
import { CountingClient } from "../runtime/store/counting.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { SCHEMA_SQL, type SqlClient, Store } from "../runtime/store/store.ts";
import { ToolRegistry } from "../runtime/tools.ts";
import { NO_TELEMETRY, telemetryFromEnv } from "../runtime/telemetry.ts";
import { startOtlpReceiver } from "../harness/otlp_receiver.ts";

const STEPS_PER_RUN = 4; // three tool steps and the done step
const PER_RUN = 5; // create-or-read, claim, two history reads, close

async function deps(client: SqlClient, tag: string): Promise<{ deps: WorkerDeps; counting: CountingClient }> {
  const clock = new SystemClock();
  const counting = new CountingClient(client);
  const log = new Logger({ clock, sink: () => {} });
  const model = await MockModel.open();
  const cloud = await MockCloud.open();
  return {
    counting,
    deps: {
      agent: "provision",
      instructions: DEFAULT_INSTRUCTIONS,
      store: new Store(counting),
      planner: new OpenAIPlanner({ url: "http://model/v1", model: "m", fetch: model.handler }),
      tools: new ToolRegistry(demoTools({ cloudUrl: "http://cloud", fetch: cloud.handler })),
      clock,
      log,
      crash: CrashPoints.none({ log, clock }),
      owner: `bench-${tag}`,
      maxSteps: 12,
      heartbeatMs: 3_000,
      leaseMs: 12_000,
      retry: DEFAULT_RETRY,
      random: Math.random,
      telemetry: telemetryFromEnv(),
    },
  };
}

async function drive(
  name: string,
  client: SqlClient,
  runs: number,
  concurrency: number,
): Promise<void> {
  const { deps: d, counting } = await deps(client, name);
  // Warm up (JIT, prepared statements) on a few runs that are not counted.
  for (let i = 0; i < 3; i++) await runWorker(d, `warm-${crypto.randomUUID()}`, "bench");
  counting.reset();
  const prefix = crypto.randomUUID().slice(0, 8);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      // Bounded: each worker takes the next run number until `runs` are taken.
      while (next < runs) {
        const i = next++;
        const outcome = await runWorker(d, `b-${prefix}-${i}`, "bench");
        if (outcome.status !== "done") throw new Error(`run ${i} ended ${outcome.status}`);
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  const steps = runs * STEPS_PER_RUN;
  const perRun = counting.total / runs;
  console.log(
    `${name.padEnd(34)} runs=${runs}  concurrency=${concurrency}  steps/s=${(steps / seconds).toFixed(0)}  ` +
      `runs/s=${(runs / seconds).toFixed(1)}  statements/run=${perRun.toFixed(1)}  ` +
      `statements/tool-step=${((perRun - PER_RUN - 2) / (STEPS_PER_RUN - 1)).toFixed(2)} ` +
      `(+2 for the done step, +${PER_RUN} per run)`,
  );
}

/** The usage text of `bench`. */
export const BENCH_USAGE = `agent-runtime bench: steps per second and statements per step of whole demo runs.

usage: deno task bench [--runs N] [--concurrency N]

  --runs N                   runs per measurement (default 200; PGlite at most 100)
  --concurrency N            runs at once in the many-runs PostgreSQL row (default 16)

PostgreSQL rows need DATABASE_URL or TEST_DATABASE_URL (env); without either they are skipped.

exit codes: 0 measured, 2 bad arguments`;

/** The command: measures and prints one row per configuration; returns the exit code. */
export async function main(args: string[], env: Record<string, string | undefined>): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      options: {
        runs: { type: "string", default: "200" },
        concurrency: { type: "string", default: "16" },
        help: { type: "boolean", short: "h" },
        "telemetry-child": { type: "boolean" },
      },
    }));
  } catch (err) {
    console.error(`bench: ${flagProblem(err)}. 'deno task bench --help' lists the flags`);
    return 2;
  }
  if (values.help) {
    console.log(BENCH_USAGE);
    return 0;
  }
  const runs = Number(values.runs);
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(concurrency) || concurrency < 1) {
    console.error(
      `bench: --runs and --concurrency must be positive integers: got ${values.runs}, ${values.concurrency}`,
    );
    return 2;
  }
  if (values["telemetry-child"]) {
    const pglite = await openPglite();
    await pglite.exec(SCHEMA_SQL);
    const on = telemetryFromEnv().enabled;
    await drive(`pglite, sequential, telemetry ${on ? "on" : "off"}`, pglite, Math.min(runs, 100), 1);
    await pglite.close();
    Deno.exit(0);
  }
  console.log(`bench: ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno}`);

  const pglite = await openPglite();
  await pglite.exec(SCHEMA_SQL);
  await drive("pglite (embedded), sequential", pglite, Math.min(runs, 100), 1);
  await pglite.close();
  await telemetryRow(runs);

  const url = env.DATABASE_URL || env.TEST_DATABASE_URL;
  if (!url) {
    console.log("postgres: skipped (set DATABASE_URL or TEST_DATABASE_URL)");
  } else {
    const sandbox = await createSandbox(url, { prefix: "bench", max: 1 });
    try {
      await drive("postgres, sequential", sandbox.store.client, runs, 1);
      const many = await openPostgres(sandbox.url, { max: concurrency });
      await drive(`postgres, ${concurrency} runs at once`, many, runs * 2, concurrency);
      await many.close();
    } finally {
      await sandbox.drop();
    }
  }
  return 0;
}

/**
 * The PGlite row again, twice, each in a fresh child process under the same
 * conditions: with Deno's OpenTelemetry off, then on and exporting spans and
 * metrics over OTLP/HTTP (JSON) to a local receiver. Then what the no-op
 * wrappers cost per step in this process, where telemetry is off.
 */
async function telemetryRow(runs: number): Promise<void> {
  const receiver = startOtlpReceiver();
  try {
    for (const on of [false, true]) {
      const child = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--unstable-no-legacy-abort",
          new URL(import.meta.url).pathname,
          "--telemetry-child",
          "--runs",
          String(runs),
        ],
        env: {
          OTEL_DENO: on ? "true" : "false",
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
          OTEL_SERVICE_NAME: "agent-runtime-bench",
        },
        stdout: "piped",
        stderr: "inherit",
      }).output();
      const out = new TextDecoder().decode(child.stdout).trim();
      console.log(out || `telemetry ${on ? "on" : "off"}: the child exited ${child.code} without a row`);
    }
    // Export is batched: give the last batch a moment before counting what arrived.
    await new Promise((r) => setTimeout(r, 300));
    console.log(`${"".padEnd(34)} spans exported with telemetry on=${receiver.spans.length}`);
  } finally {
    await receiver.close();
  }
  // The wrappers a step goes through with telemetry off (step, decide, model call, act, tool call).
  const state = { fence: { runId: "bench", epoch: 1 }, journal: new Map(), effects: new Map() };
  const t = NO_TELEMETRY;
  const n = 200_000;
  const body = () => Promise.resolve(1);
  const time = async (wrapped: boolean) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      if (wrapped) {
        await t.step(
          state,
          i,
          () =>
            t.decide(state, i, () => t.modelCall("m", () => Promise.resolve({ usage: 1 })))
              .then(() => t.act(state, i, () => t.toolCall(state, { key: "k", seq: i, tool: "x" }, body))),
        );
      } else {
        await Promise.resolve({ usage: 1 }).then(body);
      }
    }
    return ((performance.now() - t0) * 1e6) / n;
  };
  await time(true); // warm up
  const bare = await time(false);
  const wrapped = await time(true);
  console.log(
    `${"telemetry off, wrappers per step".padEnd(34)} ${(wrapped - bare).toFixed(0)} ns per step ` +
      `(${wrapped.toFixed(0)} ns wrapped vs ${bare.toFixed(0)} ns bare, ${n} steps in this process)`,
  );
}

if (import.meta.main) Deno.exit(await main(Deno.args, Deno.env.toObject()));
