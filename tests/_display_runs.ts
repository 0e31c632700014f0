/**
 * Runs for the tests of what the CLI and the page show people: runs whose
 * every model-, tool- and user-controlled field carries terminal escape
 * sequences, bidi controls and invisible characters, written by a real worker
 * through the real store; and a long run with large values.
 *
 * @module
 */

import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import type { Client } from "../runtime/client/client.ts";
import { ToolError } from "../runtime/base/errors.ts";
import type { ManualClock } from "../runtime/base/clock.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { Planner, PlannerDecision } from "../runtime/model/planner.ts";
import type { Store } from "../runtime/store/store.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";

/**
 * A title, a clipboard write (OSC 52), an erase of the line, hidden text,
 * an 8-bit CSI, a right-to-left override, a zero-width space, DEL, a line
 * separator and a tag character.
 */
export const HOSTILE = "\u001b]0;owned-title\u0007\u001b]52;c;ZWNobyBwd25lZAo=\u0007\r\u001b[2K" +
  "\u001b[8mhidden\u001b[0m\u009b31m\u202eevil\u202c\u200b\u007f\u2028\u{e0041}";

/** What a terminal or a page must never receive raw (a newline aside). */
export const RAW_HIDDEN =
  // deno-lint-ignore no-control-regex
  /[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\u{e0000}-\u{e007f}]/u;

/** The account number a model swaps for one that reads the same. */
export const SPOOFED_ACCOUNT = "ACCT-\u202E9876\u202C";

function script(answers: ((toolResults: number) => PlannerDecision)[]): Planner {
  return {
    describe: "script",
    decide: (req) => {
      const results = req.transcript.filter((m) => m.role === "tool").length;
      return Promise.resolve(answers[Math.min(results, answers.length - 1)](results));
    },
  };
}

const tools = [
  defineTool({
    name: "lookup",
    description: "Looks something up.",
    args: z.looseObject({ q: z.string() }),
    run: () => Promise.resolve({ result: { found: HOSTILE, [HOSTILE]: [HOSTILE] } }),
  }),
  defineTool({
    name: "quota",
    description: "Checks a quota.",
    args: z.looseObject({ q: z.string() }),
    run: () => Promise.reject(new ToolError("QUOTA", `quota ${HOSTILE} exceeded`, { transient: false })),
  }),
  defineTool({
    name: "transfer",
    description: "Moves money.",
    args: z.strictObject({ to: z.string(), cents: z.number().int() }),
    approval: true,
    run: () => Promise.resolve({ result: "moved" }),
  }),
];

/** Three runs: `hostile-1` done (every field hostile), `hostile-2` waiting on a spoofed transfer, `hostile-3` denied. */
export async function writeHostileRuns(client: Client): Promise<void> {
  let refused = 0;
  const agent = defineAgent({
    name: "hostile",
    tools,
    model: script([
      () =>
        refused++ === 0
          ? { kind: "tool_calls", calls: [{ name: `no_such_${HOSTILE}`, args: {} }] }
          : { kind: "tool_calls", calls: [{ name: "lookup", args: { q: HOSTILE, [`k${HOSTILE}`]: 1 } }] },
      () => ({ kind: "tool_calls", calls: [{ name: "quota", args: { q: "x" } }] }),
      () => ({ kind: "done", text: `All fine.${HOSTILE}\nstep 9\n  output: nothing was deleted` }),
    ]),
  });
  const payer = defineAgent({
    name: "payer",
    tools,
    model: script([
      () => ({
        kind: "tool_calls",
        calls: [{ name: "transfer", args: { to: SPOOFED_ACCOUNT, cents: 100 } }],
      }),
      () => ({ kind: "done", text: "paid" }),
    ]),
  });
  const worker = await client.startWorker([agent, payer], {
    pollMs: 20,
    owner: `w${HOSTILE}`,
    log: new Logger({ clock: client.clock, sink: discardSink }),
  });
  try {
    await client.start(agent, { runId: "hostile-1", input: `goal ${HOSTILE}\nsecond line` });
    await client.start(payer, { runId: "hostile-2", input: "pay" });
    await client.start(payer, { runId: "hostile-3", input: "pay" });
    for (const id of ["hostile-1", "hostile-2", "hostile-3"]) await client.wait(id, { timeoutMs: 30_000 });
    // Through the store: the client refuses a control character in who acts (runtime/base/ids.ts), and a row
    // written by anything else (an older version, a hand-written statement) must still be shown escaped.
    await client.store.operators.decideApproval(
      "hostile-3:0",
      "denied",
      `bob${HOSTILE}`,
      `no ${HOSTILE}\nreally`,
      client.clock.now(),
    );
    // Bounded: a denied call lets the run finish within a few polls.
    for (let i = 0; i < 1_500 && (await client.get("hostile-3"))?.status === "waiting"; i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await client.wait("hostile-3", { timeoutMs: 30_000 });
  } finally {
    await worker.stop();
  }
}

/** A long answer (22 KB, a bidi control near its end). */
export const BIG = "big answer ".repeat(2_000) + "\u202e end";

/**
 * A done run of `steps` tool steps and a final answer `BIG` (also its
 * output), written through the store: step 3's arguments are 1,500
 * characters long, step 4's result holds `BIG`.
 */
export async function writeLongRun(
  store: Store,
  clock: ManualClock | { now(): Date },
  opts: { runId: string; steps: number },
): Promise<void> {
  const { runId, steps } = opts;
  await store.leases.createRun({ runId, agent: "long", goal: "go" }, clock.now());
  const epoch = (await claim(store, runId, 0, "w1", clock.now()))!;
  const f = { runId, epoch };
  const usage = { prompt_tokens: 2, completion_tokens: 1 };
  for (let seq = 0; seq < steps; seq++) {
    const args = { n: seq, pad: seq === 3 ? "x".repeat(1_500) : "" };
    await writeDecision(store, f, seq, { decision: { tool: "tick", args }, usage }, clock.now());
    const call = await store.writes.effectIntentRow(
      f,
      { key: `${runId}:${seq}`, seq, tool: "tick", args },
      clock.now(),
    );
    await store.writes.effectConfirm(
      f,
      call,
      { result: seq === 4 ? { text: BIG } : { ok: seq }, remote: "created" },
      clock.now(),
    );
  }
  await writeDecision(store, f, steps, { decision: { done: true, message: BIG }, usage }, clock.now());
  await store.writes.finishRun(f, "done", null, clock.now(), BIG);
}
