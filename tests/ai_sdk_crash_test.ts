/**
 * #25's second promise: against the fake Anthropic Messages API, a run whose
 * first answer uses two tools at once and thinks with signed blocks, its real
 * `deno run` worker SIGKILLed after the decision and (another run) after a
 * call, resumes in a new process with the thinking blocks sent back unchanged
 * (the fake checks each signature and refuses a changed block), both calls
 * done once, and no model request repeated for a journaled step.
 */

import assert from "node:assert/strict";
import { connect } from "../mod.ts";
import type { JournalRow, SideEffectRow } from "../store.ts";
import { serveAnthropic } from "../mock/anthropic.ts";
import { serveMocks } from "../mock/server.ts";
import { spawnWorker } from "../harness/pg.ts";
import { CLEARED_SETTINGS } from "../harness/procs.ts";
import { ANTHROPIC_STEPS } from "./testdata/ai_sdk/script.ts";
import { seedDataDir } from "./_pg.ts";

const AGENT = new URL("./testdata/ai_sdk/anthropic_agent.ts", import.meta.url).pathname;

/** Reads a finished run's rows from its embedded database (the worker that held it has exited). */
async function rowsOf(
  dataDir: string,
  runId: string,
): Promise<{ journal: JournalRow[]; effects: SideEffectRow[] }> {
  const client = await connect({ dataDir });
  try {
    return await client.store.reads.loadHistory(runId);
  } finally {
    await client.close();
  }
}

for (const crash of [{ at: "after_decide", seq: 0 }, { at: "after_call", seq: 1 }]) {
  Deno.test(`a parallel, thinking Anthropic run killed (SIGKILL) ${crash.at} seq=${crash.seq} resumes with its thinking unchanged, each call done once, no model call repeated`, async () => {
    const anthropic = serveAnthropic();
    const mocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "aisdk-crash-" });
    await seedDataDir(`${dir}/data`);
    const runId = `claude-${crash.at.replace("_", "-")}`;
    try {
      anthropic.fake.setAgentScript("ops", ANTHROPIC_STEPS);
      const env = (extra: Record<string, string> = {}) => ({
        // None of the developer's settings leak in (an empty value is unset).
        ...Object.fromEntries([...CLEARED_SETTINGS].map((k) => [k, ""])),
        AGENT,
        RUN_ID: runId,
        DATA_DIR: `${dir}/data`,
        CLOUD_URL: mocks.cloudUrl,
        ANTHROPIC_BASE_URL: anthropic.url,
        ANTHROPIC_API_KEY: "test-key",
        ...extra,
      });
      const first = await spawnWorker(env({ CRASH_AT: crash.at, CRASH_SEQ: String(crash.seq) })).result;
      const out = first.lines.join("\n");
      assert.equal(first.signal, "SIGKILL", out);
      assert.match(out, new RegExp(` event=crash point=${crash.at} seq=${crash.seq} `));
      // The decision (two calls, signed thinking) was journaled before the kill: one request so far.
      assert.equal(anthropic.fake.calls(runId), 1, out);
      const atKill = new Set(mocks.cloud.created(`${runId}:`).map((r) => r.key));
      if (crash.at === "after_decide") assert.equal(atKill.size, 0, "nothing acted before the kill");
      else assert.ok(atKill.has(`${runId}:1`), "the second call had acted when the process died");

      const second = await spawnWorker(env()).result;
      assert.equal(second.code, 0, second.lines.join("\n"));
      assert.match(second.lines.join("\n"), /event=done /);

      // No model request was repeated for the journaled step: one per step, three in all.
      const requests = anthropic.fake.requests(runId);
      assert.deepEqual(requests.map((r) => r.status), [200, 200, 200]);
      // Each later request carried the thinking blocks given before, signatures checked: unchanged.
      assert.deepEqual(requests.map((r) => r.verifiedThinking), [0, 1, 2]);
      const { journal, effects } = await rowsOf(`${dir}/data`, runId);
      assert.deepEqual(journal.map((j) => [j.seq, j.status, j.llm_attempts]), [
        [0, "confirmed", 1],
        [2, "confirmed", 1],
        [3, "confirmed", 1],
      ]);
      const parts = journal[0].decision?.parts;
      assert.equal(parts?.[0].type, "reasoning");
      assert.deepEqual(parts?.[0].providerMetadata, {
        anthropic: { signature: await anthropic.fake.signature(ANTHROPIC_STEPS[0].thinking!) },
      });
      // Both calls of the parallel step, and the one after, each done once under its key.
      const created = mocks.cloud.created(`${runId}:`);
      assert.deepEqual(created.map((r) => r.key).sort(), [`${runId}:0`, `${runId}:1`, `${runId}:2`]);
      assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status]), [
        [`${runId}:0`, "confirmed"],
        [`${runId}:1`, "confirmed"],
        [`${runId}:2`, "confirmed"],
      ]);
      const remote = effects.find((e) => e.seq === 1)?.remote;
      assert.equal(remote, crash.at === "after_call" ? "already_done" : "created");
      // Sent again under its key after the kill, acted on once.
      const sent = mocks.cloud.requests().by_key[`${runId}:1`];
      assert.equal(sent, crash.at === "after_call" ? 2 : 1);
    } finally {
      await mocks.close();
      await anthropic.close();
      await Deno.remove(dir, { recursive: true });
    }
  });
}
