import assert from "node:assert/strict";
import { join } from "node:path";
import { ManualClock } from "../runtime/base/clock.ts";
import { MockCloud } from "./cloud.ts";
import { serveMocks } from "./server.ts";

const FIXED_NOW = () => new Date("2030-01-02T03:04:05Z");

function post(path: string, body: unknown, key?: string, signal?: AbortSignal): Request {
  return new Request(`http://mock${path}`, {
    method: "POST",
    headers: key === undefined ? {} : { "Idempotency-Key": key },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

function get(path: string): Request {
  return new Request(`http://mock${path}`);
}

/** Checks an RFC 9457 problem details answer and returns its body. */
async function assertProblem(res: Response, status: number): Promise<Record<string, unknown>> {
  assert.equal(res.status, status);
  assert.equal(res.headers.get("content-type"), "application/problem+json");
  const body = await res.json();
  assert.equal(body.status, status);
  for (const field of ["type", "title", "detail"]) {
    assert.equal(typeof body[field], "string", `${field} in ${JSON.stringify(body)}`);
  }
  return body;
}

Deno.test("a first request creates the resource and the same request again replays the stored answer", async () => {
  const cloud = await MockCloud.open({ now: FIXED_NOW });
  const payload = { name: "srv-1", spec: "small" };

  const first = await cloud.handler(post("/v1/servers", payload, "run1:step0"));
  assert.equal(first.status, 201);
  assert.equal(first.headers.get("Idempotent-Replayed"), "false");
  const first_text = await first.text();
  assert.deepEqual(JSON.parse(first_text), { id: "i-0000001", kind: "server", name: "srv-1", spec: "small" });

  const again = await cloud.handler(post("/v1/servers", payload, "run1:step0"));
  assert.equal(again.status, 200);
  assert.equal(again.headers.get("Idempotent-Replayed"), "true");
  assert.equal(await again.text(), first_text);

  assert.deepEqual(cloud.created(), [{
    key: "run1:step0",
    kind: "server",
    id: "i-0000001",
    payload,
    created_at: "2030-01-02T03:04:05.000Z",
  }]);
  assert.deepEqual(cloud.requests(), {
    total: 2,
    by_key: { "run1:step0": 2 },
    by_path: { "/v1/servers": 2 },
  });
});

Deno.test("ids come from one counter shared by every kind, prefixed by kind", async (t) => {
  const cloud = await MockCloud.open();
  const cases = [
    { path: "/v1/servers", kind: "server", id: "i-0000001" },
    { path: "/v1/databases", kind: "database", id: "db-0000002" },
    { path: "/v1/dns_records", kind: "dns_record", id: "dns-0000003" },
  ];
  for (const c of cases) {
    await t.step(`${c.path} creates ${c.id}`, async () => {
      const res = await cloud.handler(post(c.path, { name: c.kind }, `key-${c.kind}`));
      assert.equal(res.status, 201);
      assert.deepEqual(await res.json(), { id: c.id, kind: c.kind, name: c.kind });
    });
  }
});

Deno.test("a payload field cannot override the id or kind of the answer", async () => {
  const cloud = await MockCloud.open();
  const res = await cloud.handler(post("/v1/servers", { id: "mine", kind: "evil", name: "x" }, "k"));
  assert.equal(await res.text(), '{"id":"i-0000001","kind":"server","name":"x"}');
});

Deno.test("a replay compares payloads canonically, so key order does not matter", async () => {
  const cloud = await MockCloud.open();
  const first = await cloud.handler(post("/v1/databases", { name: "db", opts: { a: 1, b: [1, 2] } }, "k"));
  await first.body?.cancel();
  const again = await cloud.handler(post("/v1/databases", '{"opts":{"b":[1,2],"a":1},"name":"db"}', "k"));
  assert.equal(again.status, 200);
  assert.equal(again.headers.get("Idempotent-Replayed"), "true");
  await again.body?.cancel();
});

Deno.test("reusing a key for a different request is refused with 422 and creates nothing", async (t) => {
  const cloud = await MockCloud.open();
  const first = await cloud.handler(post("/v1/servers", { name: "srv-1" }, "k"));
  await first.body?.cancel();
  const cases = [
    { name: "a different payload", path: "/v1/servers", body: { name: "srv-2" } },
    { name: "an extra field", path: "/v1/servers", body: { name: "srv-1", spec: "large" } },
    { name: "a different kind", path: "/v1/databases", body: { name: "srv-1" } },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const res = await cloud.handler(post(c.path, c.body, "k"));
      assert.equal(res.status, 422);
      const body = await assertProblem(res, 422);
      assert.equal(body.code, "idempotency_key_reused");
    });
  }
  assert.equal(cloud.created().length, 1);
});

Deno.test("malformed requests are refused and counted", async (t) => {
  const cloud = await MockCloud.open();
  const cases = [
    { name: "a missing Idempotency-Key is 400", req: post("/v1/servers", { name: "x" }), status: 400 },
    { name: "a body that is not JSON is 400", req: post("/v1/servers", "{oops", "k1"), status: 400 },
    { name: "a JSON array body is 400", req: post("/v1/servers", [1], "k2"), status: 400 },
    { name: "an unknown /v1 path is 404", req: post("/v1/volumes", {}, "k3"), status: 404 },
    { name: "an unknown route is 404", req: get("/nope"), status: 404 },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const res = await cloud.handler(c.req);
      await assertProblem(res, c.status);
    });
  }
  assert.deepEqual(cloud.created(), []);
  assert.equal(cloud.requests().total, 4);
});

