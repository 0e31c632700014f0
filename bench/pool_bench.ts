/**
 * `deno task bench:pool`: the cost of a statement, sent one at a time, as a
 * long-lived process goes on sending them, on a client whose two
 * connections are both open (as a worker's are once two of its statements
 * ever overlapped). Three clients take turns, window by window:
 *
 * - `postgres.js max=2`: one postgres.js 3.4.9 pool of two connections, the
 *   reference (it slows with every statement sent: its idle list keeps an
 *   empty slot per statement and is searched whole each time);
 * - `postgres.js max=1`: one pool of one connection;
 * - `runtime max=2`: the runtime's `PostgresClient` (`openPostgres`), a pool
 *   of two whose idle list is emptied after `drainAfter` statements (default
 *   1,000) sent while it kept a connection idle.
 *
 * Each window sends `--window` statements (`select $1::int`, prepared) on each
 * client in turn and reports µs a statement for each; the last line compares
 * the last window with the first.
 *
 * @module
 */

import { parseArgs } from "node:util";
import postgres from "postgres";
import { openPostgres } from "../runtime/store/postgres.ts";

type Send = (i: number) => Promise<unknown>;

/** The command line. */
export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      window: { type: "string", default: "50000" },
      windows: { type: "string", default: "8" },
      "database-url": { type: "string" },
    },
  });
  const url = values["database-url"] ?? Deno.env.get("DATABASE_URL") ?? Deno.env.get("TEST_DATABASE_URL");
  if (!url) {
    console.error("bench:pool needs PostgreSQL: --database-url, DATABASE_URL or TEST_DATABASE_URL");
    return 2;
  }
  const window = Number(values.window);
  const windows = Number(values.windows);
  for (const [name, n] of [["--window", window], ["--windows", windows]] as const) {
    if (!Number.isInteger(n) || n < 1) {
      console.error(
        `bench:pool: ${name} must be a whole number from 1: current value is ${
          values[name.slice(2) as "window"]
        }`,
      );
      return 2;
    }
  }
  const two = postgres(url, { max: 2, onnotice: () => {} });
  const one = postgres(url, { max: 1, onnotice: () => {} });
  const ours = await openPostgres(url, { max: 2 });
  try {
    // Both connections of each two-connection client open: two statements at once.
    const sleep = "select pg_sleep(0.05)";
    await Promise.all([two.unsafe(sleep), two.unsafe(sleep)]);
    await Promise.all([ours.query(sleep), ours.query(sleep)]);
    const text = "select $1::int as n";
    const clients: [string, Send][] = [
      ["postgres.js max=2", (i) => two.unsafe(text, [i], { prepare: true })],
      ["postgres.js max=1", (i) => one.unsafe(text, [i], { prepare: true })],
      ["runtime max=2", (i) => ours.query(text, [i])],
    ];
    const first = new Map<string, number>();
    let last = new Map<string, number>();
    console.log(`bench:pool window=${window} windows=${windows} (µs a statement, one at a time)`);
    for (let w = 0; w < windows; w++) {
      last = new Map();
      for (const [name, send] of clients) {
        const t0 = performance.now();
        for (let i = 0; i < window; i++) await send(i);
        last.set(name, ((performance.now() - t0) * 1000) / window);
      }
      if (w === 0) { for (const [k, v] of last) first.set(k, v); }
      console.log(
        `window ${w + 1} (${(w + 1) * window} sent): ` +
          [...last].map(([k, v]) => `${k} ${v.toFixed(1)}`).join(", "),
      );
    }
    console.log(
      "last/first: " + [...last].map(([k, v]) => `${k} ${(v / first.get(k)!).toFixed(2)}`).join(", "),
    );
    return 0;
  } finally {
    await Promise.all([two.end(), one.end(), ours.close()]);
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
