/**
 * `MockCloud`: a fake cloud provider that honours idempotency keys as the IETF
 * Idempotency-Key draft describes (a quoted or bare key, 400 without one, 409
 * while a request with the key is in progress, 422 for the key reused with
 * another body, errors as `application/problem+json`) and can be told to
 * misbehave, so the runtime's retry and crash-recovery paths can be exercised
 * deterministically. One endpoint takes no key, as many payment APIs do:
 * `POST /v1/charges` charges again on every request, and
 * `GET /v1/charges?reference=R` finds the charges made with a reference, so
 * a tool can look a call up by its key (its `reconcile`). And one endpoint
 * takes work that finishes later (the HTTP 202 pattern): `POST /v1/jobs`
 * starts a job, and the same request again asks how it stands.
 *
 * @module
 */

import { sleep, waitForAbort } from "./abortable.ts";
import { canonicalJson } from "./canonical_json.ts";
import { DurableJsonFile } from "./durable_json_file.ts";
import { droppedResponse, garbageResponse, jsonResponse, problemResponse } from "./http_response.ts";
import { commonRoute, isPlainObject, optionalCount, readJsonObject } from "./json_input.ts";

/** The kinds of resource the cloud can create. */
export type ResourceKind = "server" | "database" | "dns_record" | "charge" | "job";

/** Options of {@linkcode MockCloud.open}. */
export interface MockCloudOptions {
  /** JSON file holding the state across restarts; in-memory when omitted. */
  statePath?: string;
  /** Clock used for `created_at` and for when jobs finish; defaults to the real time. */
  now?: () => Date;
  /** How long a job runs when its request gives no `duration_ms`; default 30000 (30 s). */
  jobDurationMs?: number;
}

/** One resource created under an idempotency key, as listed by `created()`. */
export interface CreatedResource {
  /** The `Idempotency-Key` it was created under; for a charge, which takes none, its `reference` (or ""). */
  key: string;
  /** What was created. */
  kind: ResourceKind;
  /** Provider id, e.g. `i-0000001`. */
  id: string;
  /** The JSON body of the creating request. */
  payload: Record<string, unknown>;
  /** When it was created (ISO 8601, from the `now` clock). */
  created_at: string;
}

/** Counts of the `POST /v1/*` requests received, failures and replays included. */
export interface CloudRequestCounts {
  /** Every request. */
  total: number;
  /** Requests per `Idempotency-Key` (requests without a key are not listed). */
  by_key: Record<string, number>;
  /** Requests per path, e.g. `/v1/servers`. */
  by_path: Record<string, number>;
}

/**
 * Misbehaviour for the next requests to one endpoint (or to every `/v1/*`
 * endpoint when `path` is omitted). Per request, the first applicable knob
 * wins, in this order: `delay_ms`, `fail_next`, `hang_next`, `garbage_next`,
 * `drop_after_act_next`, `hang_after_act_next`. Each `*_next` counter is
 * decremented when it fires. Lookups (`GET`) are never affected.
 */
export interface CloudFaultSpec {
  /** Endpoint such as `/v1/servers`; omitted = every `/v1/*` endpoint. */
  path?: string;
  /** Wait this long before handling (given up when the request is aborted). */
  delay_ms?: number;
  /** The next N requests get `fail_status` and do nothing. */
  fail_next?: number;
  /** Status of `fail_next` answers; default 503. */
  fail_status?: number;
  /** Sent as `Retry-After` (seconds) with `fail_next` answers; default none. */
  retry_after_s?: number;
  /** The next N requests never answer (until the client aborts) and do nothing. */
  hang_next?: number;
  /** The next N requests get a 200 whose body is not JSON, and do nothing. */
  garbage_next?: number;
  /**
   * The next N requests do the work (and persist it) but the answer is lost:
   * the response body errors, so a client only sees success by reading it.
   */
  drop_after_act_next?: number;
  /**
   * The next N requests do the work (and persist it), then never answer
   * until the client aborts: a caller that dies now never learns it happened.
   */
  hang_after_act_next?: number;
}

