/**
 * The package's surface is a deliberate choice: every name each export path of deno.json exports (as
 * `deno doc --json` reads it) is listed in testdata/surface.json, so an export added, moved or dropped fails here
 * until the list is changed with it. `mod.ts` stays what a user writing and running agents learns in five
 * minutes; what other audiences need has its own path. Every export path is also linted and published.
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
const PINNED = new URL("testdata/surface.json", import.meta.url);

/** deno.json's export paths, each with its file (`./store` → `store.ts`). */
async function exportPaths(): Promise<Map<string, string>> {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  const exports = config.exports as Record<string, string>;
  return new Map(Object.entries(exports).map(([path, file]) => [path, file.replace(/^\.\//, "")]));
}

/** The names each file exports, sorted, from one `deno doc --json` over all of them. */
async function exportedNames(files: string[]): Promise<Map<string, string[]>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--json", ...files],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const doc = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    nodes: Record<string, { symbols: { name: string }[] }>;
  };
  return new Map(files.map((file) => {
    const node = doc.nodes[new URL(file, ROOT).href];
    assert.ok(node, `deno doc said nothing of ${file}`);
    return [file, node.symbols.map((s) => s.name).sort()];
  }));
}

Deno.test("every export path exports exactly the names pinned for it", async () => {
  const paths = await exportPaths();
  const pinned = JSON.parse(await Deno.readTextFile(PINNED)) as Record<string, string[]>;
  assert.deepEqual(
    [...paths.keys()].sort(),
    Object.keys(pinned).sort(),
    "an export path without its pinned list",
  );
  const names = await exportedNames([...paths.values()]);
  const changes: string[] = [];
  for (const [path, file] of paths) {
    const now = names.get(file)!;
    const was = new Set(pinned[path]);
    const added = now.filter((n) => !was.has(n));
    const dropped = pinned[path].filter((n) => !now.includes(n));
    if (added.length > 0 || dropped.length > 0) {
      changes.push(
        `${path} (${file}) exports ${now.length} names, ${pinned[path].length} pinned: ` +
          `added ${added.join(", ") || "none"}; dropped ${dropped.join(", ") || "none"}`,
      );
    }
  }
  assert.deepEqual(
    changes,
    [],
    `change tests/testdata/surface.json with the exports:\n${changes.join("\n")}`,
  );
});

Deno.test("mod.ts stays a surface learned in minutes: its count is pinned, far under the 169 of before #23", async () => {
  const pinned = JSON.parse(await Deno.readTextFile(PINNED)) as Record<string, string[]>;
  // A deliberate bound, not a measurement: a name added to mod.ts past it belongs on another export path.
  // 95 until #35, which moved the planner's contract to ./planner, the operators' shapes to ./client and
  // ./store, the clocks and crash points to ./testing, and a tool author's further names (HTTP helpers, each
  // outcome and option by name, reconciling, child runs, own error codes) to ./tools. What stays: defining
  // agents and tools, the limits, running (connect, Client, the worker, the logger), and the errors with
  // their codes.
  assert.ok(pinned["."].length <= 42, `mod.ts exports ${pinned["."].length} names`);
  for (
    const name of ["defineAgent", "defineTool", "connect", "Client", "WorkerHost", "ToolError", "Budget"]
  ) {
    assert.ok(pinned["."].includes(name), `mod.ts exports ${name}`);
  }
  // A model of one's own, the operators', the page's and a conversation's calls (the client's other parts,
  // reached as client.operators, client.reads, client.conversations), and the store's insides are other
  // audiences'.
  const elsewhere: Record<string, string[]> = {
    "./planner": ["Planner", "DecideRequest", "PlannerDecision", "OpenAIPlanner", "TranscriptMessage"],
    "./client": [
      "OperatorClient",
      "ReadClient",
      "ConversationClient",
      "RunRecord",
      "Resolution",
      "Settlement",
      "PruneResult",
    ],
    "./store": ["Store", "SqlClient", "STATEMENTS", "JournalRow", "SideEffectRow", "RunRow"],
    "./testing": ["ManualClock", "SystemClock", "CRASH_POINTS"],
    "./tools": [
      "idempotencyKeyHeader",
      "isTransientStatus",
      "parseRetryAfter",
      "ToolAccepted",
      "ReconcileContext",
    ],
  };
  for (const [path, names] of Object.entries(elsewhere)) {
    for (const name of names) {
      assert.ok(pinned[path].includes(name), `${path} exports ${name}`);
      assert.ok(!pinned["."].includes(name), `${name} is ${path}'s, not mod.ts's`);
    }
  }
});

/** A publish pattern as a regular expression: a double star and a slash stand for any folders, a star for part of a name. */
function glob(pattern: string): RegExp {
  const folders = pattern.replaceAll(".", "\\.").split("**/");
  return new RegExp(`^${folders.map((part) => part.replaceAll("*", "[^/]*")).join("(?:.*/)?")}$`);
}

Deno.test("every export path's docs are linted and its file is published", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  const check = config.tasks.check.command as string;
  const lint = /deno doc --lint ([^&]+)/.exec(check)?.[1].trim().split(/\s+/) ?? [];
  const include = config.publish.include as string[];
  for (const file of (await exportPaths()).values()) {
    assert.ok(lint.includes(file), `deno task check lints the docs of ${file}, with every other export path`);
    assert.ok(include.some((pattern) => glob(pattern).test(file)), `${file} is in publish.include`);
  }
});
