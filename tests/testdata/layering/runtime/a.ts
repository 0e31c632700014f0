// A planted cycle made of type imports only: it still counts.
import type { B } from "./store/b.ts";

/** Half of a planted cycle. */
export type A = { b?: B };
