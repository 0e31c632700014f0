/**
 * Evaluations (`runEval`, `deno task eval`; docs/fork.md): cases (inputs, or
 * recorded runs forked at a step) times variants (an agent, a model, request
 * parameters), each pair one dry run (no call of a tool that acts on the
 * world is sent), scored by the user's scorers, reported per variant. Each
 * case run's id is derived from the evaluation's id, the variant and the
 * case, so an evaluation killed half-way and started again finds the runs it
 * made and ends with the same table. A budget is split among the case runs
 * as each one's ceilings, so the runtime itself keeps the spend within it.
 *
 * @module
 */

import type { Agent, AgentContext } from "../runtime/agent/agent.ts";
import type { Budget } from "../runtime/agent/budget.ts";
import { checkInput } from "../runtime/agent/agent.ts";
import { ClientError, hasCode } from "../runtime/base/errors.ts";
import type { Json } from "../runtime/base/values.ts";
import type { Client } from "../runtime/client/client.ts";
import type { Planner } from "../runtime/model/planner.ts";
import type { ModelParams } from "../runtime/model/transcript.ts";
import type { RunRow } from "../runtime/store/rows.ts";
import { RUN_ID_PATTERN } from "../runtime/base/ids.ts";
import { answerTokens, rowTokens } from "../runtime/agent/budget.ts";

/** One case: an input, or a recorded run forked at a step (0: decided anew from its input). */
export type EvalCase =
  | { name: string; input: unknown; expected?: string }
  | { name: string; from: string; atSeq?: number; expected?: string };

/** One variant: what decides the case runs. Each field left out is the case's own (its agent, its model). */
export interface EvalVariant {
  /** A short name (letters, digits, `_`; it is part of each case run's id). */
  name: string;
  /** The agent; default the evaluation's. */
  agent?: Agent;
  /** The model's name (`modelParams.model`). */
  model?: string;
  /** Request parameters. */
  modelParams?: ModelParams;
  /** What a million tokens cost, for the COST column; default 0. */
  costPerMTokens?: number;
}

/** What a scorer is shown of one case run. */
export interface CaseRun {
  /** The case's name. */
  case: string;
  /** The variant's name. */
  variant: string;
  /** The case run's id. */
  runId: string;
  /** Where it ended: done, failed, blocked (a call no record or stub could answer), ... */
  status: string;
  /** Its answer, or null. */
  output: string | null;
  /** Why it failed or blocked, or null. */
  error: string | null;
  /** The expected answer the case gives, or the recorded run's answer. */
  expected: string | null;
  /**
   * Tokens of the answers that decided its own steps (the copied ones cost it
   * none): the same for a case run a crash interrupted as for one that ran
   * through. What it paid besides (answers lost to a crash, refused, re-asked)
   * is in {@link CaseRun.spent}.
   */
  tokens: number;
  /** Tokens it paid, as its budget counts them: every answer and outstanding reservation. */
  spent: number;
  /** Its own decisions. */
  steps: number;
  /** Its cost, by the variant's `costPerMTokens`. */
  cost: number;
  /** From its creation to its last change, in ms. */
  timeMs: number;
}

/** A scorer's verdict: a boolean, or one with a note for the table. */
export type Score = boolean | { pass: boolean; note?: string };

/** A scorer: a name (a column of the table) and a function of a case run. */
export interface Scorer {
  /** Its column. */
  name: string;
  /** Judges one case run. */
  score(run: CaseRun): Score | Promise<Score>;
}

/** What {@link runEval} takes. */
export interface EvalSpec {
  /** The evaluation's id: its case runs are `<id>-<variant>-<n>`. */
  id: string;
  /** The agent of the cases from inputs, and of each variant that names none. */
  agent: Agent;
  /** The cases. */
  cases: readonly EvalCase[];
  /** The variants. */
  variants: readonly EvalVariant[];
  /** The scorers: a case run passes when every one says so. */
  scorers: readonly Scorer[];
  /** A cap on the whole evaluation's spend, split evenly among its case runs as their ceilings. */
  budget?: Budget;
  /** Host the agents in this process while it runs (default true); false: other workers run the cases. */
  host?: boolean;
  /** How long to wait for each case run, in ms (default 120 000). */
  timeoutMs?: number;
  /** What the hosted agents' tools and models are built with (the worker's `context`). */
  context?: Partial<AgentContext>;
}

