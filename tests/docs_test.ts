/**
 * The docs stay readable and connected: README.md and ARCHITECTURE.md within their sizes, every page under
 * docs/ (and bench/README.md) reachable from the README, and every relative link in them pointing at a file
 * that exists and, for `#anchor` links, at a heading that exists there (GitHub's anchors).
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/** The pages checked, relative to the repository's root. */
async function pages(): Promise<string[]> {
  const list = ["README.md", "ARCHITECTURE.md", "bench/README.md", "mock/README.md"];
  for await (const entry of Deno.readDir(new URL("docs/", ROOT))) {
    if (entry.isFile && entry.name.endsWith(".md")) list.push(`docs/${entry.name}`);
  }
  return list.sort();
}

/** The page's lines with those inside fenced code blocks blanked, so code is never read as a link or heading. */
function outsideFences(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split("\n")) {
    const mark = /^\s*(`{3,}|~{3,})/.exec(line)?.[1];
    if (fence !== undefined) {
      if (mark && mark[0] === fence[0] && mark.length >= fence.length) fence = undefined;
      lines.push("");
    } else if (mark) {
      fence = mark;
      lines.push("");
    } else {
      lines.push(line);
    }
  }
  return lines;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens (github-slugger). */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // a link in a heading anchors on its text
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "").replaceAll(" ", "-");
}

/** Every heading's anchor in a page, with GitHub's `-1`, `-2` suffixes for repeats. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of outsideFences(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative links of a page: `[text](target)` and `![alt](target)` outside code. */
function links(markdown: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  outsideFences(markdown).forEach((line, i) => {
    const text = line.replace(/(`+)[^`]*?\1/g, ""); // inline code is not a link either
    for (const m of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      out.push({ line: i + 1, target });
    }
  });
  return out;
}

async function read(path: string): Promise<string> {
  return await Deno.readTextFile(new URL(path, ROOT));
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(new URL(path, ROOT));
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/** `path` resolved against the folder of `from`, both relative to the root. */
function resolve(from: string, path: string): string {
  return new URL(path, new URL(from, ROOT)).pathname.slice(ROOT.pathname.length);
}

Deno.test("slug() makes GitHub's anchors", () => {
  assert.equal(slug("6. Flagged calls and cancelling"), "6-flagged-calls-and-cancelling");
  assert.equal(slug("PGlite's prepared statements"), "pglites-prepared-statements");
  assert.equal(
    slug("A tool that takes no idempotency key: reconcile"),
    "a-tool-that-takes-no-idempotency-key-reconcile",
  );
  assert.equal(
    slug("A tool call fails for a while (network error, timeout, 408, 409, 429, 5xx, garbage)"),
    "a-tool-call-fails-for-a-while-network-error-timeout-408-409-429-5xx-garbage",
  );
  assert.equal(
    slug("What a step costs, beside the database's floor"),
    "what-a-step-costs-beside-the-databases-floor",
  );
});

Deno.test("every relative link in the docs points at a file that exists, and at a heading there", async () => {
  const problems: string[] = [];
  for (const page of await pages()) {
    const text = await read(page);
    for (const { line, target } of links(text)) {
      const [path, anchor] = target.split("#", 2) as [string, string | undefined];
      const file = path === "" ? page : resolve(page, decodeURI(path));
      if (!(await exists(file))) {
        problems.push(`${page}:${line}: ${target}: no file ${file}`);
        continue;
      }
      if (anchor === undefined) continue;
      if (!file.endsWith(".md")) {
        problems.push(`${page}:${line}: ${target}: an anchor into a file that is not markdown`);
        continue;
      }
      const heads = anchors(file === page ? text : await read(file));
      if (!heads.has(anchor)) problems.push(`${page}:${line}: ${target}: no heading #${anchor} in ${file}`);
    }
  }
  assert.deepEqual(problems, []);
});

