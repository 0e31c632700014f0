/**
 * A watcher rides out a PostgreSQL restart (issue 34, item 9): on a server
 * of the test's own (never the shared one), a worker streams a run's answer
 * while `client.stream` (in this process) and `deno task watch` (a process
 * of its own) follow it; the server is stopped mid-answer (immediate mode:
 * every connection cut) and started again 3 s later. Both watchers say the
 * database was unreachable, go on from the journal when it is back, hear the
 * next model call's text on their listening connection again, and end with
 * the run's answer.
 *
 * @module
 */

import assert from "node:assert/strict";
import { z } from "zod";
import { defineAgent } from "../runtime/agent/agent.ts";
import { connect } from "../runtime/client/client.ts";
import { discardSink, Logger } from "../runtime/base/log.ts";
import type { Planner } from "../runtime/model/planner.ts";
import type { StreamEvent } from "../runtime/run/stream.ts";
import { defineTool } from "../runtime/agent/tools.ts";
import { pgBinDir, removeStalePgServers, startPgServer } from "../harness/pg_server.ts";
import { Proc, runCli, until } from "../harness/procs.ts";

const NAME =
  "a watcher and deno task watch ride out a PostgreSQL restart mid-answer and end with the run's answer";
const SKIP = Deno.uid() !== 0
  ? `a server of the test's own is started as the postgres user, which needs root; uid is ${Deno.uid()}`
  : pgBinDir()
  ? undefined
  : "no PostgreSQL server binaries (/usr/lib/postgresql/<v>/bin/initdb)";