Deno.test("the inspection endpoints report health, creations by key prefix and request counts", async () => {
  const cloud = await MockCloud.open();
  for (const key of ["run1:a", "run2:a", "run1:b"]) {
    const res = await cloud.handler(post("/v1/servers", { key }, key));
    await res.body?.cancel();
  }
  assert.deepEqual(await (await cloud.handler(get("/health"))).json(), { ok: true });
  const run1 = await (await cloud.handler(get("/created?prefix=run1:"))).json();
  assert.deepEqual(run1.map((r: { id: string }) => r.id), ["i-0000001", "i-0000003"]);
  assert.equal((await (await cloud.handler(get("/created"))).json()).length, 3);
  assert.deepEqual(cloud.created("run2:").map((r) => r.key), ["run2:a"]);
  const counts = await (await cloud.handler(get("/requests"))).json();
  assert.deepEqual(counts, cloud.requests());
  assert.equal(counts.total, 3);
});

Deno.test("state persisted to a file survives reopening the cloud", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const statePath = join(dir, "cloud.json");
    const before = await MockCloud.open({ statePath });
    const created = await before.handler(post("/v1/servers", { name: "srv-1" }, "run1:s"));
    const created_text = await created.text();

    const after = await MockCloud.open({ statePath });
    assert.equal(after.created().length, 1);
    const replay = await after.handler(post("/v1/servers", { name: "srv-1" }, "run1:s"));
    assert.equal(replay.status, 200);
    assert.equal(await replay.text(), created_text);
    const next = await after.handler(post("/v1/databases", { name: "db" }, "run1:d"));
    assert.equal((await next.json()).id, "db-0000002");
    assert.equal(after.requests().total, 3);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fault knobs make the next matching requests misbehave", async (t) => {
  await t.step("fail_next answers fail_status N times and does nothing", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ fail_next: 2 });
    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const res = await cloud.handler(post("/v1/servers", { name: "x" }, "k"));
      statuses.push(res.status);
      if (res.status === 503) assert.equal((await assertProblem(res, 503)).code, "injected_failure");
      else await res.body?.cancel();
    }
    assert.deepEqual(statuses, [503, 503, 201]);
    assert.equal(cloud.created().length, 1);
    assert.equal(cloud.requests().by_key.k, 3);
  });

  await t.step("fail_status picks the failure status", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ fail_next: 1, fail_status: 500 });
    const res = await cloud.handler(post("/v1/servers", {}, "k"));
    assert.equal(res.status, 500);
    await res.body?.cancel();
  });

  await t.step("garbage_next answers 200 with a body that is not JSON and does nothing", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ garbage_next: 1 });
    const res = await cloud.handler(post("/v1/servers", {}, "k"));
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.throws(() => JSON.parse(text));
    assert.deepEqual(cloud.created(), []);
  });

  await t.step("hang_next never answers until the caller aborts, and creates nothing", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ hang_next: 1 });
    await assert.rejects(
      cloud.handler(post("/v1/servers", {}, "k", AbortSignal.timeout(30))),
      (err: unknown) => err instanceof DOMException && err.name === "TimeoutError",
    );
    assert.deepEqual(cloud.created(), []);
    const next = await cloud.handler(post("/v1/servers", {}, "k"));
    assert.equal(next.status, 201);
    await next.body?.cancel();
  });

  await t.step("releaseHung ends requests held by hang_next", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ hang_next: 1 });
    const pending = cloud.handler(post("/v1/servers", {}, "k"));
    cloud.releaseHung();
    await assert.rejects(pending, (err: unknown) => err instanceof DOMException && err.name === "AbortError");
  });

  await t.step(
    "drop_after_act_next creates the resource but the body cannot be read; a retry replays",
    async () => {
      const cloud = await MockCloud.open();
      cloud.setFaults({ drop_after_act_next: 1 });
      const dropped = await cloud.handler(post("/v1/servers", { name: "x" }, "k"));
      assert.equal(dropped.status, 201);
      await assert.rejects(dropped.text(), /connection dropped/);
      assert.equal(cloud.created().length, 1);

      const retry = await cloud.handler(post("/v1/servers", { name: "x" }, "k"));
      assert.equal(retry.status, 200);
      assert.equal(retry.headers.get("Idempotent-Replayed"), "true");
      assert.equal((await retry.json()).id, "i-0000001");
    },
  );

  await t.step("delay_ms waits before answering, and gives up when the caller aborts", async () => {
    const cloud = await MockCloud.open();
    cloud.setFaults({ delay_ms: 40 });
    const started_ms = performance.now();
    const res = await cloud.handler(post("/v1/servers", {}, "k"));
    assert.ok(performance.now() - started_ms >= 35);
    await res.body?.cancel();

    cloud.setFaults({ delay_ms: 10_000 });
    await assert.rejects(cloud.handler(post("/v1/servers", {}, "k2", AbortSignal.timeout(20))));
    assert.equal(cloud.created().length, 1);
  });

  await t.step(
    "a spec with a path only affects that endpoint, and specs for several paths coexist",
    async () => {
      const cloud = await MockCloud.open();
      cloud.setFaults({ path: "/v1/servers", fail_next: 1 });
      cloud.setFaults({ path: "/v1/databases", garbage_next: 1 });
      const dns = await cloud.handler(post("/v1/dns_records", {}, "d"));
      assert.equal(dns.status, 201);
      await dns.body?.cancel();
      const server = await cloud.handler(post("/v1/servers", {}, "s"));
      assert.equal(server.status, 503);
      await server.body?.cancel();
      const database = await cloud.handler(post("/v1/databases", {}, "db"));
      assert.equal(await database.text(), "<html>oops");
      assert.deepEqual(cloud.faults(), [
        { path: "/v1/servers", fail_next: 0 },
        { path: "/v1/databases", garbage_next: 0 },
      ]);
    },
  );

  await t.step("the /_faults endpoint sets, shows, validates and clears faults", async () => {
    const cloud = await MockCloud.open();
    const set = await cloud.handler(post("/_faults", { fail_next: 1, fail_status: 429 }));
    assert.deepEqual(await set.json(), [{ fail_next: 1, fail_status: 429 }]);
    assert.deepEqual(await (await cloud.handler(get("/_faults"))).json(), [{
      fail_next: 1,
      fail_status: 429,
    }]);
    for (const bad of [{ fail_next: -1 }, { fail_next: 1.5 }, { path: "servers" }, { explode: 1 }, "nope"]) {
      const res = await cloud.handler(post("/_faults", bad));
      assert.equal(res.status, 400, JSON.stringify(bad));
      await res.body?.cancel();
    }
    const cleared = await cloud.handler(new Request("http://mock/_faults", { method: "DELETE" }));
    await cleared.body?.cancel();
    assert.deepEqual(cloud.faults(), []);
    const res = await cloud.handler(post("/v1/servers", {}, "k"));
    assert.equal(res.status, 201);
    await res.body?.cancel();
  });
});

