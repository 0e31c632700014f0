/**
 * A JSON state file that survives the process being killed at any instant.
 *
 * @module
 */

import { dirname } from "node:path";

/**
 * Reads and atomically replaces one JSON file.
 *
 * Writes go to `<path>.tmp` and are then renamed over `<path>`, so a reader
 * sees either the old or the new state, never a torn file. The write is
 * synchronous so that callers can finish it before answering a request: once
 * the rename returned, the data sits in the OS page cache and survives a
 * SIGKILL of this process (no fsync, so not a power cut — enough for a mock).
 */
export class DurableJsonFile<T> {
  /** Path of the state file. */
  readonly path: string;

  /** @param path where the state lives; its directory is created on write when missing. */
  constructor(path: string) {
    this.path = path;
  }

  /** Returns the stored state, or `undefined` when the file does not exist yet. */
  async read(): Promise<T | undefined> {
    try {
      return JSON.parse(await Deno.readTextFile(this.path)) as T;
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return undefined;
      throw err;
    }
  }

  /**
   * Replaces the stored state; returns only once the new state is in place.
   * When the directory was removed under a running mock (someone starting
   * over with `rm -rf .data`), it is made again and the state written there,
   * rather than failing every later request.
   */
  writeSync(state: T): void {
    const tmp_path = `${this.path}.tmp`;
    const text = JSON.stringify(state);
    try {
      Deno.writeTextFileSync(tmp_path, text);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
      Deno.mkdirSync(dirname(this.path), { recursive: true });
      Deno.writeTextFileSync(tmp_path, text);
    }
    Deno.renameSync(tmp_path, this.path);
  }
}
