import assert from "node:assert/strict";
import { join } from "node:path";
import { z } from "zod";
import {
  busiestWindow,
  DONE_MESSAGE,
  MockModel,
  NOTHING_TO_DO_MESSAGE,
  SCRIPT_DONE_MESSAGE,
  type ScriptSpec,
  type ScriptStep,
  type ToolCall,
} from "./model.ts";
import { serveMocks } from "./server.ts";

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
      const body = await res.json();
      assert.equal(body.error.code, "invalid_request", "an OpenAI-shaped error");
      assert.equal(body.error.type, "invalid_request_error");
      assert.equal(typeof body.error.message, "string");
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
    assert.equal((await failed.json()).error.code, "injected_failure");
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

// --- Scripts, agent headers and the generic behaviour ---

interface ChatOptions {
  user?: string;
  agent?: string;
  run?: string;
  tools?: unknown[];
}

function chatWith(messages: Message[], opts: ChatOptions = {}): Request {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (opts.agent !== undefined) headers["x-agent-name"] = opts.agent;
  if (opts.run !== undefined) headers["x-agent-run"] = opts.run;
  return new Request("http://mock/v1/chat/completions", {
    method: "POST",
    headers,
    body: JSON.stringify({ model: "mock-1", messages, tools: opts.tools, user: opts.user }),
  });
}

async function askWith(model: MockModel, messages: Message[], opts: ChatOptions = {}): Promise<Completion> {
  const res = await model.handler(chatWith(messages, opts));
  assert.equal(res.status, 200);
  return await res.json();
}

function finalAnswer(answer: Completion): string {
  assert.equal(answer.choices[0].finish_reason, "stop");
  return answer.choices[0].message.content;
}

const DEPLOY_ARGS = z.strictObject({
  service: z.string().regex(/^[a-z][a-z0-9-]*$/),
  replicas: z.int().min(2).max(5),
  env: z.enum(["staging", "prod"]),
});
const NOTIFY_ARGS = z.strictObject({
  to: z.email(),
  message: z.string().min(1).max(20),
  urgent: z.boolean().optional(),
});
const CUSTOM_TOOLS = [
  { name: "deploy", description: "Deploy a service.", schema: DEPLOY_ARGS },
  { name: "notify", description: "Send a message.", schema: NOTIFY_ARGS },
].map(({ name, description, schema }) => ({
  type: "function",
  function: { name, description, parameters: z.toJSONSchema(schema, { io: "input" }) },
}));

const SCRIPT: ScriptStep[] = [
  { tool: "deploy", args: { service: "web-{n}", replicas: 2, env: "prod", meta: { note: "try {n}" } } },
  { answer: "Deployed web." },
];

Deno.test("a per-run script set in-process drives the run, then answers Done. when it runs out", async () => {
  const model = await MockModel.open({ now: FIXED_NOW });
  model.setScript({ run: "r1", steps: [{ tool: "deploy", args: { service: "web" } }] });
  const first = await askWith(model, START, { user: "r1", tools: CUSTOM_TOOLS });
  assert.deepEqual(firstCall(first), { name: "deploy", args: { service: "web" } });
  assert.equal(first.choices[0].message.tool_calls[0].id, "call_1");
  const second = await askWith(model, withResults(START, first), { user: "r1", tools: CUSTOM_TOOLS });
  assert.equal(finalAnswer(second), SCRIPT_DONE_MESSAGE);
  // Another run of the same agent is not scripted: it gets the generic behaviour.
  assert.equal(firstCall(await askWith(model, START, { user: "r2", tools: CUSTOM_TOOLS })).name, "deploy");
  // The run's script wins even over the demo's tools.
  assert.deepEqual(firstCall(await ask(model, START, "r1")), { name: "deploy", args: { service: "web" } });
});

