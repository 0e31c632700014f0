/**
 * Version switches at every crash point of a step (docs/versions.md): the
 * crash matrix's cases, each crashed on version 1 of the demo (whose runs
 * may move) and restarted on version 2, which renames create_dns_record to
 * create_record (saying it replaces it) and gives it a `ttl` argument with a
 * default. Where the crash left a call sent and not settled (after_intent,
 * after_call), version 2 re-sends it under its key only if it would send the
 * same request: the server's and the database's, not the DNS record's
 * (create_record adds a ttl), which version 2 refuses, sending nothing, and a
 * restart on version 1 settles; everywhere else version 2 carries the run on,
 * a decided DNS record by create_record. Every case is judged as the
 * crash matrix judges it (the point's row of the table and invariant 5): one
 * resource per key, no decision bought twice. In-process, on one PGlite with
 * a manual clock.
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent, defineTool } from "../mod.ts";
import demoAgent from "../examples/provision/agent.ts";
import { cloudCreate, demoTools } from "../examples/provision/tools.ts";
import { baselineOf } from "./invariants.ts";
import { caseRunId, judge, matrixCases } from "./crash_matrix.ts";
import { type RunSnapshot, SIM_CLOUD_URL, type SimExit, type SimTools, SimWorld } from "./sim.ts";
import { openTestSim } from "../tests/_pg.ts";

const agentAt = (version: "1" | "2") =>
  defineAgent({
    name: demoAgent.name,
    instructions: demoAgent.instructions,
    tools: [],
    maxSteps: demoAgent.maxSteps,
    version,
    onNewVersion: "move",
  });

const V1 = agentAt("1");
const V2 = agentAt("2");

/** Version 2's tools: the demo's, the DNS record's tool renamed and given a ttl with a default. */
const v2Tools: SimTools = (fetch) => {
  const [server, database] = demoTools({ cloudUrl: SIM_CLOUD_URL, fetch });
  const record = defineTool({
    name: "create_record",
    description: "Create a DNS record. For a CNAME, target is the name of a server. Returns its id.",
    args: z.strictObject({
      hostname: z.string().min(1).max(253),
      record_type: z.enum(["A", "AAAA", "CNAME"]),
      target: z.string().min(1).max(253),
      ttl: z.number().int().min(60).default(300),
    }),
    replaces: ["create_dns_record"],
    run: (args, ctx) => cloudCreate({ cloudUrl: SIM_CLOUD_URL, fetch }, "/v1/dns_records", args, ctx),
  });
  return [server, database, record];
};

const describe = (exit: SimExit) =>
  exit.kind === "exited"
    ? exit.outcome.status
    : exit.kind === "killed"
    ? `killed at ${exit.point}`
    : exit.error;

Deno.test("a version switch at every crash point of a step: carried on by version 2, or refused and settled by version 1", async () => {
  const db = await openTestSim();
  try {
    const clean = await SimWorld.open(db);
    await clean.spawn({ runId: "vs-clean", agent: V1 }).exit;
    const baseline = baselineOf(await clean.snapshot("vs-clean"));
    const rows: string[] = [];
    const tally = { passed: 0, failed: 0, "not reached": 0, carried: 0, refused: 0 };
    for (const c of matrixCases((await clean.snapshot("vs-clean")).journal)) {
      const world = await SimWorld.open(db);
      const runId = `vs-${caseRunId(c)}`;
      const first = await world.spawn({ runId, plan: { crashAt: c.point, crashSeq: c.seq }, agent: V1 }).exit;
      const extra: string[] = [];
      let atCrash: RunSnapshot | undefined;
      let path = "-";
      if (first.kind === "killed") {
        atCrash = await world.snapshot(runId);
        await world.advance(1_000);
        const second = await world.spawn({ runId, agent: V2, tools: v2Tools }).exit;
        path = describe(second);
        if (path === "moved") {
          // Refused by version 2: a call sent by version 1 is not settled. Nothing was sent; version 1 settles it.
          const sentBefore = atCrash.requestsByKey;
          const now = await world.snapshot(runId);
          if (JSON.stringify(now.requestsByKey) !== JSON.stringify(sentBefore)) {
            extra.push("version 2 sent a call");
          }
          if (!world.transcript.some((l) => l.includes("event=move-refused"))) {
            extra.push("no move-refused line");
          }
          await world.advance(1_000);
          const third = await world.spawn({ runId, agent: V1 }).exit;
          if (describe(third) !== "done") extra.push(`version 1's restart ended ${describe(third)}`);
          tally.refused++;
        } else if (path === "done") {
          tally.carried++;
        } else {
          extra.push(`version 2's restart ended ${path}`);
        }
      } else if (describe(first) !== "done") {
        extra.push(`the crash never fired and the run ended ${describe(first)}`);
      }
      const final = await world.snapshot(runId);
      // A DNS record decided on version 1 and not sent is sent by version 2's create_record, with its ttl.
      if (c.seq === 2 && (c.point === "after_decide" || c.point === "before_intent")) {
        const record = final.created.find((r) => r.key === `${runId}:2`);
        if (record?.payload.ttl !== 300) {
          extra.push(`the DNS record was not sent by create_record: ${JSON.stringify(record)}`);
        }
      }
      const judged = judge(c, runId, baseline, atCrash, final, extra);
      const run = final.run;
      tally[judged.verdict]++;
      rows.push(
        `${c.point.padEnd(28)} ${String(c.seq).padStart(3)}  ${path.padEnd(6)} version=${
          run?.agent_version ?? "-"
        } ` +
          `remote=${judged.remote.padEnd(12)} ${judged.verdict}${
            judged.problems.length ? `: ${judged.problems.join("; ")}` : ""
          }`,
      );
    }
    console.log(rows.join("\n"));
    console.log(
      `version switches: ${tally.passed} passed, ${tally.failed} failed, ${
        tally["not reached"]
      } not reached; ` +
        `${tally.carried} carried on by version 2, ${tally.refused} refused and settled by version 1`,
    );
    assert.deepEqual([tally.passed, tally.failed, tally["not reached"]], [24, 0, 4]);
    // A call in flight is re-sent by version 2 only as the same request: the server's and the database's
    // are; the DNS record's is not (create_record adds a ttl), so version 1 settles it.
    assert.equal(tally.refused, 2, "after_intent and after_call on the DNS record");
    assert.equal(tally.carried, 22);
  } finally {
    await db.close();
  }
});
