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
-- migration 14: limits shared by the fleet
-- Limits on requests per minute, input and output tokens per minute and calls
-- in flight, keyed by a model, a provider, a tool, or a value of a label a run
-- carries (runtime/agent/limits.ts). A request takes a reservation under every
-- key it falls under before it goes out (limit_take, below), all or none, and
-- releases it when it ends, settled to the tokens its answer used.
--
-- A run's labels ({"tenant": "acme"}), given when it is started; null: none.
alter table runs add column if not exists labels jsonb;

-- One row per key a limit was taken under: what the provider said of it.
create table if not exists limit_keys (
  -- 'model:<name>', 'provider:<name>', 'tool:<name>' or 'label:<name>=<value>'.
  key          text primary key,
  -- The limit as the last take described it, for people (`limits`, the page).
  described    text,
  -- A 429 (or 503) with Retry-After stopped the key for the whole fleet until
  -- then; after it, one request (the probe, probe_id) goes alone until it ends
  -- without another, so a hold costs at most one more 429 (probing).
  hold_until   timestamptz,
  probing      boolean not null default false,
  probe_id     bigint,
  -- Holds started (a 429 while the key was held extends that hold, and counts none).
  holds        integer not null default 0,
  updated_at   timestamptz not null
);

-- One row per request taken under a key. It counts in the key's per-minute
-- windows from its take until a window after its release (limit_window: a
-- request that may have reached the provider counts, however it ended); its
-- tokens are the request's estimate until released, then what its answer used.
-- Unreleased, it holds a call in flight while its run is running under the
-- epoch that took it with a live lease: a worker that dies holds nothing past
-- its lease, nor past the supervisor's release of its runs. Rows out of every
-- window and no longer held are deleted by the takes of their key.
create table if not exists limit_reservations (
  id            bigint generated always as identity primary key,
  key           text not null,
  run_id        text not null,
  epoch         integer not null,
  seq           integer not null,
  taken_at      timestamptz not null,
  released_at   timestamptz,
  input_tokens  integer not null default 0,
  output_tokens integer not null default 0,
  -- The hold its release recorded: its answer said when to come back (a 429 or 503 with Retry-After).
  held_until    timestamptz,
  -- The reservation id drawn when that hold was written, under the key's lock: a reservation of the
  -- key with a greater id was taken after the hold was in force (and must not be before its end).
  held_after    bigint
);
create index if not exists limit_reservations_window on limit_reservations (key, taken_at);
create index if not exists limit_reservations_open on limit_reservations (key) where released_at is null;

-- One row per run waiting for a key: the queue a take serves fairly. since is
-- the first refusal (kept across refusals, so a run keeps its place); grp the
-- value of the limit's fairBy label ('' for none): waiters are served
-- round-robin across groups, in order of since within one. A run that closed
-- leaves the queue at the next take of the key.
create table if not exists limit_waiters (
  key          text not null,
  run_id       text not null,
  grp          text not null,
  since        timestamptz not null,
  primary key (key, run_id)
);

-- When each group of a key was last served, for the round-robin.
create table if not exists limit_groups (
  key          text not null,
  grp          text not null,
  served_at    timestamptz not null,
  primary key (key, grp)
);

-- What a key's window holds at p_now: each request taken under it, with when
-- it leaves the window (p_win after its release; one in flight, a window from
-- now at least; one unreleased whose holder is gone, a window after its lease
-- could have ended: p_stale is the oldest live heartbeat), its tokens, and
-- whether it is a call in flight now (unreleased, its run running under the
-- epoch that took it, its lease live). Read through the two indexes below.
create or replace function limit_window(p_key text, p_now timestamptz, p_win interval, p_stale timestamptz)
  returns table (leaves timestamptz, input_tokens bigint, output_tokens bigint, live boolean)
  language sql stable
  set search_path from current
as $window$
  select case when r.released_at is not null then r.released_at
              when l.live then p_now
              else r.taken_at + (p_now - p_stale) end + p_win,
         r.input_tokens::bigint, r.output_tokens::bigint, r.released_at is null and l.live
    from limit_reservations r
    cross join lateral (
      select exists (select 1 from runs u where u.run_id = r.run_id
                        and (u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= p_stale) is true)
             as live) l
   where r.key = p_key
     and (r.released_at > p_now - p_win
          or (r.released_at is null and (l.live or r.taken_at > p_stale - p_win)))
