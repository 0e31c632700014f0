// Allowed: the schema, loaded as text, and a module of the library.
import SQL from "../schema.sql" with { type: "text" };
import type { A } from "./a.ts";

/** The schema's text. */
export const sql: string = SQL;
/** Nothing. */
export type D = A;
