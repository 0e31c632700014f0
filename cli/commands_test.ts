import assert from "node:assert/strict";
import demoAgent from "../examples/provision/agent.ts";
import { Client } from "../runtime/client/client.ts";
import { answerTokens } from "../runtime/agent/budget.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { FencedError } from "../runtime/base/errors.ts";
import { openPglite } from "../runtime/store/pglite.ts";
import { type SideEffectRow, Store } from "../runtime/store/store.ts";
import {
  cancel,
  type CommandContext,
  CommandError,
  inspect,
  limits,
  main,
  move,
  prune,
  reopen,
  resolve,
  resolveMany,
  runs,
  settle,
  submit,
} from "./commands.ts";
import { claim, journalIntent, writeDecision } from "../harness/direct_writes.ts";
import { testTemplate } from "../tests/_pg.ts";
import { openTestPglite } from "../tests/_pglite.ts";

// The commands called in process run on the file's in-memory database, emptied for each test
// (tests/_pglite.ts); `dir` is for the commands run through `main` with DATA_DIR.
const dir = await Deno.makeTempDir({ prefix: "commands_test_" });
const clock = new ManualClock();

async function withStore(fn: (ctx: CommandContext, out: string[]) => Promise<void>): Promise<void> {
  const store = new Store(await openTestPglite());
  await store.applySchema();
  const out: string[] = [];
  try {
    await fn({ client: new Client(store, clock), print: (l) => out.push(l), actor: "alice" }, out);
  } finally {
    await store.client.close();
  }
}

/** A run blocked on a flagged call at seq 1 (of `tool`), after a confirmed call at seq 0. */
async function blockedRun(store: Store, runId: string, tool = "create_server"): Promise<void> {
  await store.leases.createRun({ runId: runId, agent: "provision", goal: "goal" }, clock.now());
  const epoch = (await claim(store, runId, 0, "w1", clock.now()))!;
  const f = { runId, epoch };
  const calls: SideEffectRow[] = [];
  for (const seq of [0, 1]) {
    const usage = { prompt_tokens: 10, completion_tokens: 5 };
    await writeDecision(store, f, seq, {
      decision: { tool: "create_server", args: { name: `s${seq}` } },
      usage,
      tokens: { released: 0, spent: answerTokens(usage, 0) },
    }, clock.now());
    calls.push(
      await store.writes.effectIntentRow(f, {
        key: `${runId}:${seq}`,
        seq,
        tool: seq === 1 ? tool : "create_server",
        args: {},
      }, clock.now()),
    );
  }
  await store.writes.effectConfirm(f, calls[0], { result: "i-1", remote: "created" }, clock.now());
  await store.writes.effectSettle(f, calls[1], { status: "flagged", error: "outcome unknown" }, clock.now());
  await store.writes.finishRun(f, "blocked", "needs a human", clock.now());
}

Deno.test("submit creates a pending run and refuses a duplicate id", async () => {
  await withStore(async (ctx, out) => {
    const run = await submit(ctx, demoAgent, { runId: "sub-1", input: "do things" });
    assert.equal(run.status, "pending");
    assert.equal(run.agent, "provision");
    assert.match(out[0], /^submitted {2}run=sub-1 {2}agent=provision {2}status=pending {2}input="do things"/);
    await assert.rejects(
      submit(ctx, demoAgent, { runId: "sub-1", input: "again" }),
      (e: CommandError) => e.code === "RUN_EXISTS",
    );
    await assert.rejects(
      submit(ctx, demoAgent, { runId: "bad id!", input: "x" }),
      (e: CommandError) => e.code === "BAD_RUN_ID" && e.exitCode === 2,
    );
    const generated = await submit(ctx, demoAgent, {});
    assert.match(generated.runId, /^provision-[0-9a-f]{8}$/, "a run id is generated when none is given");
    assert.match(String(generated.input), /^Provision a web server/, "the agent's default input");
  });
});

Deno.test("runs prints a table with steps, model calls and flagged calls", async () => {
  await withStore(async (ctx, out) => {
    await blockedRun(ctx.client.store, "tab-1");
    await ctx.client.store.leases.createRun(
      { runId: "tab-2", agent: "provision", goal: "goal" },
      clock.now(),
    );
    // Claimed by a worker of version v7, whose runs may move (`*`).
    await ctx.client.store.leases.claimRun("tab-2", 0, "w2", clock.now(), { version: "v7", mayMove: true });
    await clock.advance(2_500);
    await runs(ctx, { search: "tab-" });
    assert.match(
      out[0],
      /^RUN\s+AGENT\s+STATUS\s+EPOCH\s+OWNER\s+HEARTBEAT\s+TOOL_CALLS\s+LLM_CALLS\s+FLAGGED\s+TOKENS\s+VERSION$/,
    );
    const row = (run: string) => out.find((l) => l.startsWith(run))!.split(/\s{2,}/);
    // A blocked run has no live worker, so its lease age is not shown.
    assert.deepEqual(row("tab-1"), [
      "tab-1",
      "provision",
      "blocked",
      "1",
      "w1",
      "-",
      "2",
      "2",
      "1",
      "30",
      "-",
    ]);
    assert.deepEqual(row("tab-2"), [
      "tab-2",
      "provision",
      "running",
      "1",
      "w2",
      "2.5s ago",
      "0",
      "0",
      "0",
      "0",
      "v7*",
    ]);
    assert.equal(out.at(-1), "2 of 2 runs, newest first; page 1 of 1");
  });
});

