// A planted backward import: the library re-exports a mock.
export { mock } from "../mock/m.ts";
