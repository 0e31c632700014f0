/**
 * Limits shared by the fleet, at the store: a request's reservations taken
 * under its keys before it goes out (`limit_take` in schema.sql, one
 * statement, all or none), released when it ends (settled to what its answer
 * used, a provider's Retry-After holding its keys for everyone), a run let go
 * while it waits for a key, and what the keys hold now, for people.
 *
 * A reservation is held by a run at an epoch: it holds a call in flight only
 * while that run is `running` under that epoch with a live lease, so a worker
 * that dies holds nothing past its lease (nor past the supervisor's release
 * of its runs), and nobody has to clear it.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import type { Fence } from "./rows.ts";
import { jsonParam, queryRows, RUNNING_AT, runWrite, statement, textParam, ts } from "./sql.ts";

// One statement for the take: the function locks the keys, then counts with fresh snapshots (see schema.sql).
const LIMIT_TAKE = statement(
  "limit-take",
  `select granted, ids, key, wake_at, why from limit_take($1::text::jsonb, $2, $3::int, $4::int, $5::timestamptz,
                                                          $6::timestamptz, $7::int)`,
);

// A request ended: its reservations released ($1 ids) and settled to the tokens its answer used ($3, $4;
// null keeps the estimate: an answer lost or refused is counted at it). $5: a provider's Retry-After
// end, holding the keys $6 for the whole fleet (a 429 while held extends the hold and starts none),
// and recorded on the reservations under them with an id drawn under the key's lock (held_after: a
// reservation with a greater id was taken after the hold was in force); without one, a probe that
// ends opens its key again.
// Then of the first $8 waiters in the queue's fair order (limit_queue) of the keys $7 (those with calls
// in flight) or a key opened again, those asleep are woken now ($2): capacity freed. Rows another
// statement holds are skipped, not waited for: a hint never deadlocks a release.
// The reservations are this worker's by id alone, not fenced: a worker fenced off its run holds
// nothing any more, and settling its tokens is only more exact. Waking is a hint, as a parent woken
// by its child is: the run is waiting, and a claim fences whoever takes it.
const LIMIT_RELEASE = statement(
  "limit-release",
  `with held as (
         update limit_keys set hold_until = greatest(coalesce(hold_until, $2::timestamptz), $5::timestamptz),
                probing = true, probe_id = null, updated_at = $2::timestamptz,
                holds = holds + case when hold_until is null or hold_until <= $2::timestamptz then 1 else 0 end
          where $5::timestamptz is not null and key = any($6::text[])
         returning key, nextval(pg_get_serial_sequence('limit_reservations', 'id')) as after),
       released as (
         update limit_reservations r set released_at = $2::timestamptz,
                input_tokens = coalesce($3::int, input_tokens), output_tokens = coalesce($4::int, output_tokens),
                held_until = case when r.key = any($6::text[]) then $5::timestamptz end,
                held_after = (select h.after from held h where h.key = r.key)
          where id = any($1::bigint[]) and released_at is null
         returning key),
       opened as (
         update limit_keys set probing = false, probe_id = null, updated_at = $2::timestamptz
          where $5::timestamptz is null and probe_id = any($1::bigint[])
         returning key),
       woken as (
         update runs set wake_at = $2::timestamptz
          where run_id in (
                  select u.run_id from runs u
                   where u.run_id in (
                           select q.run_id
                             from (select key from opened union select unnest($7::text[])) k
                            cross join lateral limit_queue(k.key) q
                            order by q.place, q.served, q.grp, q.since, q.run_id limit $8::int)
                     and u.status = 'waiting' and u.wake_at > $2::timestamptz
                     for update skip locked)
         returning 1)
       select (select count(*) from released)::int as released, (select count(*) from held)::int as held,
              (select count(*) from woken)::int as woken`,
);

// A run let go while it waits for a key ($3 when it may try again, $5 why), fenced: it holds no slot.
// Waiting for a key is progress of a kind: the claims that found the run asleep on it count as none
// against the bound on claims without progress (stuck_claims), which a busy key would otherwise reach.
const LIMIT_WAIT_RUN = statement(
  "limit-wait-run",
  `update runs set status = 'waiting', wake_at = $3::timestamptz, heartbeat_at = null,
                  updated_at = $4::timestamptz, error = $5, stuck_claims = 0
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);

// Every key, with what it holds now ($1 the time, $2 the lease's stale bound): for `limits` and the page.
const LIST_LIMITS = statement(
  "list-limits",
  `select k.key, k.described, k.hold_until, k.probing, k.holds,
          (select count(*) from limit_reservations r join runs u on u.run_id = r.run_id
            where r.key = k.key and r.released_at is null
              and (u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= $2::timestamptz) is true
          )::int as in_flight,
          (select count(*) from limit_reservations r
            where r.key = k.key and r.taken_at > $1::timestamptz - interval '1 minute')::int as last_minute,
          (select count(*) from limit_waiters w join runs u on u.run_id = w.run_id
            where w.key = k.key and u.status = 'waiting')::int as waiting
     from limit_keys k order by k.key`,
);

// The key each waiting run among $1 waits for, for `runs` and the page.
const WAITING_FOR = statement(
  "limit-waiting-for",
  `select w.run_id, w.key from limit_waiters w where w.run_id = any($1::text[]) order by w.run_id, w.key`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const LIMIT_STATEMENTS = [
  LIMIT_TAKE,
  LIMIT_RELEASE,
  LIMIT_WAIT_RUN,
  LIST_LIMITS,
  WAITING_FOR,
] as const;

/** What one key asks of a take: the key, its limit, and the request's estimate. */
export interface LimitAsk {
  /** `model:<name>`, `provider:<name>`, `tool:<name>` or `label:<name>=<value>`. */
  key: string;
  /** The limit in words, shown to people. */
  described: string;
  /** The value of the limit's `fairBy` label on this run: waiters are served round-robin across them. */
  group?: string;
  /** The per-minute limits' window, in ms (pro rata: 600 a minute over 1 s is 10 in any second). */
  windowMs: number;
  /** Requests in a window, if limited. */
  requests?: number;
  /** Input tokens in a window, if limited. */
  inputTokens?: number;
  /** Output tokens in a window, if limited. */
  outputTokens?: number;
  /** Requests in flight at once, if limited. */
  inFlight?: number;
  /** The request's input tokens, estimated. */
  estimatedInput: number;
  /** The request's output tokens, estimated. */
  estimatedOutput: number;
}

