/**
 * Forks: a new run whose steps before a seq are another run's, copied under
 * its own keys in one statement (nothing sent again, no model asked), and
 * the look-up a fork that sends nothing makes for a call: the original's
 * recorded result for the same tool and arguments. Also a run started
 * sending nothing, with no original (an evaluation's case from a file of
 * inputs). See docs/fork.md.
 *
 * @module
 */

import type { Json } from "../base/values.ts";
import type { SqlClient } from "./driver.ts";
import type { Fence, SideEffectRow } from "./rows.ts";
import { FENCE, jsonParam, queryRows, statement, textParam, ts } from "./sql.ts";

/** What {@link Forks.fork} writes: the new run and where it forks from. */
export interface NewFork {
  /** The fork's run id. */
  runId: string;
  /** The run it is a fork of. */
  from: string;
  /** The first step it decides itself: the original's steps (and their calls) before it are copied. */
  atSeq: number;
  /** The agent that drives it; undefined: the original's. */
  agent?: string;
  /** Its own model parameters (the original's with the fork's over them); undefined: none. */
  modelParams?: Json;
  /** True: calls of tools that act on the world are not sent (answered from the record or a stub). */
  dryRun: boolean;
  /** The evaluation it is a case of, if any. */
  evalId?: string;
  /** Its own input and goal (a fork at step 0 only); undefined: the original's. */
  given?: { input: Json; goal: string };
  /** Its own ceilings (an evaluation's share of its budget); undefined: the original's. */
  budget?: Json;
}

/** What a fork's one statement wrote. */
export interface ForkWritten {
  /** False when a run with the fork's id existed already: nothing was written. */
  created: boolean;
  /** Steps copied. */
  journal: number;
  /** Calls copied. */
  effects: number;
  /** A conversation's messages copied. */
  messages: number;
}

/** A run started sending nothing, with no original: what {@link Forks.startDry} writes. */
export interface NewDryRun {
  /** Its run id. */
  runId: string;
  /** Its agent. */
  agent: string;
  /** What the model is told. */
  goal: string;
  /** The input as given. */
  input: Json;
  /** Its own model parameters, if any. */
  modelParams?: Json;
  /** A conversation's idle limit, if its agent converses. */
  conversationIdleMs?: number;
  /** The evaluation it is a case of, if any. */
  evalId?: string;
  /** Its ceilings, if any. */
  budget?: Json;
}

// The messages a fork of a conversation at $3 starts with: each one answered by a step before $3, and the
// one being answered at $3 (its answer not copied). Message 0 is copied only answered: its row is written
// with its answer (ANSWER_MESSAGE), and a fork answering it anew starts from its goal as a fresh run does.
const MESSAGES_BEFORE = `select m.seq, m.message_id, m.text, m.created_at,
              case when m.answer_seq < $3 then m.answer_seq end as answer_seq,
              case when m.answer_seq < $3 then m.answered_at end as answered_at
         from messages m
        where m.run_id = $2
          and (m.answer_seq < $3
               or (m.seq > 0 and m.seq = (select min(n.seq) from messages n
                                           where n.run_id = $2 and (n.answer_seq is null or n.answer_seq >= $3))))`;

