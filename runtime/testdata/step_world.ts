/**
 * One worker holding runs on an in-process database (PGlite), for tests that
 * call a stage of the step directly: its deps built as a host builds them,
 * each run created and claimed through the real store, time a
 * {@link ManualClock}, every log line kept. One world serves a whole test
 * file; each test takes runs of its own.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { ManualClock } from "../base/clock.ts";
import { arraySink, Logger } from "../base/log.ts";
import { openPglite } from "../store/pglite.ts";
import type { RetryPolicy } from "../base/retry.ts";
import { applyRow, type RunDeps, runDepsFor, type RunState } from "../run/context.ts";
import { agentDeps, processDeps } from "../run/deps.ts";
import { ToolCallReservation } from "../agent/budget.ts";
import { defineTool, type Json, type Tool, ToolRegistry, type ToolSpec } from "../agent/tools.ts";
import type { Planner } from "../model/planner.ts";
import { Store } from "../store/store.ts";
import type { SideEffectRow } from "../store/rows.ts";
import type { PreparedCall } from "../step/settle.ts";

/** A tool taking `{ text }`, with whatever else `spec` sets (its `run` answers "ok" unless given). */
export function textTool(spec: Partial<ToolSpec<{ text: string }>> & { name: string }): Tool {
  return defineTool<{ text: string }>({
    description: `The ${spec.name} tool.`,
    args: z.strictObject({ text: z.string() }),
    run: () => Promise.resolve({ result: "ok" }),
    ...spec,
  });
}

const ms = (d: Date | string | null) => d === null ? null : new Date(d).getTime();

/** The fields of a tool call's row its writes set, comparable (times as milliseconds). */
export function comparable(r: SideEffectRow | undefined) {
  return r && {
    status: r.status,
    result: r.result,
    remote: r.remote,
    error: r.error,
    attempts: r.attempts,
    polls: r.polls,
    failures: r.failures,
    check_at: ms(r.check_at),
    wait_deadline_at: ms(r.wait_deadline_at),
  };
}

/** Opens the database and returns the world; close it with `close()`. */
export async function stepWorld() {
  const clock = new ManualClock();
  // From the suite's PGlite template when `deno task test` made one (as tests/_pg.ts's openTestPglite).
  const template = Deno.env.get("TEST_PGLITE_TEMPLATE");
  const store = new Store(
    await openPglite(undefined, {
      template: template ? new Blob([await Deno.readFile(template)]) : undefined,
    }),
  );
  await store.applySchema();
  const lines: string[] = [];
  const log = new Logger({ clock, sink: arraySink(lines) });
  const refuse: Planner = { describe: "none", decide: () => Promise.reject(new Error("no model here")) };

  /** The deps of worker `w1` driving an agent with `tools` (and `planner`, and `retry` over the defaults). */
  const deps = (
    opts: { tools?: Tool[]; planner?: Planner; retry?: Partial<RetryPolicy>; maxCallsPerStep?: number } = {},
  ): RunDeps =>
    runDepsFor(
      processDeps({ store, clock, log, owner: "w1", random: () => 0.5 }),
      agentDeps(
        {
          agent: {
            name: "steps",
            instructions: "Test.",
            tools: [],
            maxSteps: 10,
            maxCallsPerStep: opts.maxCallsPerStep,
          },
          planner: opts.planner ?? refuse,
          tools: new ToolRegistry(opts.tools ?? []),
        } as never,
        { retry: opts.retry },
      ),
    );

  /** Creates run `runId` and claims it for `w1`: the state a worker holds with no history. */
  const running = async (runId: string): Promise<RunState> => {
    await store.leases.createRun({ runId, agent: "steps", goal: "g" }, clock.now());
    const claimed = await store.leases.claimRun(runId, 0, "w1", clock.now());
    if (!claimed) throw new Error(`run ${runId} could not be claimed`);
    return {
      fence: { runId, epoch: claimed.epoch },
      goal: "g",
      journal: new Map(),
      effects: new Map(),
      signal: new AbortController().signal,
      reservation: new ToolCallReservation(runId),
    };
  };

  /** The call at `seq` of the run, with `args` as decided and as parsed. */
  const callOf = (state: RunState, seq: number, tool: Tool, args: Json = { text: "hi" }): PreparedCall => ({
    key: `${state.fence.runId}:${seq}`,
    seq,
    tool,
    rawArgs: args,
    args,
  });

  /** Writes the intent of `call`'s next request, as the step does before sending it, and applies it. */
  const intent = async (state: RunState, call: PreparedCall): Promise<SideEffectRow> => {
    const row = await store.writes.effectIntentRow(
      state.fence,
      { key: call.key, seq: call.seq, tool: call.tool.name, args: call.rawArgs },
      clock.now(),
      !state.effects.has(call.seq),
    );
    applyRow(state, row);
    return row;
  };

  /** Asserts that `row` is what the database holds under its key, and the row the run's state holds. */
  const held = async (state: RunState, row: SideEffectRow): Promise<void> => {
    assert.deepEqual(
      comparable(row),
      comparable(await store.reads.getEffect(row.idempotency_key)),
      "as stored",
    );
    assert.equal(state.effects.get(row.seq), row, "applied to the run's state");
  };

  /** The log lines of `event` so far. */
  const events = (event: string): string[] => lines.filter((l) => l.includes(` event=${event} `));

  return {
    clock,
    store,
    lines,
    deps,
    running,
    callOf,
    intent,
    held,
    events,
    close: () => store.client.close(),
  };
}

/** What {@link stepWorld} returns. */
export type StepWorld = Awaited<ReturnType<typeof stepWorld>>;
