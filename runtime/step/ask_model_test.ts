/**
 * One request to the model (ask_model.ts), asked directly: what it comes to.
 * An answer is returned as the model gave it, its warnings logged; an answer
 * with too many calls or none is refused (MODEL_TOO_MANY_CALLS, MODEL_EMPTY),
 * as is one the planner itself calls unusable, its usage kept; a transient
 * failure and a model silent past its timeout (a ManualClock's) are an
 * outage; any other failure is thrown as it was, and so is the reason a
 * stopping worker gives. A watched answer's text is sent on the store's
 * channel, all of it before ask() returns.
 */

import assert from "node:assert/strict";
import { ask } from "./ask_model.ts";
import { AbortedError, ModelError } from "../base/errors.ts";
import type { Planner } from "../model/planner.ts";
import type { DecideRequest, PlannerDecision } from "../model/transcript.ts";
import type { RunDeps, RunState } from "../run/context.ts";
import { decodeDelta } from "../run/stream.ts";
import { journalRow } from "../testdata/rows.ts";
import { stepWorld } from "../testdata/step_world.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());

/** A planner that answers `decide` (and records what it was asked). */
function model(decide: (req: DecideRequest) => Promise<PlannerDecision>) {
  const asked: DecideRequest[] = [];
  const planner: Planner = { describe: "test", decide: (req) => (asked.push(req), decide(req)) };
  return { planner, asked };
}

/** Asks the model of `deps` once, for step 3 of `state`'s run, on its second attempt. */
function askOnce(deps: RunDeps, state: RunState) {
  const question: DecideRequest = {
    runId: state.fence.runId,
    seq: 3,
    transcript: [{ role: "user", text: "g" }],
    tools: [],
  };
  return ask(
    deps,
    state,
    journalRow(state.fence.runId, 3, null, [{ code: "MODEL_EMPTY", message: "x" }]),
    question,
  );
}

const call = { name: "note", args: { text: "hi" } };
const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 };

Deno.test("ask() returns the model's answer as given, and logs what the model's library warned of", async () => {
  const state = await w.running("ask-1");
  const answer: PlannerDecision = { kind: "tool_calls", calls: [call], usage, warnings: ["seed ignored"] };
  const { planner, asked } = model(() => Promise.resolve(answer));
  assert.deepEqual(await askOnce(w.deps({ planner }), state), { kind: "answer", answer });
  assert.deepEqual([asked[0].runId, asked[0].seq, asked[0].transcript], ["ask-1", 3, [{
    role: "user",
    text: "g",
  }]]);
  assert.ok(asked[0].signal instanceof AbortSignal, "the request can be stopped");
  assert.equal(
    w.events("model-warning").filter((l) => / run=ask-1 seq=3 attempt=2 warnings="seed ignored"$/.test(l))
      .length,
    1,
  );
});

Deno.test("ask() refuses an unusable answer, naming why, with what it cost", async (t) => {
  const state = await w.running("ask-2");
  const cases: [string, () => Promise<PlannerDecision>, string, string][] = [
    [
      "more calls than the agent allows in a step",
      () => Promise.resolve({ kind: "tool_calls", calls: [call, call, call], usage }),
      "MODEL_TOO_MANY_CALLS",
      "The model asked for 3 tool calls at once; at most 2 per step are allowed",
    ],
    [
      "no calls",
      () => Promise.resolve({ kind: "tool_calls", calls: [], text: "Thinking.", usage }),
      "MODEL_EMPTY",
      "The model's answer lists no tool calls: call a tool, or say what was done",
    ],
    [
      "an answer the planner could not read",
      () => Promise.reject(new ModelError("BAD_JSON", "arguments are not JSON", { badAnswer: true, usage })),
      "BAD_JSON",
      "arguments are not JSON",
    ],
  ];
  for (const [name, decide, code, message] of cases) {
    await t.step(name, async () => {
      const { planner } = model(decide);
      const asked = await askOnce(w.deps({ planner, maxCallsPerStep: 2 }), state);
      assert.deepEqual(asked, { kind: "refused", rejection: { code, message }, usage });
    });
  }
});

Deno.test("ask() reads a transient failure as an outage, and throws any other as it was", async () => {
  const state = await w.running("ask-3");
  const unreachable = new ModelError("MODEL_UNREACHABLE", "connection refused", { transient: true });
  const outage = await askOnce(w.deps({ planner: model(() => Promise.reject(unreachable)).planner }), state);
  assert.deepEqual(outage, { kind: "outage", error: unreachable });
  for (const err of [new ModelError("MODEL_AUTH", "401: bad key"), new TypeError("planner bug")]) {
    await assert.rejects(
      askOnce(w.deps({ planner: model(() => Promise.reject(err)).planner }), state),
      (e) => e === err,
    );
  }
});

Deno.test("ask() gives up on a silent model at its timeout, by the clock, as an outage", async () => {
  const state = await w.running("ask-4");
  // A model that answers only when its request is stopped, with the reason it was stopped for.
  const silent = model((req) =>
    new Promise((_, reject) => req.signal!.addEventListener("abort", () => reject(req.signal!.reason)))
  );
  let ended = false;
  const asking = askOnce(w.deps({ planner: silent.planner, retry: { modelTimeoutMs: 5_000 } }), state)
    .finally(() => ended = true);
  await w.clock.advance(4_999);
  assert.equal(ended, false, "still waiting 1 ms before the timeout");
  await w.clock.advance(1);
  const asked = await asking;
  assert.equal(asked.kind, "outage");
  assert.deepEqual(
    asked.kind === "outage" && [asked.error.code, asked.error.message, asked.error.transient],
    ["MODEL_TIMEOUT", "The model did not answer within 5000ms", true],
  );
});

Deno.test("ask() on a stopping worker throws the reason it stops, even for a transient failure", async () => {
  const state = await w.running("ask-5");
  const stop = new AbortController();
  const stopping = new AbortedError("The worker is stopping");
  const { planner } = model(() => {
    stop.abort(stopping);
    return Promise.reject(new ModelError("MODEL_UNREACHABLE", "reset", { transient: true }));
  });
  await assert.rejects(
    askOnce(w.deps({ planner }), { ...state, signal: stop.signal }),
    (e) => e === stopping,
  );
});

Deno.test("ask() sends a watched answer's text on the store's channel, every piece before it returns", async () => {
  const state = await w.running("ask-6");
  const sent: string[] = [];
  const notify = w.store.stream.notify.bind(w.store.stream);
  w.store.stream.notify = (payload) => (sent.push(payload), notify(payload));
  try {
    const { planner } = model((req) => {
      req.onDelta?.("Hel");
      req.onDelta?.("lo");
      return Promise.resolve({ kind: "done", text: "Hello" });
    });
    const deps = { ...w.deps({ planner }), streamDeltas: true };
    assert.equal((await askOnce(deps, state)).kind, "answer");
    const deltas = sent.map(decodeDelta);
    assert.ok(
      deltas.length > 0 && deltas.every((d) => d?.runId === "ask-6" && d.seq === 3 && d.attempt === 2),
    );
    assert.deepEqual(deltas.map((d) => [d?.offset, d?.text]), [[0, "Hel"], [3, "lo"]], "in order, by offset");
  } finally {
    w.store.stream.notify = notify;
  }
});
