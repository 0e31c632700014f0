/**
 * Typed reads of raw settings (flags over the environment), each problem
 * collected as one sentence naming the setting and the value seen, so a
 * command reports them all at once.
 *
 * @module
 */

import { ConfigError } from "../base/errors.ts";
import { DEFAULTS } from "../base/defaults.ts";
import type { LogFormat } from "../base/log.ts";
import { RUN_ID_PATTERN, RUN_ID_SHAPE } from "../base/ids.ts";
import type { RetryPolicy } from "../base/retry.ts";
import { TAKE_SHARES, type TakeShare } from "../base/take_share.ts";
import { parseHostsUrl, redactUrl } from "../base/urls.ts";
import { parseKeyValues } from "../base/http.ts";

/**
 * An integer given as text (a setting or a flag), within [min, max] and
 * exact (a safe integer): the number, or the problem as one sentence naming
 * `name` and the value seen.
 */
export function integerIn(name: string, raw: string, min: number, max: number): number | string {
  const n = Number(raw);
  return /^-?\d+$/.test(raw.trim()) && Number.isSafeInteger(n) && n >= min && n <= max
    ? n
    : `${name} must be an integer from ${min} to ${max}: current value is ${JSON.stringify(raw)}`;
}

/** Collects problems while reading typed values. */
export class SettingsReader {
  readonly problems: string[] = [];
  constructor(readonly values: Record<string, string | undefined>) {}

  /** A string, or the default. */
  str(name: string, fallback: string): string;
  str(name: string): string | undefined;
  str(name: string, fallback?: string): string | undefined {
    return this.values[name] ?? fallback;
  }

  /** An integer within [min, max], or the default. */
  int(name: string, fallback: number, min: number, max: number): number {
    const raw = this.values[name];
    if (raw === undefined) return fallback;
    const n = integerIn(name, raw, min, max);
    if (typeof n === "string") {
      this.problems.push(n);
      return fallback;
    }
    return n;
  }

  /** A number of seconds from `min_s` (default 0.01) to 86400, returned in milliseconds. */
  seconds(name: string, fallback_s: number, min_s = 0.01): number {
    const raw = this.values[name];
    if (raw === undefined) return fallback_s * 1000;
    const n = Number(raw);
    if (raw.trim() === "" || !Number.isFinite(n) || n < min_s || n > 86_400) {
      this.problems.push(
        `${name} must be a number of seconds from ${min_s} to 86400: current value is ${JSON.stringify(raw)}`,
      );
      return fallback_s * 1000;
    }
    return Math.round(n * 1000);
  }

