/**
 * Every setting's default, declared once: the commands' settings readers
 * (`settings/config.ts`, `cli/supervise.ts`), the library (`defineAgent`, the worker
 * host and so `client.startWorker`, `processDeps`) and the docs (docs/settings.md,
 * the settings table of `config.ts`, the README, docs/agents.md) say the same numbers, and
 * `tests/defaults_test.ts` holds the docs and the library to them. The retry settings'
 * defaults are `DEFAULT_RETRY` in `retry.ts`, beside their policy.
 *
 * One exception is left, said where it applies: `processDeps` (the single-run path and the harness)
 * groups no writes unless told; a worker host does, as the commands do.
 *
 * @module
 */

/** The defaults, by the name the library's options give each. */
export const DEFAULTS = {
  /** `RUNS_PER_WORKER`: runs one worker holds at once. */
  runsPerWorker: 100,
  /** `POLL_S`: how often an idle worker looks for runs, in ms. */
  pollMs: 3_000,
  /** `HEARTBEAT_S`: how often a worker renews its leases, in ms. */
  heartbeatMs: 3_000,
  /** `LEASE_S`: a run or worker with no heartbeat this long is abandoned, in ms. */
  leaseMs: 12_000,
  /** `GROUP_COMMIT_MS`: the longest a write waits to share a statement (the commands' workers). */
  groupCommitMs: 2,
  /** `AGENT_LOAD_S`: how long an agent module may take to import, in seconds. */
  agentLoadS: 30,
  /** `DATA_DIR_WAIT_S`: how long to wait for another process's embedded database, in seconds. */
  dataDirWaitS: 60,
  /** `STALL_MS`: how long an injected stall lasts, in ms. */
  stallMs: 5_000,
  /** `DATA_DIR`: the embedded database's directory. */
  dataDir: ".data",
  /** An agent's `maxSteps` (`MAX_STEPS`): decisions before the run is stopped. */
  maxSteps: 12,
  /** An agent's `maxCallsPerStep`: the most tool calls one answer may hold. */
  maxCallsPerStep: 16,
  /** An agent's `toolConcurrency` (`TOOL_CONCURRENCY`): calls of one step in flight at once. */
  toolConcurrency: 4,
  /** A schedule's `zone`: the time zone its cron expression is read in. */
  scheduleZone: "UTC",
  /** A schedule's `overlap`: an occurrence that comes while the schedule's last run is open is skipped. */
  scheduleOverlap: "skip",
  /** A schedule's `catchUp`: after an outage, the latest missed occurrence is started. */
  scheduleCatchUp: "last",
  /** A schedule's `catchUpMax`: the most missed occurrences `catchUp: "all"` starts after one outage. */
  scheduleCatchUpMax: 10,
  /** A schedule's `graceMs`: how late an occurrence may start and still count as on time (an interval's: at most its length). */
  scheduleGraceMs: 60_000,
  /** How long a ticker waits at most before it reads the schedules again (one created elsewhere is seen by then), in ms. */
  scheduleCheckMs: 10_000,
  /** `waitForSignal`'s `deadlineMs`: how long one of its calls waits for the signal, in ms (a day). */
  signalWaitDeadlineMs: 86_400_000,
  /** `sleepTool`'s `maxMs`: the longest one of its calls may sleep, in ms (a day). */
  sleepMaxMs: 86_400_000,
  /** A limit's `windowS`: the window its per-minute amounts are held over, in seconds. */
  limitWindowS: 60,
  /** The output tokens a model request is reserved for under an output-token limit when it sets no cap. */
  limitOutputEstimate: 4_096,
  /**
   * A tool's `effect`: what its calls do, `"world"` (they act on a remote: a fork answers them from the
   * original run's record or the tool's stub, never sends them) or `"read"` (they only read: run live
   * in a fork too). The safe one is the default.
   */
  toolEffect: "world",
  /** How long a run refused a call in flight waits, in ms, unless a release wakes it sooner. */
  limitRetryMs: 1_000,
  /** How long an A2A `SendMessage` waits for its task to finish or ask for input before it answers the task as it stands, in ms. */
  a2aSendWaitMs: 60_000,
  /** `chatHandler`'s `bodyBytesMax`: the largest chat request body it reads (the default transport sends every message). */
  chatBodyBytesMax: 16 * 1024 * 1024,
  /** `chatHandler`'s `lingerMs`: how long a chat turn's watcher nobody reads keeps following the run, in ms. */
  chatLingerMs: 30_000,
  /** How long a chat turn's chunk log, written by another process, stays still before this process takes the turn over and writes it, in ms. */
  chatTakeoverMs: 2_000,
  /** The MCP server's `answerWaitMs`: how long an agent's tool call waits for the run's answer before it answers with the run's id and status, in ms. */
  mcpAnswerWaitMs: 5_000,
  /** The MCP server's `waitMaxMs`: the longest its get and send tools wait when asked to, in ms (well under the ~60 s a desktop client gives a call). */
  mcpWaitMaxMs: 45_000,
  /** The MCP server's `dedupeWindowMs`: a call without an idempotency key, from the same client with the same tool and arguments, within this is the same run, in ms. */
  mcpDedupeWindowMs: 60_000,
  /** The MCP server's `progressMs`: how often a waiting call reports progress to a caller that asked for it, in ms. */
  mcpProgressMs: 1_000,
  /** The MCP server's `sessionsMax`: streamable-HTTP sessions held at once (the one idle longest is closed for a new one). */
  mcpSessionsMax: 256,
  /** The MCP server's `sessionIdleMs`: a streamable-HTTP session unused this long is closed, in ms (30 minutes). */
  mcpSessionIdleMs: 1_800_000,
} as const;