$window$;
create index if not exists limit_reservations_released on limit_reservations (key, released_at);

-- A key's queue in its fair order: each waiter's place in its group (by when
-- it first waited), and when its group was last served; served in order of
-- place, then the group served longest ago, so groups take turns.
create or replace function limit_queue(p_key text)
  returns table (run_id text, grp text, since timestamptz, place bigint, served timestamptz)
  language sql stable
  set search_path from current
as $queue$
  select w.run_id, w.grp, w.since,
         row_number() over (partition by w.grp order by w.since, w.run_id),
         coalesce(gr.served_at, '-infinity'::timestamptz)
    from limit_waiters w left join limit_groups gr on gr.key = w.key and gr.grp = w.grp
   where w.key = p_key
$queue$;

-- Takes one reservation under each key of p_asks (a JSON array, one object a
-- key: key, grp, described, window_ms, requests, input_tokens, output_tokens,
-- in_flight, est_in, est_out; a limit left out is none), all or none, for the
-- request at p_seq of run p_run at epoch p_epoch. It is a function because
-- it must read what other takes committed while it waited for the keys'
-- locks: a statement reads one snapshot, taken before it waits, while each
-- statement of a volatile function takes its own. The keys are locked in
-- order, so takes of the same keys queue instead of deadlocking.
--
-- A request counts in a key's window from its take until a window after its
-- release (while in flight, it counts): the provider saw it somewhere in
-- between, so no window of the provider's, wherever it falls, holds more than
-- the limit, however long the request took to reach it. One unreleased whose
-- holder is gone counts until a window after its holder's lease could have
-- ended (p_stale is the oldest live heartbeat).
--
-- Returns the reservations' ids, or the first key in order that refused, why,
-- and when the run may try again: at the end of a hold, when enough of the
-- window has aged for the waiters ahead and this one, or p_retry_ms on for
-- calls in flight (a release wakes the first waiter sooner). A run is refused
-- while the waiters of the key ahead of it in the fair order would take what
-- is free: what frees is kept for them, each woken at the time its place comes
-- round. A waiter counts while its run is running, pending, or waiting with a
-- wake time after p_stale (one due longer ago than that, which nobody takes,
-- stops holding the others up).
create or replace function limit_take(p_asks jsonb, p_run text, p_epoch integer, p_seq integer,
                                      p_now timestamptz, p_stale timestamptz, p_retry_ms integer)
  returns table (granted boolean, ids text[], key text, wake_at timestamptz, why text)
  language plpgsql volatile
  set search_path from current
as $take$
declare
  a jsonb;
  k text;
  g text;
  win interval;
  held timestamptz;
  is_probing boolean;
  probe bigint;
  used_req integer;
  used_in bigint;
  used_out bigint;
  flying integer;
  ahead integer;
  free integer;
  room integer;
  due timestamptz;
  rid bigint;
  taken text[] := '{}';
