/**
 * The row types (`rows.ts`, `conversations.ts`'s two, `schedules.ts`'s) against the tables
 * The row types (`rows.ts`, `conversations.ts`'s two and `signals.ts`'s) against the tables
 * schema.sql makes, on PGlite and PostgreSQL. Each key list below must name
 * every key of its row type and no other, or this file does not compile;
 * the test then compares each list with the columns the real database has,
 * so a column added to schema.sql without its field (or a field with no
 * column) fails here. Every table of the schema is either pinned to a row
 * type or named as having none. (`RUN_ROW_TABLES`, the one value of rows.ts
 * beside the statuses it re-exports, is compared with the foreign keys to
 * `runs` in tests/prune_pg_test.ts; the statuses in statuses_test.ts.)
 */

import assert from "node:assert/strict";
import { bothStoresTest } from "../../tests/_pglite.ts";
import type { MemoRow, MessageRow } from "./conversations.ts";
import type { ApprovalRow, JournalRow, RunRow, SideEffectRow } from "./rows.ts";
import type { ScheduleRow } from "./schedules.ts";
import type { SignalRow } from "./signals.ts";

/** Every key of `T`, each once: a missing or an unknown key does not compile. */
type KeysOf<T> = Record<keyof Required<T>, 1>;

const RUN = {
  run_id: 1,
  agent: 1,
  goal: 1,
  input: 1,
  output: 1,
  status: 1,
  epoch: 1,
  owner: 1,
  heartbeat_at: 1,
  error: 1,
  created_at: 1,
  updated_at: 1,
  stuck_claims: 1,
  progress_mark: 1,
  progress_step: 1,
  budget: 1,
  model_params: 1,
  wake_at: 1,
  parent_run_id: 1,
  parent_key: 1,
  root_run_id: 1,
  conversation_idle_ms: 1,
  message_count: 1,
  idle_since: 1,
  conversation_ended_at: 1,
  schedule: 1,
  scheduled_at: 1,
  agent_version: 1,
  may_move: 1,
  move_to: 1,
  moved_from: 1,
  moved_at: 1,
  moved_epoch: 1,
  move_refused: 1,
  signals_sent: 1,
  signal_waits: 1,
  signal_waits_epoch: 1,
  labels: 1,
  forked_from: 1,
  forked_at_seq: 1,
  dry_run: 1,
  eval_id: 1,
} satisfies KeysOf<RunRow>;

const JOURNAL = {
  run_id: 1,
  seq: 1,
  status: 1,
  decision: 1,
  llm_attempts: 1,
  usage: 1,
  rejections: 1,
  epoch: 1,
  intent_at: 1,
  confirmed_at: 1,
  reserved_tokens: 1,
  spent_tokens: 1,
  params: 1,
  failures: 1,
  failing_since: 1,
  error: 1,
} satisfies KeysOf<JournalRow>;

const SIDE_EFFECT = {
  idempotency_key: 1,
  run_id: 1,
  seq: 1,
  tool: 1,
  args: 1,
  status: 1,
  result: 1,
  remote: 1,
  error: 1,
  attempts: 1,
  epoch: 1,
  intent_at: 1,
  confirmed_at: 1,
  resolved_by: 1,
  resolved_at: 1,
  attempts_at_reopen: 1,
  check_at: 1,
  wait_deadline_at: 1,
  polls: 1,
  failures: 1,
  failing_since: 1,
  wait_signal: 1,
  signals_seen: 1,
} satisfies KeysOf<SideEffectRow>;

const APPROVAL = {
  idempotency_key: 1,
  run_id: 1,
  seq: 1,
  tool: 1,
  args: 1,
  args_hash: 1,
  status: 1,
  reason: 1,
  requested_at: 1,
  decided_by: 1,
  decided_at: 1,
  epoch: 1,
} satisfies KeysOf<ApprovalRow>;

const MESSAGE = {
  run_id: 1,
  seq: 1,
  message_id: 1,
  text: 1,
  created_at: 1,
  answer_seq: 1,
  answered_at: 1,
} satisfies KeysOf<MessageRow>;

const MEMO = {
  run_id: 1,
  key: 1,
  status: 1,
  value: 1,
  attempts: 1,
  epoch: 1,
  intent_at: 1,
  confirmed_at: 1,
} satisfies KeysOf<MemoRow>;

const SCHEDULE = {
  name: 1,
  agent: 1,
  cron: 1,
  every_ms: 1,
  zone: 1,
  overlap: 1,
  catch_up: 1,
  catch_up_max: 1,
  grace_ms: 1,
  goal: 1,
  input: 1,
  budget: 1,
  model_params: 1,
  conversation_idle_ms: 1,
  enabled: 1,
  next_at: 1,
  last_at: 1,
  last_run_id: 1,
  queued_at: 1,
  skipped: 1,
  revision: 1,
  created_at: 1,
  updated_at: 1,
} satisfies KeysOf<ScheduleRow>;
const SIGNAL = {
  run_id: 1,
  seq: 1,
  signal_id: 1,
  name: 1,
  payload: 1,
  sent_at: 1,
  consumed_by: 1,
  consumed_at: 1,
} satisfies KeysOf<SignalRow>;

/** Each table of the schema, with the keys of its row type, or null for one the store reads with no row type. */
const TABLES: Record<string, Record<string, 1> | null> = {
  runs: RUN,
  journal: JOURNAL,
  side_effects: SIDE_EFFECT,
  approvals: APPROVAL,
  messages: MESSAGE,
  memos: MEMO,
  schedules: SCHEDULE,
  signals: SIGNAL,
  workers: null, // read field by field (leases.ts), never as a row
  agent_versions: null, // read field by field (versions.ts), never as a row
  // Limits shared by the fleet: written and read by limit_take and limits.ts's statements, never as rows.
  limit_keys: null,
  limit_reservations: null,
  limit_waiters: null,
  limit_groups: null,
  schema_version: null, // migrate.ts's own
  chat_chunks: null, // the chat chunk log: appended and read as chunks (chat_chunks.ts), never as rows
};

bothStoresTest(
  "every column of every table is a key of its row type, and every key a column",
  async (store) => {
    const rows = await store.client.query<{ table_name: string; column_name: string }>(
      `select table_name::text, column_name::text from information_schema.columns
      where table_schema = current_schema() order by table_name, ordinal_position`,
    );
    const columns = Map.groupBy(rows, (r) => r.table_name);
    assert.deepEqual([...columns.keys()].sort(), Object.keys(TABLES).sort(), "each table is pinned or named");
    for (const [table, keys] of Object.entries(TABLES)) {
      if (keys === null) continue;
      const have = columns.get(table)!.map((r) => r.column_name).sort();
      assert.deepEqual(have, Object.keys(keys).sort(), `the columns of ${table} and its row type's keys`);
    }
  },
);
