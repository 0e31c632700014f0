/**
 * The client's other audiences (the package's `./client` path): the classes
 * behind `client.operators`, `client.reads`, `client.conversations` and
 * `client.schedules`, and
 * what their calls take and return (a run's record and timeline, a
 * resolution, a settlement, a prune's result, a conversation's turns, the
 * limits on a list and a message). The application's calls (`connect`,
 * `Client`, `RunInfo`) are the package's root.
 *
 * @example Operators, the page's reads and a conversation, each through its own part of the client
 * ```ts
 * import { connect, defineAgent } from "../../mod.ts";
 * import type { OperatorClient, ReadClient } from "./mod.ts"; // the package's "/client" path
 *
 * const client = await connect({ memory: true });
 * const chat = defineAgent({
 *   name: "chat",
 *   tools: [],
 *   conversation: { idleMs: 60_000 },
 *   model: { describe: "none", decide: () => Promise.resolve({ kind: "done", text: "hi" }) },
 * });
 * await client.start(chat, { runId: "chat-1", input: "hello" });
 * const reads: ReadClient = client.reads;
 * const operators: OperatorClient = client.operators;
 * const { total } = await reads.list({ agent: "chat" });
 * await client.conversations.send("chat-1", "are you there?");
 * const cancelled = await operators.cancel("chat-1", { by: "alice", reason: "a test" });
 * await client.close();
 * if (total !== 1 || cancelled.status !== "cancelled") throw new Error(`unexpected: ${total} ${cancelled.status}`);
 * ```
 *
 * @module
 */

export * from "./shapes.ts";
export { OperatorClient } from "./operator_client.ts";
export { ReadClient } from "./read_client.ts";
export { ConversationClient } from "./conversation_client.ts";
export { ScheduleClient } from "./schedule_client.ts";
export type { ForkInfo, ForkOptions } from "./fork_client.ts";
export type { ScheduledRunInfo, ScheduleInfo, ScheduleOptions } from "./schedule_client.ts";
export type { CatchUpRule, OverlapRule } from "../store/store.ts";
export type { ScheduleTiming } from "../schedules/spec.ts";
export { type VersionedRun, versionWait } from "./version_wait.ts";