begin
  perform 1 from runs where run_id = p_run and (epoch = p_epoch and status = 'running') is true for share;
  if not found then
    return query select false, null::text[], null::text, null::timestamptz, 'fenced'::text;
    return;
  end if;
  for a in select value from jsonb_array_elements(p_asks) order by value->>'key' loop
    insert into limit_keys as lk (key, described, updated_at) values (a->>'key', a->>'described', p_now)
      on conflict on constraint limit_keys_pkey do nothing;
    perform 1 from limit_keys lk where lk.key = a->>'key' for update;
  end loop;
  for a in select value from jsonb_array_elements(p_asks) order by value->>'key' loop
    k := a->>'key';
    g := coalesce(a->>'grp', '');
    win := (a->>'window_ms')::integer * interval '1 millisecond';
    select lk.hold_until, lk.probing, lk.probe_id into held, is_probing, probe from limit_keys lk where lk.key = k;
    delete from limit_waiters w where w.key = k and not exists (
      select 1 from runs r where r.run_id = w.run_id and r.status in ('pending', 'running', 'waiting'));
    due := null;
    if held > p_now then
      due := held; why := 'held';
    elsif is_probing and probe is not null and exists (
        select 1 from limit_reservations r join runs u on u.run_id = r.run_id
         where r.id = probe and r.released_at is null
           and (u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= p_stale) is true) then
      due := p_now + p_retry_ms * interval '1 millisecond'; why := 'probe';
    end if;
    if due is null then
      select count(*), coalesce(sum(w.input_tokens), 0), coalesce(sum(w.output_tokens), 0),
             count(*) filter (where w.live)
        into used_req, used_in, used_out, flying
        from limit_window(k, p_now, win, p_stale) w;
      -- Live waiters ahead in the fair order.
      with q as (select * from limit_queue(k)),
      me as (
        select coalesce((select q.place from q where q.run_id = p_run),
                        (select count(*) + 1 from q where q.grp = g)) as place,
               coalesce((select gr.served_at from limit_groups gr where gr.key = k and gr.grp = g),
                        '-infinity'::timestamptz) as served,
               coalesce((select q.since from q where q.run_id = p_run), p_now) as since)
      select count(*) into ahead from q join runs r on r.run_id = q.run_id cross join me
       where q.run_id <> p_run
         and ((r.status = 'running' and r.heartbeat_at >= p_stale) or r.status = 'pending'
              or (r.status = 'waiting' and r.wake_at > p_stale))
         and (q.place, q.served, q.grp, q.since, q.run_id) < (me.place, me.served, g, me.since, p_run);
      room := least(coalesce((a->>'requests')::integer - used_req, 2147483647),
                    coalesce((a->>'in_flight')::integer - flying, 2147483647));
      free := room - ahead;
      if free < 1 then
        if a->>'in_flight' is not null and (a->>'in_flight')::integer - flying - ahead < 1 then
          due := p_now + p_retry_ms * interval '1 millisecond'; why := 'in_flight';
        else
          -- When enough requests have left the window for those ahead and this one: the k-th to leave
          -- it does, or, deeper in the queue, its like in a later window (the window's pattern taken to
          -- repeat), so waiters wake one after another in their order, not all at once.
          ahead := used_req + ahead - (a->>'requests')::integer;
          if used_req = 0 then
            due := p_now + win * (ahead / (a->>'requests')::integer + 1);
          else
            select w.leaves + win * (ahead / used_req) into due from limit_window(k, p_now, win, p_stale) w
             order by w.leaves offset ahead % used_req limit 1;
          end if;
          why := case when ahead >= used_req or used_req < (a->>'requests')::integer then 'queue' else 'requests' end;
        end if;
        -- What is free now is kept for the waiters ahead: those asleep until later (their wake time was
        -- reckoned from a place further back) are woken now, so it does not stand idle until then.
        -- Rows another statement holds are skipped, not waited for: a hint never deadlocks a take.
        if room > 0 then
          update runs u set wake_at = p_now
           where u.run_id in (
                   select r.run_id from runs r
                    where r.run_id in (
                            select q.run_id from limit_queue(k) q where q.run_id <> p_run
                             order by q.place, q.served, q.grp, q.since, q.run_id limit room)
                      and r.status = 'waiting' and r.wake_at > p_now
                      for update skip locked);
        end if;
      elsif a->>'input_tokens' is not null and used_in > 0
            and used_in + (a->>'est_in')::bigint > (a->>'input_tokens')::bigint then
        select t.leaves into due from (
          select w.leaves, sum(w.input_tokens) over (order by w.leaves rows unbounded preceding) as gone
            from limit_window(k, p_now, win, p_stale) w) t
         where used_in - t.gone + (a->>'est_in')::bigint <= (a->>'input_tokens')::bigint
         order by t.leaves limit 1;
        due := coalesce(due, p_now + win); why := 'input_tokens';
      elsif a->>'output_tokens' is not null and used_out > 0
            and used_out + (a->>'est_out')::bigint > (a->>'output_tokens')::bigint then
        select t.leaves into due from (
          select w.leaves, sum(w.output_tokens) over (order by w.leaves rows unbounded preceding) as gone
            from limit_window(k, p_now, win, p_stale) w) t
         where used_out - t.gone + (a->>'est_out')::bigint <= (a->>'output_tokens')::bigint
         order by t.leaves limit 1;
        due := coalesce(due, p_now + win); why := 'output_tokens';
      end if;
    end if;
    if due is not null then
      insert into limit_waiters as lw (key, run_id, grp, since) values (k, p_run, g, p_now)
        on conflict on constraint limit_waiters_pkey do nothing;
      return query select false, null::text[], k, due, why;
      return;
    end if;
  end loop;
  for a in select value from jsonb_array_elements(p_asks) order by value->>'key' loop
    k := a->>'key';
    g := coalesce(a->>'grp', '');
    win := (a->>'window_ms')::integer * interval '1 millisecond';
    insert into limit_reservations (key, run_id, epoch, seq, taken_at, input_tokens, output_tokens)
      values (k, p_run, p_epoch, p_seq, p_now, coalesce((a->>'est_in')::integer, 0),
              coalesce((a->>'est_out')::integer, 0))
      returning id into rid;
    taken := taken || rid::text;
    delete from limit_waiters w where w.key = k and w.run_id = p_run;
    if a->>'grp' is not null then
      insert into limit_groups as lg (key, grp, served_at) values (k, g, p_now)
        on conflict on constraint limit_groups_pkey do update set served_at = excluded.served_at;
    end if;
    update limit_keys lk set probe_id = rid, updated_at = p_now
     where lk.key = k and lk.probing and (lk.probe_id is null or not exists (
       select 1 from limit_reservations r join runs u on u.run_id = r.run_id
        where r.id = lk.probe_id and r.released_at is null
          and (u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= p_stale) is true));
    -- What no window holds and nobody holds goes.
    delete from limit_reservations r
     where r.key = k and r.taken_at < p_now - greatest(win, interval '1 minute')
       and (r.released_at < p_now - greatest(win, interval '1 minute') or (r.released_at is null and not exists (
         select 1 from runs u where u.run_id = r.run_id
            and (u.epoch = r.epoch and u.status = 'running' and u.heartbeat_at >= p_stale) is true)));
  end loop;
  return query select true, taken, null::text, null::timestamptz, null::text;
