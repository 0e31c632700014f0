/**
 * An agent whose tool starts work that finishes minutes later: `render_report`
 * asks the (mock) cloud's `POST /v1/jobs` to render a report. The first
 * request starts the job and is answered 202 with when to look again; the
 * call then waits, holding no worker, and at that time the runtime sends the
 * same request under the same key, which asks how the job stands, until the
 * cloud answers 200 done (or failed). A person or a webhook may also settle
 * the call from outside: `deno task settle <key> --result JSON`.
 *
 * `JOB_MS` sets how long the mock cloud's job runs (default 30000); its cloud
 * is `CLOUD_URL`, or on the embedded default an in-process mock under
 * `DATA_DIR`, like the demo's.
 *
 * @module
 */

import { z } from "npm:zod@4.6.7";
import { type AgentContext, defineAgent, defineTool, type Tool, ToolError } from "../../mod.ts";
import { type FetchLike, idempotencyKeyHeader } from "../../tools.ts";
import { demoCloud } from "../provision/agent.ts";
import { cloudJson } from "../provision/tools.ts";

/** The report agent. */
export default defineAgent({
  name: "reports",
  instructions: "Render the reports the user asks for with render_report (several at once when there are " +
    "several), then say where they are.",
  defaultInput: "Render the quarterly sales report.",
  tools: async (ctx: AgentContext) => {
    const cloud = await demoCloud(ctx);
    const durationMs = Number(ctx.env.JOB_MS ?? 30_000);
    return [
      reportTool({ cloudUrl: cloud.url, fetch: cloud.fetch, durationMs }),
    ];
  },
});

/** Options of {@link reportTool}. */
export interface ReportToolOptions {
  /** Base URL of the cloud whose `POST /v1/jobs` renders the report. */
  cloudUrl: string;
  /** The fetch its requests go through. Default the global `fetch`. */
  fetch?: FetchLike;
  /** How long the cloud's job runs, in ms (on the cloud's clock). */
  durationMs: number;
  /** The tool's name. Default `render_report`. */
  name?: string;
}

/**
 * `render_report`: starts a job at the cloud's `POST /v1/jobs` under the
 * call's key; while it runs the cloud answers 202 and the call waits (asked
 * again when the cloud says), until it answers done (the call's result) or
 * failed (`REPORT_FAILED`).
 */
export function reportTool(opts: ReportToolOptions): Tool {
  const { cloudUrl, fetch, durationMs } = opts;
  return (
    defineTool({
      name: opts.name ?? "render_report",
      description: "Render a report; takes a while. Returns where the report is.",
      args: z.strictObject({ title: z.string().min(1).max(80) }),
      // The job may take up to an hour before the call fails.
      waitDeadlineMs: 60 * 60_000,
      run: async (args, toolCtx) => {
        const { res, body } = await cloudJson({ cloudUrl, fetch }, {
          method: "POST",
          path: "/v1/jobs",
          headers: { "idempotency-key": idempotencyKeyHeader(toolCtx.idempotencyKey) },
          body: { kind: "report", title: args.title, duration_ms: durationMs },
          ctx: toolCtx,
        });
        const job = body as { job_id?: string; status?: string; retry_after_ms?: number; error?: string };
        if (res.status === 202) {
          // Ask again when the remote says the job should be done (at least in a second).
          const checkAfterMs = Math.max(1_000, Math.min(job.retry_after_ms ?? 10_000, 60_000));
          return { result: { job: job.job_id ?? null, status: "running" }, accepted: { checkAfterMs } };
        }
        if (job.status === "failed") {
          throw new ToolError("REPORT_FAILED", job.error ?? "the job failed", { transient: false });
        }
        const replayed = res.headers.get("idempotent-replayed") === "true" && toolCtx.polls === 0;
        return { result: body, remote: replayed ? "already_done" : "created" };
      },
    })
  );
}
