/**
 * The JSON-RPC binding (§9): one `POST` of a JSON-RPC 2.0 request whose
 * method is the operation's name (`SendMessage`, `SendStreamingMessage`,
 * `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`), answered with a
 * JSON-RPC response, or, for the two streams, with server-sent events each
 * holding a JSON-RPC response whose result is a `StreamResponse`. Errors
 * carry the protocol's codes (§5.4) and an HTTP status (200 for none; 400,
 * 404 or 500 by the error), with `google.rpc.ErrorInfo` and, for a bad
 * field, `google.rpc.BadRequest` naming it in `data`.
 *
 * @module
 */

import { DEFAULTS } from "../base/defaults.ts";
import { A2A_ERRORS, A2aError, versionProblem } from "./wire.ts";
import { checkHistoryLength, checkTaskId, paramsObject } from "./requests.ts";
import type { A2aOperations } from "./operations.ts";
import { asA2aError, messageStream, readJson, sseResponse, subscription } from "./binding.ts";
import { taskOf } from "./tasks.ts";

/** The methods of this binding that answer with a stream. */
const STREAMING = new Set(["SendStreamingMessage", "SubscribeToTask"]);

/** The push notification methods, which this server does not offer (its card says so). */
const PUSH = new Set([
  "CreateTaskPushNotificationConfig",
  "GetTaskPushNotificationConfig",
  "ListTaskPushNotificationConfigs",
  "DeleteTaskPushNotificationConfig",
]);

type RpcId = string | number | null;

/** A JSON-RPC error response for `err`, with its HTTP status. */
export function rpcError(id: RpcId, err: A2aError): Response {
  return Response.json({ jsonrpc: "2.0", id, error: err.toJsonRpc() }, { status: A2A_ERRORS[err.kind].http });
}

/** Options of {@link handleJsonRpc}. */
export interface JsonRpcOptions {
  /** How long a blocking `SendMessage` waits for its task to settle, in ms. */
  sendWaitMs?: number;
}

/** Answers one JSON-RPC request. */
export async function handleJsonRpc(
  req: Request,
  ops: A2aOperations,
  opts: JsonRpcOptions = {},
): Promise<Response> {
  let id: RpcId = null;
  try {
    const type = (req.headers.get("content-type") ?? "application/json").split(";")[0].trim().toLowerCase();
    if (type !== "application/json" && type !== "application/a2a+json") {
      throw new A2aError(
        "ContentTypeNotSupportedError",
        `A JSON-RPC request is application/json: the content-type was ${JSON.stringify(type)}`,
      );
    }
    const body = await readJson(req);
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new A2aError(
        "InvalidRequestError",
        "A request is one JSON-RPC 2.0 object (batches are not taken)",
      );
    }
    const rpc = body as Record<string, unknown>;
    if (typeof rpc.id === "string" || typeof rpc.id === "number") id = rpc.id;
    if (rpc.jsonrpc !== "2.0" || typeof rpc.method !== "string") {
      throw new A2aError("InvalidRequestError", `A request has "jsonrpc": "2.0" and a "method" string`);
    }
    const problem = versionProblem(req);
    if (problem) throw problem;
    const params = paramsObject(rpc.params);
    if (STREAMING.has(rpc.method)) return await streamMethod(rpc.method, id, params, ops);
    const result = await callMethod(rpc.method, params, ops, opts, req.signal);
    return Response.json({ jsonrpc: "2.0", id, result });
  } catch (err) {
    return rpcError(id, asA2aError(err));
  }
}

async function callMethod(
  method: string,
  params: Record<string, unknown>,
  ops: A2aOperations,
  opts: JsonRpcOptions,
  signal: AbortSignal,
): Promise<unknown> {
  switch (method) {
    case "SendMessage": {
      const sent = await ops.send(params);
      const configuration = paramsObject(params.configuration);
      const historyLength = checkHistoryLength(configuration.historyLength);
      const run = configuration.returnImmediately === true
        ? sent.run
        : await ops.settle(sent.run.runId, opts.sendWaitMs ?? DEFAULTS.a2aSendWaitMs, signal);
      return { task: await taskOf(ops.client, run, { historyLength }) };
    }
    case "GetTask":
      return await ops.get(checkTaskId(params), { historyLength: checkHistoryLength(params.historyLength) });
    case "ListTasks":
      return await ops.list(params);
    case "CancelTask":
      return await ops.cancel(checkTaskId(params));
    case "GetExtendedAgentCard":
      throw new A2aError(
        "UnsupportedOperationError",
        "This agent has no extended card: its card is all there is",
      );
  }
  if (PUSH.has(method)) {
    throw new A2aError(
      "PushNotificationNotSupportedError",
      `${method}: this agent sends no push notifications (its card says so); stream, subscribe or poll instead`,
    );
  }
  throw new A2aError(
    "MethodNotFoundError",
    `No method ${JSON.stringify(method)}: the methods are SendMessage, SendStreamingMessage, GetTask, ` +
      `ListTasks, CancelTask and SubscribeToTask (A2A ${"1.0"})`,
  );
}

async function streamMethod(
  method: string,
  id: RpcId,
  params: Record<string, unknown>,
  ops: A2aOperations,
): Promise<Response> {
  // Ended by the response body's cancel (the client went away), not by the request's signal: without
  // --unstable-no-legacy-abort, Deno aborts that one as soon as the response is returned.
  const abort = new AbortController();
  const events = method === "SendStreamingMessage"
    ? await messageStream(ops, params, abort.signal)
    : await subscription(ops, checkTaskId(params), abort.signal);
  return sseResponse(events, {
    wrap: (result) => ({ jsonrpc: "2.0", id, result }),
    fail: (err) => ({ jsonrpc: "2.0", id, error: err.toJsonRpc() }),
    abort,
  });
}