Deno.test("runs pages newest first, filters, and says when nobody hosts a pending run's agent", async () => {
  await withStore(async (ctx, out) => {
    for (let i = 0; i < 5; i++) {
      await clock.advance(1);
      await ctx.client.store.leases.createRun(
        { runId: `page-${i}`, agent: "nobody-hosts-me", goal: "g" },
        clock.now(),
      );
    }
    await runs(ctx, { agent: "nobody-hosts-me", limit: 2, page: 2 });
    const ids = out.filter((l) => l.startsWith("page-")).map((l) => l.split(/\s+/)[0]);
    assert.deepEqual(ids, ["page-2", "page-1"]);
    assert.ok(out.includes("2 of 5 runs, newest first; page 2 of 3 (--page 3 for more)"), out.join("\n"));
    assert.match(out.at(-1)!, /^waiting: no live worker hosts agent nobody-hosts-me/);
  });
});

Deno.test("inspect shows each step's decision, tool call, tokens and what is left open", async () => {
  await withStore(async (ctx, out) => {
    await blockedRun(ctx.client.store, "ins-1");
    await inspect(ctx, "ins-1");
    const text = out.join("\n");
    assert.match(text, /^run ins-1 {2}agent=provision {2}status=blocked {2}epoch=1 {2}owner=w1/);
    assert.match(text, /decision {2}confirmed {2}create_server \{"name":"s0"\} {2}attempts=1 .*tokens=10\+5/);
    assert.match(text, /tool {6}confirmed {2}create_server {2}key=ins-1:0 .*remote=created {2}result="i-1"/);
    assert.match(text, /tool {6}flagged .*key=ins-1:1/);
    assert.match(text, /!! flagged: 'deno task resolve ins-1:1/);
    assert.match(text, /total {2}steps=2 {2}tool_calls=2 {2}llm_calls=2 {2}tokens=20\+10/);
    await assert.rejects(inspect(ctx, "nope"), (e: CommandError) => e.code === "RUN_NOT_FOUND");
  });
});

Deno.test("inspect counts a step of three calls as one step and three tool calls; the runs list, three tool calls", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    await store.leases.createRun({ runId: "ins-par", agent: "provision", goal: "goal" }, clock.now());
    const f = { runId: "ins-par", epoch: (await claim(store, "ins-par", 0, "w1", clock.now()))! };
    const calls = ["create_server", "create_database", "create_dns_record"].map((tool) => ({
      tool,
      args: {},
    }));
    await writeDecision(store, f, 0, { decision: { calls } }, clock.now());
    for (const [seq, { tool }] of calls.entries()) {
      const call = await store.writes.effectIntentRow(
        f,
        { key: `ins-par:${seq}`, seq, tool, args: {} },
        clock.now(),
      );
      await store.writes.effectConfirm(f, call, { result: `r-${seq}`, remote: "created" }, clock.now());
    }
    // The answer owns seq 3: four seqs, two steps (decisions), three tool calls.
    await writeDecision(store, f, 3, { decision: { done: true, message: "Three at once." } }, clock.now());
    await store.writes.finishRun(f, "done", null, clock.now(), "Three at once.");
    await inspect(ctx, "ins-par");
    assert.match(out.join("\n"), /^total {2}steps=2 {2}tool_calls=3 {2}llm_calls=2 {2}tokens=0\+0$/m);
    out.length = 0;
    await runs(ctx, { search: "ins-par" });
    const [head, row] = out.map((l) => l.split(/\s{2,}/));
    assert.equal(row[head.indexOf("TOOL_CALLS")], "3", out.join("\n"));
  });
});