Deno.test("a quoted key (the draft's form) and the bare key are the same key: one resource", async () => {
  const cloud = await MockCloud.open();
  const payload = { name: "srv-1", spec: "small" };
  const quoted = await cloud.handler(post("/v1/servers", payload, '"run1:0"'));
  assert.equal(quoted.status, 201);
  const text = await quoted.text();
  const bare = await cloud.handler(post("/v1/servers", payload, "run1:0"));
  assert.equal(bare.status, 200);
  assert.equal(bare.headers.get("Idempotent-Replayed"), "true");
  assert.equal(await bare.text(), text);
  assert.deepEqual(cloud.created().map((r) => r.key), ["run1:0"]);
  assert.deepEqual(cloud.requests().by_key, { "run1:0": 2 });
  const escaped = await cloud.handler(post("/v1/servers", payload, '"a\\"b"'));
  assert.equal(escaped.status, 201);
  await escaped.body?.cancel();
  assert.equal(cloud.created()[1].key, 'a"b');
});

Deno.test("a malformed or empty Idempotency-Key is a 400 problem and creates nothing", async (t) => {
  const cloud = await MockCloud.open();
  for (const key of ['"unterminated', 'a"b', '""', "   ", '"a"b"']) {
    await t.step(JSON.stringify(key), async () => {
      const body = await assertProblem(await cloud.handler(post("/v1/servers", { name: "x" }, key)), 400);
      assert.match(String(body.code), /idempotency_key/);
    });
  }
  assert.deepEqual(cloud.created(), []);
});