/** Why a take was refused: a hold, the probe after one, a limit reached, or waiters ahead in the queue. */
export type LimitRefusal =
  | "held"
  | "probe"
  | "requests"
  | "input_tokens"
  | "output_tokens"
  | "in_flight"
  | "queue";

/** What a take came to. */
export type LimitTake =
  | { kind: "granted"; ids: string[] }
  | { kind: "refused"; key: string; wakeAt: Date; why: LimitRefusal }
  /** The run is no longer running under the taker's epoch. */
  | { kind: "fenced" };

/** How a request ended, for its release. */
export interface LimitRelease {
  /** Input tokens its answer used; undefined keeps the estimate. */
  inputTokens?: number;
  /** Output tokens its answer used; undefined keeps the estimate. */
  outputTokens?: number;
  /** The provider said when to come back: its keys are held for everyone until then. */
  hold?: { until: Date; keys: readonly string[] };
  /** Keys with calls in flight: their first `count` waiters are woken (the freed call). */
  wake?: { keys: readonly string[]; count: number };
}

/** A key as `limits` and the page show it. */
export interface LimitKeyView {
  /** The key. */
  key: string;
  /** Its limit, as the last take described it. */
  described: string | null;
  /** Held by a provider's Retry-After until then, if so. */
  hold_until: Date | null;
  /** One request goes alone after a hold. */
  probing: boolean;
  /** Holds started so far. */
  holds: number;
  /** Calls in flight now (live reservations). */
  in_flight: number;
  /** Requests taken in the last minute. */
  last_minute: number;
  /** Runs waiting for it. */
  waiting: number;
}

