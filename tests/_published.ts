/** What `deno publish --dry-run` would publish, for the tests that check the package as users get it. */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/** The files `deno publish --dry-run` lists, relative to the repository root. */
export async function publishedFiles(): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["publish", "--dry-run", "--allow-dirty", "--no-check"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, text);
  return [...text.matchAll(/^\s+(file:\/\/\S+) \(/gm)].map((m) => m[1].slice(ROOT.href.length));
}
