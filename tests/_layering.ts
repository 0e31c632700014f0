/**
 * The module graph of the library and the two rules it keeps: no import
 * cycle inside `runtime/`, and nothing imported from outside it (but
 * `schema.sql`): not the demo, the mocks, the harness, the commands, the web
 * page, the benchmarks, the tests or the supervisor. The supervisor's library
 * (`supervisor/`) keeps the same rules, the runtime allowed. Type imports
 * count: a cycle of types is still a cycle a reader has to untangle.
 *
 * The graph is Deno's own (`deno info --json`), so every form of import
 * counts as Deno resolves it (`import type`, `export ... from`, a dynamic
 * `import("...")`, an import with attributes), with no parser of ours to miss
 * one.
 *
 * @module
 */

import { fileURLToPath, pathToFileURL } from "node:url";
import { join, relative, sep } from "node:path";

/** Local imports by module: repository-relative paths (`runtime/host/run_driver.ts`), each list sorted. */
export type ImportGraph = Map<string, string[]>;

/** What {@link readImportGraph} reads. */
export interface ReadGraphOptions {
  /** The repository (or fixture) root: paths in the graph are relative to it. */
  root: string;
  /** The folder whose modules are the roots, relative to `root` (e.g. `runtime`). */
  dir: string;
  /** The `deno.json` whose import map resolves bare specifiers. Default: `root`'s. */
  config?: string;
}

/** True for a file under the library folder that is not the library: a test or a test's data. */
export function isTestFile(path: string): boolean {
  return path.endsWith("_test.ts") || path.split("/").includes("testdata");
}

async function libraryFiles(root: string, dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    for await (const entry of Deno.readDir(join(root, rel))) {
      const child = `${rel}/${entry.name}`;
      if (entry.isDirectory) {
        if (!isTestFile(`${child}/`)) await walk(child);
      } else if (entry.isFile && /\.(ts|tsx|js|mjs)$/.test(entry.name) && !isTestFile(child)) {
        out.push(child);
      }
    }
  };
  await walk(dir);
  return out.sort();
}

interface InfoDependency {
  code?: { specifier?: string };
  type?: { specifier?: string };
}

interface InfoModule {
  specifier: string;
  error?: string;
  dependencies?: InfoDependency[];
}

/**
 * Reads the import graph of every module under `dir` (tests and `testdata/`
 * left out: they are no part of the library) and of everything they import,
 * as `deno info --json` resolves it, from one generated root that imports
 * them all. Throws when Deno cannot read a module (a missing file, a syntax
 * error): an unread module's imports would go unchecked.
 */
export async function readImportGraph(opts: ReadGraphOptions): Promise<ImportGraph> {
  const files = await libraryFiles(opts.root, opts.dir);
  const tmp = await Deno.makeTempDir({ prefix: "layering-" });
  try {
    const entry = join(tmp, "all.ts");
    const lines = files.map((f) => `import ${JSON.stringify(pathToFileURL(join(opts.root, f)).href)};`);
    await Deno.writeTextFile(entry, lines.join("\n") + "\n");
    const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", "--config", opts.config ?? join(opts.root, "deno.json"), entry],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (code !== 0) {
      throw new Error(`deno info exited ${code}: ${new TextDecoder().decode(stderr)}`);
    }
    const info = JSON.parse(new TextDecoder().decode(stdout)) as { modules: InfoModule[] };
    const entryUrl = pathToFileURL(entry).href;
    const local = (specifier: string): string | undefined => {
      if (!specifier.startsWith("file:")) return undefined; // npm:, node:, data:
      const path = relative(opts.root, fileURLToPath(specifier)).split(sep).join("/");
      return path.startsWith("../") ? undefined : path;
    };
    const graph: ImportGraph = new Map();
    for (const m of info.modules) {
      if (m.specifier === entryUrl) continue;
      const from = local(m.specifier);
      if (from === undefined) continue;
      if (m.error) throw new Error(`Cannot read ${from}: ${m.error}`);
      const to = new Set<string>();
      for (const d of m.dependencies ?? []) {
        for (const target of [d.code?.specifier, d.type?.specifier]) {
          const path = target === undefined ? undefined : local(target);
          if (path !== undefined) to.add(path);
        }
      }
      graph.set(from, [...to].sort());
    }
    for (const f of files) if (!graph.has(f)) throw new Error(`deno info did not read ${f}`);
    return graph;
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
}