Deno.test("a per-run script set over POST /_scripts is shown, used and cleared", async () => {
  const model = await MockModel.open();
  const res = await model.handler(
    new Request("http://mock/_scripts", {
      method: "POST",
      body: JSON.stringify({ run: "r1", steps: SCRIPT }),
    }),
  );
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { byRun: { r1: SCRIPT }, byAgent: {} });
  assert.deepEqual(await (await model.handler(new Request("http://mock/_scripts"))).json(), {
    byRun: { r1: SCRIPT },
    byAgent: {},
  });

  const first = await askWith(model, START, { user: "r1" });
  assert.deepEqual(firstCall(first), {
    name: "deploy",
    args: { service: "web-1", replicas: 2, env: "prod", meta: { note: "try 1" } },
  });
  assert.equal(finalAnswer(await askWith(model, withResults(START, first), { user: "r1" })), "Deployed web.");

  const cleared = await model.handler(new Request("http://mock/_scripts", { method: "DELETE" }));
  assert.deepEqual(await cleared.json(), { ok: true });
  assert.deepEqual(model.scripts(), { byRun: {}, byAgent: {} });
  assert.equal(firstCall(await askWith(model, START, { user: "r1" })).name, "create_server");
});

Deno.test("a per-agent script applies to every run carrying the x-agent-name header", async () => {
  const model = await MockModel.open({ scripts: { byAgent: { deployer: SCRIPT } } });
  for (const run of ["a1", "a2"]) {
    const answer = await askWith(model, START, { agent: "deployer", run, tools: CUSTOM_TOOLS });
    assert.deepEqual(firstCall(answer).args, {
      service: "web-1",
      replicas: 2,
      env: "prod",
      meta: { note: "try 1" },
    });
  }
  // The run comes from the x-agent-run header (the runtime sends no user field), and it wins over user.
  assert.deepEqual(model.callCounts(), { total: 2, by_run: { a1: 1, a2: 1 } });
  await askWith(model, START, { agent: "deployer", run: "a1", user: "u1", tools: CUSTOM_TOOLS });
  assert.equal(model.calls("u1"), 0);
  assert.equal(model.calls("a1"), 2);

  // A run script wins over the agent's.
  model.setScript({ run: "a3", steps: [{ answer: "Not today." }] });
  const a3 = await askWith(model, START, { agent: "deployer", run: "a3", tools: CUSTOM_TOOLS });
  assert.equal(finalAnswer(a3), "Not today.");
  // Another agent gets the generic behaviour.
  const other = await askWith(model, START, { agent: "other", run: "a4", tools: CUSTOM_TOOLS });
  assert.equal(firstCall(other).name, "deploy");
});

Deno.test("without a script the model calls each offered tool with valid arguments, then sums up", async () => {
  const model = await MockModel.open();
  let messages = START;
  const opts = { agent: "ops", run: "g1", tools: CUSTOM_TOOLS };
  const first = await askWith(model, messages, opts);
  const deploy = firstCall(first);
  assert.equal(deploy.name, "deploy");
  assert.ok(DEPLOY_ARGS.safeParse(deploy.args).success, JSON.stringify(deploy.args));
  assert.deepEqual(deploy.args, { service: "service-1", replicas: 2, env: "staging" });

  messages = withResults(messages, first);
  const second = await askWith(model, messages, opts);
  const notify = firstCall(second);
  assert.equal(notify.name, "notify");
  assert.ok(NOTIFY_ARGS.safeParse(notify.args).success, JSON.stringify(notify.args));
  assert.equal((notify.args as { to: string }).to, "user-2@example.test");

  messages = withResults(messages, second);
  assert.equal(finalAnswer(await askWith(model, messages, opts)), "Called deploy, notify.");
  assert.equal(model.calls("g1"), 3);

  const idle = await askWith(model, START, { run: "g2", tools: [] });
  assert.equal(finalAnswer(idle), NOTHING_TO_DO_MESSAGE);
});

