/**
 * Versions: the statements that keep track of which version of its agent
 * drives each run (agent/version.ts). Workers register the versions they
 * host, in the order each is first seen; a worker of a newer version marks the
 * open runs that may move to it; an operator moves runs between versions; a
 * worker that cannot carry a moved run's decided step sends it back; and the
 * commands read which versions live workers host, and the runs a replay check
 * reads. A move itself is recorded by the claim that takes the run
 * (claims.ts), fenced like every claim.
 *
 * @module
 */

import type { SqlClient } from "./driver.ts";
import type { Fence } from "./rows.ts";
import { queryRows, RUNNING_AT, runWrite, statement, ts } from "./sql.ts";

// The statuses of a run that may still decide: what marks and moves touch.
const MOVABLE_STATUSES = `('pending', 'running', 'waiting', 'blocked')`;

// The versions $1 (`agent@version` each) written down at $2 if new, and every
// known version of their agents with the order it was first seen in. A
// statement's own insert is not visible to its reads, so those are added.
const REGISTER_VERSIONS = statement(
  "register-versions",
  `with given as (select split_part(k, '@', 1) as agent, split_part(k, '@', 2) as version
                    from unnest($1::text[]) k),
       added as (insert into agent_versions (agent, version, first_seen_at)
                 select agent, version, $2::timestamptz from given
                 on conflict (agent, version) do nothing
                 returning agent, version, seen_order)
       select agent, version, seen_order from agent_versions where agent in (select agent from given)
       union all
       select agent, version, seen_order from added
       order by agent, seen_order`,
);
// Versions of agent $1 not seen after $2 (a version never registered counts as older than any).
const SEEN_SINCE = `(select version from agent_versions
                       where agent = $1
                         and seen_order >= (select seen_order from agent_versions where agent = $1 and version = $2))`;
