/**
 * `deno task schedule`: schedules over `client.schedules`.
 *
 * ```sh
 * deno task schedule add NAME (--cron EXPR [--zone ZONE] | --every INTERVAL) [--agent PATH] [--goal TEXT | --input JSON] ...
 * deno task schedule list [--last-runs N]
 * deno task schedule pause|resume|remove NAME
 * ```
 *
 * Everything printed goes through the display rule (`displayText`), as the
 * other commands' lines do. Exit codes: 0 done, 1 refused (no such
 * schedule) or failed, 2 bad arguments (a cron field, a zone, an interval, a
 * rule: the client's `SCHEDULE_INVALID`) or no database.
 *
 * @module
 */

import { parseArgs } from "node:util";
import type { Agent } from "../runtime/agent/agent.ts";
import { Client } from "../runtime/client/client.ts";
import type { ScheduleInfo, ScheduleOptions } from "../runtime/client/schedule_client.ts";
import { SystemClock } from "../runtime/base/clock.ts";
import { displayText } from "../runtime/base/display.ts";
import { ConfigError, describeError, hasCode, isDatabaseAway, StoreError } from "../runtime/base/errors.ts";
import { EXIT_CODES } from "../runtime/base/exit_codes.ts";
import { formatValue } from "../runtime/base/log.ts";
import { openStore } from "../runtime/store/open.ts";
import { CATCH_UP_RULES, OVERLAP_RULES } from "../runtime/store/store.ts";
import { TimeZone } from "../runtime/schedules/zone.ts";
import { checkSchedule } from "../runtime/schedules/spec.ts";
import { AGENT_LOAD_DEFAULT_S, flagProblem, integerIn, SettingsReader } from "../runtime/settings/config.ts";
import { loadAgents, type LoadedAgents } from "./agents.ts";
import { asCommand, CommandError } from "./commands.ts";

/** The usage text of `schedule`. */
export const SCHEDULE_USAGE =
  `usage: deno task schedule add NAME (--cron EXPR [--zone ZONE] | --every INTERVAL) [--agent PATH]
                               [--agent-name NAME] [--goal TEXT | --input JSON] [--overlap skip|queue|allow]
                               [--catch-up none|last|all] [--catch-up-max N] [--grace-s S]
       deno task schedule list [--last-runs N]
       deno task schedule pause NAME | resume NAME | remove NAME
  Starts runs of an agent on a schedule: each occurrence is one run, named NAME@<time in UTC>, started by the
  supervisor (or a worker host in an application) hosting the agent, however many of them tick.
  add                 creates the schedule, or replaces the one named NAME
  --cron EXPR         five fields: minute hour day-of-month month day-of-week ('0 9 * * MON-FRI', '*/15 * * * *')
  --zone ZONE         the IANA time zone the cron expression is read in (default UTC)
  --every INTERVAL    or an interval: 30s, 5m, 2h, 1d (whole seconds, at least 1 s)
  --agent PATH        the agent module (env AGENT; default: the demo); --agent-name picks one of several
  --goal TEXT         each run's text input; --input JSON for an agent with an input schema
  --overlap RULE      an occurrence while the last run is open: skip (default), queue (one waits), allow
  --catch-up RULE     occurrences an outage made late: none, last (default), all (the latest --catch-up-max)
  --catch-up-max N    1 to 100 (default 10)
  --grace-s S         how late an occurrence may start and still be on time (default 60; an interval's: at most it)
  list                every schedule: when it fires, its next occurrence, its last runs (--last-runs N, default 3)
  pause               no occurrence starts a run until it is resumed
  resume              goes on from the next occurrence after now (those of the pause are not caught up)
  remove              deletes the schedule; its runs stay
settings: --database-url URL (env DATABASE_URL, PostgreSQL) or --data-dir DIR (env DATA_DIR, embedded, default .data)
exit codes: 0 done, 1 refused or failed (one line says why), 2 bad arguments or no database`;