Deno.test("fault modes break generic answers too", async () => {
  const model = await MockModel.open();
  model.setFaults({ mode: "bad_args" });
  const broken = await askWith(model, START, { run: "f1", tools: CUSTOM_TOOLS });
  assert.deepEqual(firstCall(broken), { name: "deploy", args: { service: 42 } });
  model.setFaults({ mode: "multi_tool" });
  const multi = await askWith(model, START, { run: "f1", tools: CUSTOM_TOOLS });
  const calls = multi.choices[0].message.tool_calls;
  assert.deepEqual(calls.map((c: ToolCall) => [c.id, c.function.name]), [
    ["call_2", "deploy"],
    ["call_2_2", "notify"],
  ]);
});

Deno.test("the demo's tools, offered in any order and under any agent, still get the demo script", async () => {
  const model = await MockModel.open();
  const demo_tools = [...TOOLS].reverse();
  const answer = await askWith(model, START, { agent: "provisioner", run: "d1", tools: demo_tools });
  assert.deepEqual(firstCall(answer), { name: "create_server", args: { name: "srv-1", spec: "small" } });
  let messages = withResults(START, answer);
  messages = withResults(messages, await askWith(model, messages, { run: "d1", tools: demo_tools }));
  messages = withResults(messages, await askWith(model, messages, { run: "d1", tools: demo_tools }));
  assert.equal(finalAnswer(await askWith(model, messages, { run: "d1", tools: demo_tools })), DONE_MESSAGE);

  // One more tool makes it another agent.
  const extra = [...TOOLS, CUSTOM_TOOLS[1]];
  const generic = await askWith(model, START, { run: "d2", tools: extra });
  assert.equal(firstCall(generic).name, "create_server");
  assert.deepEqual(Object.keys(firstCall(generic).args as object), []);
});

Deno.test("{n} in script arguments becomes the run's call count, so a re-asked step shows a new number", async () => {
  const model = await MockModel.open();
  model.setScript({
    run: "p1",
    steps: [{
      tool: "deploy",
      args: { service: "web-{n}", labels: ["n{n}", { deep: "{n}-{n}" }], count: 3 },
    }],
  });
  const lost = await askWith(model, START, { user: "p1" });
  assert.deepEqual(firstCall(lost).args, { service: "web-1", labels: ["n1", { deep: "1-1" }], count: 3 });
  const again = await askWith(model, START, { user: "p1" });
  assert.deepEqual(firstCall(again).args, { service: "web-2", labels: ["n2", { deep: "2-2" }], count: 3 });
  // The stored script keeps its placeholders.
  assert.deepEqual(model.scripts().byRun.p1[0], {
    tool: "deploy",
    args: { service: "web-{n}", labels: ["n{n}", { deep: "{n}-{n}" }], count: 3 },
  });
});

Deno.test("a malformed /_scripts body is refused with 400 and changes nothing", async (t) => {
  const model = await MockModel.open();
  model.setScript({ agent: "kept", steps: [] });
  const cases: { name: string; body: string }[] = [
    { name: "not JSON", body: "{oops" },
    { name: "not an object", body: "[]" },
    { name: "neither run nor agent", body: JSON.stringify({ steps: [] }) },
    { name: "both run and agent", body: JSON.stringify({ run: "r", agent: "a", steps: [] }) },
    { name: "empty run", body: JSON.stringify({ run: "", steps: [] }) },
    { name: "agent not a string", body: JSON.stringify({ agent: 3, steps: [] }) },
    { name: "no steps", body: JSON.stringify({ run: "r" }) },
    { name: "steps not an array", body: JSON.stringify({ run: "r", steps: {} }) },
    { name: "step not an object", body: JSON.stringify({ run: "r", steps: ["deploy"] }) },
    { name: "step without args", body: JSON.stringify({ run: "r", steps: [{ tool: "deploy" }] }) },
    {
      name: "tool and answer",
      body: JSON.stringify({ run: "r", steps: [{ tool: "t", args: {}, answer: "x" }] }),
    },
    { name: "args not an object", body: JSON.stringify({ run: "r", steps: [{ tool: "t", args: [] }] }) },
    { name: "answer not a string", body: JSON.stringify({ run: "r", steps: [{ answer: 1 }] }) },
    { name: "unknown field", body: JSON.stringify({ run: "r", steps: [], loop: true }) },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const res = await model.handler(new Request("http://mock/_scripts", { method: "POST", body: c.body }));
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.ok(["bad_json", "bad_script"].includes(body.error), JSON.stringify(body));
      assert.match(body.message, /^[A-Z]/);
    });
  }
  assert.deepEqual(model.scripts(), { byRun: {}, byAgent: { kept: [] } });
  assert.throws(() => model.setScript({ steps: [] }), TypeError);
  await assert.rejects(MockModel.open({ scripts: { byRun: { r: [{ answer: 1 }] } } } as never), TypeError);
});

