/**
 * Read-only statements for overviews (the web page's runs list): how many
 * runs there are per status, which agents have runs, and the tokens each run
 * has spent. Beside the store because this folder is the one place that
 * speaks SQL.
 *
 * @module
 */

import type { RunStatus, SqlClient } from "./store.ts";

/** Token totals of one run, summed over its journal rows' `usage`. */
export interface RunTokens {
  /** Prompt tokens (`prompt_tokens`). */
  input: number;
  /** Answer tokens (`completion_tokens`). */
  output: number;
}

/** Runs per status among those matching `agent` and `search` (the status filter itself is left out). */
export async function countByStatus(
  client: SqlClient,
  filter: { agent?: string; search?: string } = {},
): Promise<Partial<Record<RunStatus, number>>> {
  const rows = await client.query<{ status: RunStatus; n: number }>(
    `select status, count(*)::int as n from runs
      where ($1::text is null or agent = $1) and ($2::text is null or strpos(run_id, $2) > 0)
      group by status`,
    [filter.agent ?? null, filter.search ?? null],
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

/** The agents that have runs, by name. */
export async function agentsWithRuns(client: SqlClient): Promise<string[]> {
  const rows = await client.query<{ agent: string }>(`select distinct agent from runs order by agent`);
  return rows.map((r) => r.agent);
}

/** Tokens spent per run, for the given runs (a run with no recorded usage is absent). */
export async function tokensByRun(client: SqlClient, runIds: string[]): Promise<Map<string, RunTokens>> {
  if (runIds.length === 0) return new Map();
  const rows = await client.query<{ run_id: string; input: number; output: number }>(
    `select run_id,
            coalesce(sum(case when jsonb_typeof(usage->'prompt_tokens') = 'number'
                              then (usage->>'prompt_tokens')::numeric end), 0)::bigint::int as input,
            coalesce(sum(case when jsonb_typeof(usage->'completion_tokens') = 'number'
                              then (usage->>'completion_tokens')::numeric end), 0)::bigint::int as output
       from journal where run_id = any($1::text[]) and usage is not null
      group by run_id`,
    [runIds],
  );
  return new Map(rows.map((r) => [r.run_id, { input: Number(r.input), output: Number(r.output) }]));
}
