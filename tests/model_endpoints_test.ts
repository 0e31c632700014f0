/**
 * One module, several agents, each with its model: agents that name their own
 * endpoint (`model: { url, model }`) reach their own server though `MODEL_URL`
 * is set, an agent that names none reaches `MODEL_URL`'s, and no server is
 * sent a key or a model name given for another. Real HTTP to three fake
 * servers (the mock model behind a recorder); once in process through
 * `client.startWorker`, once through a real `worker` process on PostgreSQL,
 * whose `backends` line names each agent's model.
 */

import assert from "node:assert/strict";
import { MockModel, NOTHING_TO_DO_MESSAGE } from "../mock/model.ts";
import { testClient } from "./_pglite.ts";
import { Client } from "../runtime/client/client.ts";
import type { Agent } from "../runtime/agent/agent.ts";
import { openPostgres } from "../runtime/store/postgres.ts";
import { Store } from "../runtime/store/store.ts";
import { parseLine, Proc } from "../harness/procs.ts";
import { freshSchema, pgIgnore } from "./_pg.ts";

const MOD_TS = new URL("../mod.ts", import.meta.url).href;

/** What a fake model server was sent: the run, the model name, the key. */
interface Seen {
  run: string | null;
  model: string;
  authorization: string | null;
}

/** The mock model over HTTP on a free port, recording who asked it for what. */
async function recordingModel(): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const model = await MockModel.open();
  const seen: Seen[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const body = await req.clone().json() as { model: string };
    seen.push({
      run: req.headers.get("x-agent-run"),
      model: body.model,
      authorization: req.headers.get("authorization"),
    });
    return model.handler(req);
  });
  return { url: `http://127.0.0.1:${server.addr.port}/v1`, seen, close: () => server.shutdown() };
}

/** Three agents: two with endpoints of their own (one with its own key variable), one leaving it to MODEL_URL. */
function moduleSource(a: string, b: string): string {
  return `
import { defineAgent } from "${MOD_TS}";
export default [
  defineAgent({ name: "own-a", tools: [], model: { url: ${JSON.stringify(a)}, model: "model-a" } }),
  defineAgent({ name: "own-b", tools: [], model: { url: ${
    JSON.stringify(b)
  }, model: "model-b", apiKeyEnv: "B_KEY" } }),
  defineAgent({ name: "shared", tools: [] }),
];
`;
}

/** The settings: MODEL_URL and its model and key, and the key agent own-b names. */
function settings(shared: string): Record<string, string> {
  return { MODEL_URL: shared, MODEL: "model-shared", MODEL_API_KEY: "key-of-shared", B_KEY: "key-of-b" };
}

type Servers = Record<"a" | "b" | "shared", Awaited<ReturnType<typeof recordingModel>>>;

/** Each server got only its own agent's requests, with its own model name and key. */
function assertEachReachedItsOwn(servers: Servers): void {
  const requests = (s: Seen[]) => s.map((r) => `${r.run} ${r.model} ${r.authorization ?? "no-key"}`);
  assert.deepEqual(requests(servers.a.seen), ["r-a model-a no-key"], "own-a's server");
  assert.deepEqual(requests(servers.b.seen), ["r-b model-b Bearer key-of-b"], "own-b's server");
  assert.deepEqual(
    requests(servers.shared.seen),
    ["r-shared model-shared Bearer key-of-shared"],
    "MODEL_URL's server",
  );
}

async function withServers(fn: (servers: Servers) => Promise<void>): Promise<void> {
  const servers: Servers = {
    a: await recordingModel(),
    b: await recordingModel(),
    shared: await recordingModel(),
  };
  try {
    await fn(servers);
  } finally {
    await Promise.all(Object.values(servers).map((s) => s.close()));
  }
}

async function writeModule(servers: Servers): Promise<{ path: string; agents: Agent[]; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: "endpoints-" });
  const path = `${dir}/agents.ts`;
  await Deno.writeTextFile(path, moduleSource(servers.a.url, servers.b.url));
  const { default: agents } = await import(`file://${path}`) as { default: Agent[] };
  return { path, agents, dir };
}

Deno.test("agents naming their own model endpoint reach their own servers though MODEL_URL is set (in process)", async () => {
  await withServers(async (servers) => {
    const { agents, dir } = await writeModule(servers);
    const client = await testClient();
    const worker = await client.startWorker(agents, {
      pollMs: 10,
      context: { env: settings(servers.shared.url), dataDir: dir },
    });
    try {
      for (
        const [agent, runId] of [[agents[0], "r-a"], [agents[1], "r-b"], [agents[2], "r-shared"]] as const
      ) {
        await client.start(agent, { runId, input: "go" });
        const done = await client.wait(runId, { timeoutMs: 30_000, pollMs: 10 });
        assert.equal(done.status, "done", `${runId}: ${done.error}`);
        assert.equal(done.output, NOTHING_TO_DO_MESSAGE);
      }
      assertEachReachedItsOwn(servers);
    } finally {
      await worker.stop();
      await client.close();
      await Deno.remove(dir, { recursive: true });
    }
  });
});

Deno.test({
  name: "a worker process sends each agent's requests to its own model and its backends line names each",
  ignore: pgIgnore("model endpoints in a worker process"),
  async fn() {
    await withServers(async (servers) => {
      const pg = await freshSchema();
      const { path, agents, dir } = await writeModule(servers);
      const client = new Client(new Store(await openPostgres(pg.url)));
      const worker = new Proc("cli/main.ts", {
        DATABASE_URL: pg.url,
        AGENT: path,
        POLL_S: "0.1",
        ...settings(servers.shared.url),
      }, { args: ["worker"] });
      try {
        const backends = parseLine(
          await worker.waitFor((l) => parseLine(l)?.event === "backends", "the worker's backends line"),
        )!;
        for (
          const [agent, runId] of [[agents[0], "r-a"], [agents[1], "r-b"], [agents[2], "r-shared"]] as const
        ) {
          await client.start(agent, { runId, input: "go" });
        }
        for (const runId of ["r-a", "r-b", "r-shared"]) {
          const done = await client.wait(runId, { timeoutMs: 60_000 });
          assert.equal(done.status, "done", `${runId}: ${done.error}\n${worker.lines.join("\n")}`);
        }
        assertEachReachedItsOwn(servers);
        const chat = (url: string) => `${url}/chat/completions`;
        assert.equal(
          backends.models,
          `own-a: ${chat(servers.a.url)} model=model-a key=none; ` +
            `own-b: ${chat(servers.b.url)} model=model-b key=B_KEY; ` +
            `shared: ${chat(servers.shared.url)} model=model-shared key=MODEL_API_KEY`,
        );
        const output = worker.lines.join("\n");
        assert.ok(!output.includes("key-of-"), `no key in the log:\n${output}`);
      } finally {
        await worker.close();
        await client.close();
        await pg.drop();
        await Deno.remove(dir, { recursive: true });
      }
    });
  },
});
