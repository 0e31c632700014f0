/**
 * The A2A 1.0 wire, as `specification/a2a.proto` and `docs/specification.md`
 * of a2aproject/A2A v1.0 define it in JSON (ProtoJSON: camelCase fields, enum
 * values by their proto names): the objects this server sends (a task, its
 * status, a message, a part, an artifact, the stream's events, the agent
 * card), the protocol's errors with their JSON-RPC codes (§5.4) and HTTP
 * statuses, and the version this server speaks. A leaf of the folder: it
 * imports only the runtime's errors.
 *
 * @module
 */

import { ownCode, RuntimeError } from "../base/errors.ts";

/** The protocol version this server speaks (`Major.Minor`, §3.6), in the card and the `A2A-Version` header. */
export const A2A_VERSION = "1.0";

/** The service parameter naming the client's protocol version (§3.2.6); a query parameter of the same name also counts. */
export const VERSION_HEADER = "A2A-Version";

/**
 * The extension this server declares in its card: a message id sent twice is
 * one message (the spec leaves this a MAY, §3.3.1; here it holds).
 */
export const EXACTLY_ONCE_EXTENSION =
  "https://github.com/agent-runtime/agent-runtime/blob/main/docs/a2a.md#one-message-per-id";

/** Every task state of the proto's `TaskState` but `TASK_STATE_UNSPECIFIED`. */
export const TASK_STATES = [
  "TASK_STATE_SUBMITTED",
  "TASK_STATE_WORKING",
  "TASK_STATE_COMPLETED",
  "TASK_STATE_FAILED",
  "TASK_STATE_CANCELED",
  "TASK_STATE_INPUT_REQUIRED",
  "TASK_STATE_REJECTED",
  "TASK_STATE_AUTH_REQUIRED",
] as const;

/** A task's state. */
export type TaskState = typeof TASK_STATES[number];

/** States after which a task takes nothing more: its stream ends, and it cannot be cancelled. */
export const TERMINAL_STATES: readonly TaskState[] = [
  "TASK_STATE_COMPLETED",
  "TASK_STATE_FAILED",
  "TASK_STATE_CANCELED",
  "TASK_STATE_REJECTED",
];

/** States a task waits in for its client (or a person): a blocking send returns, a stream ends. */
export const INTERRUPTED_STATES: readonly TaskState[] = [
  "TASK_STATE_INPUT_REQUIRED",
  "TASK_STATE_AUTH_REQUIRED",
];

/** A part of a message or an artifact: text, structured data, or a file by URL or bytes (base64). */
export interface Part {
  /** Text. */
  text?: string;
  /** Structured data, any JSON value. */
  data?: unknown;
  /** A file's URL. */
  url?: string;
  /** A file's bytes, base64. */
  raw?: string;
  /** The part's media type. */
  mediaType?: string;
  /** A file's name. */
  filename?: string;
  /** Free-form metadata. */
  metadata?: Record<string, unknown>;
}

/** One message of a conversation between client (`ROLE_USER`) and agent (`ROLE_AGENT`). */
export interface Message {
  /** Its id, made by its sender. */
  messageId: string;
  /** The context (conversation) it belongs to. */
  contextId?: string;
  /** The task it belongs to. */
  taskId?: string;
  /** Who sent it. */
  role: "ROLE_USER" | "ROLE_AGENT";
  /** What it says. */
  parts: Part[];
  /** Free-form metadata. */
  metadata?: Record<string, unknown>;
}

/** A task's status: its state, when it was reached, and a message saying why. */
export interface TaskStatus {
  /** The state. */
  state: TaskState;
  /** A message from the agent about it (what it waits for, why it failed). */
  message?: Message;
  /** When the status was recorded, ISO 8601 UTC. */
  timestamp?: string;
}

/** An output of a task. */
export interface Artifact {
  /** Unique within its task. */
  artifactId: string;
  /** A name for people. */
  name?: string;
  /** Its content. */
  parts: Part[];
  /** Free-form metadata. */
  metadata?: Record<string, unknown>;
}

