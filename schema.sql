-- agent-runtime schema, as numbered migration steps. The runtime applies the
-- steps a database lacks when it starts (`deno task migrate` does it
-- explicitly), in order, each in one transaction with the others, under
-- pg_advisory_xact_lock so two processes starting at once migrate once, and
-- records each in schema_version. It refuses a database whose version is
-- newer than the program.
--
-- The tables live in their own PostgreSQL schema, agent_runtime, unless the
-- DATABASE_URL names a search_path (the test sandboxes do): the steps use
-- unqualified names and run with the search_path set to that schema.
-- Runs on PostgreSQL 15 and later (and PGlite). Every step is idempotent, so
-- the file also loads as it is into a schema of one's choice (psql -f), and a
-- later start records the version.
-- Timestamps are written by the runtime from its Clock, not by now(), so a
-- simulated run with a manual clock is deterministic.
--
-- A step begins with a line `-- migration <N>: <name>`; never edit a step
-- once released, add the next one.

-- migration 1: baseline
-- The tables as they stood before versions, created or upgraded in place.
-- A database from before versions kept them in public: when this step runs
-- for the default schema agent_runtime and finds all three there (and none in
-- agent_runtime), it moves them over, rows and indexes with them.
do $adopt$
begin
  if current_schema() = 'agent_runtime'
     and to_regclass('agent_runtime.runs') is null
     and to_regclass('public.runs') is not null
     and to_regclass('public.journal') is not null
     and to_regclass('public.side_effects') is not null then
    alter table public.runs set schema agent_runtime;
    alter table public.journal set schema agent_runtime;
    alter table public.side_effects set schema agent_runtime;
    if to_regclass('public.workers') is not null and to_regclass('agent_runtime.workers') is null then
      alter table public.workers set schema agent_runtime;
    end if;
  end if;
end
$adopt$;

create table if not exists runs (
  run_id       text primary key,
  -- The agent (its defineAgent name) whose tools and model drive the run; a
  -- worker takes only runs of agents it hosts.
  agent        text not null,
  -- What the model is told to do: the input text, or the input as JSON text.
  goal         text not null,
  -- The input as given (a string, or JSON an agent validates with its schema).
  input        jsonb,
  -- The model's final answer, once the run is done.
  output       text,
  -- pending: submitted, nobody has claimed it; running: a worker holds it
  -- (or held it and died); blocked: a flagged tool call waits for a human.
  status       text not null default 'pending'
               check (status in ('pending', 'running', 'blocked', 'done', 'failed', 'cancelled')),
  -- The fencing token: bumped by every claim. Every write to run state
  -- checks it inside its own where clause.
  epoch        integer not null default 0,
  owner        text,
  heartbeat_at timestamptz,
  error        text,
  created_at   timestamptz not null,
  updated_at   timestamptz not null
);

-- Upgrades a database created before runs carried their agent (all demo runs then).
alter table runs add column if not exists agent text not null default 'provision';
alter table runs alter column agent drop default;
alter table runs add column if not exists input jsonb;
alter table runs add column if not exists output text;
-- Claims in a row that found no new confirmed row since the claim before:
-- a run whose workers keep dying without progress is stopped at a bound.
alter table runs add column if not exists stuck_claims integer not null default 0;
-- The run's ceilings (tokens, modelCalls, toolCalls, maxOutputTokens); null: none.
alter table runs add column if not exists budget jsonb;
-- Confirmed decisions plus settled tool calls, as counted at the last claim.
alter table runs add column if not exists progress_mark integer not null default 0;

create index if not exists runs_status_heartbeat on runs (status, heartbeat_at);
create index if not exists runs_owner on runs (owner) where status = 'running';

-- One row per live worker process: which agents it hosts and how many runs it
-- may hold. Refreshed with every heartbeat; read by `runs` to say when a
-- pending run's agent is hosted by nobody.
create table if not exists workers (
  name         text primary key,
  agents       text[] not null,
  capacity     integer not null,
  started_at   timestamptz not null,
  heartbeat_at timestamptz not null
);

