/**
 * Every kind of value the database refuses or changes, tried end to end: in a
 * model's final answer or tool arguments (as a server sends them, or as a
 * {@link Planner} of one's own returns them), in a tool's result, in a token
 * usage report and in a run's input, each on a run of its own under a worker
 * host, on PGlite and on PostgreSQL. {@link tryCase} says what happened (the
 * answer refused and asked again, the value stored as it was or as JSON
 * writes it, the call failed, the input refused), what was stored and how many
 * model requests the run paid; `value_classes_test.ts` asserts every row, and
 * the command prints the table the docs show:
 *
 * ```sh
 * deno task values --database-url postgres://postgres@127.0.0.1:5432/test
 * ```
 *
 * @module
 */

import { isDeepStrictEqual } from "node:util";
import { z } from "npm:zod@4.6.7";
import { type Agent, defineAgent } from "../runtime/agent/agent.ts";
import { Client, connect } from "../runtime/client/client.ts";
import { commandFlags } from "../runtime/settings/config.ts";
import { type CodeOf, hasCode } from "../runtime/base/errors.ts";
import { arraySink, Logger } from "../runtime/base/log.ts";
import { OpenAIPlanner, type Planner, type PlannerDecision } from "../runtime/model/planner.ts";
import { createSandbox } from "../runtime/store/sandbox.ts";
import { MAX_JSON_BYTES, MAX_JSON_DEPTH } from "../runtime/base/storable.ts";
import { defineTool } from "../runtime/agent/tools.ts";

/** Where a value appears. */
export type Where = "final answer" | "tool arguments" | "tool result" | "token usage" | "run input";

/** What became of a value. */
export type Outcome =
  | "refused and re-asked (MODEL_UNSTORABLE)"
  | "stored unchanged"
  | "stored as JSON writes it"
  | "stored, written out as its escape"
  | "stored, nesting past four levels dropped"
  | "call failed for good (TOOL_RESULT_UNSTORABLE)"
  | "refused (INPUT_INVALID)";

/** One row: a value, where it appears, and what must become of it. */
export interface ValueCase {
  /** What the value is, for the table. */
  name: string;
  where: Where;
  /**
   * The JSON text a server sends: a tool call's `arguments`, the answer's
   * `content` (a JSON string literal) or its `usage`. Unset: {@link value}.
   */
  wire?: string;
  /** The value as JavaScript hands it over: a Planner's arguments, a tool's result, a run's input. */
  value?: () => unknown;
  /** What must become of it. */
  expect: Outcome;
}

/** What became of a value on one store. */
export interface Observed {
  outcome: Outcome | `unexpected: ${string}`;
  /** The value as stored, as JSON (cut at 60 characters); unset when nothing was stored. */
  storedAs?: string;
  /** Model requests the run paid for. */
  requests: number;
  /** Anything inconsistent seen on the way (a tool given another value than the one stored, ...). */
  problems: string[];
}

const deepArrays = (levels: number) => "[".repeat(levels) + "1" + "]".repeat(levels);
const deepValue = (levels: number): unknown => {
  let v: unknown = "x";
  for (let i = 0; i < levels; i++) v = { v };
  return v;
};
const cyclic = () => {
  const o: Record<string, unknown> = { a: 1 };
  o.self = o;
  return o;
};
const OVER_DEPTH = MAX_JSON_DEPTH + 1;
const OVER_SIZE = MAX_JSON_BYTES + 1024;
const DEEPER = `nesting ${OVER_DEPTH.toLocaleString("en-US")} levels deep`;
const LARGER = `${MAX_JSON_BYTES / 1024 / 1024} MiB and 1 KiB`;

