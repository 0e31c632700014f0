// A test's data beside the library may import the mocks: it is no part of the library.
export { mock } from "../../mock/m.ts";
