/**
 * The library's long functions and long files, on a ledger (issue 35): every
 * function in `runtime/` over 70 lines and every file over 500 is listed
 * here with the reason it is long, and may only shrink. A new one, or one
 * that grew, fails; one that fell under its limit must leave the ledger. The
 * entries marked "debt" are what the step's spine is to split.
 *
 * @module
 */

import assert from "node:assert/strict";
import { longFunctions, pairBraces } from "./_code_size.ts";

const FUNCTION_LIMIT = 70;
const FILE_LIMIT = 500;
const DEBT = "debt: to be split into named stages (issue 35, the step's spine)";

/** `file name` → its length in lines now, and why it is long. */
const LONG_FUNCTIONS: Record<string, { lines: number; why: string }> = {
  "runtime/settings/config.ts loadSettings": {
    lines: 96,
    why: "one read per setting, in the order of the settings table",
  },
  "runtime/mcp/options.ts checkOptions": {
    lines: 89,
    why: "one check per option, each with its own message",
  },
  "runtime/model/params.ts checkModelParams": { lines: 94, why: "one check per request parameter" },
  "runtime/model/_ai_sdk_stream.ts gatherStream": {
    lines: 110,
    why: "one case per part type of the stream",
  },
  "runtime/model/_ai_sdk_wire.ts aiSdkAnswer": { lines: 136, why: "one case per part type of the answer" },
};

/** `file` → its length in lines now, and why it is long. */
const LONG_FILES: Record<string, { lines: number; why: string }> = {
  "runtime/store/run_writes.ts": {
    lines: 921,
    why: "every write of a run, each statement's SQL beside its caller",
  },
  "runtime/model/_ai_sdk_wire.ts": { lines: 651, why: "the AI SDK's wire format both ways" },
  "runtime/store/overview.ts": {
    lines: 543,
    why: "the operators' reads, each statement's SQL beside its caller",
  },
};

async function libraryFiles(dir = "runtime"): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(new URL(`../${dir}`, import.meta.url))) {
    const path = `${dir}/${e.name}`;
    if (e.isDirectory && e.name !== "testdata") out.push(...await libraryFiles(path));
    else if (e.isFile && e.name.endsWith(".ts") && !e.name.endsWith("_test.ts")) out.push(path);
  }
  return out.sort();
}

function read(path: string): Promise<string> {
  return Deno.readTextFile(new URL(`../${path}`, import.meta.url));
}

/** Compares what was measured with a ledger: each problem as one line. */
function against(
  measured: Map<string, number>,
  ledger: Record<string, { lines: number }>,
  limit: number,
): string[] {
  const problems: string[] = [];
  for (const [key, lines] of measured) {
    const entry = ledger[key];
    if (!entry) {
      problems.push(
        `${key}: ${lines} lines, over ${limit} and not on the ledger: split it, or add it with why`,
      );
    } else if (lines > entry.lines) {
      problems.push(`${key}: ${lines} lines, grown from ${entry.lines}: the ledger only shrinks`);
    }
  }
  for (const [key, entry] of Object.entries(ledger)) {
    if (!measured.has(key)) problems.push(`${key}: no longer over ${limit} lines: take it off the ledger`);
    else if (measured.get(key)! < entry.lines) {
      problems.push(`${key}: ${measured.get(key)} lines now, the ledger says ${entry.lines}: lower it`);
    }
  }
  return problems;
}

Deno.test("every function in runtime/ over 70 lines and every file over 500 is on the ledger, with why, no longer than it says", async () => {
  const functions = new Map<string, number>();
  const files = new Map<string, number>();
  for (const path of await libraryFiles()) {
    const src = await read(path);
    for (const f of longFunctions(src, FUNCTION_LIMIT)) functions.set(`${path} ${f.name}`, f.lines);
    const lines = src.split("\n").length - (src.endsWith("\n") ? 1 : 0);
    if (lines > FILE_LIMIT) files.set(path, lines);
  }
  const problems = [
    ...against(functions, LONG_FUNCTIONS, FUNCTION_LIMIT),
    ...against(files, LONG_FILES, FILE_LIMIT),
  ];
  assert.deepEqual(problems, []);
  for (const [key, e] of [...Object.entries(LONG_FUNCTIONS), ...Object.entries(LONG_FILES)]) {
    assert.ok(e.why.length > 10, `${key} says why it is long`);
  }
  const debts = Object.values(LONG_FUNCTIONS).filter((e) => e.why === DEBT).length;
  console.log(
    `long functions: ${functions.size} (${debts} debt), long files: ${files.size}; ` +
      `longest ${[...functions].sort((a, b) => b[1] - a[1])[0]?.join(": ")} lines`,
  );
});

Deno.test("the measure reads braces in strings, templates, comments and regular expressions as text, and methods as Class.method", () => {
  const body = (n: number) => Array.from({ length: n }, (_, i) => `  const v${i} = "}{";`).join("\n");
  const src = [
    "/* { */",
    "const re = /[{]/g; // }",
    "export function long(a: { b: number }): Promise<{",
    "  c: number;",
    "}> {",
    body(70),
    "  const t = `${`${'}'}`}{`;",
    "}",
    "class K {",
    "  async #m(x = {}) {",
    body(3),
    "  }",
    "  other(): void {",
    body(71),
    "  }",
    "}",
    "const arrow = async (x: number) => {",
    body(71),
    "};",
    "function short() {",
    body(3),
    "}",
  ].join("\n");
  assert.deepEqual(longFunctions(src, 70), [
    { name: "long", line: 3, lines: 75 }, // its header's 3 lines, 70 + 1 of body, the closing brace
    { name: "K.other", line: 84, lines: 73 },
    { name: "arrow", line: 158, lines: 73 },
  ]);
  assert.throws(() => pairBraces("function f() {\n  const s = '{';\n"), /1 '\{' never closed/);
});
