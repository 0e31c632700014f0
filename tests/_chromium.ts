/**
 * What the browser tests share: where Debian's Chromium is (or `CHROMIUM_PATH`),
 * a skip that says why, the launch flags, and where screenshots go (the
 * docs' files only with `UPDATE_SCREENSHOTS=1`, so a test run leaves the work
 * tree clean; the test's temporary folder otherwise).
 *
 * @module
 */

import puppeteer, { type Browser } from "npm:puppeteer-core@25.16.0";

/** The Chromium found, or undefined. */
export const CHROMIUM: string | undefined = [
  Deno.env.get("CHROMIUM_PATH"),
  "/usr/bin/chromium",
  "/usr/bin/chromium-browser",
].find((p) => {
  if (!p) return false;
  try {
    return Deno.statSync(p).isFile;
  } catch {
    return false;
  }
});

/** True (and says so) when no Chromium is installed: the test is skipped. */
export function chromiumIgnore(name: string): boolean {
  if (!CHROMIUM) {
    console.log(`skipped (no chromium: apt-get install -y chromium, or set CHROMIUM_PATH): ${name}`);
  }
  return !CHROMIUM;
}

/** Headless Chromium as the tests run it. */
export function launchChromium(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
}

/** Where a screenshot named `name` goes: docs/ with UPDATE_SCREENSHOTS=1, else under `dir`. */
export function screenshotPath(name: string, dir: string): string {
  return Deno.env.get("UPDATE_SCREENSHOTS") === "1"
    ? decodeURIComponent(new URL(`../docs/${name}`, import.meta.url).pathname)
    : `${dir}/${name}`;
}