/** Every row of the table. */
export const VALUE_CASES: readonly ValueCase[] = [
  // A model's answer, as a server sends it: JSON text read by JSON.parse.
  {
    name: "a lone surrogate in a string",
    where: "tool arguments",
    wire: `{"v":"a\\ud800b"}`,
    expect: refused(),
  },
  { name: "a lone surrogate in a key", where: "tool arguments", wire: `{"k\\ud83d":"v"}`, expect: refused() },
  { name: "a lone surrogate in the text", where: "final answer", wire: `"done \\udc00"`, expect: refused() },
  { name: "a NUL character", where: "tool arguments", wire: `{"v":"a\\u0000b"}`, expect: refused() },
  { name: "a NUL character in the text", where: "final answer", wire: `"done \\u0000"`, expect: refused() },
  {
    name: DEEPER,
    where: "tool arguments",
    wire: `{"v":${deepArrays(OVER_DEPTH)}}`,
    expect: refused(),
  },
  {
    name: "nesting 200,000 levels deep",
    where: "tool arguments",
    wire: `{"v":${deepArrays(200_000)}}`,
    expect: refused(),
  },
  { name: "1e400 (Infinity once parsed)", where: "tool arguments", wire: `{"v":1e400}`, expect: refused() },
  { name: "-0", where: "tool arguments", wire: `{"v":-0}`, expect: "stored as JSON writes it" },
  {
    name: "1e-400 (0 once parsed)",
    where: "tool arguments",
    wire: `{"v":1e-400}`,
    expect: "stored unchanged",
  },
  {
    name: "an integer past 2^53",
    where: "tool arguments",
    wire: `{"v":12345678901234567890}`,
    expect: "stored unchanged",
  },
  {
    name: "17 significant digits",
    where: "tool arguments",
    wire: `{"v":0.30000000000000004}`,
    expect: "stored unchanged",
  },
  { name: "duplicate keys", where: "tool arguments", wire: `{"v":1,"v":2}`, expect: "stored unchanged" },
  { name: "keys out of order", where: "tool arguments", wire: `{"b":1,"a":2}`, expect: "stored unchanged" },
  {
    name: "emoji and right-to-left text",
    where: "tool arguments",
    wire: `{"v":"🙂 מרחב"}`,
    expect: "stored unchanged",
  },
  {
    name: "a 50 MB string",
    where: "tool arguments",
    wire: `{"v":"${"y".repeat(50 * 1024 * 1024)}"}`,
    expect: "stored unchanged",
  },
  {
    name: LARGER,
    where: "tool arguments",
    wire: `{"v":"${"y".repeat(OVER_SIZE)}"}`,
    expect: refused(),
  },
  // A Planner of one's own hands over JavaScript values.
  { name: "a BigInt", where: "tool arguments", value: () => ({ v: 10n }), expect: refused() },
  { name: "a cycle", where: "tool arguments", value: cyclic, expect: refused() },
  { name: "NaN", where: "tool arguments", value: () => ({ v: NaN }), expect: refused() },
  { name: "a Map", where: "tool arguments", value: () => ({ v: new Map([["k", 1]]) }), expect: refused() },
  {
    name: "a Date",
    where: "tool arguments",
    value: () => ({ v: new Date(0) }),
    expect: "stored as JSON writes it",
  },
  {
    name: "an undefined field and a function",
    where: "tool arguments",
    value: () => ({ v: 1, u: undefined, f: () => 1 }),
    expect: "stored as JSON writes it",
  },
  // A tool's result.
  {
    name: "a lone surrogate",
    where: "tool result",
    value: () => ({ r: "x\ud800y" }),
    expect: "stored, written out as its escape",
  },
  {
    name: "a lone surrogate in a key",
    where: "tool result",
    value: () => ({ ["k\udfff"]: 1 }),
    expect: writtenOut(),
  },
  { name: "a NUL character", where: "tool result", value: () => "i-1\u0000tail", expect: writtenOut() },
  {
    name: DEEPER,
    where: "tool result",
    value: () => deepValue(OVER_DEPTH),
    expect: failed(),
  },
  {
    name: "nesting 20,000 levels deep",
    where: "tool result",
    value: () => deepValue(20_000),
    expect: failed(),
  },
  { name: "a cycle", where: "tool result", value: cyclic, expect: failed() },
  { name: "a BigInt", where: "tool result", value: () => ({ n: 10n }), expect: failed() },
  { name: "NaN", where: "tool result", value: () => ({ n: NaN }), expect: failed() },
  { name: "Infinity", where: "tool result", value: () => [1, Infinity], expect: failed() },
  { name: "a Set", where: "tool result", value: () => ({ s: new Set([1]) }), expect: failed() },
  {
    name: LARGER,
    where: "tool result",
    value: () => "z".repeat(OVER_SIZE),
    expect: failed(),
  },
  {
    name: "a 10 MB string",
    where: "tool result",
    value: () => "z".repeat(10 * 1024 * 1024),
    expect: "stored unchanged",
  },
  {
    name: "a Date",
    where: "tool result",
    value: () => ({ at: new Date(0) }),
    expect: "stored as JSON writes it",
  },
  {
    name: "an object with toJSON",
    where: "tool result",
    value: () => ({ toJSON: () => ({ id: "i-1" }) }),
    expect: "stored as JSON writes it",
  },
  { name: "-0", where: "tool result", value: () => ({ n: -0 }), expect: "stored as JSON writes it" },
  { name: "undefined", where: "tool result", value: () => undefined, expect: "stored as JSON writes it" },
  // A usage report (stored with the step).
  {
    name: "a lone surrogate in a key",
    where: "token usage",
    wire: `{"total_tokens":5,"details":{"k\\ud800":1}}`,
    expect: writtenOut(),
  },
  {
    name: "nesting 200,000 levels deep",
    where: "token usage",
    wire: `{"total_tokens":5,"details":${'{"a":'.repeat(200_000)}1${"}".repeat(200_000)}}`,
    expect: "stored, nesting past four levels dropped",
  },
  // A run's input.
  { name: "a NUL character in text", where: "run input", value: () => "go\u0000now", expect: inputRefused() },
  { name: "a lone surrogate in text", where: "run input", value: () => "go \ud800", expect: inputRefused() },
  {
    name: "a lone surrogate in a key",
    where: "run input",
    value: () => ({ ["k\ud800"]: 1 }),
    expect: inputRefused(),
  },
  { name: "NaN", where: "run input", value: () => ({ n: NaN }), expect: inputRefused() },
  { name: "a BigInt", where: "run input", value: () => ({ n: 1n }), expect: inputRefused() },
  { name: "a cycle", where: "run input", value: cyclic, expect: inputRefused() },
  {
    name: DEEPER,
    where: "run input",
    value: () => deepValue(OVER_DEPTH),
    expect: inputRefused(),
  },
  {
    name: "a Date",
    where: "run input",
    value: () => ({ at: new Date(0) }),
    expect: "stored as JSON writes it",
  },
];