/** One variant's line of the table. */
export interface VariantRow {
  /** The variant. */
  variant: string;
  /** Its case runs. */
  cases: number;
  /** Those every scorer passed. */
  passed: number;
  /** Passed per scorer, by name. */
  byScorer: Record<string, number>;
  /** Tokens its case runs spent. */
  tokens: number;
  /** Their cost. */
  cost: number;
  /** Their own decisions. */
  steps: number;
  /** Their time, created to last update, in ms (not part of {@link tableLines}: a resumed one differs). */
  timeMs: number;
}

/** What an evaluation reports. */
export interface EvalReport {
  /** The evaluation. */
  id: string;
  /** One line per variant, in the spec's order. */
  variants: VariantRow[];
  /** Every case run with its scores. */
  runs: (CaseRun & { passed: boolean; scores: Record<string, Score> })[];
  /** What the case runs paid (as their budgets count it: answers lost to a crash included), and the cap. */
  spend: { tokens: number; budget?: Budget };
}

/** The id of a case run: `<eval>-<variant>-<n>` (n from 1), checked by the run id rule. */
export function caseRunId(evalId: string, variant: string, n: number): string {
  const id = `${evalId}-${variant}-${n}`;
  if (!RUN_ID_PATTERN.test(id)) {
    throw new ClientError(
      "EVAL_INVALID",
      `Case run id ${
        JSON.stringify(id)
      } breaks the run id rule (letters, digits, '.', '_', '@', '-', at most ` +
        `64): choose a shorter evaluation id or variant name`,
    );
  }
  return id;
}

/**
 * Runs the evaluation `spec` on `client` (see the module): makes each case
 * run it has not made yet, waits for each, scores it, and reports. Calling
 * it again with the same spec (after a crash) makes no run twice.
 */
export async function runEval(client: Client, spec: EvalSpec): Promise<EvalReport> {
  checkSpec(spec);
  const agents = [
    ...new Map([spec.agent, ...spec.variants.flatMap((v) => v.agent ?? [])].map((a) => [a.name, a]))
      .values(),
  ];
  const worker = spec.host === false ? undefined : await client.startWorker(agents, {
    pollMs: 50,
    ...(spec.context ? { context: spec.context } : {}),
  });
  try {
    const share = shareOf(spec.budget, spec.cases.length * spec.variants.length);
    const pairs = spec.variants.flatMap((variant) =>
      spec.cases.map((c, i) => ({ variant, c, runId: caseRunId(spec.id, variant.name, i + 1) }))
    );
    for (const p of pairs) await makeCaseRun(client, spec, p, share);
    const runs = [];
    for (const p of pairs) {
      await client.wait(p.runId, { timeoutMs: spec.timeoutMs ?? 120_000, pollMs: 50 });
      runs.push(await scored(client, spec, p));
    }
    return reportOf(spec, runs);
  } finally {
    await worker?.stop();
  }
}

/** Refuses a spec that cannot be run (`EVAL_INVALID`), every problem at once. */
function checkSpec(spec: EvalSpec): void {
  const problems: string[] = [];
  if (spec.cases.length === 0) problems.push("it has no case");
  if (spec.variants.length === 0) problems.push("it has no variant");
  const names = spec.variants.map((v) => v.name);
  if (new Set(names).size !== names.length) problems.push(`two variants share a name (${names.join(", ")})`);
  for (const n of names) {
    if (!/^[A-Za-z0-9_]{1,16}$/.test(n)) {
      problems.push(`variant name ${JSON.stringify(n)} is not 1-16 letters, digits or '_'`);
    }
  }
  if (problems.length > 0) {
    throw new ClientError("EVAL_INVALID", `Cannot run evaluation ${spec.id}: ${problems.join("; ")}`);
  }
}

