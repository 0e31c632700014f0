import assert from "node:assert/strict";
import { join } from "node:path";
import { DONE_MESSAGE, MockModel, type ToolCall } from "./model.ts";

const FIXED_NOW = () => new Date("2030-01-02T03:04:05Z");
const TOOLS = ["create_server", "create_database", "create_dns_record"].map((name) => ({
  type: "function",
  function: { name, parameters: { type: "object" } },
}));

type Message = Record<string, unknown>;

function chat(messages: Message[], user?: string, signal?: AbortSignal): Request {
  return new Request("http://mock/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-test-secret" },
    body: JSON.stringify({ model: "mock-1", messages, tools: TOOLS, user }),
    signal,
  });
}

const START: Message[] = [
  { role: "system", content: "You provision infrastructure." },
  { role: "user", content: "Provision a server, a database and a DNS record." },
];

// deno-lint-ignore no-explicit-any
type Completion = any;

async function ask(model: MockModel, messages: Message[], user = "run1"): Promise<Completion> {
  const res = await model.handler(chat(messages, user));
  assert.equal(res.status, 200);
  return await res.json();
}

/** Appends the assistant turn and one tool result per call, as an agent loop would. */
function withResults(messages: Message[], answer: Completion): Message[] {
  const message = answer.choices[0].message;
  const results = message.tool_calls.map((call: ToolCall, i: number) => ({
    role: "tool",
    tool_call_id: call.id,
    content: JSON.stringify({ id: `res-${messages.length}-${i}` }),
  }));
  return [...messages, message, ...results];
}

function firstCall(answer: Completion): { name: string; args: unknown } {
  const call = answer.choices[0].message.tool_calls[0];
  return { name: call.function.name, args: JSON.parse(call.function.arguments) };
}

Deno.test("the script provisions a server, a database and a DNS record, then says it is done", async (t) => {
  const model = await MockModel.open({ now: FIXED_NOW });
  let messages = START;
  const expected = [
    { name: "create_server", args: { name: "srv-1", spec: "small" } },
    { name: "create_database", args: { name: "db-2", engine: "postgres", size_gb: 10 } },
    {
      name: "create_dns_record",
      args: { hostname: "app-3.example.test", record_type: "CNAME", target: "srv-1" },
    },
  ];
  for (const [step, want] of expected.entries()) {
    await t.step(`step ${step} calls ${want.name}`, async () => {
      const answer = await ask(model, messages);
      assert.equal(answer.id, `chatcmpl-run1-${step + 1}`);
      assert.equal(answer.object, "chat.completion");
      assert.equal(answer.created, Date.UTC(2030, 0, 2, 3, 4, 5) / 1000);
      assert.equal(answer.model, "mock-1");
      assert.equal(answer.choices[0].finish_reason, "tool_calls");
      assert.equal(answer.choices[0].message.content, null);
      assert.equal(answer.choices[0].message.tool_calls.length, 1);
      assert.equal(answer.choices[0].message.tool_calls[0].id, `call_${step + 1}`);
      assert.deepEqual(firstCall(answer), want);
      const usage = answer.usage;
      assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
      messages = withResults(messages, answer);
    });
  }
  await t.step("step 3 stops with a summary", async () => {
    const answer = await ask(model, messages);
    assert.deepEqual(answer.choices, [{
      index: 0,
      message: { role: "assistant", content: DONE_MESSAGE },
      finish_reason: "stop",
    }]);
  });
  assert.equal(model.calls("run1"), 4);
});

Deno.test("a re-asked step carries a higher number and the DNS target follows the first server call", async () => {
  const model = await MockModel.open();
  const lost = await ask(model, START); // as if the runtime crashed before recording this answer
  assert.deepEqual(firstCall(lost).args, { name: "srv-1", spec: "small" });
  const again = await ask(model, START);
  assert.deepEqual(firstCall(again).args, { name: "srv-2", spec: "small" });

  let messages = withResults(START, again);
  messages = withResults(messages, await ask(model, messages));
  const dns = firstCall(await ask(model, messages));
  assert.deepEqual(dns.args, { hostname: "app-4.example.test", record_type: "CNAME", target: "srv-2" });
});

Deno.test("calls are counted per run, with anonymous for requests without a user", async () => {
  const model = await MockModel.open();
  for (const user of ["run1", "run2", "run1", undefined]) {
    const res = await model.handler(chat(START, user));
    await res.body?.cancel();
  }
  const third = await ask(model, START, "run1");
  assert.deepEqual(firstCall(third).args, { name: "srv-3", spec: "small" });
  assert.equal(model.calls("run1"), 3);
  assert.equal(model.calls("run2"), 1);
  assert.equal(model.calls("nobody"), 0);
  assert.equal(model.calls(), 5);
  const counts = await (await model.handler(new Request("http://mock/calls"))).json();
  assert.deepEqual(counts, { total: 5, by_run: { run1: 3, run2: 1, anonymous: 1 } });
});

Deno.test("identical inputs and state give byte-identical answers that never echo the API key", async () => {
  const texts = [];
  for (let i = 0; i < 2; i++) {
    const model = await MockModel.open({ now: FIXED_NOW });
    texts.push(await (await model.handler(chat(START, "run1"))).text());
  }
  assert.equal(texts[0], texts[1]);
  assert.ok(!texts[0].includes("sk-test-secret"));
});