/** A unit of work: here, a run. */
export interface Task {
  /** The task's id: the run's id. */
  id: string;
  /** The context's id: the conversation's run id (a run that does not converse is a context of its own). */
  contextId: string;
  /** Where it stands. */
  status: TaskStatus;
  /** Its answers. Left out of a listed task unless asked for. */
  artifacts?: Artifact[];
  /** Its messages, oldest first. */
  history?: Message[];
  /** Free-form metadata: the run's agent and its status in the runtime's words. */
  metadata?: Record<string, unknown>;
}

/** A stream event: the task's status changed. */
export interface TaskStatusUpdateEvent {
  /** The task. */
  taskId: string;
  /** Its context. */
  contextId: string;
  /** The new status. */
  status: TaskStatus;
  /** Free-form metadata. */
  metadata?: Record<string, unknown>;
}

/** A stream event: an artifact was made or grew. */
export interface TaskArtifactUpdateEvent {
  /** The task. */
  taskId: string;
  /** Its context. */
  contextId: string;
  /** The artifact, or the piece of it to append. */
  artifact: Artifact;
  /** True: append these parts to the artifact of this id sent before; false: it starts (again) here. */
  append?: boolean;
  /** True on the artifact's last piece. */
  lastChunk?: boolean;
  /** Free-form metadata. */
  metadata?: Record<string, unknown>;
}

/** One event of a stream (`StreamResponse`): exactly one of its fields is set. */
export type StreamResponse =
  | { task: Task }
  | { message: Message }
  | { statusUpdate: TaskStatusUpdateEvent }
  | { artifactUpdate: TaskArtifactUpdateEvent };

/** One interface of an agent card: where, which binding, which protocol version. */
export interface AgentInterface {
  /** Its URL. */
  url: string;
  /** `JSONRPC` or `HTTP+JSON`. */
  protocolBinding: string;
  /** The protocol version, `1.0`. */
  protocolVersion: string;
}

/** A skill of an agent card. */
export interface AgentSkill {
  /** Its id. */
  id: string;
  /** Its name. */
  name: string;
  /** What it does. */
  description: string;
  /** Keywords. */
  tags: string[];
  /** Example requests. */
  examples?: string[];
}

/** The agent card (`GET /.well-known/agent-card.json`). */
export interface AgentCard {
  /** The agent's name. */
  name: string;
  /** What it does. */
  description: string;
  /** Where it is reached, the preferred first. */
  supportedInterfaces: AgentInterface[];
  /** The agent's version. */
  version: string;
  /** What it supports. */
  capabilities: {
    streaming?: boolean;
    pushNotifications?: boolean;
    extendedAgentCard?: boolean;
    extensions?: {
      uri: string;
      description?: string;
      required?: boolean;
      params?: Record<string, unknown>;
    }[];
  };
  /** Media types it takes. */
  defaultInputModes: string[];
  /** Media types it answers in. */
  defaultOutputModes: string[];
  /** Its skills. */
  skills: AgentSkill[];
  /** Who provides it. */
  provider?: { organization: string; url: string };
  /** Documentation. */
  documentationUrl?: string;
  /** How a client authenticates (`{ bearer: { httpAuthSecurityScheme: { scheme: "Bearer" } } }`). */
  securitySchemes?: Record<string, unknown>;
  /** Which schemes a request needs. */
  securityRequirements?: { schemes: Record<string, { list: string[] }> }[];
}

