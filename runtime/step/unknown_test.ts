/**
 * A call whose last request's outcome is unknown (unknown.ts), decided
 * directly on PGlite. unknownOutcome's verdict for each kind of call: a
 * keyed call is sent again below its tool's maxAttempts and given up
 * (TOOL_GAVE_UP) at it unless its reconcile finds it happened; a keyless call
 * is flagged unless its reconcile says it did not happen; a person's
 * `resolve --retry` sends it; a lookup that could not ask waits when the
 * caller can. It writes nothing. giveUp() ends a call past its retry
 * horizon as its tool's onGiveUp says, each end written and read back.
 */

import assert from "node:assert/strict";
import { giveUp, type Unknown, unknownOutcome, unknownRequests } from "./unknown.ts";
import { ToolError } from "../base/errors.ts";
import type { Reconciliation, ToolSpec } from "../agent/tools.ts";
import { effectRow } from "../testdata/rows.ts";
import { stepWorld, textTool } from "../testdata/step_world.ts";

const w = await stepWorld();
Deno.test.afterAll(() => w.close());
const deps = w.deps();

type PayOpts = Partial<ToolSpec<{ text: string }>> & { answer?: Reconciliation | "throws" };

/** Tool `pay`, whose reconcile (if `answer` is given) answers it, or throws; `asked` counts the lookups. */
function pay(opts: PayOpts) {
  const counter = { asked: 0 };
  const { answer, ...spec } = opts;
  const tool = textTool({
    name: "pay",
    ...spec,
    ...(answer === undefined ? {} : {
      reconcile: () => {
        counter.asked++;
        return answer === "throws" ? Promise.reject(new Error("lookup refused")) : Promise.resolve(answer);
      },
    }),
  });
  return { tool, counter };
}

const keyed = { idempotent: true };
const keyless = { idempotent: false };
/** What the worker saw of the call (all 4 requests unrecorded, unless said), and whether it can wait. */
type Saw = Partial<Unknown> & { canWait?: boolean };
const lookup = (idempotent: boolean, answer: PayOpts["answer"]): PayOpts => ({ idempotent, answer });
const happened: Reconciliation = { status: "happened", result: { id: 1 } };
const [SEND, FOUND, GAVE_UP] = [/^send$/, /^reconciled \{"id":1\}$/, /^TOOL_GAVE_UP /];

