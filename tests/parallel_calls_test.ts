/**
 * #24's first promise, as a new user meets it: an OpenAI-compatible model (the
 * mock over real HTTP) answers the first request with two `write_note` calls
 * at once. The notes agent finishes with both notes written once, in one model
 * request for that step, on the embedded default and under the supervisor on
 * PostgreSQL, with real `deno run` processes.
 */

import assert from "node:assert/strict";
import { serveMocks } from "../mock/server.ts";
import { parseLine, runCliIsolated, startSupervisor, until } from "../harness/procs.ts";
import { freshSchema, pgIgnore, seedDataDir } from "./_pg.ts";

const AGENT = new URL("../examples/notes/agent.ts", import.meta.url).pathname;

/** The script: two notes at once, then the answer. */
const TWO_NOTES = {
  agent: "notes",
  steps: [
    {
      calls: [
        { tool: "write_note", args: { title: "Plants", body: "Water them on Friday." } },
        { tool: "write_note", args: { title: "Bins", body: "Out on Thursday." } },
      ],
    },
    { answer: "Wrote two notes." },
  ],
};

async function notesIn(dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for await (const e of Deno.readDir(dir)) out[e.name] = await Deno.readTextFile(`${dir}/${e.name}`);
  return out;
}

const EXPECTED_NOTES = {
  "par1_0.md": "# Plants\n\nWater them on Friday.\n",
  "par1_1.md": "# Bins\n\nOut on Thursday.\n",
};

Deno.test("a model answering two write_note calls at once: the run finishes on the embedded default, both notes written once, one request for the step", async () => {
  const mocks = await serveMocks();
  const dir = await Deno.makeTempDir({ prefix: "par1-" });
  await seedDataDir(`${dir}/data`);
  try {
    mocks.model.setScript(TWO_NOTES);
    const { code, out } = await runCliIsolated(["run"], {
      AGENT,
      RUN_ID: "par1",
      DATA_DIR: `${dir}/data`,
      NOTES_DIR: `${dir}/notes`,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
    });
    assert.equal(code, 0, out);
    const lines = out.split("\n").map(parseLine).filter((l) => l !== undefined);
    const decided = lines.find((l) => l.event === "decided" && l.seq === "0");
    assert.equal(decided?.tools, "write_note,write_note", out);
    assert.equal(decided?.calls, "2");
    assert.deepEqual(
      lines.filter((l) => l.event === "confirmed").map((l) => [l.key, l.remote]).sort(),
      [["par1:0", "created"], ["par1:1", "created"]],
    );
    assert.equal(lines.find((l) => l.event === "done")?.output, "Wrote two notes.");
    assert.equal(mocks.model.calls("par1"), 2, "one request for the two calls, one for the answer");
    assert.deepEqual(await notesIn(`${dir}/notes`), EXPECTED_NOTES);
  } finally {
    await mocks.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "the same run under the supervisor on PostgreSQL: both notes written once, one request for the step",
  ignore: pgIgnore("parallel calls under the supervisor"),
  fn: async () => {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "par1-sup-" });
    try {
      mocks.model.setScript(TWO_NOTES);
      assert.ok(
        await pg.store.leases.createRun({ runId: "par1", agent: "notes", goal: "Two notes." }, new Date()),
      );
      const sup = startSupervisor({
        DATABASE_URL: pg.url,
        AGENT,
        NOTES_DIR: `${dir}/notes`,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        WORKERS: "1",
      });
      try {
        await until(
          async () => (await pg.store.reads.getRun("par1"))?.status === "done",
          "the run to finish",
        );
        sup.kill("SIGTERM");
        assert.equal(await sup.status, 0, sup.lines.join("\n"));
      } finally {
        await sup.close();
      }
      const { journal, effects } = await pg.store.reads.loadHistory("par1");
      assert.deepEqual(journal.map((j) => [j.seq, j.status, j.llm_attempts]), [[0, "confirmed", 1], [
        2,
        "confirmed",
        1,
      ]]);
      assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.attempts, e.remote]), [
        ["par1:0", "confirmed", 1, "created"],
        ["par1:1", "confirmed", 1, "created"],
      ]);
      assert.equal(mocks.model.calls("par1"), 2);
      assert.deepEqual(await notesIn(`${dir}/notes`), EXPECTED_NOTES);
    } finally {
      await mocks.close();
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