/** One charge, as `GET /v1/charges?reference=R` lists it. */
export interface Charge {
  /** Provider id, e.g. `ch-0000004`. */
  id: string;
  /** What was charged. */
  amount_cents: number;
  /** The caller's reference (a tool sends its idempotency key), or null. */
  reference: string | null;
  /** When it was made (ISO 8601). */
  created_at: string;
}

/** How a job stands: `running` until its time has passed, then `done` or (asked with `fail`) `failed`. */
export type CloudJobStatus = "running" | "done" | "failed";

/** One job started with `POST /v1/jobs`, as listed by `jobs()`. */
export interface CloudJob {
  /** The `Idempotency-Key` it was started under. */
  key: string;
  /** Provider id, e.g. `job-0000003`. */
  id: string;
  /** The JSON body of the starting request. */
  payload: Record<string, unknown>;
  /** When it started (ISO 8601, from the `now` clock). */
  created_at: string;
  /** When it ends (ISO 8601): `created_at` plus its duration. */
  ends_at: string;
  /** How it stands now. */
  status: CloudJobStatus;
}

/** What a job needs beyond the resource: fixed when it starts. */
interface JobTerms {
  duration_ms: number;
  fail: boolean;
}

interface StoredResource extends CreatedResource {
  /** The exact first response body, replayed byte for byte (a job answers how it stands instead). */
  body: string;
  /** Set for a job. */
  job?: JobTerms;
}

interface CloudState {
  next_id: number;
  resources: StoredResource[];
  requests: CloudRequestCounts;
}

const KIND_BY_PATH: Record<string, { kind: ResourceKind; prefix: string }> = {
  "/v1/servers": { kind: "server", prefix: "i-" },
  "/v1/databases": { kind: "database", prefix: "db-" },
  "/v1/dns_records": { kind: "dns_record", prefix: "dns-" },
};

/** Key of the fault spec that applies to every endpoint. */
const ALL_PATHS = "*";

type CountField = "fail_next" | "hang_next" | "garbage_next" | "drop_after_act_next" | "hang_after_act_next";

/** Where charges are made and looked up; it takes no `Idempotency-Key`. */
const CHARGES = "/v1/charges";

/** Where jobs are started and polled (`POST`, keyed) and looked up by id (`GET /v1/jobs/<id>`). */
const JOBS = "/v1/jobs";

/** A job's length when its request names none, unless `MockCloudOptions.jobDurationMs` says otherwise. */
const DEFAULT_JOB_DURATION_MS = 30_000;

/**
 * A fake cloud provider. Use {@linkcode MockCloud.open} to create one, then
 * pass {@linkcode MockCloud.handler} to `Deno.serve` or call it directly.
 *
 * @example
 * ```ts
 * const cloud = await MockCloud.open();
 * const res = await cloud.handler(new Request("http://mock/v1/servers", {
 *   method: "POST",
 *   headers: { "Idempotency-Key": "run1:step0" },
 *   body: JSON.stringify({ name: "srv-1", spec: "small" }),
 * }));
 * console.log(res.status, await res.json()); // 201 { id: "i-0000001", kind: "server", ... }
 * ```
 */
export class MockCloud {
  #state: CloudState;
  #by_key = new Map<string, StoredResource>();
  #file: DurableJsonFile<CloudState> | undefined;
  #now: () => Date;
  #job_duration_ms: number;
  #faults = new Map<string, CloudFaultSpec>();
  /** Aborted by `releaseHung()` to end requests held by `hang_next`. */
  #release = new AbortController();
  /** The `traceparent` of each request, by idempotency key, in arrival order (not persisted). */
  #traceparents = new Map<string, string[]>();
  /** Keys of the requests being handled now: a second request with one of them gets 409. */
  #in_progress = new Set<string>();

