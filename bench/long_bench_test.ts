import assert from "node:assert/strict";
import { type Flatness, main } from "./long_bench.ts";

Deno.test("bench:long at a small size prints each figure at the start and at the end, for the long run and the conversation", async () => {
  const lines: string[] = [];
  const log = console.log;
  console.log = (...args: unknown[]) => lines.push(args.join(" "));
  const results: Flatness[] = [];
  let code: number;
  // The heap's figure is taken after a collection; a test process has no `gc`, so one that does nothing stands in.
  const withGc = globalThis as { gc?: () => void };
  withGc.gc = () => {};
  try {
    code = await main(["--steps", "60", "--messages", "30"], {}, results);
  } finally {
    console.log = log;
    delete withGc.gc;
  }
  assert.equal(code, 0, lines.join("\n"));
  assert.deepEqual(results.map((r) => r.label), [
    "pglite (in memory): one run of 60 steps",
    "pglite (in memory): a conversation of 30 messages",
  ]);
  for (const r of results) {
    const names = r.rows.map((row) => row.name);
    for (const name of ["ms per step", "CPU ms per step (this process)", "take-runs ms (the run's take)"]) {
      const row = r.rows.find((row) => row.name === name);
      assert.ok(row, `${r.label}: no row ${name} in ${names}`);
      // Every figure was measured at both ends (a number; any value the machine gives).
      assert.ok(row.start > 0 && row.end > 0 && row.ratio > 0, `${r.label}: ${JSON.stringify(row)}`);
    }
  }
  const heap = results[0].rows.find((row) => row.name === "heap MB, the run parked");
  assert.ok(heap && heap.start > 0 && heap.end > 0, `no heap figure: ${JSON.stringify(results[0].rows)}`);
  assert.equal(
    results[1].rows.find((row) => row.name.startsWith("heap")),
    undefined,
    "the heap is measured on the long run only",
  );
  assert.ok(lines.some((l) => l.includes("end/start")), lines.join("\n"));
});

Deno.test("bench:long refuses a size out of range", async () => {
  const err = console.error;
  console.error = () => {};
  try {
    assert.equal(await main(["--steps", "5"], {}), 2);
    assert.equal(await main(["--messages", "x"], {}), 2);
    assert.equal(await main(["--history-steps", "0"], {}), 2);
    assert.equal(await main(["--history-steps", "ten"], {}), 2);
    assert.equal(await main(["--takes", "0"], {}), 2);
    assert.equal(await main(["--takes", "30", "--steps", "60"], {}), 2);
  } finally {
    console.error = err;
  }
});
