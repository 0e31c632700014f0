/**
 * The schema check: before anything acts on a run, the tables are there, at
 * this program's version, with every column a statement of the store reads
 * or writes.
 *
 * @module
 */

import { StoreError } from "../base/errors.ts";
import type { SqlClient } from "./driver.ts";
import { assertNotNewer, readVersion, SCHEMA_VERSION, targetSchema } from "./migrate.ts";
import { queryRows, statement } from "./sql.ts";

// Every column a statement of the store reads or writes, by table: checked at start-up
// so an older database is refused before a tool acts, not at its confirm.
const REQUIRED_COLUMNS: Record<string, string[]> = {
  runs: [
    "run_id",
    "agent",
    "goal",
    "input",
    "output",
    "status",
    "epoch",
    "owner",
    "heartbeat_at",
    "error",
    "created_at",
    "updated_at",
    "stuck_claims",
    "progress_mark",
    "budget",
    "wake_at",
    "parent_run_id",
    "parent_key",
    "root_run_id",
    "model_params",
    "conversation_idle_ms",
    "message_count",
    "idle_since",
    "conversation_ended_at",
    "schedule",
    "scheduled_at",
    "agent_version",
    "may_move",
    "move_to",
    "moved_from",
    "moved_at",
    "moved_epoch",
    "move_refused",
    "signals_sent",
    "signal_waits",
    "signal_waits_epoch",
    "labels",
    "progress_step",
  ],
  journal: [
    "run_id",
    "seq",
    "status",
    "decision",
    "llm_attempts",
    "usage",
    "rejections",
    "epoch",
    "intent_at",
    "confirmed_at",
    "reserved_tokens",
    "spent_tokens",
    "params",
    "failures",
    "failing_since",
    "error",
  ],
  side_effects: [
    "idempotency_key",
    "run_id",
    "seq",
    "tool",
    "args",
    "status",
    "result",
    "remote",
    "error",
    "attempts",
    "epoch",
    "intent_at",
    "confirmed_at",
    "resolved_by",
    "resolved_at",
    "attempts_at_reopen",
    "check_at",
    "wait_deadline_at",
    "polls",
    "failures",
    "failing_since",
    "wait_signal",
    "signals_seen",
  ],
  workers: ["name", "agents", "capacity", "started_at", "heartbeat_at", "take_keys"],
  agent_versions: ["agent", "version", "first_seen_at", "seen_order"],
  limit_keys: ["key", "described", "hold_until", "probing", "probe_id", "holds", "updated_at"],
  limit_reservations: [
    "id",
    "key",
    "run_id",
    "epoch",
    "seq",
    "taken_at",
    "released_at",
    "input_tokens",
    "output_tokens",
    "held_until",
    "held_after",
  ],
  limit_waiters: ["key", "run_id", "grp", "since"],
  limit_groups: ["key", "grp", "served_at"],
  chat_chunks: ["run_id", "turn", "idx", "chunk"],
  messages: ["run_id", "seq", "message_id", "text", "created_at", "answer_seq", "answered_at"],
  memos: ["run_id", "key", "status", "value", "attempts", "epoch", "intent_at", "confirmed_at"],
  schedules: [
    "name",
    "agent",
    "cron",
    "every_ms",
    "zone",
    "overlap",
    "catch_up",
    "catch_up_max",
    "grace_ms",
    "goal",
    "input",
    "budget",
    "model_params",
    "conversation_idle_ms",
    "enabled",
    "next_at",
    "last_at",
    "last_run_id",
    "queued_at",
    "skipped",
    "revision",
    "created_at",
    "updated_at",
  ],
  signals: ["run_id", "seq", "signal_id", "name", "payload", "sent_at", "consumed_by", "consumed_at"],
  approvals: [
    "idempotency_key",
    "run_id",
    "seq",
    "tool",
    "args",
    "args_hash",
    "status",
    "decided_by",
    "epoch",
  ],
};

const SCHEMA_COLUMNS = statement(
  "schema-columns",
  `select table_name::text, column_name::text from information_schema.columns
        where table_schema = $2 and table_name = any ($1::text[])`,
);

/** Every statement of this file, for the catalogue in `statements.ts`. */
export const SCHEMA_CHECK_STATEMENTS = [SCHEMA_COLUMNS] as const;

/**
 * Fails with `SCHEMA_MISSING` when the tables are not there,
 * `SCHEMA_OUTDATED` when they are older than this program (naming the
 * version, or the missing columns), and `SCHEMA_NEWER` when a newer program
 * migrated them: before anything acts on a run.
 */
export async function checkSchema(client: SqlClient): Promise<void> {
  const describe = client.describe;
  const schema = await targetSchema(client);
  const version = await readVersion(client, schema);
  assertNotNewer(version, describe);
  const rows = await queryRows<{ table_name: string; column_name: string }>(client, SCHEMA_COLUMNS, [
    Object.keys(REQUIRED_COLUMNS),
    schema,
  ]);
  if (!rows.some((r) => r.table_name === "runs")) {
    throw new StoreError(
      "SCHEMA_MISSING",
      `The database at ${describe} has no agent-runtime tables in schema ${schema}. ` +
        `Create them with: deno task migrate (every process also does it at start)`,
    );
  }
  const have = new Set(rows.map((r) => `${r.table_name}.${r.column_name}`));
  const missing = Object.entries(REQUIRED_COLUMNS).flatMap(([table, columns]) =>
    columns.map((c) => `${table}.${c}`).filter((c) => !have.has(c))
  );
  if (version < SCHEMA_VERSION) {
    throw new StoreError(
      "SCHEMA_OUTDATED",
      `The agent-runtime tables in schema ${schema} at ${describe} are at version ${version}, older ` +
        `than this program's ${SCHEMA_VERSION}${
          missing.length > 0 ? ` (they lack ${missing.join(", ")})` : ""
        }. Upgrade them in place with: deno task migrate`,
    );
  }
  if (missing.length > 0) {
    // The version is current, yet a column is gone: changed by hand. Refused
    // before anything acts, rather than discovered at a confirm.
    throw new StoreError(
      "SCHEMA_OUTDATED",
      `The agent-runtime tables in schema ${schema} at ${describe} are at version ${version} but lack ` +
        `${missing.join(", ")} (changed by hand?). Restore them, or load a fresh schema`,
    );
  }
}
