import assert from "node:assert/strict";
import { defineAgent } from "../runtime/agent/agent.ts";
import { RUN_STATUSES } from "../runtime/store/store.ts";
import { createUiApp, isLoopback, serveUi } from "./server.ts";
import { buildTimeline } from "./timeline.ts";
import { claim, writeDecision } from "../harness/direct_writes.ts";
import { ManualClock } from "../runtime/base/clock.ts";
import { Logger } from "../runtime/base/log.ts";
import { ScheduleTicker } from "../runtime/schedules/ticker.ts";
import { testClient } from "../tests/_pglite.ts";

const agent = defineAgent({
  name: "idle",
  instructions: "-",
  tools: [],
  model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "ok" }) },
});

const post = (body: unknown) => ({
  method: "POST",
  headers: { "content-type": "application/json", host: "127.0.0.1" },
  body: JSON.stringify(body),
});
const local = { headers: { host: "127.0.0.1:8787" } };

Deno.test("the page's API lists runs with counts, and refuses what it must", async (t) => {
  const client = await testClient();
  try {
    await client.start(agent, { runId: "a-1", input: "x" });
    await client.start(agent, { runId: "a-2", input: "y" });
    await client.operators.cancel("a-2");
    const app = await createUiApp({ client });
    await t.step("lists runs newest first with counts per status and the agents", async () => {
      const res = await app.request("/api/runs", local);
      const body = await res.json();
      assert.equal(res.status, 200);
      assert.deepEqual(body.runs.map((r: { runId: string }) => r.runId), ["a-2", "a-1"]);
      assert.deepEqual(body.counts, { pending: 1, cancelled: 1 });
      assert.deepEqual(body.agents, ["idle"]);
      // The status filter's choices come from the one list, waiting among them.
      assert.deepEqual(body.statuses, [...RUN_STATUSES]);
      const filtered = await (await app.request("/api/runs?status=pending&search=a-", local)).json();
      assert.deepEqual(filtered.runs.map((r: { runId: string }) => r.runId), ["a-1"]);
    });
    await t.step("refuses a bad status, an unknown run, and a foreign Host header", async () => {
      assert.equal((await (await app.request("/api/runs?status=nope", local)).json()).code, "UI_BAD_REQUEST");
      const missing = await app.request("/api/runs/zzz", local);
      assert.equal(missing.status, 404);
      assert.equal((await missing.json()).code, "RUN_NOT_FOUND");
      const evil = await app.request("/api/runs", { headers: { host: "evil.example:8787" } });
      assert.equal(evil.status, 403);
      assert.equal((await evil.json()).code, "UI_HOST_REFUSED");
    });
    await t.step("actions take JSON, go through the client, and report its refusals", async () => {
      const form = await app.request("/api/runs/a-1/cancel", {
        method: "POST",
        headers: { host: "127.0.0.1", "content-type": "application/x-www-form-urlencoded" },
        body: "x=1",
      });
      assert.equal(form.status, 415);
      await form.body?.cancel();
      assert.equal((await app.request("/api/runs/a-1/cancel", post({}))).status, 200);
      const again = await app.request("/api/runs/a-1/cancel", post({}));
      assert.equal(again.status, 409);
      assert.equal((await again.json()).code, "RUN_CLOSED");
      assert.equal((await app.request("/api/runs/a-1/reopen", post({}))).status, 200);
      const bad = await app.request("/api/calls/a-1:0/resolve", post({ action: "maybe" }));
      assert.equal((await bad.json()).code, "UI_BAD_REQUEST");
      const none = await app.request("/api/calls/a-1:0/resolve", post({ action: "retry" }));
      assert.equal((await none.json()).code, "CALL_NOT_FOUND");
    });
    await t.step("read-only refuses every action", async () => {
      const ro = await createUiApp({ client, readOnly: true });
      const res = await ro.request("/api/runs/a-1/cancel", post({}));
      assert.equal(res.status, 403);
      assert.equal((await res.json()).code, "UI_READ_ONLY");
    });
    await t.step(
      "with a token, every request needs it; given in the address it becomes a cookie",
      async () => {
        const app2 = await createUiApp({ client, token: "tok" });
        assert.equal((await app2.request("/api/runs")).status, 401);
        assert.equal(
          (await app2.request("/api/runs", { headers: { authorization: "Bearer tok" } })).status,
          200,
        );
        const page = await app2.request("/?token=tok");
        assert.equal(page.status, 200);
        assert.match(
          page.headers.get("set-cookie") ?? "",
          /agent_runtime_token=tok; Path=\/; HttpOnly; SameSite=Strict/,
        );
        await page.body?.cancel();
        const withCookie = await app2.request("/api/runs", {
          headers: { cookie: "agent_runtime_token=tok" },
        });
        assert.equal(withCookie.status, 200);
        await withCookie.body?.cancel();
      },
    );
    await t.step("serving beyond loopback without a token is refused before binding", async () => {
      await assert.rejects(serveUi({ client, host: "0.0.0.0", port: 0 }), { code: "UI_TOKEN_REQUIRED" });
      assert.ok(isLoopback("127.0.0.2") && isLoopback("localhost") && isLoopback("[::1]"));
      assert.ok(!isLoopback("0.0.0.0") && !isLoopback("10.0.0.1"));
    });
    await t.step(
      "a run's page takes a range of steps and gives a clipped value whole; it refuses bad ones",
      async () => {
        const body = await (await app.request("/api/runs/a-1?limit=5", local)).json();
        assert.deepEqual(body.range, { minSeq: null, maxSeq: null, from: 0, to: -1 });
        assert.deepEqual(body.run.input, { value: "x" });
        const both = await (await app.request("/api/runs/a-1?from=1&before=3", local)).json();
        assert.equal(both.code, "UI_BAD_REQUEST");
        const neg = await (await app.request("/api/runs/a-1?from=-1", local)).json();
        assert.match(neg.message, /^from must be an integer from 0 to 1000000000: current value is "-1"/);
        assert.deepEqual(await (await app.request("/api/runs/a-1/value?field=input", local)).json(), {
          value: "x",
        });
        const field = await (await app.request("/api/runs/a-1/value?field=runs.secret", local)).json();
        assert.match(field.message, /^field must be one of input, output, error, decision.args/);
        const none = await app.request("/api/runs/a-1/value?field=call.args&seq=0", local);
        assert.equal(none.status, 404);
        const script = await app.request("/static/display.js", local);
        assert.match(script.headers.get("content-type") ?? "", /^text\/javascript/);
        assert.match(await script.text(), /globalThis\.agentDisplay = /);
      },
    );
    await t.step("a run's timeline has one lane per epoch", async () => {
      const timeline = buildTimeline(
        await client.reads.timeline("a-1", { steps: { last: 50 }, maxChars: 100 }),
      );
      assert.deepEqual(timeline.epochs, []);
      assert.equal(timeline.run.status, "pending");
    });
  } finally {
    await client.close();
  }
});

