/**
 * The exit codes of a process that drives runs (`run`, `worker`) and of the
 * supervisor, declared once: the commands return these, the supervisor
 * decides by them whether a worker is worth restarting, and
 * `docs/settings.md` lists them. A leaf: it imports nothing.
 *
 * @module
 */

/**
 * Every exit code of `run`, `worker` and `supervise`, by what it means.
 *
 * The supervisor restarts a worker that exited with any code but
 * {@link EXIT_CODES.settings}, with its crash-loop backoff: only settings
 * that can never work stop a slot for good.
 */
export const EXIT_CODES = {
  /** The run is done; a worker or supervisor stopped as asked (SIGINT, SIGTERM). */
  done: 0,
  /** The run failed: a tool or the model gave up, or a permanent model error. */
  failed: 1,
  /**
   * Settings that cannot work as given, so starting again with them fails
   * again: a flag or variable malformed or missing, an agent module that
   * cannot be used, a database URL that does not parse, a password or role
   * the server refuses, a database that does not exist, tables a newer
   * program migrated. Never a database that is away: that is
   * {@link EXIT_CODES.databaseAway}.
   */
  settings: 2,
  /** Another worker holds the run (fenced), or the run was lost. */
  fenced: 3,
  /** A person must act: a flagged tool call (blocked), or a call waiting for approval. */
  personMustAct: 4,
  /** The run was cancelled. */
  cancelled: 5,
  /** The supervisor went away: a worker's stdin closed. */
  supervisorGone: 6,
  /**
   * The database is away (unreachable, or refusing writes), at start or in
   * the middle of a run: nothing is lost, and the same command works once it
   * is back. `run` exits so; a worker and the supervisor wait instead.
   */
  databaseAway: 7,
  /** An error the runtime does not classify: the run is intact and released. */
  unclassified: 8,
} as const;

/** One of {@link EXIT_CODES}. */
export type ExitCode = typeof EXIT_CODES[keyof typeof EXIT_CODES];