function refused(): Outcome {
  return "refused and re-asked (MODEL_UNSTORABLE)";
}
function writtenOut(): Outcome {
  return "stored, written out as its escape";
}
function failed(): Outcome {
  return "call failed for good (TOOL_RESULT_UNSTORABLE)";
}
function inputRefused(): Outcome {
  return "refused (INPUT_INVALID)";
}

/** The model requests a row's run pays when its value meets what it must (see {@link VALUE_CASES}). */
export function expectedRequests(c: ValueCase): number {
  if (c.where === "run input") return c.expect === "refused (INPUT_INVALID)" ? 0 : 1;
  // A refused answer and its re-ask (which ends the run); or the call and then the end.
  if (c.where === "final answer") return c.expect === refused() ? 2 : 1;
  if (c.where === "token usage") return 1;
  return 2;
}

/** Wire answers: a tool call with these arguments, or a final answer with this content, and usage. */
function completion(answer: { args: string } | { content: string }, usage = `{"total_tokens":5}`): string {
  const message = "args" in answer
    ? `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"probe",` +
      `"arguments":${JSON.stringify(answer.args)}}}]}`
    : `{"role":"assistant","content":${answer.content}}`;
  return `{"choices":[{"message":${message},"finish_reason":"${
    "args" in answer ? "tool_calls" : "stop"
  }"}],` +
    `"usage":${usage}}`;
}

/** The model of a row: its first answer carries the value (where a model gives it), every later one ends the run. */
function caseModel(c: ValueCase): { planner: Planner; seen: { requests: number; bodies: string[] } } {
  const seen = { requests: 0, bodies: [] as string[] };
  const end = completion({ content: `"finished"` });
  if (c.wire === undefined && c.where === "tool arguments") {
    const planner: Planner = {
      describe: "a planner of one's own",
      decide: (): Promise<PlannerDecision> => {
        seen.requests++;
        return Promise.resolve(
          seen.requests === 1
            ? { kind: "tool_calls", calls: [{ name: "probe", args: c.value!() }], usage: { total_tokens: 5 } }
            : { kind: "done", text: "finished", usage: { total_tokens: 5 } },
        );
      },
    };
    return { planner, seen };
  }
  const first = c.where === "tool arguments"
    ? completion({ args: c.wire! })
    : c.where === "final answer"
    ? completion({ content: c.wire! })
    : c.where === "token usage"
    ? completion({ content: `"finished"` }, c.wire!)
    : c.where === "tool result"
    ? completion({ args: `{"v":"x"}` })
    : end;
  const planner = new OpenAIPlanner({
    url: "http://values.model/v1",
    model: "values",
    fetch: async (req) => {
      seen.requests++;
      seen.bodies.push(await req.text());
      return new Response(seen.requests === 1 ? first : end, {
        headers: { "content-type": "application/json" },
      });
    },
  });
  return { planner, seen };
}