-- One row per step: the model's decision for that step.
create table if not exists journal (
  run_id       text not null references runs (run_id),
  seq          integer not null check (seq >= 0),
  -- intent: a model request is (or was) in flight; confirmed: decided.
  status       text not null check (status in ('intent', 'confirmed')),
  decision     jsonb,
  -- Model requests paid for this step, counted before each one is sent.
  llm_attempts integer not null default 0,
  usage        jsonb,
  -- Answers rejected for this step (not JSON, unknown tool, bad arguments).
  rejections   jsonb not null default '[]'::jsonb,
  epoch        integer not null,
  intent_at    timestamptz not null,
  confirmed_at timestamptz,
  primary key (run_id, seq)
);

-- Tokens reserved by model requests of this step whose answers are not settled
-- (a lost answer's reservation stays: its cost is unknown, counted at worst).
alter table journal add column if not exists reserved_tokens integer not null default 0;

-- One row per tool call, keyed by its idempotency key '<run_id>:<seq>'.
create table if not exists side_effects (
  idempotency_key text primary key,
  run_id       text not null references runs (run_id),
  seq          integer not null check (seq >= 0),
  tool         text not null,
  args         jsonb not null,
  -- intent: the outcome is unknown; confirmed: the remote answered;
  -- flagged: unknown and not safely knowable (a tool that takes no
  -- idempotency key), a human resolves it; failed: a permanent error.
  status       text not null check (status in ('intent', 'confirmed', 'flagged', 'failed')),
  result       jsonb,
  -- created: the remote did the work for this request; already_done: it
  -- had done it for an earlier request under the same key.
  remote       text check (remote in ('created', 'already_done', 'resolved')),
  error        text,
  -- Requests sent (or about to be sent) under this key, counted before each.
  attempts     integer not null default 0,
  epoch        integer not null,
  intent_at    timestamptz not null,
  confirmed_at timestamptz,
  resolved_by  text,
  resolved_at  timestamptz,
  unique (run_id, seq)
);

-- migration 2: approvals
-- A run can wait for a person to approve a tool call: status 'waiting', and
-- one row per approval request, bound to the call's idempotency key and to a
-- hash of its exact validated arguments (a step decided again with other
-- arguments asks again).
alter table runs drop constraint if exists runs_status_check;
alter table runs add constraint runs_status_check
  check (status in ('pending', 'running', 'waiting', 'blocked', 'done', 'failed', 'cancelled'));

create table if not exists approvals (
  idempotency_key text primary key,
  run_id       text not null references runs (run_id),
  seq          integer not null check (seq >= 0),
  tool         text not null,
  args         jsonb not null,
  -- sha-256 of the canonical JSON of the validated arguments.
  args_hash    text not null,
  -- pending: asked, nobody has answered; approved; denied.
  status       text not null check (status in ('pending', 'approved', 'denied')),
  reason       text,
  requested_at timestamptz not null,
  decided_by   text,
  decided_at   timestamptz,
  epoch        integer not null
);

-- migration 3: runs in take order
-- A worker host takes the runs that waited longest first: pending ones by
-- creation, abandoned ones by their last heartbeat. Without an index in that
-- order every take sorted the whole backlog (measured on PostgreSQL 15: 0.9 ms
-- a take with 1,000 pending runs, 17 ms with 50,000); with it a take reads
-- the runs it takes and the few it skips.
create index if not exists runs_take_order on runs ((coalesce(heartbeat_at, created_at)), run_id)
  where status in ('pending', 'running');

-- migration 4: reconciled calls and reopened calls
-- A tool that can look a call up by its key (its reconcile) confirms a call
-- whose outcome was unknown as 'reconciled'. A reopen records on each call
-- left at intent how many requests it had sent: while attempts still equals
-- it, the call may be sent once more past its tool's maxAttempts (the
-- person's go-ahead is used up by that request's intent).
alter table side_effects drop constraint if exists side_effects_remote_check;
alter table side_effects add constraint side_effects_remote_check
  check (remote in ('created', 'already_done', 'reconciled', 'resolved'));
alter table side_effects add column if not exists attempts_at_reopen integer;

-- migration 5: tokens spent per step
-- What a step's settled answers count against the token budget, by one rule
-- (runtime/agent/budget.ts answerTokens): the usage each answer reported (fields
-- below zero count as zero; the larger of total_tokens and prompt_tokens plus
-- completion_tokens), or, when it reported none, the tokens its request
-- reserved. A step's count is spent_tokens + reserved_tokens. Rows from
-- before this step are counted from the usage they hold, by the same rule.
alter table journal add column if not exists spent_tokens integer not null default 0;
update journal j set spent_tokens = least(2147483647, ceil(greatest(
         case when jsonb_typeof(j.usage->'total_tokens') = 'number'
              then greatest(0, (j.usage->>'total_tokens')::numeric) else 0 end,
         case when jsonb_typeof(j.usage->'prompt_tokens') = 'number'
              then greatest(0, (j.usage->>'prompt_tokens')::numeric) else 0 end
       + case when jsonb_typeof(j.usage->'completion_tokens') = 'number'
              then greatest(0, (j.usage->>'completion_tokens')::numeric) else 0 end)))::int
 where j.usage is not null and jsonb_typeof(j.usage) = 'object' and j.spent_tokens = 0;

