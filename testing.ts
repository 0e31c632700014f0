/**
 * The kit users test their agents with: the mock model (scripted, or driving
 * any agent's tools from their JSON Schemas), the mock cloud that honours
 * idempotency keys (and a keyless charges endpoint to look calls up in, for a
 * tool's `reconcile`), the deterministic simulator (simulated processes on one
 * PGlite with a manual clock), the crash fuzzer with its fake remote, and a
 * PostgreSQL schema sandbox. Import it in
 * tests, not in production code: `mod.ts` is the runtime.
 *
 * @module
 */

export { ManualClock } from "./runtime/clock.ts";
export { createSandbox, type SchemaSandbox } from "./runtime/store/sandbox.ts";
export {
  type Charge,
  type CloudFaultSpec,
  type CloudRequestCounts,
  type CreatedResource,
  MockCloud,
  type MockCloudOptions,
  type ResourceKind,
} from "./mock/cloud.ts";
export {
  MockModel,
  type MockModelOptions,
  type MockScripts,
  type ModelCallCounts,
  type ModelFaultMode,
  type ModelFaultSpec,
  type ScriptSpec,
  type ScriptStep,
} from "./mock/model.ts";
export { argsFromSchema } from "./mock/schema_args.ts";
export { serveMocks } from "./mock/server.ts";
export {
  type RunSnapshot,
  SimDb,
  type SimExit,
  SimProcess,
  SimWorld,
  type SimWorldOptions,
} from "./harness/sim.ts";
export { type FakeEffect, FakeRemote, type FakeRemoteFaults } from "./harness/fake_remote.ts";
export {
  type AgentFactory,
  type CleanRun,
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
  type PersonAct,
  type Schedule,
  type ScheduleResult,
} from "./harness/fuzz.ts";
export { PLANTED_DEFECTS, type PlantedDefects } from "./harness/defects.ts";
