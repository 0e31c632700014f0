// Host B's module in spread_pg_test.ts: agent Y only.
import { provisioner } from "./provisioner.ts";

export default [provisioner("agent-y")];