Deno.test("unknownOutcome() sends, reconciles, flags, waits or gives up, as the tool and its lookup allow", async (t) => {
  const state = await w.running("unknown-1");
  const before = await w.intent(state, w.callOf(state, 0, pay({}).tool));
  // [what, the tool, what the worker saw, the verdict, lookups made]
  const cases: [string, PayOpts, Saw, RegExp, number][] = [
    ["keyed, below maxAttempts: sent, no lookup", lookup(true, happened), { unrecorded: 3 }, SEND, 0],
    ["keyed, at maxAttempts, found: reconciled", lookup(true, happened), { unrecorded: 4 }, FOUND, 1],
    [
      "keyed, at maxAttempts, no lookup: gives up",
      keyed,
      { unrecorded: 4 },
      /^TOOL_GAVE_UP .*sent 4 times \(maxAttempts is 4\).*may have acted.*deno task reopen unknown-1/,
      0,
    ],
    [
      "keyed, at maxAttempts, not found: still gives up",
      lookup(true, { status: "not_happened" }),
      { unrecorded: 4 },
      /^TOOL_GAVE_UP (?!.*may have acted).*says it did not happen/,
      1,
    ],
    ["keyed, at maxAttempts, reopened: one more", keyed, { unrecorded: 4, reopened: true }, SEND, 0],
    ["keyed, at a lower maxAttempts: gives up", { ...keyed, maxAttempts: 2 }, { unrecorded: 2 }, GAVE_UP, 0],
    [
      "keyless, no lookup: flagged",
      keyless,
      { unrecorded: 1 },
      /^flag its outcome is unknown and pay .*key$/,
      0,
    ],
    ["keyless, not found: sent", lookup(false, { status: "not_happened" }), { unrecorded: 1 }, SEND, 1],
    ["keyless, found: reconciled", lookup(false, happened), { unrecorded: 1 }, FOUND, 1],
    [
      "keyless, its lookup cannot tell: flagged with the reason",
      lookup(false, { status: "unknown", reason: "no record" }),
      { unrecorded: 1 },
      /^flag .*no idempotency key; its reconcile could not tell \(no record\)$/,
      1,
    ],
    [
      "keyless, found a result that cannot be stored: flagged",
      lookup(false, { status: "happened", result: { n: 1n } as never }),
      { unrecorded: 1 },
      /^flag .*could not tell \(the result it found cannot be stored/,
      1,
    ],
    ["keyless, approved by a person: sent, no lookup", lookup(false, happened), { approved: true }, SEND, 0],
    [
      "keyless, its lookup could not ask, the caller can wait: later",
      lookup(false, "throws"),
      { unrecorded: 1, canWait: true },
      /^later its reconcile could not ask the remote \(its reconcile failed: .*lookup refused\)$/,
      1,
    ],
    [
      "keyless, its lookup could not ask, the caller cannot wait: flagged",
      lookup(false, "throws"),
      { unrecorded: 1 },
      /^flag .*could not tell \(its reconcile failed/,
      1,
    ],
  ];
  for (const [name, opts, saw, expected, lookups] of cases) {
    await t.step(name, async () => {
      const { tool, counter } = pay(opts);
      const { canWait, ...rest } = saw;
      const seen: Unknown = { attempts: 4, unrecorded: 4, approved: false, reopened: false, ...rest };
      let verdict: string;
      try {
        const v = await unknownOutcome(deps, state, w.callOf(state, 0, tool), seen, { canWait });
        verdict = v === "send"
          ? v
          : "reconciled" in v
          ? `reconciled ${JSON.stringify(v.reconciled)}`
          : "flag" in v
          ? `flag ${v.flag}`
          : `later ${v.later}`;
      } catch (err) {
        if (!(err instanceof ToolError)) throw err;
        verdict = `${err.code} ${err.message}`;
      }
      assert.match(verdict, expected);
      assert.equal(counter.asked, lookups, "lookups made");
    });
  }
  assert.deepEqual(await w.store.reads.getEffect("unknown-1:0"), before, "no verdict wrote anything");
});

Deno.test("unknownRequests() counts the requests no worker recorded an outcome for", () => {
  const call = { tool: "pay", args: {} };
  assert.equal(unknownRequests(effectRow("r", 0, call, { attempts: 3, failures: 1 })), 2);
  assert.equal(unknownRequests(effectRow("r", 0, call, { attempts: 2, failures: 2 })), 0);
  // A poll of a call its remote accepted counts no attempt, but its failure is recorded: never below 0.
  assert.equal(unknownRequests(effectRow("r", 0, call, { attempts: 1, polls: 3, failures: 3 })), 0);
});

Deno.test("giveUp() ends a call past its horizon as its tool's onGiveUp says", async (t) => {
  const state = await w.running("unknown-2");
  const down = new ToolError("SHOP_DOWN", "connection refused", { transient: true });
  let seq = 0;
  /** A call of `tool` that failed once, its failure recorded, and the row given up an hour on. */
  const giveUpOn = async (tool: ReturnType<typeof pay>["tool"]) => {
    const call = w.callOf(state, seq++, tool);
    const intent = await w.intent(state, call);
    const failed = await w.store.writes.effectFailure(state.fence, intent, {
      error: down.message,
      retryAt: w.clock.now(),
    }, w.clock.now());
    return { key: call.key, end: await giveUp(deps, state, call, failed, down, 3_600_000).catch((e) => e) };
  };
  const stored = async (key: string) => {
    const r = await w.store.reads.getEffect(key);
    return [r?.status, r?.remote ?? r?.error];
  };

  await t.step('"fail-run" on a keyed call fails the run TOOL_GAVE_UP, the call left at intent', async () => {
    const { key, end } = await giveUpOn(pay(keyed).tool);
    assert.equal(end.code, "TOOL_GAVE_UP");
    assert.match(
      end.message,
      /failed 1 times over 60 min .*last error: connection refused\. .*deno task reopen unknown-2/,
    );
    assert.deepEqual(await stored(key), ["intent", "connection refused"]);
  });
  await t.step('"fail-run" on a keyless call flags it for a person', async () => {
    const { key, end } = await giveUpOn(pay(keyless).tool);
    assert.equal(end.status, "flagged");
    assert.match(end.error, /^its outcome is unknown and pay takes no idempotency key: it failed 1 times/);
    assert.deepEqual(await stored(key), ["flagged", end.error]);
  });
  await t.step('"answer" records TOOL_UNAVAILABLE as the answer the model sees', async () => {
    const { key, end } = await giveUpOn(pay({ onGiveUp: "answer" }).tool);
    assert.match(end.error, /^pay is unavailable: its request failed 1 times over 60 min/);
    assert.deepEqual(await stored(key), ["failed", end.error]);
    assert.match(
      w.events("tool-failed").find((l) => l.includes(` key=${key} `)) ?? "",
      / code=TOOL_UNAVAILABLE /,
    );
  });
  await t.step("a function's text is the answer, told the key and the failures", async () => {
    const told: unknown[] = [];
    const onGiveUp = (f: { idempotencyKey: string; failures: number }) => {
      told.push([f.idempotencyKey, f.failures]);
      return "Payments are down; try tomorrow.";
    };
    const { key, end } = await giveUpOn(pay({ onGiveUp }).tool);
    assert.deepEqual(await stored(key), ["failed", "Payments are down; try tomorrow."]);
    assert.deepEqual(told, [[key, 1]]);
    assert.equal(end.status, "failed");
  });
  await t.step("a call its reconcile finds is confirmed as reconciled, not given up", async () => {
    const { key, end } = await giveUpOn(pay({ ...keyed, answer: happened }).tool);
    assert.deepEqual([end.status, end.result], ["confirmed", { id: 1 }]);
    assert.deepEqual(await stored(key), ["confirmed", "reconciled"]);
  });
});