Deno.test("resolve --result confirms a flagged call as resolved, records who, and unblocks the run", async () => {
  await withStore(async (ctx) => {
    await blockedRun(ctx.client.store, "res-1");
    await assert.rejects(
      resolve(ctx, "res-1:0", { action: "retry" }),
      (e: CommandError) => e.code === "NOT_FLAGGED",
    );
    const e = await resolve(ctx, "res-1:1", { action: "result", result: "i-9" });
    assert.equal(e.status, "confirmed");
    assert.equal(e.remote, "resolved");
    assert.equal(e.result, "i-9");
    assert.equal(e.resolved_by, "alice");
    assert.equal(e.resolved_at?.getTime(), clock.now().getTime());
    const run = await ctx.client.store.reads.getRun("res-1");
    assert.equal(run?.status, "pending");
    assert.equal(run?.heartbeat_at, null, "a supervisor takes it at its next poll");
    await assert.rejects(
      resolve(ctx, "res-1:1", { action: "fail" }),
      (err: CommandError) => err.code === "NOT_FLAGGED",
    );
  });
});

Deno.test("resolve --retry puts the call back at intent and --fail marks it failed", async () => {
  await withStore(async (ctx) => {
    await blockedRun(ctx.client.store, "res-2");
    await blockedRun(ctx.client.store, "res-3");
    const retried = await resolve(ctx, "res-2:1", { action: "retry" });
    assert.equal(retried.status, "intent");
    assert.equal(retried.error, null);
    assert.equal(retried.resolved_by, "alice");
    const failed = await resolve(ctx, "res-3:1", { action: "fail", reason: "checked: never created" });
    assert.equal(failed.status, "failed");
    assert.match(failed.error ?? "", /marked failed by alice: checked: never created/);
    assert.equal((await ctx.client.store.reads.getRun("res-2"))?.status, "pending");
    assert.equal((await ctx.client.store.reads.getRun("res-3"))?.status, "pending");
    await assert.rejects(
      resolve(ctx, "res-9:0", { action: "retry" }),
      (e: CommandError) => e.code === "CALL_NOT_FOUND",
    );
  });
});

Deno.test("resolve --tool lists with --dry-run, then settles them all at the confirmed count, each recorded", async () => {
  await withStore(async (ctx, out) => {
    for (const id of ["bulk-1", "bulk-2", "bulk-3"]) await blockedRun(ctx.client.store, id, "charge_card");
    const listed = await resolveMany(ctx, { tool: "charge_card" }, { action: "retry" }, { dryRun: true });
    assert.equal(listed.length, 3);
    assert.match(
      out[0],
      /^dry-run {2}would resolve 3 flagged call\(s\) of blocked runs {2}tool=charge_card {2}action=retry$/,
    );
    assert.match(
      out[1],
      /^ {2}bulk-1:1 {2}tool=charge_card {2}run=bulk-1 {2}attempts=1 {2}args=\{\} {2}error="outcome unknown"$/,
    );
    assert.match(out.at(-1)!, /--expect 3 instead of --dry-run$/);
    assert.equal(
      (await ctx.client.store.reads.getEffect("bulk-1:1"))?.status,
      "flagged",
      "a dry run changes nothing",
    );

    await assert.rejects(
      resolveMany(ctx, { tool: "charge_card" }, { action: "retry" }, { expect: 2 }),
      (e: CommandError) => e.code === "COUNT_CHANGED" && e.exitCode === 1,
    );
    out.length = 0;
    const settled = await resolveMany(ctx, { tool: "charge_card" }, { action: "retry" }, { expect: 3 });
    assert.deepEqual(
      settled.map((e) => [e.idempotency_key, e.status, e.resolved_by, e.resolved_at?.getTime()]),
      [
        ["bulk-1:1", "intent", "alice", clock.now().getTime()],
        ["bulk-2:1", "intent", "alice", clock.now().getTime()],
        ["bulk-3:1", "intent", "alice", clock.now().getTime()],
      ],
    );
    assert.match(
      out[0],
      /^resolved {2}key=bulk-1:1 {2}status=intent {2}remote=- {2}by=alice {2}run=bulk-1 {2}run_status=pending$/,
    );
    assert.equal(
      out.at(-1),
      "resolved 3 flagged call(s)  tool=charge_card  action=retry  runs_unblocked=3",
    );
    for (const id of ["bulk-1", "bulk-2", "bulk-3"]) {
      assert.equal((await ctx.client.store.reads.getRun(id))?.status, "pending");
    }
  });
});

Deno.test("resolve refuses a bulk filter used wrongly, in one line with exit 2", async () => {
  const errors: string[] = [];
  const original = console.error;
  console.error = (msg: string) => errors.push(msg);
  try {
    const cases: [string[], RegExp][] = [
      [["--tool", "t", "--retry"], /needs --dry-run \(list what it would settle\) or --expect N/],
      [["--tool", "t", "--retry", "--dry-run", "--expect", "2"], /needs --dry-run .* or --expect N/],
      [["k:0", "--tool", "t", "--retry", "--dry-run"], /a tool call key or --tool\/--run, not both/],
      [["k:0", "--retry", "--dry-run"], /--dry-run and --expect go with --tool NAME or --run RUN/],
      [
        ["--run", "r", "--fail", "--expect", "0"],
        /--expect must be an integer from 1 to 1000: current value is "0"/,
      ],
      [["--run", "r", "--dry-run"], /exactly one of --result JSON, --retry, --fail/],
      [["--run", "bad id", "--retry", "--dry-run"], /BAD_RUN_ID/],
    ];
    for (const [args, problem] of cases) {
      errors.length = 0;
      assert.equal(await main(["resolve", ...args], { DATA_DIR: dir }, () => {}), 2, args.join(" "));
      assert.equal(errors.length, 1, args.join(" "));
      assert.match(errors[0], problem);
    }
  } finally {
    console.error = original;
  }
});

