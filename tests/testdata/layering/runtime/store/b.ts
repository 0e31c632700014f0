import type { A } from "../a.ts";

/** The other half of the planted cycle. */
export type B = { a?: A };
