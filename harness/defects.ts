/**
 * Planted defects: bugs that break one promise of the runtime on purpose, so
 * a test can prove the fuzzer (`harness/fuzz.ts`) finds them. Each is planted
 * from outside the runtime, in the layers the fuzzer already puts around a
 * simulated process: its store connection (a statement rewritten, or followed
 * by a model request nobody counts) and its tools' requests (a key built
 * wrongly). The runtime carries no trace of them.
 *
 * @module
 */

import { idempotencyKey } from "../runtime/run/context.ts";
import { SimulatedKill } from "../runtime/base/crashpoints.ts";
import type { FetchLike } from "../runtime/model/planner.ts";
import type { QueryOptions, SqlClient } from "../runtime/store/driver.ts";
import { FENCE, RUNNING_AT } from "../runtime/store/sql.ts";
import type { StatementName } from "../runtime/store/statements.ts";
import type { ToolContext } from "../runtime/agent/tools.ts";
import { SCHEMA_SQL } from "../runtime/store/store.ts";

/** Bugs a test may plant in every process of a fuzz. Every field defaults to off. */
export interface PlantedDefects {
  /** The tool confirm is written without the fence: a stale worker can confirm a call. */
  confirmSkipsFence?: boolean;
  /** The heartbeat renews the lease whatever the epoch: a fenced worker keeps its lease alive. */
  heartbeatIgnoresFence?: boolean;
  /**
   * A remote's accepted answer (HTTP 202) is written without the fence: a
   * stale worker puts a call back to `waiting` under a worker that took the
   * run from it, as a new statement that forgot the fence would.
   */
  acceptedSkipsFence?: boolean;
  /** Re-sends (attempt 2 and later) carry a key built from the attempt number, not `<run_id>:<seq>`. */
  keyFromAttempt?: boolean;
  /**
   * Re-sends (attempt 2 and later) of a call of a step with several carry the
   * key of the step's first call, `<run_id>:<step seq>`, not the call's own:
   * two calls of one step given the same key, as a recovery that keys a call
   * by its decision's seq would.
   */
  keyFromStep?: boolean;
  /** Replaying a confirmed decision asks the model again, a request no journal row counts. */
  replayAsksModel?: boolean;
  /**
   * A limit's reservation outlives its worker: a call in flight is counted
   * until it is released, however its worker ended, as a limiter that
   * forgot to tie reservations to their run's epoch and lease would. A worker
   * killed while it holds one holds its key for good.
   */
  reservationOutlivesWorker?: boolean;
}

/** Every defect that can be planted, by name (the fuzzer's `--defect`). */
export const PLANTED_DEFECTS: readonly (keyof PlantedDefects)[] = [
  "acceptedSkipsFence",
  "confirmSkipsFence",
  "heartbeatIgnoresFence",
  "keyFromAttempt",
  "keyFromStep",
  "replayAsksModel",
  "reservationOutlivesWorker",
];

/** The defects planted by rewriting a statement. */
const STATEMENT_DEFECTS = [
  "confirmSkipsFence",
  "heartbeatIgnoresFence",
  "acceptedSkipsFence",
  "reservationOutlivesWorker",
] as const;
type StatementDefect = typeof STATEMENT_DEFECTS[number];

/**
 * A statement rewritten by a defect: which one, what of its text, and what
 * in its place; `setup`, a script the rewritten statement needs, run once on
 * the connection before it is first sent.
 */
interface Rewrite {
  statement: StatementName;
  from: string;
  to: string;
  setup?: () => string;
}

const REWRITES: Record<StatementDefect, Rewrite> = {
  // The fence dropped: only a placeholder that keeps $2 typed is left of it.
  confirmSkipsFence: { statement: "effect-confirm", from: FENCE, to: "$2::int is not null" },
  acceptedSkipsFence: { statement: "effect-waiting", from: FENCE, to: "$2::int is not null" },
  // The epoch dropped from the lease's condition: any worker renews it while the run is running.
  heartbeatIgnoresFence: {
    statement: "heartbeat",
    from: RUNNING_AT("$2"),
    to: "$2::int is not null and (status = 'running') is true",
  },
  // The take calls a copy of limit_take whose window counts every unreleased reservation as in flight.
  reservationOutlivesWorker: {
    statement: "limit-take",
    from: "from limit_take(",
    to: "from limit_take_leaky(",
    setup: leakyLimitFunctions,
  },
};

/** The liveness a reservation is held to: its run running under its epoch, with a live lease. */
const HOLDER_LIVE = "(u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= p_stale) is true";

/**
 * `limit_take_leaky` and `limit_window_leaky`: schema.sql's two functions,
 * copied, with the window's liveness of a reservation's holder dropped
 * (every unreleased one is in flight). Throws when the text it changes is
 * gone from schema.sql (the defect would silently not be planted).
 */
function leakyLimitFunctions(): string {
  const fn = (name: string, end: string) => {
    const start = SCHEMA_SQL.indexOf(`create or replace function ${name}(`);
    const stop = SCHEMA_SQL.indexOf(end, start);
    if (start < 0 || stop < 0) {
      throw new Error(`Cannot plant reservationOutlivesWorker: schema.sql has no ${name}`);
    }
    return SCHEMA_SQL.slice(start, stop + end.length);
  };
  const window = fn("limit_window", "$window$;");
  const take = fn("limit_take", "$take$;");
  if (!window.includes(HOLDER_LIVE) || !take.includes("from limit_window(")) {
    throw new Error(
      "Cannot plant reservationOutlivesWorker: limit_window or limit_take no longer holds its text",
    );
  }
  return [
    window.replace("function limit_window(", "function limit_window_leaky(").replace(HOLDER_LIVE, "true"),
    take.replace("function limit_take(", "function limit_take_leaky(").replaceAll(
      "from limit_window(",
      "from limit_window_leaky(",
    ),
  ].join("\n");
}