/** Each case run's ceilings: the evaluation's budget divided among them, rounded down. */
function shareOf(budget: Budget | undefined, runs: number): Budget | undefined {
  if (!budget) return undefined;
  const part = (n?: number) => n === undefined ? undefined : Math.max(1, Math.floor(n / runs));
  const out: Budget = {};
  for (const key of ["tokens", "modelCalls", "toolCalls"] as const) {
    const v = part(budget[key]);
    if (v !== undefined) out[key] = v;
  }
  return out;
}

/** Makes one case run unless an earlier attempt at the evaluation did: a fork of a recorded run, or a dry run of an input. */
async function makeCaseRun(
  client: Client,
  spec: EvalSpec,
  p: { variant: EvalVariant; c: EvalCase; runId: string },
  budget: Budget | undefined,
): Promise<void> {
  const there = await client.store.reads.getRun(p.runId);
  if (there) {
    if (there.eval_id !== spec.id) {
      throw new ClientError(
        "EVAL_INVALID",
        `Run ${p.runId} exists and is not a case of evaluation ${spec.id}`,
      );
    }
    return;
  }
  const params: ModelParams | undefined = p.variant.model === undefined && !p.variant.modelParams
    ? undefined
    : { ...p.variant.modelParams, ...(p.variant.model ? { model: p.variant.model } : {}) };
  if ("from" in p.c) {
    try {
      await client.fork(p.c.from, {
        atSeq: p.c.atSeq ?? 0,
        runId: p.runId,
        evalId: spec.id,
        ...(p.variant.agent ? { agent: p.variant.agent } : {}),
        ...(params ? { modelParams: params } : {}),
        ...(budget ? { budget } : {}),
      });
    } catch (err) {
      if (!hasCode(err, "RUN_EXISTS")) throw err; // made by a racing attempt at the same evaluation
    }
    return;
  }
  const agent = p.variant.agent ?? spec.agent;
  const { input, goal } = checkInput(agent, p.c.input);
  await client.store.forks.startDry({
    runId: p.runId,
    agent: agent.name,
    goal,
    input,
    evalId: spec.id,
    ...(params ? { modelParams: params as Json } : {}),
    ...(budget ? { budget: budget as Json } : {}),
    ...(agent.conversation ? { conversationIdleMs: agent.conversation.idleMs } : {}),
  }, client.clock.now());
}

/** One case run as its scorers see it, scored. */
async function scored(
  client: Client,
  spec: EvalSpec,
  p: { variant: EvalVariant; c: EvalCase; runId: string },
): Promise<EvalReport["runs"][number]> {
  const { run, journal } = await client.reads.inspect(p.runId);
  const own = journal.filter((j) => j.seq >= (run.forked_at_seq ?? 0));
  const spent = own.reduce((n, j) => n + rowTokens(j), 0);
  const tokens = own.filter((j) => j.status === "confirmed").reduce(
    (n, j) => n + answerTokens(j.usage, 0),
    0,
  );
  const caseRun: CaseRun = {
    case: p.c.name,
    variant: p.variant.name,
    runId: p.runId,
    status: run.status,
    output: run.output,
    error: run.error,
    expected: p.c.expected ?? await recordedOutput(client, p.c),
    tokens,
    spent,
    steps: own.filter((j) => j.status === "confirmed").length,
    cost: tokens * (p.variant.costPerMTokens ?? 0) / 1_000_000,
    timeMs: new Date(run.updated_at).getTime() - new Date(run.created_at).getTime(),
  };
  const scores: Record<string, Score> = {};
  for (const s of spec.scorers) scores[s.name] = await s.score(caseRun);
  const passed = Object.values(scores).every((s) => typeof s === "boolean" ? s : s.pass);
  return { ...caseRun, passed, scores };
}

/** The answer of the recorded run a case forks, if it has one. */
async function recordedOutput(client: Client, c: EvalCase): Promise<string | null> {
  if (!("from" in c)) return null;
  return (await client.store.reads.getRun(c.from))?.output ?? null;
}

