/**
 * `deno task fuzz`: crash-fuzz the demo agent from the command line and
 * print what the fuzzer found (the library is `harness/fuzz.ts`).
 *
 * @module
 */

import { PLANTED_DEFECTS, type PlantedDefects } from "../harness/defects.ts";
import {
  decodeSchedule,
  DEMO_APPROVAL_TOOL,
  demoAgent,
  type FaultFamily,
  fuzz,
  FuzzError,
  jobsAgent,
  mcpAgent,
  SIGNALS_TARGET_SIGNAL,
  signalsAgent,
  teamAgent,
} from "../harness/fuzz.ts";
import { commandFlags } from "../runtime/settings/config.ts";

/** The usage text of `deno task fuzz`. */
export const FUZZ_USAGE =
  `agent-runtime fuzz: crash-fuzz the demo agent and check every schedule against the invariants.
Its create_database needs a person's approval, so a person answers (or denies, cancels, reopens) in the
schedules too. Each schedule draws how many calls the mock model answers at once (1, 2 or 3), so faults
land inside steps whose calls are in flight together. With --target jobs it fuzzes an agent whose calls
wait on their remote instead (two jobs at the mock cloud's /v1/jobs beside create_server): runs sleep until
their calls are due and a new worker polls them, so faults land on the accepted answer, the sleep and the polls.
With --target team it fuzzes a parent whose two tools are agents (agentTool): each call starts a child run
that creates one resource, and every run of the family is driven, so faults land on the child's creation,
the parent's wait, the children's steps, the wake at a child's close and the parent's next answer.
With --target mcp it fuzzes the demo's tools served by an MCP server in each process (connected and listed
by every process, each call sent to the cloud under the key in its _meta), so faults land where the server
calls the cloud and the client sees an unknown outcome; its create_database needs approval as the demo's.
With --target signals it fuzzes an agent whose first tool waits for a signal (waitForSignal) beside
create_server: a person sends the signal where the schedule says (the signal family: before the wait,
while a call looks, after it, every send under one id) and whenever the run rests waiting for it.

usage: deno task fuzz [--schedules N] [--seed S] [--replay X] [--faults kill,stall] [--max-faults N]
                      [--parallel 1,2,3] [--target demo|jobs|team|mcp|signals] [--defect name] [--transcript FILE]
                      [--keep-going] [--group-commit-ms MS]

  --schedules N      schedules to run (default 500)
  --seed S           the first schedule's seed (default: random, printed)
  --replay X         replay one printed schedule, with its transcript
  --faults LIST      only these fault families, comma-separated: kill, stall, cloud, model,
                     budget (a token ceiling on about half the schedules, with usage faults),
                     approval (a person's acts; the demo's create_database needs approval),
                     outage (the model or the cloud refusing connections for 1 to 30 minutes, on
                     about a third of the schedules), signal (the signal sent between statements;
                     --target signals), limits (about a third of the schedules under limits shared by
                     the fleet: one model request and one tool call in flight at a time), version
                     (a deploy under about a third of the schedules: every incarnation after the
                     first is a worker of version 2, which renames a tool and adds an argument with
                     a default; not with --target team)
  --max-faults N     faults a schedule may hold (default 4)
  --parallel LIST    calls per answer the schedules draw from, comma-separated (default 1,2,3;
                     3: the demo is one step of three calls)
  --target NAME      the agent fuzzed: demo (default), jobs (calls that wait on their remote), team
                     (a parent with two child agents; default faults kill,stall,cloud,model,outage), mcp
                     (the demo's tools through an MCP server) or signals (a wait for a signal)
  --defect NAME      plant a bug (the fuzzer's own tests; repeatable)
  --transcript FILE  write every schedule's transcript to FILE
  --keep-going       keep going after the first violation
  --group-commit-ms MS  group commit on in every simulated process, a write waiting at most MS (default 0: off)

exit codes: 0 no violation, 1 a violation found, 2 bad arguments`;