Deno.test("a second request with a key still in progress gets 409 with Retry-After, and creates nothing", async () => {
  const cloud = await MockCloud.open();
  cloud.setFaults({ delay_ms: 50 });
  const payload = { name: "srv-1", spec: "small" };
  const first = cloud.handler(post("/v1/servers", payload, '"run1:0"'));
  // Another body under the same key is refused as in progress too: the first may not have stored it yet.
  for (const body of [payload, { name: "other" }]) {
    const second = await cloud.handler(post("/v1/servers", body, "run1:0"));
    const problem = await assertProblem(second, 409);
    assert.equal(problem.code, "idempotency_key_in_progress");
    assert.equal(second.headers.get("Retry-After"), "1");
  }
  // Another key is not held up.
  const other = cloud.handler(post("/v1/servers", payload, "run1:1"));
  assert.equal((await first).status, 201);
  assert.equal((await other).status, 201);
  const again = await cloud.handler(post("/v1/servers", payload, "run1:0"));
  assert.equal(again.status, 200, "once the first is done, the key replays");
  await again.body?.cancel();
  assert.deepEqual(cloud.created().map((r) => r.key), ["run1:0", "run1:1"]);
  assert.equal(cloud.requests().by_key["run1:0"], 4);
});

Deno.test("a key held by a request that was aborted is released", async () => {
  const cloud = await MockCloud.open();
  cloud.setFaults({ hang_next: 1 });
  await assert.rejects(cloud.handler(post("/v1/servers", {}, "k", AbortSignal.timeout(20))));
  const next = await cloud.handler(post("/v1/servers", {}, "k"));
  assert.equal(next.status, 201);
  await next.body?.cancel();
});

Deno.test("fail_next with retry_after_s sends Retry-After with the problem", async () => {
  const cloud = await MockCloud.open();
  cloud.setFaults({ fail_next: 1, fail_status: 429, retry_after_s: 7 });
  const res = await cloud.handler(post("/v1/servers", {}, "k"));
  assert.equal(res.headers.get("Retry-After"), "7");
  assert.equal((await assertProblem(res, 429)).code, "injected_failure");
});

