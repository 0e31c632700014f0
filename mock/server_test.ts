import assert from "node:assert/strict";
import { serveMocks } from "./server.ts";

function createServer(cloudUrl: string, key: string, signal?: AbortSignal): Promise<Response> {
  return fetch(`${cloudUrl}/v1/servers`, {
    method: "POST",
    headers: { "Idempotency-Key": key, "content-type": "application/json" },
    body: JSON.stringify({ name: "srv-1", spec: "small" }),
    signal,
  });
}

Deno.test("serveMocks serves the model and the cloud over HTTP on free ports", async (t) => {
  const mocks = await serveMocks({ modelPort: 0, cloudPort: 0 });
  try {
    assert.match(mocks.modelUrl, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    assert.match(mocks.cloudUrl, /^http:\/\/127\.0\.0\.1:\d+$/);

    await t.step("the model answers a chat completion", async () => {
      const res = await fetch(`${mocks.modelUrl}/chat/completions`, {
        method: "POST",
        headers: { authorization: "Bearer sk-test" },
        body: JSON.stringify({ model: "m", user: "run1", messages: [{ role: "user", content: "go" }] }),
      });
      assert.equal(res.status, 200);
      const call = (await res.json()).choices[0].message.tool_calls[0];
      assert.equal(call.function.name, "create_server");
      assert.equal(mocks.model.calls("run1"), 1);
    });

    await t.step("the cloud creates then replays", async () => {
      const created = await createServer(mocks.cloudUrl, "run1:s");
      assert.equal(created.status, 201);
      const created_text = await created.text();
      const replay = await createServer(mocks.cloudUrl, "run1:s");
      assert.equal(replay.status, 200);
      assert.equal(replay.headers.get("idempotent-replayed"), "true");
      assert.equal(await replay.text(), created_text);
    });

    await t.step("both answer /health", async () => {
      for (const url of [mocks.cloudUrl, mocks.modelUrl.replace(/\/v1$/, "")]) {
        assert.deepEqual(await (await fetch(`${url}/health`)).json(), { ok: true });
      }
    });
  } finally {
    await mocks.close();
  }
});

Deno.test("over HTTP a dropped answer fails the client, yet a retry under the same key is a replay", async () => {
  const mocks = await serveMocks();
  try {
    mocks.cloud.setFaults({ drop_after_act_next: 1 });
    await assert.rejects(async () => {
      const res = await createServer(mocks.cloudUrl, "k");
      await res.text();
    });
    assert.equal(mocks.cloud.created().length, 1);
    const retry = await createServer(mocks.cloudUrl, "k");
    assert.equal(retry.status, 200);
    assert.equal((await retry.json()).id, "i-0000001");
  } finally {
    await mocks.close();
  }
});

Deno.test("over HTTP a hung request ends when the client gives up, and close() releases the rest", async () => {
  const mocks = await serveMocks();
  let closed = false;
  try {
    mocks.cloud.setFaults({ hang_next: 2 });
    await assert.rejects(createServer(mocks.cloudUrl, "a", AbortSignal.timeout(50)));

    const pending = createServer(mocks.cloudUrl, "b");
    while (mocks.cloud.requests().total < 2) await new Promise((resolve) => setTimeout(resolve, 5));
    await mocks.close();
    closed = true;
    const res = await pending;
    assert.equal(res.status, 499);
    await res.body?.cancel();
    assert.deepEqual(mocks.cloud.created(), []);
  } finally {
    if (!closed) await mocks.close();
  }
});

Deno.test("stateDir keeps both mocks' state across restarts", async () => {
  const stateDir = await Deno.makeTempDir();
  try {
    const first = await serveMocks({ stateDir });
    const created = await createServer(first.cloudUrl, "k");
    await created.body?.cancel();
    const chat = await fetch(`${first.modelUrl}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "m", user: "run1", messages: [] }),
    });
    await chat.body?.cancel();
    await first.close();

    const second = await serveMocks({ stateDir });
    try {
      assert.equal(second.cloud.created().length, 1);
      assert.equal(second.model.calls("run1"), 1);
      const replay = await createServer(second.cloudUrl, "k");
      assert.equal(replay.status, 200);
      await replay.body?.cancel();
    } finally {
      await second.close();
    }
  } finally {
    await Deno.remove(stateDir, { recursive: true });
  }
});

Deno.test("aborting the signal option closes both servers", async () => {
  const controller = new AbortController();
  const mocks = await serveMocks({ signal: controller.signal });
  controller.abort();
  await mocks.close(); // the same shutdown, awaited
  await assert.rejects(fetch(`${mocks.cloudUrl}/health`));
});

Deno.test("run as a command it prints both URLs, and exits 0 on SIGTERM", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./server.ts", import.meta.url).pathname,
      "--model-port",
      "0",
      "--cloud-port",
      "0",
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  while (lines.length < 2) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    const parts = buffered.split("\n");
    buffered = parts.pop()!;
    lines.push(...parts);
  }
  const cloudUrl = lines[1]?.match(/url=(\S+)/)?.[1];
  assert.ok(cloudUrl, `unexpected output: ${JSON.stringify(lines)}`);
  const health = await fetch(`${cloudUrl}/health`);
  assert.equal(health.status, 200);
  await health.body?.cancel();
  child.kill("SIGTERM");
  while (!(await reader.read()).done) { /* drain */ }
  const [status, stderr] = await Promise.all([child.status, new Response(child.stderr).text()]);

  assert.match(lines[0], /^ts=\S+ level=info event=mock-model url=http:\/\/127\.0\.0\.1:\d+\/v1$/);
  assert.match(lines[1], /^ts=\S+ level=info event=mock-cloud url=http:\/\/127\.0\.0\.1:\d+$/);
  assert.equal(status.code, 0, stderr);
});

Deno.test("run as a command it refuses an invalid port with exit code 2", async (t) => {
  const cases: { name: string; args: string[]; env: Record<string, string>; names: string }[] = [
    { name: "a flag out of range", args: ["--model-port", "70000"], env: {}, names: "--model-port" },
    {
      name: "an env var that is not a number",
      args: [],
      env: { MOCK_CLOUD_PORT: "abc" },
      names: "MOCK_CLOUD_PORT",
    },
    { name: "a parallel of zero", args: ["--model-parallel", "0"], env: {}, names: "--model-parallel" },
    {
      name: "a parallel env var that is not a number",
      args: [],
      env: { MOCK_MODEL_PARALLEL: "two" },
      names: "MOCK_MODEL_PARALLEL",
    },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const output = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", new URL("./server.ts", import.meta.url).pathname, ...c.args],
        env: c.env,
      }).output();
      assert.equal(output.code, 2);
      const stderr = new TextDecoder().decode(output.stderr);
      assert.ok(stderr.includes(c.names), stderr);
      assert.equal(stderr.trim().split("\n").length, 1);
    });
  }
});

// Regression: deleting the state directory under a running `deno task mock --state-dir X` (the README's
// "start over") made every later request a 500 while /health still answered ok.
Deno.test("removing the state directory under running mocks: later requests still work and state is written again", async () => {
  const parent = await Deno.makeTempDir();
  const stateDir = `${parent}/mocks`;
  const mocks = await serveMocks({ stateDir });
  try {
    const first = await createServer(mocks.cloudUrl, "k1");
    await first.body?.cancel();
    await Deno.remove(stateDir, { recursive: true });

    const second = await fetch(`${mocks.cloudUrl}/v1/servers`, {
      method: "POST",
      headers: { "Idempotency-Key": '"k2"' },
      body: JSON.stringify({ name: "srv-2" }),
    });
    assert.equal(second.status, 201);
    await second.body?.cancel();
    const chat = await fetch(`${mocks.modelUrl}/chat/completions`, {
      method: "POST",
      headers: { "x-agent-run": "run1" },
      body: JSON.stringify({ model: "m", messages: [] }),
    });
    assert.equal(chat.status, 200);
    await chat.body?.cancel();
    for (const url of [mocks.cloudUrl, mocks.modelUrl.replace(/\/v1$/, "")]) {
      assert.deepEqual(await (await fetch(`${url}/health`)).json(), { ok: true });
    }
    const cloud = JSON.parse(await Deno.readTextFile(`${stateDir}/cloud.json`));
    assert.deepEqual(cloud.resources.map((r: { key: string }) => r.key), ["k1", "k2"]);
    const model = JSON.parse(await Deno.readTextFile(`${stateDir}/model.json`));
    assert.equal(model.calls.by_run.run1, 1);
  } finally {
    await mocks.close();
    await Deno.remove(parent, { recursive: true });
  }
});

Deno.test("run as a command it answers --help with its flags and exit 0, and an unknown flag with one line and exit 2", async (t) => {
  const run = (args: string[]) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL("./server.ts", import.meta.url).pathname, ...args],
      stdin: "null",
    }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  for (const flag of ["--help", "-h"]) {
    await t.step(flag, async () => {
      const out = await run([flag]);
      assert.equal(out.code, 0);
      const text = decode(out.stdout);
      for (const name of ["--hostname", "--model-port", "--cloud-port", "--state-dir", "MOCK_STATE_DIR"]) {
        assert.ok(text.includes(name), `usage names ${name}: ${text}`);
      }
    });
  }
  await t.step("--bogus", async () => {
    const out = await run(["--bogus"]);
    assert.equal(out.code, 2);
    const stderr = decode(out.stderr).trim();
    assert.equal(stderr.split("\n").length, 1, stderr);
    assert.match(stderr, /--bogus/);
    assert.ok(!stderr.includes("    at "), "no stack trace");
  });
});

Deno.test("run as a command with --model-parallel 2, the model answers the demo two calls at a time", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./server.ts", import.meta.url).pathname,
      "--model-port",
      "0",
      "--cloud-port",
      "0",
      "--model-parallel",
      "2",
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  while (!buffered.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
  }
  const first_line = buffered.split("\n")[0];
  try {
    assert.match(first_line, /event=mock-model url=\S+ parallel=2$/);
    const modelUrl = first_line.match(/url=(\S+)/)![1];
    const res = await fetch(`${modelUrl}/chat/completions`, {
      method: "POST",
      headers: { "x-agent-run": "p1" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "go" }] }),
    });
    const calls = (await res.json()).choices[0].message.tool_calls;
    assert.deepEqual(calls.map((c: { function: { name: string } }) => c.function.name), [
      "create_server",
      "create_database",
    ]);
  } finally {
    child.kill("SIGTERM");
    while (!(await reader.read()).done) { /* drain */ }
    await Promise.all([child.status, new Response(child.stderr).text()]);
  }
});