Deno.test("a request without a valid body is refused with 400 but still counted", async (t) => {
  const model = await MockModel.open();
  const cases = [
    { name: "no body", body: undefined },
    { name: "not JSON", body: "{oops" },
    { name: "no messages", body: JSON.stringify({ model: "m", user: "run9" }) },
    { name: "messages not an array", body: JSON.stringify({ model: "m", messages: "hi" }) },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const res = await model.handler(
        new Request("http://mock/v1/chat/completions", { method: "POST", body: c.body }),
      );
      assert.equal(res.status, 400);
      assert.equal((await res.json()).error, "invalid_request");
    });
  }
  assert.deepEqual(model.callCounts(), { total: 4, by_run: { anonymous: 3, run9: 1 } });
});

Deno.test("the call counter persisted to a file survives reopening the model", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const statePath = join(dir, "model.json");
    const before = await MockModel.open({ statePath });
    await ask(before, START);
    await ask(before, START);
    const after = await MockModel.open({ statePath });
    assert.equal(after.calls("run1"), 2);
    assert.deepEqual(firstCall(await ask(after, START)).args, { name: "srv-3", spec: "small" });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("fault knobs make the next calls misbehave, and every call still counts", async (t) => {
  await t.step("fail_next answers fail_status, then the script resumes", async () => {
    const model = await MockModel.open();
    model.setFaults({ fail_next: 1, fail_status: 429 });
    const failed = await model.handler(chat(START, "run1"));
    assert.equal(failed.status, 429);
    assert.equal((await failed.json()).error, "injected_failure");
    assert.deepEqual(firstCall(await ask(model, START)).args, { name: "srv-2", spec: "small" });
  });

  await t.step("fail_status defaults to 503", async () => {
    const model = await MockModel.open();
    model.setFaults({ fail_next: 1 });
    const failed = await model.handler(chat(START));
    assert.equal(failed.status, 503);
    await failed.body?.cancel();
  });

  await t.step("hang_next never answers until the caller aborts", async () => {
    const model = await MockModel.open();
    model.setFaults({ hang_next: 1 });
    await assert.rejects(model.handler(chat(START, "run1", AbortSignal.timeout(30))));
    assert.equal(model.calls("run1"), 1);
  });

  await t.step("delay_ms waits before answering", async () => {
    const model = await MockModel.open();
    model.setFaults({ delay_ms: 40 });
    const started_ms = performance.now();
    await ask(model, START);
    assert.ok(performance.now() - started_ms >= 35);
  });

  const step_one = withResults(START, await ask(await MockModel.open(), START));
  const modes = [
    {
      mode: "garbage",
      check: async (res: Response) => {
        assert.equal(res.status, 200);
        const text = await res.text();
        assert.throws(() => JSON.parse(text));
      },
    },
    {
      mode: "no_choices",
      check: async (res: Response) => assert.deepEqual((await res.json()).choices, []),
    },
    {
      mode: "unknown_tool",
      check: async (res: Response) =>
        assert.deepEqual(firstCall(await res.json()), { name: "launch_rocket", args: {} }),
    },
    {
      mode: "bad_args",
      check: async (res: Response) =>
        assert.deepEqual(firstCall(await res.json()), { name: "create_database", args: { name: 42 } }),
    },
    {
      mode: "bad_json_args",
      check: async (res: Response) => {
        const call = (await res.json()).choices[0].message.tool_calls[0];
        assert.equal(call.function.name, "create_database");
        assert.equal(call.function.arguments, "{not json");
      },
    },
    {
      mode: "multi_tool",
      check: async (res: Response) => {
        const calls = (await res.json()).choices[0].message.tool_calls;
        assert.deepEqual(calls.map((c: ToolCall) => [c.id, c.function.name]), [
          ["call_1", "create_database"],
          ["call_1_2", "create_dns_record"],
        ]);
      },
    },
  ] as const;
  for (const { mode, check } of modes) {
    await t.step(`mode ${mode} breaks mode_next answers, then the script resumes`, async () => {
      const model = await MockModel.open();
      model.setFaults({ mode, mode_next: 1 });
      await check(await model.handler(chat(step_one, "run1")));
      assert.deepEqual(firstCall(await ask(model, step_one)).args, {
        name: "db-2",
        engine: "postgres",
        size_gb: 10,
      });
      assert.equal(model.calls("run1"), 2);
    });
  }

  await t.step("the /_faults endpoint sets, shows, validates and clears faults", async () => {
    const model = await MockModel.open();
    const post = (body: unknown) =>
      model.handler(new Request("http://mock/_faults", { method: "POST", body: JSON.stringify(body) }));
    assert.deepEqual(await (await post({ mode: "garbage" })).json(), { mode: "garbage", mode_next: 1 });
    assert.deepEqual(await (await model.handler(new Request("http://mock/_faults"))).json(), {
      mode: "garbage",
      mode_next: 1,
    });
    for (const bad of [{ mode: "explode" }, { hang_next: "2" }, { path: "/v1/chat/completions" }]) {
      const res = await post(bad);
      assert.equal(res.status, 400, JSON.stringify(bad));
      await res.body?.cancel();
    }
    const cleared = await model.handler(new Request("http://mock/_faults", { method: "DELETE" }));
    await cleared.body?.cancel();
    assert.deepEqual(model.faults(), {});
    await ask(model, START);
  });
});