/** The row's agent: one tool that records what it was given and returns the row's result. */
function caseAgent(c: ValueCase, planner: Planner, given: unknown[]): Agent {
  return defineAgent({
    name: "values",
    model: planner,
    // A text agent for text input; any JSON otherwise.
    input: c.where === "run input" && typeof c.value?.() !== "string" ? z.unknown() : undefined,
    tools: [defineTool({
      name: "probe",
      description: "Records its arguments.",
      args: z.record(z.string(), z.unknown()),
      run: (args) => {
        given.push(args);
        return Promise.resolve({ result: (c.where === "tool result" ? c.value!() : "ok") as never });
      },
    })],
  });
}

/** Runs row `c` as run `runId` on `client` under a worker host, and says what became of its value. */
export async function tryCase(client: Client, c: ValueCase, runId: string): Promise<Observed> {
  const { planner, seen } = caseModel(c);
  const given: unknown[] = [];
  const agent = caseAgent(c, planner, given);
  const problems: string[] = [];
  const worker = await client.startWorker([agent], {
    pollMs: 10,
    log: new Logger({ clock: client.clock, sink: arraySink([]) }),
  });
  try {
    const input = c.where === "run input" ? c.value!() : "try the value";
    try {
      await client.start(agent, { runId, input });
    } catch (err) {
      if (!hasCode(err, "INPUT_INVALID")) throw err;
      if (await client.get(runId)) problems.push("a refused input left a run behind");
      return { outcome: "refused (INPUT_INVALID)", requests: seen.requests, problems };
    }
    const run = await client.wait(runId, { timeoutMs: 60_000, pollMs: 10 });
    const { journal, effects } = await client.reads.inspect(runId);
    if (run.status !== "done") problems.push(`the run ended ${run.status}: ${run.error}`);
    // Answered where it arose: one claim, no worker lost to it.
    if (run.epoch !== 1) problems.push(`the run took ${run.epoch} claims`);
    const step = journal[0];
    const planted = c.wire !== undefined ? JSON.parse(c.wire) : c.value?.();
    let stored: unknown;
    let outcome: Observed["outcome"];
    if (step?.rejections.some((r) => r.code === ("MODEL_UNSTORABLE" satisfies CodeOf<"Rejection">))) {
      outcome = refused();
      if (effects.length > 0) problems.push("the refused answer reached the tool");
    } else if (c.where === "tool result") {
      const call = effects[0];
      if (call?.status === "failed" && /its result cannot be stored/.test(call.error ?? "")) {
        outcome = failed();
      } else {
        stored = call?.result;
        outcome = classify(stored, planted);
        // What the model was shown next is what is stored.
        const shown = toolMessage(seen.bodies[1]);
        if (!isDeepStrictEqual(shown, stored)) {
          problems.push(`the model was shown ${shownAs(shown)}, not what is stored`);
        }
      }
    } else if (c.where === "tool arguments") {
      stored = step?.decision && "tool" in step.decision ? step.decision.args : undefined;
      outcome = classify(stored, planted);
      if (!isDeepStrictEqual(given[0], stored)) {
        problems.push(`the tool was given ${shownAs(given[0])}, but ${shownAs(stored)} is stored`);
      }
    } else if (c.where === "final answer") {
      stored = run.output;
      outcome = classify(stored, planted);
    } else if (c.where === "token usage") {
      stored = step?.usage;
      outcome = classify(stored, planted);
      if (outcome === "stored as JSON writes it") outcome = "stored, nesting past four levels dropped";
    } else {
      stored = run.input;
      outcome = classify(stored, planted);
    }
    return {
      outcome,
      storedAs: stored === undefined ? undefined : cut(stored),
      requests: seen.requests,
      problems,
    };
  } finally {
    await worker.stop();
  }
}

