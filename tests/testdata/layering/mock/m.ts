/** A mock. */
export const mock = 1;
