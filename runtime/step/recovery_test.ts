/**
 * What a worker settles after its claim, before its first step, on PGlite:
 * a call a crash left at `intent` is re-sent under the same key (the remote
 * that acted answers with what it did), a call whose arguments no longer
 * parse is flagged rather than re-sent, and a flagged call blocks the run once
 * the others are settled. A run with no history settles nothing.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { recover } from "./recovery.ts";
import { settledSteps } from "../run/calls.ts";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { runDepsFor, type RunState } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { ToolCallReservation } from "../agent/budget.ts";
import { defineAgent } from "../agent/agent.ts";
import { defineTool, type Json, ToolRegistry } from "../agent/tools.ts";
import { Store } from "../store/store.ts";
import { claim, effectIntent, writeDecision } from "../../harness/direct_writes.ts";
import type { Decision } from "../store/rows.ts";
import { openTestPglite } from "../../tests/_pglite.ts";

/** The run claimed again by `w2` after epoch `from`, and the state its worker starts from: its rows as read back. */
async function claimedBy(store: Store, runId: string, from: number, now: Date): Promise<RunState> {
  const epoch = (await claim(store, runId, from, "w2", now))!;
  const { journal, effects } = await store.reads.loadHistory(runId);
  return {
    fence: { runId, epoch },
    goal: "g",
    journal: new Map(journal.map((j) => [j.seq, j])),
    effects: new Map(effects.map((e) => [e.seq, e])),
    signal: new AbortController().signal,
    reservation: new ToolCallReservation(runId),
  } as unknown as RunState;
}

async function setup() {
  const clock = new ManualClock();
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const lines: string[] = [];
  // The remote: keyed, it remembers what it did under each key.
  const done = new Map<string, string>();
  const sent: string[] = [];
  const note = defineTool({
    name: "note",
    description: "Saves a note.",
    args: z.strictObject({ text: z.string() }),
    run: ({ text }, ctx) => {
      sent.push(ctx.idempotencyKey);
      const first = !done.has(ctx.idempotencyKey);
      if (first) done.set(ctx.idempotencyKey, `note:${text}`);
      return Promise.resolve({
        result: done.get(ctx.idempotencyKey)!,
        remote: first ? "created" : "already_done",
      });
    },
  });
  const agent = defineAgent({ name: "notes", instructions: "x", tools: [note] });
  const deps = runDepsFor(
    processDeps({ store, clock, log: new Logger({ clock, sink: arraySink(lines) }), owner: "w2" }),
    agentDeps({
      agent,
      planner: { describe: "none", decide: () => Promise.reject(new Error("recovery asks no model")) },
      tools: new ToolRegistry([note]),
    }),
  );
  /** A run whose decisions and call intents a first worker wrote before it died; claimed again by `w2`. */
  const crashed = async (runId: string, calls: { seq: number; args: Json }[], decision: Decision) => {
    await store.leases.createRun({ runId, agent: "notes", goal: "g" }, clock.now());
    const first = { runId, epoch: (await claim(store, runId, 0, "w1", clock.now()))! };
    await writeDecision(store, first, 0, { decision }, clock.now());
    for (const c of calls) {
      await effectIntent(
        store,
        first,
        { key: `${runId}:${c.seq}`, seq: c.seq, tool: "note", args: c.args },
        clock.now(),
      );
    }
    return await claimedBy(store, runId, first.epoch, clock.now());
  };
  return { deps, store, lines, done, sent, crashed };
}

Deno.test("recover() re-sends a stranded call under its key, and the remote that acted answers as before", async () => {
  const { deps, store, lines, done, sent, crashed } = await setup();
  try {
    done.set("r1:0", "note:hi"); // the remote acted before the crash; nobody recorded it
    const state = await crashed("r1", [{ seq: 0, args: { text: "hi" } }], {
      tool: "note",
      args: { text: "hi" },
    });
    await recover(deps, state);
    assert.deepEqual(sent, ["r1:0"], "one request, under the same key");
    const row = await store.reads.getEffect("r1:0");
    assert.deepEqual([row?.status, row?.result, row?.remote], ["confirmed", "note:hi", "already_done"]);
    assert.equal(state.effects.get(0)?.status, "confirmed", "the state holds the row the confirm wrote");
    assert.match(lines.join("\n"), /event=recovery run=r1 .*tools_intent=1/);
    assert.match(lines.join("\n"), /event=recovered run=r1/);
  } finally {
    await store.client.close();
  }
});

