/**
 * Test helpers for a real PostgreSQL. Tests that need one read
 * `TEST_DATABASE_URL`; without it they are skipped, and say so.
 *
 * Each test gets its own schema (`t_<random>`), with the tables loaded from
 * schema.sql, and a database URL whose `search_path` points at it, so tests
 * (and the worker processes they spawn) never see each other's runs.
 *
 * @module
 */

import { SimDb } from "../harness/sim.ts";
import { createSandbox, type SchemaSandbox } from "../runtime/store/sandbox.ts";

/** The test server's URL, or undefined (tests that need it are then skipped). */
export const TEST_DATABASE_URL: string | undefined = Deno.env.get("TEST_DATABASE_URL") || undefined;

/** `ignore` for Deno.test when no PostgreSQL is configured; prints why once per file. */
export function pgIgnore(name: string): boolean {
  if (!TEST_DATABASE_URL) console.log(`skipped (TEST_DATABASE_URL is unset): ${name}`);
  return !TEST_DATABASE_URL;
}

/**
 * The PGlite template `deno task test` made for this run (`TEST_PGLITE_TEMPLATE`: the path of a
 * `pgliteTemplate()` tarball), read anew at each call; undefined without one (a test file run on its
 * own), and every in-memory database then runs `initdb` (a second or two more).
 */
export async function testTemplate(): Promise<Blob | undefined> {
  const path = Deno.env.get("TEST_PGLITE_TEMPLATE");
  return path ? new Blob([await Deno.readFile(path)]) : undefined;
}

/** A harness database for a test (`SimDb.open`), from the run's template when there is one. */
export async function openTestSim(opts: { groupCommitMs?: number } = {}): Promise<SimDb> {
  return SimDb.open({ ...opts, template: await testTemplate() });
}

/**
 * Makes `<dataDir>/pglite`, the embedded database a command run with `DATA_DIR=<dataDir>` opens, from the
 * run's template (`tar` unpacks it; no migration has run on it), so the command skips `initdb`: `deno task
 * run` took 5.4 s on a new directory and 2.3 s on one made this way. Without a template it does nothing, and
 * the command runs `initdb` as a user's first run does.
 */
export async function seedDataDir(dataDir: string): Promise<void> {
  const template = Deno.env.get("TEST_PGLITE_TEMPLATE");
  if (!template) return;
  await Deno.mkdir(`${dataDir}/pglite`, { recursive: true });
  const { code, stderr } = await new Deno.Command("tar", {
    args: ["xf", template, "-C", `${dataDir}/pglite`],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (code !== 0) {
    throw new Error(
      `tar could not unpack the PGlite template ${template}: ${new TextDecoder().decode(stderr)}`,
    );
  }
}

/** A schema of its own for one test: its URL, a store on it, and a way to drop it. */
export type PgSchema = SchemaSandbox;

/** Creates a fresh schema with the tables loaded, on the test server. */
export function freshSchema(): Promise<PgSchema> {
  if (!TEST_DATABASE_URL) throw new Error("TEST_DATABASE_URL is unset");
  return createSandbox(TEST_DATABASE_URL, { prefix: "t", max: 4 });
}

/**
 * A test that needs PostgreSQL: skipped (and saying so) without
 * `TEST_DATABASE_URL`, otherwise run on a fresh schema that is dropped after,
 * pass or fail.
 */
export function pgTest(name: string, fn: (pg: PgSchema, t: Deno.TestContext) => Promise<void>): void {
  Deno.test({
    name,
    ignore: pgIgnore(name),
    async fn(t) {
      const pg = await freshSchema();
      try {
        await fn(pg, t);
      } finally {
        await pg.drop();
      }
    },
  });
}
