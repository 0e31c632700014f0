/**
 * The worker's gathered stdout lines (`StdoutLines`), in a process of their
 * own: every line out in the order logged, and a WARN line out before the
 * process kills itself (a crash point's `kill -9`) or exits.
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const LOG = fileURLToPath(new URL("../runtime/base/log.ts", import.meta.url));

async function runScript(body: string): Promise<{ lines: string[]; code: number; signal: string | null }> {
  const script = `import { Logger, StdoutLines } from ${JSON.stringify(LOG)};
import { SystemClock } from ${JSON.stringify(LOG.replace(/log\.ts$/, "clock.ts"))};
const out = new StdoutLines().listen();
const log = new Logger({ clock: new SystemClock(), sink: out.sink, flush: out.flush, format: "json" });
${body}`;
  const res = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    stdout: "piped",
    stderr: "null",
  }).output();
  const lines = new TextDecoder().decode(res.stdout).split("\n").filter((l) => l !== "")
    .map((l) => JSON.parse(l).event);
  return { lines, code: res.code, signal: res.signal };
}

Deno.test("gathered lines come out in the order logged, across tasks and microtasks", async () => {
  const { lines, code } = await runScript(`
log.info("a");
await Promise.resolve();
log.info("b");
setTimeout(() => { log.info("d"); }, 10);
log.info("c");
await new Promise((r) => setTimeout(r, 50));
log.info("e");`);
  assert.equal(code, 0);
  assert.deepEqual(lines, ["a", "b", "c", "d", "e"]);
});

Deno.test("a WARN line and the lines held before it are out before the process kills itself", async () => {
  const { lines, signal } = await runScript(`
log.info("intent");
log.warn("crash");
Deno.kill(Deno.pid, "SIGKILL");`);
  assert.equal(signal, "SIGKILL");
  assert.deepEqual(lines, ["intent", "crash"]);
});

Deno.test("the lines held are out when the process exits in the same stretch, or dies of an uncaught error", async () => {
  const exited = await runScript(`
log.info("one");
log.info("two");
Deno.exit(6);`);
  assert.equal(exited.code, 6);
  assert.deepEqual(exited.lines, ["one", "two"]);
  const thrown = await runScript(`
log.info("before");
throw new Error("boom");`);
  assert.equal(thrown.code, 1);
  assert.deepEqual(thrown.lines, ["before"]);
});

Deno.test("processes sharing one pipe never cut into each other's gathered lines", async () => {
  const script = `import { Logger, StdoutLines } from ${JSON.stringify(LOG)};
import { SystemClock } from ${JSON.stringify(LOG.replace(/log\.ts$/, "clock.ts"))};
const out = new StdoutLines().listen();
const log = new Logger({ clock: new SystemClock(), sink: out.sink, flush: out.flush, format: "json" });
for (let turn = 0; turn < 20; turn++) {
  for (let i = 0; i < 100; i++) log.info("line", { writer: Deno.args[0], turn, i, pad: "x".repeat(150) });
  await new Promise((r) => setTimeout(r, 1));
}`;
  const file = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(file, script);
    const deno = JSON.stringify(Deno.execPath());
    const writers = [0, 1, 2, 3].map((w) => `${deno} run -A ${JSON.stringify(file)} ${w} &`).join(" ");
    const res = await new Deno.Command("sh", { args: ["-c", `${writers} wait`], stdout: "piped" }).output();
    const lines = new TextDecoder().decode(res.stdout).split("\n").filter((l) => l !== "");
    assert.equal(lines.length, 4 * 20 * 100);
    const seen = new Set(lines.map((l) => {
      const e = JSON.parse(l);
      return `${e.writer}/${e.turn}/${e.i}`;
    }));
    assert.equal(seen.size, lines.length);
  } finally {
    await Deno.remove(file);
  }
});
