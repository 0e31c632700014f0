/**
 * Summarises a V8 CPU profile (`deno run --cpu-prof` writes one, `.cpuprofile`)
 * by self time per function, the heaviest first:
 *
 * ```
 * deno run -A --cpu-prof --cpu-prof-dir=.prof bench/step_bench.ts --only "postgres 16 runtime, no wire" --rounds 3
 * deno run -A bench/profile_summary.ts .prof/*.cpuprofile --top 25
 * ```
 *
 * Idle time (`(idle)`, `(program)`, `(garbage collector)`) is listed too, so the
 * shares add up to the profile's whole span.
 *
 * `--by module` sums self time per module instead (a file of this repository,
 * an npm package, a Deno extension, or `(native)` for V8 builtins and Deno's
 * ops); `--by caller` gives each sample's self time to the nearest function of
 * this repository on its stack (`runtime/`, `examples/`, `cli/`,
 * `supervisor/`), so the cost of `fetch`, of the driver or of a builtin shows
 * under the runtime's function that called it.
 *
 * @module
 */

import { parseArgs } from "node:util";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

const VM_ENTRIES = /^\((idle|program|garbage collector)\)$/;
const OWN_CODE = /\/(runtime|examples|cli|supervisor)\/[^/]+(\/[^/]+)?\.ts$/;

/** A frame's module: a file of this repository, `npm:<package>`, a Deno extension's file, or `(native)`. */
function moduleOf(url: string): string {
  if (!url) return "(native)";
  const npm = /node_modules\/(?:\.deno\/)?((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (npm) return `npm:${npm[1]}`;
  const own = OWN_CODE.exec(url);
  if (own) return url.slice(url.lastIndexOf(`/${own[1]}/`) + 1);
  return url.replace(/^file:\/\/.*\//, "");
}

/** `name url:line` of a frame, with the path cut to the repository's. */
function frameName(f: ProfileNode["callFrame"]): string {
  const where = f.url ? ` ${f.url.replace(/^.*\/(node_modules|wt-[^/]+)\//, "$1/")}:${f.lineNumber + 1}` : "";
  return `${f.functionName || "(anonymous)"}${where}`;
}

/**
 * Self time in milliseconds per module (`by: "module"`), or per nearest
 * function of this repository on the sample's stack (`by: "caller"`),
 * heaviest first; V8's own entries (idle, program, GC) under their names.
 */
export function groupedTimes(profile: Profile, by: "module" | "caller"): { name: string; ms: number }[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const ms = new Map<string, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const leaf = byId.get(profile.samples[i]);
    if (!leaf) continue;
    let name: string;
    if (VM_ENTRIES.test(leaf.callFrame.functionName)) name = leaf.callFrame.functionName;
    else if (by === "module") name = moduleOf(leaf.callFrame.url);
    else {
      name = "(no function of this repository)";
      // Bounded by the stack's depth: each step goes to the parent, the root has none.
      for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
        const f = byId.get(id)!.callFrame;
        if (OWN_CODE.test(f.url)) {
          name = frameName(f);
          break;
        }
      }
    }
    ms.set(name, (ms.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  }
  return [...ms.entries()].map(([name, ms]) => ({ name, ms })).sort((a, b) => b.ms - a.ms);
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time in milliseconds per `function url:line`, heaviest first. */
export function selfTimes(profile: Profile): { name: string; ms: number }[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const ms = new Map<string, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    if (!node) continue;
    const f = node.callFrame;
    const where = f.url
      ? ` ${f.url.replace(/^.*\/(node_modules|wt-[^/]+)\//, "$1/")}:${f.lineNumber + 1}`
      : "";
    const name = `${f.functionName || "(anonymous)"}${where}`;
    ms.set(name, (ms.get(name) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  }
  return [...ms.entries()].map(([name, ms]) => ({ name, ms })).sort((a, b) => b.ms - a.ms);
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: { top: { type: "string", default: "25" }, by: { type: "string", default: "function" } },
  });
  if (!["function", "module", "caller"].includes(values.by)) {
    console.error(
      `profile_summary: --by must be function, module or caller: got ${JSON.stringify(values.by)}`,
    );
    Deno.exit(2);
  }
  for (const path of positionals) {
    const profile = JSON.parse(await Deno.readTextFile(path));
    const rows = values.by === "function"
      ? selfTimes(profile)
      : groupedTimes(profile, values.by as "module" | "caller");
    const total = rows.reduce((n, r) => n + r.ms, 0);
    const busy = rows.filter((r) => !/^\((idle|program)\)/.test(r.name)).reduce((n, r) => n + r.ms, 0);
    console.log(`${path}: ${total.toFixed(0)} ms sampled, ${busy.toFixed(0)} ms busy`);
    for (const r of rows.slice(0, Number(values.top))) {
      console.log(
        `${r.ms.toFixed(1).padStart(9)} ms ${(100 * r.ms / total).toFixed(1).padStart(5)}%  ${r.name}`,
      );
    }
  }
}
