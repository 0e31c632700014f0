/**
 * The take rules a worker host polls by (`TAKE_SHARE`,
 * `WorkerOptions.takeShare`), declared once: a leaf, so the settings reader
 * and the host both read it.
 *
 * - `fair` (the default): a poll takes no more than the host's share of each
 *   agent's work, by capacity, among the live workers hosting that agent (the
 *   store's `takeShare`); runs of an agent no live peer hosts fill every free
 *   slot, as with a host alone.
 * - `all`: a poll takes a run for every free slot, whoever else is polling.
 *
 * @module
 */

/** Every take rule. */
export const TAKE_SHARES = ["fair", "all"] as const;

/** One of {@link TAKE_SHARES}. */
export type TakeShare = typeof TAKE_SHARES[number];
