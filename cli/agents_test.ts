import assert from "node:assert/strict";
import { ManualClock } from "../runtime/clock.ts";
import { ConfigError } from "../runtime/errors.ts";
import { loadAgents } from "./agents.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

Deno.test("an agent module that never finishes importing is refused after the bound, naming the module", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  try {
    // A top-level await that settles only when the test lets it (after the bound), so the import
    // does not outlive the test.
    let release = () => {};
    const gate = new Promise<void>((r) => release = r);
    (globalThis as { agentsTestGate?: Promise<void> }).agentsTestGate = gate;
    await Deno.writeTextFile(`${dir}/hangs.ts`, `await globalThis.agentsTestGate;\nexport default 1;\n`);
    const clock = new ManualClock();
    const loading = loadAgents(`${dir}/hangs.ts`, { timeoutMs: 30_000, clock });
    let settled = false;
    loading.then(() => settled = true, () => settled = true);
    await clock.advance(29_999);
    assert.equal(settled, false, "still waiting within the bound");
    await clock.advance(1);
    await assert.rejects(loading, (err: ConfigError) => {
      assert.ok(err instanceof ConfigError);
      assert.equal(err.problems.length, 1);
      assert.match(err.problems[0], /^AGENT ".*hangs\.ts" did not finish loading within 30 s/);
      assert.match(err.problems[0], /AGENT_LOAD_S/);
      return true;
    });
    release();
    await import(`file://${dir}/hangs.ts`); // the module's own import, now finished
  } finally {
    delete (globalThis as { agentsTestGate?: Promise<void> }).agentsTestGate;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an agent module that loads within the bound leaves no timer behind", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agents_test_" });
  try {
    await Deno.writeTextFile(
      `${dir}/quick.ts`,
      `import { defineAgent } from "${MOD_TS}";\nexport default defineAgent({ name: "quick", tools: [] });\n`,
    );
    const clock = new ManualClock();
    const { agents } = await loadAgents(`${dir}/quick.ts`, { timeoutMs: 30_000, clock });
    assert.deepEqual(agents.map((a) => a.name), ["quick"]);
    assert.equal(clock.pending, 0, "the bound's sleep was cancelled");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