Deno.test("over real HTTP, POST /_scripts sets an agent's script and DELETE /_scripts clears it", async () => {
  const mocks = await serveMocks();
  try {
    const base = mocks.modelUrl.replace(/\/v1$/, "");
    const set = await fetch(`${base}/_scripts`, {
      method: "POST",
      body: JSON.stringify({ agent: "web", steps: [{ tool: "deploy", args: { service: "web-{n}" } }] }),
    });
    assert.equal(set.status, 200);
    await set.body?.cancel();
    const chat = () =>
      fetch(`${mocks.modelUrl}/chat/completions`, {
        method: "POST",
        headers: { "x-agent-name": "web", "x-agent-run": "h1" },
        body: JSON.stringify({ model: "m", messages: START, tools: CUSTOM_TOOLS }),
      });
    assert.deepEqual(firstCall(await (await chat()).json()), { name: "deploy", args: { service: "web-1" } });
    const bad = await fetch(`${base}/_scripts`, { method: "POST", body: JSON.stringify({ agent: "web" }) });
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).error, "bad_script");
    const cleared = await fetch(`${base}/_scripts`, { method: "DELETE" });
    await cleared.body?.cancel();
    const generic = firstCall(await (await chat()).json());
    assert.equal(generic.name, "deploy");
    assert.deepEqual(generic.args, { service: "service-2", replicas: 2, env: "staging" });
  } finally {
    await mocks.close();
  }
});

// --- Several tool calls in one answer ---

function callsOf(answer: Completion): [string, string, unknown][] {
  assert.equal(answer.choices[0].finish_reason, "tool_calls");
  return answer.choices[0].message.tool_calls.map((c: ToolCall) => [
    c.id,
    c.function.name,
    JSON.parse(c.function.arguments),
  ]);
}

const NOTE_TOOLS = ["write_note", "read_note", "tag_note"].map((name) => ({
  type: "function",
  function: {
    name,
    parameters: {
      type: "object",
      properties: { title: { type: "string" } },
      required: ["title"],
      additionalProperties: false,
    },
  },
}));

Deno.test("over real HTTP, a calls step is answered as one message holding every call, counted as one request", async () => {
  const mocks = await serveMocks();
  try {
    const base = mocks.modelUrl.replace(/\/v1$/, "");
    const set = await fetch(`${base}/_scripts`, {
      method: "POST",
      body: JSON.stringify({
        run: "par1",
        steps: [{
          calls: [
            { tool: "write_note", args: { title: "a-{n}" } },
            { tool: "write_note", args: { title: "b-{n}" } },
          ],
        }, { answer: "Wrote two notes." }],
      }),
    });
    assert.equal(set.status, 200);
    await set.body?.cancel();
    const chat = async (messages: Message[]) => {
      const res = await fetch(`${mocks.modelUrl}/chat/completions`, {
        method: "POST",
        headers: { "x-agent-name": "notes", "x-agent-run": "par1" },
        body: JSON.stringify({ model: "m", messages, tools: NOTE_TOOLS }),
      });
      assert.equal(res.status, 200);
      return await res.json();
    };
    const first = await chat(START);
    assert.equal(first.choices[0].message.content, null);
    assert.deepEqual(callsOf(first), [
      ["call_1", "write_note", { title: "a-1" }],
      ["call_1_2", "write_note", { title: "b-1" }],
    ]);
    const calls = await (await fetch(`${base}/calls`)).json();
    assert.deepEqual(calls, { total: 1, by_run: { par1: 1 } }, "one model request for the two calls");
    assert.equal(finalAnswer(await chat(withResults(START, first))), "Wrote two notes.");
    assert.equal(mocks.model.calls("par1"), 2);
  } finally {
    await mocks.close();
  }
});

