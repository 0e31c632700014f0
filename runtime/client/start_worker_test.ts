/**
 * `client.startWorker()` with the commands' defaults, in a file of its own: one embedded PGlite and no
 * steps, so a timer PGlite's wasm PostgreSQL arms after a statement (a statistics flush about a second
 * later) is never one another test or step started, which the op sanitizer would call a leak on a busy
 * machine (it did, beside the file's other tests sharing a PGlite).
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../agent/agent.ts";
import { Client } from "./client.ts";
import { defineTool } from "../agent/tools.ts";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { DEFAULTS } from "../base/defaults.ts";
import { CountingClient } from "../store/counting.ts";
import { Store } from "../store/store.ts";
import { testClient } from "../../tests/_pglite.ts";

Deno.test("startWorker() hosts with the commands' defaults (group commit on, the 3 s poll) unless told, and on a clock that never moves its runs still finish", async () => {
  const note = defineTool({
    name: "note",
    description: "Notes a word.",
    args: z.strictObject({ word: z.string() }),
    run: (args) => Promise.resolve({ result: args.word }),
  });
  const noter = defineAgent({
    name: "noter",
    tools: [note],
    model: {
      describe: "script",
      decide: (req) =>
        Promise.resolve(
          req.seq === 0
            ? { kind: "tool_calls", calls: [{ name: "note", args: { word: req.runId } }] }
            : { kind: "done", text: `noted ${req.runId}` },
        ),
    },
  });
  // A ManualClock nobody advances: the host's poll, its heartbeat and a grouped write's bound never come due.
  // The runs finish all the same: a run this client starts wakes its host (no poll needed), and a write
  // that waits for a group statement in flight goes out when that statement returns, not when the clock says.
  const clock = new ManualClock();
  const embedded = await testClient();
  const counting = new CountingClient(embedded.store.client);
  const still = new Client(new Store(counting), clock);
  const settled = async (ids: string[]) => {
    // Bounded, in real time (the clock stands still): eight runs of two steps take well under a second.
    for (let i = 0; i < 1_000; i++) {
      const runs = await Promise.all(ids.map((id) => still.get(id)));
      if (runs.every((r) => r?.status === "done")) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`not done: ${JSON.stringify(await Promise.all(ids.map((id) => still.get(id))))}`);
  };
  const host = async (opts: { groupCommitMs?: number }, prefix: string) => {
    const lines: string[] = [];
    counting.reset();
    const worker = await still.startWorker([noter], {
      log: new Logger({ clock, sink: arraySink(lines) }),
      ...opts,
    });
    try {
      const ids = [1, 2, 3, 4, 5, 6, 7, 8].map((n) => `${prefix}-${n}`);
      await Promise.all(ids.map((runId) => still.start(noter, { runId, input: "note it" })));
      await settled(ids);
      assert.equal(clock.now().getTime(), new ManualClock().now().getTime(), "the clock never moved");
    } finally {
      await worker.stop();
    }
    return lines.find((l) => l.includes("event=worker "))!;
  };
  try {
    {
      // By default: DEFAULTS' poll and group commit.
      const line = await host({}, "grouped");
      assert.match(line, new RegExp(`poll_ms=${DEFAULTS.pollMs}\\b`));
      assert.match(line, new RegExp(`group_commit_ms=${DEFAULTS.groupCommitMs}\\b`));
      assert.ok((counting.counts.get("group-write") ?? 0) > 0, "eight runs at once shared statements");
    }
    {
      // groupCommitMs: 0 turns it off.
      const line = await host({ groupCommitMs: 0 }, "alone");
      assert.doesNotMatch(line, /group_commit_ms/);
      assert.equal(counting.counts.get("group-write"), undefined, "every write alone");
    }
  } finally {
    await embedded.close();
  }
});
