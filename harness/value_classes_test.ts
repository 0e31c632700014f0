/**
 * Every row of the table of values the database refuses or changes
 * (`value_classes.ts`), on PGlite and on PostgreSQL, each run under a worker
 * host: the answer refused and asked again, the value stored (as it was, as
 * JSON writes it, or with a character written out), the call failed, or the
 * input refused, with the model requests paid; and the table in
 * docs/values.md says what the runs did.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { testClient } from "../tests/_pglite.ts";
import {
  expectedRequests,
  type Observed,
  tryCase,
  VALUE_CASES,
  type ValueCase,
  valueTable,
} from "./value_classes.ts";
import { pgTest } from "../tests/_pg.ts";

const DOCS = new URL("../docs/values.md", import.meta.url);

/** Runs every row on `client` as a step each; returns what each did. */
async function everyRow(t: Deno.TestContext, client: Client): Promise<Observed[]> {
  const seen: Observed[] = [];
  for (const [i, c] of VALUE_CASES.entries()) {
    await t.step(`${c.name}, in the ${c.where}: ${c.expect}`, async () => {
      const o = await tryCase(client, c, `value-${i}`);
      seen.push(o);
      assert.deepEqual(o.problems, [], `${c.name} (${c.where})`);
      assert.equal(o.outcome, c.expect, `${c.name} (${c.where})`);
      assert.equal(o.requests, expectedRequests(c), `model requests for ${c.name} (${c.where})`);
    });
  }
  return seen;
}

/** The table rows of docs/values.md, as cells. */
async function docsRows(): Promise<string[][]> {
  const text = await Deno.readTextFile(DOCS);
  return text.split("\n").filter((l) => l.startsWith("|") && !/^\|\s*(Value\s*\||-+\s*\|)/.test(l)).map(
    splitRow,
  );
}

/** A Markdown table row's cells, trimmed (`deno fmt` pads them). */
function splitRow(line: string): string[] {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((cell) => cell.trim());
}

/** docs/values.md shows, for `column`, what `seen` observed, row by row. */
async function assertDocsShow(
  column: "PostgreSQL" | "PGlite",
  cases: readonly ValueCase[],
  seen: Observed[],
) {
  const expected = valueTable(
    cases,
    column === "PGlite" ? { pglite: seen } : { pglite: seen, postgres: seen },
  )
    .split("\n").slice(2).map(splitRow);
  const docs = await docsRows();
  assert.equal(docs.length, cases.length, "docs/values.md has a row per case");
  const index = column === "PostgreSQL" ? 2 : 3;
  for (const [i, row] of docs.entries()) {
    assert.deepEqual([row[0], row[1], row[index], row[4]], [
      expected[i][0],
      expected[i][1],
      expected[i][3],
      expected[i][4],
    ], `docs/values.md row ${i + 1}, ${column}`);
  }
}

Deno.test("every kind of value the database refuses or changes, on PGlite under a worker host", async (t) => {
  const client = await testClient();
  try {
    const seen = await everyRow(t, client);
    if (seen.length === VALUE_CASES.length) await assertDocsShow("PGlite", VALUE_CASES, seen);
  } finally {
    await client.close();
  }
});

pgTest(
  "every kind of value the database refuses or changes, on PostgreSQL under a worker host",
  async (pg, t) => {
    const client = new Client(pg.store);
    const seen = await everyRow(t, client);
    if (seen.length === VALUE_CASES.length) await assertDocsShow("PostgreSQL", VALUE_CASES, seen);
  },
);
