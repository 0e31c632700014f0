import assert from "node:assert/strict";
import { main } from "./step_bench.ts";

Deno.test("bench: the PGlite rows run, and the replayed row sends the runtime's 17 statements a run", async () => {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => lines.push(args.join(" "));
  let code: number;
  try {
    code = await main(
      ["--runs", "3", "--segments", "1", "--idle-runs", "0", "--no-telemetry", "--only", "pglite 1"],
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
});
