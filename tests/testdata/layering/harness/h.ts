/** A harness module. */
export const h = 1;