Deno.test("a call waiting for approval shows on its run's page and is approved or denied from it", async () => {
  const client = await testClient();
  try {
    const { z } = await import("zod");
    const { defineTool } = await import("../runtime/agent/tools.ts");
    const guarded = defineAgent({
      name: "guarded",
      tools: [defineTool({
        name: "pay",
        description: "Pays.",
        args: z.strictObject({ cents: z.number().int() }),
        approval: (args) => args.cents > 100,
        run: () => Promise.resolve({ result: "paid" }),
      })],
      model: {
        describe: "script",
        decide: (req) =>
          Promise.resolve(
            req.seq === 0
              ? { kind: "tool_calls", calls: [{ name: "pay", args: { cents: 500 } }] }
              : { kind: "done", text: "done" },
          ),
      },
    });
    const worker = await client.startWorker([guarded], { pollMs: 20 });
    try {
      for (const id of ["pay-1", "pay-2"]) await client.start(guarded, { runId: id, input: "pay" });
      assert.equal((await client.wait("pay-1", { timeoutMs: 10_000, pollMs: 20 })).status, "waiting");
      assert.equal((await client.wait("pay-2", { timeoutMs: 10_000, pollMs: 20 })).status, "waiting");
      const app = await createUiApp({ client });
      const page = await (await app.request("/api/runs/pay-1", local)).json();
      assert.deepEqual(page.approvals, [{
        key: "pay-1:0",
        seq: 0,
        tool: "pay",
        args: { value: { cents: 500 } },
      }]);
      const ro = await createUiApp({ client, readOnly: true });
      assert.equal((await ro.request("/api/calls/pay-1:0/approve", post({}))).status, 403);
      const approved = await app.request("/api/calls/pay-1:0/approve", post({}));
      assert.deepEqual(await approved.json(), { key: "pay-1:0", status: "approved" });
      const denied = await app.request("/api/calls/pay-2:0/deny", post({ reason: "too much" }));
      assert.deepEqual(await denied.json(), { key: "pay-2:0", status: "denied" });
      assert.equal((await client.wait("pay-1", { timeoutMs: 10_000, pollMs: 20 })).status, "done");
      assert.equal((await client.wait("pay-2", { timeoutMs: 10_000, pollMs: 20 })).status, "done");
      const record = await client.reads.inspect("pay-2");
      assert.match(record.effects[0].error ?? "", /^denied by .*: too much$/);
      const twice = await app.request("/api/calls/pay-1:0/approve", post({}));
      assert.equal((await twice.json()).code, "NOT_PENDING");

      // A cancelled run's call is offered to nobody, and answering it anyway is refused.
      await client.start(guarded, { runId: "pay-3", input: "pay" });
      assert.equal((await client.wait("pay-3", { timeoutMs: 10_000, pollMs: 20 })).status, "waiting");
      await client.operators.cancel("pay-3");
      const closed = await (await app.request("/api/runs/pay-3", local)).json();
      assert.equal(closed.run.status, "cancelled");
      assert.deepEqual(closed.approvals, [], "no approve or deny on a closed run");
      const refused = await app.request("/api/calls/pay-3:0/approve", post({}));
      assert.equal(refused.status, 409);
      assert.equal((await refused.json()).code, "RUN_CLOSED");
      assert.equal((await client.operators.approvals("pay-3"))[0].status, "pending", "the request is kept");
    } finally {
      await worker.stop();
    }
  } finally {
    await client.close();
  }
});