Deno.test("removing the state directory under a running cloud does not break it: the file is made again", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const statePath = join(dir, "state", "cloud.json");
    await Deno.mkdir(join(dir, "state"));
    const cloud = await MockCloud.open({ statePath });
    const first = await cloud.handler(post("/v1/servers", { name: "a" }, "k1"));
    await first.body?.cancel();
    await Deno.remove(join(dir, "state"), { recursive: true });
    const second = await cloud.handler(post("/v1/servers", { name: "b" }, "k2"));
    assert.equal(second.status, 201);
    await second.body?.cancel();
    const reopened = await MockCloud.open({ statePath });
    assert.deepEqual(reopened.created().map((r) => r.key), ["k1", "k2"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("charges take no key: each request charges again, and a lookup by reference finds them", async () => {
  const cloud = await MockCloud.open({ now: FIXED_NOW });
  const first = await cloud.handler(post("/v1/charges", { amount_cents: 1299, reference: "run1:0" }));
  assert.equal(first.status, 201);
  assert.deepEqual(await first.json(), {
    id: "ch-0000001",
    kind: "charge",
    amount_cents: 1299,
    reference: "run1:0",
  });
  const found = await cloud.handler(get("/v1/charges?reference=run1%3A0"));
  assert.deepEqual(await found.json(), {
    data: [{
      id: "ch-0000001",
      amount_cents: 1299,
      reference: "run1:0",
      created_at: FIXED_NOW().toISOString(),
    }],
  });
  // A re-send is a second charge: nothing here recognises it.
  const again = await cloud.handler(
    post("/v1/charges", { amount_cents: 1299, reference: "run1:0" }, "run1:0"),
  );
  assert.equal(again.status, 201);
  await again.body?.cancel();
  assert.deepEqual(cloud.charges("run1:0").map((c) => c.id), ["ch-0000001", "ch-0000002"]);
  assert.deepEqual(cloud.charges("other"), []);
  assert.deepEqual(await (await cloud.handler(get("/v1/charges?reference=other"))).json(), { data: [] });
  assert.equal(cloud.requests().by_path["/v1/charges"], 2);
  await assertProblem(await cloud.handler(get("/v1/charges")), 400);
  await assertProblem(await cloud.handler(post("/v1/charges", { amount_cents: 0 })), 400);
  await assertProblem(await cloud.handler(post("/v1/charges", { amount_cents: 5, reference: 7 })), 400);
  assert.equal(cloud.charges("run1:0").length, 2, "refused requests charge nothing");
});

Deno.test("hang_after_act_next does the work, then never answers until the caller aborts", async () => {
  const cloud = await MockCloud.open();
  cloud.setFaults({ path: "/v1/charges", hang_after_act_next: 1 });
  await assert.rejects(
    cloud.handler(
      post("/v1/charges", { amount_cents: 5, reference: "k" }, undefined, AbortSignal.timeout(30)),
    ),
    (err: unknown) => err instanceof DOMException && err.name === "TimeoutError",
  );
  assert.equal(cloud.charges("k").length, 1, "charged, though the caller never heard");
  cloud.setFaults({ hang_after_act_next: 1 });
  const pending = cloud.handler(post("/v1/servers", { name: "a" }, "s"));
  // Let the request reach its hang (the resource exists) before releasing it.
  const deadline = Date.now() + 10_000;
  while (cloud.created("s").length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1));
  cloud.releaseHung();
  await assert.rejects(pending, (err: unknown) => err instanceof DOMException && err.name === "AbortError");
  assert.equal(cloud.created("s").length, 1);
});

// --- Jobs: work that finishes later (the HTTP 202 pattern) ---

Deno.test("over real HTTP, a job answers 202 with when to look again until its time has passed, then 200 done", async () => {
  const clock = new ManualClock(Date.UTC(2030, 0, 2, 3, 4, 5));
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const mocks = await serveMocks({ cloud });
  try {
    const start = (key: string, body: unknown) =>
      fetch(`${mocks.cloudUrl}/v1/jobs`, {
        method: "POST",
        headers: { "Idempotency-Key": `"${key}"` },
        body: JSON.stringify(body),
      });
    const body = { kind: "backup", duration_ms: 30_000 };
    const polls: [number, string | null, unknown][] = [];
    const poll = async () => {
      const res = await start("run1:0", body);
      polls.push([res.status, res.headers.get("Retry-After"), await res.json()]);
      return res;
    };
    const first = await poll();
    assert.equal(first.headers.get("Location"), "/v1/jobs/job-0000001");
    assert.equal(first.headers.get("Idempotent-Replayed"), "false");
    await clock.advance(10_500);
    const second = await poll();
    assert.equal(second.headers.get("Idempotent-Replayed"), "true");
    await clock.advance(19_499);
    await poll();
    assert.equal(cloud.jobs()[0].status, "running");
    await clock.advance(1);
    await poll();
    await clock.advance(60_000);
    await poll();
    const done = {
      job_id: "job-0000001",
      status: "done",
      result: { kind: "backup", finished_at: "2030-01-02T03:04:35.000Z" },
    };
    assert.deepEqual(polls, [
      [202, "30", { job_id: "job-0000001", status: "running", retry_after_ms: 30_000 }],
      [202, "20", { job_id: "job-0000001", status: "running", retry_after_ms: 19_500 }],
      [202, "1", { job_id: "job-0000001", status: "running", retry_after_ms: 1 }],
      [200, null, done],
      [200, null, done],
    ]);
    const looked_up = await fetch(`${mocks.cloudUrl}/v1/jobs/job-0000001`);
    assert.equal(looked_up.status, 200);
    assert.deepEqual(await looked_up.json(), done);
    const missing = await fetch(`${mocks.cloudUrl}/v1/jobs/job-9999999`);
    assert.equal(missing.status, 404);
    await missing.body?.cancel();

    assert.deepEqual(await (await fetch(`${mocks.cloudUrl}/jobs`)).json(), [{
      key: "run1:0",
      id: "job-0000001",
      payload: body,
      created_at: "2030-01-02T03:04:05.000Z",
      ends_at: "2030-01-02T03:04:35.000Z",
      status: "done",
    }]);
    assert.deepEqual(cloud.created().map((r) => [r.key, r.kind, r.id]), [["run1:0", "job", "job-0000001"]]);
    const requests = cloud.requests();
    assert.equal(requests.by_path["/v1/jobs"], 5, "every poll is a request");
    assert.equal(requests.by_key["run1:0"], 5);
  } finally {
    await mocks.close();
  }
});

Deno.test("a key never starts a second job, however often it is sent; each key starts its own", async () => {
  const clock = new ManualClock();
  const cloud = await MockCloud.open({ now: () => clock.now(), jobDurationMs: 5_000 });
  for (let i = 0; i < 3; i++) {
    for (const key of ["a:0", "a:1"]) {
      const res = await cloud.handler(post("/v1/jobs", { kind: "render" }, key));
      assert.equal(res.status, 202);
      // No duration_ms in the body: the cloud's jobDurationMs.
      assert.equal((await res.json()).retry_after_ms, 5_000 - i * 1_000);
    }
    await clock.advance(1_000);
  }
  assert.deepEqual(cloud.jobs().map((j) => [j.key, j.id, j.status]), [
    ["a:0", "job-0000001", "running"],
    ["a:1", "job-0000002", "running"],
  ]);
  assert.deepEqual(cloud.jobs("a:1").map((j) => j.id), ["job-0000002"]);
  assert.equal(cloud.requests().by_path["/v1/jobs"], 6);
  await clock.advance(2_000);
  const res = await cloud.handler(post("/v1/jobs", { kind: "render" }, "a:0"));
  assert.equal(res.status, 200);
  assert.equal((await res.json()).status, "done");
  assert.equal(cloud.jobs().length, 2);
});

Deno.test("a job asked to fail answers 202 while it runs, then 200 with status failed and an error", async () => {
  const clock = new ManualClock();
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const body = { kind: "migrate", duration_ms: 1_000, fail: true };
  const running = await cloud.handler(post("/v1/jobs", body, "f:0"));
  assert.equal(running.status, 202);
  assert.equal((await running.json()).status, "running");
  await clock.advance(1_000);
  const failed = await cloud.handler(post("/v1/jobs", body, "f:0"));
  assert.equal(failed.status, 200);
  assert.deepEqual(await failed.json(), {
    job_id: "job-0000001",
    status: "failed",
    error: 'job job-0000001 (migrate) failed, as its request asked with "fail": true',
  });
  assert.equal(cloud.jobs()[0].status, "failed");

  // A job of no duration has ended at its first answer.
  const at_once = await cloud.handler(post("/v1/jobs", { duration_ms: 0 }, "f:1"));
  assert.equal(at_once.status, 200);
  assert.deepEqual((await at_once.json()).result, { kind: "job", finished_at: clock.now().toISOString() });
});

Deno.test("a job key sent again with another body, or used before for a resource, is refused with 422", async (t) => {
  const clock = new ManualClock();
  const cloud = await MockCloud.open({ now: () => clock.now() });
  const started = await cloud.handler(post("/v1/jobs", { kind: "backup", duration_ms: 1_000 }, "k:0"));
  await started.body?.cancel();
  const server = await cloud.handler(post("/v1/servers", { name: "srv" }, "k:1"));
  await server.body?.cancel();
  const cases = [
    { name: "another duration", path: "/v1/jobs", body: { kind: "backup", duration_ms: 2_000 }, key: "k:0" },
    { name: "another kind", path: "/v1/jobs", body: { kind: "restore", duration_ms: 1_000 }, key: "k:0" },
    { name: "a server's key", path: "/v1/jobs", body: { name: "srv" }, key: "k:1" },
    {
      name: "a job's key for a server",
      path: "/v1/servers",
      body: { kind: "backup", duration_ms: 1_000 },
      key: "k:0",
    },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const body = await assertProblem(await cloud.handler(post(c.path, c.body, c.key)), 422);
      assert.equal(body.code, "idempotency_key_reused");
    });
  }
  await t.step("a malformed body is a 400 that starts nothing", async () => {
    for (
      const [bad, detail] of [
        [{ duration_ms: -1 }, /^duration_ms must be a non-negative integer of milliseconds, got -1$/],
        [{ duration_ms: 1.5 }, /^duration_ms must be a non-negative integer/],
        [{ kind: "" }, /^kind must be a non-empty string, got ""$/],
        [{ fail: "yes" }, /^fail must be a boolean, got "yes"$/],
        ["[]", /^the body must be a JSON object$/],
      ] as const
    ) {
      const body = await assertProblem(await cloud.handler(post("/v1/jobs", bad, "k:2")), 400);
      assert.equal(body.code, "bad_json");
      assert.match(body.detail as string, detail);
    }
    await assertProblem(await cloud.handler(post("/v1/jobs", {})), 400); // no key
  });
  assert.deepEqual(cloud.jobs().map((j) => j.key), ["k:0"]);
  assert.equal(cloud.created().length, 2);
});