/** Reservations under the fleet's limits: taken, released, waited for, shown. */
export class Limits {
  readonly #client: SqlClient;

  /** Sends its statements through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Takes a reservation under every key of `asks`, all or none, for the
   * request at `seq` of the fenced run (its lease judged stale before
   * `staleBefore`); a refusal says which key, why, and when to try again
   * (`retryMs` on, for calls in flight).
   */
  async take(
    f: Fence,
    seq: number,
    asks: readonly LimitAsk[],
    at: { now: Date; staleBefore: Date; retryMs: number },
  ): Promise<LimitTake> {
    const [row] = await queryRows<
      { granted: boolean; ids: string[] | null; key: string | null; wake_at: Date | null; why: string | null }
    >(this.#client, LIMIT_TAKE, [
      jsonParam(asks.map(askJson), "limit asks"),
      f.runId,
      f.epoch,
      seq,
      ts(at.now),
      ts(at.staleBefore),
      Math.round(at.retryMs),
    ]);
    if (row?.granted) return { kind: "granted", ids: (row.ids ?? []).map(String) };
    if (!row || row.why === "fenced") return { kind: "fenced" };
    return { kind: "refused", key: row.key!, wakeAt: new Date(row.wake_at!), why: row.why as LimitRefusal };
  }

  /** Releases the reservations `ids` as their request ended. */
  async release(ids: readonly string[], now: Date, ended: LimitRelease = {}): Promise<void> {
    await queryRows(this.#client, LIMIT_RELEASE, [
      ids,
      ts(now),
      tokens(ended.inputTokens),
      tokens(ended.outputTokens),
      ended.hold ? ts(ended.hold.until) : null,
      ended.hold?.keys ?? [],
      ended.wake?.keys ?? [],
      ended.wake?.count ?? 0,
    ]);
  }

  /**
   * Lets the fenced run go until `wakeAt`, waiting for a key (`reason` says
   * which, for people); false when it is no longer this worker's.
   */
  async waitRun(f: Fence, wakeAt: Date, reason: string, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, LIMIT_WAIT_RUN, [
      f.runId,
      f.epoch,
      ts(wakeAt),
      ts(now),
      textParam(reason),
    ])) === 1;
  }

  /** Every key with what it holds at `now` (leases stale before `staleBefore` hold nothing). */
  async list(now: Date, staleBefore: Date): Promise<LimitKeyView[]> {
    return await queryRows<LimitKeyView>(this.#client, LIST_LIMITS, [ts(now), ts(staleBefore)]);
  }

  /** The keys each of `runIds` waits for, by run. */
  async waitingFor(runIds: readonly string[]): Promise<Map<string, string[]>> {
    const rows = await queryRows<{ run_id: string; key: string }>(this.#client, WAITING_FOR, [runIds]);
    const by = new Map<string, string[]>();
    for (const r of rows) by.set(r.run_id, [...(by.get(r.run_id) ?? []), r.key]);
    return by;
  }
}

/** An ask as `limit_take` reads it: absent limits left out. */
function askJson(a: LimitAsk): Record<string, unknown> {
  return {
    key: a.key,
    described: a.described,
    ...(a.group === undefined ? {} : { grp: a.group }),
    window_ms: Math.max(1, Math.round(a.windowMs)),
    ...(a.requests === undefined ? {} : { requests: a.requests }),
    ...(a.inputTokens === undefined ? {} : { input_tokens: a.inputTokens }),
    ...(a.outputTokens === undefined ? {} : { output_tokens: a.outputTokens }),
    ...(a.inFlight === undefined ? {} : { in_flight: a.inFlight }),
    est_in: tokens(a.estimatedInput) ?? 0,
    est_out: tokens(a.estimatedOutput) ?? 0,
  };
}

/** A token count as a column holds it: a whole number from 0 to 2^31 - 1, or null. */
function tokens(n: number | undefined): number | null {
  if (n === undefined || !Number.isFinite(n)) return null;
  return Math.min(2_147_483_647, Math.max(0, Math.ceil(n)));
}