Deno.test("the commands refuse a NUL, a lone surrogate or U+FFFD in a run id, a key, a message id, --by or a filter, in one line with exit 2, before opening the database", async (t) => {
  const errors: string[] = [];
  const original = console.error;
  console.error = (msg: string) => errors.push(msg);
  try {
    const casesFor = (bad: string): [string[], string][] => [
      [["inspect", bad], "BAD_RUN_ID"],
      [["watch", bad], "BAD_RUN_ID"],
      [["cancel", bad], "BAD_RUN_ID"],
      [["reopen", bad], "BAD_RUN_ID"],
      [["send", bad, "--message", "hi"], "BAD_RUN_ID"],
      [["send", bad, "--end"], "BAD_RUN_ID"],
      [["resolve", "--run", bad, "--retry", "--dry-run"], "BAD_RUN_ID"],
      [["resolve", `${bad}:0`, "--retry"], "ID_INVALID"],
      [["settle", `${bad}:0`, "--result", "1"], "ID_INVALID"],
      [["approve", `${bad}:0`], "ID_INVALID"],
      [["deny", `${bad}:0`, "--reason", "no"], "ID_INVALID"],
      [["settle", "ids-1:0", "--result", "1", "--by", bad], "ID_INVALID"],
      [["resolve", "ids-1:0", "--retry", "--by", bad], "ID_INVALID"],
      [["approve", "ids-1:0", "--by", bad], "ID_INVALID"],
      [["cancel", "ids-1", "--by", bad], "ID_INVALID"],
      [["send", "ids-1", "--message", "hi", "--message-id", bad], "MESSAGE_INVALID"],
      [["runs", "--agent-name", bad], "FILTER_INVALID"],
      [["runs", "--search", bad], "FILTER_INVALID"],
      [["resolve", "--tool", bad, "--retry", "--dry-run"], "FILTER_INVALID"],
    ];
    // Every command with a NUL; one of each kind with a lone surrogate, and with U+FFFD (what Deno.args
    // holds for a shell argument that is not UTF-8: $'id-\xff' and $'id-\xfe' alike).
    const oneOfEach = (bad: string): [string[], string][] => [
      [["inspect", bad], "BAD_RUN_ID"],
      [["approve", `${bad}:0`], "ID_INVALID"],
      [["approve", "ids-1:0", "--by", bad], "ID_INVALID"],
      [["send", "ids-1", "--message", "hi", "--message-id", bad], "MESSAGE_INVALID"],
      [["runs", "--search", bad], "FILTER_INVALID"],
    ];
    for (const cases of [casesFor("a\u0000b"), oneOfEach("a\ud800b"), oneOfEach("a\ufffdb")]) {
      for (const [args, code] of cases) {
        await t.step(args.map((a) => JSON.stringify(a)).join(" "), async () => {
          errors.length = 0;
          // Refused before the database is opened: a server nobody listens on is never reached (exit 7).
          assert.equal(
            await main(args, { DATABASE_URL: "postgres://u@127.0.0.1:1/none" }, () => {}),
            2,
            errors.join("\n"),
          );
          assert.equal(errors.length, 1, errors.join("\n"));
          assert.match(errors[0], new RegExp(`^${code}: `));
          // The value seen, escaped: a terminal is never sent the NUL or the lone surrogate.
          assert.ok(errors[0].isWellFormed() && !errors[0].includes("\0"), errors[0]);
        });
      }
    }
  } finally {
    console.error = original;
  }
});