Deno.test("a job survives reopening the cloud, and a lost answer's re-send finds the job it started", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const clock = new ManualClock();
    const statePath = join(dir, "cloud.json");
    const before = await MockCloud.open({ statePath, now: () => clock.now() });
    before.setFaults({ path: "/v1/jobs", drop_after_act_next: 1 });
    const lost = await before.handler(post("/v1/jobs", { duration_ms: 3_000 }, "p:0"));
    assert.equal(lost.status, 202);
    await assert.rejects(lost.text());
    await clock.advance(1_000);
    const after = await MockCloud.open({ statePath, now: () => clock.now() });
    const again = await after.handler(post("/v1/jobs", { duration_ms: 3_000 }, "p:0"));
    assert.equal(again.status, 202);
    assert.deepEqual(await again.json(), { job_id: "job-0000001", status: "running", retry_after_ms: 2_000 });
    await clock.advance(2_000);
    assert.deepEqual(after.jobs().map((j) => [j.id, j.status]), [["job-0000001", "done"]]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a job duration option that is not a non-negative integer is refused at open", async () => {
  await assert.rejects(
    MockCloud.open({ jobDurationMs: -5 }),
    new TypeError(
      "Cannot open the mock cloud as 'jobDurationMs' must be a non-negative integer: current value is -5",
    ),
  );
});
