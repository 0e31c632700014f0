import assert from "node:assert/strict";
import { main } from "./capacity_bench.ts";
import { pgIgnore, TEST_DATABASE_URL } from "../tests/_pg.ts";

/** Runs the bench with `args`, returning its exit code and the lines it printed. */
async function run(args: string[], env: Record<string, string | undefined> = {}) {
  const lines: string[] = [];
  const log = console.log;
  const saved = Object.keys(env).map((k) => [k, Deno.env.get(k)] as const);
  for (const [k, v] of Object.entries(env)) v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v);
  console.log = (...a: unknown[]) => lines.push(a.join(" "));
  try {
    const code = await main(args);
    return { code, lines: lines.join("\n").split("\n") };
  } finally {
    console.log = log;
    for (const [k, v] of saved) v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v);
  }
}

/** A row's figures from its line: steps/s and commits a step. */
function row(lines: string[], store: string, kind: string, inFlight: number) {
  const re = new RegExp(`^${store} +${kind.replace("+", "\\+")} +in_flight= *${inFlight} `);
  const line = lines.find((l) => re.test(l));
  assert.ok(line, `no row ${store} ${kind} ${inFlight} in:\n${lines.join("\n")}`);
  return {
    stepsPerS: Number(/steps\/s= *([\d.]+)/.exec(line)![1]),
    commitsPerStep: Number(/commits\/step=([\d.]+)/.exec(line)![1]),
  };
}

Deno.test("bench:capacity on PGlite: the raw floor commits four times a step, a grouped host fewer than one", async () => {
  const { code, lines } = await run(
    ["--stores", "pglite", "--in-flight", "16", "--turns", "1", "--scale", "0.1"],
    { DATABASE_URL: undefined, TEST_DATABASE_URL: undefined },
  );
  assert.equal(code, 0, lines.join("\n"));
  // Four a step, and the few the embedded store adds of its own (its analyses).
  const raw = row(lines, "pglite", "raw", 16).commitsPerStep;
  assert.ok(raw >= 4 && raw < 4.25, lines.join("\n"));
  assert.ok(row(lines, "pglite", "host+group", 16).commitsPerStep < 1, lines.join("\n"));
  assert.ok(lines.some((l) => l.startsWith("pglite: ratios to raw at 16 in flight")), lines.join("\n"));
});

Deno.test({
  name:
    "bench:capacity on PostgreSQL: the plain script runs beside the raw floor, and the report compares them",
  ignore: pgIgnore("bench:capacity on PostgreSQL"),
  fn: async () => {
    const { code, lines } = await run(
      ["--stores", "postgres", "--in-flight", "16", "--turns", "1", "--scale", "0.1", "--rows", "plain,raw"],
      { DATABASE_URL: TEST_DATABASE_URL },
    );
    assert.equal(code, 0, lines.join("\n"));
    assert.ok(row(lines, "postgres", "plain", 16).stepsPerS > 0);
    // Counted by the server: four commits a step (the bench's own statements taken off), and any the
    // server made in the bench's database meanwhile: autovacuum's (a clean-clone CI run read 4.11).
    const raw = row(lines, "postgres", "raw", 16).commitsPerStep;
    assert.ok(raw >= 4 && raw < 4.25, lines.join("\n"));
    assert.ok(
      lines.some((l) => /^raw at 16 \/ the plain script at 16: [\d.]+ \((within|NOT within) 10%\)$/.test(l)),
      lines.join("\n"),
    );
  },
});