/** A run whose call at seq 0 its remote accepted: waiting on a timer 30 s on (or, `person`, for an approval too). */
async function waitingRun(store: Store, runId: string, opts: { person?: boolean } = {}): Promise<void> {
  const now = clock.now();
  const later = (s: number) => new Date(now.getTime() + s * 1000);
  await store.leases.createRun({ runId, agent: "provision", goal: "goal" }, now);
  const f = { runId, epoch: (await claim(store, runId, 0, "w1", now))! };
  await writeDecision(
    store,
    f,
    0,
    { decision: { tool: "create_server", args: { name: "s0" } }, usage: null },
    now,
  );
  const sent = await store.writes.effectIntentRow(
    f,
    { key: `${runId}:0`, seq: 0, tool: "create_server", args: {} },
    now,
  );
  await store.writes.effectWaiting(f, sent, {
    result: { job: "j-1" },
    checkAt: later(30),
    deadlineAt: later(3600),
  });
  if (opts.person) {
    await writeDecision(store, f, 1, {
      decision: { tool: "create_server", args: { name: "s1" } },
      usage: null,
    }, now);
    await store.writes.requestApproval(
      f,
      { key: `${runId}:1`, seq: 1, tool: "create_server", args: {}, hash: "h" },
      now,
    );
  } else {
    assert.equal(await store.writes.waitRun(f, later(30), now), true);
  }
}

Deno.test("runs and inspect say what a waiting run waits for, and when its call is asked again", async () => {
  await withStore(async (ctx, out) => {
    await waitingRun(ctx.client.store, "wai-1");
    await waitingRun(ctx.client.store, "wai-2", { person: true });
    const wake = new Date(clock.now().getTime() + 30_000).toISOString();
    const deadline = new Date(clock.now().getTime() + 3_600_000).toISOString();
    await runs(ctx, { search: "wai-" });
    const row = (run: string) => out.find((l) => l.startsWith(run))!.split(/\s{2,}/);
    assert.deepEqual(row("wai-1").slice(0, 3), ["wai-1", "provision", `waiting until ${wake}`]);
    assert.deepEqual(row("wai-2").slice(0, 3), ["wai-2", "provision", "waiting for a person"]);
    out.length = 0;
    await inspect(ctx, "wai-1");
    const text = out.join("\n");
    assert.match(
      text,
      new RegExp(`^run wai-1 {2}agent=provision {2}status=waiting until ${wake} {2}epoch=1`),
    );
    assert.match(
      text,
      new RegExp(
        `tool {6}waiting {2}create_server {2}key=wai-1:0 .*check_at=${wake} {2}deadline=${deadline} ` +
          `{2}result=\\{"job":"j-1"\\}`,
      ),
    );
    assert.match(
      text,
      /!! waiting on its remote: re-sent under its key at .* 'deno task settle wai-1:0 --result JSON/,
    );
  });
});

Deno.test("runs and inspect say what a run waiting out an outage waits for, since when and until when", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    const now = clock.now();
    const later = new Date(now.getTime() + 45_000);
    await store.leases.createRun({ runId: "out-1", agent: "provision", goal: "goal" }, now);
    const f = { runId: "out-1", epoch: (await claim(store, "out-1", 0, "w1", now))! };
    await writeDecision(store, f, 0, {
      decision: { tool: "create_server", args: { name: "s0" } },
      usage: null,
    }, now);
    const sent = await store.writes.effectIntentRow(
      f,
      { key: "out-1:0", seq: 0, tool: "create_server", args: {} },
      now,
    );
    await store.writes.effectFailure(f, sent, {
      error: "TOOL_NETWORK: POST /v1/servers got no answer",
      retryAt: later,
    }, now);
    const reason = `Waiting until ${later.toISOString()}: out-1:0 (create_server) failed 1 time since ` +
      `${now.toISOString()} (last: TOOL_NETWORK: POST /v1/servers got no answer), sent again under its key at ` +
      later.toISOString();
    assert.equal(
      await store.writes.waitRun(f, later, now, reason),
      true,
      "a call due again wakes the run, as a job does",
    );
    await runs(ctx, { search: "out-" });
    assert.deepEqual(out.find((l) => l.startsWith("out-1"))!.split(/\s{2,}/).slice(0, 3), [
      "out-1",
      "provision",
      `waiting until ${later.toISOString()}`,
    ]);
    assert.ok(out.includes(`out-1: ${reason}`), out.join("\n"));
    out.length = 0;
    await inspect(ctx, "out-1");
    const text = out.join("\n");
    assert.match(text, new RegExp(`^ {2}error: Waiting until ${later.toISOString()}: out-1:0`, "m"));
    assert.match(
      text,
      new RegExp(
        `tool {6}intent {2}create_server {2}key=out-1:0 .*check_at=${later.toISOString()} {2}failures=1 {2}failing_since=${now.toISOString()}`,
      ),
    );
    assert.match(text, /!! failed 1 time as in an outage: sent again under its key at /);
  });
});