end
$take$;

-- migration 15: the epoch of a run's last move
-- moved_epoch is the epoch of the claim that moved the run (moved_from to
-- agent_version): a call at intent written under an earlier epoch was sent by
-- the version it moved from. Every claim of a moved run checks again what it
-- can carry, as the worker that moved it may have died before it checked, and
-- only calls sent before the move are the old version's to settle.
alter table runs add column if not exists moved_epoch integer;
-- migration 16: forks
-- A run may be a fork of another (client.fork, `deno task fork`): a new run
-- whose steps before forked_at_seq are the original's (forked_from), copied
-- under the fork's own keys with their decisions and results, nothing sent
-- again and no model asked; from forked_at_seq on it decides anew. A run
-- that is a dry run (dry_run: a fork that is not live, an evaluation's case)
-- never sends a call of a tool that acts on the world: such a call is
-- answered from the original's recorded result for the same tool and
-- arguments (remote 'original'), else from the tool's stub ('stub'), else
-- flagged for a person. A child run a dry run starts is one too, a fork of
-- the original's child of the same call if there was one. An evaluation's
-- case runs name the evaluation (eval_id).
alter table runs add column if not exists forked_from text;
alter table runs add column if not exists forked_at_seq integer;
alter table runs add column if not exists dry_run boolean not null default false;
alter table runs add column if not exists eval_id text;
create index if not exists runs_forked_from on runs (forked_from) where forked_from is not null;
create index if not exists runs_eval on runs (eval_id) where eval_id is not null;
alter table side_effects drop constraint if exists side_effects_remote_check;
alter table side_effects add constraint side_effects_remote_check
  check (remote in ('created', 'already_done', 'reconciled', 'resolved', 'original', 'stub'));
-- migration 17: chat chunk log
-- The UI message stream chunks a chat turn's response was sent as
-- (runtime/chat/feed.ts), in order: a resume by chunk index in a process that
-- did not stream the turn live is served from here, so it counts exactly the
-- chunks the first process sent. Appended in batches, a batch all or nothing:
-- an index written already refuses the batch (the first writer wins).
create table if not exists chat_chunks (
  run_id text not null references runs (run_id) on delete cascade,
  turn   integer not null check (turn >= 0),
  idx    integer not null check (idx >= 0),
  chunk  jsonb not null,
  primary key (run_id, turn, idx)
);
-- migration 18: group statements planned once
-- A worker host's group statement (runtime/store/group_commit.ts) as one
-- function: the fenced writes of many runs in one statement, so one commit.
-- Its arrays are the inputs of each kind of write, column by column (empty
-- for a kind the batch does not carry), and $34 every run the batch names.
-- The function's settings make its plans lookups by key on any table size:
-- no sequential scan, no hash or merge join (either would read a whole table
-- or index, whose cost grows with the table), so every row is found through
-- its primary key by a nested loop from the batch's own rows. Its plans are
-- generic ones, made once per session and kept (planned for each batch, the
-- statement cost about 1 ms more), and JIT is off (a generic plan's
-- estimates must never pay for a compilation).
create or replace function group_write(
    text[], integer[], integer[], text[], integer[], text[],
    text[], integer[], integer[], text[], text[], text[], integer[], integer[],
    text[], integer[], text[], integer[], text[], text[], text[],
    text[], integer[], text[], text[], text[], text[],
    text[], integer[], text[], text[], text[], text[],
    text[])
  returns table (w_kind text, w_run text, w_k text, w_epoch integer)
  language plpgsql volatile
  set search_path from current
  set enable_seqscan = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  set plan_cache_mode = force_generic_plan
  set jit = off
as $group$
begin
  -- The fence of every row at once: each run row the batch names, locked for
  -- share as the single-row fence locks it (a claim and a write are
  -- serialised), in run id order so two statements never lock in opposite
  -- orders. The writes below read the rows in a snapshot taken after the
  -- locks: a row locked after a wait is read as it is now, and none changes
  -- before this transaction ends.
  perform 1 from runs where runs.run_id = any($34) order by runs.run_id for share;
  return query
  with ji_in as (
         select * from unnest($1, $2, $3, $4, $5, $6) as t(run_id, epoch, seq, at, reserve, params)),
       jc_in as (
         select * from unnest($7, $8, $9, $10, $11, $12, $13, $14)
                    as t(run_id, epoch, seq, decision, usage, at, released, spent)),
       ei_in as (
         select * from unnest($15, $16, $17, $18, $19, $20, $21) as t(run_id, epoch, key, seq, tool, args, at)),
       ec_in as (
         select * from unnest($22, $23, $24, $25, $26, $27) as t(run_id, epoch, key, result, remote, at)),
       rf_in as (
         select * from unnest($28, $29, $30, $31, $32, $33) as t(run_id, epoch, status, error, at, output)),
       ji as (
         insert into journal (run_id, seq, status, llm_attempts, epoch, intent_at, reserved_tokens, params)
         select ji_in.run_id, ji_in.seq, 'intent', 1, ji_in.epoch, ji_in.at::timestamptz, ji_in.reserve,
                ji_in.params::jsonb
           from ji_in join runs on runs.run_id = ji_in.run_id
                              and (runs.epoch = ji_in.epoch and runs.status = 'running') is true
         on conflict do nothing
         returning journal.run_id, journal.seq::text as k, journal.epoch),
       jc as (
         update journal set status = 'confirmed', decision = jc_in.decision::jsonb, usage = jc_in.usage::jsonb,
                confirmed_at = jc_in.at::timestamptz,
                reserved_tokens = greatest(0, journal.reserved_tokens - jc_in.released),
                spent_tokens = least(2147483647, journal.spent_tokens::bigint + jc_in.spent)::int
           from jc_in join runs on runs.run_id = jc_in.run_id
                              and (runs.epoch = jc_in.epoch and runs.status = 'running') is true
          where journal.run_id = jc_in.run_id and journal.seq = jc_in.seq and journal.status = 'intent'
         returning jc_in.run_id, jc_in.seq::text as k, jc_in.epoch),
       ei as (
         insert into side_effects (idempotency_key, run_id, seq, tool, args, status, attempts, epoch, intent_at)
         select ei_in.key, ei_in.run_id, ei_in.seq, ei_in.tool, ei_in.args::jsonb, 'intent', 1, ei_in.epoch,
                ei_in.at::timestamptz
           from ei_in join runs on runs.run_id = ei_in.run_id
                              and (runs.epoch = ei_in.epoch and runs.status = 'running') is true
         on conflict do nothing
         returning side_effects.run_id, side_effects.idempotency_key as k, side_effects.epoch),
       ec as (
         update side_effects set status = 'confirmed', result = ec_in.result::jsonb, remote = ec_in.remote,
                confirmed_at = ec_in.at::timestamptz, error = null
           from ec_in join runs on runs.run_id = ec_in.run_id
                              and (runs.epoch = ec_in.epoch and runs.status = 'running') is true
          where side_effects.idempotency_key = ec_in.key and side_effects.run_id = ec_in.run_id
            and side_effects.status = 'intent'
         returning ec_in.run_id, ec_in.key as k, ec_in.epoch),
       -- A run's close updates the row locked above for share: the lock is
       -- this transaction's, so it is raised, not waited for. Every other
       -- write of the statement was fenced on the row as it was before (one
       -- snapshot): a run closes only once its own writes have returned, so
       -- none of them rides the statement that closes it.
       rf as (
         update runs set status = rf_in.status, error = rf_in.error, updated_at = rf_in.at::timestamptz,
                output = rf_in.output
           from rf_in
          where runs.run_id = rf_in.run_id and (runs.epoch = rf_in.epoch and runs.status = 'running') is true
         returning rf_in.run_id, ''::text as k, rf_in.epoch)
  select 'journal-intent'::text, ji.run_id, ji.k, ji.epoch from ji
  union all select 'journal-confirm'::text, jc.run_id, jc.k, jc.epoch from jc
  union all select 'effect-intent'::text, ei.run_id, ei.k, ei.epoch from ei
  union all select 'effect-confirm'::text, ec.run_id, ec.k, ec.epoch from ec
  union all select 'run-finish'::text, rf.run_id, rf.k, rf.epoch from rf;
end
$group$;
-- migration 19: a claim's progress mark read through keys
-- A claim compares the run's progress with what the claim before found, by
-- two numbers read through the keys of the run's newest rows (claims.ts), so
-- a claim costs the same at any length: progress_mark is one past the seq of
-- the last confirmed decision, progress_step the failures, polls and
-- settlements of the rows that may still change (the decision being asked
-- for, the last decision's calls).
alter table runs add column if not exists progress_step integer not null default 0;
-- migration 20: a run's open waits read through an index
-- A signal's send marks the calls waiting for it, and a worker letting a run
-- wait reads its calls that wait or are due again: both looked at every call
-- of the run (at step 10,000 of a run, 10,000 rows, the send 1.7 ms against
-- 0.1), so the wake of a long run cost more the longer it ran. The index holds
-- only the calls that wait, few at any time.
create index if not exists side_effects_open_waits on side_effects (run_id)
  where status = 'waiting' or (status = 'intent' and check_at is not null);
-- migration 21: the take planned once
-- A worker host's take (claims.ts, TAKE_RUNS_QUERY: the fair share of each
-- agent's runs, picked in the order they waited, locked and claimed) as one
-- function. Sent as a statement, it was planned at every execution (2.5-5 ms
-- of a take of 5-6 on a 2-core VM; its generic plan, made for `limit $5` as
-- a tenth of the table, was never chosen). Here its plan is a generic one,
-- made once per session and kept, under settings that leave it no path whose
-- cost grows with the tables: no sequential or bitmap scan, no sort where an
-- index gives the order, no hash or merge join; so each kind of run is read
-- through its index in the take's order, up to the limit, whatever the
-- statistics say (plans_test.ts, on empty, small and large tables). JIT is
-- off: a generic plan's estimates must never pay for a compilation.
create or replace function take_runs(
    text, text[], timestamptz, timestamptz, integer, integer, text[], text[])
  returns table (taken runs, taken_previous_owner text, taken_previous_heartbeat_at timestamptz,
                 taken_previous_version text)
  language plpgsql volatile
  set search_path from current
  set enable_seqscan = off
  set enable_bitmapscan = off
  set enable_sort = off
  set enable_hashjoin = off
  set enable_mergejoin = off
  set plan_cache_mode = force_generic_plan
  set jit = off
as $take$
begin
  return query
  with peers as materialized (
           select name, capacity, take_keys,
                  (select count(*) from runs
                    where status = 'running' and owner = workers.name and heartbeat_at >= $3::timestamptz)::int as held
             from workers
            where $6::int is not null and name <> $1 and heartbeat_at >= $3::timestamptz
              and take_keys && $2::text[]),
         pools as materialized (
           select grouped.agents, grouped.peer_names,
                  $6::int + (select coalesce(sum(peers.capacity), 0) from peers
                              where peers.name = any(grouped.peer_names))::int as capacity_all,
                  ($6::int - $5::int) + (select coalesce(sum(peers.held), 0) from peers
                                          where peers.name = any(grouped.peer_names))::int as held_all
             from (select array_agg(agent order by agent) as agents, peer_names
                     from (select mine.agent,
                                  array(select name from peers where mine.agent = any(peers.take_keys) order by name)
                                    as peer_names
                             from unnest($2::text[]) as mine(agent)) hosted
                    group by peer_names) grouped),
         shares as materialized (
           select pools.agents,
                  case when cardinality(pools.peer_names) = 0 then $5::int
                       else (select least($5::int, greatest(0,
                                    ceil((pools.held_all + takeable.n)::numeric * $6::int / pools.capacity_all)::int
                                    - ($6::int - $5::int)))
                               from (select count(*)::int as n from (
                                       (select 1 from runs where status in ('pending', 'running') and (runs.agent = any(pools.agents) or (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, '')) = any(pools.agents))
                  and (heartbeat_at is null or heartbeat_at < $3::timestamptz)
                  and (stuck_claims < 2
                   or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')
                                         order by coalesce(heartbeat_at, created_at), run_id
                                         limit greatest(0, pools.capacity_all - pools.held_all))
                                       union all
                                       (select 1 from runs where status = 'waiting' and wake_at <= $4::timestamptz and (runs.agent = any(pools.agents) or (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, '')) = any(pools.agents))
                  and (stuck_claims < 2
                   or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')
                                         order by wake_at, run_id
                                         limit greatest(0, pools.capacity_all - pools.held_all))
                                       limit greatest(0, pools.capacity_all - pools.held_all)) t) takeable)
                  end as n
             from pools),
         picked as materialized (
           select pool_runs.* from shares cross join lateral (
             select * from (select * from (
               select run_id, epoch as picked_epoch, owner as previous_owner,
                      heartbeat_at as previous_heartbeat_at, coalesce(heartbeat_at, created_at) as waited_since,
                      agent as picked_agent, agent_version as previous_version, (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, '')) as take_key
                 from runs
                where status in ('pending', 'running') and (runs.agent = any(shares.agents) or (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, '')) = any(shares.agents))
                  and (heartbeat_at is null or heartbeat_at < $3::timestamptz)
                  and (stuck_claims < 2
                   or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')
                order by coalesce(heartbeat_at, created_at), run_id
                limit $5
                  for update skip locked) open_runs
             union all
             select * from (
               select run_id, epoch, owner, heartbeat_at, wake_at, agent, agent_version, (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, ''))
                 from runs
                where status = 'waiting' and wake_at <= $4::timestamptz and (runs.agent = any(shares.agents) or (runs.agent || '@' || coalesce(
                      case when runs.move_to is not null and (
                             not exists (select 1 from side_effects f
                                          where f.run_id = runs.run_id and f.status in ('intent', 'waiting'))
                             or not exists (select 1 from workers v
                                             where v.heartbeat_at >= $3::timestamptz
                                               and runs.agent || '@' || runs.agent_version = any(v.take_keys)))
                           then runs.move_to end,
                      runs.agent_version, '')) = any(shares.agents))
                  and (stuck_claims < 2
                   or updated_at < $4::timestamptz - least(60000, 500 * 2 ^ (stuck_claims - 2)) * interval '1 ms')
                order by wake_at, run_id
                limit $5
                  for update skip locked) woken_runs) candidates
              order by waited_since, run_id
              limit shares.n) pool_runs
            where shares.n > 0
            order by pool_runs.waited_since, pool_runs.run_id
            limit $5),
         counted as (
           select picked.*, coalesce(p.mark_now, 0) as mark_now, coalesce(p.step_now, 0) as step_now,
                  coalesce(nullif(split_part(picked.take_key, '@', 2), ''),
                    (select split_part(b, '@', 2) from unnest($7::text[]) b
                      where split_part(b, '@', 1) = picked.picked_agent limit 1)) as version_now
             from picked left join lateral (select f.c + 1 as mark_now,
                least(2147483647,
                  (select coalesce(sum(a.failures), 0) from (select j.failures from journal j
                     where j.run_id = picked.run_id and j.seq > f.c order by j.seq limit 2) a)
                + (select coalesce(sum(e.failures + e.polls
                                       + case e.status when 'intent' then 0 when 'waiting' then 1 else 2 end), 0)
                     from (select b.failures, b.polls, b.status from side_effects b
                            where b.run_id = picked.run_id and b.seq >= f.c order by b.seq limit 64) e))::int as step_now
           from (select coalesce((select l.seq from (select j.seq, j.status from journal j where j.run_id = picked.run_id
                                                      order by j.seq desc limit 2) l
                                   where l.status = 'confirmed' order by l.seq desc limit 1), -1) as c
                 offset 0) f
          where picked.picked_epoch <> 0
         offset 0) p on true)
         update runs set epoch = runs.epoch + 1, owner = $1, status = 'running',
                heartbeat_at = $4::timestamptz, updated_at = $4::timestamptz, wake_at = null, idle_since = null,
                stuck_claims = case when (counted.mark_now = runs.progress_mark and counted.step_now = runs.progress_step) then runs.stuck_claims + 1 else 1 end,
         error = case when (counted.mark_now = runs.progress_mark and counted.step_now = runs.progress_step) then runs.error end,
         progress_mark = counted.mark_now, progress_step = counted.step_now,
                agent_version = coalesce(counted.version_now, runs.agent_version),
                may_move = case when runs.agent_version is null and counted.version_now is not null
                                then coalesce((runs.agent || '@' || counted.version_now) = any($8::text[]), false) else runs.may_move end,
                moved_from = case when (runs.agent_version is not null and counted.version_now is not null
                    and counted.version_now is distinct from runs.agent_version) then runs.agent_version else runs.moved_from end,
                moved_at = case when (runs.agent_version is not null and counted.version_now is not null
                    and counted.version_now is distinct from runs.agent_version) then $4::timestamptz else runs.moved_at end,
                moved_epoch = case when (runs.agent_version is not null and counted.version_now is not null
                    and counted.version_now is distinct from runs.agent_version) then runs.epoch + 1 else runs.moved_epoch end,
                move_refused = case when (runs.agent_version is not null and counted.version_now is not null
                    and counted.version_now is distinct from runs.agent_version) then null else runs.move_refused end,
                move_to = case when runs.move_to = counted.version_now then null else runs.move_to end
           from counted
          where runs.run_id = counted.run_id
          returning runs, counted.previous_owner, counted.previous_heartbeat_at, counted.previous_version;