-- migration 6: calls that wait on their remote
-- A tool's remote may accept a call and finish the work later (HTTP 202):
-- the call is then 'waiting', the accepted answer (a job id) in result, and
-- is re-sent under its key at check_at to ask how the job stands, until
-- wait_deadline_at (fixed by its first accepted answer); polls counts those
-- re-sends. A run whose calls wait on a timer is 'waiting' with wake_at, when
-- a worker may take it again; a run waiting only for a person has no wake_at.
-- Woken runs are taken in the order they woke, through their own index (the
-- take-order index holds pending and running runs only).
alter table side_effects drop constraint if exists side_effects_status_check;
alter table side_effects add constraint side_effects_status_check
  check (status in ('intent', 'waiting', 'confirmed', 'flagged', 'failed'));
alter table side_effects add column if not exists check_at timestamptz;
alter table side_effects add column if not exists wait_deadline_at timestamptz;
alter table side_effects add column if not exists polls integer not null default 0;
alter table runs add column if not exists wake_at timestamptz;
create index if not exists runs_wake_order on runs (wake_at, run_id) where status = 'waiting';

-- migration 7: runs that call runs
-- An agent may be another agent's tool (agentTool): the call with key
-- '<parent>:<seq>' starts the child run '<parent>.<seq>'. parent_run_id and
-- parent_key name the run and the call the child answers; root_run_id names
-- the family's first run, on every run of a family (a child takes its
-- parent's; a root's own is written when its first child is made), so a
-- family's spend is read through one index. There is no foreign key from a
-- child to its parent: a family is pruned whole, with its root.
alter table runs add column if not exists parent_run_id text;
alter table runs add column if not exists parent_key text;
alter table runs add column if not exists root_run_id text;
create index if not exists runs_parent on runs (parent_run_id) where parent_run_id is not null;
create index if not exists runs_root on runs (root_run_id) where root_run_id is not null;

-- migration 8: model request parameters
-- A run may set its model's request parameters (temperature, a cap on the
-- answer, stop sequences, seed, reasoning effort, anything else passed
-- through), over its agent's: runs.model_params holds the run's own. Each
-- model request of a step records the parameters it was sent with (the
-- agent's and the run's together, and the cap actually sent) in
-- journal.params, so a replayed decision says how it was bought.
alter table runs add column if not exists model_params jsonb;
alter table journal add column if not exists params jsonb;

