/**
 * Versions: which code a run is driven by. An agent's version is the one its
 * module gives (`defineAgent({ version })`), or a digest of what the model is
 * shown and of its tools' contracts: the instructions, and each tool's name,
 * argument schema and the names it replaces. So a change the model would see,
 * or a tool whose arguments change, is a new version; a change inside a
 * tool's `run` is not (give a version to say it is).
 *
 * A run records the version of the worker that first took it. By default it
 * stays on it (`onNewVersion: "stay"`): only a worker hosting that version
 * takes it. An agent may let its runs move to a newer version at their next
 * decision (`"move"`). Workers say which runs they take by keys
 * `agent@version` ({@link takeKey}; `agent@` for a run no worker has taken).
 *
 * @module
 */

import { createHash } from "node:crypto";
import { describeValue, RuntimeError } from "../base/errors.ts";
import type { Tool } from "./tools.ts";

/** What an agent's runs do when a newer version of it is deployed. */
export const VERSION_POLICIES = ["stay", "move"] as const;

/**
 * What an agent's runs do when a newer version of it is deployed: `stay` on
 * the version that started them (only its workers take them), or `move` to
 * the newer one at their next decision.
 */
export type OnNewVersion = typeof VERSION_POLICIES[number];

/** A version: a letter or digit, then up to 63 letters, digits, `.`, `_`, `+` or `-` (no `@`). */
export const VERSION_PATTERN: RegExp = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/;

/** Hex digits of a digest version: 48 bits, plenty to tell an agent's versions apart. */
const DIGEST_HEX = 12;

/** Checks a version given by hand; returns it. `where` starts the message. */
export function checkVersion(version: unknown, where: string): string {
  if (typeof version !== "string" || !VERSION_PATTERN.test(version)) {
    throw new RuntimeError(
      "AGENT_INVALID",
      `${where}: 'version' must be 1-64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit: ` +
        `current value is ${describeValue(version)}`,
    );
  }
  return version;
}

/** Checks an agent's `onNewVersion`; returns it, `stay` when unset. */
export function checkOnNewVersion(value: unknown, where: string): OnNewVersion {
  if (value === undefined) return "stay";
  if (!(VERSION_POLICIES as readonly unknown[]).includes(value)) {
    throw new RuntimeError(
      "AGENT_INVALID",
      `${where}: 'onNewVersion' must be one of ${VERSION_POLICIES.join(", ")}: current value is ${
        describeValue(value)
      }`,
    );
  }
  return value as OnNewVersion;
}

/**
 * The digest version of an agent: sha-256 of the canonical JSON of its
 * instructions and, for each tool by name, its name, the JSON Schema of its
 * arguments and the names it replaces; the first 12 hex digits.
 */
export function versionDigest(instructions: string, tools: readonly Tool[]): string {
  const contract = {
    instructions,
    tools: [...tools]
      .sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0)
      .map((t) => ({ name: t.name, parameters: t.parameters, replaces: [...(t.replaces ?? [])].sort() })),
  };
  return createHash("sha256").update(canonicalJson(contract)).digest("hex").slice(0, DIGEST_HEX);
}

/** JSON with every object's keys sorted, so one value always gives one text. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(",")}}`;
}

/** The key by which workers take a run of `agent` at `version` (`agent@` for a run no worker has taken). */
export function takeKey(agent: string, version: string | null | undefined): string {
  return `${agent}@${version ?? ""}`;
}

/** An agent and a version, as people read them: `notes@3f2a9c01d4e7`. */
export function versionLabel(agent: string, version: string | null | undefined): string {
  return version ? `${agent}@${version}` : `${agent} (no version yet)`;
}
