/**
 * A task's stream (`SendStreamingMessage`, `SubscribeToTask`): the task as
 * it stands, then its status updates and its answer as artifact updates,
 * from the run's events (`client.stream`), until the task is terminal or
 * waits for input (§3.1.2, §11.7).
 *
 * The answer to message n is the artifact `answer-<n>`. The text of a model
 * call is appended to it as it is written; text of a new step, or of the
 * same step after a `reset` (the model call was asked again after a cut-off
 * answer, or the run was taken over by another worker), restarts it
 * (`append: false`), so what a client holds is always one attempt's text,
 * never a mix. The journaled answer closes it (`lastChunk: true`): an empty
 * append when the text streamed was the answer, else the whole answer with
 * `append: false`, so a client that joined late or lost text ends with the
 * journaled answer all the same.
 *
 * @module
 */

import type { StreamEvent } from "../run/stream.ts";
import type { Client } from "../client/client.ts";
import type { ConversationTurn } from "../client/shapes.ts";
import { answerArtifactId, taskStatus } from "./tasks.ts";
import { type A2aOperations, isSettledState } from "./operations.ts";
import type { StreamResponse, Task, TaskArtifactUpdateEvent, TaskStatus } from "./wire.ts";

/** Where a stream begins: the task as first sent, and which of its steps' events it carries already. */
export interface StreamStart {
  /** The task's id (its run's). */
  taskId: string;
  /** The first message not yet answered when the task was read (its answer is the next artifact). */
  turn: number;
  /** The last journal step whose answer the task carries: events up to it are told already. */
  answeredThroughSeq: number;
  /** The state the task was sent in (a status event repeating it is not sent again). */
  state: Task["status"]["state"];
}

/** The start of a stream from the task as read and its turns. */
export function streamStart(task: Task, turns: readonly ConversationTurn[]): StreamStart {
  const answered = turns.filter((t) => t.answer !== null);
  return {
    taskId: task.id,
    turn: answered.length === 0 ? turns[0]?.seq ?? 0 : answered[answered.length - 1].seq + 1,
    answeredThroughSeq: Math.max(-1, ...answered.map((t) => t.answerSeq ?? -1)),
    state: task.status.state,
  };
}

/**
 * Turns a run's text, reset and answer events into artifact updates. Pure:
 * status events are the driver's (they need a read), see {@link followTask}.
 */
export class AnswerTranslator {
  readonly #taskId: string;
  #turn: number;
  readonly #skipThrough: number;
  /** The step whose text the current artifact shows, and that text; undefined: nothing shown since it began. */
  #seq: number | undefined;
  #text = "";
  #restart = true;

  /** From the stream's start. */
  constructor(start: Pick<StreamStart, "taskId" | "turn" | "answeredThroughSeq">) {
    this.#taskId = start.taskId;
    this.#turn = start.turn;
    this.#skipThrough = start.answeredThroughSeq;
  }

  /** The artifact updates one event makes (none for most). */
  translate(e: StreamEvent): TaskArtifactUpdateEvent[] {
    if ((e.type === "delta" || e.type === "reset" || e.type === "answer") && e.seq <= this.#skipThrough) {
      return [];
    }
    switch (e.type) {
      case "delta": {
        const restart = this.#restart || this.#seq !== e.seq;
        if (restart) this.#text = "";
        this.#seq = e.seq;
        this.#restart = false;
        this.#text += e.text;
        return [this.#update(e.text, { append: !restart })];
      }
      case "reset":
        if (e.seq === this.#seq) this.#restart = true;
        return [];
      case "answer": {
        const streamed = this.#seq === e.seq && !this.#restart && this.#text === e.text;
        const out = streamed
          ? this.#update("", { append: true, lastChunk: true })
          : this.#update(e.text, { append: false, lastChunk: true });
        this.#turn += 1;
        this.#seq = undefined;
        this.#text = "";
        this.#restart = true;
        return [out];
      }
      default:
        return [];
    }
  }

  #update(text: string, flags: { append: boolean; lastChunk?: boolean }): TaskArtifactUpdateEvent {
    return {
      taskId: this.#taskId,
      contextId: this.#taskId,
      artifact: {
        artifactId: answerArtifactId(this.#turn),
        name: this.#turn === 0 ? "answer" : `answer to message ${this.#turn}`,
        parts: [{ text }],
      },
      append: flags.append,
      lastChunk: flags.lastChunk ?? false,
    };
  }
}

/**
 * The events of a task's stream after its first (the task itself): status
 * updates when its state changes, artifact updates for its answer, until the
 * task is terminal or waits for input (or `signal` aborts). `events` is a
 * watcher of the run begun earlier (before a message was sent), if any.
 */
export async function* followTask(
  ops: A2aOperations,
  start: StreamStart,
  signal: AbortSignal,
  events?: AsyncGenerator<StreamEvent, void, undefined>,
): AsyncGenerator<StreamResponse, void, undefined> {
  const client: Client = ops.client;
  const answers = new AnswerTranslator(start);
  let state = start.state;
  if (isSettledState(state)) {
    await events?.return(undefined);
    return;
  }
  // A watcher begun before the message was sent, or one begun now.
  for await (const e of events ?? client.stream(start.taskId, { signal })) {
    if (e.type === "status") {
      const status: TaskStatus = await taskStatus(client, await ops.run(start.taskId));
      if (status.state === state) continue;
      state = status.state;
      yield { statusUpdate: { taskId: start.taskId, contextId: start.taskId, status } };
      if (isSettledState(state)) return;
      continue;
    }
    for (const update of answers.translate(e)) yield { artifactUpdate: update };
  }
}