-- migration 9: conversations
-- A run may be a conversation (defineAgent({ conversation: { idleMs } })):
-- runs.conversation_idle_ms is its idle limit (null: not a conversation).
-- Its goal is message 0; each later message a person sends is a messages row,
-- numbered by runs.message_count (bumped in the same statement that inserts
-- the row, so concurrent sends take the next numbers one after the other,
-- and a worker's write conditioned on the count sees a send that raced it).
-- message_id makes a retried send one message. After each answer the run is
-- 'waiting' for its next message with idle_since set and wake_at at the idle
-- limit; a send clears idle_since and wakes it at once. A conversation closed
-- while it works (conversation_ended_at) ends after its current answer and
-- refuses further messages. answer_seq names the
-- journal step whose final answer answered the message (message 0's row is
-- written with its answer).
alter table runs add column if not exists conversation_idle_ms integer;
alter table runs add column if not exists message_count integer not null default 0;
alter table runs add column if not exists idle_since timestamptz;
alter table runs add column if not exists conversation_ended_at timestamptz;

create table if not exists messages (
  run_id       text not null references runs (run_id),
  seq          integer not null check (seq >= 0),
  -- The sender's id for the message (a retried send with it is one message); null for message 0, the goal.
  message_id   text,
  text         text not null,
  created_at   timestamptz not null,
  answer_seq   integer,
  answered_at  timestamptz,
  primary key (run_id, seq),
  unique (run_id, message_id)
);

-- What a conversation's history hook computed once and must not compute again
-- (a summary bought from a model): one row per run and key, written as a
-- decision is, an intent (counting the attempt) before the work and the value
-- confirmed after, so a restart replays the value instead of buying it again.
create table if not exists memos (
  run_id       text not null references runs (run_id),
  key          text not null,
  status       text not null check (status in ('intent', 'confirmed')),
  value        jsonb,
  attempts     integer not null default 0,
  epoch        integer not null,
  intent_at    timestamptz not null,
  confirmed_at timestamptz,
  primary key (run_id, key)
);

-- migration 10: outages ridden out
-- A request that failed for a reason an outage explains (a refused or reset
-- connection, a timeout, 5xx, 429) is asked again under the same key until
-- the retry horizon has passed since the first such failure. failures counts
-- them on the step's row (model requests) or the call's (tool requests),
-- failing_since is the first one's time, error the last one's message; a
-- call's check_at is when it may be sent again. Counts stay with the row, so
-- the horizon and the other limits hold across restarts; the run sleeps in
-- between ('waiting' with wake_at), holding no worker.
alter table journal add column if not exists failures integer not null default 0;
alter table journal add column if not exists failing_since timestamptz;
alter table journal add column if not exists error text;
alter table side_effects add column if not exists failures integer not null default 0;
alter table side_effects add column if not exists failing_since timestamptz;

-- migration 11: schedules
-- A schedule starts runs of an agent at the occurrences of a cron expression
-- (five fields, read in zone's wall clock) or of an interval (every_ms: the
-- multiples of it since the epoch), exactly one of the two. Each occurrence
-- is at most one run, whose id is '<name>@<occurrence in UTC, to the
-- second>' (nightly@20261206T090000Z): the run's primary key is what makes
-- two tickers, a restart or a failover start it once. A tick reads the due
-- schedules and writes each with one statement that moves next_at on only
-- if revision is still the one it read (a compare-and-swap, as a claim's on
-- the epoch) and inserts the occurrences' runs in the same statement.
create table if not exists schedules (
  -- 1-47 letters, digits, '.', '_' or '-' (schedules/spec.ts), so '<name>@<time>' is a run id.
  name          text primary key,
  -- The agent whose runs it starts; only processes hosting the agent tick it.
  agent         text not null,
  cron          text,
  every_ms      bigint,
  -- The IANA time zone the cron expression is read in ('UTC' for an interval).
  zone          text not null,
  -- An occurrence while the last run is open: skipped, queued (one waits), or started.
  overlap       text not null check (overlap in ('skip', 'queue', 'allow')),
  -- Occurrences more than grace_ms late (an outage): none started, the last, or all (the latest catch_up_max).
  catch_up      text not null check (catch_up in ('none', 'last', 'all')),
  catch_up_max  integer not null check (catch_up_max between 1 and 100),
  grace_ms      integer not null check (grace_ms >= 0),
  -- What each run is started with, as client.start would store it: the goal, the input as given, the
  -- run's ceilings (the agent's merged in), model request parameters, a conversation's idle limit.
  goal          text not null,
  input         jsonb,
  budget        jsonb,
  model_params  jsonb,
  conversation_idle_ms integer,
  -- False while paused: not ticked; resuming starts again from the next occurrence after it.
  enabled       boolean not null default true,
  -- The next occurrence not yet handled (started, queued or skipped).
  next_at       timestamptz not null,
  -- The latest occurrence handled, the run started last, and an occurrence queued behind that run.
  last_at       timestamptz,
  last_run_id   text,
  queued_at     timestamptz,
  -- Occurrences not started: missed and not caught up, or skipped by the overlap rule.
  skipped       integer not null default 0,
  -- Bumped by every write: a tick writes only if it is still the one it read.
  revision      integer not null default 0,
  created_at    timestamptz not null,
  updated_at    timestamptz not null,
  check ((cron is null) <> (every_ms is null))
);
-- A due read goes by next_at among the enabled schedules.
create index if not exists schedules_due on schedules (next_at) where enabled;

