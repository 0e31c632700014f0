/**
 * The kit users test their agents with: the mock model (scripted, or driving
 * any agent's tools from their JSON Schemas), a fake of Anthropic's Messages
 * API for agents on `@ai-sdk/anthropic`, the mock cloud that honours
 * idempotency keys (and a keyless charges endpoint to look calls up in, for a
 * tool's `reconcile`), the deterministic simulator (simulated processes on one
 * PGlite with a manual clock), the crash fuzzer with its fake remote, and a
 * PostgreSQL schema sandbox, and the replay check (a new agent module
 * against the journals of the runs in a database, calling nothing). Import it in
 * tests, not in production code: `mod.ts` is the runtime.
 *
 * @module
 */

export { type Clock, ManualClock, SystemClock } from "./runtime/base/clock.ts";
export { CRASH_POINTS, type CrashPoint } from "./runtime/base/crashpoints.ts";
export type { CrashPlan, KillPoint } from "./runtime/base/crashpoints.ts";
export { type RunOutcome, WORKER_STATUSES, type WorkerStatus } from "./runtime/host/outcome.ts";
export { createSandbox, type SchemaSandbox } from "./runtime/store/sandbox.ts";
export {
  replayCheck,
  type ReplayCheckOptions,
  type ReplayProblem,
  type ReplayReport,
} from "./runtime/client/replay_check.ts";
export type { CarryProblem } from "./runtime/run/carry.ts";
export {
  type Charge,
  type CloudFaultSpec,
  type CloudJob,
  type CloudJobStatus,
  type CloudRequestCounts,
  type CreatedResource,
  MockCloud,
  type MockCloudOptions,
  type ResourceKind,
} from "./mock/cloud.ts";
export {
  type Arrival,
  busiestWindow,
  MockModel,
  type MockModelOptions,
  type MockScripts,
  type ModelCallCounts,
  type ModelFaultMode,
  type ModelFaultSpec,
  type RateLimitSpec,
  type ScriptAnswerStep,
  type ScriptCallsStep,
  type ScriptSpec,
  type ScriptStep,
  type ScriptToolStep,
} from "./mock/model.ts";
export type { MockChunk, MockStreamOptions } from "./mock/model_stream.ts";
export {
  type AnthropicRequestRecord,
  type AnthropicStep,
  FakeAnthropic,
  type FakeAnthropicOptions,
  serveAnthropic,
  type ServedAnthropic,
} from "./mock/anthropic.ts";
export { argsFromSchema, type ArgsFromSchemaOptions } from "./mock/schema_args.ts";
export { type RunningMocks, serveMocks, type ServeMocksOptions } from "./mock/server.ts";
export {
  type ProcessHooks,
  type RunSnapshot,
  SimDb,
  type SimExit,
  SimProcess,
  type SimTools,
  SimWorld,
  type SimWorldOptions,
} from "./harness/sim.ts";
// A PGlite cluster made once, for SimDb.open's `template`: a new database in about 1 s instead of initdb's 2 to 4.
export { pgliteTemplate } from "./runtime/store/pglite.ts";
export { type FakeEffect, FakeRemote, type FakeRemoteFaults } from "./harness/fake_remote.ts";
export {
  type AgentFactory,
  type CleanRun,
  type CloudFault,
  decodeSchedule,
  demoAgent as demoFuzzAgent,
  drawApprovalRace,
  encodeSchedule,
  type Fault,
  type FaultFamily,
  fuzz,
  FuzzError,
  type FuzzFailure,
  type FuzzOptions,
  type FuzzReport,
  type FuzzSignal,
  type ModelFault,
  type PersonAct,
  type Schedule,
  type ScheduleBudget,
  type ScheduleResult,
  type UsageFault,
} from "./harness/fuzz.ts";
export { PLANTED_DEFECTS, type PlantedDefects } from "./harness/defects.ts";
// Evaluations: cases times variants, each a dry run (docs/fork.md).
export {
  type CaseRun,
  caseRunId,
  type EvalCase,
  type EvalReport,
  type EvalSpec,
  type EvalVariant,
  recordedCases,
  runEval,
  type Score,
  type Scorer,
  type Scorers,
  scorers,
  spendLine,
  tableLines,
  type VariantRow,
} from "./harness/eval.ts";