/** The rules {@link layeringProblems} checks. */
export interface LayeringRules {
  /** The library's folder (`runtime`): no cycle inside it, no import out of it. */
  library: string;
  /**
   * What outside the library it may import all the same: a file
   * (`schema.sql`, loaded as text) or, ending in `/`, a folder.
   */
  allowed: readonly string[];
  /**
   * The library's folders and, for each, the folders its modules may import
   * (its own always). A module outside every declared folder, or an import
   * along an arrow not declared here, is a breach. Unset: no folder rule.
   */
  folders?: Readonly<Record<string, readonly string[]>>;
}

/**
 * The floors of `runtime/`, ground floor first: each folder and the folders
 * it may import. One table, read top to bottom as the order a newcomer meets
 * them; ARCHITECTURE.md draws the same map.
 */
export const RUNTIME_FOLDERS: Readonly<Record<string, readonly string[]>> = {
  // Leaves: values, errors, clock, log, display, http, ids, settings' defaults, retry policy, crash points.
  base: [],
  // What a model is asked and answers: the transcript, the planner interface, each protocol's planner.
  model: ["base"],
  // The database: statements by audience, drivers, migrations. It records transcripts, so it knows their types.
  store: ["base", "model"],
  // The process's settings from env and flags (the commands read them; the library is given values).
  settings: ["base", "model"],
  // What a user writes: agents, tools, budgets, conversation options.
  agent: ["base", "model", "store"],
  // One run as a worker holds it: its state, its dependencies, its outcomes, its telemetry and live stream.
  run: ["base", "model", "store", "agent"],
  // Runs that start runs, and runs that converse: each a concern a step calls into.
  families: ["base", "model", "store", "agent", "run"],
  conversations: ["base", "model", "store", "agent", "run"],
  // Calls that wait for a signal sent to their run, or for a time, holding no slot: a concern send.ts calls into.
  signals: ["base", "model", "store", "agent", "run"],
  // One step: decide (the model call), act and send (the tool calls), recovery, reconcile, history.
  step: ["base", "model", "store", "agent", "run", "families", "conversations", "signals"],
  // Processes: the worker host, leases, the single run's driver.
  host: ["base", "model", "store", "agent", "run", "families", "conversations", "signals", "step"],
  // MCP servers' tools as an agent's tools.
  mcp: ["base", "model", "agent"],
  // Schedules: cron and intervals in a time zone, one tick's plan, the ticker that starts their runs.
  schedules: ["base", "model", "store"],
  // What application code, operators and the page call.
  client: ["base", "model", "store", "agent", "run", "host", "schedules"],
  // An agent as an A2A server: the protocol's wire over the client.
  a2a: ["base", "model", "store", "agent", "run", "client"],
  // The wires other programs speak, over the client: chat over the AI SDK's UI message stream.
  chat: ["base", "model", "store", "agent", "run", "client"],
  // Agents as an MCP server: tool calls over the client (the SDK's server, stdio and streamable HTTP).
  mcp_server: ["base", "model", "store", "agent", "client"],
};

/** The library's rules in this repository. */
export const RUNTIME_RULES: LayeringRules = {
  library: "runtime",
  allowed: ["schema.sql"],
  folders: RUNTIME_FOLDERS,
};

/** The supervisor's library (its command is `cli/supervise.ts`): it uses the runtime, and nothing else of ours. */
export const SUPERVISOR_RULES: LayeringRules = { library: "supervisor", allowed: ["runtime/", "schema.sql"] };

/**
 * Every breach of `rules` in `graph`, one sentence each, sorted; none when
 * the library's graph runs one way. A cycle is reported once per set of
 * modules that reach each other (with one path through it as the example),
 * so a long cycle is one problem, not one per edge.
 */
export function layeringProblems(graph: ImportGraph, rules: LayeringRules): string[] {
  const inLibrary = (p: string) => p.startsWith(`${rules.library}/`) && !isTestFile(p);
  const problems: string[] = [];
  for (const [from, targets] of graph) {
    if (!inLibrary(from)) continue;
    for (const to of targets) {
      if (inLibrary(to) || rules.allowed.some((a) => a.endsWith("/") ? to.startsWith(a) : to === a)) continue;
      const what = to.startsWith(`${rules.library}/`) ? "a test file" : `a module outside ${rules.library}/`;
      problems.push(
        `${from} imports ${to}, ${what}: the library imports nothing outside ${rules.library}/ ` +
          `(but ${rules.allowed.join(", ") || "nothing"})`,
      );
    }
  }
  if (rules.folders) problems.push(...folderProblems(graph, rules.library, rules.folders, inLibrary));
  for (const cycle of cyclesIn(graph, inLibrary)) {
    problems.push(`Import cycle inside ${rules.library}/: ${cycle.join(" -> ")}`);
  }
  return problems.sort();
}

