/**
 * The CPU floor of a demo step, for `bench/scale_bench.ts`: what a worker
 * cannot avoid spending on a step, measured in a process of its own started
 * like a worker (`deno run -A --unstable-no-legacy-abort`), in the same
 * benchmark run as the workers it is compared with.
 *
 * - **HTTP**: the requests of one demo run (4 to the model, 3 to the cloud),
 *   recorded from the first run the mocks served during the drain, sent again
 *   with plain `fetch` by `concurrency` synthetic runs at once (each run's
 *   requests in sequence, as a worker's run sends them), against fresh mocks
 *   with the same latency: each request's body serialised from its value
 *   (`JSON.stringify`), each answer read and parsed (`JSON.parse`), each run
 *   under idempotency keys of its own so the cloud creates every resource. No
 *   abort signal, no timer, no log line, no retry.
 * - **Rows**: the client side of grouped writes: multi-row statements of
 *   `batch` rows (an insert of journal intents from `unnest` arrays, then an
 *   update confirming them with a decision of the recorded answer's size) on
 *   a temporary table, through postgres.js as the runtime's store sends them
 *   (named prepared statements).
 *
 * CPU is `process.cpuUsage()` of the floor process (user + system) over the
 * measured part only: one warm-up wave of each comes first. The figures per
 * step are the run's HTTP CPU divided by its steps (4), and the CPU of one
 * row times the rows a demo step writes (intent and confirm of its journal
 * row, of its tool call's row, and its share of the run's close: 15 rows a
 * run, 3.75 a step).
 *
 * @module
 */

import process from "node:process";
import postgres from "postgres";
import { serveMocks } from "../mock/server.ts";

/** One request of the demo as the mocks received it. */
export interface RecordedRequest {
  /** `model` or `cloud`. */
  target: "model" | "cloud";
  method: string;
  /** Path and query, e.g. `/v1/chat/completions`. */
  path: string;
  /** The request's headers that matter (content type, idempotency key, the run's name). */
  headers: Record<string, string>;
  body: string;
  /** The answer's body. */
  answer: string;
}

/** Collects the requests of the first run the mocks see (4 model calls, 3 cloud calls). */
export class RunRecorder {
  #run: string | undefined;
  readonly requests: RecordedRequest[] = [];

  /** Wraps a mock's handler so each request of the chosen run is kept with its answer. */
  wrap(
    target: "model" | "cloud",
    handler: (req: Request) => Promise<Response>,
  ): (req: Request) => Promise<Response> {
    return async (req) => {
      const run = this.#runOf(target, req);
      if (run === undefined) return await handler(req);
      const body = await req.clone().text();
      const res = await handler(req);
      const answer = await res.clone().text();
      const url = new URL(req.url);
      const headers: Record<string, string> = {};
      for (const name of ["content-type", "idempotency-key", "x-agent-run", "x-agent-name"]) {
        const v = req.headers.get(name);
        if (v !== null) headers[name] = v;
      }
      this.requests.push({
        target,
        method: req.method,
        path: url.pathname + url.search,
        headers,
        body,
        answer,
      });
      return res;
    };
  }

  /** The run `req` belongs to when it is the recorded one, else undefined. */
  #runOf(target: "model" | "cloud", req: Request): string | undefined {
    if (target === "model") {
      const run = req.headers.get("x-agent-run") ?? undefined;
      this.#run ??= run;
      return run !== undefined && run === this.#run ? run : undefined;
    }
    const key = req.headers.get("idempotency-key") ?? "";
    return this.#run !== undefined && key.startsWith(`"${this.#run}:`) ? this.#run : undefined;
  }
}

/** What the floor process measured. */
export interface Floor {
  /** Synthetic runs measured at once, and their steps. */
  concurrency: number;
  steps: number;
  /** Client CPU of the HTTP requests, ms per step. */
  httpMsPerStep: number;
  /** Wall time of the measured wave, s (the latency-bound ideal of one run, 2.3 s at the defaults). */
  httpWallS: number;
  /** Rows per grouped statement, and client CPU per row written, ms. */
  batch: number;
  rowMs: number;
  /** Rows a demo step writes. */
  rowsPerStep: number;
  /** The floor of a step: HTTP plus its rows, ms. */
  msPerStep: number;
}

/** Demo rows a run writes (4 journal rows and 3 tool calls, each an intent and a confirm, and its close) over its 4 steps. */
const ROWS_PER_STEP = (2 * 4 + 2 * 3 + 1) / 4;
const STEPS_PER_RUN = 4;
const ROW_BATCHES = 40;

/** Options of {@link measureFloor}. */
export interface FloorOptions {
  recorded: RecordedRequest[];
  concurrency: number;
  batch: number;
  modelMs: number;
  cloudMs: number;
  databaseUrl: string;
}