/** The report: a line per variant, from its case runs. */
function reportOf(spec: EvalSpec, runs: EvalReport["runs"]): EvalReport {
  const variants = spec.variants.map((v): VariantRow => {
    const mine = runs.filter((r) => r.variant === v.name);
    const byScorer: Record<string, number> = {};
    for (const s of spec.scorers) {
      byScorer[s.name] = mine.filter((r) => {
        const x = r.scores[s.name];
        return typeof x === "boolean" ? x : x.pass;
      }).length;
    }
    return {
      variant: v.name,
      cases: mine.length,
      passed: mine.filter((r) => r.passed).length,
      byScorer,
      tokens: mine.reduce((n, r) => n + r.tokens, 0),
      cost: mine.reduce((n, r) => n + r.cost, 0),
      steps: mine.reduce((n, r) => n + r.steps, 0),
      timeMs: mine.reduce((n, r) => n + r.timeMs, 0),
    };
  });
  const tokens = runs.reduce((n, r) => n + r.spent, 0);
  return { id: spec.id, variants, runs, spend: { tokens, ...(spec.budget ? { budget: spec.budget } : {}) } };
}

/**
 * What the evaluation paid, as the case runs' budgets count it (answers lost
 * to a crash and re-asked included, so a resumed evaluation may have paid a
 * little more than one that ran through), against its cap.
 */
export function spendLine(report: EvalReport): string {
  const budget = report.spend.budget?.tokens;
  return `spend: tokens=${report.spend.tokens}${
    budget ? ` of ${budget} budgeted` : ""
  } (every answer paid for, ` +
    `those lost to a crash included)`;
}

/**
 * The table as printed: a line per variant (pass rate, each scorer's passes,
 * tokens, cost, steps), then each case whose answers differ between the
 * variants or from what was expected, with each variant's answer. The same
 * for an evaluation resumed after a crash as for one that ran through.
 */
export function tableLines(report: EvalReport): string[] {
  const scorerNames = Object.keys(report.variants[0]?.byScorer ?? {});
  const head = [
    "VARIANT",
    "CASES",
    "PASSED",
    "PASS_RATE",
    ...scorerNames.map((s) => s.toUpperCase()),
    "TOKENS",
    "COST",
    "STEPS",
  ];
  const rows = report.variants.map((v) => [
    v.variant,
    String(v.cases),
    String(v.passed),
    `${v.cases === 0 ? 0 : Math.round((100 * v.passed) / v.cases)}%`,
    ...scorerNames.map((s) => String(v.byScorer[s])),
    String(v.tokens),
    v.cost.toFixed(4),
    String(v.steps),
  ]);
  const widths = head.map((_, i) => Math.max(...[head, ...rows].map((r) => r[i].length)));
  const line = (r: string[]) => r.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd();
  const out = [`eval ${report.id}  runs=${report.runs.length}`, line(head), ...rows.map(line)];
  return [...out, ...differenceLines(report)];
}

/**
 * Each case whose variants answered differently, or not as expected: the
 * cases alike are said once (how many, the first names), with each variant's
 * status and answer; a case's runs are `<eval>-<variant>-<n>`.
 */
function differenceLines(report: EvalReport): string[] {
  const byCase = new Map<string, EvalReport["runs"]>();
  for (const r of report.runs) byCase.set(r.case, [...(byCase.get(r.case) ?? []), r]);
  const clip = (t: string | null) =>
    t === null ? "-" : JSON.stringify(t.length > 60 ? `${t.slice(0, 59)}…` : t);
  const alike = new Map<string, string[]>();
  for (const [name, runs] of byCase) {
    const answers = new Set(runs.map((r) => `${r.status}:${r.output}`));
    if (answers.size === 1 && runs.every((r) => r.passed && r.output === r.expected)) continue;
    const shown = [
      `expected=${clip(runs[0].expected)}`,
      ...runs.map((r) => `  ${r.variant}  ${r.status}${r.passed ? "" : " FAIL"}  ${clip(r.output)}`),
    ].join("\n");
    alike.set(shown, [...(alike.get(shown) ?? []), name]);
  }
  const out: string[] = [];
  for (const [shown, names] of alike) {
    const listed = names.length > 3 ? `${names.slice(0, 3).join(", ")}, ...` : names.join(", ");
    const [expected, ...variants] = shown.split("\n");
    out.push(`${names.length === 1 ? "case" : `${names.length} cases`} ${listed}  ${expected}`, ...variants);
  }
  return out;
}

