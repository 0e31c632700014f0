/**
 * `FakeAnthropic`: a local fake of Anthropic's Messages API (`POST
 * /v1/messages`), written from its documented wire format, for testing an
 * agent on `@ai-sdk/anthropic` with no network. It answers from a script per
 * run (the `x-agent-run` header) or per agent (`x-agent-name`): text, one or
 * several `tool_use` blocks at once (parallel tool use), and, when the
 * request enables extended thinking, a `thinking` block with a signature
 * first, as the real API does.
 *
 * It checks what the real API checks, and answers 400 (`invalid_request_error`)
 * as it would: the `x-api-key` and `anthropic-version` headers, `max_tokens`,
 * a thinking budget of at least 1024 below `max_tokens`, a first message from
 * the user, every `tool_use` answered by a `tool_result` in the
 * next message, and every `thinking` block sent back exactly as it was given:
 * its signature is a keyed hash of its text, so a changed, dropped or forged
 * block is refused. When thinking is enabled, an assistant turn that used
 * tools must start with its thinking block. A fault knob answers the next
 * requests 529 `overloaded_error` with a `retry-after`.
 *
 * Counters and every request are kept in memory (the fake is served by the
 * test's own process, so a worker that is killed meets the same fake).
 *
 * @module
 */

/** One answer of a script: the model's thinking (sent when thinking is on), its text, and its tool calls. */
export interface AnthropicStep {
  /** The thinking block's text, sent first when the request enables thinking. */
  thinking?: string;
  /** Text, before any tool use (the final answer when there is none). */
  text?: string;
  /** Tool calls, all in this one answer (parallel tool use); `stop_reason` is `tool_use` then. */
  tools?: { name: string; input: Record<string, unknown> }[];
  /** Overrides the stop reason (`max_tokens`, `refusal`, ...). */
  stopReason?: string;
}

/** Options of {@link FakeAnthropic.open}. */
export interface FakeAnthropicOptions {
  /** The API key every request must carry in `x-api-key`. Default `test-key`. */
  apiKey?: string;
  /** Scripts per agent name (`x-agent-name`). */
  byAgent?: Record<string, AnthropicStep[]>;
  /** Scripts per run id (`x-agent-run`); they win over agent scripts. */
  byRun?: Record<string, AnthropicStep[]>;
  /** The key the thinking signatures are made with. Default a fixed test key. */
  signingKey?: string;
}

/** One request the fake received. */
export interface AnthropicRequestRecord {
  /** The run named in `x-agent-run` (`anonymous` without one). */
  run: string;
  /** The HTTP status it was answered with. */
  status: number;
  /** The parsed body. */
  body: Record<string, unknown>;
  /** Thinking blocks sent back in it whose signatures were checked and held. */
  verifiedThinking: number;
  /** Why it was refused, for a 4xx. */
  error?: string;
}

/** Every Anthropic model id the fake accepts (any id starting `claude-`). */
const MODEL_ID = /^claude-[a-z0-9.-]+$/;

/** The fake Messages API. */
export class FakeAnthropic {
  readonly #apiKey: string;
  readonly #byAgent: Map<string, AnthropicStep[]>;
  readonly #byRun: Map<string, AnthropicStep[]>;
  readonly #signingKey: Promise<CryptoKey>;
  readonly #requests: AnthropicRequestRecord[] = [];
  #overload: { next: number; retryAfterS?: number } = { next: 0 };
  #messages = 0;

  private constructor(opts: FakeAnthropicOptions, key: Promise<CryptoKey>) {
    this.#apiKey = opts.apiKey ?? "test-key";
    this.#byAgent = new Map(Object.entries(opts.byAgent ?? {}));
    this.#byRun = new Map(Object.entries(opts.byRun ?? {}));
    this.#signingKey = key;
  }

  /** A fake with these scripts. */
  static open(opts: FakeAnthropicOptions = {}): FakeAnthropic {
    const raw = new TextEncoder().encode(opts.signingKey ?? "fake-anthropic-signing-key");
    const key = crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return new FakeAnthropic(opts, key);
  }

  /** Sets the script of every run of `agent`. */
  setAgentScript(agent: string, steps: AnthropicStep[]): void {
    this.#byAgent.set(agent, steps);
  }

  /** Sets the script of one run (it wins over its agent's). */
  setRunScript(run: string, steps: AnthropicStep[]): void {
    this.#byRun.set(run, steps);
  }