// The open runs of agent $1 that may move and stand at a version older than $2
// are to move to $2 at their next decision; not one that $2 already could not
// carry (move_refused), nor one an operator has asked to move elsewhere.
// Found through runs_movable.
const MARK_MOVES = statement(
  "mark-moves",
  `update runs set move_to = $2
        where agent = $1 and may_move and status in ${MOVABLE_STATUSES}
          and agent_version is not null and agent_version not in ${SEEN_SINCE}
          and move_to is null and move_refused is distinct from $2
        returning run_id`,
);
// An operator's move: the open runs of agent $1 (at version $3, and the run
// $4, when given) are to move to $2 at their next decision; a run at $2 whose
// move elsewhere was asked stays. A refusal by $2 is forgotten: asked again.
const REQUEST_MOVE = statement(
  "request-move",
  `update runs set move_to = case when agent_version = $2 then null else $2 end, move_refused = null,
              updated_at = $5::timestamptz
        where agent = $1 and status in ${MOVABLE_STATUSES}
          and ($3::text is null or agent_version = $3) and ($4::text is null or run_id = $4)
          and (agent_version is distinct from $2 or move_to is not null)
        returning run_id, agent_version`,
);
// A worker of the version a run moved to could not carry its decided step:
// the run goes back to the version it came from ($3), pending for a worker of
// it, with why ($5) and who refused ($4). Fenced on the epoch of that claim.
const MOVE_BACK = statement(
  "move-back",
  `update runs set agent_version = $3, moved_from = null, moved_at = null, moved_epoch = null, move_to = null, move_refused = $4,
              status = 'pending', heartbeat_at = null, error = $5, updated_at = $6::timestamptz
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);
// A holder lets a run go for a worker of the version it is to move to: pending, no lease.
const RELEASE_FOR_MOVE = statement(
  "release-for-move",
  `update runs set status = 'pending', heartbeat_at = null, updated_at = $3::timestamptz
        where run_id = $1 and ${RUNNING_AT("$2")}`,
);
const LIVE_KEYS = statement(
  "live-take-keys",
  `select distinct unnest(take_keys) as key from workers where heartbeat_at >= $1::timestamptz order by 1`,
);
const VERSION_ORDER = statement(
  "version-order",
  `select version, seen_order from agent_versions where agent = $1 order by seen_order`,
);
// The runs a replay check reads: the open runs of agent $1 (up to $2), and the
// $3 finished most recently.
const RUNS_TO_CHECK = statement(
  "runs-to-check",
  `(select run_id, agent_version, status from runs where agent = $1 and status in ${MOVABLE_STATUSES}
     order by created_at, run_id limit $2)
   union all
   (select run_id, agent_version, status from runs where agent = $1 and status in ('done', 'failed', 'cancelled')
     order by updated_at desc, run_id limit $3)`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const VERSION_STATEMENTS = [
  REGISTER_VERSIONS,
  MARK_MOVES,
  REQUEST_MOVE,
  MOVE_BACK,
  RELEASE_FOR_MOVE,
  LIVE_KEYS,
  VERSION_ORDER,
  RUNS_TO_CHECK,
] as const;

/** A version of an agent and where it stands among the others: a higher `seen_order` was seen later. */
export interface KnownVersion {
  /** The agent. */
  agent: string;
  /** The version. */
  version: string;
  /** Its place in the order the versions were first seen. */
  seen_order: number;
}

/** A run a replay check reads. */
export interface RunToCheck {
  /** The run. */
  run_id: string;
  /** Its version (null: never taken). */
  agent_version: string | null;
  /** Its status. */
  status: string;
}

/** Which versions drive runs, which workers host them, and the moves between them. */
export class Versions {
  readonly #client: SqlClient;

  /** Sends its statements through `client`. */
  constructor(client: SqlClient) {
    this.#client = client;
  }

  /**
   * Writes down the versions `keys` (`agent@version` each) a worker hosts,
   * those not seen before as seen at `now`, and returns every known version
   * of their agents, oldest first.
   */
  async register(keys: readonly string[], now: Date): Promise<KnownVersion[]> {
    const rows = await queryRows<KnownVersion>(this.#client, REGISTER_VERSIONS, [keys, ts(now)]);
    return rows.map((r) => ({ ...r, seen_order: Number(r.seen_order) }));
  }

  /** The known versions of `agent`, oldest first. */
  async order(agent: string): Promise<KnownVersion[]> {
    const rows = await queryRows<{ version: string; seen_order: number }>(this.#client, VERSION_ORDER, [
      agent,
    ]);
    return rows.map((r) => ({ agent, version: r.version, seen_order: Number(r.seen_order) }));
  }

  /**
   * A worker of `agent` at `version`: the open runs that may move and stand
   * at an older version are to move to it at their next decision (see
   * MARK_MOVES for the ones left alone). Returns them.
   */
  async markMoves(agent: string, version: string): Promise<string[]> {
    const rows = await queryRows<{ run_id: string }>(this.#client, MARK_MOVES, [agent, version]);
    return rows.map((r) => r.run_id).sort();
  }

  /**
   * An operator's move: the open runs of `agent` (at `from`, and `runId`, when
   * given) are to move to `to` at their next decision, whether their agent
   * lets them move or not. Returns each with the version it is at.
   */
  async requestMove(
    move: { agent: string; to: string; from?: string; runId?: string },
    now: Date,
  ): Promise<{ run_id: string; agent_version: string | null }[]> {
    const rows = await queryRows<{ run_id: string; agent_version: string | null }>(
      this.#client,
      REQUEST_MOVE,
      [
        move.agent,
        move.to,
        move.from ?? null,
        move.runId ?? null,
        ts(now),
      ],
    );
    return rows.map(({ run_id, agent_version }) => ({ run_id, agent_version })).sort((a, b) =>
      a.run_id < b.run_id ? -1 : 1
    );
  }

  /**
   * A worker that took a run at `refusedBy`, moved from `back`, and cannot
   * carry its decided step: the run goes back to `back`, pending, with
   * `reason`. Fenced on the claim's epoch; false when the run is no longer held so.
   */
  async moveBack(f: Fence, back: string, refusedBy: string, reason: string, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, MOVE_BACK, [f.runId, f.epoch, back, refusedBy, reason, ts(now)])) ===
      1;
  }

  /**
   * A holder lets a run go, pending, for a worker of the version it is to
   * move to. Fenced on the holder's epoch; false when the run is no longer held so.
   */
  async releaseForMove(f: Fence, now: Date): Promise<boolean> {
    return (await runWrite(this.#client, RELEASE_FOR_MOVE, [f.runId, f.epoch, ts(now)])) === 1;
  }

  /** The take keys (`agent@version`) of the workers whose heartbeat is newer than `staleBefore`. */
  async liveKeys(staleBefore: Date): Promise<string[]> {
    const rows = await queryRows<{ key: string }>(this.#client, LIVE_KEYS, [ts(staleBefore)]);
    return rows.map((r) => r.key);
  }

  /** The runs of `agent` a replay check reads: up to `open` open ones, oldest first, and the `finished` latest. */
  async runsToCheck(agent: string, limits: { open: number; finished: number }): Promise<RunToCheck[]> {
    const rows = await queryRows<RunToCheck>(this.#client, RUNS_TO_CHECK, [
      agent,
      limits.open,
      limits.finished,
    ]);
    return rows.map(({ run_id, agent_version, status }) => ({ run_id, agent_version, status }));
  }
}