  /** A URL with one of the given protocols. */
  url(name: string, protocols: string[], example: string): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    let ok = false;
    try {
      const u = parseHostsUrl(raw).url;
      ok = protocols.includes(u.protocol) && u.hostname !== "";
      try {
        for (const part of [u.username, u.password, u.pathname]) decodeURIComponent(part);
      } catch {
        this.problems.push(
          `${name} has a malformed percent-escape in its user, password or path (write '%' as '%25'): ` +
            `current value is ${JSON.stringify(redactUrl(raw))}`,
        );
        return undefined;
      }
    } catch {
      ok = false;
    }
    if (!ok) {
      this.problems.push(
        `${name} must be a URL like ${example}: current value is ${JSON.stringify(redactUrl(raw))}`,
      );
      return undefined;
    }
    return raw;
  }

  /** Extra headers or query parameters: a JSON object of strings, or `k=v,k2=v2`. Returned as given. */
  keyValues(name: string, kind: "headers" | "query"): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    try {
      parseKeyValues(raw, kind);
    } catch (err) {
      // The value is not echoed: a header may carry a key.
      this.problems.push(
        `${name} must be a JSON object of strings or name=value pairs separated by commas ` +
          `(e.g. ${kind === "query" ? "api-version=2024-10-21" : '{"api-key":"..."}'}): ${
            (err as Error).message
          }`,
      );
      return undefined;
    }
    return raw;
  }

  /** A run id matching {@link RUN_ID_PATTERN}. */
  runId(name: string): string | undefined {
    const raw = this.values[name];
    if (raw === undefined) return undefined;
    if (!RUN_ID_PATTERN.test(raw)) {
      this.problems.push(
        `${name} must be ${RUN_ID_SHAPE}: current value is ${JSON.stringify(raw)}`,
      );
    }
    return raw;
  }

  /** `MODEL_MAX_TOKENS_FIELD`: unset, `max_tokens` or `max_completion_tokens`. */
  maxTokensField(): "max_tokens" | "max_completion_tokens" | undefined {
    const raw = this.str("MODEL_MAX_TOKENS_FIELD");
    if (raw === undefined || raw === "max_tokens" || raw === "max_completion_tokens") return raw;
    this.problems.push(
      `MODEL_MAX_TOKENS_FIELD must be "max_tokens" or "max_completion_tokens": current value is ${
        JSON.stringify(raw)
      }`,
    );
    return undefined;
  }

  /** `TAKE_SHARE`: `fair` (the default) or `all` (see `WorkerOptions.takeShare`). */
  takeShare(): TakeShare {
    const raw = this.str("TAKE_SHARE", "fair");
    const known = TAKE_SHARES.find((t) => t === raw);
    if (known !== undefined) return known;
    this.problems.push(
      `TAKE_SHARE must be "fair" (each poll takes no more than its share among the live workers) or "all" ` +
        `(every free slot): current value is ${JSON.stringify(raw)}`,
    );
    return "fair";
  }

  /** `LOG_FORMAT`: `text` (the default) or `json`. */
  logFormat(): LogFormat {
    const raw = this.str("LOG_FORMAT", "text");
    if (raw === "text" || raw === "json") return raw;
    this.problems.push(`LOG_FORMAT must be "text" or "json": current value is ${JSON.stringify(raw)}`);
    return "text";
  }

  /** `HEARTBEAT_S` and `LEASE_S` (3 and 12), the heartbeat shorter than the lease. */
  lease(): { heartbeatMs: number; leaseMs: number } {
    const heartbeatMs = this.seconds("HEARTBEAT_S", DEFAULTS.heartbeatMs / 1000);
    const leaseMs = this.seconds("LEASE_S", DEFAULTS.leaseMs / 1000);
    if (heartbeatMs >= leaseMs) {
      this.problems.push(
        `HEARTBEAT_S must be shorter than LEASE_S, or a live worker would look dead: current values are ${
          heartbeatMs / 1000
        } and ${leaseMs / 1000}`,
      );
    }
    return { heartbeatMs, leaseMs };
  }

  /**
   * `RETRY_HORIZON_S` (0 to a week), `RETRY_BACKOFF_MS` (1 to 600 000) and
   * `RETRY_BACKOFF_MAX_S` (0.001 to 3600, no shorter than the first wait):
   * only the ones set, in milliseconds.
   */
  retry(): Partial<RetryPolicy> {
    const out: Partial<RetryPolicy> = {};
    const number = (name: string, min: number, max: number, unit: string): number | undefined => {
      const raw = this.values[name];
      if (raw === undefined) return undefined;
      const n = Number(raw);
      if (raw.trim() === "" || !Number.isFinite(n) || n < min || n > max) {
        this.problems.push(
          `${name} must be a number of ${unit} from ${min} to ${max}: current value is ${
            JSON.stringify(raw)
          }`,
        );
        return undefined;
      }
      return n;
    };
    const horizon = number("RETRY_HORIZON_S", 0, 604_800, "seconds");
    const base = number("RETRY_BACKOFF_MS", 1, 600_000, "milliseconds");
    const cap = number("RETRY_BACKOFF_MAX_S", 0.001, 3_600, "seconds");
    if (horizon !== undefined) out.horizonMs = Math.round(horizon * 1000);
    if (base !== undefined) out.backoffBaseMs = Math.round(base);
    if (cap !== undefined) out.backoffMaxMs = Math.max(1, Math.round(cap * 1000));
    if (base !== undefined && cap !== undefined && out.backoffMaxMs! < out.backoffBaseMs!) {
      this.problems.push(
        `RETRY_BACKOFF_MAX_S must be no shorter than RETRY_BACKOFF_MS: current values are ${cap} s and ${base} ms`,
      );
    }
    return out;
  }

  /** Throws a {@link ConfigError} listing every problem, if there are any. */
  done(): void {
    if (this.problems.length > 0) throw new ConfigError(this.problems);
  }
}