/** Unchanged, changed as JSON writes it, or changed by writing out a character PostgreSQL cannot hold. */
function classify(stored: unknown, planted: unknown): Observed["outcome"] {
  if (isDeepStrictEqual(stored, planted)) return "stored unchanged";
  if (/\\\\u0000|\\\\ud[89a-f]/i.test(JSON.stringify(stored) ?? "")) return writtenOut();
  return "stored as JSON writes it";
}

/** The tool message's content in a chat-completions request body, parsed. */
function toolMessage(body: string | undefined): unknown {
  const messages = body ? (JSON.parse(body).messages as { role: string; content: string }[]) : [];
  const content = messages.find((m) => m.role === "tool")?.content;
  return content === undefined ? undefined : JSON.parse(content);
}

/** Any value as JavaScript shows it (Infinity as Infinity, not as JSON's null), cut for a message. */
function shownAs(value: unknown): string {
  const text = Deno.inspect(value, { depth: 4, compact: true, breakLength: Infinity });
  return text.length > 60 ? `${text.slice(0, 40)}... (${text.length} characters)` : text;
}

/** A value as JSON, cut for a table cell. */
function cut(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 40)}... (${text.length} characters)` : text;
}

/** Every row on one store, each under a run id of its own. */
export async function tryAll(
  client: Client,
  cases: readonly ValueCase[] = VALUE_CASES,
): Promise<Observed[]> {
  const out: Observed[] = [];
  for (const [i, c] of cases.entries()) out.push(await tryCase(client, c, `value-${i}`));
  return out;
}

/** The table, in Markdown: one row per case, what happened on each store, and the model requests paid. */
export function valueTable(
  cases: readonly ValueCase[],
  results: { pglite: Observed[]; postgres?: Observed[] },
): string {
  const cell = (o: Observed | undefined) =>
    o === undefined
      ? "(not run)"
      : `${o.outcome}${
        o.storedAs !== undefined && o.outcome !== "stored unchanged" ? `: \`${o.storedAs}\`` : ""
      }${o.problems.length > 0 ? ` **${o.problems.join("; ")}**` : ""}`;
  const lines = [
    "| Value | In | PostgreSQL | PGlite | Model requests |",
    "| --- | --- | --- | --- | --- |",
  ];
  cases.forEach((c, i) => {
    const pg = results.postgres?.[i];
    const lite = results.pglite[i];
    const requests = pg === undefined || pg.requests === lite.requests
      ? String(lite.requests)
      : `${pg.requests} / ${lite.requests}`;
    lines.push(
      `| ${c.name.replaceAll("|", "\\|")} | ${c.where} | ${cell(pg)} | ${cell(lite)} | ${requests} |`,
    );
  });
  return lines.join("\n");
}

/** The usage text of `deno task values`. */
export const VALUES_USAGE = `agent-runtime values: tries every kind of value the database refuses or changes
(in model answers, tool arguments and results, usage reports, run inputs) on PGlite and, with
--database-url, on PostgreSQL, and prints the table the docs show.

usage: deno task values [--database-url URL]

  --database-url URL   a PostgreSQL server; the rows run in a schema of their own, dropped after

exit codes: 0 every row as expected, 1 a row was not, 2 bad arguments`;

async function main(args: string[]): Promise<number> {
  const flags = commandFlags("values", VALUES_USAGE, args, {
    "database-url": { type: "string" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const url = flags.values["database-url"];
  const lite = await connect();
  let pglite: Observed[];
  try {
    pglite = await tryAll(lite);
  } finally {
    await lite.close();
  }
  let postgres: Observed[] | undefined;
  if (url) {
    const sandbox = await createSandbox(url, { prefix: "values" });
    try {
      postgres = await tryAll(new Client(sandbox.store));
    } finally {
      await sandbox.drop();
    }
  }
  console.log(valueTable(VALUE_CASES, { pglite, postgres }));
  const bad = VALUE_CASES.filter((c, i) =>
    [pglite[i], postgres?.[i]].some((o) =>
      o !== undefined &&
      (o.outcome !== c.expect || o.requests !== expectedRequests(c) || o.problems.length > 0)
    )
  );
  for (const c of bad) console.error(`values: unexpected for ${c.name} (${c.where}): expected ${c.expect}`);
  return bad.length > 0 ? 1 : 0;
}

if (import.meta.main) Deno.exitCode = await main(Deno.args);