/** The protocol's errors (§3.3.2) and JSON-RPC's own, each with its JSON-RPC code (§5.4, §9.5) and HTTP status. */
export const A2A_ERRORS = {
  JSONParseError: { code: -32700, http: 400 },
  InvalidRequestError: { code: -32600, http: 400 },
  MethodNotFoundError: { code: -32601, http: 404 },
  InvalidParamsError: { code: -32602, http: 400 },
  InternalError: { code: -32603, http: 500 },
  TaskNotFoundError: { code: -32001, http: 404 },
  TaskNotCancelableError: { code: -32002, http: 400 },
  PushNotificationNotSupportedError: { code: -32003, http: 400 },
  UnsupportedOperationError: { code: -32004, http: 400 },
  ContentTypeNotSupportedError: { code: -32005, http: 400 },
  InvalidAgentResponseError: { code: -32006, http: 500 },
  ExtendedAgentCardNotConfiguredError: { code: -32007, http: 400 },
  ExtensionSupportRequiredError: { code: -32008, http: 400 },
  VersionNotSupportedError: { code: -32009, http: 400 },
} as const;

/** The name of one of {@link A2A_ERRORS}. */
export type A2aErrorKind = keyof typeof A2A_ERRORS;

/**
 * A request this server refuses, as the protocol names the refusal. `code`
 * is `A2A_` and the kind in UPPER_SNAKE without `Error` (`A2A_TASK_NOT_FOUND`),
 * the `reason` of the error's `google.rpc.ErrorInfo` detail without the prefix.
 */
export class A2aError extends RuntimeError {
  /** Which refusal. */
  readonly kind: A2aErrorKind;
  /** The field of the request that was wrong, when one was. */
  readonly field?: string;
  /** Creates a refusal of `kind`, saying what was wrong and what to do. */
  constructor(kind: A2aErrorKind, message: string, opts: { field?: string; cause?: unknown } = {}) {
    super(ownCode(`A2A_${reasonOf(kind)}`), message, { cause: opts.cause });
    this.name = "A2aError";
    this.kind = kind;
    this.field = opts.field;
  }

  /** The JSON-RPC error object (§9.5): the code, the message, and an `ErrorInfo` (and a `BadRequest` naming the field). */
  toJsonRpc(): { code: number; message: string; data: Record<string, unknown>[] } {
    return { code: A2A_ERRORS[this.kind].code, message: this.message, data: this.#details() };
  }

  /** The HTTP+JSON binding's error body (§11.6, `google.rpc.Status`). */
  toRest(): { error: { code: number; status: string; message: string; details: Record<string, unknown>[] } } {
    const http = A2A_ERRORS[this.kind].http;
    const status = http === 404 ? "NOT_FOUND" : http === 500 ? "INTERNAL" : "INVALID_ARGUMENT";
    return { error: { code: http, status, message: this.message, details: this.#details() } };
  }

  #details(): Record<string, unknown>[] {
    const info = {
      "@type": "type.googleapis.com/google.rpc.ErrorInfo",
      reason: reasonOf(this.kind),
      domain: "a2a-protocol.org",
    };
    if (this.field === undefined) return [info];
    return [info, {
      "@type": "type.googleapis.com/google.rpc.BadRequest",
      fieldViolations: [{ field: this.field, description: this.message }],
    }];
  }
}

/** `TaskNotFoundError` as `TASK_NOT_FOUND` (§11.6's reason). */
export function reasonOf(kind: A2aErrorKind): string {
  return kind.replace(/Error$/, "").replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
}

/**
 * The refusal of a request's protocol version, or undefined when it is this
 * server's. A request without one is of version 0.3 (§3.6.2), which this
 * server does not speak.
 */
export function versionProblem(req: Request): A2aError | undefined {
  const given = req.headers.get(VERSION_HEADER) ?? new URL(req.url).searchParams.get(VERSION_HEADER) ?? "";
  // Patch numbers do not count (§3.6): 1.0.1 is 1.0.
  const majorMinor = given.trim().split(".").slice(0, 2).join(".");
  if (majorMinor === A2A_VERSION) return undefined;
  const seen = given.trim() === "" ? "none, which the protocol reads as 0.3" : JSON.stringify(given);
  return new A2aError(
    "VersionNotSupportedError",
    `This agent speaks A2A ${A2A_VERSION} only; the request's ${VERSION_HEADER} is ${seen}: ` +
      `send the header '${VERSION_HEADER}: ${A2A_VERSION}'`,
  );
}