/** The folder of a library module (`runtime/step/act.ts` is in `step`), or undefined for one at the library's root. */
function folderOf(library: string, path: string): string | undefined {
  const parts = path.slice(library.length + 1).split("/");
  return parts.length > 1 ? parts[0] : undefined;
}

/**
 * Breaches of the folder table: a module in no declared folder (one problem
 * per module), and each import along an arrow the table does not declare.
 */
function folderProblems(
  graph: ImportGraph,
  library: string,
  folders: Readonly<Record<string, readonly string[]>>,
  inLibrary: (path: string) => boolean,
): string[] {
  const problems: string[] = [];
  const declared = (f: string | undefined): f is string => f !== undefined && Object.hasOwn(folders, f);
  for (const [from, targets] of graph) {
    if (!inLibrary(from)) continue;
    const a = folderOf(library, from);
    if (!declared(a)) {
      problems.push(
        `${from} is in no declared folder: every module of ${library}/ lives in one of ` +
          `${Object.keys(folders).map((f) => `${f}/`).join(", ")} (the table in tests/_layering.ts)`,
      );
      continue;
    }
    for (const to of targets) {
      if (!inLibrary(to)) continue;
      const b = folderOf(library, to);
      if (!declared(b) || b === a || folders[a].includes(b)) continue;
      const may = folders[a].length === 0
        ? "nothing outside itself"
        : folders[a].map((f) => `${f}/`).join(", ");
      problems.push(`${from} imports ${to}: ${a}/ may import ${may} (the table in tests/_layering.ts)`);
    }
  }
  return problems;
}

/**
 * One cycle per strongly connected set of modules (Tarjan's algorithm,
 * iterative so a deep graph cannot overflow the stack), each as a path that
 * starts and ends at its first module in sort order.
 */
function cyclesIn(graph: ImportGraph, include: (path: string) => boolean): string[][] {
  const nodes = [...graph.keys()].filter(include).sort();
  const edges = (v: string) => (graph.get(v) ?? []).filter((w) => include(w) && graph.has(w));
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  for (const start of nodes) {
    if (index.has(start)) continue;
    // Each frame: a module and how many of its imports have been followed.
    const frames: { v: string; next: number }[] = [{ v: start, next: 0 }];
    index.set(start, index.size);
    low.set(start, index.get(start)!);
    stack.push(start);
    onStack.add(start);
    // Bounded: each module is pushed once and each edge followed once.
    while (frames.length > 0) {
      const frame = frames[frames.length - 1];
      const out = edges(frame.v);
      if (frame.next < out.length) {
        const w = out[frame.next++];
        if (!index.has(w)) {
          index.set(w, index.size);
          low.set(w, index.get(w)!);
          stack.push(w);
          onStack.add(w);
          frames.push({ v: w, next: 0 });
        } else if (onStack.has(w)) {
          low.set(frame.v, Math.min(low.get(frame.v)!, index.get(w)!));
        }
        continue;
      }
      frames.pop();
      const parent = frames[frames.length - 1];
      if (parent) low.set(parent.v, Math.min(low.get(parent.v)!, low.get(frame.v)!));
      if (low.get(frame.v) === index.get(frame.v)) {
        const component: string[] = [];
        let w: string;
        do {
          w = stack.pop()!;
          onStack.delete(w);
          component.push(w);
        } while (w !== frame.v);
        const selfLoop = component.length === 1 && edges(w).includes(w);
        if (component.length > 1 || selfLoop) components.push(component.sort());
      }
    }
  }
  return components.map((c) => pathThrough(c, edges)).sort((a, b) => a[0].localeCompare(b[0]));
}

/** A shortest cycle from the component's first module back to it, by breadth-first search inside it. */
function pathThrough(component: string[], edges: (v: string) => string[]): string[] {
  const members = new Set(component);
  const start = component[0];
  const cameFrom = new Map<string, string>();
  const queue = [start];
  // Bounded by the component: each module is queued at most once.
  for (let i = 0; i < queue.length; i++) {
    const v = queue[i];
    for (const w of edges(v)) {
      if (!members.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let at: string | undefined = v; at !== start && at !== undefined; at = cameFrom.get(at)) {
          path.splice(1, 0, at);
        }
        return [...path, start];
      }
      if (!cameFrom.has(w)) {
        cameFrom.set(w, v);
        queue.push(w);
      }
    }
  }
  return [...component, start];
}
