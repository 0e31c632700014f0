-- agent-runtime schema. Applied automatically by the embedded (PGlite) default;
-- in production: psql "$DATABASE_URL" -f schema.sql
-- Runs on PostgreSQL 15 and later (and PGlite). Every statement is idempotent.
-- Timestamps are written by the runtime from its Clock, not by now(), so a
-- simulated run with a manual clock is deterministic.

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
