/**
 * An agent as an A2A 1.0 server (the package's `./a2a` path): a fetch
 * handler to mount in `Deno.serve`, Hono or any server of `Request` and
 * `Response`. It serves the agent card at `<base>/.well-known/agent-card.json`
 * and the JSON-RPC binding at `<base>` (`POST`): send a message (blocking or
 * not), send one and stream its task, get, list and cancel tasks, subscribe
 * to one. A task is a run; a context is a conversation (the run of an agent
 * with `conversation`); a message id sent twice is one message, so a client's
 * retry never starts a second run nor a second turn (the card says so). A run
 * waiting for a person, or a conversation waiting for its next message, is
 * `TASK_STATE_INPUT_REQUIRED`; a streamed answer restarts when its model call
 * is asked again. Requests must carry `A2A-Version: 1.0` (without it the
 * protocol reads 0.3, which this server does not speak). docs/a2a.md has the
 * wire as tested.
 *
 * @example Serve an agent over A2A beside its worker
 * ```ts
 * import { connect, defineAgent } from "../../mod.ts"; // the package's root
 * import { a2aHandler } from "./a2a.ts"; // the package's "/a2a" path
 *
 * const echo = defineAgent({
 *   name: "echo",
 *   tools: [],
 *   model: { describe: "echo", decide: () => Promise.resolve({ kind: "done", text: "hello" }) },
 * });
 * const client = await connect({ memory: true });
 * const worker = await client.startWorker([echo]);
 * const handler = a2aHandler({ client, agent: echo, basePath: "/a2a/echo" });
 * const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, handler);
 * const card = await (await fetch(`http://127.0.0.1:${server.addr.port}/a2a/echo/.well-known/agent-card.json`)).json();
 * await server.shutdown();
 * await worker.stop();
 * await client.close();
 * if (card.name !== "echo" || card.capabilities.streaming !== true) throw new Error("unexpected card");
 * ```
 *
 * @module
 */

import type { Agent } from "../agent/agent.ts";
import type { Client } from "../client/client.ts";
import { A2aOperations } from "./operations.ts";
import { handleJsonRpc, rpcError } from "./jsonrpc.ts";
import { A2A_VERSION, A2aError, type AgentCard, EXACTLY_ONCE_EXTENSION } from "./wire.ts";

export { A2A_ERRORS, A2A_VERSION, A2aError, EXACTLY_ONCE_EXTENSION, TASK_STATES } from "./wire.ts";
export type {
  A2aErrorKind,
  AgentCard,
  AgentInterface,
  AgentSkill,
  Artifact,
  Message,
  Part,
  StreamResponse,
  Task,
  TaskArtifactUpdateEvent,
  TaskState,
  TaskStatus,
  TaskStatusUpdateEvent,
} from "./wire.ts";
export { runIdFor } from "./operations.ts";
export { stateOf } from "./tasks.ts";

/** Options of {@link a2aHandler}. */
export interface A2aHandlerOptions {
  /** The client every read and write goes through (a worker hosting `agent` drives the runs). */
  client: Client;
  /** The agent served. */
  agent: Agent;
  /**
   * The path the handler is mounted at (`/a2a/support`); requests outside it
   * are answered 404. Default `/`.
   */
  basePath?: string;
  /**
   * The URL clients reach `basePath` at, for the card's interfaces
   * (`https://agents.example.com/a2a/support`). Default: the request's own
   * origin and `basePath`.
   */
  publicUrl?: string;
  /** The card's description. Default: the agent's instructions. */
  description?: string;
  /** Fields the card carries beside its own (`provider`, `securitySchemes`, `securityRequirements`, ...). */
  card?: Partial<AgentCard>;
  /** How long a blocking `SendMessage` waits for its task to finish or ask for input, in ms. Default 60,000. */
  sendWaitMs?: number;
  /** Recorded as who cancelled a task. Default `a2a`. */
  actor?: string;
}

/** The path of the card under the handler's base (§8.2). */
export const AGENT_CARD_PATH = "/.well-known/agent-card.json";

/** The agent card of `agent`, whose JSON-RPC interface is at `url`. */
export function agentCard(
  agent: Agent,
  url: string,
  opts: Pick<A2aHandlerOptions, "description" | "card"> = {},
): AgentCard {
  const description = opts.description ?? agent.instructions;
  const tools = Array.isArray(agent.tools) ? agent.tools.map((t) => t.name) : [];
  const examples = typeof agent.defaultInput === "string" ? [agent.defaultInput] : undefined;
  return {
    name: agent.name,
    description,
    supportedInterfaces: [{ url, protocolBinding: "JSONRPC", protocolVersion: A2A_VERSION }],
    version: agent.version ?? "unversioned",
    capabilities: {
      streaming: true,
      pushNotifications: false,
      extendedAgentCard: false,
      extensions: [{
        uri: EXACTLY_ONCE_EXTENSION,
        description:
          "A message id sent twice is one message: a retried SendMessage or SendStreamingMessage " +
          "with the same messageId returns the task it started (or the conversation's turn it added), and " +
          "never starts a second run or turn. Tasks are durable runs: they survive a crash of the server.",
        required: false,
      }],
    },
    defaultInputModes: agent.input ? ["application/json", "text/plain"] : ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [{
      id: agent.name,
      name: agent.name,
      description,
      tags: ["agent-runtime", ...(agent.conversation ? ["conversation"] : []), ...tools],
      ...(examples ? { examples } : {}),
    }],
    ...opts.card,
  };
}

/** The path of `url` under `base`, or undefined when it is outside it (`/a2a/x` under `/a2a` is `/x`). */
function under(base: string, path: string): string | undefined {
  if (base === "") return path;
  if (path === base) return "";
  return path.startsWith(`${base}/`) ? path.slice(base.length) : undefined;
}

/**
 * A fetch handler serving `opts.agent` over A2A 1.0 at `opts.basePath`:
 * `GET <base>/.well-known/agent-card.json` (the card), `POST <base>` (the
 * JSON-RPC binding). What it may be asked it answers itself, errors
 * included; it throws nothing.
 */
export function a2aHandler(opts: A2aHandlerOptions): (req: Request) => Promise<Response> {
  const base = (opts.basePath ?? "/").replace(/\/+$/, "");
  const ops = new A2aOperations({ client: opts.client, agent: opts.agent, actor: opts.actor });
  return async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    const rest = under(base, url.pathname);
    if (rest === AGENT_CARD_PATH && (req.method === "GET" || req.method === "HEAD")) {
      const at = opts.publicUrl?.replace(/\/+$/, "") ?? `${url.origin}${base}`;
      return Response.json(agentCard(opts.agent, at, opts), { headers: { "cache-control": "max-age=60" } });
    }
    if ((rest === "" || rest === "/") && req.method === "POST") {
      return await handleJsonRpc(req, ops, { sendWaitMs: opts.sendWaitMs });
    }
    const err = new A2aError(
      "MethodNotFoundError",
      `Nothing at ${req.method} ${url.pathname}: the card is GET ${base}${AGENT_CARD_PATH}, ` +
        `the JSON-RPC endpoint POST ${base || "/"}`,
    );
    return rpcError(null, err);
  };
}
