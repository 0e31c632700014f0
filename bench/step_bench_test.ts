import assert from "node:assert/strict";
import { main } from "./step_bench.ts";

Deno.test("bench: the PGlite rows run, the replayed row sends the runtime's 17 statements a run, each named", async () => {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => lines.push(args.join(" "));
  let code: number;
  try {
    code = await main(
      [
        "--runs",
        "3",
        "--segments",
        "1",
        "--idle-runs",
        "0",
        "--no-telemetry",
        "--statements",
        "--only",
        "pglite 1",
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
  assert.equal(row("pglite 1 runtime SQL, replayed").at(-1), "17.0");
  assert.equal(row("pglite 1 runtime, no wire").at(-1), "17.0");
  // --statements: each statement named by what it does, sent per run as the rows count them.
  const perRun = (name: string) => {
    const line = lines.find((l) => l.trimStart().startsWith(`${name} `));
    assert.ok(line, `no statement ${name} in:\n${lines.join("\n")}`);
    return [...line.matchAll(/(\d+) x +\d+ µs/g)].map((m) => Number(m[1]));
  };
  assert.deepEqual(perRun("create-or-read runs"), [1]);
  assert.deepEqual(perRun("claim runs"), [1]);
  assert.deepEqual(perRun("insert journal"), [4, 4]);
  assert.deepEqual(perRun("update journal"), [4, 4]);
  assert.deepEqual(perRun("insert side_effects"), [3, 4]);
  assert.deepEqual(perRun("update side_effects"), [3, 4]);
  assert.deepEqual(perRun("close runs"), [1]);
  assert.match(lines.find((l) => l.includes("a run, in statements")) ?? "", /\d+ µs +\d+ µs/);
});