  private constructor(
    state: CloudState,
    file: DurableJsonFile<CloudState> | undefined,
    opts: { now: () => Date; job_duration_ms: number },
  ) {
    this.#state = state;
    this.#file = file;
    this.#now = opts.now;
    this.#job_duration_ms = opts.job_duration_ms;
    for (const resource of state.resources) this.#by_key.set(resource.key, resource);
  }

  /**
   * Creates a cloud, loading the state at `opts.statePath` when it exists.
   * Throws a `TypeError` when `opts.jobDurationMs` is not a non-negative integer.
   */
  static async open(opts: MockCloudOptions = {}): Promise<MockCloud> {
    const job_duration_ms = opts.jobDurationMs ?? DEFAULT_JOB_DURATION_MS;
    if (!Number.isInteger(job_duration_ms) || job_duration_ms < 0) {
      throw new TypeError(
        "Cannot open the mock cloud as 'jobDurationMs' must be a non-negative integer: current value is " +
          JSON.stringify(job_duration_ms),
      );
    }
    const file = opts.statePath === undefined ? undefined : new DurableJsonFile<CloudState>(opts.statePath);
    const state = (await file?.read()) ??
      { next_id: 1, resources: [], requests: { total: 0, by_key: {}, by_path: {} } };
    return new MockCloud(state, file, { now: opts.now ?? (() => new Date()), job_duration_ms });
  }