Deno.test("every page under docs/, and bench/README.md, is linked from the README", async () => {
  const readme = await read("README.md");
  const linked = new Set(links(readme).map(({ target }) => resolve("README.md", target.split("#")[0])));
  const missing = (await pages()).filter((p) =>
    (p.startsWith("docs/") || p === "bench/README.md") && !linked.has(p)
  );
  assert.deepEqual(missing, []);
});

Deno.test("README.md stays at most 300 lines and ARCHITECTURE.md at most 350", async () => {
  const count = async (path: string) => (await read(path)).trimEnd().split("\n").length;
  const readme = await count("README.md");
  const architecture = await count("ARCHITECTURE.md");
  assert.ok(
    readme <= 300,
    `README.md has ${readme} lines; keep it to 300 and move detail to a page under docs/`,
  );
  assert.ok(
    architecture <= 350,
    `ARCHITECTURE.md has ${architecture} lines; keep it to 350 and move detail to docs/internals.md`,
  );
});

/** The cells of a table row, backticks kept; undefined for a line that is no table row. */
function cells(line: string): string[] | undefined {
  return /^\|.*\|$/.test(line.trim()) ? line.trim().slice(1, -1).split("|").map((c) => c.trim()) : undefined;
}

/**
 * What ARCHITECTURE.md's maps name that does not exist: in a row whose first
 * cell is a folder (`step/` of the library, or `cli/` of the repository),
 * each file named (`act.ts`) must be in that folder; in the walk of a step,
 * each function named after a file (`step/act.ts` `act`, `sendCall`) must be
 * declared in it.
 */
async function architectureProblems(markdown: string): Promise<string[]> {
  const problems: string[] = [];
  const declares = (src: string, name: string) =>
    new RegExp(`(function\\*?|class|interface|type|const|let)\\s+${name}\\b|^\\s+(async\\s+)?${name}\\(`, "m")
      .test(src);
  for (const line of outsideFences(markdown)) {
    const row = cells(line);
    if (!row || row.length < 2) continue;
    const folder = /^`([a-z_]+\/)`$/.exec(row[0])?.[1];
    if (folder) {
      const base = (await exists(`runtime/${folder}`)) ? `runtime/${folder}` : folder;
      if (!(await exists(base))) {
        problems.push(`${folder}: no such folder`);
        continue;
      }
      for (const [, name] of row.slice(1).join("|").matchAll(/`([A-Za-z0-9_]+\.ts)`/g)) {
        if (!(await exists(`${base}${name}`))) problems.push(`${folder}: ${base}${name} does not exist`);
      }
      continue;
    }
    // The walk: a cell of `file.ts` `fn`, `fn2` pairs.
    for (const part of row[1].split(/,\s*(?=`[a-z_]+\/)/)) {
      const m = /^`([a-z_]+\/[a-z_]+\.ts)`\s+(.*)$/.exec(part.trim());
      if (!m) continue;
      const path = `runtime/${m[1]}`;
      if (!(await exists(path))) {
        problems.push(`${m[1]}: does not exist`);
        continue;
      }
      const src = await Deno.readTextFile(new URL(path, ROOT));
      for (const [, fn] of m[2].matchAll(/`([A-Za-z_]\w*)`/g)) {
        if (!declares(src, fn)) problems.push(`${m[1]}: declares no ${fn}`);
      }
    }
  }
  return problems;
}

Deno.test("ARCHITECTURE.md names only files and functions that exist, and the check fails on one that does not", async () => {
  const markdown = await read("ARCHITECTURE.md");
  assert.deepEqual(await architectureProblems(markdown), []);
  assert.match(markdown, /`step\/decide\.ts` `decide`/, "the walk names the decision's stage");
  assert.deepEqual(
    await architectureProblems(
      "| `step/` | base | `decide.ts`, `walk.ts` |\n| send | `step/send.ts` `sendCall`, `sendTwice` | x |\n" +
        "| close | `step/gone.ts` `f` | x |\n| `nowhere/` | x | `a.ts` |",
    ),
    [
      "step/: runtime/step/walk.ts does not exist",
      "step/send.ts: declares no sendTwice",
      "step/gone.ts: does not exist",
      "nowhere/: no such folder",
    ],
  );
});