Deno.test("a script step is chosen by the calls already made, so calls steps of any size keep the script in step", async (t) => {
  const model = await MockModel.open();
  const note = (title: string) => ({ tool: "write_note", args: { title } });
  model.setScript({
    run: "s1",
    steps: [
      { calls: [note("a"), note("b")] },
      { calls: [note("c"), note("d"), note("e")] },
      note("f"),
      { answer: "Six notes." },
    ],
  });
  const opts = { run: "s1", tools: NOTE_TOOLS };
  const titles = (answer: Completion) =>
    callsOf(answer).map(([, , args]) => (args as { title: string }).title);
  let messages = START;
  const answers: string[][] = [];
  for (let turn = 0; turn < 3; turn++) {
    const answer = await askWith(model, messages, opts);
    answers.push(titles(answer));
    messages = withResults(messages, answer);
  }
  assert.deepEqual(answers, [["a", "b"], ["c", "d", "e"], ["f"]]);
  assert.equal(finalAnswer(await askWith(model, messages, opts)), "Six notes.");

  await t.step("a step asked again gets the same calls under new ids", async () => {
    const again = await askWith(model, START, opts);
    assert.deepEqual(callsOf(again).map(([id]) => id), ["call_5", "call_5_2"]);
    assert.deepEqual(titles(again), ["a", "b"]);
  });

  await t.step("a request whose results end inside a calls step gets the rest of that step", async () => {
    // The first step's calls answered one at a time (after a broken answer, say): 3 results so far.
    const one_by_one = [note("a"), note("b"), note("c")].reduce<Message[]>(
      (acc, call, i) => [
        ...acc,
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: `x${i}`,
            type: "function",
            function: { name: call.tool, arguments: JSON.stringify(call.args) },
          }],
        },
        { role: "tool", tool_call_id: `x${i}`, content: "{}" },
      ],
      START,
    );
    assert.deepEqual(titles(await askWith(model, one_by_one, opts)), ["d", "e"]);
  });
});

