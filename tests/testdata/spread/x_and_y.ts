// Host A's module in spread_pg_test.ts: agents X and Y.
import { provisioner } from "./provisioner.ts";

export default [provisioner("agent-x"), provisioner("agent-y")];
