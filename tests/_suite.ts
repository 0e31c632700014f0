/**
 * `deno task test`: the whole suite (`deno test` over every file, one file
 * per core, with the doc examples), its output passed through as it comes,
 * then the list of what it skipped and why. A test that cannot run here says
 * so on a line of its own, `skipped (<reason>): <test>`; a reason shared by
 * 96 tests is one line among two thousand, so the list gathers them by
 * reason at the end, where a person reads. Arguments go to `deno test`
 * (`deno task test tests/own_agent_test.ts` runs that file alone). Exits
 * with `deno test`'s code.
 *
 * Before the tests it makes one PGlite template (`pgliteTemplate({ gzip:
 * false })`, one `initdb`) and hands its path to them as `TEST_PGLITE_TEMPLATE` (kept when
 * already set), so the in-memory databases the tests open start from it
 * (`tests/_pg.ts`: `openTestPglite`, `openTestSim`, `bothStoresTest`) instead
 * of each running `initdb`.
 *
 * @module
 */

import { pgliteTemplate } from "../runtime/store/pglite.ts";

/** `deno test`'s flags for the suite. */
export const SUITE_FLAGS = [
  "-A",
  "--unstable-no-legacy-abort",
  "--sanitize-ops",
  "--sanitize-resources",
  "--doc",
  "--parallel",
];

/** The skips in `lines`, by reason, each test once, in the order first seen. */
export function skipsByReason(lines: Iterable<string>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const raw of lines) {
    // deno test prefixes a parallel file's output with its name and colours it (ESC [ ... m).
    // deno-lint-ignore no-control-regex
    const line = raw.replace(/\x1b\[[0-9;]*m/g, "").replace(/^\.\/\S+ => /, "").trim();
    const m = /^skipped \((.+?)\): (.+)$/.exec(line);
    if (!m) continue;
    const tests = out.get(m[1]) ?? [];
    if (!tests.includes(m[2])) tests.push(m[2]);
    out.set(m[1], tests);
  }
  return out;
}

/** The closing list: every reason with how many tests it skipped and which, or one line saying none were. */
export function skipReport(skips: Map<string, string[]>): string {
  const total = [...skips.values()].reduce((n, t) => n + t.length, 0);
  if (total === 0) return "skipped: nothing; every test could run here\n";
  const lines = [
    `skipped: ${total} test${total === 1 ? "" : "s"}, for ${skips.size} reason${skips.size === 1 ? "" : "s"}`,
  ];
  for (const [reason, tests] of skips) {
    lines.push(`  ${reason}: ${tests.length}`);
    for (const t of tests) lines.push(`    ${t}`);
  }
  return lines.join("\n") + "\n";
}

/** Writes a PGlite template to a file of its own, unless `TEST_PGLITE_TEMPLATE` names one; its path, and whether it is ours to remove. */
async function template(): Promise<{ path: string; ours: boolean }> {
  const given = Deno.env.get("TEST_PGLITE_TEMPLATE");
  if (given) return { path: given, ours: false };
  // Not gzipped: each database opened from it skips the unzipping, about 0.3 s of a core.
  const path = await Deno.makeTempFile({ prefix: "agent-runtime-pglite-", suffix: ".tar" });
  await Deno.writeFile(path, new Uint8Array(await (await pgliteTemplate({ gzip: false })).arrayBuffer()));
  return { path, ours: true };
}

if (import.meta.main) {
  const made = await template();
  const child = new Deno.Command(Deno.execPath(), {
    args: ["test", ...SUITE_FLAGS, ...Deno.args],
    env: { TEST_PGLITE_TEMPLATE: made.path },
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const seen: string[] = [];
  let rest = "";
  const decoder = new TextDecoder();
  for await (const chunk of child.stdout) {
    await Deno.stdout.write(chunk);
    rest += decoder.decode(chunk, { stream: true });
    const parts = rest.split("\n");
    rest = parts.pop() ?? "";
    for (const line of parts) if (line.includes("skipped (")) seen.push(line);
  }
  if (rest.includes("skipped (")) seen.push(rest);
  const { code } = await child.status;
  if (made.ours) await Deno.remove(made.path).catch(() => {});
  await Deno.stdout.write(new TextEncoder().encode("\n" + skipReport(skipsByReason(seen))));
  Deno.exit(code);
}