Deno.test("settle confirms or fails a waiting call from outside, records who, and wakes its run", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    await waitingRun(store, "set-1");
    const e = await settle(ctx, "set-1:0", { result: { id: "i-9" } });
    assert.deepEqual([e.status, e.remote, e.result, e.resolved_by], [
      "confirmed",
      "resolved",
      { id: "i-9" },
      "alice",
    ]);
    assert.match(
      out.at(-1)!,
      /^settled {2}key=set-1:0 {2}status=confirmed {2}remote=resolved {2}by=alice {2}run=set-1 {2}run_status=waiting {2}woken=now$/,
    );
    assert.deepEqual(
      (await store.reads.getRun("set-1"))?.wake_at,
      clock.now(),
      "a worker takes it at its next look",
    );
    await assert.rejects(settle(ctx, "set-1:0", { result: 1 }), (err: CommandError) => {
      assert.equal(err.code, "NOT_WAITING");
      assert.equal(err.exitCode, 1);
      assert.match(
        err.message,
        /is confirmed, not waiting on its remote: it is settled already \(by alice at/,
      );
      return true;
    });

    await waitingRun(store, "set-2");
    const failed = await settle(ctx, "set-2:0", { error: "the job ran out of disk" });
    assert.deepEqual([failed.status, failed.error], [
      "failed",
      "reported failed by alice: the job ran out of disk",
    ]);

    await waitingRun(store, "set-3");
    await ctx.client.operators.cancel("set-3");
    await assert.rejects(
      settle(ctx, "set-3:0", { result: 1 }),
      (err: CommandError) => err.code === "RUN_CLOSED" && /deno task reopen set-3/.test(err.message),
    );
    await assert.rejects(
      settle(ctx, "set-9:0", { result: 1 }),
      (err: CommandError) => err.code === "CALL_NOT_FOUND",
    );
    await assert.rejects(
      settle(ctx, "set-3:0", { error: " " }),
      (err: CommandError) => err.code === "SETTLEMENT_INVALID" && err.exitCode === 2,
    );
  });
});