Deno.test("recover() flags a call whose arguments no longer parse, and the run blocks on it once the rest are settled", async () => {
  const { deps, store, sent, crashed } = await setup();
  try {
    const decision: Decision = {
      calls: [{ tool: "note", args: { text: 7 } }, { tool: "note", args: { text: "ok" } }],
    };
    const state = await crashed(
      "r2",
      [{ seq: 0, args: { text: 7 } }, { seq: 1, args: { text: "ok" } }],
      decision,
    );
    const blocked = await recover(deps, state);
    assert.equal(blocked?.kind, "blocked");
    assert.equal(blocked?.key, "r2:0");
    assert.match(
      blocked?.reason ?? "",
      /r2:0 needs a human: it cannot be re-sent safely: [^]*deno task resolve r2:0/,
    );
    assert.deepEqual(sent, ["r2:1"], "the other call is settled first; the bad one is never sent");
    assert.equal((await store.reads.getEffect("r2:0"))?.status, "flagged");
    assert.equal((await store.reads.getEffect("r2:1"))?.status, "confirmed");
  } finally {
    await store.client.close();
  }
});

Deno.test("recover() settles nothing and logs nothing for a run with no history", async () => {
  const { deps, store, lines } = await setup();
  try {
    const state = {
      fence: { runId: "fresh", epoch: 1 },
      journal: new Map(),
      effects: new Map(),
    } as unknown as RunState;
    assert.equal(await recover(deps, state), undefined);
    assert.deepEqual(lines, []);
  } finally {
    await store.client.close();
  }
});

Deno.test("recover() after a run's settled steps looks only past them, and counts them in its recovery line as the whole history does", async () => {
  const { deps, store, lines, sent } = await setup();
  try {
    const clock = new ManualClock();
    /** Two steps settled (a decision and its confirmed call each), then a third whose call a crash stranded. */
    const history = async (runId: string) => {
      await store.leases.createRun({ runId, agent: "notes", goal: "g" }, clock.now());
      const first = { runId, epoch: (await claim(store, runId, 0, "w1", clock.now()))! };
      for (const seq of [0, 1, 2]) {
        await writeDecision(
          store,
          first,
          seq,
          { decision: { tool: "note", args: { text: `n${seq}` } } },
          clock.now(),
        );
        const row = await store.writes.effectIntentRow(
          first,
          { key: `${runId}:${seq}`, seq, tool: "note", args: { text: `n${seq}` } },
          clock.now(),
        );
        if (seq < 2) {
          await store.writes.effectConfirm(first, row, { result: "ok", remote: "created" }, clock.now());
        }
      }
      return await claimedBy(store, runId, first.epoch, clock.now());
    };
    const whole = await history("r5");
    await recover(deps, whole);
    const past = await history("r6");
    const ahead = settledSteps(past, 0, 12);
    assert.deepEqual(ahead, { seq: 2, steps: 2 });
    await recover(deps, past, ahead);
    assert.deepEqual(sent, ["r5:2", "r6:2"], "the stranded call of each, and nothing settled before it");
    const recovery = lines.filter((l) => l.includes("event=recovery")).map((l) =>
      l.replace(/.*event=recovery run=r\d /, "")
    );
    assert.equal(recovery.length, 2);
    assert.equal(recovery[1], recovery[0]);
    assert.match(recovery[0], /journal_confirmed=3 journal_intent=0 tools_confirmed=2 tools_intent=1/);
  } finally {
    await store.client.close();
  }
});
