/**
 * The plain floor: what a plain script, knowing nothing of the runtime, gets
 * from a PostgreSQL server for four autocommit statements a step. It is the
 * reference `bench:capacity` holds its own raw row to, run as a process of
 * its own so that nothing of the bench (its heap, its other pools, its
 * timers) weighs on it.
 *
 * It makes a schema of its own with two bare tables (a primary key each, no
 * foreign key, no check), opens one postgres.js pool of `--clients`
 * connections, warms it up (every connection opened, every statement
 * prepared), then times `--runs` runs of four steps, `--clients` runs at a
 * time, each step an insert and an update of a decision row and an insert
 * and an update of a tool-call row. It prints one JSON line
 * (`{"steps_per_s": ...}`) and drops its schema.
 *
 * ```sh
 * deno run -A bench/plain_floor.ts --url postgres://postgres@127.0.0.1:5432/test --clients 16 --runs 200
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import postgres from "postgres";

/** Steps a run: as the capacity bench's runs. */
const STEPS = 4;

/**
 * The two bare tables of the floor (a primary key each, no foreign key, no check), in `schema` or, without
 * one, in the first schema of the search path.
 */
export const plainTables = (schema?: string): string =>
  `create table if not exists ${
    schema ? `${schema}.` : ""
  }decisions (run_id text, seq int, status text, decision jsonb, epoch int,
     intent_at timestamptz, confirmed_at timestamptz, primary key (run_id, seq));
   create table if not exists ${
    schema ? `${schema}.` : ""
  }calls (key text primary key, run_id text, seq int, tool text, args jsonb,
     status text, result jsonb, epoch int, intent_at timestamptz, confirmed_at timestamptz)`;

/** The four statements of a step, with their parameters for run `r` and step `s`. */
export const PLAIN_STEP: readonly [string, (r: string, s: number) => (string | number)[]][] = [
  [
    `insert into decisions (run_id, seq, status, epoch, intent_at) values ($1, $2, 'intent', 1, now())`,
    (r, s) => [r, s],
  ],
  [
    `update decisions set status = 'confirmed', decision = '{"tool":"create_server","args":{}}',
            confirmed_at = now() where run_id = $1 and seq = $2`,
    (r, s) => [r, s],
  ],
  [
    `insert into calls (key, run_id, seq, tool, args, status, epoch, intent_at)
     values ($1, $2, $3, 'create_server', '{}', 'intent', 1, now())`,
    (r, s) => [`${r}:${s}`, r, s],
  ],
  [
    `update calls set status = 'confirmed', result = '{"id":"i-1"}', confirmed_at = now() where key = $1`,
    (r, s) => [`${r}:${s}`],
  ],
];

/** Runs `runs` runs, `clients` at a time, on `sql`; returns the seconds taken. */
async function drive(sql: postgres.Sql, runs: number, clients: number): Promise<number> {
  const prefix = crypto.randomUUID().slice(0, 8);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    // Bounded: each lane takes the next run until `runs` are taken.
    while (next < runs) {
      const run = `${prefix}-${next++}`;
      for (let seq = 0; seq < STEPS; seq++) {
        for (const [text, params] of PLAIN_STEP) await sql.unsafe(text, params(run, seq), { prepare: true });
      }
    }
  }));
  return (performance.now() - t0) / 1000;
}

/** The command line: prints `{"steps_per_s": N, "runs": N, "clients": N}`. */
export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      url: { type: "string" },
      clients: { type: "string", default: "16" },
      runs: { type: "string", default: "200" },
    },
  });
  if (!values.url) {
    console.error("plain_floor: --url is required");
    return 2;
  }
  const clients = Number(values.clients);
  const runs = Number(values.runs);
  const schema = `plain_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = postgres(values.url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create schema ${schema}; ${plainTables(schema)}`).simple();
  const sql = postgres(values.url, {
    max: clients,
    onnotice: () => {},
    connection: { search_path: schema },
  });
  try {
    await drive(sql, Math.max(2 * clients, 32), clients);
    const seconds = await drive(sql, runs, clients);
    console.log(JSON.stringify({ steps_per_s: (runs * STEPS) / seconds, runs, clients }));
  } finally {
    await sql.end({ timeout: 5 });
    await admin.unsafe(`drop schema ${schema} cascade`).simple();
    await admin.end({ timeout: 5 });
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