Deno.test("settle refuses a missing key, both flags or neither, and --result that is not JSON, in one line with exit 2", async () => {
  const errors: string[] = [];
  const original = console.error;
  console.error = (msg: string) => errors.push(msg);
  try {
    const cases: [string[], RegExp][] = [
      [["--result", "1"], /settle needs a tool call key, e.g. demo:0/],
      [["k:0"], /settle needs exactly one of --result JSON, --error TEXT/],
      [["k:0", "--result", "1", "--error", "e"], /settle needs exactly one of --result JSON, --error TEXT/],
      [["k:0", "--result", "{nope"], /--result must be JSON, .*: current value is \{nope/],
      [["k:0", "--error", ""], /--error must say why the job failed/],
      [["k:0", "--retry"], /unknown flag '--retry'/],
    ];
    for (const [args, problem] of cases) {
      errors.length = 0;
      assert.equal(await main(["settle", ...args], { DATA_DIR: dir }, () => {}), 2, args.join(" "));
      assert.equal(errors.length, 1, args.join(" "));
      assert.match(errors[0], problem);
    }
  } finally {
    console.error = original;
  }
});

Deno.test("cancel closes a run; its worker's next fenced write is refused as closed", async () => {
  await withStore(async (ctx, out) => {
    await ctx.client.store.leases.createRun(
      { runId: "can-1", agent: "provision", goal: "goal" },
      clock.now(),
    );
    const epoch = (await claim(ctx.client.store, "can-1", 0, "w1", clock.now()))!;
    await cancel(ctx, "can-1");
    assert.match(out[0], /^cancelled {2}run=can-1/);
    const run = await ctx.client.store.reads.getRun("can-1");
    assert.equal(run?.status, "cancelled");
    assert.equal(run?.error, "cancelled by alice");
    await assert.rejects(
      journalIntent(ctx.client.store, { runId: "can-1", epoch }, 0, clock.now()),
      (e: FencedError) => e.code === "RUN_CLOSED",
    );
    assert.equal(await ctx.client.store.writes.heartbeat({ runId: "can-1", epoch }, clock.now()), false);
    await assert.rejects(cancel(ctx, "can-1"), (e: CommandError) => e.code === "RUN_CLOSED");
  });
});

Deno.test("reopen puts a cancelled or failed run back to pending with a fresh epoch to claim, and nothing else", async () => {
  await withStore(async (ctx, out) => {
    await ctx.client.store.leases.createRun(
      { runId: "reo-1", agent: "provision", goal: "goal" },
      clock.now(),
    );
    const epoch = (await claim(ctx.client.store, "reo-1", 0, "w1", clock.now()))!;
    await cancel(ctx, "reo-1");
    await reopen(ctx, "reo-1");
    assert.match(out.at(-1)!, /^reopened {2}run=reo-1 {2}status=pending {2}epoch=1 {2}by=alice$/);
    const run = await ctx.client.store.reads.getRun("reo-1");
    assert.equal(run?.status, "pending");
    assert.equal(run?.error, null);
    assert.equal(run?.heartbeat_at, null);
    // The old worker stays fenced out: its epoch is claimable only through a new claim.
    assert.equal(await ctx.client.store.writes.heartbeat({ runId: "reo-1", epoch }, clock.now()), false);
    assert.equal(await claim(ctx.client.store, "reo-1", epoch, "w2", clock.now()), epoch + 1);
    await assert.rejects(reopen(ctx, "reo-1"), (e: CommandError) => e.code === "NOT_REOPENABLE");
    await assert.rejects(reopen(ctx, "nope"), (e: CommandError) => e.code === "RUN_NOT_FOUND");
  });
});

Deno.test("the commands refuse to open the embedded database while another handle holds it", async () => {
  const holder = await openPglite(`${dir}/pglite`, { template: await testTemplate() });
  const errors: string[] = [];
  const original = console.error;
  console.error = (msg: string) => errors.push(msg);
  try {
    assert.equal(await main(["runs"], { DATA_DIR: dir }, () => {}), 2);
    assert.match(errors.join("\n"), /DATA_DIR_LOCKED: .*set DATABASE_URL/);
  } finally {
    console.error = original;
    await holder.close();
  }
  const out: string[] = [];
  assert.equal(await main(["runs"], { DATA_DIR: dir }, (l) => out.push(l)), 0);
  assert.match(out[0], /^RUN\s+AGENT\s+STATUS/);
  assert.equal(
    await main(["resolve", "x:0"], { DATA_DIR: dir }, () => {}),
    2,
    "needs one of the three flags",
  );
});

Deno.test("limits lists each key's limit, use, waiting runs and hold; runs says which limit a run waits for", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    await limits(ctx);
    assert.deepEqual(out.splice(0), [
      "KEY  LIMIT  IN_FLIGHT  LAST_MINUTE  WAITING  HELD  HOLDS",
      "(no limit has been taken: none declared, or no request yet)",
    ]);
    const now = clock.now();
    const fences = [];
    for (const runId of ["lim-1", "lim-2"]) {
      await store.leases.createRun(
        { runId, agent: "provision", goal: "goal", labels: { tenant: "acme" } },
        now,
      );
      fences.push({ runId, epoch: (await claim(store, runId, 0, "w1", now))! });
    }
    const ask = {
      key: "model:gpt-x",
      described: "1 request per 60 s",
      windowMs: 60_000,
      requests: 1,
      estimatedInput: 10,
      estimatedOutput: 10,
    };
    const at = { now, staleBefore: new Date(now.getTime() - 12_000), retryMs: 1_000 };
    const taken = await store.limits.take(fences[0], 0, [ask], at);
    assert.equal(taken.kind, "granted");
    const refused = await store.limits.take(fences[1], 0, [ask], at);
    assert.equal(refused.kind, "refused");
    assert.ok(
      await store.limits.waitRun(
        fences[1],
        (refused as { wakeAt: Date }).wakeAt,
        "Waiting ... for the limit on model:gpt-x",
        now,
      ),
    );
    await store.limits.release((taken as { ids: string[] }).ids, now, {
      hold: { until: new Date(now.getTime() + 30_000), keys: ["model:gpt-x"] },
    });
    await limits(ctx);
    const [head, row] = out.splice(0);
    assert.match(head, /^KEY +LIMIT +IN_FLIGHT +LAST_MINUTE +WAITING +HELD +HOLDS$/);
    const until = new Date(now.getTime() + 30_000).toISOString();
    assert.match(row, new RegExp(`^model:gpt-x  1 request per 60 s  0 +1 +1 +until ${until}  1$`));
    await runs(ctx, { search: "lim-" });
    assert.ok(out.some((l) => /^lim-2 .* waiting for model:gpt-x until /.test(l)), out.join("\n"));
    assert.equal((await ctx.client.get("lim-1"))?.labels?.tenant, "acme");
  });
});

Deno.test.afterAll(async () => {
  await Deno.remove(dir, { recursive: true });
});