Deno.test("with parallel set, the generic plan answers up to that many calls at once", async (t) => {
  const tools = [...CUSTOM_TOOLS, NOTE_TOOLS[0]];
  const drive = async (model: MockModel, opts: ChatOptions) => {
    let messages = START;
    const names: string[][] = [];
    for (let turn = 0; turn < 4; turn++) {
      const answer = await askWith(model, messages, { tools, ...opts });
      if (answer.choices[0].finish_reason === "stop") return { names, end: finalAnswer(answer) };
      names.push(callsOf(answer).map(([, name]) => name));
      messages = withResults(messages, answer);
    }
    throw new Error("the plan did not end in 4 answers");
  };

  await t.step(
    "parallel 2 for an agent over POST /_scripts: two calls, then the third, then the summary",
    async () => {
      const model = await MockModel.open();
      const res = await model.handler(
        new Request("http://mock/_scripts", {
          method: "POST",
          body: JSON.stringify({ agent: "ops", parallel: 2 }),
        }),
      );
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), {
        byRun: {},
        byAgent: {},
        parallel: { byRun: {}, byAgent: { ops: 2 } },
      });
      const first = await askWith(model, START, { agent: "ops", run: "g1", tools });
      const [deploy, notify] = callsOf(first);
      assert.deepEqual([deploy[0], deploy[1], notify[0], notify[1]], [
        "call_1",
        "deploy",
        "call_1_2",
        "notify",
      ]);
      assert.ok(DEPLOY_ARGS.safeParse(deploy[2]).success, JSON.stringify(deploy[2]));
      assert.ok(NOTIFY_ARGS.safeParse(notify[2]).success, JSON.stringify(notify[2]));
      assert.deepEqual(await drive(model, { agent: "ops", run: "g2" }), {
        names: [["deploy", "notify"], ["write_note"]],
        end: "Called deploy, notify, write_note.",
      });
      // Another agent is answered one call at a time.
      assert.deepEqual((await drive(model, { agent: "other", run: "g3" })).names, [
        ["deploy"],
        ["notify"],
        ["write_note"],
      ]);
    },
  );

  await t.step("the parallel option applies to every run the script table does not name", async () => {
    const model = await MockModel.open({ parallel: 3, scripts: { parallel: { byRun: { g5: 1 } } } });
    assert.deepEqual((await drive(model, { run: "g4" })).names, [["deploy", "notify", "write_note"]]);
    assert.deepEqual((await drive(model, { run: "g5" })).names, [["deploy"], ["notify"], ["write_note"]]);
    assert.equal(model.calls("g4"), 2, "one request for three calls, one for the summary");
  });

  await t.step("a run's entry wins over its agent's, whichever kind it is", async () => {
    const model = await MockModel.open({ scripts: { byAgent: { ops: [{ answer: "Scripted." }] } } });
    model.setScript({ run: "g6", parallel: 2 });
    assert.deepEqual((await drive(model, { agent: "ops", run: "g6" })).names, [
      ["deploy", "notify"],
      ["write_note"],
    ]);
    assert.deepEqual(await drive(model, { agent: "ops", run: "g7" }), { names: [], end: "Scripted." });
  });
});

Deno.test("with parallel set, the demo provisions independent resources together, the DNS record targeting its server", async (t) => {
  const drive = async (model: MockModel, run: string) => {
    let messages = START;
    const calls: [string, string, unknown][][] = [];
    for (let turn = 0; turn < 4; turn++) {
      const answer = await ask(model, messages, run);
      if (answer.choices[0].finish_reason === "stop") return { calls, end: finalAnswer(answer) };
      calls.push(callsOf(answer));
      messages = withResults(messages, answer);
    }
    throw new Error("the demo did not end in 4 answers");
  };
  const server = { name: "srv-1", spec: "small" };
  const database = { name: "db-1", engine: "postgres", size_gb: 10 };

  await t.step("parallel 2: the server and the database, then the DNS record", async () => {
    const model = await MockModel.open({ parallel: 2 });
    assert.deepEqual(await drive(model, "d2"), {
      calls: [
        [["call_1", "create_server", server], ["call_1_2", "create_database", database]],
        [["call_2", "create_dns_record", {
          hostname: "app-2.example.test",
          record_type: "CNAME",
          target: "srv-1",
        }]],
      ],
      end: DONE_MESSAGE,
    });
  });

  await t.step(
    "parallel 3: all three in one answer, the record naming the server of that answer",
    async () => {
      const model = await MockModel.open({ parallel: 3 });
      assert.deepEqual(await drive(model, "d3"), {
        calls: [[
          ["call_1", "create_server", server],
          ["call_1_2", "create_database", database],
          ["call_1_3", "create_dns_record", {
            hostname: "app-1.example.test",
            record_type: "CNAME",
            target: "srv-1",
          }],
        ]],
        end: DONE_MESSAGE,
      });
      assert.equal(model.calls("d3"), 2);
    },
  );

  await t.step("after a multi_tool answer was taken, the demo goes on from the calls made", async () => {
    const model = await MockModel.open();
    const first = await ask(model, START, "d4");
    model.setFaults({ mode: "multi_tool" });
    const both = await ask(model, withResults(START, first), "d4");
    assert.deepEqual(callsOf(both).map(([, name]) => name), ["create_database", "create_dns_record"]);
    assert.equal(
      finalAnswer(await ask(model, withResults(withResults(START, first), both), "d4")),
      DONE_MESSAGE,
    );
  });
});