/** The scorers that ship ({@link scorers}). */
export interface Scorers {
  /** The answer is the expected one (the case's, or the recorded run's). */
  exact(): Scorer;
  /** The answer holds `text`. */
  contains(text: string, name?: string): Scorer;
  /** The run spent at most these of its own. */
  within(bounds: { tokens?: number; steps?: number; cost?: number }, name?: string): Scorer;
  /** A model as judge, through a planner: passes when it answers "yes". */
  judge(planner: Planner, criterion: string, name?: string): Scorer;
}

/** Scorers that ship: exact and contained answers, a model as judge, bounds on cost and steps. */
export const scorers: Scorers = {
  /** The answer is the expected one (the case's, or the recorded run's). */
  exact(): Scorer {
    return { name: "exact", score: (r) => r.status === "done" && r.output === r.expected };
  },
  /** The answer holds `text`. */
  contains(text: string, name = "contains"): Scorer {
    return { name, score: (r) => r.status === "done" && (r.output ?? "").includes(text) };
  },
  /** The run spent at most `tokens` and `steps` of its own. */
  within(bounds: { tokens?: number; steps?: number; cost?: number }, name = "within"): Scorer {
    return {
      name,
      score: (r) =>
        (bounds.tokens === undefined || r.tokens <= bounds.tokens) &&
        (bounds.steps === undefined || r.steps <= bounds.steps) &&
        (bounds.cost === undefined || r.cost <= bounds.cost),
    };
  },
  /**
   * A model as judge, through a planner: asked whether the answer meets
   * `criterion`, it passes when its answer starts with "yes". Its requests
   * are the evaluation process's own (not journaled: a resumed evaluation
   * asks again).
   */
  judge(planner: Planner, criterion: string, name = "judge"): Scorer {
    return {
      name,
      score: async (r) => {
        const asked = await planner.decide({
          runId: r.runId,
          seq: 0,
          transcript: [
            { role: "system", text: "You judge an agent's answer. Reply yes or no, then why." },
            {
              role: "user",
              text: `Criterion: ${criterion}\nExpected: ${r.expected ?? "-"}\nAnswer: ${r.output ?? "-"}`,
            },
          ],
          tools: [],
        });
        const text = asked.kind === "done" ? asked.text : "";
        return { pass: /^\s*yes\b/i.test(text), note: text.slice(0, 80) };
      },
    };
  },
};

/**
 * Recorded runs of `agent` as cases, forked at `atSeq`: those done between
 * `since` and `until`, oldest first, at most `limit`; forks and evaluations'
 * own runs are left out.
 */
export async function recordedCases(
  client: Client,
  opts: { agent: string; since?: Date; until?: Date; atSeq?: number; limit?: number },
): Promise<EvalCase[]> {
  const found: RunRow[] = [];
  for (let offset = 0;; offset += 200) {
    const { runs } = await client.reads.list({ agent: opts.agent, status: "done", limit: 200, offset });
    found.push(...runs);
    if (runs.length < 200) break;
  }
  const inWindow = found.filter((r) =>
    !r.forked_from && !r.eval_id && !r.dry_run &&
    (opts.since === undefined || new Date(r.created_at) >= opts.since) &&
    (opts.until === undefined || new Date(r.created_at) < opts.until)
  ).sort((a, b) =>
    new Date(a.created_at).getTime() - new Date(b.created_at).getTime() || (a.run_id < b.run_id ? -1 : 1)
  );
  return inWindow.slice(0, opts.limit ?? inWindow.length).map((r) => ({
    name: r.run_id,
    from: r.run_id,
    atSeq: opts.atSeq ?? 0,
  }));
}
