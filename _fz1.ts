import { demoAgent, fuzz } from "/work/wt-fuzz/harness/fuzz.ts";
const t = performance.now();
const r = await fuzz(demoAgent, { schedules: Number(Deno.args[0] ?? 50), seed: 1, remote: "mock-cloud", keepGoing: true, shrink: false });
console.log(r.schedules, r.failures.length, (performance.now()-t).toFixed(0), r.elapsedMs.toFixed(0), JSON.stringify(r.kinds), r.positions, r.notReached);
for (const f of r.failures.slice(0, 5)) console.log(f.text);
