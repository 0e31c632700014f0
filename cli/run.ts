/**
 * `deno task run`: drives one run of an agent to its end in this process,
 * surviving crashes. With no `DATABASE_URL`, `MODEL_URL` or `CLOUD_URL` it
 * runs on the embedded default: PGlite under `DATA_DIR` and in-process mocks
 * whose state persists beside it, so a crash and a restart meet the same
 * remote, as they would with servers.
 *
 * Exit codes (`EXIT_CODES`, exit_codes.ts): 0 done, 1 failed, 2 settings that
 * cannot work, 3 fenced (another worker holds the run), 4 blocked (a flagged
 * call needs a human), 5 cancelled, 6 the supervisor went away, 7 the
 * database is away, at start or mid-run (nothing is lost: start it again
 * once the database is back), 8 an error the runtime does not classify.
 *
 * A command a person (or a script) runs, it does not wait for a database
 * that is away at its start: it says so at once and exits 7, which a script
 * can retry on, while 2 says that retrying cannot help. A worker waits
 * instead (`worker.ts`).
 *
 * @module
 */

import { checkInput, preparedVersion } from "../runtime/agent/agent.ts";
import type { Settings } from "../runtime/settings/config.ts";
import { runDepsFor } from "../runtime/run/context.ts";
import { agentDeps, DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS, processDeps } from "../runtime/run/deps.ts";
import { CRASH_POINTS, CrashPoints } from "../runtime/base/crashpoints.ts";
import { ConfigError, describeError, hasCode, RuntimeError } from "../runtime/base/errors.ts";
import { WorkerHost } from "../runtime/host/host.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { claimAndDrive, WorkerError } from "../runtime/host/run_driver.ts";
import { exitCodeOf } from "../runtime/host/outcome.ts";
import { describeModels, loadAgents, type LoadedAgents, prepareAgents } from "./agents.ts";
import { openStoreLogged, reportConfigError, startProcess } from "./process.ts";

/** The usage text of `run`. */
export const RUN_USAGE = `agent-runtime run: drives one run of an agent to its end, surviving crashes.

usage: deno task run [--flag value ...]     (every flag is also an environment variable: --run-id is RUN_ID)

  --agent PATH               the agent module (default: the demo, examples/provision/agent.ts)
  --agent-name NAME          which of the module's agents, when it exports several
  --agent-load-s S           how long the module may take to import before it is refused (default 30)
  --run-id RUN_ID            the run to work (default: a new run, <agent>-<8 hex>)
  --goal GOAL                text input, when the run is created (default: the agent's default input)
  --input JSON               JSON input, for an agent with an input schema
  --database-url URL         PostgreSQL; unset: embedded PGlite under --data-dir
  --data-dir DIR             embedded database and in-process mocks' state (default .data)
  --data-dir-wait-s S        while another process (the page, a worker) has the embedded database open, wait
                             for it up to S seconds, then refuse (default 60; 0: refuse at once)
  --model-url URL            OpenAI-compatible endpoint; unset: the agent's model, or the in-process mock model
  --model NAME               the model name; required with --model-url or an agent's endpoint URL
  --model-api-key KEY        sent as a bearer token, never logged
  --model-headers H, --model-query Q   extra headers / query parameters: JSON object or k=v,k2=v2
  --model-max-tokens-field F   the field capping a budgeted request's answer: max_tokens (default) or
                             max_completion_tokens (OpenAI's reasoning models)
  --model-params JSON        a new run's own request parameters, over the agent's modelParams
                             ({"temperature":0.2,"maxOutputTokens":800,"extra":{...}})
  --cloud-url URL            the demo tools' cloud; unset: in-process mock cloud
  --max-steps N              decisions before guard stops the run (default: the agent's, 12)
  --tool-concurrency N       calls of one step in flight at once (default: the agent's, 4)
  --worker NAME              written to runs.owner (default host:pid)
  --crash-at POINT, --crash-seq N, --stall-at POINT, --stall-ms MS
                             crash points: ${CRASH_POINTS.join(", ")}
  --heartbeat-s S, --lease-s S   lease timing (default 3, 12)
  --log-format text|json     text: logfmt lines (default); json: one object per line
  --exit-on-stdin-eof 1|0    exit when stdin closes (the supervisor sets it for its workers; default 0)
  --stream-deltas 1|0        stream model answers and send their text to watchers (docs/streaming.md; default 0)
  --group-commit-ms MS       writes of several runs share one statement, each waiting at most MS (default 2; 0: off)
  --retry-horizon-s S        how long a model or tool request failing as in an outage (a refused connection, a
                             timeout, 5xx, 429) is asked again under its key, from its first failure (default
                             3600); the run waits in between holding no worker slot
  --retry-backoff-ms MS, --retry-backoff-max-s S
                             the first wait between those requests, doubled each time up to the cap (default 500,
                             60); an agent's or a tool's own retry settings win over these
  --limits JSON              limits shared by the fleet, held beside each agent's: a JSON array, e.g.
                             '[{"model":"gpt-4o","requestsPerMinute":50}]' (docs/limits.md)
  --runs-per-worker N, --poll-s S, --take-share R   worker host settings ('worker --help'); accepted, unused here

exit codes: 0 done, 1 failed, 2 settings that cannot work (a malformed value, a password or role refused, a
database that does not exist), 3 fenced, 4 blocked, 5 cancelled, 6 supervisor gone, 7 the database is away (at
start or mid-run: nothing is lost, start again once it is back), 8 an error the runtime does not classify (the
run is intact and released)`;