  /** Answers the next `count` requests 529 `overloaded_error`, with `retry-after: retryAfterS` when given. */
  overloadNext(count: number, retryAfterS?: number): void {
    this.#overload = { next: count, retryAfterS };
  }

  /** Every request so far, in order (a copy of the list). */
  requests(run?: string): AnthropicRequestRecord[] {
    return this.#requests.filter((r) => run === undefined || r.run === run);
  }

  /** Requests received for `run` (all of them when omitted), answered or refused. */
  calls(run?: string): number {
    return this.requests(run).length;
  }

  /** The signature the fake gives a thinking block with this text. */
  async signature(thinking: string): Promise<string> {
    const mac = await crypto.subtle.sign("HMAC", await this.#signingKey, new TextEncoder().encode(thinking));
    return btoa(String.fromCharCode(...new Uint8Array(mac)));
  }

  /** Answers one HTTP request. */
  handler = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    if (req.method !== "POST" || url.pathname !== "/v1/messages") {
      return apiError(404, "not_found_error", `No route for ${req.method} ${url.pathname}`);
    }
    const run = req.headers.get("x-agent-run") || "anonymous";
    const agent = req.headers.get("x-agent-name") || undefined;
    let body: Record<string, unknown> = {};
    const record: AnthropicRequestRecord = { run, status: 0, body, verifiedThinking: 0 };
    this.#requests.push(record);
    const refuse = (status: number, type: string, message: string) => {
      record.status = status;
      record.error = message;
      return apiError(status, type, message);
    };
    if (req.headers.get("x-api-key") !== this.#apiKey) {
      return refuse(401, "authentication_error", "invalid x-api-key");
    }
    if (req.headers.get("anthropic-version") !== "2023-06-01") {
      return refuse(400, "invalid_request_error", "anthropic-version: header is required (2023-06-01)");
    }
    try {
      const parsed = JSON.parse(await req.text());
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new TypeError();
      body = parsed;
      record.body = body;
    } catch {
      return refuse(400, "invalid_request_error", "The request body is not a JSON object");
    }
    if (this.#overload.next > 0) {
      this.#overload.next--;
      record.status = 529;
      const headers: Record<string, string> = this.#overload.retryAfterS === undefined
        ? {}
        : { "retry-after": String(this.#overload.retryAfterS) };
      return apiError(529, "overloaded_error", "Overloaded", headers);
    }
    const problem = await this.#check(body, record);
    if (problem !== undefined) return refuse(400, "invalid_request_error", problem);

    const messages = body.messages as Message[];
    const script = this.#byRun.get(run) ?? (agent === undefined ? undefined : this.#byAgent.get(agent));
    // The step is the number of the model's turns already in the conversation: a re-asked step is asked again.
    const turn = messages.filter((m) => m.role === "assistant").length;
    const step: AnthropicStep = script?.[turn] ?? { text: "Nothing more is scripted." };
    const thinkingOn = isRecord(body.thinking) && body.thinking.type === "enabled";
    const content: Record<string, unknown>[] = [];
    if (thinkingOn && step.thinking !== undefined) {
      content.push({
        type: "thinking",
        thinking: step.thinking,
        signature: await this.signature(step.thinking),
      });
    }
    if (step.text !== undefined) content.push({ type: "text", text: step.text });
    const n = ++this.#messages;
    for (const [i, t] of (step.tools ?? []).entries()) {
      content.push({ type: "tool_use", id: `toolu_${run.replace(/[^A-Za-z0-9_-]/g, "_")}_${n}_${i}`, ...t });
    }
    const stop = step.stopReason ?? ((step.tools ?? []).length > 0 ? "tool_use" : "end_turn");
    record.status = 200;
    return json(200, {
      id: `msg_${n}`,
      type: "message",
      role: "assistant",
      model: body.model,
      content,
      stop_reason: stop,
      stop_sequence: null,
      usage: {
        input_tokens: Math.ceil(JSON.stringify(body).length / 4),
        output_tokens: Math.ceil(JSON.stringify(content).length / 4),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
      },
    });
  };

  /** What the real API would refuse in `body`, in its words; `undefined` when it is a valid request. */
  async #check(body: Record<string, unknown>, record: AnthropicRequestRecord): Promise<string | undefined> {
    if (typeof body.model !== "string" || !MODEL_ID.test(body.model)) {
      return `model: ${String(body.model)} is not a model`;
    }
    const max = body.max_tokens;
    if (typeof max !== "number" || !Number.isInteger(max) || max < 1) return "max_tokens: Field required";
    const thinking = body.thinking;
    const thinkingOn = isRecord(thinking) && thinking.type === "enabled";
    if (thinkingOn) {
      const budget = thinking.budget_tokens;
      if (typeof budget !== "number" || budget < 1024) {
        return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
      }
      if (budget >= max) return "`max_tokens` must be greater than `thinking.budget_tokens`";
    }
    if (body.system !== undefined && typeof body.system !== "string" && !Array.isArray(body.system)) {
      return "system: Input should be a valid string or list of text blocks";
    }
    if (body.tools !== undefined) {
      if (!Array.isArray(body.tools)) return "tools: Input should be a valid list";
      for (const [i, t] of body.tools.entries()) {
        if (!isRecord(t) || typeof t.name !== "string" || !isRecord(t.input_schema)) {
          return `tools.${i}: a custom tool needs a name and an input_schema`;
        }
      }
    }
    const messages = body.messages;
    if (!Array.isArray(messages) || messages.length === 0) {
      return "messages: at least one message is required";
    }
    for (const [i, m] of messages.entries()) {
      if (!isRecord(m) || (m.role !== "user" && m.role !== "assistant")) {
        return `messages.${i}.role: Input should be 'user' or 'assistant'`;
      }
      if (i === 0 && m.role !== "user") return 'messages: the first message must use the "user" role';
      if (typeof m.content !== "string" && !Array.isArray(m.content)) {
        return `messages.${i}.content: Field required`;
      }
    }
    for (const [i, m] of (messages as Message[]).entries()) {
      if (m.role !== "assistant" || !Array.isArray(m.content)) continue;
      const uses = m.content.filter((b) => b.type === "tool_use");
      // Every tool use is answered in the next message.
      if (uses.length > 0) {
        const next = messages[i + 1] as Message | undefined;
        const answered = new Set(
          Array.isArray(next?.content)
            ? next.content.filter((b) => b.type === "tool_result").map((b) => b.tool_use_id)
            : [],
        );
        const missing = uses.filter((u) => !answered.has(u.id)).map((u) => String(u.id));
        if (missing.length > 0) {
          return `messages.${
            i + 1
          }: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${
            missing.join(", ")
          }. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
        }
        if (thinkingOn && m.content[0]?.type !== "thinking" && m.content[0]?.type !== "redacted_thinking") {
          return `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${
            String(m.content[0]?.type)
          }\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block ` +
            "(preceeding the lastmost set of `tool_use` and `tool_result` blocks).";
        }
      }
      // A thinking block must come back exactly as it was given: its signature is checked against its text.
      for (const [j, b] of m.content.entries()) {
        if (b.type !== "thinking") continue;
        if (typeof b.thinking !== "string" || typeof b.signature !== "string") {
          return `messages.${i}.content.${j}: a thinking block needs its thinking and its signature`;
        }
        if (b.signature !== await this.signature(b.thinking)) {
          return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
        }
        record.verifiedThinking++;
      }
    }
    return undefined;
  }
}

/** A message of a request, as far as the checks read it. */
interface Message {
  role: string;
  content: string | Array<Record<string, unknown> & { type?: unknown }>;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", "request-id": `req_fake_${status}`, ...headers },
  });
}

/** An error in the API's shape: `{"type": "error", "error": {"type", "message"}}`. */
function apiError(
  status: number,
  type: string,
  message: string,
  headers: Record<string, string> = {},
): Response {
  return json(status, { type: "error", error: { type, message } }, headers);
}

/** A {@link FakeAnthropic} served over HTTP on 127.0.0.1. */
export interface ServedAnthropic {
  /** The fake. */
  fake: FakeAnthropic;
  /** The base URL to give `createAnthropic({ baseURL })`, e.g. `http://127.0.0.1:41234/v1`. */
  url: string;
  /** Stops the server. */
  close(): Promise<void>;
}

/** Serves `fake` (a new one when omitted) on 127.0.0.1, port 0 unless given. */
export function serveAnthropic(fake: FakeAnthropic = FakeAnthropic.open(), port = 0): ServedAnthropic {
  const server = Deno.serve({ hostname: "127.0.0.1", port, onListen() {} }, fake.handler);
  return {
    fake,
    url: `http://127.0.0.1:${server.addr.port}/v1`,
    close: () => server.shutdown(),
  };
}
