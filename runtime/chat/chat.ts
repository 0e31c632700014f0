/**
 * Chat over the AI SDK's UI message stream protocol (the package's `./chat`
 * path): a fetch handler that `useChat`'s default transport and Vercel's
 * durable `WorkflowChatTransport` talk to, over conversation runs; the
 * mapping of a run's events to UI message chunks; the wire's framing.
 * See docs/chat.md.
 *
 * @module
 */

export {
  type ChatHandler,
  chatHandler,
  type ChatHandlerOptions,
  FIRST_MESSAGE_LABEL,
  RUN_ID_HEADER,
} from "./handler.ts";
export {
  answerMessageId,
  type ApprovalState,
  ChatChunker,
  type ChildState,
  TEXT_UNIT_CHARS,
  textUnits,
  type UIChunk,
} from "./chunks.ts";
export { SSE_DONE, sseChunk, UI_MESSAGE_STREAM_HEADERS, uiMessageStreamResponse } from "./ui_stream.ts";
export { type ChatRequest, parseChatRequest } from "./request.ts";
