/**
 * Where this program runs from, for the processes it starts (a supervisor's
 * workers, `deno compile`): the project it was started in, which is the
 * user's (its `deno.json`, its import map, its lockfile), and how to name
 * this package's entry point from there, whether the package is a local
 * folder (a checkout, a `links` entry) or a download from JSR.
 *
 * @module
 */

import { dirname, join, resolve } from "node:path";

/** The names Deno looks for in each folder, in its order. */
const CONFIG_NAMES = ["deno.json", "deno.jsonc"];

/**
 * The project's config file: the first `deno.json` or `deno.jsonc` in `cwd`
 * or a folder above it, the one `deno task` uses there and the one a program
 * started from a package specifier runs under. Undefined when there is none.
 */
export function findProjectConfig(cwd: string = Deno.cwd()): string | undefined {
  let dir = resolve(cwd);
  for (;;) {
    for (const name of CONFIG_NAMES) {
      const path = join(dir, name);
      try {
        if (Deno.statSync(path).isFile) return path;
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory)) throw err;
      }
    }
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

/**
 * The JSR registry modules are downloaded from: `JSR_URL`, as Deno reads it,
 * or `https://jsr.io/`.
 */
export function jsrRegistry(): string {
  let url: string | undefined;
  try {
    url = Deno.env.get("JSR_URL") || undefined;
  } catch (err) {
    // Without --allow-env Deno uses its default, and so do we.
    if (!(err instanceof Deno.errors.NotCapable)) throw err;
  }
  url ??= "https://jsr.io/";
  return url.endsWith("/") ? url : `${url}/`;
}

/**
 * The specifiers a project's lockfile records, its `"specifiers"` map
 * (`"jsr:@agent-runtime/agent-runtime@0.1": "0.1.0"`), read from the
 * `deno.lock` beside `config` (or the one its `"lock"` names); empty when
 * there is none or it cannot be read.
 */
export function lockedSpecifiers(config: string | undefined): Record<string, string> {
  if (config === undefined) return {};
  let lockPath = join(dirname(config), "deno.lock");
  try {
    const { lock } = JSON.parse(Deno.readTextFileSync(config)) as { lock?: unknown };
    if (lock === false) return {};
    const named = typeof lock === "string" ? lock : (lock as { path?: unknown } | undefined)?.path;
    if (typeof named === "string") lockPath = resolve(dirname(config), named);
  } catch {
    // A deno.jsonc with comments, or no config to read: the lockfile is then the default one.
  }
  try {
    const { specifiers } = JSON.parse(Deno.readTextFileSync(lockPath)) as {
      specifiers?: Record<string, string>;
    };
    return specifiers ?? {};
  } catch {
    return {}; // no lockfile (yet), or not one Deno wrote: the exact version is named instead
  }
}

/**
 * How another process names an export of this package, given the URL of one
 * of its modules (`import.meta.url`), the export path (`./cli`) and the
 * export's file relative to that module. From JSR (a module under the
 * registry's `@scope/name/version/`) it is the package, so the process
 * resolves it through the project's lockfile and the package's own import
 * map: as the lockfile already names it when it does (`jsr:@s/n@0.1`, for
 * `^0.1.0`; a frozen lockfile refuses a new name even for the same version),
 * else at its exact version (`jsr:@agent-runtime/agent-runtime@0.1.0/cli`).
 * From local files it is the file's URL (a project that lists the folder in
 * `links` resolves it as the package).
 */
export function packageExport(
  moduleUrl: string,
  exportPath: string,
  file: string,
  opts: { registry?: string; locked?: Record<string, string> } = {},
): string {
  const registry = opts.registry ?? jsrRegistry();
  if (moduleUrl.startsWith(registry)) {
    const jsr = /^(@[^/]+\/[^/]+)\/([^/]+)\/./.exec(moduleUrl.slice(registry.length));
    if (jsr) {
      const [, name, version] = jsr;
      const locked = Object.entries(opts.locked ?? {}).find(([spec, v]) =>
        v === version && spec.startsWith(`jsr:${name}@`)
      );
      return `${locked?.[0] ?? `jsr:${name}@${version}`}${exportPath === "." ? "" : exportPath.slice(1)}`;
    }
  }
  return new URL(file, moduleUrl).href;
}

/**
 * This program's entry point (`cli/main.ts`, the package's `./cli`), as a
 * process started under `config` (the project's deno.json) names it.
 */
export function cliEntry(config: string | undefined, moduleUrl: string = import.meta.url): string {
  return packageExport(moduleUrl, "./cli", "./main.ts", { locked: lockedSpecifiers(config) });
}