const OPTIONS = {
  cron: { type: "string" },
  zone: { type: "string" },
  every: { type: "string" },
  agent: { type: "string" },
  "agent-name": { type: "string" },
  goal: { type: "string" },
  input: { type: "string" },
  overlap: { type: "string" },
  "catch-up": { type: "string" },
  "catch-up-max": { type: "string" },
  "grace-s": { type: "string" },
  "last-runs": { type: "string" },
  "database-url": { type: "string" },
  "data-dir": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

const ADD_FLAGS = [
  "cron",
  "zone",
  "every",
  "agent",
  "agent-name",
  "goal",
  "input",
  "overlap",
  "catch-up",
  "catch-up-max",
  "grace-s",
];
const FLAGS: Record<string, string[]> = {
  add: ADD_FLAGS,
  list: ["last-runs"],
  pause: [],
  resume: [],
  remove: [],
};

/** An instant as the commands show it: UTC to the second (`2026-12-07T08:00:00Z`). */
function utc(d: Date): string {
  return d.toISOString().replace(/\.000Z$/, "Z");
}

/** The wall time `d` shows in `zone` (`2026-12-07 09:00`), for a schedule read in a zone other than UTC. */
function local(d: Date, zone: string): string {
  return new Date(new TimeZone(zone).wallMs(d.getTime())).toISOString().slice(0, 16).replace("T", " ");
}

/** When a schedule fires, in one cell: `cron 0 9 * * MON-FRI (Europe/Berlin)` or `every 5m`. */
function whenText(s: ScheduleInfo): string {
  return s.cron !== null ? `cron ${s.cron}${s.zone === "UTC" ? "" : ` (${s.zone})`}` : `every ${s.every}`;
}

function nextText(s: ScheduleInfo): string {
  if (s.nextAt === null) return "paused";
  const at = s.cron !== null && s.zone !== "UTC"
    ? `${utc(s.nextAt)} (${local(s.nextAt, s.zone)})`
    : utc(s.nextAt);
  return s.queuedAt ? `${at}, ${utc(s.queuedAt)} queued` : at;
}

/**
 * Prints the schedules as a table, each one's last runs under it, and, for
 * an agent none of the live workers in `hosted` hosts, that its schedules
 * wait for one (no process that could tick them runs).
 */
export function printSchedules(
  schedules: ScheduleInfo[],
  print: (line: string) => void,
  hosted?: readonly string[],
): void {
  const table = [["SCHEDULE", "AGENT", "WHEN", "OVERLAP", "CATCH-UP", "NEXT", "SKIPPED"]];
  for (const s of schedules) {
    table.push([s.name, s.agent, whenText(s), s.overlap, s.catchUp, nextText(s), String(s.skipped)]);
  }
  const cells = table.map((row) => row.map((c) => displayText(c)));
  const widths = cells[0].map((_, i) => Math.max(...cells.map((row) => row[i].length)));
  for (const row of cells) print(row.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd());
  if (schedules.length === 0) print("(no schedules)");
  for (const s of schedules.filter((s) => s.lastRuns.length > 0)) {
    print(displayText(`${s.name}: ${s.lastRuns.map((r) => `${r.runId} ${r.status}`).join(", ")}`));
  }
  const unhosted = new Set(
    schedules.filter((s) => s.enabled && !hosted?.includes(s.agent)).map((s) => s.agent),
  );
  for (const agent of hosted === undefined ? [] : [...unhosted].sort()) {
    print(
      displayText(
        `waiting: no live worker hosts agent ${agent}; its schedules tick once a supervisor or worker does`,
      ),
    );
  }
}

/** The options of `schedule add`, from its flags; a string says what is wrong. */
function addOptions(name: string, v: Record<string, string | boolean | undefined>): ScheduleOptions | string {
  const str = (k: string) => v[k] as string | undefined;
  const opts: ScheduleOptions = { name, cron: str("cron"), every: str("every"), zone: str("zone") };
  const overlap = str("overlap");
  if (overlap !== undefined && !(OVERLAP_RULES as readonly string[]).includes(overlap)) {
    return `--overlap must be one of ${OVERLAP_RULES.join(", ")}: current value is ${
      JSON.stringify(overlap)
    }`;
  }
  const catchUp = str("catch-up");
  if (catchUp !== undefined && !(CATCH_UP_RULES as readonly string[]).includes(catchUp)) {
    return `--catch-up must be one of ${CATCH_UP_RULES.join(", ")}: current value is ${
      JSON.stringify(catchUp)
    }`;
  }
  opts.overlap = overlap as ScheduleOptions["overlap"];
  opts.catchUp = catchUp as ScheduleOptions["catchUp"];
  if (str("catch-up-max") !== undefined) {
    const n = integerIn("--catch-up-max", str("catch-up-max")!, 1, 100);
    if (typeof n === "string") return n;
    opts.catchUpMax = n;
  }
  if (str("grace-s") !== undefined) {
    const n = integerIn("--grace-s", str("grace-s")!, 0, 86_400);
    if (typeof n === "string") return n;
    opts.graceMs = n * 1000;
  }
  return opts;
}

/** The agent `add` schedules, and its runs' input, from `--agent`, `--agent-name`, `--goal`, `--input`. */
async function agentAndInput(
  v: Record<string, string | boolean | undefined>,
  env: Record<string, string | undefined>,
  preloaded?: LoadedAgents,
): Promise<{ agent: Agent; input: unknown } | string> {
  const load = new SettingsReader({ AGENT_LOAD_S: env.AGENT_LOAD_S || undefined });
  const timeoutMs = load.seconds("AGENT_LOAD_S", AGENT_LOAD_DEFAULT_S);
  if (load.problems.length > 0) return load.problems[0];
  const { agents } = await loadAgents((v.agent as string | undefined) ?? (env.AGENT || undefined), {
    preloaded,
    timeoutMs,
  });
  const name = v["agent-name"] as string | undefined;
  const agent = name === undefined ? agents[0] : agents.find((a) => a.name === name);
  if (!agent) {
    return `the module has no agent named ${JSON.stringify(name)}: it has ${
      agents.map((a) => a.name).join(", ")
    }`;
  }
  const raw = (v.input ?? v.goal) as string | undefined;
  if (v.input !== undefined && v.goal !== undefined) return "give --goal TEXT or --input JSON, not both";
  if (v.input === undefined) return { agent, input: raw };
  try {
    return { agent, input: JSON.parse(raw!) };
  } catch {
    return `--input must be JSON: current value is ${JSON.stringify(raw!.slice(0, 80))}`;
  }
}

/** Runs `schedule SUBCOMMAND ...`; returns the exit code. */
export async function main(
  args: string[],
  env: Record<string, string | undefined>,
  print: (line: string) => void = console.log,
  preloaded?: LoadedAgents,
): Promise<number> {
  const usage = (problem: string) => {
    console.error(displayText(`schedule: ${problem}. 'deno task schedule --help' lists the flags`));
    return EXIT_CODES.settings;
  };
  let parsed;
  try {
    parsed = parseArgs({ args, allowPositionals: true, strict: true, options: OPTIONS });
  } catch (err) {
    return usage(flagProblem(err));
  }
  const v = parsed.values;
  const [sub, name, ...rest] = parsed.positionals;
  if (v.help || sub === undefined) {
    print(SCHEDULE_USAGE);
    return v.help ? 0 : EXIT_CODES.settings;
  }
  if (!(sub in FLAGS)) {
    return usage(`unknown subcommand ${JSON.stringify(sub)}: one of ${Object.keys(FLAGS).join(", ")}`);
  }
  const allowed = new Set([...FLAGS[sub], "database-url", "data-dir", "help"]);
  const foreign = Object.keys(v).find((k) => !allowed.has(k));
  if (foreign !== undefined) return usage(`${sub} takes no flag '--${foreign}'`);
  if (sub === "list" ? name !== undefined : name === undefined) {
    return usage(
      sub === "list"
        ? `list takes no argument: current one is ${JSON.stringify(name)}`
        : `${sub} needs a schedule's name`,
    );
  }
  if (rest.length > 0) return usage(`unexpected argument ${JSON.stringify(rest[0])}`);
  let lastRuns = 3;
  if (v["last-runs"] !== undefined) {
    const n = integerIn("--last-runs", v["last-runs"], 0, 100);
    if (typeof n === "string") return usage(n);
    lastRuns = n;
  }
  let add: { opts: ScheduleOptions; agent: Agent } | undefined;
  if (sub === "add") {
    const opts = addOptions(name, v);
    if (typeof opts === "string") return usage(opts);
    // The name and timing are checked before the agent is loaded or the database opened.
    try {
      checkSchedule(name, opts);
    } catch (err) {
      if (hasCode(err, "SCHEDULE_INVALID")) {
        console.error(displayText(`${err.code}: ${err.message}`));
        return EXIT_CODES.settings;
      }
      throw err;
    }
    try {
      const loaded = await agentAndInput(v, env, preloaded);
      if (typeof loaded === "string") return usage(loaded);
      add = { opts: { ...opts, input: loaded.input }, agent: loaded.agent };
    } catch (err) {
      if (err instanceof ConfigError) return usage(err.problems.join("; "));
      throw err;
    }
  }
  let client: Client;
  try {
    client = new Client(
      await openStore({
        databaseUrl: v["database-url"] ?? (env.DATABASE_URL || undefined),
        dataDir: v["data-dir"] ?? (env.DATA_DIR || ".data"),
      }),
      new SystemClock(),
    );
  } catch (err) {
    if (err instanceof StoreError) {
      console.error(`${err.code}: ${err.message}`);
      return isDatabaseAway(err) ? EXIT_CODES.databaseAway : EXIT_CODES.settings;
    }
    throw err;
  }
  const p = (line: string) => print(displayText(line));
  try {
    await scheduleCommand(client, sub, name, { add, lastRuns, print: p });
    return 0;
  } catch (err) {
    if (err instanceof CommandError) {
      console.error(displayText(`${err.code}: ${err.message}`));
      return err.exitCode;
    }
    console.error(displayText(`schedule ${sub} failed: ${describeError(err).split("\n")[0]}`));
    return 1;
  } finally {
    await client.close().catch(() => {});
  }
}

/** One subcommand (`add`, `list`, `pause`, `resume`, `remove`) over the client, printing what it did. */
export async function scheduleCommand(
  client: Client,
  sub: string,
  name: string,
  o: { add?: { opts: ScheduleOptions; agent: Agent }; lastRuns: number; print: (line: string) => void },
): Promise<void> {
  const s = client.schedules;
  switch (sub) {
    case "add": {
      const out = await asCommand(() => s.set(o.add!.agent, o.add!.opts));
      o.print(
        `scheduled  name=${out.name}  agent=${out.agent}  ${
          out.cron !== null ? `cron=${formatValue(out.cron)}  zone=${out.zone}` : `every=${out.every}`
        }  ` +
          `overlap=${out.overlap}  catch_up=${out.catchUp}  next=${nextText(out)}  input=${
            formatValue(out.input)
          }`,
      );
      return;
    }
    case "list":
      printSchedules(
        await asCommand(() => s.list({ lastRuns: o.lastRuns })),
        o.print,
        await client.reads.hostedAgents(),
      );
      return;
    case "pause":
      await asCommand(() => s.pause(name));
      o.print(`paused  name=${name}`);
      return;
    case "resume": {
      const out = await asCommand(() => s.resume(name));
      o.print(`resumed  name=${name}  next=${nextText(out)}`);
      return;
    }
    case "remove":
      await asCommand(() => s.remove(name));
      o.print(`removed  name=${name}  (its runs stay)`);
      return;
  }
}