Deno.test("a step riding out an outage says so on its run's page: the model's or the remote's failures, since when, the last error", async () => {
  const client = await testClient();
  try {
    const { store } = client;
    const now = client.clock.now();
    const later = (s: number) => new Date(now.getTime() + s * 1000);
    for (const id of ["out-model", "out-tool"]) {
      await store.leases.createRun({ runId: id, agent: "idle", goal: "g" }, now);
    }
    // The model's server refuses twice.
    const fm = { runId: "out-model", epoch: (await claim(store, "out-model", 0, "w", now))! };
    let asked = await store.writes.journalIntentRow(fm, 0, now);
    asked = await store.writes.journalFailure(
      fm,
      asked,
      { error: "connect ECONNREFUSED <b>", released: 0 },
      now,
    );
    await store.writes.journalFailure(
      fm,
      asked,
      { error: "connect ECONNREFUSED <b>", released: 0 },
      later(1),
    );
    // The tool's remote answers 503 once.
    const ft = { runId: "out-tool", epoch: (await claim(store, "out-tool", 0, "w", now))! };
    await writeDecision(store, ft, 0, { decision: { tool: "lookup", args: {} } }, now);
    const sent = await store.writes.effectIntentRow(
      ft,
      { key: "out-tool:0", seq: 0, tool: "lookup", args: {} },
      now,
    );
    await store.writes.effectFailure(
      ft,
      sent,
      { error: "HTTP 503 from the shop", retryAt: later(30) },
      later(2),
    );
    const app = await createUiApp({ client });
    const gaps = async (id: string) =>
      (await (await app.request(`/api/runs/${id}`, local)).json()).steps[0].gaps.join("\n") as string;
    assert.equal(
      await gaps("out-model"),
      `the model's server failed as in an outage 2x since ${now.toISOString()} (last: connect ECONNREFUSED <b>): ` +
        "asked again after a backoff, until the retry horizon",
    );
    assert.equal(
      await gaps("out-tool"),
      `its remote failed as in an outage 1x since ${
        later(2).toISOString()
      } (last: HTTP 503 from the shop): ` +
        "re-sent under its key after a backoff, until the retry horizon",
    );
  } finally {
    await client.close();
  }
});

