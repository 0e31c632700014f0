/**
 * One worker host of `bench:scale`'s shape, alone, with deno flags of your
 * choice (a CPU profile): `--runs` demo runs (default 1,000, all in flight in
 * the one worker) on PostgreSQL, the mock model and cloud served from this
 * process with the same latency (500 ms, 100 ms), the worker started as the
 * supervisor starts one (`cli/main.ts worker`, JSON log lines on a pipe this
 * process reads) with `--deno-flags` added to its `deno run`. Prints the
 * drain time, the worker's CPU from the first run taken to the drain, per
 * step, and its log lines per step; the worker then gets SIGTERM and exits,
 * which writes its profile.
 *
 * ```sh
 * deno run -A --unstable-no-legacy-abort bench/scale_profile.ts --runs 1000 \
 *   --deno-flags="--cpu-prof --cpu-prof-dir=.prof" --database-url postgres://postgres@127.0.0.1:5432/test
 * deno run -A bench/profile_summary.ts --by caller .prof/*.cpuprofile
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { DEMO_GOAL } from "../examples/provision/agent.ts";
import { serveMocks } from "../mock/server.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";

const repoPath = (rel: string) => fileURLToPath(new URL(`../${rel}`, import.meta.url));
const TIMEOUT_MS = 5 * 60_000;

/** CPU ticks (user + system) of `pid` so far. */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

/** Counts the lines of `stream`. */
async function countLines(stream: ReadableStream<Uint8Array>, count: { lines: number }): Promise<void> {
  for await (const chunk of stream) for (const byte of chunk) if (byte === 10) count.lines++;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      runs: { type: "string", default: "1000" },
      "deno-flags": { type: "string", default: "" },
      "model-ms": { type: "string", default: "500" },
      "cloud-ms": { type: "string", default: "100" },
      "database-url": { type: "string" },
    },
  });
  const runs = Number(values.runs);
  const serverUrl = values["database-url"] || Deno.env.get("TEST_DATABASE_URL") ||
    "postgres://postgres@127.0.0.1:5432/test";
  const sandbox = await createSandbox(serverUrl, { prefix: "scaleprof", max: 2 });
  const mocks = await serveMocks();
  try {
    mocks.model.setFaults({ delay_ms: Number(values["model-ms"]) });
    mocks.cloud.setFaults({ delay_ms: Number(values["cloud-ms"]) });
    const ids = Array.from({ length: runs }, (_, i) => `prof-${String(i).padStart(6, "0")}`);
    await sandbox.store.client.query(
      `insert into runs (run_id, agent, goal, input, status, epoch, created_at, updated_at)
       select id, 'provision', $2, $3::text::jsonb, 'pending', 0, $4::timestamptz, $4::timestamptz
         from jsonb_array_elements_text($1::text::jsonb) as id`,
      [JSON.stringify(ids), DEMO_GOAL, JSON.stringify(DEMO_GOAL), new Date().toISOString()],
    );
    const flags = values["deno-flags"].split(/\s+/).filter((f) => f !== "");
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "--unstable-no-legacy-abort",
        ...flags,
        "--config",
        repoPath("deno.json"),
        repoPath("cli/main.ts"),
        "worker",
      ],
      env: {
        DATABASE_URL: sandbox.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        CLOUD_URL: mocks.cloudUrl,
        RUNS_PER_WORKER: String(runs),
        POLL_S: "0.5",
        HEARTBEAT_S: "3",
        LEASE_S: "12",
        LOG_FORMAT: "json",
        WORKER: "scale-profile",
      },
      cwd: repoPath("."),
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const count = { lines: 0 };
    const reading = countLines(child.stdout, count);
    const t0 = Date.now();
    let startTicks: number | undefined;
    let ticks = 0;
    let done = 0;
    // Bounded by TIMEOUT_MS.
    while (Date.now() - t0 < TIMEOUT_MS) {
      const [row] = await sandbox.store.client.query<{ done: number; taken: number }>(
        `select count(*) filter (where status = 'done')::int as done,
                count(*) filter (where status <> 'pending')::int as taken from runs`,
      );
      ticks = await cpuTicks(child.pid);
      if (startTicks === undefined && row.taken > 0) startTicks = ticks;
      done = row.done;
      if (done === runs) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const drainS = (Date.now() - t0) / 1000;
    const [{ steps }] = await sandbox.store.client.query<{ steps: number }>(
      `select count(*)::int as steps from journal`,
    );
    child.kill("SIGTERM");
    await child.status;
    await reading;
    const cpuS = (ticks - (startTicks ?? 0)) / 100; // USER_HZ
    console.log(
      `${done} of ${runs} runs done in ${drainS.toFixed(2)} s; the worker's CPU from the first run taken ` +
        `${cpuS.toFixed(2)} s, ${
          (1000 * cpuS / Math.max(1, steps)).toFixed(3)
        } ms a step over ${steps} steps; ` +
        `${(count.lines / Math.max(1, steps)).toFixed(2)} log lines a step`,
    );
  } finally {
    await mocks.close();
    await sandbox.drop();
  }
}

if (import.meta.main) await main();
