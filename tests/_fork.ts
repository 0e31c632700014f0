/**
 * What the fork and evaluation tests share: the second scripted model of the
 * mock (`mock-b`), which provisions other resources than the demo's.
 *
 * @module
 */

import type { ScriptStep } from "../mock/model.ts";

/** What the second model decides: another server, database and DNS record than the demo's, then its answer. */
export const MODEL_B_STEPS: ScriptStep[] = [
  { tool: "create_server", args: { name: "srv-b", spec: "large" } },
  { tool: "create_database", args: { name: "db-b", engine: "mysql", size_gb: 20 } },
  { tool: "create_dns_record", args: { hostname: "b.example.com", record_type: "CNAME", target: "srv-b" } },
  { answer: "Provisioned on mock-b." },
];
