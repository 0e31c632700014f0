/**
 * `deno task watch RUN`: follows a run as it happens (`client.stream`), its
 * journaled history first: a line per status change, decision, tool result,
 * reset and answer, and the answer's text written as it arrives, indented
 * behind `  | ` so no line of it can pass for a line of the report. With
 * `--json`, one JSON object per event. Ends when the run does (or on
 * SIGINT).
 *
 * @module
 */

import type { Client } from "../runtime/client.ts";
import { displayJson, displayText } from "../runtime/display.ts";
import type { StreamEvent } from "../runtime/stream.ts";

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
}

/**
 * Follows `runId` until it ends, writing each event to `out`; returns the
 * run's last status. Throws what `client.stream` throws (`RUN_NOT_FOUND`,
 * `STREAM_UNSUPPORTED`).
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
    if (opts.json) {
      out.line(JSON.stringify(e));
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
  }
  endText();
  return status;
}

function describe(e: Exclude<StreamEvent, { type: "delta" }>): string {
  switch (e.type) {
    case "status":
      return `status  ${e.status}  epoch=${e.epoch}${e.error ? `  error=${displayJson(e.error)}` : ""}`;
    case "reset":
      return `reset  seq=${e.seq}  ${e.reason}  dropped=${e.dropped} chars  (the text above is void)`;
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