/** Serves fresh mocks with the run's latency and measures the floor in a process of its own. */
export async function measureFloor(opts: FloorOptions): Promise<Floor> {
  const mocks = await serveMocks();
  try {
    mocks.model.setFaults({ delay_ms: opts.modelMs });
    mocks.cloud.setFaults({ delay_ms: opts.cloudMs });
    const input = JSON.stringify({
      recorded: opts.recorded,
      concurrency: opts.concurrency,
      batch: opts.batch,
      modelUrl: mocks.modelUrl.replace(/\/v1$/, ""),
      cloudUrl: mocks.cloudUrl,
      databaseUrl: opts.databaseUrl,
    });
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--unstable-no-legacy-abort", new URL(import.meta.url).pathname],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(input));
    await writer.close();
    const out = await child.output();
    if (!out.success) throw new Error(`the floor process exited with code ${out.code}`);
    return JSON.parse(new TextDecoder().decode(out.stdout)) as Floor;
  } finally {
    await mocks.close();
  }
}

interface FloorInput {
  recorded: RecordedRequest[];
  concurrency: number;
  batch: number;
  modelUrl: string;
  cloudUrl: string;
  databaseUrl: string;
}

/** Client CPU so far, ms. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** One synthetic run: the recorded requests in order, under its own run name and idempotency keys. */
async function oneRun(input: FloorInput, values: unknown[], name: string): Promise<void> {
  for (let i = 0; i < input.recorded.length; i++) {
    const r = input.recorded[i];
    const headers: Record<string, string> = { ...r.headers };
    if (headers["x-agent-run"] !== undefined) headers["x-agent-run"] = name;
    if (headers["idempotency-key"] !== undefined) headers["idempotency-key"] = `"${name}:${i}"`;
    const base = r.target === "model" ? input.modelUrl : input.cloudUrl;
    const res = await fetch(base + r.path, { method: r.method, headers, body: JSON.stringify(values[i]) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${r.method} ${r.path} answered HTTP ${res.status}: ${text.slice(0, 200)}`);
    JSON.parse(text);
  }
}

/** `runs` synthetic runs at once; the CPU they took (ms) and the wall time (s). */
async function wave(input: FloorInput, values: unknown[], tag: string, runs: number) {
  const cpu0 = cpuMs();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: runs }, (_, i) => oneRun(input, values, `floor-${tag}-${i}`)));
  return { cpuMs: cpuMs() - cpu0, wallS: (performance.now() - t0) / 1000 };
}

/** Client CPU per row of grouped writes of `batch` rows: an insert of intents and an update confirming them. */
async function rowCost(input: FloorInput, decision: string): Promise<number> {
  const sql = postgres(input.databaseUrl, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(
      `create temporary table floor_journal (run_id text, seq int, status text, epoch int, intent_at timestamptz,
         reserved_tokens int, params jsonb, decision jsonb, usage jsonb, confirmed_at timestamptz,
         primary key (run_id, seq))`,
    );
    const insert = `insert into floor_journal (run_id, seq, status, epoch, intent_at, reserved_tokens, params)
      select t.run_id, t.seq, 'intent', t.epoch, t.at::timestamptz, t.reserve, t.params::jsonb
        from unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::int[], $6::text[])
             as t(run_id, seq, epoch, at, reserve, params)`;
    const confirm = `update floor_journal j set status = 'confirmed', decision = t.decision::jsonb,
         usage = t.usage::jsonb, confirmed_at = t.at::timestamptz
        from unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::text[]) as t(run_id, seq, decision, usage, at)
       where j.run_id = t.run_id and j.seq = t.seq and j.status = 'intent'`;
    const usage = JSON.stringify({ input_tokens: 412, output_tokens: 38 });
    const batchOf = async (b: number) => {
      const ids = Array.from({ length: input.batch }, (_, i) => `floor-run-${b}-${i}`);
      const seqs = ids.map(() => 0);
      const at = ids.map(() => new Date().toISOString());
      await sql.unsafe(insert, [ids, seqs, ids.map(() => 1), at, ids.map(() => 0), ids.map(() => null)], {
        prepare: true,
      });
      await sql.unsafe(confirm, [ids, seqs, ids.map(() => decision), ids.map(() => usage), at], {
        prepare: true,
      });
    };
    for (let b = 0; b < 5; b++) await batchOf(-1 - b); // warm-up
    const cpu0 = cpuMs();
    for (let b = 0; b < ROW_BATCHES; b++) await batchOf(b);
    return (cpuMs() - cpu0) / (ROW_BATCHES * 2 * input.batch);
  } finally {
    await sql.end();
  }
}

async function floorMain(): Promise<void> {
  const input = JSON.parse(await new Response(Deno.stdin.readable).text()) as FloorInput;
  const values = input.recorded.map((r) => JSON.parse(r.body));
  await wave(input, values, "warm", Math.min(input.concurrency, 100));
  const measured = await wave(input, values, "run", input.concurrency);
  const httpMsPerStep = measured.cpuMs / (input.concurrency * STEPS_PER_RUN);
  const answer = input.recorded.find((r) => r.target === "model")?.answer ?? "{}";
  const rowMs = await rowCost(input, answer);
  const floor: Floor = {
    concurrency: input.concurrency,
    steps: input.concurrency * STEPS_PER_RUN,
    httpMsPerStep,
    httpWallS: measured.wallS,
    batch: input.batch,
    rowMs,
    rowsPerStep: ROWS_PER_STEP,
    msPerStep: httpMsPerStep + ROWS_PER_STEP * rowMs,
  };
  console.log(JSON.stringify(floor));
}

if (import.meta.main) {
  await floorMain();
}
