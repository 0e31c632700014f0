/** A planted backward import through a dynamic import. */
export const load = (): Promise<unknown> => import("../harness/h.ts");