if (SKIP) console.log(`skipped (${SKIP}): ${NAME}`);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `pg_ctl` on the test's own server, as the postgres user. */
async function pgCtl(dir: string, args: string[]): Promise<void> {
  const out = await new Deno.Command("runuser", {
    args: [
      "-u",
      "postgres",
      "--",
      `${pgBinDir()}/pg_ctl`,
      "-D",
      `${dir}/data`,
      "-l",
      `${dir}/server.log`,
      ...args,
    ],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`pg_ctl ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

/**
 * Step 0 writes 40 pieces 100 ms apart (the restart falls inside), then
 * calls `note`; step 1 waits 3 s (the listening connections are back by
 * then), writes 10 pieces, and answers.
 */
function slowTalker(): Planner & { startedStep0: Promise<void> } {
  let started: () => void = () => {};
  const startedStep0 = new Promise<void>((r) => started = r);
  return {
    describe: "slow talker",
    startedStep0,
    decide: async (req) => {
      if (req.seq === 0) {
        started();
        for (let i = 0; i < 40; i++) {
          req.onDelta?.(`piece ${i} `);
          await sleep(100);
        }
        return { kind: "tool_calls", calls: [{ name: "note", args: { text: "noted" } }] };
      }
      await sleep(3_000);
      const answer = Array.from({ length: 10 }, (_, i) => `word${i} `);
      for (const w of answer) {
        req.onDelta?.(w);
        await sleep(50);
      }
      return { kind: "done", text: answer.join("") };
    },
  };
}

Deno.test({
  name: NAME,
  ignore: SKIP !== undefined,
  async fn() {
    await removeStalePgServers();
    const server = await startPgServer({ listen: "127.0.0.1", trustCidr: "127.0.0.1/32" });
    const runId = "restarted";
    const workerClient = await connect({ databaseUrl: server.url, poolSize: 2 });
    const watchClient = await connect({ databaseUrl: server.url, poolSize: 2 });
    let cli: Deno.ChildProcess | undefined;
    let printed: Promise<{ code: number }> | undefined;
    try {
      await workerClient.store.migrate();
      const model = slowTalker();
      const note = defineTool({
        name: "note",
        description: "Notes it.",
        args: z.strictObject({ text: z.string() }),
        run: (a) => Promise.resolve({ result: { noted: a.text } }),
      });
      const agent = defineAgent({ name: "talker", tools: [note], model });
      await workerClient.start(agent, { runId, input: "talk" });
      // The watcher in this process, and `deno task watch` in its own.
      const events: StreamEvent[] = [];
      const watching = (async () => {
        for await (const e of watchClient.stream(runId)) events.push(e);
      })();
      cli = new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "--unstable-no-legacy-abort",
          new URL("../cli/main.ts", import.meta.url).pathname,
          "watch",
          runId,
          "--database-url",
          server.url,
        ],
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      // Its output as it comes: the outage must fall after it is following the run, not before it connects.
      let stdout = "";
      let stderr = "";
      const decode = (stream: ReadableStream<Uint8Array>, onText: (t: string) => void) =>
        stream.pipeThrough(new TextDecoderStream()).pipeTo(new WritableStream({ write: onText }));
      printed = Promise.all([
        cli.status,
        decode(cli.stdout, (t) => stdout += t),
        decode(cli.stderr, (t) => stderr += t),
      ]).then(([status]) => ({ code: status.code }));
      const worker = await workerClient.startWorker([agent], {
        pollMs: 50,
        streamDeltas: true,
        heartbeatMs: 1_000,
        leaseMs: 30_000,
        log: new Logger({ clock: workerClient.clock, sink: discardSink }),
      });
      try {
        await model.startedStep0;
        await sleep(1_000);
        await until(
          () => Promise.resolve(stdout.includes("piece")),
          "deno task watch to print the answer as it comes",
          60_000,
          20,
        );
        // Every connection cut at once, and nobody home for 3 s.
        await pgCtl(server.dir, ["-m", "immediate", "-w", "stop"]);
        await sleep(3_000);
        await pgCtl(server.dir, ["-w", "restart"]);
        await watching;
        const out = await printed;
        cli = undefined;
        const text = stdout;
        const run = await watchClient.get(runId);
        assert.equal(run?.status, "done", JSON.stringify(run));

        // client.stream: the outage told, then the run to its end, the last step's text heard again.
        const kinds = events.map((e) => e.type);
        const firstUnreachable = kinds.indexOf("unreachable");
        assert.ok(firstUnreachable > 0, `the outage was told: ${kinds.join(" ")}`);
        assert.deepEqual(events.at(-1), {
          type: "status",
          status: "done",
          // The worker may have let go of the run at a write the outage refused and taken it again.
          epoch: run!.epoch,
          error: null,
          idle: false,
        });
        const answer = events.find((e) => e.type === "answer");
        assert.ok(answer?.type === "answer" && answer.text === run?.output);
        const afterOutage = events.slice(firstUnreachable);
        assert.ok(afterOutage.some((e) => e.type === "tool_result" && e.status === "confirmed"));
        const step1 = afterOutage.filter((e) => e.type === "delta" && e.seq === 1).map((e) =>
          e.type === "delta" ? e.text : ""
        );
        assert.equal(
          step1.join(""),
          run?.output,
          "the next call's text arrived on the listening connection again",
        );

        // deno task watch: the same story in lines, and exit 0.
        assert.equal(out.code, 0, stderr);
        assert.match(text, /^unreachable {2}the database could not be read \(.*\); trying again in \d+ ms$/m);
        assert.match(text, /^result {2}seq=0 {2}confirmed /m);
        assert.match(text, new RegExp(`^answer  seq=1  "${run?.output}"$`, "m"));
        assert.match(text, new RegExp(`^status {2}done {2}epoch=${run!.epoch}$`, "m"));
        console.log(
          `watchers across a restart: client.stream told ${
            kinds.filter((k) => k === "unreachable").length
          } unreachable reads, ${events.length} events; deno task watch printed ${
            text.split("\n").filter((l) => l.startsWith("unreachable")).length
          } unreachable lines`,
        );
      } finally {
        await worker.stop();
      }
    } finally {
      if (cli) {
        cli.kill("SIGKILL");
        await printed;
      }
      await watchClient.close();
      await workerClient.close();
      await server.close();
    }
  },
});

const NAME_AWAY_AT_START =
  "deno task watch started while PostgreSQL is away waits for it and follows the run; inspect exits 7 (away), not 2";

Deno.test({
  name: NAME_AWAY_AT_START,
  ignore: SKIP !== undefined,
  async fn() {
    await removeStalePgServers();
    const server = await startPgServer({ listen: "127.0.0.1", trustCidr: "127.0.0.1/32" });
    let watch: Proc | undefined;
    try {
      const client = await connect({ databaseUrl: server.url, poolSize: 2 });
      try {
        await client.store.migrate();
        const agent = defineAgent({
          name: "quick",
          tools: [],
          model: { describe: "quick", decide: () => Promise.resolve({ kind: "done", text: "all well" }) },
        });
        await client.start(agent, { runId: "early", input: "hi" });
        const worker = await client.startWorker([agent], {
          pollMs: 50,
          log: new Logger({ clock: client.clock, sink: discardSink }),
        });
        try {
          await until(
            async () => (await client.get("early"))?.status === "done",
            "the run to end",
            60_000,
            50,
          );
        } finally {
          await worker.stop();
        }
      } finally {
        await client.close();
      }
      await pgCtl(server.dir, ["-m", "fast", "-w", "stop"]);

      // A one-shot command answers at once: the database is away, which is no settings error.
      const inspect = await runCli(["inspect", "early", "--database-url", server.url], {});
      assert.equal(inspect.code, 7, inspect.out);
      assert.match(inspect.out, /^DB_UNREACHABLE: /m);

      // watch waits, saying so, and follows the run once the server is back.
      watch = new Proc("cli/main.ts", {}, { args: ["watch", "early", "--database-url", server.url] });
      await watch.waitFor(
        (l) => /^unreachable {2}the database could not be read \(.*\); trying again in \d+ ms$/.test(l),
        "deno task watch to say the database is away",
      );
      // restart: pg_ctl starts it with the options it was started with (postmaster.opts), the port among them.
      await pgCtl(server.dir, ["-w", "restart"]);
      const out = () => watch!.lines.join("\n");
      assert.equal(await watch.status, 0, out());
      assert.match(out(), /^answer {2}seq=0 {2}"all well"$/m);
      assert.match(out(), /^status {2}done {2}epoch=1$/m);
      watch = undefined;
    } finally {
      if (watch) {
        watch.kill("SIGKILL");
        await watch.status;
      }
      await server.close();
    }
  },
});
