// The demo's provisioning agent at two versions, for versions_pg_test.ts (a rolling deploy) and
// docs/versions.md. Each version is two agents doing the same work: `deploy`, whose runs stay on
// the version that started them, and `deploy-rolling`, whose runs move to a newer version at their
// next decision. Version 2 renames create_dns_record to create_record and gives it an argument with
// a default (ttl); `replaced` says whether create_record declares that it replaces the old name.
import { z } from "zod";
import { type Agent, defineAgent, defineTool, type Tool } from "../../../mod.ts";
import { demoCloud } from "../../../examples/provision/agent.ts";
import { cloudCreate, demoTools } from "../../../examples/provision/tools.ts";

/** The two agents at version `version` (1: the demo's tools; 2: the record tool renamed, with a ttl). */
export function deployAgents(version: 1 | 2, opts: { replaced?: boolean } = {}): Agent[] {
  const tools = async (ctx: Parameters<typeof demoCloud>[0]): Promise<Tool[]> => {
    const cloud = await demoCloud(ctx);
    const demo = demoTools({ cloudUrl: cloud.url, fetch: cloud.fetch });
    if (version === 1) return demo;
    const record = defineTool({
      name: "create_record",
      description: "Create a DNS record. For a CNAME, target is the name of a server. Returns its id.",
      args: z.strictObject({
        hostname: z.string().min(1).max(253),
        record_type: z.enum(["A", "AAAA", "CNAME"]),
        target: z.string().min(1).max(253),
        ttl: z.number().int().min(60).max(86_400).default(300),
      }),
      replaces: opts.replaced === false ? undefined : ["create_dns_record"],
      run: (args, ctx) =>
        cloudCreate({ cloudUrl: cloud.url, fetch: cloud.fetch }, "/v1/dns_records", args, ctx),
    });
    return [demo[0], demo[1], record];
  };
  return (["stay", "move"] as const).map((onNewVersion) =>
    defineAgent({
      name: onNewVersion === "stay" ? "deploy" : "deploy-rolling",
      onNewVersion,
      tools,
      maxSteps: 12,
    })
  );
}