end
$take$;
-- migration 22: a watcher's read planned once
-- A watcher's later reads of a run (reads.ts, HISTORY_FROM_QUERY: the rows of
-- both tables at or after a step) as one function. Sent as a prepared
-- statement, its plan was a generic one while the tables had no statistics
-- and a custom one, made at every read, once they had: a generic plan reckons
-- `seq >= $2` a third of the run's rows, so it looked dearer than planning.
-- On PGlite that step came part way through a long run (its analyses at 1, 2
-- and 4 MiB), and a poll that read 30 rows cost 1.5 times as much at step
-- 10,000 as at step 2,000. Here the plan is a generic one, made once per
-- session, under settings that leave it only the tables' keys: no sequential
-- scan; a scan of either key reads only the rows at or after the step, so a
-- bitmap scan and the sort stay bounded by the rows read (plans_test.ts, on a
-- run of 3,000 steps). JIT is off, as for the take.
create or replace function read_history_from(text, integer)
  returns table (tbl text, run_id text, seq integer, status text, epoch integer, intent_at timestamptz,
                 confirmed_at timestamptz, failures integer, failing_since timestamptz, error text,
                 decision jsonb, llm_attempts integer, usage jsonb, rejections jsonb, reserved_tokens integer,
                 spent_tokens integer, params jsonb, idempotency_key text, tool text, args jsonb, result jsonb,
                 remote text, attempts integer, resolved_by text, resolved_at timestamptz,
                 attempts_at_reopen integer, check_at timestamptz, wait_deadline_at timestamptz, polls integer,
                 wait_signal text, signals_seen integer)
  language plpgsql stable
  set search_path from current
  set enable_seqscan = off
  set plan_cache_mode = force_generic_plan
  set jit = off
as $history$
#variable_conflict use_column
begin
  return query
  select 'j' as tbl, run_id, seq, status, epoch, intent_at, confirmed_at, failures, failing_since, error,
         decision, llm_attempts, usage, rejections, reserved_tokens, spent_tokens, params,
         null::text as idempotency_key, null::text as tool, null::jsonb as args, null::jsonb as result,
         null::text as remote, null::int as attempts,
         null::text as resolved_by, null::timestamptz as resolved_at, null::int as attempts_at_reopen,
         null::timestamptz as check_at, null::timestamptz as wait_deadline_at, null::int as polls,
         null::text as wait_signal, null::int as signals_seen
    from journal where run_id = $1 and seq >= $2
  union all
  select 'e', run_id, seq, status, epoch, intent_at, confirmed_at, failures, failing_since, error,
         null, null, null, null, null, null, null,
         idempotency_key, tool, args, result, remote, attempts, resolved_by, resolved_at,
         attempts_at_reopen, check_at, wait_deadline_at, polls, wait_signal, signals_seen
    from side_effects where run_id = $1 and seq >= $2
  order by tbl desc, seq;
end
$history$;