// $1 the fork, $2 the original, $3 the seq it forks at, $4 now, $5 its agent (null: the original's), $6 its
// model parameters, $7 dry run, $8 its evaluation, $9 its goal and $10 its input, $11 its budget (null: the
// original's). One statement: the run, its copied steps and calls, a
// conversation's messages, all or nothing; a fork id taken already writes nothing. The copies record no
// model request, token or request of their own (llm_attempts, spent_tokens, attempts 0: the fork paid for
// none); a copied call confirmed is remote 'original', under the fork's own key.
const FORK_RUN = statement(
  "fork-run",
  `with src as (select * from runs where run_id = $2),
       msgs as (${MESSAGES_BEFORE}),
       run as (
         insert into runs (run_id, agent, goal, input, budget, model_params, status, epoch, created_at,
                           updated_at, conversation_idle_ms, message_count, labels, forked_from, forked_at_seq,
                           dry_run, eval_id)
         select $1, coalesce($5, src.agent), coalesce($9, src.goal),
                case when $9::text is null then src.input else $10::text::jsonb end,
                coalesce($11::text::jsonb, src.budget), $6::text::jsonb, 'pending', 0,
                $4::timestamptz, $4::timestamptz, src.conversation_idle_ms,
                case when src.conversation_idle_ms is null then 0
                     else greatest(1, coalesce((select max(seq) + 1 from msgs), 1)) end,
                src.labels, $2, $3, $7, $8
           from src
         on conflict (run_id) do nothing
         returning run_id),
       j as (
         insert into journal (run_id, seq, status, decision, llm_attempts, usage, rejections, epoch, intent_at,
                              confirmed_at, reserved_tokens, spent_tokens, params)
         select $1, seq, status, decision, 0, usage, rejections, 0, intent_at, confirmed_at, 0, 0, params
           from journal where run_id = $2 and seq < $3 and exists (select 1 from run)
         returning 1),
       e as (
         insert into side_effects (idempotency_key, run_id, seq, tool, args, status, result, remote, error,
                                   attempts, epoch, intent_at, confirmed_at, resolved_by, resolved_at)
         select $1 || ':' || seq, $1, seq, tool, args, status, result,
                case when status = 'confirmed' then 'original' else remote end, error, 0, 0, intent_at,
                confirmed_at, resolved_by, resolved_at
           from side_effects where run_id = $2 and seq < $3 and exists (select 1 from run)
         returning 1),
       m as (
         insert into messages (run_id, seq, message_id, text, created_at, answer_seq, answered_at)
         select $1, seq, message_id, text, created_at, answer_seq, answered_at
           from msgs where exists (select 1 from run)
         returning 1)
  select exists (select 1 from run) as created, (select count(*) from j)::int as journal,
         (select count(*) from e)::int as effects, (select count(*) from m)::int as messages`,
);

// $1 run, $2 agent, $3 goal, $4 input, $5 now, $6 model parameters, $7 a conversation's idle limit, $8 its
// evaluation, $9 its budget: a fresh pending run that sends no call of a tool acting on the world.
const START_DRY = statement(
  "start-dry-run",
  `insert into runs (run_id, agent, goal, input, model_params, status, epoch, created_at, updated_at,
                     conversation_idle_ms, message_count, dry_run, eval_id, budget)
   values ($1, $2, $3, $4::text::jsonb, $6::text::jsonb, 'pending', 0, $5::timestamptz, $5::timestamptz,
           $7::int, case when $7::int is null then 0 else 1 end, true, $8, $9::text::jsonb)
   on conflict (run_id) do nothing
   returning run_id`,
);

// $1 the original, $2 the tool, $3 the arguments: the earliest of its calls with that tool and those
// arguments (compared as jsonb: the same values whatever their order of keys) that was confirmed.
const ORIGINAL_CALL = statement(
  "original-call",
  `select idempotency_key, result from side_effects
    where run_id = $1 and tool = $2 and args = $3::text::jsonb and status = 'confirmed'
    order by seq limit 1`,
);

