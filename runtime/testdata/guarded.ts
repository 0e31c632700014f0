/**
 * A wait a test makes for something that arrives on its own (a notification
 * on another connection), bounded so a failure ends the test instead of
 * hanging it. A passing test never waits out the bound.
 *
 * @module
 */

/** Resolves when `p` does; rejects, naming `what`, should `p` not settle within `ms` (10 s). */
export async function guarded<T>(p: Promise<T>, what: string | (() => string), ms = 10_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${typeof what === "string" ? what : what()} never arrived`)),
      ms,
    );
  });
  try {
    return await Promise.race([p, guard]);
  } finally {
    clearTimeout(timer);
  }
}
