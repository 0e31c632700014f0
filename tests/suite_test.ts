import assert from "node:assert/strict";
import { skipReport, skipsByReason } from "./_suite.ts";

Deno.test("the suite's closing list gathers the skips by reason, each test once, colours and file prefixes stripped", () => {
  const skips = skipsByReason([
    "\x1b[38;5;245m./tests/a_test.ts => \x1b[0mskipped (TEST_DATABASE_URL is unset): one (PostgreSQL)",
    "skipped (TEST_DATABASE_URL is unset): two (PostgreSQL)",
    "skipped (no chromium: apt-get install -y chromium, or set CHROMIUM_PATH): the page in a browser",
    "skipped (TEST_DATABASE_URL is unset): one (PostgreSQL)",
    "a line that is no skip",
  ]);
  assert.deepEqual([...skips.keys()], [
    "TEST_DATABASE_URL is unset",
    "no chromium: apt-get install -y chromium, or set CHROMIUM_PATH",
  ]);
  assert.deepEqual(skips.get("TEST_DATABASE_URL is unset"), ["one (PostgreSQL)", "two (PostgreSQL)"]);
  assert.equal(
    skipReport(skips),
    "skipped: 3 tests, for 2 reasons\n  TEST_DATABASE_URL is unset: 2\n    one (PostgreSQL)\n    two (PostgreSQL)\n" +
      "  no chromium: apt-get install -y chromium, or set CHROMIUM_PATH: 1\n    the page in a browser\n",
  );
  assert.equal(skipReport(new Map()), "skipped: nothing; every test could run here\n");
});
