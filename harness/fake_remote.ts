/**
 * `FakeRemote`: a stand-in for any HTTP API a user's tool calls, which records
 * the effects it performs per idempotency key. Point a tool's fetch at
 * {@link FakeRemote.fetch} in a test (or under the fuzzer) and read
 * {@link FakeRemote.effects} afterwards: one effect per key is the promise.
 *
 * Every `POST`, `PUT`, `PATCH` or `DELETE` must carry an `Idempotency-Key`
 * header. The first request under a key performs the effect and gets `201`
 * with `{ "id": "fx-0000001", ...body }`; a later one with the same key and
 * body gets the stored answer again (`200`, header `Idempotent-Replayed:
 * true`), and with another body `422`. `GET` answers `{ "effects": n }`;
 * `GET <any path>?idempotency_key=K` looks one up without performing it: the
 * stored answer (`200`), or `404` when nothing was done under `K`, for a
 * tool's `reconcile` to ask.
 *
 * @example
 * ```ts
 * import { FakeRemote } from "./fake_remote.ts";
 * const remote = new FakeRemote();
 * const send = () =>
 *   remote.fetch(new Request("http://fake/v1/tickets", {
 *     method: "POST",
 *     headers: { "idempotency-key": "run-1:0" },
 *     body: JSON.stringify({ title: "hello" }),
 *   }));
 * await send();
 * const again = await send();
 * console.log(again.headers.get("idempotent-replayed"), remote.effects().length); // "true" 1
 * ```
 *
 * @module
 */

import { canonicalJson } from "../mock/canonical_json.ts";
import { droppedResponse, errorResponse, garbageResponse, jsonResponse } from "../mock/http_response.ts";
import type { FetchLike } from "../runtime/model/planner.ts";

/** One effect the fake performed: the first request under its key. */
export interface FakeEffect {
  /** The `Idempotency-Key` it was performed under. */
  key: string;
  /** The request's method and path, e.g. `POST /v1/tickets`. */
  what: string;
  /** The id the fake gave it, e.g. `fx-0000001`. */
  id: string;
  /** The request body as JSON (`null` when it had none or it was not JSON). */
  body: unknown;
}

/**
 * Misbehaviour for the next requests, like the mock cloud's knobs. Per
 * request the first positive counter wins, in this order, and is spent.
 */
export interface FakeRemoteFaults {
  /** The next N requests get `fail_status` (default 503) and do nothing. */
  fail_next?: number;
  /** Status of `fail_next` answers. */
  fail_status?: number;
  /** The next N requests never answer until the caller aborts, and do nothing. */
  hang_next?: number;
  /** The next N requests get a 200 whose body is not JSON, and do nothing. */
  garbage_next?: number;
  /** The next N requests perform the effect, but the answer is lost (the body errors). */
  drop_after_act_next?: number;
}

interface Stored {
  effect: FakeEffect;
  canonical: string;
  answer: string;
}

/** A fake HTTP remote that performs one effect per idempotency key and records it. */
export class FakeRemote {
  #byKey = new Map<string, Stored>();
  #order: FakeEffect[] = [];
  #requests = new Map<string, number>();
  #faults: FakeRemoteFaults = {};
  #nextId = 1;

  /** Answers one request; pass it wherever a tool takes a `fetch`. */
  readonly fetch: FetchLike = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    if (req.method === "GET") {
      const lookup = url.searchParams.get("idempotency_key");
      if (lookup === null) return jsonResponse(200, { effects: this.#order.length });
      const found = this.#byKey.get(lookup);
      return found
        ? jsonResponse(200, found.answer)
        : errorResponse(404, "not_found", `nothing was done under key ${lookup}`);
    }
    const key = req.headers.get("idempotency-key");
    if (key) this.#requests.set(key, (this.#requests.get(key) ?? 0) + 1);
    const f = this.#faults;
    if (spend(f, "fail_next")) {
      return errorResponse(f.fail_status ?? 503, "injected_failure", "fake remote fault: fail_next");
    }
    if (spend(f, "hang_next")) {
      await new Promise<never>((_, reject) => {
        const abort = () => reject(req.signal.reason ?? new DOMException("aborted", "AbortError"));
        if (req.signal.aborted) abort();
        req.signal.addEventListener("abort", abort, { once: true });
      });
    }
    if (spend(f, "garbage_next")) return garbageResponse();
    const drop = spend(f, "drop_after_act_next");
    if (!key) {
      return errorResponse(400, "missing_idempotency_key", "the Idempotency-Key header is required");
    }
    const text = await req.text();
    let body: unknown = null;
    try {
      body = text === "" ? null : JSON.parse(text);
    } catch {
      body = null;
    }
    const canonical = canonicalJson({ what: `${req.method} ${url.pathname}`, body });
    const existing = this.#byKey.get(key);
    let res: Response;
    if (existing) {
      res = existing.canonical === canonical
        ? jsonResponse(200, existing.answer, { "Idempotent-Replayed": "true" })
        : errorResponse(422, "idempotency_key_reused", `key ${key} was first used for another request`);
    } else {
      const id = `fx-${String(this.#nextId++).padStart(7, "0")}`;
      const effect: FakeEffect = { key, what: `${req.method} ${url.pathname}`, id, body };
      const answer = JSON.stringify(
        body !== null && typeof body === "object" && !Array.isArray(body) ? { ...body, id } : { id },
      );
      this.#byKey.set(key, { effect, canonical, answer });
      this.#order.push(effect);
      res = jsonResponse(201, answer, { "Idempotent-Replayed": "false" });
    }
    return drop ? droppedResponse(res.status) : res;
  };

  /** The effects performed, in order (one per key, unless something sent two keys for one action). */
  effects(): FakeEffect[] {
    return this.#order.map((e) => ({ ...e }));
  }

  /** The effect performed under `key`, if any (what a lookup by key finds). */
  lookup(key: string): FakeEffect | undefined {
    const found = this.#byKey.get(key);
    return found && { ...found.effect };
  }

  /** Requests received per idempotency key, replays and failures included. */
  requestsByKey(): Record<string, number> {
    return Object.fromEntries(this.#requests);
  }

  /** Replaces the fault knobs. Throws a `TypeError` on a negative or fractional counter. */
  setFaults(faults: FakeRemoteFaults): void {
    for (const [field, value] of Object.entries(faults)) {
      if (value !== undefined && (!Number.isInteger(value) || value < 0)) {
        throw new TypeError(`${field} must be a non-negative integer: current value is ${value}`);
      }
    }
    this.#faults = { ...faults };
  }
}

function spend(f: FakeRemoteFaults, field: Exclude<keyof FakeRemoteFaults, "fail_status">): boolean {
  const left = f[field] ?? 0;
  if (left <= 0) return false;
  f[field] = left - 1;
  return true;
}