/** The command line: `deno task fuzz [--schedules N] [--seed S] [--replay X] [--faults kill,stall] [--defect name]`. */
export async function main(args: string[]): Promise<number> {
  const flags = commandFlags("fuzz", FUZZ_USAGE, args, {
    schedules: { type: "string", default: "500" },
    seed: { type: "string" },
    replay: { type: "string" },
    faults: { type: "string" },
    "max-faults": { type: "string", default: "4" },
    parallel: { type: "string", default: "1,2,3" },
    target: { type: "string", default: "demo" },
    defect: { type: "string", multiple: true },
    transcript: { type: "string" },
    "keep-going": { type: "boolean", default: false },
    "group-commit-ms": { type: "string", default: "0" },
    help: { type: "boolean", short: "h" },
  });
  if ("exit" in flags) return flags.exit;
  const { values } = flags;
  const counts = {
    "--schedules": values.schedules,
    "--max-faults": values["max-faults"],
    "--seed": values.seed,
  };
  for (const [flag, value] of Object.entries(counts)) {
    if (value !== undefined && !/^\d+$/.test(value)) {
      console.error(`fuzz: ${flag} must be a whole number 0 or more: current value is ${value}`);
      return 2;
    }
  }
  const seed = values.replay !== undefined
    ? decodeSchedule(values.replay).seed
    : values.seed !== undefined
    ? Number(values.seed)
    : Math.floor(Math.random() * 2 ** 31);
  const parallel = values.parallel.split(",").map((p) => p.trim());
  if (parallel.some((p) => !/^[1-9]\d*$/.test(p))) {
    console.error(
      `fuzz: --parallel must list whole numbers from 1 to 3: current value is ${values.parallel}`,
    );
    return 2;
  }
  const groupCommitMs = Number(values["group-commit-ms"]);
  if (!Number.isFinite(groupCommitMs) || groupCommitMs < 0 || groupCommitMs > 100) {
    console.error(
      `fuzz: --group-commit-ms must be a number of milliseconds from 0 to 100: current value is ${
        values["group-commit-ms"]
      }`,
    );
    return 2;
  }
  const defects: PlantedDefects = {};
  for (const d of values.defect ?? []) {
    if (!(PLANTED_DEFECTS as readonly string[]).includes(d)) {
      console.error(`fuzz: --defect must be one of ${PLANTED_DEFECTS.join(", ")}: current value is ${d}`);
      return 2;
    }
    defects[d as keyof PlantedDefects] = true;
  }
  const targets = { demo: demoAgent, jobs: jobsAgent, team: teamAgent, mcp: mcpAgent, signals: signalsAgent };
  if (!Object.hasOwn(targets, values.target)) {
    console.error(
      `fuzz: --target must be demo, jobs, team, mcp or signals: current value is ${values.target}`,
    );
    return 2;
  }
  const jobs = values.target === "jobs";
  const team = values.target === "team";
  const signals = values.target === "signals";
  const target = values.target === "demo" ? "" : ` --target ${values.target}`;
  const replay = values.replay;
  const schedules = Number(values.schedules);
  console.log(
    replay
      ? `fuzz replay ${replay}`
      : `fuzz seed=${seed} schedules=${schedules}${target.replace(" --target ", " target=")}${
        groupCommitMs > 0 ? ` group_commit_ms=${groupCommitMs}` : ""
      }`,
  );
  let last = performance.now();
  const report = await fuzz(targets[values.target as keyof typeof targets], {
    schedules,
    seed,
    replay,
    remote: "mock-cloud",
    approvalTool: jobs || team || signals ? undefined : DEMO_APPROVAL_TOOL,
    ...(signals ? { signal: SIGNALS_TARGET_SIGNAL } : {}),
    maxFaults: Number(values["max-faults"]),
    parallel: parallel.map(Number),
    // A budget on the family is the family test's (harness/family_test.ts); the team's schedules draw none.
    faults:
      (values.faults?.split(",") ?? (team ? ["kill", "stall", "cloud", "model", "outage"] : undefined)) as
        | FaultFamily[]
        | undefined,
    defects,
    keepGoing: values["keep-going"],
    groupCommitMs,
    transcript: values.transcript !== undefined || replay !== undefined,
    replayCommand: `deno task fuzz${target}${groupCommitMs > 0 ? ` --group-commit-ms ${groupCommitMs}` : ""}${
      (values.defect ?? []).map((d) => ` --defect ${d}`).join("")
    } --replay`,
    onSchedule: (_r, i) => {
      if (performance.now() - last > 5_000) {
        last = performance.now();
        console.log(`  ... ${i + 1} schedules`);
      }
    },
  });
  if (replay) console.log(report.transcript!.join("\n"));
  else if (values.transcript) {
    await Deno.writeTextFile(values.transcript, report.transcript!.join("\n") + "\n");
  }
  for (const f of report.failures) console.log(`\n${f.text}`);
  const seconds = report.elapsedMs / 1000;
  const kinds = Object.entries(report.kinds).sort(([a], [b]) => a.localeCompare(b));
  console.log(
    `\nseed=${seed} schedules=${report.schedules} violations=${report.failures.length} ` +
      `time=${seconds.toFixed(1)}s rate=${(report.schedules / Math.max(seconds, 1e-9)).toFixed(1)}/s`,
  );
  console.log(
    `fault kinds hit: ${kinds.length} (${kinds.map(([k, n]) => `${k}=${n}`).join(" ")}); ` +
      `distinct positions hit: ${report.positions}; faults aimed past the run's end: ${report.notReached}`,
  );
  console.log(
    `calls per answer: ${
      Object.entries(report.parallel).map(([p, n]) => `${p}=${n}`).join(" ")
    } schedules (parallel=N in a schedule); under limits: ${report.limited} schedules; ` +
      `deployed under: ${
        report.deployed.carried + report.deployed.refused + report.deployed.stayed
      } schedules (carried on by version 2: ${report.deployed.carried}, handed back to version 1: ${report.deployed.refused}, never restarted: ${report.deployed.stayed})`,
  );
  return report.failures.length > 0 ? 1 : 0;
}

if (import.meta.main) {
  try {
    Deno.exitCode = await main(Deno.args);
  } catch (err) {
    if (err instanceof FuzzError) {
      console.error(`fuzz: ${err.code}: ${err.message}`);
      Deno.exitCode = 2;
    } else throw err;
  }
}
