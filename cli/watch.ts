/**
 * `deno task watch RUN`: follows a run as it happens (`client.stream`), its
 * journaled history first: a line per status change, decision, tool result,
 * reset and answer, and the answer's text written as it arrives, indented
 * behind `  | ` so no line of it can pass for a line of the report. With
 * `--json`, one JSON object per event. Ends when the run does, when a
 * conversation waits for its next message (with a line saying how to send
 * one; `--follow` follows it across messages until it ends), or on SIGINT.
 * A database that goes away is a line per failed read, and the watch goes on
 * when it is back.
 *
 * @module
 */

import type { Client } from "../runtime/client/client.ts";
import { displayJson, displayText } from "../runtime/base/display.ts";
import type { StreamEvent } from "../runtime/run/stream.ts";

/** Where `watch` writes: whole lines, and pieces of text with no line end. */
export interface WatchOutput {
  /** One line (the display rule is applied here). */
  line(text: string): void;
  /** Text as it arrives, no line end added. */
  write(text: string): void;
}

/** Options of {@link watchCommand}. */
export interface WatchCommandOptions {
  /** One JSON object per event instead of the report. */
  json?: boolean;
  /** Ends the watch. */
  signal?: AbortSignal;
  /** Follows a conversation across messages, until it ends; without it the watch ends when it waits for one. */
  follow?: boolean;
}

/**
 * Follows `runId` until it ends (or, unless `follow`, until a conversation
 * waits for its next message), writing each event to `out`; returns the
 * run's last status. Throws what `client.stream` throws (`RUN_NOT_FOUND`,
 * `STREAM_UNSUPPORTED`, `DB_UNREACHABLE`).
 */
export async function watchCommand(
  client: Client,
  runId: string,
  out: WatchOutput,
  opts: WatchCommandOptions = {},
): Promise<string | undefined> {
  let status: string | undefined;
  // The step whose text is being written, and whether its last piece ended a line.
  let writing: number | undefined;
  const endText = () => {
    if (writing !== undefined) out.write("\n");
    writing = undefined;
  };
  for await (const e of client.stream(runId, { signal: opts.signal })) {
    if (e.type === "status") status = e.status;
    // A conversation waiting for its next message: the watch of this run's work is over.
    const idle = e.type === "status" && e.idle && !opts.follow;
    if (opts.json) {
      out.line(JSON.stringify(e));
      if (idle) break;
      continue;
    }
    if (e.type === "delta") {
      if (writing !== e.seq) {
        endText();
        out.line(
          `writing  seq=${e.seq}  attempt=${e.attempt}  epoch=${e.epoch}${
            e.offset > 0 ? "  (joined late)" : ""
          }`,
        );
        out.write("  | ");
        writing = e.seq;
      }
      out.write(displayText(e.text, { newlines: true }).replaceAll("\n", "\n  | "));
      continue;
    }
    endText();
    out.line(describe(e));
    if (idle) {
      out.line(
        `idle  the conversation waits for its next message: 'deno task send ${runId} --message TEXT' sends one; ` +
          `'deno task watch ${runId} --follow' follows it across messages`,
      );
      break;
    }
  }
  endText();
  return status;
}

function describe(e: Exclude<StreamEvent, { type: "delta" }>): string {
  switch (e.type) {
    case "status":
      return `status  ${e.status}${e.idle ? "  idle" : ""}  epoch=${e.epoch}${
        e.error ? `  error=${displayJson(e.error)}` : ""
      }`;
    case "reset":
      return `reset  seq=${e.seq}  ${e.reason}  dropped=${e.dropped} chars  (the text above is void)`;
    case "unreachable":
      return `unreachable  the database could not be read (${
        displayJson(e.error)
      }); trying again in ${e.retryInMs} ms`;
    case "tool_calls":
      return `decided  seq=${e.seq}  ${e.calls.map((c) => `${c.tool} ${displayJson(c.args)}`).join("  ")}`;
    case "tool_result":
      return `result  seq=${e.seq}  ${e.status}  key=${e.key}  ${
        e.error !== null ? `error=${displayJson(e.error)}` : displayJson(e.result)
      }`;
    case "answer":
      return `answer  seq=${e.seq}  ${displayJson(e.text)}`;
  }
}
