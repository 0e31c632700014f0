/**
 * The versions a worker host runs (docs/versions.md): each hosted agent at
 * one version or several (the old module beside the new during a rollout),
 * each with its own dependencies. It says which runs the host takes (take
 * keys: `agent@version`, and `agent@` for runs not started yet), which
 * version a new run is started on (the newest here), and, once the order the
 * versions were first seen in is read, marks the runs of an older version
 * that may move to move to the newest here.
 *
 * @module
 */

import type { RunDeps } from "../run/context.ts";
import type { Logger } from "../base/log.ts";
import type { Store, TakeVersions } from "../store/store.ts";
import { takeKey } from "../agent/version.ts";

/** What a host runs, by version, and the moves it asks for. */
export class HostedVersions {
  /** Each hosted version's worker deps, by take key (`agent@version`). */
  readonly #deps = new Map<string, RunDeps>();
  /** Each hosted agent's newest version here, by name: a run not started yet is started on it. */
  readonly #newest = new Map<string, string>();
  /** The agents of which a version older than the newest here is known: their runs that may move are marked. */
  #olderKnown = new Set<string>();
  #orderKnown = false;
  #markedAtMs = -Infinity;

  /**
   * Hosts `versions`, each an agent at a version (one given twice is hosted
   * once). Until the order versions were first seen in is read
   * ({@link HostedVersions.refresh}), the last given of an agent's versions
   * counts as its newest.
   */
  constructor(versions: readonly RunDeps[]) {
    for (const deps of versions) {
      const key = takeKey(deps.agent, deps.version);
      if (this.#deps.has(key)) continue;
      this.#deps.set(key, deps);
      this.#newest.set(deps.agent, deps.version);
    }
  }

  /** The hosted agents, by name. */
  get agents(): string[] {
    return [...this.#newest.keys()];
  }

  /** The hosted versions, as `agent@version`. */
  get versions(): string[] {
    return [...this.#deps.keys()];
  }

  /** The runs the host takes: each hosted version's, and each agent's not started yet (`agent@`). */
  takeKeys(): string[] {
    return [...this.agents.map((agent) => takeKey(agent, null)), ...this.#deps.keys()];
  }

  /** The versions a take starts runs on (each agent's newest here) and those whose runs may move. */
  takeVersions(): TakeVersions {
    return {
      bind: [...this.#newest].map(([agent, version]) => takeKey(agent, version)),
      movable: [...this.#deps].filter(([, d]) => d.mayMove).map(([key]) => key),
    };
  }

  /**
   * The deps of the version a take left `run` at; the agent's newest here for
   * a run a caller took by bare agent name, which leaves a run not started
   * without a version.
   */
  depsFor(run: { agent: string; agent_version?: string | null }): RunDeps {
    const deps = this.#deps.get(takeKey(run.agent, run.agent_version)) ??
      this.#deps.get(takeKey(run.agent, this.#newest.get(run.agent)));
    if (!deps) throw new RangeError(`No version of agent ${run.agent} is hosted here`);
    return deps;
  }

  /**
   * Writes down the hosted versions (once: so the order they were first seen
   * in is known) and learns each agent's newest here; then, when `mark` and
   * at most once per `markEveryMs`, marks the runs of an older version that
   * may move to move to the newest here.
   */
  async refresh(
    store: Store,
    now: Date,
    opts: { mark: boolean; markEveryMs: number; log: Logger },
  ): Promise<void> {
    if (!this.#orderKnown) {
      const known = await store.versions.register(this.versions, now);
      const order = new Map(known.map((k) => [takeKey(k.agent, k.version), k.seen_order]));
      const seen = (agent: string, version: string) => order.get(takeKey(agent, version)) ?? -1;
      for (const deps of this.#deps.values()) {
        if (seen(deps.agent, deps.version) > seen(deps.agent, this.#newest.get(deps.agent)!)) {
          this.#newest.set(deps.agent, deps.version);
        }
      }
      this.#olderKnown = new Set(
        known.filter((k) => seen(k.agent, k.version) < seen(k.agent, this.#newest.get(k.agent)!)).map((k) =>
          k.agent
        ),
      );
      this.#orderKnown = true;
    }
    const nowMs = now.getTime();
    if (!opts.mark || this.#olderKnown.size === 0 || nowMs - this.#markedAtMs < opts.markEveryMs) return;
    this.#markedAtMs = nowMs;
    for (const agent of this.#olderKnown) {
      const to = this.#newest.get(agent)!;
      const marked = await store.versions.markMoves(agent, to);
      if (marked.length > 0) opts.log.info("moves-marked", { agent, to, runs: marked.length });
    }
  }
}