Deno.test("a malformed calls step or parallel setting is refused with a message naming it", async (t) => {
  const model = await MockModel.open();
  const call = { tool: "write_note", args: { title: "a" } };
  const cases: { name: string; spec: unknown; message: RegExp }[] = [
    {
      name: "one call",
      spec: { run: "r", steps: [{ calls: [call] }] },
      message:
        /^Step 0: calls must be an array of 2 or more \{ tool, args \} objects, got 1 call\(s\); a single call is written \{ tool, args \}$/,
    },
    {
      name: "no calls",
      spec: { run: "r", steps: [{ answer: "x" }, { calls: [] }] },
      message: /^Step 1: calls must be an array of 2 or more .*got 0 call\(s\)/,
    },
    {
      name: "calls not an array",
      spec: { run: "r", steps: [{ calls: { tool: "t" } }] },
      message: /^Step 0: calls must be an array of 2 or more .*got \{"tool":"t"\}/,
    },
    {
      name: "a call without args",
      spec: { run: "r", steps: [{ calls: [call, { tool: "t" }] }] },
      message: /^Step 0, call 1 must have tool and args alone; got tool$/,
    },
    {
      name: "a call with an empty tool",
      spec: { run: "r", steps: [{ calls: [call, { tool: "", args: {} }] }] },
      message: /^Step 0, call 1: tool must be a non-empty string$/,
    },
    {
      name: "a call that is not an object",
      spec: { run: "r", steps: [{ calls: ["write_note", call] }] },
      message: /^Step 0, call 0 must be an object with tool and args$/,
    },
    {
      name: "calls beside tool",
      spec: { run: "r", steps: [{ calls: [call, call], ...call }] },
      message: /^Step 0 must have tool and args, calls, or answer alone; got args,calls,tool$/,
    },
    {
      name: "parallel beside steps",
      spec: { agent: "a", steps: [], parallel: 2 },
      message: /^A script has either steps or parallel, not both/,
    },
    {
      name: "parallel zero",
      spec: { agent: "a", parallel: 0 },
      message: /^The parallel must be a positive integer of calls per answer, got 0$/,
    },
    {
      name: "parallel a string",
      spec: { agent: "a", parallel: "2" },
      message: /^The parallel must be a positive integer of calls per answer, got "2"$/,
    },
  ];
  for (const c of cases) {
    await t.step(c.name, async () => {
      const res = await model.handler(
        new Request("http://mock/_scripts", { method: "POST", body: JSON.stringify(c.spec) }),
      );
      assert.equal(res.status, 400);
      const body = await res.json();
      assert.equal(body.error, "bad_script");
      assert.match(body.message, c.message);
      assert.throws(
        () => model.setScript(c.spec as ScriptSpec),
        (err: unknown) => err instanceof TypeError && c.message.test(err.message),
      );
    });
  }
  assert.deepEqual(model.scripts(), { byRun: {}, byAgent: {} });

  await t.step("the parallel option and the parallel table are checked at open", async () => {
    await assert.rejects(
      MockModel.open({ parallel: 0 }),
      new TypeError(
        "Cannot open the mock model as 'parallel' must be a positive integer: current value is 0",
      ),
    );
    await assert.rejects(
      MockModel.open({ scripts: { parallel: { byAgent: { a: 1.5 } } } }),
      /^TypeError: Script of agent "a": The parallel must be a positive integer of calls per answer, got 1.5$/,
    );
    await assert.rejects(
      MockModel.open({ scripts: { byAgent: { a: [] }, parallel: { byAgent: { a: 2 } } } }),
      /listed in both byAgent and parallel.byAgent/,
    );
  });
});

