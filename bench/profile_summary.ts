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
 * @module
 */

import { parseArgs } from "node:util";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
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
    options: { top: { type: "string", default: "25" } },
  });
  for (const path of positionals) {
    const rows = selfTimes(JSON.parse(await Deno.readTextFile(path)));
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