-- A run a schedule started names the schedule and its occurrence; its last runs are read by them.
alter table runs add column if not exists schedule text;
alter table runs add column if not exists scheduled_at timestamptz;
create index if not exists runs_schedule on runs (schedule, scheduled_at) where schedule is not null;
-- migration 12: agent versions
-- An agent has a version: the one its module gives (defineAgent's version),
-- or a digest of what the model is shown and of its tools' contracts
-- (runtime/agent/version.ts). agent_versions lists every version a worker
-- has hosted, in the order each was first seen (seen_order): a run moves
-- only to a version seen after its own.
create table if not exists agent_versions (
  agent         text not null,
  version       text not null,
  first_seen_at timestamptz not null,
  seen_order    bigint generated by default as identity,
  primary key (agent, version)
);

-- A run records the version of the worker that first took it (agent_version;
-- null until a worker has), and whether that version let it move to a newer
-- one of its agent at its next decision (may_move: the agent's onNewVersion).
-- move_to is a version the run is to move to at its next decision: asked by
-- an operator (`move`) or, for a run that may move, by a worker of a newer
-- version. A take hands such a run to a worker of move_to once none of its
-- calls is in flight (a call sent and not settled is settled by the version
-- that sent it), and records the move: agent_version, moved_from, moved_at.
-- move_refused names the version that could not carry the run's decided step
-- (an unknown tool, arguments its schema refuses): the run went back to its
-- version, and is not moved there again unless an operator asks.
alter table runs add column if not exists agent_version text;
alter table runs add column if not exists may_move boolean not null default false;
alter table runs add column if not exists move_to text;
alter table runs add column if not exists moved_from text;
alter table runs add column if not exists moved_at timestamptz;
alter table runs add column if not exists move_refused text;
-- The open runs a worker of a newer version may mark to move, found by agent
-- and version without reading the runs that may not.
create index if not exists runs_movable on runs (agent, agent_version)
  where may_move and status in ('pending', 'running', 'waiting', 'blocked');

-- What runs a worker takes: `agent@version` for the runs of each version it
-- hosts (`agent@` for a run no worker has taken yet). The fair share groups
-- workers by these, so a worker of another version counts for no part of the
-- runs it cannot take; `runs` and the page read them to say which version of
-- a pending run no live worker hosts.
alter table workers add column if not exists take_keys text[] not null default '{}';
-- migration 13: signals
-- A named event sent to a run from outside (client.signal, `deno task
-- signal`) is a signals row, kept until one of the run's tool calls takes
-- it: a call that waits for a signal (ctx.waitForSignal, the waitForSignal
-- tool) takes the oldest of its name no call has taken, recording its own key
-- in consumed_by, so a re-send under that key gets the same signal and no
-- signal is taken twice. signal_id is the sender's (a retried send with it is
-- one signal); seq numbers a run's signals in the order they came, from
-- runs.signals_sent, which each send bumps in the statement that inserts the
-- row. A call that found none waits ('waiting', holding no worker): its row
-- records the name it waits for (wait_signal) and the run's signals_sent it
-- had seen (signals_seen). The run that sleeps on such calls records their
-- names (signal_waits) and the epoch it slept at (signal_waits_epoch): a send
-- of one of those names to the run asleep at that epoch wakes it and marks the
-- waiting calls due. A send that comes while the call looks is caught by the
-- count: the statement that lets the run sleep finds signals_sent past what a
-- waiting call had seen, and wakes it at once.
alter table runs add column if not exists signals_sent integer not null default 0;
alter table runs add column if not exists signal_waits text[];
alter table runs add column if not exists signal_waits_epoch integer;
alter table side_effects add column if not exists wait_signal text;
alter table side_effects add column if not exists signals_seen integer;

create table if not exists signals (
  run_id       text not null references runs (run_id),
  -- The signal's place among the run's: 1, 2, ... in the order they came.
  seq          integer not null check (seq >= 1),
  -- The sender's id for it: a retried send with it is one signal.
  signal_id    text not null,
  -- What happened ("payment-received"): a call waits for signals by name.
  name         text not null,
  -- What the sender said with it, as JSON; null when it said nothing.
  payload      jsonb,
  sent_at      timestamptz not null,
  -- The key of the tool call that took it, '<run_id>:<seq>'; null while none has.
  consumed_by  text,
  consumed_at  timestamptz,
  primary key (run_id, seq),
  unique (run_id, signal_id)
);
-- A waiting call looks for the oldest signal of its name not yet taken, and a
-- re-sent call for the one it took.
create index if not exists signals_unconsumed on signals (run_id, name, seq) where consumed_by is null;
create index if not exists signals_consumed_by on signals (consumed_by) where consumed_by is not null;