Deno.test("a rate limit answers 429 with Retry-After past its requests in a sliding window, and logs every arrival", async (t) => {
  let nowMs = Date.parse("2030-01-02T03:04:05Z");
  const model = await MockModel.open({
    now: () => new Date(nowMs),
    rateLimit: { requests: 2, windowMs: 1_000 },
  });
  const status = async (run: string) => (await model.handler(chat(START, run))).status;
  await t.step("two answered in the window, the third refused until the first leaves it", async () => {
    assert.equal(await status("a"), 200);
    nowMs += 400;
    assert.equal(await status("b"), 200);
    nowMs += 100;
    const refused = await model.handler(chat(START, "c"));
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get("retry-after"), "1", "whole seconds until the window has room");
    assert.equal((await refused.json()).error.code, "rate_limit_exceeded");
    nowMs += 500; // the first left the window at +1000
    assert.equal(await status("c"), 200);
  });
  await t.step("the arrivals say when and how each was answered; a refused one counted as a call", () => {
    assert.deepEqual(model.arrivals().map((a) => [a.run, a.limited, a.status]), [
      ["a", false, 200],
      ["b", false, 200],
      ["c", true, 429],
      ["c", false, 200],
    ]);
    assert.equal(model.calls("c"), 2);
    assert.equal(busiestWindow(model.arrivals(), 1_000), 2);
    assert.equal(busiestWindow(model.arrivals(), 1_000, true), 3);
  });
  await t.step("set and lifted over HTTP, a bad spec refused", async () => {
    const mocks = await serveMocks({ model });
    try {
      const base = mocks.modelUrl.replace(/\/v1$/, "");
      const bad = await fetch(`${base}/_rate_limit`, {
        method: "POST",
        body: JSON.stringify({ requests: 0 }),
      });
      assert.equal(bad.status, 400);
      assert.match((await bad.json()).message, /'requests' must be a positive integer/);
      const set = await fetch(`${base}/_rate_limit`, {
        method: "POST",
        body: JSON.stringify({ requests: 1, windowMs: 60_000 }),
      });
      assert.deepEqual(await set.json(), { requests: 1, windowMs: 60_000 });
      assert.equal(await status("d"), 200);
      assert.equal(await status("e"), 429);
      await (await fetch(`${base}/_rate_limit`, { method: "DELETE" })).body?.cancel();
      assert.equal(await status("e"), 200);
      const arrivals = await (await fetch(`${base}/arrivals`)).json();
      assert.equal(arrivals.length, 7);
    } finally {
      await mocks.close();
    }
  });
});

Deno.test("a script for a model answers the requests that name it; the others get the demo", async () => {
  const model = await MockModel.open({ now: FIXED_NOW });
  const set = await model.handler(
    new Request("http://mock/_scripts", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "mock-b", steps: [{ tool: "create_server", args: { name: "b" } }] }),
    }),
  );
  assert.deepEqual(await set.json(), {
    model: "mock-b",
    steps: [{ tool: "create_server", args: { name: "b" } }],
  });
  const asked = (name: string) =>
    model.handler(
      new Request("http://mock/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: name, messages: START, tools: TOOLS, user: `r-${name}` }),
      }),
    ).then((r) => r.json());
  assert.deepEqual(firstCall(await asked("mock-b")), { name: "create_server", args: { name: "b" } });
  assert.deepEqual(firstCall(await asked("mock-1")), {
    name: "create_server",
    args: { name: "srv-1", spec: "small" },
  });
  assert.throws(() => model.setModelScript("mock-c", [{ tool: "" } as never]), TypeError);
  model.setModelScript("mock-b", undefined);
  assert.deepEqual(firstCall(await asked("mock-b")).args, { name: "srv-2", spec: "small" });
});
