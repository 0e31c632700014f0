/**
 * For a page or a terminal that shows runs: the one display rule for text
 * that came from a model, a tool or a user (every code point that would be
 * invisible, or would change how the text around it is drawn, written as a
 * visible escape), and the views the client's page reads return
 * (`client.reads`: `timeline`, `overview`, `wholeValue`): a run and a
 * range of its steps with long values clipped. The runtime's own web page,
 * CLI and logs show everything through this rule.
 *
 * @example A model's answer with a terminal escape in it, drawn with the escapes marked
 * ```ts
 * import { displayParts } from "./display.ts";
 *
 * // Odd parts are escapes (a page marks them), even parts plain text.
 * const parts = displayParts("done\u001b]0;owned\u0007, line two\nends");
 * const marked = parts.map((part, i) => (i % 2 === 1 ? `[${part}]` : part)).join("");
 * if (marked !== String.raw`done[\u001b]]0;owned[\u0007], line two[\n]ends`) throw new Error(marked);
 * ```
 *
 * @module
 */

// The display rule.
export {
  displayJson,
  displayJsonParts,
  type DisplayOptions,
  displayParts,
  displayScript,
  displayText,
  escapeCodePoint,
  type Hidden,
  hiddenIn,
} from "./runtime/base/display.ts";

// The client's page reads: what they take and return.
export type { RunTimeline, StepRange } from "./runtime/client/shapes.ts";
export type {
  ApprovalView,
  Clipped,
  EffectView,
  JournalView,
  RunTokens,
  RunView,
  StepsView,
  WholeValueField,
} from "./runtime/store/overview.ts";
