/**
 * Server-sent events as chat-completions servers stream them: a parser fed
 * the body's text in whatever pieces the network delivers
 * ({@link SseParser}), and the accumulation of `chat.completion.chunk`
 * objects into the body a non-streamed request would have got
 * ({@link CompletionAccumulator}), so a streamed answer is parsed by the same
 * `parseCompletion` and becomes the same decision.
 *
 * @module
 */

/** One server-sent event: its `event` field (default `message`) and its data lines joined by `\n`. */
export interface SseEvent {
  /** The `event:` field, `message` when the server sent none. */
  event: string;
  /** The `data:` lines, joined with a newline. */
  data: string;
}

/**
 * An incremental parser of a `text/event-stream` body. Lines end with `\n`,
 * `\r\n` or `\r`; a blank line dispatches the event; a line starting with `:`
 * is a comment (servers send them to keep a connection open); a field
 * without a colon has an empty value.
 *
 * @example
 * ```ts
 * import { SseParser } from "./sse.ts";
 * const p = new SseParser();
 * console.log(p.push("data: {\"a\"").length, p.push(":1}\n\n")); // 0 [ { event: "message", data: '{"a":1}' } ]
 * ```
 */
export class SseParser {
  #buffer = "";
  #data: string[] = [];
  #event = "";
  // A `\r` that ended the last piece: a `\n` opening the next belongs to it.
  #pendingCr = false;

  /** Feeds the next piece of the body; returns the events it completed, in order. */
  push(text: string): SseEvent[] {
    if (this.#pendingCr && text.startsWith("\n")) text = text.slice(1);
    this.#pendingCr = false;
    this.#buffer += text;
    const out: SseEvent[] = [];
    // Bounded by the buffer: each pass consumes one line.
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.#buffer);
      if (!m) break;
      // A lone `\r` at the very end may be the first half of `\r\n`: take the line, skip a `\n` next.
      if (m[0] === "\r" && m.index === this.#buffer.length - 1) this.#pendingCr = true;
      const line = this.#buffer.slice(0, m.index);
      this.#buffer = this.#buffer.slice(m.index + m[0].length);
      this.#line(line, out);
    }
    return out;
  }

  /** Ends the body: an event not closed by a blank line is dropped, as the specification says. */
  end(): SseEvent[] {
    this.#buffer = "";
    this.#data = [];
    this.#event = "";
    return [];
  }

  #line(line: string, out: SseEvent[]): void {
    if (line === "") {
      if (this.#data.length > 0) out.push({ event: this.#event || "message", data: this.#data.join("\n") });
      this.#data = [];
      this.#event = "";
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#event = value;
    // `id` and `retry` mean nothing to a one-shot completion stream.
  }
}

interface ToolCallParts {
  id?: string;
  type?: string;
  name: string;
  arguments: string;
}

/**
 * Builds the body of a non-streamed chat completion from the chunks of a
 * streamed one: the first choice's text (content deltas concatenated), its
 * tool calls (by `index`, arguments concatenated), refusal and finish
 * reason, and the usage of the last chunk that carried one
 * (`stream_options.include_usage` sends it in a final chunk with no
 * choices). A chunk holding an `error` (some servers report a failure
 * mid-stream that way) is kept as the body's `error`.
 */
export class CompletionAccumulator {
  #content: string | undefined;
  #refusal: string | undefined;
  #finish: unknown = null;
  #calls = new Map<number, ToolCallParts>();
  #usage: unknown;
  #error: unknown;
  #id: unknown;
  #model: unknown;
  #sawChoice = false;
  /** Chunks taken. */
  chunks = 0;

  /**
   * Takes one chunk (the parsed `data` of one event); returns the text the
   * chunk added to the first choice's content, `""` when none.
   */
  add(chunk: unknown): string {
    this.chunks++;
    if (chunk === null || typeof chunk !== "object") return "";
    const c = chunk as Record<string, unknown>;
    if (c.error !== undefined) this.#error = c.error;
    if (c.id !== undefined) this.#id ??= c.id;
    if (c.model !== undefined) this.#model ??= c.model;
    if (c.usage !== undefined && c.usage !== null) this.#usage = c.usage;
    if (!Array.isArray(c.choices)) return "";
    let added = "";
    for (const choice of c.choices) {
      if (choice === null || typeof choice !== "object") continue;
      const ch = choice as Record<string, unknown>;
      // Only the first choice is read (n is never set above 1).
      if ((typeof ch.index === "number" ? ch.index : 0) !== 0) continue;
      this.#sawChoice = true;
      if (ch.finish_reason !== undefined && ch.finish_reason !== null) this.#finish = ch.finish_reason;
      const delta = (ch.delta ?? ch.message) as Record<string, unknown> | undefined;
      if (!delta || typeof delta !== "object") continue;
      if (typeof delta.content === "string" && delta.content !== "") {
        this.#content = (this.#content ?? "") + delta.content;
        added += delta.content;
      }
      if (typeof delta.refusal === "string") this.#refusal = (this.#refusal ?? "") + delta.refusal;
      if (Array.isArray(delta.tool_calls)) {
        for (const [i, part] of delta.tool_calls.entries()) this.#toolCall(part, i);
      }
    }
    return added;
  }

  #toolCall(part: unknown, position: number): void {
    if (part === null || typeof part !== "object") return;
    const p = part as { index?: unknown; id?: unknown; type?: unknown; function?: Record<string, unknown> };
    const index = typeof p.index === "number" ? p.index : position;
    const call = this.#calls.get(index) ?? { name: "", arguments: "" };
    if (typeof p.id === "string" && p.id !== "") call.id = p.id;
    if (typeof p.type === "string") call.type = p.type;
    const fn = p.function;
    if (fn && typeof fn === "object") {
      // The name comes whole in the call's first chunk; a server that repeats it later does not double it.
      if (typeof fn.name === "string" && call.name === "") call.name = fn.name;
      if (typeof fn.arguments === "string") call.arguments += fn.arguments;
      else if (fn.arguments !== null && typeof fn.arguments === "object") {
        call.arguments += JSON.stringify(fn.arguments);
      }
    }
    this.#calls.set(index, call);
  }

  /** The text so far. */
  get text(): string {
    return this.#content ?? "";
  }

  /** The body a non-streamed request would have been answered with. */
  body(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    if (this.#id !== undefined) out.id = this.#id;
    out.object = "chat.completion";
    if (this.#model !== undefined) out.model = this.#model;
    if (this.#error !== undefined) out.error = this.#error;
    if (!this.#sawChoice) {
      out.choices = [];
    } else {
      const message: Record<string, unknown> = { role: "assistant", content: this.#content ?? null };
      if (this.#refusal !== undefined) message.refusal = this.#refusal;
      if (this.#calls.size > 0) {
        message.tool_calls = [...this.#calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => ({
          ...(c.id !== undefined ? { id: c.id } : {}),
          type: c.type ?? "function",
          function: { name: c.name, arguments: c.arguments },
        }));
      }
      out.choices = [{ index: 0, message, finish_reason: this.#finish }];
    }
    if (this.#usage !== undefined) out.usage = this.#usage;
    return out;
  }
}
