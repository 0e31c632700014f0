/**
 * A JSON state file that survives the process being killed at any instant.
 *
 * @module
 */

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

  /** @param path where the state lives; its directory must exist. */
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

  /** Replaces the stored state; returns only once the new state is in place. */
  writeSync(state: T): void {
    const tmp_path = `${this.path}.tmp`;
    Deno.writeTextFileSync(tmp_path, JSON.stringify(state));
    Deno.renameSync(tmp_path, this.path);
  }
}