/** Options of {@link plantInClient}. */
export interface ClientPlantOptions {
  /**
   * Sends one model request for a run, counted by nobody (for
   * `replayAsksModel`): the process's own fetch to the model, so whatever
   * watches its requests sees it go out.
   */
  askModel?: (runId: string, seq: number) => Promise<void>;
}

/**
 * A layer on a process's store connection that plants the defects of the
 * store: a statement rewritten where `confirmSkipsFence`,
 * `heartbeatIgnoresFence` or `acceptedSkipsFence` says, and with `replayAsksModel`, once a worker
 * reads a run's history back, one model request for each confirmed decision
 * it will replay. Statements are recognised by their names. Throws when a
 * rewrite no longer finds its text (the statement changed: the defect would
 * silently not be planted).
 */
export function plantInClient(
  client: SqlClient,
  defects: PlantedDefects,
  opts: ClientPlantOptions = {},
): SqlClient {
  const rewrites = STATEMENT_DEFECTS.filter((d) => defects[d]).map((d) => REWRITES[d]);
  const askModel = defects.replayAsksModel ? opts.askModel : undefined;
  if (rewrites.length === 0 && !askModel) return client;
  const setUp = new Set<Rewrite>();
  const rewrite = async (text: string, o: QueryOptions | undefined): Promise<string> => {
    const r = rewrites.find((r) => r.statement === o?.name);
    if (!r) return text;
    if (!text.includes(r.from)) {
      throw new Error(
        `Cannot plant a defect in ${r.statement}: its text no longer holds ${JSON.stringify(r.from)}`,
      );
    }
    if (r.setup && !setUp.has(r)) {
      await client.exec(r.setup());
      setUp.add(r);
    }
    return text.replace(r.from, r.to);
  };
  return {
    get describe() {
      return client.describe;
    },
    query: async <T>(text: string, params?: unknown[], o?: QueryOptions): Promise<T[]> => {
      const rows = await client.query<T>(await rewrite(text, o), params, o);
      if (askModel && o?.name === ("read-history" satisfies StatementName)) {
        const runId = String(params?.[0]);
        for (const row of rows as { tbl?: string; status?: string; seq?: number }[]) {
          if (row.tbl === "j" && row.status === "confirmed") await askModel(runId, row.seq!);
        }
      }
      return rows;
    },
    run: async (text: string, params?: unknown[], o?: QueryOptions) =>
      await client.run(await rewrite(text, o), params, o),
    exec: (text: string) => client.exec(text),
    close: () => client.close(),
  };
}

/**
 * Asks the model at `url` (a chat-completions base URL) through `fetch`, as a
 * replay must never do: one request for `runId`, its answer thrown away. A
 * failed request is ignored (only its payment matters to the defect); a kill
 * of the process is not.
 */
export async function askModelUncounted(
  fetch: FetchLike,
  url: string,
  runId: string,
  seq: number,
): Promise<void> {
  try {
    const res = await fetch(
      new Request(`${url}/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-agent-run": runId },
        body: JSON.stringify({
          model: "mock-planner",
          messages: [{ role: "user", content: `the decision of step ${seq} again` }],
        }),
      }),
    );
    await res.body?.cancel();
  } catch (err) {
    if (err instanceof SimulatedKill) throw err;
  }
}

/** Options of {@link plantInToolContext}. */
export interface ToolPlantOptions {
  /**
   * The seq of the first call of the step the call at `seq` belongs to (for
   * `keyFromStep`): the seq of the journal's decision that owns it.
   */
  firstCallOf?: (runId: string, seq: number) => Promise<number>;
}

/**
 * The context a tool's request goes out with, with the defects of a tool
 * planted: with `keyFromAttempt`, every re-send (attempt 2 and later) carries
 * `<key>:<attempt>` instead of the call's key; with `keyFromStep`, every
 * re-send carries the key of its step's first call (read through
 * `opts.firstCallOf`, so then the context comes as a promise). Its other
 * fields read through to `ctx` (the signal stays lazy: reading it arms the
 * call's timer). A context no defect applies to is `ctx` itself, at once.
 */
export function plantInToolContext(
  ctx: ToolContext,
  defects: PlantedDefects,
  opts: ToolPlantOptions = {},
): ToolContext | Promise<ToolContext> {
  if (ctx.attempt <= 1) return ctx;
  const withKey = (key: string): ToolContext =>
    Object.create(ctx, { idempotencyKey: { value: key, enumerable: true } });
  if (defects.keyFromAttempt) return withKey(`${ctx.idempotencyKey}:${ctx.attempt}`);
  if (defects.keyFromStep) {
    const firstCallOf = opts.firstCallOf;
    if (!firstCallOf) {
      throw new Error(
        "Cannot plant keyFromStep without firstCallOf: the tool layer cannot tell a call's step",
      );
    }
    return firstCallOf(ctx.runId, ctx.seq).then((first) =>
      first === ctx.seq ? ctx : withKey(idempotencyKey(ctx.runId, first))
    );
  }
  return ctx;
}
