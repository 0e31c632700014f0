/**
 * Your own agent, not the demo: an agent module written into a folder outside
 * the project, with its own tool calling its own small HTTP server that
 * honours `Idempotency-Key`, run under `supervise --agent` on PostgreSQL with
 * real worker processes killed by SIGKILL. And one worker process hosting 100
 * runs, killed: every run resumed at once and finished with one resource per key.
 */

import assert from "node:assert/strict";
import { type RunningMocks, serveMocks } from "../mock/server.ts";
import { Client } from "../runtime/client/client.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { Store } from "../runtime/store/store.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";
import { alive, parseLine, type Proc, startSupervisor, until } from "../harness/procs.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

/** A user's agent module: two tools against NOTES_URL, sending the idempotency key. */
const AGENT_SOURCE = `
import { z } from "npm:zod@4.6.7";
import { defineAgent, defineTool, ToolError, type ToolContext } from "${MOD_TS}";

async function post(base: string, path: string, body: unknown, ctx: ToolContext) {
  const res = await fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": ctx.idempotencyKey },
    body: JSON.stringify(body),
    signal: ctx.signal,
  });
  const text = await res.text();
  if (!res.ok) throw new ToolError("NOTES_HTTP", path + " answered " + res.status, { transient: res.status >= 500 });
  const replayed = res.headers.get("idempotent-replayed") === "true";
  return { result: JSON.parse(text).id, remote: replayed ? "already_done" as const : "created" as const };
}

export default defineAgent({
  name: "notes",
  instructions: "Save the note the user asks for, tag it, then say what you did.",
  tools: (ctx) => {
    const base = ctx.env.NOTES_URL;
    if (!base) throw new Error("NOTES_URL is not set");
    return [
      defineTool({
        name: "save_note",
        description: "Saves a note; returns its id.",
        args: z.strictObject({ title: z.string().min(1), body: z.string() }),
        run: (args, ctx) => post(base, "/notes", args, ctx),
      }),
      defineTool({
        name: "tag_note",
        description: "Tags a note.",
        args: z.strictObject({ tag: z.enum(["work", "home"]) }),
        run: (args, ctx) => post(base, "/tags", args, ctx),
      }),
    ];
  },
});
`;

/** The user's own remote: stores the first answer per Idempotency-Key and replays it. */
function notesServer(opts: { slowFirstMs: number }) {
  const byKey = new Map<string, { id: string; body: string }>();
  const requests: string[] = [];
  let next = 0;
  let reached!: () => void;
  const firstReached = new Promise<void>((r) => reached = r);
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const key = req.headers.get("idempotency-key") ?? "";
    const body = await req.text();
    requests.push(key);
    const seen = byKey.get(key);
    if (seen) {
      return new Response(JSON.stringify({ id: seen.id }), {
        status: 200,
        headers: { "idempotent-replayed": "true" },
      });
    }
    const id = `note-${++next}`;
    byKey.set(key, { id, body });
    if (requests.length === 1) {
      reached();
      // The remote has acted; the worker is killed before this answer arrives.
      await new Promise((r) => setTimeout(r, opts.slowFirstMs));
    }
    return new Response(JSON.stringify({ id }), { status: 201 });
  });
  return { server, byKey, requests, firstReached, url: `http://127.0.0.1:${server.addr.port}` };
}

function workerPids(sup: Proc): number[] {
  return sup.events("worker-started").map((e) => Number(e.pid));
}

