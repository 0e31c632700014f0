import assert from "node:assert/strict";
import { main } from "./step_bench.ts";

Deno.test("bench: the PGlite rows run, the replayed row sends the runtime's 17 statements a run, each named, turn by turn", async () => {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => lines.push(args.join(" "));
  let code: number;
  try {
    code = await main(
      [
        ...["--runs", "3", "--segments", "2", "--idle-runs", "0", "--no-telemetry"],
        ...["--statements", "--turns", "--only", "pglite 1"],
      ],
      {},
    );
  } finally {
    console.log = log;
  }
  assert.equal(code, 0, lines.join("\n"));
  const row = (label: string) => {
    const line = lines.find((l) => l.startsWith(label));
    assert.ok(line, `no row ${label} in:\n${lines.join("\n")}`);
    return line.trim().split(/\s+/);
  };
  // The last column is statements a run.
  assert.equal(row("pglite 1 raw SQL").at(-1), "16.0");
  assert.equal(row("pglite 1 raw SQL, whole run").at(-1), "17.0");
  assert.equal(row("pglite 1 runtime SQL, replayed").at(-1), "17.0");
  assert.equal(row("pglite 1 runtime, no wire").at(-1), "17.0");
  // --statements: each statement by the name it is declared under (the raw rows' by the name of the
  // runtime's statement each stands for), sent per run as the rows count them, in the columns
  // replayed, no wire, worker host, raw, whole run (a row without the statement leaves its column blank).
  const perRun = (name: string) => {
    const line = lines.find((l) => l.trimStart().startsWith(`${name} `));
    assert.ok(line, `no statement ${name} in:\n${lines.join("\n")}`);
    return [...line.matchAll(/([\d.]+) x +\d+ µs/g)].map((m) => Number(m[1]));
  };
  assert.deepEqual(perRun("create-or-read"), [1, 1]);
  assert.deepEqual(perRun("first-claim"), [1, 1, 1]);
  assert.deepEqual(perRun("journal-intent"), [4, 4, 4, 4, 4]);
  assert.deepEqual(perRun("journal-confirm"), [4, 4, 4, 4, 4]);
  assert.deepEqual(perRun("effect-intent"), [3, 3, 3, 4, 3]);
  assert.deepEqual(perRun("effect-confirm"), [3, 3, 3, 4, 3]);
  assert.deepEqual(perRun("finish-run"), [1, 1, 1, 1]);
  // The whole-run floor inserts its run with a plain insert (the runtime's create-or-read reads too).
  assert.deepEqual(perRun("insert-run"), [1]);
  const takes = perRun("take-runs");
  // At least one take a run (an empty one may follow the last): the take replaces create-or-read and claim.
  assert.ok(takes.length === 1 && takes[0] >= 1, `the host takes its runs: ${takes}`);
  assert.match(lines.find((l) => l.includes("a run, in statements")) ?? "", /\d+ µs +\d+ µs/);
  // Each runtime row against the whole-run floor, steps/s and CPU/step.
  assert.match(
    lines.find((l) => l.includes("against pglite 1 raw SQL, whole run")) ?? "",
    // Any ratio the machine gives: a busy machine's CPU ratio can pass 10.
    /runtime SQL, replayed \d+\.\d\d \(\d+\.\d\d\), runtime, no wire \d+\.\d\d \(\d+\.\d\d\)/,
  );
  // --turns: each turn's ratios, then per row the median of them.
  assert.equal(lines.filter((l) => /^ {2}turn \d+: .* steps\/s; x raw [\d.]+ \/ /.test(l)).length, 2);
  assert.match(
    lines.find((l) => l.includes("pglite 1 runtime, no wire: x raw turn by turn")) ?? "",
    /median \d+\.\d\d \(\d+\.\d\d-\d+\.\d\d\)/,
  );
});

/** Runs the bench's `main` with `args`, no database URL, and returns its exit code and what it printed. */
async function bench(args: string[]): Promise<{ code: number; out: string[] }> {
  const out: string[] = [];
  const [log, error] = [console.log, console.error];
  console.log = console.error = (...a: unknown[]) => out.push(a.join(" "));
  try {
    return { code: await main(args, {}), out };
  } finally {
    [console.log, console.error] = [log, error];
  }
}

Deno.test("bench: --only matches anywhere in a label, and one that matches no row exits 2 listing them", async () => {
  // Not a prefix: the PGlite group runs for a row named in the middle of its label.
  const some = await bench([
    "--runs",
    "2",
    "--segments",
    "1",
    "--idle-runs",
    "0",
    "--only",
    "runtime, no wire",
  ]);
  assert.equal(some.code, 0, some.out.join("\n"));
  assert.ok(some.out.some((l) => l.startsWith("pglite 1 runtime, no wire")), some.out.join("\n"));
  assert.ok(!some.out.some((l) => l.startsWith("pglite 1 raw SQL")), some.out.join("\n"));

  const none = await bench(["--only", "postgres 17"]);
  assert.equal(none.code, 2);
  assert.match(none.out.join("\n"), /--only "postgres 17" matches no row/);
  assert.match(none.out.join("\n"), /postgres 16 runtime, no wire/);
});