Deno.test("prune deletes finished runs older than the cutoff with their rows, in batches, never an open one", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    const old = clock.now();
    // Finished long ago: done (with rows), failed, cancelled. Open: pending, running, blocked.
    await blockedRun(store, "pr-blocked");
    for (const id of ["pr-done", "pr-failed", "pr-cancel", "pr-pending", "pr-running"]) {
      await store.leases.createRun({ runId: id, agent: "provision", goal: "g" }, old);
    }
    const e = (await claim(store, "pr-done", 0, "w", old))!;
    await writeDecision(
      store,
      { runId: "pr-done", epoch: e },
      0,
      { decision: { done: true, message: "ok" } },
      old,
    );
    await store.writes.finishRun({ runId: "pr-done", epoch: e }, "done", null, old, "ok");
    const f = (await claim(store, "pr-failed", 0, "w", old))!;
    await store.writes.finishRun({ runId: "pr-failed", epoch: f }, "failed", "boom", old);
    await store.families.cancel("pr-cancel", "cancelled", old);
    await claim(store, "pr-running", 0, "w", old);
    await clock.advance(40 * 86_400_000);
    // One finished only recently: younger than the cutoff, it stays.
    await store.leases.createRun({ runId: "pr-recent", agent: "provision", goal: "g" }, clock.now());
    await store.families.cancel("pr-recent", "cancelled", clock.now());
    const cutoff = new Date(clock.now().getTime() - 30 * 86_400_000);

    const dry = await ctx.client.operators.prune(cutoff, { dryRun: true });
    assert.deepEqual(dry.runs.filter((r) => r.startsWith("pr-")), ["pr-cancel", "pr-done", "pr-failed"]);
    assert.ok(await store.reads.getRun("pr-done"), "a dry run deletes nothing");

    await prune(ctx, cutoff, { batchSize: 2 });
    // Other tests of this file leave finished runs of their own in the shared store: only this test's are asked of.
    assert.deepEqual(out.map((l) => l.trim()).filter((l) => /^pr-/.test(l)).sort(), [
      "pr-cancel",
      "pr-done",
      "pr-failed",
    ]);
    const line = out.find((l) => l.startsWith("pruned"))!;
    assert.match(
      line,
      /deleted: runs=\d+ {2}journal_rows=\d+ {2}tool_rows=\d+ {2}approval_rows=\d+ {2}batches=\d+/,
    );
    for (const id of ["pr-done", "pr-failed", "pr-cancel"]) {
      assert.equal(await store.reads.getRun(id), undefined, id);
    }
    assert.equal((await store.reads.loadHistory("pr-done")).journal.length, 0, "its rows went with it");
    for (const id of ["pr-blocked", "pr-pending", "pr-running", "pr-recent"]) {
      assert.ok(await store.reads.getRun(id), `${id} is open or recent and stays`);
    }
    assert.equal((await store.reads.loadHistory("pr-blocked")).effects.length, 2);
    // A pruned run read by a command: a clear answer, not a crash.
    await assert.rejects(inspect(ctx, "pr-done"), (err: CommandError) => err.code === "RUN_NOT_FOUND");
  });
});

Deno.test("prune refuses a malformed cutoff with one line and exit 2", async () => {
  const errors: string[] = [];
  const original = console.error;
  console.error = (msg: string) => errors.push(msg);
  try {
    assert.equal(await main(["prune", "--finished-before", "soon"], { DATA_DIR: dir }, () => {}), 2);
    assert.match(errors.join("\n"), /--finished-before must be an age like 30d/);
    assert.equal(await main(["prune"], { DATA_DIR: dir }, () => {}), 2);
  } finally {
    console.error = original;
  }
});

Deno.test("runs and inspect say which version a run waits for; move sends it to another at its next decision", async () => {
  await withStore(async (ctx, out) => {
    const store = ctx.client.store;
    await store.leases.createRun({ runId: "ver-1", agent: "provision", goal: "goal" }, clock.now());
    const claimed = await store.leases.claimRun("ver-1", 0, "w-old", clock.now(), {
      version: "v1",
      mayMove: false,
    });
    await store.writes.releaseRun({ runId: "ver-1", epoch: claimed!.epoch }, "", clock.now());
    // A live worker of version v2 only.
    await store.leases.heartbeatMany(
      {
        name: "w-new",
        agents: ["provision"],
        capacity: 4,
        startedAt: clock.now(),
        takeKeys: ["provision@v2"],
      },
      [],
      clock.now(),
    );
    await runs(ctx, { search: "ver-" });
    assert.equal(out.find((l) => l.startsWith("ver-1"))!.split(/\s{2,}/).at(-1), "v1");
    assert.equal(
      out.at(-1),
      "waiting: on provision@v1, which no live worker hosts (live: provision@v2): start a worker with the module " +
        "of version v1, or move it: deno task move --agent-name provision --to <version> --run ver-1; run: ver-1",
    );
    out.length = 0;
    assert.equal(await main(["move", "--to", "v2"], {}, (l) => out.push(l)), 2, "move needs --agent-name");
    await move(ctx, { agent: "provision", to: "v2", runId: "ver-1" });
    assert.deepEqual(out, [
      "move  agent=provision  to=v2  runs=1  (each at its next decision)",
      "  ver-1  from=v1",
    ]);
    out.length = 0;
    await inspect(ctx, "ver-1");
    assert.deepEqual(out.slice(1, 3), [
      "  version: v1  stays on its version",
      "  move: to v2 at its next decision",
    ]);
    await assert.rejects(
      move(ctx, { agent: "provision", to: "has space" }),
      (e: CommandError) => e.code === "MOVE_INVALID" && /'to' must be a version/.test(e.message),
    );
  });
});
