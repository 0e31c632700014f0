/**
 * Inputs the runtime must answer with a clear refusal or the right record,
 * on both stores and with real processes: a run list's paging, the numeric
 * flags of the commands, a worker restarted under its old name with other
 * agents, an agent module that never finishes importing, and processes that
 * wait for the embedded database another one holds.
 */

import assert from "node:assert/strict";
import { Client } from "../runtime/client/client.ts";
import { ClientError } from "../runtime/base/errors.ts";
import type { RunFilter } from "../runtime/store/store.ts";
import { pgTest } from "./_pg.ts";
import { bothStoresTest } from "./_pglite.ts";
import { Proc, until } from "../harness/procs.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

bothStoresTest(
  "list() refuses a page it cannot serve with FILTER_INVALID, naming the field and the value",
  async (
    store,
    t,
  ) => {
    const client = new Client(store);
    await store.leases.createRun({ runId: "l-1", agent: "a", goal: "g" }, new Date());
    const refused: [RunFilter, RegExp][] = [
      [{ limit: -1 }, /'limit' .* from 1 to 10000: current value is -1$/],
      [{ limit: 0 }, /'limit' .*: current value is 0$/],
      [{ limit: 1.5 }, /'limit' .*: current value is 1\.5$/],
      [{ limit: NaN }, /'limit' .*: current value is NaN$/],
      [{ limit: 10_001 }, /'limit' .*: current value is 10001$/],
      [{ limit: "5" as unknown as number }, /'limit' .*: current value is "5"$/],
      [{ offset: -5 }, /'offset' .* 0 or more: current value is -5$/],
      [{ offset: 2.5 }, /'offset' .*: current value is 2\.5$/],
      [{ offset: Infinity }, /'offset' .*: current value is Infinity$/],
      [
        { status: "bogus" as unknown as "done" },
        /'status' must be one of pending, .*: current value is "bogus"$/,
      ],
      [{ search: 5 as unknown as string }, /'search' must be a string: current value is 5$/],
    ];
    for (const [filter, message] of refused) {
      await t.step(JSON.stringify(filter, (_k, v) => Number.isNaN(v) ? "NaN" : v), async () => {
        await assert.rejects(client.reads.list(filter), (err: ClientError) => {
          assert.ok(err instanceof ClientError, String(err));
          assert.equal(err.code, "FILTER_INVALID");
          assert.match(err.message, message);
          return true;
        });
      });
    }
    const page = await client.reads.list({ limit: 10_000, offset: 0, status: "pending" });
    assert.deepEqual(page.runs.map((r) => r.run_id), ["l-1"]);
    assert.equal((await client.reads.list({ status: "waiting" })).total, 0);
  },
);

bothStoresTest(
  "a worker restarted under the same name with other agents is listed with its new agents",
  async (
    store,
  ) => {
    const first = new Date(Date.UTC(2026, 0, 1));
    const later = new Date(first.getTime() + 60_000);
    await store.leases.heartbeatMany(
      { name: "w", agents: ["alpha"], capacity: 10, startedAt: first },
      [],
      first,
    );
    assert.deepEqual(await store.leases.hostedAgents(first), ["alpha"]);
    // The process died without removing its row; a new one starts under the same name.
    await store.leases.heartbeatMany(
      { name: "w", agents: ["beta"], capacity: 5, startedAt: later },
      [],
      later,
    );
    assert.deepEqual(await store.leases.hostedAgents(first), ["beta"]);
    const rows = await store.client.query<{ agents: string[]; capacity: number; started_at: Date }>(
      `select agents, capacity, started_at from workers where name = 'w'`,
    );
    assert.deepEqual(rows.map((r) => [r.agents, r.capacity, new Date(r.started_at).getTime()]), [
      [["beta"], 5, later.getTime()],
    ]);
  },
);

/** An agent module in `dir` named `name`, with a model that answers at once (no MODEL_URL needed). */
async function agentModule(dir: string, name: string): Promise<string> {
  const file = `${dir}/${name}.ts`;
  await Deno.writeTextFile(
    file,
    `import { defineAgent } from "${MOD_TS}";
export default defineAgent({
  name: "${name}",
  tools: [],
  model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "ok" }) },
});
`,
  );
  return file;
}

