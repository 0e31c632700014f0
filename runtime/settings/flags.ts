/**
 * A command's flags: each setting's flag (`RUN_ID` is `--run-id`), a command
 * line that does not parse said in one line (exit 2), and `--help`.
 *
 * @module
 */

import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { ConfigError } from "../base/errors.ts";

/** The command-line flag of a setting: `RUN_ID` is `--run-id`. */
export function flagOf(name: string): string {
  return "--" + name.toLowerCase().replaceAll("_", "-");
}

/**
 * A command line that does not parse (an unknown flag, a flag without its
 * value): reported as one line and exit code 2, apart from the settings
 * problems a {@link ConfigError} lists.
 */
export class FlagError extends ConfigError {
  /** Creates a flag error with one sentence. */
  constructor(problem: string) {
    super([problem]);
    this.name = "FlagError";
  }
}

/**
 * The first sentence of a `node:util` `parseArgs` error, in our words:
 * `Unknown option '--x'. To specify a positional argument ...` becomes
 * `unknown flag '--x'`.
 */
export function flagProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const unknown = /^Unknown option '([^']+)'/.exec(message);
  if (unknown) return `unknown flag '${unknown[1]}'`;
  const first = message.split("\n")[0];
  const sentence = /^(.*?[^.])\.(\s|$)/.exec(first);
  return (sentence ? sentence[1] : first).replace(/^Option /, "flag ");
}

/**
 * Parses a tool command's flags (`strict`, no positionals) with `node:util`
 * `parseArgs`. A flag it does not know, or a malformed one, prints one line
 * naming it and `--help` to stderr, and `--help` (`-h`) prints `usage`: both
 * come back as `{ exit }`, the code the command returns (2 and 0).
 */
export function commandFlags<const O extends ParseArgsOptionsConfig>(
  command: string,
  usage: string,
  args: string[],
  options: O,
): { values: ReturnType<typeof parseArgs<{ args: string[]; options: O; strict: true }>>["values"] } | {
  exit: number;
} {
  let values;
  try {
    ({ values } = parseArgs({ args, options, strict: true }));
  } catch (err) {
    console.error(`${command}: ${flagProblem(err)}. 'deno task ${command} --help' lists the flags`);
    return { exit: 2 };
  }
  if ((values as Record<string, unknown>).help) {
    console.log(usage);
    return { exit: 0 };
  }
  return { values };
}