  /**
   * Answers one HTTP request. Rejects (with the abort reason) only when a
   * request held by `hang_next` or `delay_ms` is aborted.
   */
  handler = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    const path = url.pathname;
    if (path === CHARGES && req.method === "POST") return await this.#handleCharge(req);
    if (path.startsWith("/v1/") && req.method === "POST") return await this.#handleCreate(req, path);
    if (path.startsWith(`${JOBS}/`) && req.method === "GET") {
      const id = decodeURIComponent(path.slice(JOBS.length + 1));
      const job = this.#state.resources.find((resource) => resource.job !== undefined && resource.id === id);
      return job === undefined
        ? problem(404, "not_found", `no job ${JSON.stringify(id)}`)
        : this.#jobAnswer(job);
    }
    switch (`${req.method} ${path}`) {
      case `GET ${CHARGES}`: {
        const reference = url.searchParams.get("reference");
        if (reference === null) {
          return problem(400, "missing_reference", "GET /v1/charges needs ?reference=R");
        }
        return jsonResponse(200, { data: this.charges(reference) });
      }
      case "GET /created":
        return jsonResponse(200, this.created(url.searchParams.get("prefix") ?? undefined));
      case "GET /requests":
        return jsonResponse(200, this.requests());
      case "GET /jobs":
        return jsonResponse(200, this.jobs(url.searchParams.get("prefix") ?? undefined));
    }
    const faults = {
      set: (spec: Record<string, unknown>) => this.setFaults(spec),
      get: () => this.faults(),
      clear: () => this.clearFaults(),
    };
    return await commonRoute(req, path, faults, problem) ??
      problem(404, "not_found", `no route for ${req.method} ${path}`);
  };

  /** Resources created so far, in creation order; optionally only keys starting with `prefix`. */
  created(prefix?: string): CreatedResource[] {
    return this.#state.resources
      .filter((resource) => prefix === undefined || resource.key.startsWith(prefix))
      .map(({ key, kind, id, payload, created_at }) => ({ key, kind, id, payload, created_at }));
  }

  /** The charges made with `reference`, in creation order (one, unless a caller charged twice). */
  charges(reference: string): Charge[] {
    return this.#state.resources
      .filter((resource) => resource.kind === "charge" && resource.payload.reference === reference)
      .map(({ id, payload, created_at }) => ({
        id,
        amount_cents: payload.amount_cents as number,
        reference: typeof payload.reference === "string" ? payload.reference : null,
        created_at,
      }));
  }

  /**
   * Jobs started so far, in start order, with how each stands now; optionally only keys
   * starting with `prefix`. One per key, however often it was polled (`requests()` counts those).
   */
  jobs(prefix?: string): CloudJob[] {
    return this.#state.resources
      .filter((resource) =>
        resource.job !== undefined && (prefix === undefined || resource.key.startsWith(prefix))
      )
      .map((resource) => {
        const { key, id, payload, created_at } = resource;
        const ends_ms = this.#jobEndsMs(resource);
        return {
          key,
          id,
          payload,
          created_at,
          ends_at: new Date(ends_ms).toISOString(),
          status: this.#jobStatus(resource),
        };
      });
  }

  /** Counts of `POST /v1/*` requests received (a copy). */
  requests(): CloudRequestCounts {
    return structuredClone(this.#state.requests);
  }

  /**
   * Installs a fault spec, replacing any earlier spec for the same path.
   * Throws a `TypeError` when the spec is malformed.
   */
  setFaults(spec: CloudFaultSpec): void {
    const valid = parseFaultSpec(spec);
    this.#faults.set(valid.path ?? ALL_PATHS, valid);
  }

  /** Removes every fault spec. */
  clearFaults(): void {
    this.#faults.clear();
  }

  /** The fault specs in force, with their remaining counters. */
  faults(): CloudFaultSpec[] {
    return [...this.#faults.values()].map((spec) => ({ ...spec }));
  }

  /** Ends every request currently held by `hang_next` (they reject), e.g. before shutting a server down. */
  releaseHung(): void {
    this.#release.abort(new DOMException("mock cloud released hung requests", "AbortError"));
    this.#release = new AbortController();
  }

  /** The `traceparent` headers the requests under `key` carried, in arrival order (tests of tracing). */
  traceparents(key: string): string[] {
    return [...(this.#traceparents.get(key) ?? [])];
  }

  async #handleCreate(req: Request, path: string): Promise<Response> {
    const parsed = parseIdempotencyKey(req.headers.get("idempotency-key"));
    const key = typeof parsed === "string" ? parsed : null;
    const traceparent = req.headers.get("traceparent");
    if (key && traceparent) {
      this.#traceparents.set(key, [...(this.#traceparents.get(key) ?? []), traceparent]);
    }
    this.#countRequest(path, key);
    const route = KIND_BY_PATH[path];
    const answer = path === JOBS
      ? (key: string) => this.#startOrPollJob(req, key)
      : route && ((key: string) => this.#createOrReplay(req, key, route.kind, route.prefix));
    if (answer === undefined) return problem(404, "not_found", `no endpoint ${path}`);
    if (typeof parsed !== "string") return parsed;
    if (this.#in_progress.has(parsed)) {
      // The draft's answer to a concurrent request: not now, and not "no".
      return problemResponse(
        409,
        "idempotency_key_in_progress",
        "A request is outstanding for this Idempotency-Key",
        `a request with key ${JSON.stringify(parsed)} is still being processed; retry after it completes`,
        { "Retry-After": "1" },
      );
    }
    this.#in_progress.add(parsed);
    try {
      return await this.#faulty(path, req, () => answer(parsed));
    } finally {
      // Released even when a hung or delayed request is aborted, or the next one would wait forever.
      this.#in_progress.delete(parsed);
    }
  }

  /** A charge: made again on every request (no key), found later by its `reference`. */
  async #handleCharge(req: Request): Promise<Response> {
    this.#countRequest(CHARGES, null);
    return await this.#faulty(CHARGES, req, async () => {
      const payload = await readJsonObject(req);
      const amount = payload?.amount_cents;
      if (payload === undefined || !Number.isInteger(amount) || (amount as number) < 1) {
        return problem(
          400,
          "bad_json",
          "the body must be a JSON object with a positive integer amount_cents",
        );
      }
      if (payload.reference !== undefined && typeof payload.reference !== "string") {
        return problem(400, "bad_json", "reference must be a string");
      }
      const reference = typeof payload.reference === "string" ? payload.reference : "";
      return jsonResponse(201, this.#store(reference, "charge", "ch-", payload).body);
    });
  }

  /** Answers `handle()` with the faults in force for `path` applied around it. */
  async #faulty(path: string, req: Request, handle: () => Promise<Response>): Promise<Response> {
    const injected = await this.#applyFaults(path, req);
    if (injected instanceof Response) return injected;
    const response = await handle();
    if (injected === "drop") {
      await response.body?.cancel();
      return droppedResponse(response.status);
    }
    if (injected === "hang") {
      await response.body?.cancel();
      await waitForAbort(AbortSignal.any([req.signal, this.#release.signal]));
    }
    return response;
  }

  async #createOrReplay(
    req: Request,
    key: string,
    kind: ResourceKind,
    prefix: string,
  ): Promise<Response> {
    const payload = await readJsonObject(req);
    if (payload === undefined) return problem(400, "bad_json", "the body must be a JSON object");

    const existing = this.#by_key.get(key);
    if (existing !== undefined) {
      if (existing.kind !== kind || canonicalJson(existing.payload) !== canonicalJson(payload)) {
        return keyReused(key, existing);
      }
      return jsonResponse(200, existing.body, { "Idempotent-Replayed": "true" });
    }

    const resource = this.#store(key, kind, prefix, payload);
    this.#by_key.set(key, resource);
    return jsonResponse(201, resource.body, { "Idempotent-Replayed": "false" });
  }

  /**
   * `POST /v1/jobs`: the first request under a key starts a job; the same request
   * again answers how it stands (202 while it runs, 200 once done or failed).
   */
  async #startOrPollJob(req: Request, key: string): Promise<Response> {
    const payload = await readJsonObject(req);
    if (payload === undefined) return problem(400, "bad_json", "the body must be a JSON object");
    const invalid = jobProblem(payload);
    if (invalid !== undefined) return problem(400, "bad_json", invalid);

    const existing = this.#by_key.get(key);
    if (existing !== undefined) {
      if (existing.kind !== "job" || canonicalJson(existing.payload) !== canonicalJson(payload)) {
        return keyReused(key, existing);
      }
      return this.#jobAnswer(existing, { "Idempotent-Replayed": "true" });
    }
    const terms: JobTerms = {
      duration_ms: (payload.duration_ms as number | undefined) ?? this.#job_duration_ms,
      fail: payload.fail === true,
    };
    const job = this.#store(key, "job", "job-", payload, terms);
    this.#by_key.set(key, job);
    return this.#jobAnswer(job, { "Idempotent-Replayed": "false" });
  }

  /** When `job` ends, in ms since the epoch: its start plus its duration. */
  #jobEndsMs(job: StoredResource): number {
    return Date.parse(job.created_at) + job.job!.duration_ms;
  }

  #jobStatus(job: StoredResource): CloudJobStatus {
    if (this.#now().getTime() < this.#jobEndsMs(job)) return "running";
    return job.job!.fail ? "failed" : "done";
  }

  /** How `job` stands: 202 with when to look again while it runs, else 200 with its result or error. */
  #jobAnswer(job: StoredResource, headers: Record<string, string> = {}): Response {
    const remaining_ms = this.#jobEndsMs(job) - this.#now().getTime();
    const location = { Location: `${JOBS}/${job.id}` };
    if (remaining_ms > 0) {
      return jsonResponse(202, { job_id: job.id, status: "running", retry_after_ms: remaining_ms }, {
        ...headers,
        ...location,
        "Retry-After": String(Math.ceil(remaining_ms / 1000)),
      });
    }
    const kind = typeof job.payload.kind === "string" ? job.payload.kind : "job";
    if (job.job!.fail) {
      const error = `job ${job.id} (${kind}) failed, as its request asked with "fail": true`;
      return jsonResponse(200, { job_id: job.id, status: "failed", error }, { ...headers, ...location });
    }
    const result = { kind, finished_at: new Date(this.#jobEndsMs(job)).toISOString() };
    return jsonResponse(200, { job_id: job.id, status: "done", result }, { ...headers, ...location });
  }

  /** Creates a resource with the next id and persists it. */
  #store(
    key: string,
    kind: ResourceKind,
    prefix: string,
    payload: Record<string, unknown>,
    job?: JobTerms,
  ): StoredResource {
    const id = `${prefix}${String(this.#state.next_id++).padStart(7, "0")}`;
    const body: Record<string, unknown> = { id, kind, ...payload };
    // Reassigning keeps the keys first but stops a payload field from overriding them.
    body.id = id;
    body.kind = kind;
    const resource: StoredResource = {
      key,
      kind,
      id,
      payload,
      created_at: this.#now().toISOString(),
      body: JSON.stringify(body),
      ...(job === undefined ? {} : { job }),
    };
    this.#state.resources.push(resource);
    this.#persist();
    return resource;
  }

  #countRequest(path: string, key: string | null): void {
    const counts = this.#state.requests;
    counts.total++;
    counts.by_path[path] = (counts.by_path[path] ?? 0) + 1;
    if (key) counts.by_key[key] = (counts.by_key[key] ?? 0) + 1;
    this.#persist();
  }

  /**
   * Returns an injected answer, `"drop"` to lose the real answer, `"hang"` to
   * hold it until the client aborts, or `undefined` to behave.
   */
  async #applyFaults(path: string, req: Request): Promise<Response | "drop" | "hang" | undefined> {
    const specs = [this.#faults.get(path), this.#faults.get(ALL_PATHS)]
      .filter((spec): spec is CloudFaultSpec => spec !== undefined);
    const delay_ms = specs.find((spec) => spec.delay_ms)?.delay_ms;
    // req.signal is read only when needed: Deno.serve warns once when a handler
    // that read it answers normally (its legacy abort-on-success behaviour).
    if (delay_ms) await sleep(delay_ms, req.signal);

    const failing = take(specs, "fail_next");
    if (failing) {
      const status = failing.fail_status ?? 503;
      const headers: Record<string, string> = failing.retry_after_s === undefined
        ? {}
        : { "Retry-After": String(failing.retry_after_s) };
      return problemResponse(
        status,
        "injected_failure",
        "Injected failure",
        `mock cloud fault: fail_next on ${path}`,
        headers,
      );
    }
    if (take(specs, "hang_next")) await waitForAbort(AbortSignal.any([req.signal, this.#release.signal]));
    if (take(specs, "garbage_next")) return garbageResponse();
    if (take(specs, "drop_after_act_next")) return "drop";
    if (take(specs, "hang_after_act_next")) return "hang";
    return undefined;
  }

  #persist(): void {
    this.#file?.writeSync(this.#state);
  }
}

/** The 422 for `key` sent again with another body (or to another endpoint) than its first request's. */
function keyReused(key: string, existing: StoredResource): Response {
  return problemResponse(
    422,
    "idempotency_key_reused",
    "Idempotency-Key is already used",
    `key ${
      JSON.stringify(key)
    } was first used for a different request (${existing.kind} ${existing.id}); a key must not be ` +
      "reused with another payload",
  );
}

/** What is wrong with a `POST /v1/jobs` body, or `undefined` when nothing is. */
function jobProblem(payload: Record<string, unknown>): string | undefined {
  const { kind, duration_ms, fail } = payload;
  if (kind !== undefined && (typeof kind !== "string" || kind === "")) {
    return `kind must be a non-empty string, got ${JSON.stringify(kind)}`;
  }
  if (duration_ms !== undefined && (!Number.isInteger(duration_ms) || (duration_ms as number) < 0)) {
    return `duration_ms must be a non-negative integer of milliseconds, got ${JSON.stringify(duration_ms)}`;
  }
  if (fail !== undefined && typeof fail !== "boolean") {
    return `fail must be a boolean, got ${JSON.stringify(fail)}`;
  }
  return undefined;
}

/** A problem details answer whose title is the status's reason, for the mock's plain refusals. */
function problem(status: number, code: string, detail: string): Response {
  const titles: Record<number, string> = { 400: "Bad Request", 404: "Not Found" };
  return problemResponse(status, code, titles[status] ?? "Error", detail);
}

/**
 * Reads an `Idempotency-Key` header: the draft's Structured Field string
 * (`"run1:0"`, with `\"` and `\\` escapes) or, for clients that predate it,
 * the bare key (`run1:0`). Both name the same key. Returns the key, or a 400
 * problem saying what is wrong.
 */
export function parseIdempotencyKey(raw: string | null): string | Response {
  const missing = () =>
    problemResponse(
      400,
      "missing_idempotency_key",
      "Idempotency-Key is missing",
      "this operation is idempotent and requires an Idempotency-Key header",
    );
  if (raw === null) return missing();
  const text = raw.trim();
  if (text === "") return missing();
  if (!text.startsWith('"')) {
    if (text.includes('"')) return malformedKey(raw);
    return text;
  }
  const match = /^"((?:[^"\\]|\\["\\])*)"$/.exec(text);
  if (!match) return malformedKey(raw);
  const key = match[1].replace(/\\(["\\])/g, "$1");
  return key === "" ? missing() : key;
}

function malformedKey(raw: string): Response {
  return problemResponse(
    400,
    "malformed_idempotency_key",
    "Idempotency-Key is malformed",
    `the Idempotency-Key ${JSON.stringify(raw.slice(0, 80))} is not a quoted string ("k") or a bare key`,
  );
}

/** Finds the first spec whose `field` counter is positive and spends one unit of it. */
function take(specs: CloudFaultSpec[], field: CountField): CloudFaultSpec | undefined {
  const spec = specs.find((candidate) => (candidate[field] ?? 0) > 0);
  if (spec) spec[field] = spec[field]! - 1;
  return spec;
}

function parseFaultSpec(value: unknown): CloudFaultSpec {
  if (!isPlainObject(value)) throw new TypeError("a fault spec must be a JSON object");
  const known = new Set([
    "path",
    "delay_ms",
    "fail_next",
    "fail_status",
    "retry_after_s",
    "hang_next",
    "garbage_next",
    "drop_after_act_next",
    "hang_after_act_next",
  ]);
  const unknown = Object.keys(value).filter((field) => !known.has(field));
  if (unknown.length > 0) throw new TypeError(`unknown fault field(s): ${unknown.join(", ")}`);
  const path = value.path;
  if (path !== undefined && (typeof path !== "string" || !path.startsWith("/v1/"))) {
    throw new TypeError(`path must be a string starting with /v1/, got ${JSON.stringify(path)}`);
  }
  const fail_status = optionalCount(value, "fail_status");
  if (fail_status !== undefined && (fail_status < 100 || fail_status > 599)) {
    throw new TypeError(`fail_status must be an HTTP status 100-599, got ${fail_status}`);
  }
  const spec: CloudFaultSpec = {
    path,
    delay_ms: optionalCount(value, "delay_ms"),
    fail_next: optionalCount(value, "fail_next"),
    fail_status,
    retry_after_s: optionalCount(value, "retry_after_s"),
    hang_next: optionalCount(value, "hang_next"),
    garbage_next: optionalCount(value, "garbage_next"),
    drop_after_act_next: optionalCount(value, "drop_after_act_next"),
    hang_after_act_next: optionalCount(value, "hang_after_act_next"),
  };
  // Drop the undefined fields so `faults()` and `GET /_faults` show only what was set.
  return Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined)) as CloudFaultSpec;
}