pgTest(
  "a worker killed and restarted under its --worker name with another module hosts the new agent",
  async (
    pg,
  ) => {
    const dir = await Deno.makeTempDir({ prefix: "restart_worker_" });
    const agentsOf = async () =>
      (await pg.store.client.query<{ agents: string[] }>(`select agents from workers where name = 'w-fixed'`))
        .map((r) => r.agents);
    try {
      const env = {
        DATABASE_URL: pg.url,
        WORKER: "w-fixed",
        HEARTBEAT_S: "0.2",
        LEASE_S: "2",
        POLL_S: "0.2",
      };
      const first = new Proc("cli/main.ts", { ...env, AGENT: await agentModule(dir, "alpha") }, {
        args: ["worker"],
      });
      try {
        await until(async () => JSON.stringify(await agentsOf()) === '[["alpha"]]', "the first worker's row");
      } finally {
        await first.close(); // SIGKILL: its row stays, as after a crash
      }
      const second = new Proc("cli/main.ts", { ...env, AGENT: await agentModule(dir, "beta") }, {
        args: ["worker"],
      });
      try {
        await second.waitFor((l) => l.includes("event=backends"), "the second worker to start");
        await until(
          async () => JSON.stringify(await agentsOf()) === '[["beta"]]',
          "the row to name the second worker's agent",
          30_000,
        );
        assert.deepEqual(await new Client(pg.store).reads.hostedAgents(), ["beta"], "what `runs` reads");
      } finally {
        second.kill("SIGTERM");
        assert.equal(await second.status, 0, second.lines.join("\n"));
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

/** Runs `cli/main.ts args` to its end, bounded: a process still running after `boundMs` fails the test. */
async function runBounded(
  args: string[],
  env: Record<string, string>,
  boundMs = 90_000,
): Promise<{ code: number; lines: string[] }> {
  const proc = new Proc("cli/main.ts", env, { args });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<"hung">((r) => timer = setTimeout(() => r("hung"), boundMs));
  try {
    const code = await Promise.race([proc.status, hung]);
    if (code === "hung") {
      const left = await proc.close();
      assert.fail(
        `${args.join(" ")} still ran after ${boundMs / 1000} s (killed, code ${left}):\n${proc.lines}`,
      );
    }
    return { code, lines: proc.lines };
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("every numeric flag of the commands refuses a value out of range in one line, exit 2", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "numeric_flags_" });
  try {
    const cases: [string[], string][] = [
      [["submit", "--budget-tokens", "99999999999999999999"], "--budget-tokens"],
      [["submit", "--budget-model-calls", "1.5"], "--budget-model-calls"],
      [["submit", "--budget-tool-calls", "0"], "--budget-tool-calls"],
      [["runs", "--limit", "99999999999999999999"], "--limit"],
      [["runs", "--page=-1"], "--page"],
      [["prune", "--finished-before", "30d", "--batch", "1e3"], "--batch"],
    ];
    // Each on a directory of its own: a process that did open its database holds it.
    const results = await Promise.all(
      cases.map(([args], i) => runBounded(args, { DATA_DIR: `${dir}/${i}` })),
    );
    for (const [i, [args, flag]] of cases.entries()) {
      await t.step(args.join(" "), () => {
        const { code, lines } = results[i];
        assert.equal(code, 2, lines.join("\n"));
        assert.equal(lines.length, 1, `one line:\n${lines.join("\n")}`);
        assert.match(lines[0], new RegExp(`${flag} must be an integer from \\d+ to \\d+: current value is`));
      });
    }
    const waiting = await runBounded(["runs", "--status", "waiting"], { DATA_DIR: `${dir}/w` });
    assert.equal(waiting.code, 0, `a status a run can have is a filter:\n${waiting.lines.join("\n")}`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an agent module that hangs at import makes run, worker, supervise and submit refuse it in one line", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "hanging_agent_" });
  try {
    // A top-level await on a timer of 11 days: the import never finishes by itself.
    await Deno.writeTextFile(
      `${dir}/hangs.ts`,
      `await new Promise((r) => setTimeout(r, 1e9));\nexport default 1;\n`,
    );
    const env = { AGENT: `${dir}/hangs.ts`, AGENT_LOAD_S: "1" };
    const commands: [string, string[], Record<string, string>][] = [
      ["run", ["run"], { DATA_DIR: `${dir}/run` }],
      ["worker", ["worker"], { DATA_DIR: `${dir}/worker` }],
      // Loading comes before connecting: no server is needed at this address.
      ["supervise", ["supervise"], { DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" }],
      ["submit", ["submit"], { DATA_DIR: `${dir}/submit` }],
    ];
    const results = await Promise.all(
      commands.map(([, args, more]) => runBounded(args, { ...env, ...more })),
    );
    for (const [i, [name]] of commands.entries()) {
      await t.step(name, () => {
        const { code, lines } = results[i];
        assert.equal(code, 2, lines.join("\n"));
        assert.equal(lines.length, 1, `one line:\n${lines.join("\n")}`);
        assert.match(lines[0], /AGENT ".*hangs\.ts" did not finish loading within 1 s/);
        assert.doesNotMatch(lines[0], /^\s+at /);
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("while one process holds the embedded database, run, worker and the page wait for it, say so, and go on", async () => {
  const dir = await Deno.makeTempDir({ prefix: "data_dir_wait_" });
  const env = { DATA_DIR: dir };
  const procs: Proc[] = [];
  const start = (args: string[], more: Record<string, string> = {}) => {
    const p = new Proc("cli/main.ts", { ...env, ...more }, { args });
    procs.push(p);
    return p;
  };
  const stop = async (p: Proc) => {
    p.kill("SIGTERM");
    assert.equal(await p.status, 0, p.lines.join("\n"));
  };
  const waitingLine = (p: Proc) =>
    p.waitFor((l) => l.includes("event=waiting-for-data-dir"), "the wait line");
  try {
    // The page, bound to IPv6 loopback given as in a URL: its address has the brackets once.
    const ui = start(["ui", "--host", "[::1]", "--port", "0"]);
    const url = (await ui.waitFor((l) => l.startsWith("ui  url="), "the page to start")).split(/\s+/)[1];
    assert.match(url, /^url=http:\/\/\[::1\]:\d+\/$/);
    const res = await fetch(`${url.slice(4)}api/runs`);
    assert.equal(res.status, 200);
    await res.body?.cancel();

    // A run started meanwhile waits (one line naming the holder), and runs once the page exits.
    const run = start(["run", "--run-id", "wait-1"]);
    const line = await waitingLine(run);
    assert.match(line, new RegExp(`holder_pid=${ui.pid} wait_s=60 `));
    await stop(ui);
    assert.equal(await run.status, 0, run.lines.join("\n"));
    assert.equal(run.events("data-dir-free").length, 1);
    assert.equal(run.events("done").length, 1, run.lines.join("\n"));

    // The page waits for a worker in turn, and starts once the worker stops.
    const worker = start(["worker"]);
    await worker.waitFor((l) => l.includes("event=backends"), "the worker to start");
    const ui2 = start(["ui", "--port", "0"]);
    await ui2.waitFor((l) => l.startsWith("ui  waiting for the embedded database"), "the page's wait line");
    // One that may not wait long gives up with one line naming the holder.
    const impatient = start(["run", "--run-id", "wait-2"], { DATA_DIR_WAIT_S: "1" });
    assert.equal(await impatient.status, 2, impatient.lines.join("\n"));
    assert.match(
      impatient.lines.join("\n"),
      new RegExp(`event=store-unavailable code=DATA_DIR_LOCKED .*in use by pid ${worker.pid} \\(waited 1 s`),
    );
    await stop(worker);
    await ui2.waitFor((l) => l.startsWith("ui  url="), "the page to start after the worker");

    // And a worker waits for the page.
    const worker2 = start(["worker"]);
    await waitingLine(worker2);
    await stop(ui2);
    await worker2.waitFor((l) => l.includes("event=backends"), "the second worker to start");
    assert.equal(worker2.events("data-dir-free").length, 1);
    await stop(worker2);
  } finally {
    for (const p of procs) await p.close();
    await Deno.remove(dir, { recursive: true });
  }
});