// $1 run, $2 epoch (fenced), $3 key, $4 seq, $5 tool, $6 args, $7 status ('confirmed' or 'flagged'), $8 result,
// $9 remote ('original' or 'stub'), $10 error, $11 now. A dry run's call, answered without its remote: its row
// written settled at once, no request counted (attempts 0), as nothing was sent and no outcome is unknown. A row
// a person sent back to intent (resolve --retry of a flagged one) is answered again in place.
const DRY_ANSWER = statement(
  "dry-answer",
  `insert into side_effects as se (idempotency_key, run_id, seq, tool, args, status, result, remote, error, attempts,
                                   epoch, intent_at, confirmed_at)
   select $3, $1, $4, $5, $6::text::jsonb, $7, $8::text::jsonb, $9, $10, 0, $2, $11::timestamptz,
          case when $7 = 'confirmed' then $11::timestamptz end
    where ${FENCE}
   on conflict (idempotency_key) do update
      set status = excluded.status, result = excluded.result, remote = excluded.remote, error = excluded.error,
          epoch = excluded.epoch, confirmed_at = excluded.confirmed_at
    where se.status = 'intent'
   returning *`,
);

/** Every statement of this audience. */
export const FORK_STATEMENTS = [FORK_RUN, START_DRY, ORIGINAL_CALL, DRY_ANSWER] as const;

/** How a dry run's call is settled without its remote ({@link Forks.answerDry}). */
export type DryAnswerRow =
  | { status: "confirmed"; result: Json; remote: "original" | "stub" }
  | { status: "flagged"; error: string };

/** Forks and dry runs: written, and looked up in. */
export class Forks {
  readonly #client: SqlClient;

  /** Over one driver. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /** Writes the fork `f` with its copied steps, in one statement; `created` false when its id is taken. */
  async fork(f: NewFork, now: Date): Promise<ForkWritten> {
    const [row] = await queryRows<ForkWritten>(this.#client, FORK_RUN, [
      f.runId,
      f.from,
      f.atSeq,
      ts(now),
      f.agent ?? null,
      f.modelParams === undefined ? null : jsonParam(f.modelParams, "fork model parameters"),
      f.dryRun,
      f.evalId ?? null,
      f.given?.goal ?? null,
      f.given ? jsonParam(f.given.input, "fork input") : null,
      f.budget === undefined ? null : jsonParam(f.budget, "fork budget"),
    ]);
    return row;
  }

  /** Writes a fresh run that sends nothing acting on the world; false when its id is taken. */
  async startDry(r: NewDryRun, now: Date): Promise<boolean> {
    const rows = await queryRows(this.#client, START_DRY, [
      r.runId,
      r.agent,
      r.goal,
      jsonParam(r.input, "run input"),
      ts(now),
      r.modelParams === undefined ? null : jsonParam(r.modelParams, "run model parameters"),
      r.conversationIdleMs ?? null,
      r.evalId ?? null,
      r.budget === undefined ? null : jsonParam(r.budget, "run budget"),
    ]);
    return rows.length === 1;
  }

  /**
   * Writes a dry run's call settled at once (fenced on `f`): confirmed with
   * the original's result or the stub's, or flagged; undefined when the fence
   * refused (or the row is settled already), for the caller to explain.
   */
  async answerDry(
    f: Fence,
    call: { key: string; seq: number; tool: string; args: Json },
    answer: DryAnswerRow,
    now: Date,
  ): Promise<SideEffectRow | undefined> {
    const [row] = await queryRows<SideEffectRow>(this.#client, DRY_ANSWER, [
      f.runId,
      f.epoch,
      call.key,
      call.seq,
      call.tool,
      jsonParam(call.args, "tool arguments"),
      answer.status,
      answer.status === "confirmed" ? jsonParam(answer.result, "tool result") : null,
      answer.status === "confirmed" ? answer.remote : null,
      answer.status === "flagged" ? textParam(answer.error) : null,
      ts(now),
    ]);
    return row;
  }

  /** The original's confirmed call of `tool` with `args`, if it made one: its key and result. */
  async originalCall(
    original: string,
    tool: string,
    args: Json,
  ): Promise<{ idempotency_key: string; result: Json } | undefined> {
    const [row] = await queryRows<{ idempotency_key: string; result: Json }>(
      this.#client,
      ORIGINAL_CALL,
      [original, tool, jsonParam(args, "tool arguments")],
    );
    return row;
  }
}
