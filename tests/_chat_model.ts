/**
 * A conversing model for the conversation tests, served over the
 * chat-completions protocol on 127.0.0.1: to a user message it answers with
 * one `create_server` call (named after the number of user messages so far),
 * to a tool result with a final answer quoting the last user message. It
 * reads nothing but the request, and records each request's messages, so a
 * test sees exactly the history the model was shown on every turn.
 */

const MOD_TS = new URL("../mod.ts", import.meta.url).href;
const TOOLS_TS = new URL("../examples/provision/tools.ts", import.meta.url).href;

/** The instructions of the conversing agent below. */
export const CHAT_INSTRUCTIONS = "Create a server for each message, then answer it.";

/** A conversing agent whose one tool creates a server on the mock cloud under the call's key. */
export const CHAT_AGENT_SOURCE = `
import { defineAgent } from "${MOD_TS}";
import { demoTools } from "${TOOLS_TS}";
export default defineAgent({
  name: "chat",
  instructions: ${JSON.stringify(CHAT_INSTRUCTIONS)},
  tools: (ctx) => demoTools({ cloudUrl: ctx.env.CLOUD_URL! }).filter((t) => t.name === "create_server"),
  conversation: { idleMs: 600000 },
});
`;

/** A chat-completions message as the model received it. */
export interface WireMessage {
  role: string;
  content?: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** The answer the model gives to message `text`, the n-th user message (from 0). */
export function answerText(n: number, text: string): string {
  return `answer ${n}: ${text}`;
}

/** The running model: its URL, the requests it got, and how to stop it. */
export interface ChatModel {
  /** Base URL (`.../v1`). */
  url: string;
  /** Each request's messages, in the order they came. */
  requests: WireMessage[][];
  /** Stops the server. */
  close: () => Promise<void>;
}

/** Starts the model on a free port. */
export function serveChatModel(): ChatModel {
  const requests: WireMessage[][] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const body = await req.json() as { messages: WireMessage[] };
    const messages = body.messages;
    requests.push(messages);
    const users = messages.filter((m) => m.role === "user");
    const last = messages[messages.length - 1];
    const message = last.role === "user"
      ? {
        role: "assistant",
        content: null,
        tool_calls: [{
          id: `m${requests.length}`,
          type: "function",
          function: {
            name: "create_server",
            arguments: JSON.stringify({ name: `srv-${users.length - 1}`, spec: "small" }),
          },
        }],
      }
      : { role: "assistant", content: answerText(users.length - 1, users[users.length - 1].content ?? "") };
    return Response.json({
      id: `chat-${requests.length}`,
      object: "chat.completion",
      created: 0,
      model: "conversing",
      choices: [{ index: 0, message, finish_reason: last.role === "user" ? "tool_calls" : "stop" }],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
    });
  });
  return {
    url: `http://127.0.0.1:${server.addr.port}/v1`,
    requests,
    close: () => server.shutdown(),
  };
}

/**
 * The messages the model must have been shown when deciding, given the
 * conversation's messages taken so far and whether the current one's tool
 * result is in: the system prompt, then per turn the user message, the call,
 * its result and (for every turn before the last) the answer.
 */
export function expectedHistory(
  instructions: string,
  messages: string[],
  withResult: boolean,
): string[] {
  const out = [`system:${instructions}`];
  messages.forEach((text, n) => {
    out.push(`user:${text}`);
    const last = n === messages.length - 1;
    if (last && !withResult) return;
    out.push(`assistant-call:create_server:srv-${n}`, "tool");
    if (!last) out.push(`assistant:${answerText(n, text)}`);
  });
  return out;
}

/** A request's messages in the form {@link expectedHistory} gives. */
export function historyOf(messages: WireMessage[]): string[] {
  return messages.map((m) => {
    if (m.role === "tool") return "tool";
    if (m.role === "assistant" && m.tool_calls?.length) {
      const c = m.tool_calls[0];
      return `assistant-call:${c.function.name}:${JSON.parse(c.function.arguments).name}`;
    }
    return `${m.role}:${m.content ?? ""}`;
  });
}