Deno.test("a call waiting on its remote shows on its run's page with when it is asked again, and the run when it wakes", async () => {
  const client = await testClient();
  try {
    const { store } = client;
    const now = client.clock.now();
    const later = (s: number) => new Date(now.getTime() + s * 1000);
    await store.leases.createRun({ runId: "job-1", agent: "idle", goal: "g" }, now);
    const f = { runId: "job-1", epoch: (await claim(store, "job-1", 0, "w", now))! };
    await writeDecision(store, f, 0, { decision: { tool: "build", args: {} } }, now);
    const sent = await store.writes.effectIntentRow(
      f,
      { key: "job-1:0", seq: 0, tool: "build", args: {} },
      now,
    );
    const waiting = await store.writes.effectWaiting(f, sent, {
      result: { job: "b-1" },
      checkAt: later(30),
      deadlineAt: later(3600),
    });
    const poll = await store.writes.effectIntentRow(
      f,
      { key: "job-1:0", seq: 0, tool: "build", args: {} },
      later(30),
    );
    await store.writes.effectWaiting(f, poll, {
      result: waiting.result!,
      checkAt: later(60),
      deadlineAt: later(3600),
    });
    assert.equal(await store.writes.waitRun(f, later(60), later(30)), true);
    const app = await createUiApp({ client });
    const page = await (await app.request("/api/runs/job-1", local)).json();
    assert.deepEqual([page.run.status, page.run.wakeAt], ["waiting", later(60).toISOString()]);
    const step = page.steps.find((s: { seq: number }) => s.seq === 0);
    assert.deepEqual(
      [step.call.status, step.call.checkAt, step.call.polls, step.call.waitDeadlineAt, step.call.result],
      ["waiting", later(60).toISOString(), 1, later(3600).toISOString(), { value: { job: "b-1" } }],
    );
    assert.match(
      step.gaps.join("\n"),
      /^waiting on its remote: asked again at .* \(deno task settle job-1:0\)$/m,
    );
    assert.match(
      step.events.find((e: { kind: string }) => e.kind === "tool").summary,
      /^build waiting, asked 1x$/,
    );
  } finally {
    await client.close();
  }
});

Deno.test("the static route serves its own files only: a name an object inherits answers 404", async (t) => {
  const client = await testClient();
  try {
    const app = await createUiApp({ client });
    const own = await app.request("/static/app.js", local);
    assert.equal(own.status, 200);
    assert.equal(own.headers.get("content-type"), "text/javascript; charset=utf-8");
    await own.body?.cancel();
    for (const name of ["constructor", "toString", "valueOf", "hasOwnProperty", "__proto__", "index.html"]) {
      await t.step(name, async () => {
        const res = await app.request(`/static/${name}`, local);
        assert.equal(res.status, 404, `${name}: ${res.headers.get("content-type")}`);
        await res.body?.cancel();
      });
    }
  } finally {
    await client.close();
  }
});

Deno.test("an IPv6 host is bracketed once in the page's address, given with brackets or without", async () => {
  const client = await testClient();
  try {
    for (const host of ["[::1]", "::1"]) {
      const ui = await serveUi({ client, host, port: 0 });
      try {
        assert.equal(ui.url, `http://[::1]:${ui.port}`, host);
        const res = await fetch(`${ui.url}/api/runs`);
        assert.equal(res.status, 200, `${host}: the address printed is the one bound`);
        await res.body?.cancel();
      } finally {
        await ui.close();
      }
    }
  } finally {
    await client.close();
  }
});

Deno.test("the page's API lists the schedules with their next occurrence and last runs", async () => {
  const clock = new ManualClock(Date.UTC(2026, 11, 6, 8, 59, 59));
  const client = await testClient({ clock });
  try {
    await client.schedules.set(agent, {
      name: "nightly",
      cron: "0 9 * * *",
      zone: "Europe/Berlin",
      input: "x",
    });
    await client.schedules.set(agent, { name: "often", every: "1s", overlap: "allow", input: "y" });
    await client.schedules.pause("nightly");
    await clock.advance(1_000);
    const ticker = new ScheduleTicker({
      store: client.store,
      clock,
      log: new Logger({ clock, sink: () => {} }),
      agents: ["idle"],
    });
    assert.deepEqual((await ticker.tick()).started, ["often@20261206T090000Z"]);
    const app = await createUiApp({ client });
    const body = await (await app.request("/api/schedules", local)).json();
    assert.deepEqual(body.schedules, [
      {
        name: "nightly",
        agent: "idle",
        cron: "0 9 * * *",
        every: null,
        zone: "Europe/Berlin",
        overlap: "skip",
        catchUp: "last",
        enabled: false,
        nextAt: null,
        queuedAt: null,
        skipped: 0,
        lastRuns: [],
      },
      {
        name: "often",
        agent: "idle",
        cron: null,
        every: "1s",
        zone: "UTC",
        overlap: "allow",
        catchUp: "last",
        enabled: true,
        nextAt: "2026-12-06T09:00:01.000Z",
        queuedAt: null,
        skipped: 0,
        lastRuns: [{
          runId: "often@20261206T090000Z",
          status: "pending",
          scheduledAt: "2026-12-06T09:00:00.000Z",
        }],
      },
    ]);
    assert.equal(
      (await (await app.request("/api/schedules?lastRuns=0", local)).json()).code,
      "UI_BAD_REQUEST",
    );
  } finally {
    await client.close();
  }
});
