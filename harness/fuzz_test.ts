import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import type { PlantedDefects } from "./defects.ts";
import type { FetchLike } from "../runtime/model/planner.ts";
import { ToolError } from "../runtime/base/errors.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { FakeRemote } from "./fake_remote.ts";
import {
  type AgentFactory,
  decodeSchedule,
  DEMO_APPROVAL_TOOL,
  demoAgent,
  encodeSchedule,
  fuzz,
  FuzzError,
  jobsAgent,
  mcpAgent,
  SIGNALS_TARGET_SIGNAL,
  signalsAgent,
  teamAgent,
} from "./fuzz.ts";
import { checkPolls } from "./fuzz/check.ts";
import type { RunSnapshot } from "./sim.ts";
import { type Position, POSITIONS } from "./fuzz/positions.ts";
import { ALL_STATEMENTS } from "../runtime/store/statements.ts";
import { openTestSim } from "../tests/_pg.ts";
import { proofSize } from "../tests/_size.ts";

// The clean sweeps' lengths: a suite size, and the full size of `deno task test:proofs` (tests/_size.ts).
const ONE_CALL = proofSize(40, 100);
const TEAM = proofSize(30, 60);
const MCP = proofSize(40, 100);
const DEMO = proofSize(150, 400);
const APPROVALS = proofSize(150, 400);
const BUDGETS = proofSize(100, 300);
const DEPLOYS = proofSize(100, 250);

// Every planted bug must be found within this many schedules of seed 1, and shrunk to at most three faults.
const FIND_WITHIN = 300;

