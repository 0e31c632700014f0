/**
 * Why an open run waits for a version of its agent (docs/versions.md), as
 * `runs`, `inspect` and the page say it: a run is taken only by a worker
 * hosting its version (or the version it is to move to), and a run no live
 * worker can take stays pending, saying which version it waits for and what
 * would take it.
 *
 * @module
 */

import { takeKey, versionLabel } from "../agent/version.ts";
import type { RunRow } from "../store/store.ts";

/** What {@link versionWait} reads of a run. */
export type VersionedRun = Pick<
  RunRow,
  "run_id" | "agent" | "status" | "heartbeat_at" | "agent_version" | "may_move" | "move_to"
>;

/**
 * Why `run` waits for a worker, when no live worker can take it: `live` is
 * the take keys live workers host (`client.reads.hostedVersions()`); a
 * running run whose heartbeat is older than `staleBefore` counts as let go.
 * Undefined for a run some live worker takes, and for a run no worker would
 * take now anyway (held, closed, asleep, blocked).
 */
export function versionWait(
  run: VersionedRun,
  live: readonly string[],
  staleBefore?: Date,
): string | undefined {
  // Takeable: pending, or running with no lease (let go) or one that lapsed before `staleBefore`.
  const lapsed = !run.heartbeat_at || (staleBefore !== undefined && new Date(run.heartbeat_at) < staleBefore);
  const free = run.status === "pending" || (run.status === "running" && lapsed);
  if (!free) return undefined;
  const hosted = new Set(live);
  const at = run.agent_version ?? null;
  const to = run.move_to ?? null;
  const others = live.filter((k) => k.startsWith(`${run.agent}@`) && k !== takeKey(run.agent, null));
  const liveNote = others.length > 0 ? ` (live: ${others.join(", ")})` : "";
  if (at === null && to === null) {
    return hosted.has(takeKey(run.agent, null))
      ? undefined
      : `no live worker hosts agent ${run.agent}: its runs wait until one does (--agent)`;
  }
  if (to !== null) {
    if (hosted.has(takeKey(run.agent, to))) return undefined;
    return `moving to ${
      versionLabel(run.agent, to)
    }, which no live worker hosts${liveNote}: start a worker ` +
      `with that module, or move it elsewhere (deno task move --agent-name ${run.agent} --to <version> ` +
      `--run ${run.run_id})`;
  }
  if (hosted.has(takeKey(run.agent, at))) return undefined;
  const move = run.may_move
    ? "it may move, and a worker of a newer version moves it"
    : `start a worker with the module of version ${at}, or move it: deno task move --agent-name ${run.agent} ` +
      `--to <version> --run ${run.run_id}`;
  return `on ${versionLabel(run.agent, at)}, which no live worker hosts${liveNote}: ${move}`;
}
