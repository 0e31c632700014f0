/**
 * The package as a user meets it: a project of their own, outside this tree,
 * with its own deno.json and no import map for our dependencies, imports the
 * library (by the file URL of mod.ts, standing in for the published package),
 * defines an agent with an inline Planner and runs it to its end. And what
 * lets every published module load from anywhere: npm packages pinned inline
 * (no import map of ours needed), no file read from beside a module at run
 * time (a module from JSR has no disk beside it). The project with the
 * commands, the supervisor and a registry is tests/project_test.ts.
 */

import assert from "node:assert/strict";
import { publishedFiles } from "./_published.ts";

const ROOT = new URL("../", import.meta.url);
const MOD = new URL("mod.ts", ROOT).href;

const PROGRAM = `import { z } from "npm:zod@4.6.7";
import { connect, defineAgent, defineTool, type Planner } from ${JSON.stringify(MOD)};

const sent: string[] = [];
const sendEmail = defineTool({
  name: "send_email",
  description: "Send an email.",
  args: z.strictObject({ to: z.string(), body: z.string() }),
  run: (args, ctx) => {
    sent.push(\`\${ctx.idempotencyKey} \${args.to}\`);
    return Promise.resolve({ result: { queued: true } });
  },
});
const model: Planner = {
  describe: "two-step script",
  decide: (req) =>
    Promise.resolve(
      req.seq === 0
        ? { kind: "tool_calls", calls: [{ name: "send_email", args: { to: "ada@example.test", body: "Hello" } }] }
        : { kind: "done", text: "Sent one email." },
    ),
};
const mailer = defineAgent({ name: "mailer", instructions: "Send the email asked for.", tools: [sendEmail], model });
const client = await connect({ memory: true });
const worker = await client.startWorker([mailer]);
const run = await client.start(mailer, { runId: "welcome-ada", input: "Welcome Ada" });
const finished = await client.wait(run.runId, { timeoutMs: 30_000 });
await worker.stop();
await client.close();
console.log("RESULT " + JSON.stringify({ status: finished.status, output: finished.output, sent }));
`;

Deno.test("a project outside the tree imports the library with no import map of ours and runs an agent", async () => {
  const dir = await Deno.makeTempDir({ prefix: "agent-runtime-user-" });
  try {
    await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ nodeModulesDir: "auto" }, null, 2));
    await Deno.writeTextFile(`${dir}/main.ts`, PROGRAM);
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "main.ts"],
      cwd: dir,
      env: { DATABASE_URL: "", LOG_FORMAT: "" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text);
    const line = text.split("\n").find((l) => l.startsWith("RESULT "));
    assert.ok(line, text);
    assert.deepEqual(JSON.parse(line.slice("RESULT ".length)), {
      status: "done",
      output: "Sent one email.",
      sent: ["welcome-ada:0 ada@example.test"],
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/**
 * The npm packages only the commands, the integrations, the kit, the tests and the benches use: written
 * inline (`npm:name@version`) where they are imported, not in deno.json's import map, so a project that
 * imports the library gets none of them in its lockfile. Each is at one version everywhere, as this list says.
 */
const INLINE_PINS = [
  "npm:@a2a-js/sdk@1.3.0",
  "npm:@ai-sdk/anthropic@4.0.105",
  "npm:@ai-sdk/openai-compatible@3.0.92",
  "npm:@ai-sdk/provider@4.0.38",
  "npm:@modelcontextprotocol/sdk@1.32.2",
  "npm:@opentelemetry/api@1.10.0",
  "npm:ai@7.0.173",
  "npm:hono@4.13.19",
  "npm:openai@7.59.0",
  "npm:puppeteer-core@25.16.0",
];

Deno.test("every npm: specifier pins the version deno.json's import map or the inline list pins", async () => {
  const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
  const pinned = new Set([...Object.values(config.imports as Record<string, string>), ...INLINE_PINS]);
  // The import map is the library's own: what every project that imports it gets.
  assert.deepEqual(Object.keys(config.imports).sort(), ["@electric-sql/pglite", "postgres", "zod"]);
  const files: string[] = [];
  async function walk(dir: URL): Promise<void> {
    for await (const entry of Deno.readDir(dir)) {
      const url = new URL(entry.name + (entry.isDirectory ? "/" : ""), dir);
      if (entry.isDirectory && entry.name !== "node_modules" && !entry.name.startsWith(".")) await walk(url);
      else if (entry.isFile && entry.name.endsWith(".ts")) files.push(url.pathname);
    }
  }
  await walk(ROOT);
  for (const file of files) {
    const text = await Deno.readTextFile(file);
    // Every npm: specifier, on an import of one line or many, a type directive's too; a subpath of a
    // package (the MCP SDK has no root module) is pinned by its package's entry.
    for (const m of text.matchAll(/(?:from |@ts-types=)"(npm:(?:@[^/"]+\/)?[^/@"]+@[^/"]+)(\/[^"]*)?"/g)) {
      assert.ok(pinned.has(m[1]), `${file} imports ${m[1]}${m[2] ?? ""}, which neither list pins`);
    }
  }
});

/** The published modules, as paths in this checkout. */
async function publishedModules(): Promise<string[]> {
  return (await publishedFiles()).filter((f) => f.endsWith(".ts")).map((f) => new URL(f, ROOT).pathname);
}

Deno.test("no published module imports a bare name or reads a file beside it at run time", async () => {
  const modules = await publishedModules();
  assert.ok(
    modules.some((m) => m.endsWith("/cli/main.ts")) && modules.some((m) => m.endsWith("/ui/server.ts")),
  );
  for (const file of modules) {
    const text = await Deno.readTextFile(file);
    // A bare name resolves only through an import map, and a program run by path from a project has the
    // project's, not ours: every import is relative, node:, npm: or jsr:.
    for (const m of text.matchAll(/^(?:import|export)\b[^;]*? from "([^"]+)"/gm)) {
      assert.match(m[1], /^(\.{1,2}\/|node:|npm:|jsr:)/, `${file} imports ${m[1]}`);
    }
    // Read from beside the module, a file is missing once the module comes from JSR or a binary: import it
    // as text instead (as the schema and the page's files are).
    assert.doesNotMatch(text, /Deno\.read\w*\([^;]*import\.meta\.url/, `${file} reads a file beside it`);
  }
});