Deno.test({
  name: "an agent module written outside the project runs under supervise --agent and survives kill -9",
  ignore: pgIgnore("own agent under the supervisor"),
  async fn() {
    const pg = await freshSchema();
    const mocks: RunningMocks = await serveMocks();
    const dir = await Deno.makeTempDir({ prefix: "my-agent-" });
    const notes = notesServer({ slowFirstMs: 700 });
    let sup: Proc | undefined;
    const client = new Client(new Store(await openPostgres(pg.url)));
    try {
      const agentPath = `${dir}/my_agent.ts`;
      await Deno.writeTextFile(agentPath, AGENT_SOURCE);
      const { default: agent } = await import(`file://${agentPath}`) as { default: Agent };
      sup = startSupervisor({
        DATABASE_URL: pg.url,
        MODEL_URL: mocks.modelUrl,
        MODEL: "mock-planner",
        NOTES_URL: notes.url,
        AGENT: agentPath,
        WORKERS: "1",
      });
      await sup.waitFor((l) => parseLine(l)?.event === "worker", "the worker's start line");
      const run = await client.start(agent, { runId: "own-1", input: "Note: buy milk" });
      assert.equal(run.agent, "notes");
      await notes.firstReached;
      const [victim] = workerPids(sup);
      Deno.kill(victim, "SIGKILL");
      const done = await client.wait("own-1", { timeoutMs: 60_000 });
      assert.equal(done.status, "done", sup.lines.join("\n"));
      assert.equal(done.output, "Called save_note, tag_note.", "the model's final answer comes back");
      // One effect per key on the user's own server, though the first request was sent twice.
      assert.deepEqual([...notes.byKey.keys()].sort(), ["own-1:0", "own-1:1"]);
      assert.ok(notes.requests.filter((k) => k === "own-1:0").length >= 2, "the stranded call was re-sent");
      const { effects } = await client.reads.inspect("own-1");
      assert.deepEqual(effects.map((e) => [e.idempotency_key, e.status, e.result]), [
        ["own-1:0", "confirmed", "note-1"],
        ["own-1:1", "confirmed", "note-2"],
      ]);
      assert.equal(effects[0].remote, "already_done");
      assert.ok(sup.events("resuming").some((e) => e.run === "own-1"), sup.lines.join("\n"));
      assert.ok(!alive(victim));
    } finally {
      await sup?.close();
      await client.close();
      await notes.server.shutdown();
      await mocks.close();
      await pg.drop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "a worker process hosting 100 runs is killed: every run is resumed at once and finishes once per key",
  ignore: pgIgnore("100 runs in one worker"),
  async fn() {
    const pg = await freshSchema();
    const mocks = await serveMocks();
    mocks.model.setFaults({ delay_ms: 300 });
    mocks.cloud.setFaults({ delay_ms: 100 });
    const sup = startSupervisor({
      DATABASE_URL: pg.url,
      MODEL_URL: mocks.modelUrl,
      MODEL: "mock-planner",
      CLOUD_URL: mocks.cloudUrl,
      WORKERS: "1",
      RUNS_PER_WORKER: "100",
      LEASE_S: "10",
      HEARTBEAT_S: "1",
    });
    const runIds = Array.from({ length: 100 }, (_, i) => `hundred-${i}`);
    try {
      await sup.waitFor((l) => parseLine(l)?.event === "worker", "the worker's start line");
      for (const id of runIds) {
        await pg.store.leases.createRun({ runId: id, agent: "provision", goal: "provision" }, new Date());
      }
      await until(
        () => Promise.resolve(new Set(sup.events("claimed").map((e) => e.run)).size === 100),
        "one worker to claim all 100 runs",
      );
      // Let every run get into its steps, then kill the process that holds them all.
      await until(
        () => Promise.resolve(sup.events("confirmed").length >= 50),
        "runs to be mid-provision",
      );
      const [victim] = workerPids(sup);
      const killedAt = Date.now();
      Deno.kill(victim, "SIGKILL");
      await until(
        async () => {
          const { runs } = await pg.store.operators.listRuns({ status: "done", limit: 1 });
          return runs.length > 0 &&
            (await pg.store.operators.listRuns({ status: "done", limit: 1 })).total === 100;
        },
        "all 100 runs to finish",
        120_000,
      );
      // Kill-to-resumed: from the kill to each run's claim by the replacement.
      const victimName = sup.events("worker-started")[0].worker;
      const resumed = sup.events("claimed").filter((e) => e.previous_owner === victimName);
      const open = resumed.map((e) => e.run);
      assert.ok(open.length > 0, "the killed worker held open runs");
      const latencies = resumed.map((e) => new Date(e.ts).getTime() - killedAt).sort((a, b) => a - b);
      console.log(
        `kill-to-resumed over ${latencies.length} runs: median ${latencies[latencies.length >> 1]} ms, ` +
          `worst ${latencies.at(-1)} ms`,
      );
      // One resource per key, and each run's rows are complete.
      const created = mocks.cloud.created();
      assert.equal(new Set(created.map((c) => c.key)).size, created.length, "a key created two resources");
      assert.equal(created.length, 300);
      for (const id of runIds) {
        const { journal, effects } = await pg.store.reads.loadHistory(id);
        assert.deepEqual(
          journal.map((j) => j.status),
          ["confirmed", "confirmed", "confirmed", "confirmed"],
          id,
        );
        assert.deepEqual(effects.map((e) => e.status), ["confirmed", "confirmed", "confirmed"], id);
      }
    } finally {
      await sup.close();
      await mocks.close();
      await pg.drop();
    }
  },
});