/** Reads the input for a run of `agent` from the settings: JSON for a schema, else text. */
export function inputFrom(settings: Settings, hasSchema: boolean): unknown {
  if (!hasSchema) return settings.goal ?? settings.input;
  const raw = settings.input ?? settings.goal;
  if (raw === undefined) return undefined;
  try {
    return JSON.parse(raw);
  } catch {
    throw new ConfigError([
      `INPUT must be JSON for this agent: current value is ${JSON.stringify(raw.slice(0, 80))}`,
    ]);
  }
}

/** The environment an agent's tools and model see: the process's, with the settings' flags applied. */
export function processEnv(
  env: Record<string, string | undefined>,
  settings: Settings,
): Record<string, string | undefined> {
  return {
    ...env,
    MODEL_URL: settings.modelUrl,
    MODEL: settings.model,
    MODEL_API_KEY: settings.modelApiKey,
    MODEL_HEADERS: settings.modelHeaders,
    MODEL_QUERY: settings.modelQuery,
    MODEL_MAX_TOKENS_FIELD: settings.modelMaxTokensField,
    CLOUD_URL: settings.cloudUrl,
  };
}

/** Runs one run; returns the process exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<number> {
  const started = startProcess(args, env, "agent-runtime", RUN_USAGE);
  if (typeof started === "number") return started;
  const { settings, log, clock } = started;
  // The log goes to the tools too: an MCP server's tool list changing under the run is reported in it.
  const ctx = { env: processEnv(env, settings), dataDir: settings.dataDir, embedded: true, log };
  let prepared;
  let models = new Map<string, string>();
  let request;
  try {
    const { agents } = await loadAgents(settings.agentModule, { preloaded, timeoutMs: settings.agentLoadMs });
    const named = settings.agentName;
    if (named === undefined && agents.length > 1) {
      throw new ConfigError([
        `The agent module exports ${agents.length} agents (${agents.map((a) => a.name).join(", ")}); ` +
        "'run' drives one run of one agent: name it with --agent-name, as 'submit' takes it",
      ]);
    }
    const agent = named === undefined ? agents[0] : agents.find((a) => a.name === named);
    if (!agent) {
      throw new ConfigError([
        `AGENT_NAME: the module has no agent named ${JSON.stringify(named)}: it has ${
          agents.map((a) => a.name).join(", ")
        }`,
      ]);
    }
    const { goal, input } = checkInput(agent, inputFrom(settings, agent.input !== undefined));
    // No RUN_ID: a new run with a generated id. A run id is the namespace of its
    // idempotency keys, so a default like "run1" on two databases that share a
    // remote would make the second run's calls look like replays of the first's.
    const runId = settings.runId ?? `${agent.name}-${crypto.randomUUID().slice(0, 8)}`;
    request = { runId, goal, input, budget: agent.budget, modelParams: settings.modelParams };
    ({ prepared, models } = await prepareAgents([agent], ctx));
  } catch (err) {
    if (err instanceof ConfigError) return reportConfigError(err, "agent-runtime");
    if (err instanceof RuntimeError) {
      return reportConfigError(new ConfigError([err.message]), "agent-runtime");
    }
    throw err;
  }
  const store = await openStoreLogged(settings, log);
  if (typeof store === "number") return store;
  let children: WorkerHost | undefined;
  try {
    const agent = prepared[0];
    log.info("backends", {
      store: store.describe,
      model: models.get(agent.agent.name) ?? agent.planner.describe,
      agent: agent.agent.name,
      // The agents it calls (agentTool) are hosted here too, each with its own model.
      ...(prepared.length > 1 ? { models: describeModels(prepared, models) } : {}),
    });
    log.info("registry", { tools: agent.tools.names.join(","), version: preparedVersion(agent) });
    const proc = processDeps({
      store,
      clock,
      log,
      crash: new CrashPoints(settings.crash, { log, clock }),
      owner: settings.worker,
      heartbeatMs: settings.heartbeatMs,
      leaseMs: settings.leaseMs,
      streamDeltas: settings.streamDeltas,
      groupCommitMs: settings.groupCommitMs,
    });
    // MAX_STEPS, when set, replaces the agent's own maxSteps.
    const deps = runDepsFor(
      proc,
      agentDeps(agent, {
        maxSteps: settings.maxSteps,
        toolConcurrency: settings.toolConcurrency,
        retry: settings.retry,
        limits: settings.limits,
      }),
    );
    // The agents this agent calls (agentTool) are hosted beside it, so its child runs are driven here too.
    children = prepared.length > 1
      ? new WorkerHost({
        store,
        clock,
        log,
        owner: `${settings.worker}:children`,
        heartbeatMs: settings.heartbeatMs,
        leaseMs: settings.leaseMs,
        streamDeltas: settings.streamDeltas,
        groupCommitMs: settings.groupCommitMs,
        // Not POLL_S: the children are created by the parent's tool calls in this process, which do not wake
        // this host, so it looks often (a foreground run's children would each wait a poll otherwise).
        pollMs: 200,
        agents: prepared.slice(1),
        maxSteps: settings.maxSteps,
        toolConcurrency: settings.toolConcurrency,
        retry: settings.retry,
        limits: settings.limits,
      }).start()
      : undefined;
    // A run asleep on its remotes (a job that finishes later) is taken again when its calls are due: this
    // process waits for it, as a worker host would, instead of exiting. Bounded by the calls' deadlines.
    for (;;) {
      const outcome = await claimAndDrive(deps, request);
      const waiting = outcome.status === "waiting" ? await store.reads.getRun(request.runId) : undefined;
      // A conversation waiting for its next message is answered: this process is done with it (exit 4).
      let wakeAt = waiting?.idle_since ? undefined : waiting?.wake_at;
      if (!wakeAt) return exitCodeOf(outcome);
      log.info("waiting-on-remote", {
        run: request.runId,
        until: new Date(wakeAt),
        wait_ms: Math.max(0, new Date(wakeAt).getTime() - clock.now().getTime()),
        // What for: a call's job, or a remote or model down (an outage ridden out).
        reason: waiting?.error ?? undefined,
      });
      // Looked at every second: a child run's end (or a call settled from outside) brings the time forward.
      // Bounded by the wake time read each pass.
      while (wakeAt && new Date(wakeAt).getTime() > clock.now().getTime()) {
        await clock.sleep(Math.min(1_000, new Date(wakeAt).getTime() - clock.now().getTime()));
        wakeAt = (await store.reads.getRun(request.runId))?.wake_at ?? undefined;
      }
    }
  } catch (err) {
    if (hasCode(err, "AGENT_MISMATCH")) {
      log.error("wrong-agent", { run: request.runId, error: err.message });
      return EXIT_CODES.settings;
    }
    // The run stays on the version that started it: this module cannot take it, now or on a restart.
    if (hasCode(err, "VERSION_MISMATCH")) {
      log.error("wrong-version", { run: request.runId, error: err.message });
      return EXIT_CODES.settings;
    }
    if (err instanceof WorkerError) {
      // Not the database (it took the release): the agent's code threw, or a
      // statement was refused. Saying "once the database is back" would be false.
      log.error("worker-error", {
        run: request.runId,
        error: describeError(err.cause),
        lease: err.lease,
        note: err.lease === "released"
          ? `the run is intact and released: fix the cause, then start it again with --run-id ${request.runId} ` +
            `(a worker takes it too); after ${DEFAULT_MAX_CLAIMS_WITHOUT_PROGRESS} tries in a row without ` +
            `progress it fails, naming this error`
          : "another worker holds the run now, or it was closed",
      });
      return EXIT_CODES.unclassified;
    }
    // Anything else escaping the loop is the infrastructure (the database went
    // away mid-run): nothing was lost, and the run is still open for a worker.
    log.error("infrastructure-error", {
      run: request.runId,
      error: describeError(err),
      note: `the run is intact; start it again with --run-id ${request.runId} once the database is back`,
    });
    return EXIT_CODES.databaseAway;
  } finally {
    await children?.stop("the run is over").catch((e) =>
      log.warn("children-stop-failed", { error: describeError(e) })
    );
    await store.client.close().catch((e) => log.warn("store-close-failed", { error: describeError(e) }));
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args, Deno.env.toObject()));
}