Deno.test("the fuzzer finds each planted bug, shrinks it, replays it, and passes the runtime as it is", async (t) => {
  // One PGlite for the file (a cold start costs seconds); each schedule empties its tables.
  const db = await openTestSim();
  try {
    // Each with the problem its finding must name: a stale worker's write is caught by the fuzzer's own
    // epoch bookkeeping (from the claims it sees), not only by the invariants afterwards.
    const planted: [string, PlantedDefects, RegExp, AgentFactory?][] = [
      [
        "a tool confirm that skips the fence",
        { confirmSkipsFence: true },
        /stale worker \S+ \(epoch \d+\) wrote after epoch \d+ was claimed: tool-confirm/,
      ],
      ["a key built from the attempt number", { keyFromAttempt: true }, /under \S+, which no tool call owns/],
      // A re-sent call of a step with several sent under its first call's key: the remote refuses it (422).
      [
        "two calls of one step given the same key",
        { keyFromStep: true },
        /tool call \S+ is failed, expected confirmed/,
      ],
      ["a replay that asks the model again", { replayAsksModel: true }, /with no journal intent counting/],
      // Only the jobs target's calls wait on their remote: a stale worker's 202 lands on the thief's row.
      [
        "an accepted answer written without the fence",
        { acceptedSkipsFence: true },
        /stale worker \S+ \(epoch \d+\) wrote after epoch \d+ was claimed: tool-waiting/,
        jobsAgent,
      ],
      [
        "a heartbeat that renews after fencing",
        { heartbeatIgnoresFence: true },
        /stale worker \S+ \(epoch 1\) wrote after epoch 2 was claimed: heartbeat/,
      ],
      // A worker killed while it holds a reservation: its call in flight is counted for good, and the run
      // waits for the limit's slot until the fuzzer gives up on it.
      [
        "a reservation not released when its worker dies",
        { reservationOutlivesWorker: true },
        /the run was still asleep after \d+ incarnations: Waiting until .* for the limit on (model|tool):\S+ \([^)]*1 in flight\): .* waits for a call in flight to end/,
      ],
    ];
    for (const [bug, defects, problem, target = demoAgent] of planted) {
      await t.step(`finds ${bug} within ${FIND_WITHIN} schedules and shrinks it to <= 3 faults`, async () => {
        const report = await fuzz(target, {
          db,
          seed: 1,
          schedules: FIND_WITHIN,
          remote: "mock-cloud",
          defects,
        });
        assert.equal(report.failures.length, 1, `not found in ${report.schedules} schedules`);
        const { shrunk, text } = report.failures[0];
        assert.ok(shrunk.problems.length > 0);
        assert.ok(shrunk.problems.some((p) => problem.test(p)), shrunk.problems.join("\n"));
        assert.ok(shrunk.schedule.faults.length <= 3, text);
        assert.ok(shrunk.schedule.faults.length >= 1, text);
        assert.match(text, /^seed=\d+ schedule=\d+ FAILED/);
        assert.ok(
          text.includes(`replay: deno task fuzz --replay '${encodeSchedule(shrunk.schedule)}'`),
          text,
        );
        // The printed schedule replays to the same failure.
        const again = await fuzz(target, {
          db,
          remote: "mock-cloud",
          defects,
          replay: encodeSchedule(shrunk.schedule),
        });
        assert.deepEqual(again.failures[0]?.shrunk.problems, shrunk.problems);
        // Only a step of several calls can give two calls one key: the shrunk schedule keeps one.
        if (defects.keyFromStep) assert.ok((shrunk.schedule.parallel ?? 1) >= 2, text);
        // Only a schedule under limits takes reservations: the shrunk one keeps its limits, and one fault that
        // ends a worker holding one (a kill, or a freeze past its lease).
        if (defects.reservationOutlivesWorker) {
          assert.equal(shrunk.schedule.limits, true, text);
          assert.equal(shrunk.schedule.faults.length, 1, text);
          assert.ok(["kill", "stall"].includes(shrunk.schedule.faults[0].kind), text);
        }
      });
    }

    await t.step(
      "with one call per answer the same-key bug cannot show, and the runtime passes",
      async () => {
        const report = await fuzz(demoAgent, {
          db,
          seed: 1,
          schedules: ONE_CALL,
          remote: "mock-cloud",
          defects: { keyFromStep: true },
          parallel: [1],
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        assert.deepEqual(report.parallel, { 1: ONE_CALL });
      },
    );

    await t.step(
      "calls that wait on their remote: 100 schedules of the jobs target find no violation, and faults land while runs sleep",
      async () => {
        // The families drawn before the version family (a deploy is fuzzed on the demo and the signals agent).
        const report = await fuzz(jobsAgent, {
          db,
          seed: 24,
          schedules: 100,
          remote: "mock-cloud",
          faults: ["kill", "stall", "cloud", "model", "budget", "outage", "limits"],
          transcript: true,
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        const lines = report.transcript!;
        // Runs sleep, are woken by a new worker when due, and poll their jobs under the same key.
        assert.ok(lines.filter((l) => /^~~~ the run sleeps until /.test(l)).length > 100);
        assert.ok(lines.some((l) => / event=intent .* attempt=1 poll=2/.test(l)));
        // Faults land on the accepted answer's write, the run's sleep, and the poll's request.
        const hit = lines.join("\n");
        assert.match(hit, / fired at stmt#\d+ tool-waiting \(/);
        assert.match(hit, / fired at stmt#\d+ wait \(/);
        assert.match(hit, / fired at cloud#\d+ \/v1\/jobs \(/);
        for (const p of [1, 2, 3]) {
          assert.ok((report.parallel[p] ?? 0) > 15, JSON.stringify(report.parallel));
        }
      },
    );

    await t.step(
      "a wait for a signal: 30 schedules of the signals target find no violation, the signal sent before, during and after the wait",
      async () => {
        const report = await fuzz(signalsAgent, {
          db,
          seed: 36,
          schedules: 30,
          remote: "mock-cloud",
          signal: SIGNALS_TARGET_SIGNAL,
          faults: ["kill", "stall", "signal"],
          transcript: true,
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        const hit = report.transcript!.join("\n");
        // The person sends the signal at rest (the run waits for it) and between statements, every send
        // after the first a duplicate; the signal is taken under the wait's key, again after a crash.
        assert.match(hit, /~~~ person: signal approved approval-1: seq=1 woken/);
        assert.match(hit, /~~~ person: signal approved approval-1: seq=1 duplicate/);
        assert.match(hit, /~~~ fault signal@stmt#\d+ fired at /);
        assert.match(hit, / event=signal-taken .* again=true/);
        assert.ok((report.kinds["signal@stmt"] ?? 0) >= 5, JSON.stringify(report.kinds));
      },
    );

    await t.step(
      `agents that call agents: ${TEAM} schedules of the team target find no violation, with faults on the family's writes`,
      async () => {
        const report = await fuzz(teamAgent, {
          db,
          seed: 12,
          schedules: TEAM,
          remote: "mock-cloud",
          faults: ["kill", "stall", "cloud", "model"],
          transcript: true,
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        const lines = report.transcript!;
        // Every call starts its child, the child's close wakes the parent, and the parent reads the answer.
        assert.ok(
          lines.filter((l) => / event=child-started run=fz-\d+ seq=\d+ /.test(l)).length >= TEAM * 5 / 3,
        );
        assert.ok(
          lines.some((l) => / event=family-closed run=fz-\d+\.\d+ status=done parent_woken=true/.test(l)),
        );
        const hit = lines.join("\n");
        // Faults land on the child's creation and the children's own steps, as on the parent's.
        assert.match(hit, / fired at stmt#\d+ child-create \(/);
        assert.match(hit, / fired at cloud#\d+ \/v1\/servers \(/);
      },
    );

    await t.step(
      `an agent whose tools come from an MCP server: ${MCP} schedules of the mcp target find no violation, every process lists the tools, and a key bug is caught through it`,
      async () => {
        const report = await fuzz(mcpAgent, {
          db,
          seed: 25,
          schedules: MCP,
          remote: "mock-cloud",
          approvalTool: DEMO_APPROVAL_TOOL,
          transcript: true,
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        const lines = report.transcript!;
        // Each incarnation connects and lists the server's tools itself, before it claims the run.
        const listed = lines.filter((l) => / event=mcp-tools-listed server=sim-cloud /.test(l)).length;
        const claims = lines.filter((l) => / event=claimed /.test(l)).length;
        assert.ok(listed >= claims && claims > MCP, `${listed} listings, ${claims} claims`);
        // The cloud's faults reach the client as unknown outcomes, and the calls are sent again under their keys.
        const hit = lines.join("\n");
        assert.match(hit, / fired at cloud#\d+ \/v1\/(servers|databases|dns_records) \(/);
        assert.match(hit, / event=retrying .* code=MCP_SERVER_ERROR /);
        assert.match(hit, / event=confirmed .* remote=already_done/);
        // A key built from the attempt reaches the cloud through the server's _meta: found.
        const buggy = await fuzz(mcpAgent, {
          db,
          seed: 25,
          schedules: 200,
          remote: "mock-cloud",
          defects: { keyFromAttempt: true },
        });
        assert.equal(buggy.failures.length, 1);
        assert.match(buggy.failures[0].text, /which no tool call owns/);
        // The SDK's client and server keep the simulator's order: one seed, one transcript.
        const run = () =>
          fuzz(mcpAgent, { db, seed: 7, schedules: 30, remote: "mock-cloud", transcript: true });
        const [a, b] = [await run(), await run()];
        assert.equal(b.transcript!.join("\n"), a.transcript!.join("\n"));
      },
    );

    await t.step("the same seed gives a byte-identical transcript twice", async () => {
      // Each on a database of its own: the embedded store analyses its tables as they grow, and when it
      // does is part of what the simulator's order depends on, so both start from the same state.
      const run = async () => {
        const fresh = await openTestSim();
        try {
          return await fuzz(demoAgent, {
            db: fresh,
            seed: 99,
            schedules: 40,
            remote: "mock-cloud",
            transcript: true,
          });
        } finally {
          await fresh.close();
        }
      };
      const [a, b] = [await run(), await run()];
      assert.equal(a.failures.length, 0);
      assert.ok(a.transcript!.length > 1_000);
      // Steps of three calls, sent concurrently, are among them: their order is the simulator's too.
      assert.ok(a.transcript!.some((l) => /^=== schedule \d+\/parallel=3/.test(l)));
      assert.ok(a.transcript!.some((l) => / event=decided .* calls=3 /.test(l)));
      assert.equal(b.transcript!.join("\n"), a.transcript!.join("\n"));
    });

    await t.step(
      "the fuzzer's positions are the statements' names: every one placed, every one hit named",
      async () => {
        for (const s of ALL_STATEMENTS) assert.ok(POSITIONS[s.name], `${s.name} has no position`);
        const report = await fuzz(demoAgent, {
          db,
          seed: 5,
          schedules: 60,
          remote: "mock-cloud",
          approvalTool: DEMO_APPROVAL_TOOL,
          transcript: true,
        });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        const hit = new Set(
          report.transcript!.flatMap((l) => [...l.matchAll(/ fired at stmt#\d+ (\S+) \(/g)].map((m) => m[1])),
        );
        assert.ok(hit.size >= 8, [...hit].join(", "));
        for (const position of hit) {
          assert.ok(Object.values(POSITIONS).includes(position as Position), position);
        }
      },
    );

    await t.step(`${DEMO} schedules of the demo find no violation and hit every fault kind`, async () => {
      const report = await fuzz(demoAgent, { db, seed: 2026, schedules: DEMO, remote: "mock-cloud" });
      assert.deepEqual(
        report.failures.map((f) => f.text),
        [],
      );
      assert.equal(report.schedules, DEMO);
      assert.ok(Object.keys(report.kinds).length >= 16, JSON.stringify(report.kinds));
      assert.ok(report.positions >= 40, `${report.positions} positions`);
      for (const p of [1, 2, 3]) {
        assert.ok((report.parallel[p] ?? 0) > DEMO / 5, JSON.stringify(report.parallel));
      }
    });

    await t.step(
      `with a tool that needs approval, a person's acts join the schedules: ${APPROVALS} find no violation, and one seed gives one transcript`,
      async () => {
        const approvals = { db, remote: "mock-cloud", approvalTool: DEMO_APPROVAL_TOOL } as const;
        const report = await fuzz(demoAgent, { ...approvals, seed: 2027, schedules: APPROVALS });
        assert.deepEqual(report.failures.map((f) => f.text), []);
        for (
          const kind of [
            "approve@stmt",
            "deny@stmt",
            "cancel@stmt",
            "reopen@stmt",
            "deny@wait",
            "cancel@wait",
          ]
        ) {
          assert.ok((report.kinds[kind] ?? 0) > 0, `no ${kind} fired: ${JSON.stringify(report.kinds)}`);
        }
        // One seed gives one transcript in a database of its own, as a replay runs: in one reused by other
        // schedules, rows tied at one instant (waiters for a limit) come back in the order its pages hold them.
        const run = async () => {
          const own = await openTestSim();
          try {
            return await fuzz(demoAgent, { ...approvals, db: own, seed: 7, schedules: 40, transcript: true });
          } finally {
            await own.close();
          }
        };
        const [a, b] = [await run(), await run()];
        assert.ok(a.transcript!.some((l) => l.startsWith("~~~ person: ")));
        assert.equal(b.transcript!.join("\n"), a.transcript!.join("\n"));
        await assert.rejects(
          fuzz(demoAgent, { db, remote: "mock-cloud", schedules: 1, faults: ["approval"] }),
          (e) =>
            e instanceof FuzzError && e.code === "FUZZ_OPTION_INVALID" &&
            /never asks for approval/.test(e.message),
        );
      },
    );

    await t.step("a user's agent whose tools call a FakeRemote is fuzzed the same way", async () => {
      const ticketing = (fetch: FetchLike) =>
        defineAgent({
          name: "tickets",
          tools: ["open_ticket", "assign_ticket"].map((name) =>
            defineTool({
              name,
              description: `${name.replace("_", " ")}.`,
              args: z.strictObject({ title: z.string() }),
              run: async (args, ctx) => {
                const res = await fetch(
                  new Request(`http://tickets.test/${name}`, {
                    method: "POST",
                    headers: { "idempotency-key": ctx.idempotencyKey },
                    body: JSON.stringify(args),
                    signal: ctx.signal,
                  }),
                );
                const text = await res.text();
                if (!res.ok) throw new ToolError("HTTP", `${res.status}`, { transient: res.status >= 500 });
                return { result: JSON.parse(text).id };
              },
            })
          ),
        });
      const report = await fuzz(ticketing, { db, seed: 5, schedules: 60 });
      assert.deepEqual(report.failures.map((f) => f.text), []);
      const buggy = await fuzz(ticketing, { db, seed: 5, schedules: 200, defects: { keyFromAttempt: true } });
      assert.equal(buggy.failures.length, 1);
      assert.match(buggy.failures[0].text, /which no tool call owns/);
    });
  } finally {
    await db.close();
  }
});

Deno.test("a schedule round-trips through its compact form, and a bad one is refused with a code", () => {
  const s = {
    seed: 7,
    faults: [
      { kind: "kill", at: "stmt", n: 17, when: "after" },
      { kind: "stall", n: 12, wake: 3 },
      { kind: "cloud", n: 2, fault: "drop" },
      { kind: "model", n: 3, fault: "bad_args" },
      { kind: "person", act: "approve", at: "stmt", n: 9 },
      { kind: "person", act: "cancel", at: "wait", n: 1 },
    ],
  } as const;
  const text = encodeSchedule({ seed: s.seed, faults: [...s.faults] });
  assert.equal(
    text,
    "7/kill@stmt#17:after,stall@stmt#12+3,cloud#2:drop,model#3:bad_args,approve@stmt#9,cancel@wait#1",
  );
  assert.deepEqual(decodeSchedule(text), s);
  assert.deepEqual(decodeSchedule(JSON.stringify(s)), s);
  assert.throws(
    () => decodeSchedule("7/kill@disk#1:before"),
    (e) => e instanceof FuzzError && e.code === "FUZZ_REPLAY_INVALID",
  );
  assert.throws(() => decodeSchedule("seven"), FuzzError);
});

Deno.test("a schedule with several calls per answer round-trips, calls per answer first", () => {
  const s = {
    seed: 4,
    faults: [{ kind: "kill", at: "stmt", n: 9, when: "before" }, { kind: "usage", n: 1, fault: "none" }],
    budget: { tokens: 900, maxOutputTokens: 200 },
    parallel: 3,
  } as const;
  const text = encodeSchedule({ ...s, faults: [...s.faults] });
  assert.equal(text, "4/parallel=3,budget=900,kill@stmt#9:before,usage#1:none");
  assert.deepEqual(decodeSchedule(text), s);
  assert.deepEqual(decodeSchedule(JSON.stringify(s)), s);
  assert.equal(encodeSchedule({ seed: 4, faults: [], parallel: 1 }), "4/");
  assert.deepEqual(decodeSchedule("4/parallel=1"), { seed: 4, faults: [] });
  assert.throws(
    () => decodeSchedule("4/parallel=4"),
    (e) => e instanceof FuzzError && e.code === "FUZZ_REPLAY_INVALID" && /from 1 to 3/.test(e.message),
  );
  assert.throws(() => decodeSchedule("4/kill@stmt#9:before,parallel=2"), FuzzError, "parallel comes first");
});

Deno.test("the fuzzer refuses calls per answer outside 1 to 3", async () => {
  for (const parallel of [[], [0], [4], [1.5]]) {
    await assert.rejects(
      fuzz(demoAgent, { schedules: 1, parallel }),
      (e) => e instanceof FuzzError && e.code === "FUZZ_OPTION_INVALID" && /'parallel'/.test(e.message),
    );
  }
});

Deno.test("a budgeted schedule round-trips through its compact form, the budget first", () => {
  const s = {
    seed: 9,
    faults: [{ kind: "usage", n: 2, fault: "none" }, { kind: "kill", at: "model", n: 3, when: "after" }],
    budget: { tokens: 1800, maxOutputTokens: 200, modelCalls: 6 },
  } as const;
  const text = encodeSchedule({ ...s, faults: [...s.faults] });
  assert.equal(text, "9/budget=1800:6,usage#2:none,kill@model#3:after");
  assert.deepEqual(decodeSchedule(text), s);
  assert.deepEqual(decodeSchedule("9/budget=500,usage#1:oversized").budget, {
    tokens: 500,
    maxOutputTokens: 200,
  });
  assert.throws(() => decodeSchedule("9/usage#1:none,budget=500"), FuzzError, "the budget comes first");
  assert.throws(() => decodeSchedule("9/usage#1:lies"), FuzzError);
});

Deno.test("schedules with budgets and lying usage reports hold the budget's promise, and some stop at their ceiling", async () => {
  const db = await openTestSim();
  try {
    const report = await fuzz(demoAgent, {
      db,
      seed: 11,
      schedules: BUDGETS,
      remote: "mock-cloud",
      faults: ["budget", "kill", "model"],
      transcript: true,
    });
    assert.deepEqual(report.failures.map((f) => f.text), []);
    for (const kind of ["usage:none", "usage:negative", "usage:oversized"]) {
      assert.ok((report.kinds[kind] ?? 0) > BUDGETS / 30, `${kind} fired: ${JSON.stringify(report.kinds)}`);
    }
    const stops = report.transcript!.filter((l) => /event=failed .*BUDGET_EXCEEDED/.test(l)).length;
    assert.ok(stops > BUDGETS / 30, `${stops} runs stopped at their ceiling`);
  } finally {
    await db.close();
  }
});

Deno.test("FakeRemote performs one effect per key and replays the stored answer", async () => {
  const remote = new FakeRemote();
  const send = (key: string, body: unknown) =>
    remote.fetch(
      new Request("http://fake/v1/things", {
        method: "POST",
        headers: { "idempotency-key": key },
        body: JSON.stringify(body),
      }),
    );
  const first = await send("r:0", { a: 1 });
  assert.equal(first.status, 201);
  const again = await send("r:0", { a: 1 });
  assert.equal(again.headers.get("idempotent-replayed"), "true");
  assert.deepEqual(await again.json(), { a: 1, id: "fx-0000001" });
  assert.equal((await send("r:0", { a: 2 })).status, 422);
  remote.setFaults({ drop_after_act_next: 1 });
  await assert.rejects((await send("r:1", { b: 1 })).text());
  assert.deepEqual(remote.effects().map((e) => e.key), ["r:0", "r:1"]);
  assert.deepEqual(remote.requestsByKey(), { "r:0": 3, "r:1": 1 });
  assert.throws(() => remote.setFaults({ fail_next: -1 }), TypeError);
});

Deno.test("FakeRemote looks an effect up by its key without performing it", async () => {
  const remote = new FakeRemote();
  const lookup = (key: string) => remote.fetch(new Request(`http://fake/v1/things?idempotency_key=${key}`));
  const missing = await lookup("r:0");
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
  await (await remote.fetch(
    new Request("http://fake/v1/things", {
      method: "POST",
      headers: { "idempotency-key": "r:0" },
      body: "{}",
    }),
  )).body?.cancel();
  const found = await lookup("r:0");
  assert.equal(found.status, 200);
  assert.deepEqual(await found.json(), { id: "fx-0000001" });
  assert.equal(remote.lookup("r:0")?.id, "fx-0000001");
  assert.equal(remote.lookup("r:1"), undefined);
  assert.equal(remote.effects().length, 1, "a lookup performs nothing");
  assert.deepEqual(remote.requestsByKey(), { "r:0": 1 });
});

Deno.test("checkPolls holds a call's attempts and polls to the intents and accepted answers written", () => {
  const effect = (e: { attempts: number; polls: number; status?: string }) => ({
    idempotency_key: "r:0",
    status: e.status ?? "confirmed",
    attempts: e.attempts,
    polls: e.polls,
    resolved_by: null,
  });
  const snap = (e: ReturnType<typeof effect>) => ({ effects: [e] }) as unknown as RunSnapshot;
  const writes = new Map([["r:0", { intents: 3, accepted: 2 }]]);
  assert.deepEqual(checkPolls(snap(effect({ attempts: 1, polls: 2 })), writes), []);
  // A poll counted as an attempt.
  assert.match(
    checkPolls(snap(effect({ attempts: 2, polls: 1 })), writes).join("\n"),
    /answered after 2 accepted answer\(s\), yet counts 1 poll/,
  );
  assert.match(
    checkPolls(snap(effect({ attempts: 1, polls: 1 })), writes).join("\n"),
    /counts 1 attempt\(s\) and 1 poll\(s\), but 3 intent\(s\) were written/,
  );
  assert.match(
    checkPolls(snap(effect({ attempts: 0, polls: 3 })), writes).join("\n"),
    /counts 3 poll\(s\) after 2 accepted answer/,
  );
});

Deno.test("a deploy under the run: schedules with version 2 restarting them pass, carried on or handed back, and round-trip", async () => {
  const text = encodeSchedule({
    seed: 3,
    limits: true,
    version: true,
    faults: [{ kind: "stall", n: 1, wake: 7 }],
  });
  assert.equal(text, "3/limits,v2,stall@stmt#1+7");
  assert.deepEqual(decodeSchedule(text), {
    seed: 3,
    limits: true,
    version: true,
    faults: [{ kind: "stall", n: 1, wake: 7 }],
  });
  const db = await openTestSim();
  try {
    const report = await fuzz(demoAgent, {
      db,
      seed: 11,
      schedules: DEPLOYS,
      remote: "mock-cloud",
      faults: ["kill", "stall", "version"],
    });
    assert.deepEqual(report.failures.map((f) => f.text), []);
    // Version 2 carries most runs on; a call version 1 sent and version 2 would send otherwise (its ttl) is
    // handed back, and version 1 finishes the run.
    assert.ok(report.deployed.carried > DEPLOYS * 0.08, JSON.stringify(report.deployed));
    assert.ok(report.deployed.refused > 0, JSON.stringify(report.deployed));
    // Found by the fuzzer: version 2's first worker moved the run and died before it checked what it could
    // carry; the next worker of version 2 must check again, and hand back the server version 1 sent (not
    // re-send it with a ttl the cloud refuses under that key).
    const found = await fuzz(signalsAgent, {
      db,
      remote: "mock-cloud",
      signal: SIGNALS_TARGET_SIGNAL,
      replay: decodeSchedule("2180197998/parallel=2,limits,v2,kill@cloud#1:after,kill@stmt#17:before"),
      transcript: true,
    });
    assert.deepEqual(found.failures.map((f) => f.text), []);
    assert.ok(found.transcript!.some((l) => / event=move-refused .* from=1 to=2 /.test(l)));
    // And the converse: a call version 2 sent itself after the move is its own, not version 1's to settle.
    const own = await fuzz(signalsAgent, {
      db,
      remote: "mock-cloud",
      signal: SIGNALS_TARGET_SIGNAL,
      replay: decodeSchedule("3397380210/parallel=2,limits,v2,stall@stmt#8+7,stall@stmt#22+1"),
    });
    assert.deepEqual(own.failures.map((f) => f.text), []);
    await assert.rejects(
      fuzz(teamAgent, { db, remote: "mock-cloud", schedules: 1, faults: ["version"] }),
      (e) =>
        e instanceof FuzzError && e.code === "FUZZ_OPTION_INVALID" && /starts child runs/.test(e.message),
    );
  } finally {
    await db.close();
  }
});
